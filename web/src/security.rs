//! What every request passes first: the credentials (when the dashboard
//! asks for them), read-only (every POST 403), and the cross-site check of
//! POSTs.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use crate::App;
use crate::view::error_page;

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

/// Whether a POST comes from a page of this site: the browser's
/// `Sec-Fetch-Site` says `same-origin` (or `none`: typed by the user), or,
/// without it, the `Origin` names the `Host` the request was sent to. A
/// request with neither header is not a browser's cross-site request (a
/// browser sends `Origin` with every POST) and passes.
pub fn same_site(headers: &HeaderMap) -> bool {
    let get = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site") {
        return matches!(site, "same-origin" | "none");
    }
    match (get("origin"), get("host")) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin
            .split_once("://")
            .is_some_and(|(_, rest)| rest.trim_end_matches('/') == host),
        (Some(_), None) => false,
    }
}

/// The guard in front of every route.
pub async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
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
        if !same_site(req.headers()) {
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
        assert!(same_site(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_site(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!same_site(&headers(&[("sec-fetch-site", "same-site")])));
        assert!(same_site(&headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!same_site(&headers(&[
            ("origin", "http://evil.example"),
            ("host", "127.0.0.1:8080")
        ])));
        assert!(!same_site(&headers(&[("origin", "null"), ("host", "a")])));
        assert!(same_site(&headers(&[])));
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
