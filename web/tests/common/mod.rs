//! A live engine on a local-disk store, with the dashboard's test jobs, for
//! the dashboard's router to read. The limits and waits, and the jobs the
//! command's tests share, are the test kit's (`gaffer-testkit`),
//! re-exported here.
#![allow(dead_code, unused_imports)]

pub use gaffer_testkit::jobs::{Approval, Approve};
pub use gaffer_testkit::{LIMIT, POLL, eventually, eventually_ok, within};

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gaffer::{BulkCtx, Engine, Job, JobContext, Pipeline, bulk::ItemError, job::FailureKind};
use serde::{Deserialize, Serialize};

/// A string no page may show unescaped.
pub const EVIL: &str = "<script>alert(1)</script>\"><img src=x onerror=alert(2)>";

/// Whether `Flaky` is fixed yet.
#[derive(Default)]
pub struct Fix(pub AtomicBool);

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Bug(pub String);

/// Fails permanently (with its text in the error) until fixed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Flaky {
    pub text: String,
}

impl Job for Flaky {
    const NAME: &'static str = "flaky";
    type Output = usize;
    type Error = Bug;

    async fn run(&self, ctx: JobContext) -> Result<usize, Bug> {
        if ctx.state::<Arc<Fix>>().0.load(Ordering::SeqCst) {
            Ok(self.text.len())
        } else {
            Err(Bug(format!("broke on {}", self.text)))
        }
    }

    fn classify(&self, _: &Bug) -> FailureKind {
        FailureKind::Permanent
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Ping {
    pub n: u32,
}

impl Job for Ping {
    const NAME: &'static str = "ping";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, _: JobContext) -> Result<u32, gaffer::Error> {
        Ok(self.n)
    }
}

/// Keyed by its name (its id is 64 hex digits), fails for good with a
/// long error.
#[derive(Debug, Serialize, Deserialize)]
pub struct Keyed {
    pub name: String,
}

impl Job for Keyed {
    const NAME: &'static str = "keyed-job-with-a-rather-long-type-name";
    type Output = ();
    type Error = Bug;

    async fn run(&self, _ctx: JobContext) -> Result<(), Bug> {
        Err(Bug(format!(
            "{} failed: {}",
            self.name,
            "a long explanation of what went wrong, ".repeat(8)
        )))
    }

    fn classify(&self, _: &Bug) -> FailureKind {
        FailureKind::Permanent
    }

    fn idempotency_key(&self) -> Option<String> {
        Some(self.name.clone())
    }
}

/// Fails its first attempt (transiently), succeeds on the next.
#[derive(Debug, Serialize, Deserialize)]
pub struct Twice;

impl Job for Twice {
    const NAME: &'static str = "twice";
    type Output = u32;
    type Error = Bug;

    async fn run(&self, ctx: JobContext) -> Result<u32, Bug> {
        if ctx.attempt() == 1 {
            return Err(Bug("not yet".into()));
        }
        Ok(ctx.attempt())
    }
}

/// Doubles its input; 13 fails; each item takes `pace`.
pub struct Double {
    pub pace: Duration,
}

impl Pipeline for Double {
    const NAME: &'static str = "double";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        tokio::time::sleep(self.pace).await;
        ctx.record_cost("calls", 1.0);
        // A sum of tenths is not a tenth times n in floating point.
        ctx.record_cost("usd", 0.1);
        if ctx.input == 13 {
            return Err(ItemError::permanent("unlucky <b>13</b>"));
        }
        Ok(ctx.input * 2)
    }
}

/// The interval of the engine's periodic job: 365 000 days.
pub const RARE: Duration = Duration::from_secs(365_000 * 86_400);

/// An engine on `dir` with Flaky, Ping and Double (items of `pace`, at
/// most `workers` at once).
pub async fn engine(dir: &Path, fix: &Arc<Fix>, pace: Duration) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .intake_poll(Duration::from_millis(20))
        .register::<Flaky>()
        .register::<Ping>()
        .register::<Approve>()
        .register::<gaffer_testkit::jobs::Nap>()
        .register::<gaffer_testkit::jobs::Snoozy>()
        .register::<Twice>()
        .register::<Keyed>()
        .pipeline_with(
            Double { pace },
            gaffer::JobOptions {
                concurrency: Some(2),
                rate: None,
                ..Default::default()
            },
        )
        // Listed on the periodic page, and never due while a test runs: the
        // engine runs on the wall clock, and a tick in the middle of a test
        // adds a ping job to the lists and counts it checks (an hourly one
        // did, for a test that spanned the hour). Its ticks are the whole
        // multiples of 365 000 days since the epoch: the first is in 2969.
        .periodic("rare-ping", gaffer::periodic::Schedule::every(RARE), |_| {
            Ping { n: 0 }
        })
        .state(fix.clone())
        .start()
        .await
        .expect("the engine starts")
}

/// Ask `app` for `path` with a GET: the status and the body.
pub async fn page(app: &axum::Router, path: &str) -> (axum::http::StatusCode, String) {
    send(app, axum::http::Request::get(path)).await
}

/// POST `form` to `path` as the dashboard's own page does: the status and
/// the `Location` it answers with.
pub async fn post(app: &axum::Router, path: &str, form: &str) -> (axum::http::StatusCode, String) {
    let req = axum::http::Request::post(path)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin");
    let (status, location, _) = send_body(app, req, form.to_string()).await;
    (status, location)
}

async fn send(
    app: &axum::Router,
    req: axum::http::request::Builder,
) -> (axum::http::StatusCode, String) {
    let (status, _, body) = send_body(app, req, String::new()).await;
    (status, body)
}

async fn send_body(
    app: &axum::Router,
    req: axum::http::request::Builder,
    body: String,
) -> (axum::http::StatusCode, String, String) {
    use tower::ServiceExt;
    let res = app
        .clone()
        .oneshot(req.body(axum::body::Body::from(body)).expect("a request"))
        .await
        .expect("an answer");
    let status = res.status();
    let location = res
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .expect("a body");
    (
        status,
        location,
        String::from_utf8_lossy(&body).into_owned(),
    )
}
