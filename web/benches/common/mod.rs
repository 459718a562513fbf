//! What the dashboard's benches share: a percentile of timings, a timed
//! GET through the dashboard's router, and a process's or thread's CPU.
#![allow(dead_code)]

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

/// `/proc/{what}/stat`'s fields after the command, as numbers.
fn stat(what: &str) -> Vec<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{what}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect()
}

/// CPU seconds (user + system) of `what`; with `children`, of its waited
/// children instead (cutime + cstime).
pub fn cpu_secs(what: &str, children: bool) -> f64 {
    let f = stat(what);
    let (u, s) = if children { (13, 14) } else { (11, 12) };
    (f.get(u).copied().unwrap_or(0.0) + f.get(s).copied().unwrap_or(0.0)) / 100.0
}
