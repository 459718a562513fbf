//! The pages and the actions. Every page is a bounded read through the
//! stores' readers; every action one request (or one per selected job)
//! through a store's inbox, answered by a redirect to the page of its fate.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use gaffer_layout::EngineError;
use gaffer_layout::intake::{IntakeOp, RequestProgress};
use gaffer_layout::{inspect, keys, records};
use gaffer_ops::report::{DeadRow, JobDetail, JobRow, Stats};
use gaffer_ops::{OpsError, StateFilter, Store, act};
use maud::{Markup, html};

use crate::view::{age, error_page, live, now_ms, page, payload, progress, state, time};
use crate::{App, ReaderError, Shard, chart};

mod actions;
mod batches;
mod failed;
mod job;
mod jobs;
mod overview;
mod periodic;
mod queues;
mod tagged;
mod values;
mod workflows;
pub use actions::*;
pub use batches::*;
pub use failed::*;
pub use job::*;
pub use jobs::*;
pub use overview::*;
pub use periodic::*;
pub use queues::*;
pub use values::*;
pub use workflows::*;

/// Rows a listing shows per page.
const PAGE: usize = 50;
/// Most finished jobs a state's count counts per type (then `N+`).
const COUNT_CAP: usize = 1000;
/// Most failed jobs per type the confirmation of Retry all reads.
const PREVIEW_CAP: usize = 1000;
/// How often the live part of a page refreshes.
const REFRESH_MS: u32 = 1500;
/// How long a submit waits for the engine's answer before it shows the
/// request's page instead.
const SUBMIT_WAIT: Duration = Duration::from_secs(3);
/// Most finished-jobs index entries the chart reads per type and result
/// in one request (the rest at the next refresh).
const CHART_BUDGET: usize = 5_000;

type Q = Query<Vec<(String, String)>>;

/// A failed request: its page, rendered.
pub struct Fail(Box<Response>);

impl IntoResponse for Fail {
    fn into_response(self) -> Response {
        *self.0
    }
}

impl From<Response> for Fail {
    fn from(r: Response) -> Self {
        Fail(Box::new(r))
    }
}

fn bad(app: &App, message: impl AsRef<str>) -> Fail {
    Fail::from(error_page(app, StatusCode::BAD_REQUEST, message.as_ref()))
}

fn missing(app: &App, message: impl AsRef<str>) -> Fail {
    Fail::from(error_page(app, StatusCode::NOT_FOUND, message.as_ref()))
}

/// An error of a read or a request, as its page: 404 for an unknown id,
/// 400 for bad input, 503 for a store not ready, 500 for a store that fails.
trait OrFail<T> {
    fn or_fail(self, app: &App) -> Result<T, Fail>;
}

impl<T> OrFail<T> for Result<T, OpsError> {
    fn or_fail(self, app: &App) -> Result<T, Fail> {
        self.map_err(|e| {
            let status = match &e {
                OpsError::JobNotFound(_)
                | OpsError::BatchNotFound(_)
                | OpsError::ItemNotFound { .. }
                | OpsError::WorkflowNotFound(_) => StatusCode::NOT_FOUND,
                OpsError::Engine(
                    EngineError::JobNotFound(_)
                    | EngineError::BatchNotFound(_)
                    | EngineError::WorkflowNotFound(_)
                    | EngineError::InvalidJobId(_)
                    | EngineError::InvalidBatchId(_),
                ) => StatusCode::NOT_FOUND,
                OpsError::BadCursor(_)
                | OpsError::BadInput(_)
                | OpsError::Engine(EngineError::InvalidTag { .. }) => StatusCode::BAD_REQUEST,
                OpsError::IndexNotReady => StatusCode::SERVICE_UNAVAILABLE,
                _ => {
                    tracing::warn!(error = %e, "dashboard read failed");
                    StatusCode::INTERNAL_SERVER_ERROR
                }
            };
            Fail::from(error_page(app, status, &e.to_string()))
        })
    }
}

impl<T> OrFail<T> for Result<T, ReaderError> {
    /// 503: the store's reader could not be opened again (the message names
    /// the store).
    fn or_fail(self, app: &App) -> Result<T, Fail> {
        self.map_err(|e| {
            tracing::warn!(error = %e, "dashboard: no reader");
            Fail::from(error_page(
                app,
                StatusCode::SERVICE_UNAVAILABLE,
                &e.to_string(),
            ))
        })
    }
}

impl<T> OrFail<T> for Result<T, EngineError> {
    fn or_fail(self, app: &App) -> Result<T, Fail> {
        self.map_err(OpsError::from).or_fail(app)
    }
}

/// The first value of `name` in a query or form, empty ones as none.
fn arg<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter()
        .find(|(k, v)| k == name && !v.is_empty())
        .map(|(_, v)| v.as_str())
}

fn fragment(q: &[(String, String)]) -> bool {
    arg(q, "fragment").is_some()
}

/// The page, or with `?fragment=1` its live part only.
fn respond(
    app: &App,
    q: &[(String, String)],
    title: &str,
    tab: &str,
    head: Markup,
    inner: Markup,
) -> Response {
    if fragment(q) {
        return Html(inner.into_string()).into_response();
    }
    let body = html! { (head) (live(REFRESH_MS, inner)) };
    Html(page(app, title, tab, body).into_string()).into_response()
}

/// A link with a query string built from `pairs` (values escaped).
fn link(app: &App, path: &str, pairs: &[(&str, &str)]) -> String {
    let q: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    if q.is_empty() {
        app.href(path)
    } else {
        format!("{}?{}", app.href(path), q.join("&"))
    }
}

/// Percent-encoding of a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Percent-encoding of a path segment.
fn seg(s: &str) -> String {
    encode(s)
}

async fn all_stats(app: &App) -> Result<Stats, Fail> {
    Ok(each_stats(app).await?.1)
}

/// Each shard's reader with its counters (the same read a page's listing
/// then reuses: `Store::jobs_counted`), and their sum over shards.
async fn each_stats(app: &App) -> Result<(Vec<(Arc<Store>, Stats)>, Stats), Fail> {
    let mut each = Vec::with_capacity(app.shards.len());
    let mut sum = Stats::default();
    for sh in &app.shards {
        let store = sh.store().await.or_fail(app)?;
        let stats = store.stats(false).await.or_fail(app)?;
        sum.add(&stats);
        each.push((store, stats));
    }
    Ok((each, sum))
}

/// [`all_stats`] for a page that refreshes (the overview, the queues):
/// a page load reads the counters; a refresh (`fragment`) shows the
/// engine's snapshot once it is newer than what the store's pages last
/// showed, else that again (`Store::stats_recent`), which costs a busy
/// engine far less to read.
async fn all_stats_recent(app: &App, fragment: bool) -> Result<Stats, Fail> {
    let mut stats = Stats::default();
    for sh in &app.shards {
        let store = sh.store().await.or_fail(app)?;
        let (at, read) = if fragment {
            let shown = sh.counted.lock().map(|c| c.clone()).unwrap_or_default();
            store
                .stats_recent(shown.as_ref().map(|(at, s)| (*at, s)))
                .await
                .or_fail(app)?
        } else {
            let at = gaffer_ops::format::now_ms();
            (at, store.stats(false).await.or_fail(app)?)
        };
        stats.add(&read);
        if let Ok(mut c) = sh.counted.lock() {
            *c = Some((at, read));
        }
    }
    Ok(stats)
}

async fn all_paused(app: &App) -> Result<BTreeSet<String>, Fail> {
    let mut paused = BTreeSet::new();
    for sh in &app.shards {
        paused.extend(sh.store().await.or_fail(app)?.paused().await.or_fail(app)?);
    }
    Ok(paused)
}

// ------------------------------------------------------------------ submit

/// Any other path: a 404 page.
pub async fn not_found(State(app): State<Arc<App>>) -> Response {
    let mut r = error_page(&app, StatusCode::NOT_FOUND, "No such page.");
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}
