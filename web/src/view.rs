//! The page shell, the assets compiled in, and small renderings shared by
//! the pages (times, durations, JSON, payload bytes).

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::App;

/// The dashboard's script: live refresh of `#live` while the tab is
/// visible, and "select all" on the failed jobs.
const SCRIPT: &str = include_str!("../assets/app.js");
/// The dashboard's style sheet.
const STYLE: &str = include_str!("../assets/app.css");

/// `GET /assets/app.js`.
pub async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

/// `GET /assets/app.css`.
pub async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response()
}

/// The dashboard's icon.
const ICON: &str = include_str!("../assets/icon.svg");

/// `GET /assets/icon.svg` (and `/favicon.ico`, where browsers look
/// without a link).
pub async fn icon() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        ICON,
    )
        .into_response()
}

/// The tabs of the navigation: (path, title).
const NAV: [(&str, &str); 8] = [
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/failed", "Failed & dead"),
    ("/batches", "Batches"),
    ("/workflows", "Workflows"),
    ("/periodic", "Periodic"),
    ("/queues", "Queues"),
    ("/submit", "Submit"),
];

/// A whole page: `title`, the tab `active`, and its `body`.
pub fn page(app: &App, title: &str, active: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · gaffer" }
                link rel="stylesheet" href=(app.href("/assets/app.css"));
                link rel="icon" type="image/svg+xml" href=(app.href("/assets/icon.svg"));
            }
            body {
                header {
                    a.brand href=(app.href("/")) { "gaffer" }
                    nav {
                        @for (path, name) in NAV {
                            @if !(app.read_only && path == "/submit") {
                                a class=[(path == active).then_some("active")] href=(app.href(path)) { (name) }
                            }
                        }
                    }
                    @if app.read_only { span.badge { "read-only" } }
                    @if app.shards.len() > 1 { span.badge { (app.shards.len()) " shards" } }
                }
                main { h1 { (title) } (body) }
                script src=(app.href("/assets/app.js")) {}
            }
        }
    }
}

/// The part of a page that refreshes live (`#live`), every `every_ms`.
pub fn live(every_ms: u32, inner: Markup) -> Markup {
    html! { div #live data-every=(every_ms) { (inner) } }
}

/// An error page with `status`.
pub fn error_page(app: &App, status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    let body =
        html! { p.error { (message) } p { a href=(app.href("/")) { "Back to the overview" } } };
    (status, Html(page(app, title, "", body).into_string())).into_response()
}

pub use gaffer_ops::format::{age, now_ms, parse_time, time};

/// Bytes as pretty JSON when they are MessagePack, `encrypted (key ID)`
/// when they are sealed (the page's store could not open them), else a hex
/// dump of the first 512 and their length.
pub fn payload(bytes: &[u8]) -> String {
    if let Some(key_id) = gaffer_layout::sealed::sealed_under(bytes) {
        return format!("encrypted (key {key_id})");
    }
    match gaffer_ops::queries::json_of(bytes) {
        Some(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        None => {
            let shown: String = bytes
                .iter()
                .take(512)
                .map(|b| format!("{b:02x} "))
                .collect();
            format!(
                "{} bytes, not MessagePack:\n{}{}",
                bytes.len(),
                shown.trim_end(),
                if bytes.len() > 512 { " …" } else { "" }
            )
        }
    }
}

/// A state as a coloured label.
pub fn state(s: &str) -> Markup {
    html! { span class={ "state " (s) } { (s) } }
}

/// A progress bar: succeeded, failed (and cancelled), outstanding. SVG
/// whose widths are attributes: the policy allows no inline style.
pub fn progress(total: u64, succeeded: u64, failed: u64) -> Markup {
    let pct = |n: u64| {
        if total == 0 {
            0.0
        } else {
            (n as f64 * 100.0 / total as f64).clamp(0.0, 100.0)
        }
    };
    let (ok, bad) = (pct(succeeded), pct(failed));
    html! {
        svg.bar role="progressbar" aria-valuemin="0" aria-valuemax=(total) aria-valuenow=(succeeded + failed)
            viewBox="0 0 100 1" preserveAspectRatio="none" {
            rect.ok x="0" y="0" height="1" width=(format!("{ok:.2}")) {}
            rect.bad x=(format!("{ok:.2}")) y="0" height="1" width=(format!("{:.2}", bad.min(100.0 - ok))) {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_decode_or_show_bytes() {
        let v = serde_json::json!({"a": 1});
        let bytes = rmp_serde::to_vec_named(&v).unwrap();
        assert!(payload(&bytes).contains("\"a\": 1"));
        assert!(payload(&[0xc1]).starts_with("1 bytes, not MessagePack"));
        let ring = gaffer_layout::sealed::Keyring::new()
            .with_key("k1", [1; 32])
            .unwrap();
        assert_eq!(payload(&ring.seal(&bytes).unwrap()), "encrypted (key k1)");
    }
}
