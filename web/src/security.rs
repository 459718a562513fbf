//! What every request passes first: the `Host` check (DNS rebinding), the
//! credentials (when the dashboard asks for them), read-only (every POST
//! 403), and the cross-site check of POSTs; and what every response says
//! to the browser: no framing, no sniffing, no referrer to other sites,
//! only the dashboard's own script and style.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use crate::view::error_page;
use crate::{App, Hosts};

/// Credentials every request must carry.
#[derive(Clone)]
pub enum Auth {
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// `Authorization: Basic base64(USER:PASSWORD)` (browsers ask for it).
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        match self {
            Auth::Bearer(_) => f.write_str("Auth::Bearer(..)"),
            Auth::Basic { user, .. } => write!(f, "Auth::Basic {{ user: {user:?}, .. }}"),
        }
    }
}

impl Auth {
    /// From the environment: `GAFFER_WEB_TOKEN` (a bearer token), else
    /// `GAFFER_WEB_USER` and `GAFFER_WEB_PASSWORD` (basic auth); `None`
    /// when neither is set.
    pub fn from_env() -> Option<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let Some(token) = var("GAFFER_WEB_TOKEN") {
            return Some(Auth::Bearer(token));
        }
        Some(Auth::Basic {
            user: var("GAFFER_WEB_USER")?,
            password: var("GAFFER_WEB_PASSWORD")?,
        })
    }

    /// Whether the request's `Authorization` header carries these.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(given) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        match self {
            Auth::Bearer(token) => given
                .strip_prefix("Bearer ")
                .is_some_and(|t| same(t.trim().as_bytes(), token.as_bytes())),
            Auth::Basic { user, password } => given
                .strip_prefix("Basic ")
                .and_then(|b| {
                    base64::engine::general_purpose::STANDARD
                        .decode(b.trim())
                        .ok()
                })
                .is_some_and(|d| same(&d, format!("{user}:{password}").as_bytes())),
        }
    }
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a POST comes from a page of this site. The browser's
/// `Sec-Fetch-Site`, when sent, says `same-origin` (or `none`: typed by
/// the user); the `Origin`, when sent, names a host the dashboard answers
/// to (`hosts`: a page whose name was rebound to this address is
/// same-origin to the browser, and its `Origin` is that name) and, from a
/// browser that sends no `Sec-Fetch-Site`, the `Host` the request was sent
/// to. A request with neither header is not a browser's cross-site
/// request (a browser sends `Origin` with every POST) and passes.
pub(crate) fn same_site(headers: &HeaderMap, hosts: &Hosts) -> bool {
    let get = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    let site = get("sec-fetch-site");
    if site.is_some_and(|s| !matches!(s, "same-origin" | "none")) {
        return false;
    }
    let Some(origin) = get("origin") else {
        return true;
    };
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    let named = rest.trim_end_matches('/');
    if !hosts.admits(named) {
        return false;
    }
    // With `Sec-Fetch-Site` the browser vouches that the page and the
    // request share an origin (a proxy in front may have rewritten
    // `Host`); without it, the `Host` must be the `Origin`'s.
    site.is_some() || get("host").is_some_and(|h| h.eq_ignore_ascii_case(named))
}

/// The host a request names: its URI's authority (HTTP/2, absolute
/// URIs), else its `Host` header; `None` when it names none (no browser
/// sends such a request).
fn named_host(req: &Request) -> Option<String> {
    if let Some(a) = req.uri().authority() {
        return Some(a.as_str().to_string());
    }
    req.headers()
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// The policy every response carries: nothing but the dashboard's own
/// script, style sheet and icon; fetches (the live refresh) and forms to
/// itself only; never in a frame.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Every response's security headers: not in a frame of any page
/// (clickjacking), its content type taken as sent, no referrer to other
/// sites, and the [`CSP`].
pub async fn headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        h.insert(name, header::HeaderValue::from_static(value));
    }
    res
}

/// The guard in front of every route.
pub async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    if let Some(host) = named_host(&req)
        && !app.hosts.admits(&host)
    {
        let shown: String = host.chars().take(100).collect();
        return error_page(
            &app,
            StatusCode::MISDIRECTED_REQUEST,
            &format!(
                "This dashboard does not answer to the host `{shown}`. If you reach it by this \
                 name, allow it: `gaffer web --allowed-host {shown}`, or \
                 `WebConfig::allowed_host` where a service serves it."
            ),
        );
    }
    if app.shards.is_empty() {
        return error_page(
            &app,
            StatusCode::SERVICE_UNAVAILABLE,
            "This dashboard was given no store.",
        );
    }
    if let Some(auth) = &app.auth
        && !auth.admits(req.headers())
    {
        let mut r = error_page(
            &app,
            StatusCode::UNAUTHORIZED,
            "This dashboard asks for credentials.",
        );
        if matches!(auth, Auth::Basic { .. }) {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"gaffer\""),
            );
        }
        return r;
    }
    if req.method() == Method::POST {
        if app.read_only {
            return error_page(
                &app,
                StatusCode::FORBIDDEN,
                "This dashboard is read-only: it takes no action.",
            );
        }
        if !same_site(req.headers(), &app.hosts) {
            return error_page(
                &app,
                StatusCode::FORBIDDEN,
                "Refused: this request came from another site.",
            );
        }
    } else if req.method() != Method::GET && req.method() != Method::HEAD {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_post_from_another_site_is_told_apart() {
        let hosts = Hosts::default();
        let same = |pairs: &[(&'static str, &str)]| same_site(&headers(pairs), &hosts);
        assert!(same(&[("sec-fetch-site", "same-origin")]));
        assert!(!same(&[("sec-fetch-site", "cross-site")]));
        assert!(!same(&[("sec-fetch-site", "same-site")]));
        assert!(same(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ]));
        assert!(!same(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080")
        ]));
        assert!(!same(&[("origin", "null"), ("host", "a")]));
        assert!(same(&[]));
        // A rebound name: same-origin to the browser, and `Origin` names
        // the forged `Host`; not a host the dashboard answers to.
        assert!(!same(&[
            ("sec-fetch-site", "same-origin"),
            ("origin", "http://evil.example:8080"),
            ("host", "evil.example:8080")
        ]));
        // Through a proxy that rewrote `Host`, from a name it was given.
        let proxied = Hosts {
            allowed: vec!["jobs.example.com".into()],
            ..Hosts::default()
        };
        let via_proxy = headers(&[
            ("sec-fetch-site", "same-origin"),
            ("origin", "https://jobs.example.com"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(same_site(&via_proxy, &proxied));
        assert!(!same_site(&via_proxy, &hosts), "not a name it was given");
    }

    #[test]
    fn hosts_are_the_listening_address_localhost_and_the_allowed_names() {
        let nested = Hosts::default();
        for ok in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST",
            "app.localhost",
            "[::1]:80",
            "10.1.2.3",
            "::1",
        ] {
            assert!(nested.admits(ok), "{ok}");
        }
        for no in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "",
            ":80",
            "127.0.0.1.nip.io",
        ] {
            assert!(!nested.admits(no), "{no}");
        }
        let loopback = Hosts {
            listen: Some("127.0.0.1:8080".parse().unwrap()),
            allowed: vec!["jobs.example.com".into(), "proxy.example:8443".into()],
            any: false,
        };
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "localhost:8080",
            "jobs.example.com",
            "jobs.example.com:1",
            "proxy.example:8443",
        ] {
            assert!(loopback.admits(ok), "{ok}");
        }
        for no in [
            "10.0.0.1:8080",
            "proxy.example",
            "proxy.example:80",
            "evil.example",
            "[::1]:8080",
        ] {
            assert!(!loopback.admits(no), "{no}");
        }
        let public = Hosts {
            listen: Some("192.0.2.7:80".parse().unwrap()),
            ..Hosts::default()
        };
        assert!(public.admits("192.0.2.7"));
        assert!(!public.admits("localhost"), "not on a loopback");
        assert!(!public.admits("198.51.100.1"));
        let every = Hosts {
            listen: Some("0.0.0.0:8080".parse().unwrap()),
            ..Hosts::default()
        };
        assert!(every.admits("198.51.100.1:8080") && every.admits("localhost"));
        assert!(!every.admits("evil.example"));
        let any = Hosts {
            any: true,
            ..Hosts::default()
        };
        assert!(any.admits("evil.example"));
    }

    #[test]
    fn credentials_are_checked() {
        let bearer = Auth::Bearer("s3cret".into());
        assert!(bearer.admits(&headers(&[("authorization", "Bearer s3cret")])));
        assert!(!bearer.admits(&headers(&[("authorization", "Bearer s3cre")])));
        assert!(!bearer.admits(&headers(&[])));
        let basic = Auth::Basic {
            user: "ops".into(),
            password: "pw".into(),
        };
        // base64("ops:pw")
        assert!(basic.admits(&headers(&[("authorization", "Basic b3BzOnB3")])));
        assert!(!basic.admits(&headers(&[("authorization", "Basic b3BzOnB4")])));
        assert!(!format!("{bearer:?}{basic:?}").contains("s3cret"));
    }
}
