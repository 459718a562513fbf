//! What the page-time benches (`age.rs`, `wal.rs`) share: a percentile of
//! timings and a timed GET through the dashboard's router.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

/// The `p` quantile (0 to 1) of `sorted`, in ms (NaN when empty).
pub fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// How long `app` took to answer a GET of `path` with its whole body (a
/// success, else the bench stops).
pub async fn get(app: &axum::Router, path: &str) -> Duration {
    let t = Instant::now();
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert!(res.status().is_success(), "{path}: {}", res.status());
    let _ = axum::body::to_bytes(res.into_body(), 64 << 20).await;
    t.elapsed()
}
