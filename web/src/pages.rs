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
use gaffer_ops::{OpsError, StateFilter, act};
use maud::{Markup, html};

use crate::view::{age, error_page, live, now_ms, page, payload, progress, state, time};
use crate::{App, Shard, chart};

mod actions;
mod batches;
mod values;
mod workflows;
pub use actions::*;
pub use batches::*;
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
                OpsError::BadCursor(_) | OpsError::BadInput(_) => StatusCode::BAD_REQUEST,
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
    let mut stats = Stats::default();
    for sh in &app.shards {
        stats.add(&sh.store.stats(false).await.or_fail(app)?);
    }
    Ok(stats)
}

async fn all_paused(app: &App) -> Result<BTreeSet<String>, Fail> {
    let mut paused = BTreeSet::new();
    for sh in &app.shards {
        paused.extend(sh.store.paused().await.or_fail(app)?);
    }
    Ok(paused)
}

// ---------------------------------------------------------------- overview

/// `GET /`: per queue counts and paused state, the writers' health, and
/// jobs finished per minute over the last hour.
pub async fn overview(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let stats = all_stats(&app).await?;
    let paused = all_paused(&app).await?;
    let now = now_ms();
    let from = (now - now % 60_000).saturating_sub(59 * 60_000);
    let mut total: chart::Series = [[0; 3]; chart::MINUTES];
    let mut per_type: BTreeMap<String, chart::Series> = BTreeMap::new();
    let mut capped = false;
    let mut health = Vec::new();
    for sh in &app.shards {
        health.push((sh.index, &sh.url, sh.store.health().await.or_fail(&app)?));
        let mut counted = sh.chart.lock().await;
        capped |= !counted
            .update(&sh.store, from, CHART_BUDGET)
            .await
            .or_fail(&app)?;
        counted.add_to(from, &mut total, &mut per_type);
    }
    let sharded = app.shards.len() > 1;
    let inner = html! {
        h2 { "Writer" }
        table {
            tr { @if sharded { th { "Shard" } } th { "Store" } th { "Status" } th.n { "Heartbeat age" } th.n { "Writer epoch" } th.n { "Durable seq" } }
            @for (i, url, h) in &health {
                tr {
                    @if sharded { td { (i) } }
                    td { (url) }
                    td { (state(h.status)) }
                    td.n { (h.heartbeat_age_ms.map(age).unwrap_or_else(|| "-".into())) }
                    td.n { (h.writer_epoch) }
                    td.n { (h.durable_seq) }
                }
            }
        }
        h2 { "Queues" }
        (queue_table(&app, &stats, &paused, false))
        (internal_queues(&stats))
        h2 { "Finished per minute, last hour" }
        (chart::draw("all types", &total, 720, 140))
        @if capped { p.note #catching-up { "Still counting the hour's finished jobs (" (CHART_BUDGET) " per type and result per refresh): the chart fills in over the next refreshes." } }
        div.grid {
            @for (ty, s) in &per_type {
                div { (chart::draw(ty, s, 360, 90)) }
            }
        }
    };
    Ok(respond(&app, &q, "Overview", "/", html! {}, inner))
}

/// The engine's own queues, apart from the user's: the intake of
/// requests from other processes (its dead letters are requests an older
/// engine refused; this one answers a refusal instead).
fn internal_queues(stats: &Stats) -> Markup {
    html! {
        @for row in stats.queues.iter().filter(|r| r.kind == "intake") {
            p.note.internal #internal-queues {
                "The engine's own: requests from other processes (" code { (row.queue) } "): "
                (row.pending + row.scheduled) " waiting, " (row.running) " being applied"
                @if row.dead > 0 { ", " (row.dead) " refused by an older engine (kept as dead letters)" }
                ". Not user work: not counted above, not listed as jobs."
            }
        }
    }
}

fn queue_table(app: &App, stats: &Stats, paused: &BTreeSet<String>, actions: bool) -> Markup {
    html! {
        @if stats.queues.iter().all(|r| r.kind == "intake") { p.note { "No queues yet." } } @else {
            table #queues {
                tr {
                    th { "Queue" } th { "Kind" } th.n { "Pending" } th.n { "Scheduled" } th.n { "Running" }
                    th.n { "Done" } th.n { "Dead" } th { "Paused" }
                    @if actions && !app.read_only { th {} }
                }
                @for row in stats.queues.iter().filter(|r| r.kind != "intake") {
                    @let is_paused = row.kind == "job" && paused.contains(&row.name);
                    tr data-queue=(row.name) {
                        td {
                            a href=(link(app, "/jobs", &[("type", &row.name)])) { (row.name) }
                            @if row.kind == "job" {
                                " " a.values href=(app.href(&format!("/queues/{}/values", seg(&row.name)))) { "values" }
                            }
                        }
                        td { (row.kind) }
                        td.n.pending { (row.pending) }
                        td.n.scheduled { (row.scheduled) }
                        td.n.running { (row.running) }
                        td.n.done { (row.done) }
                        td.n.dead { (row.dead) }
                        td.paused { @if is_paused { (state("paused")) } @else { "no" } }
                        @if actions && !app.read_only {
                            td {
                                @if row.kind == "job" {
                                    @if is_paused {
                                        form.inline method="post" action=(app.href(&format!("/queues/{}/resume", seg(&row.name)))) {
                                            button.secondary type="submit" { "Resume" }
                                        }
                                    } @else {
                                        form.inline method="post" action=(app.href(&format!("/queues/{}/pause", seg(&row.name)))) {
                                            button.secondary type="submit" { "Pause" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// -------------------------------------------------------------------- jobs

const STATES: [&str; 8] = [
    "running",
    "queued",
    "scheduled",
    "waiting",
    "dead",
    "succeeded",
    "failed",
    "cancelled",
];

fn state_filter(s: &str) -> Option<StateFilter> {
    Some(match s {
        "queued" => StateFilter::Queued,
        "scheduled" => StateFilter::Scheduled,
        "waiting" => StateFilter::Waiting,
        "running" => StateFilter::Running,
        "dead" => StateFilter::Dead,
        "succeeded" => StateFilter::Succeeded,
        "failed" => StateFilter::Failed,
        "cancelled" => StateFilter::Cancelled,
        _ => return None,
    })
}

/// `GET /jobs`: by state (tabs with counts), type, a search by id or
/// idempotency key, newest finished first, a page at a time.
pub async fn jobs(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let st = arg(&q, "state").unwrap_or("");
    let filter = match st {
        "" => None,
        s => Some(state_filter(s).ok_or_else(|| {
            bad(
                &app,
                format!("no state `{s}`: pass one of {}", STATES.join(", ")),
            )
        })?),
    };
    let ty = arg(&q, "type");
    if let Some(t) = ty
        && t.len() > 200
    {
        return Err(bad(&app, "a type name is at most 200 bytes"));
    }
    if let Some(search) = arg(&q, "q") {
        let search = search.trim();
        for id in [search.to_string(), keys::keyed_run_id(search)] {
            if !keys::is_valid_id(&id) {
                continue;
            }
            match app.shard_of(&id).store.job(&id).await {
                Ok(_) => return Ok(Redirect::to(&app.href(&format!("/jobs/{id}"))).into_response()),
                Err(OpsError::JobNotFound(_)) => {}
                Err(e) => return Err(Err::<(), _>(e).or_fail(&app).unwrap_err()),
            }
        }
        return Err(missing(
            &app,
            format!("No job has the id or the idempotency key `{search}`."),
        ));
    }
    let shard = match arg(&q, "shard") {
        None => None,
        Some(s) => Some(
            s.parse::<usize>()
                .ok()
                .filter(|i| *i < app.shards.len())
                .ok_or_else(|| bad(&app, format!("no shard `{s}`")))?,
        ),
    };
    let after = arg(&q, "after");
    if after.is_some() && shard.is_none() && app.shards.len() > 1 {
        return Err(bad(&app, "a cursor pages one shard: pass shard too"));
    }
    let stats = all_stats(&app).await?;
    let count = |f: &dyn Fn(&gaffer_ops::report::QueueRow) -> i64| -> i64 {
        stats
            .queues
            .iter()
            .filter(|r| r.kind != "intake" && ty.is_none_or(|t| r.name == t))
            .map(f)
            .sum()
    };
    // Each count counts what its list shows: live states from the
    // queues' counters (the lists read the same queues), finished ones
    // from the finished-jobs index the lists page through (capped).
    let mut counts: BTreeMap<&str, String> = [
        ("running", count(&|r| r.running)),
        ("queued", count(&|r| r.pending)),
        ("scheduled", count(&|r| r.scheduled)),
        ("dead", count(&|r| r.dead)),
    ]
    .into_iter()
    .map(|(k, n)| (k, n.max(0).to_string()))
    .collect();
    for (name, f) in [
        ("succeeded", StateFilter::Succeeded),
        ("failed", StateFilter::Failed),
        ("cancelled", StateFilter::Cancelled),
    ] {
        let (mut n, mut more) = (0, false);
        for sh in &app.shards {
            match sh.store.count_ended(ty, f, COUNT_CAP).await {
                Ok((c, m)) => {
                    n += c;
                    more |= m;
                }
                Err(OpsError::IndexNotReady) => {}
                Err(e) => return Err(Err::<(), _>(e).or_fail(&app).unwrap_err()),
            }
        }
        counts.insert(name, if more { format!("{n}+") } else { n.to_string() });
    }
    type Listed = (Vec<(Option<usize>, JobRow)>, Option<(usize, String)>);
    let (rows, next): Listed = match (shard, app.shards.len()) {
        (Some(_), _) | (None, 1) => {
            let i = shard.unwrap_or(0);
            let sh = app.shard(i).ok_or_else(|| bad(&app, "no such shard"))?;
            let page = sh.store.jobs(filter, ty, PAGE, after).await.or_fail(&app)?;
            let tag = (app.shards.len() > 1).then_some(i);
            (
                page.jobs.into_iter().map(|j| (tag, j)).collect(),
                page.next.map(|n| (i, n)),
            )
        }
        _ => {
            let mut all = Vec::new();
            for sh in &app.shards {
                let page = sh.store.jobs(filter, ty, PAGE, None).await.or_fail(&app)?;
                all.extend(page.jobs.into_iter().map(|j| (Some(sh.index), j)));
            }
            merge_jobs(&mut all);
            all.truncate(PAGE);
            (all, None)
        }
    };
    let head = html! {
        div.tabs {
            a class=[st.is_empty().then_some("active")] href=(link(&app, "/jobs", &[("type", ty.unwrap_or(""))])) { "all" }
            @for s in STATES {
                a class=[(st == s).then_some("active")] href=(link(&app, "/jobs", &[("state", s), ("type", ty.unwrap_or(""))])) {
                    (s) @if let Some(n) = counts.get(s) { " (" (n) ")" }
                }
            }
        }
        form.filters method="get" action=(app.href("/jobs")) {
            input type="hidden" name="state" value=(st);
            div { label for="type" { "Type" } input #type name="type" value=(ty.unwrap_or("")) placeholder="any"; }
            button type="submit" { "Filter" }
        }
        form.filters method="get" action=(app.href("/jobs")) {
            div { label for="q" { "Job id or idempotency key" } input #q name="q" size="50"; }
            button.secondary type="submit" { "Find" }
        }
        p.note { "Live jobs first (running, queued, scheduled: the queues' counters count them), then finished ones newest first (counted up to " (COUNT_CAP) " per type). Batch items are listed while queued, running or dead; a batch's page lists its settled items." }
    };
    let sharded = app.shards.len() > 1;
    let inner = html! {
        (job_rows(&app, &rows, sharded))
        @if let Some((i, n)) = &next {
            @let i = i.to_string();
            p { a.next href=(link(&app, "/jobs", &[("state", st), ("type", ty.unwrap_or("")), ("after", n), ("shard", if sharded { &i } else { "" })])) { "Next page →" } }
        }
    };
    Ok(respond(&app, &q, "Jobs", "/jobs", head, inner))
}

/// A listing merged over shards, in the order the command merges it
/// ([`JobRow::merged_order`]).
fn merge_jobs(jobs: &mut [(Option<usize>, JobRow)]) {
    jobs.sort_by(|(_, a), (_, b)| JobRow::merged_order(a, b));
}

/// Where a listed job's page is: a batch item's (it has no run records)
/// by its batch and key, any other job's by its id.
fn job_href(app: &App, id: &str, batch: Option<&str>, key: Option<&str>) -> String {
    match (batch, key) {
        (Some(b), Some(k)) => item_href(app, b, k),
        _ => app.href(&format!("/jobs/{}", seg(id))),
    }
}

/// The page of the item `key` of batch `batch`.
fn item_href(app: &App, batch: &str, key: &str) -> String {
    link(
        app,
        &format!("/batches/{}/item", seg(batch)),
        &[("key", key)],
    )
}

fn job_rows(app: &App, rows: &[(Option<usize>, JobRow)], sharded: bool) -> Markup {
    html! {
        @if rows.is_empty() { p.note { "No jobs." } } @else {
            table #jobs {
                tr { @if sharded { th { "Shard" } } th { "Id" } th { "Type" } th { "State" } th.n { "Attempts" } th { "At (UTC)" } th { "Error" } }
                @for (shard, j) in rows {
                    tr {
                        @if sharded { td { (shard.map(|s| s.to_string()).unwrap_or_default()) } }
                        td.id { a href=(job_href(app, &j.id, j.batch.as_deref(), j.key.as_deref())) { (j.id) } }
                        td {
                            (j.job_type)
                            @if let (Some(b), Some(k)) = (&j.batch, &j.key) {
                                " (" a href=(app.href(&format!("/batches/{}", seg(b)))) { (b) } " / " (k) ")"
                            }
                        }
                        td { (state(j.state)) }
                        td.n { (j.attempts) }
                        td.at { (j.at_ms.map(time).unwrap_or_default()) }
                        td.err { (j.error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}

// --------------------------------------------------------------------- job

/// The job `id` and the shard that holds it: the shard of its id first;
/// a batch item's delivery (its queue job id says nothing of its shard,
/// its batch's does) is looked for on the others after.
async fn find_job<'a>(app: &'a App, id: &str) -> Result<(&'a Shard, JobDetail), Fail> {
    if !keys::is_valid_id(id) {
        return Err(missing(app, format!("No job `{id}`: not a job id.")));
    }
    let first = app.shard_of(id);
    let others = app.shards.iter().filter(|s| s.index != first.index);
    let mut last = None;
    for sh in std::iter::once(first).chain(others) {
        match sh.store.job(id).await {
            Ok(d) => return Ok((sh, d)),
            Err(OpsError::JobNotFound(_)) => last = Some(OpsError::JobNotFound(id.to_string())),
            Err(e) => return Err(Err::<(), _>(e).or_fail(app).unwrap_err()),
        }
    }
    Err(
        Err::<(), _>(last.unwrap_or_else(|| OpsError::JobNotFound(id.to_string())))
            .or_fail(app)
            .unwrap_err(),
    )
}

/// `GET /jobs/{id}`: one job, with the actions that apply to it.
pub async fn job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Result<Response, Fail> {
    let (sh, d) = find_job(&app, &id).await?;
    Ok(job_page(&app, sh, &d, &q, &format!("Job {}", d.id)))
}

/// `GET /batches/{id}/item?key=K`: one item of a batch, whatever became of
/// its delivery (its queue job while the queue keeps it, else its marker).
pub async fn item(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Result<Response, Fail> {
    if keys::check_batch_id(&id).is_err() {
        return Err(missing(&app, format!("No batch `{id}`: not a batch id.")));
    }
    let Some(key) = q.iter().find(|(k, _)| k == "key").map(|(_, v)| v.clone()) else {
        return Err(bad(&app, "name the item: ?key=…"));
    };
    let sh = app.shard_of(&id);
    let d = sh.store.item(&id, &key).await.or_fail(&app)?;
    Ok(job_page(
        &app,
        sh,
        &d,
        &q,
        &format!("Item {key} of batch {id}"),
    ))
}

/// A job's (or an item's) page: its fields, the actions that apply, its
/// error or output, payload and attempts.
fn job_page(app: &App, sh: &Shard, d: &JobDetail, q: &[(String, String)], title: &str) -> Response {
    let item = d.batch.is_some() && d.key.is_some();
    // Retry only where the engine can apply it: a failed or cancelled job
    // whose payload the queue keeps, not a workflow step (retried with its
    // workflow) nor a batch item (run the batch again).
    let retryable = d.retryable && !item;
    let cancellable = matches!(d.state, "queued" | "scheduled" | "waiting" | "running");
    let ended = matches!(d.state, "failed" | "cancelled" | "dead");
    let opt = |v: Option<u64>| v.map(time);
    let due_label = if d.waiting_for.is_some() {
        "Times out at"
    } else {
        "Due at"
    };
    let inner = html! {
        dl.fields #job {
            dt { "Id" } dd #job-id { (d.id) }
            @if let Some(j) = d.job_id.as_ref().filter(|j| **j != d.id) { dt { "Queue job" } dd { (j) } }
            dt { "Type" } dd { a href=(link(app, "/jobs", &[("type", &d.job_type)])) { (d.job_type) } }
            dt { "State" } dd #job-state { (state(d.state)) }
            @if let Some(signal) = &d.waiting_for { dt { "Waits for" } dd #waits-for { "the signal " code { (signal) } } }
            dt { "Attempts" } dd { (d.attempts) }
            @if app.shards.len() > 1 { dt { "Shard" } dd { (sh.index) } }
            @if let Some(b) = &d.batch { dt { "Batch" } dd { a href=(app.href(&format!("/batches/{}", seg(b)))) { (b) } } }
            @if let (Some(b), Some(k)) = (&d.batch, &d.key) { dt { "Item key" } dd { a href=(item_href(app, b, k)) { (k) } } }
            @if let Some(w) = &d.workflow {
                dt { "Workflow" }
                dd { a href=(app.href(&format!("/workflows/{}", seg(w)))) { (w) } @if let Some(st) = &d.step { " (step " code { (st) } ")" } }
            }
            @for (name, v) in [("Submitted", opt(d.submitted_at_ms)), ("Enqueued", opt(d.enqueued_at_ms)), ("Claimed", opt(d.claimed_at_ms)), (due_label, opt(d.run_at_ms)), ("Finished", opt(d.finished_at_ms))] {
                @if let Some(v) = v { dt { (name) } dd { (v) " UTC" } }
            }
            @if let Some(k) = &d.failure_kind { dt { "Failure" } dd { (k) } }
            @if !d.followups.is_empty() {
                dt { "Follow-ups" }
                dd { @for f in &d.followups { a href=(app.href(&format!("/jobs/{}", seg(f)))) { (f) } " " } }
            }
        }
        @if !app.read_only {
            p #actions {
                @if retryable {
                    form.inline method="post" action=(app.href(&format!("/jobs/{}/retry", seg(&d.id)))) { button #retry type="submit" { "Retry" } }
                    " "
                }
                @if let (Some(w), true) = (&d.workflow, ended) {
                    form.inline method="post" action=(app.href(&format!("/workflows/{}/retry", seg(w)))) { button #retry-workflow type="submit" { "Retry the workflow" } }
                    " "
                }
                @if cancellable && !item {
                    form.inline method="post" action=(app.href(&format!("/jobs/{}/cancel", seg(&d.id)))) { button.danger #cancel type="submit" { "Cancel" } }
                }
            }
            @if item && ended {
                p.note #item-retry { "A batch item is not retried alone: run the batch again (" a href=(app.href(&format!("/batches/{}", seg(d.batch.as_deref().unwrap_or(""))))) { "its page" } "): its failed items run, its succeeded ones answer from their records." }
            } @else if ended && !retryable && d.workflow.is_none() {
                p.note #no-retry { "Not retryable: the queue no longer keeps its payload (cancelled while it was queued or waiting, or a dead letter past the queue's retention)." }
            }
            @if let Some(signal) = &d.waiting_for {
                form.signal method="post" action=(app.href(&format!("/jobs/{}/signal", seg(&d.id)))) #signal {
                    h2 { "Send the signal" }
                    p { label for="signal-name" { "Signal" } input #signal-name name="name" value=(signal) required; }
                    p { label for="signal-payload" { "Payload (JSON, as the job decodes it)" } textarea #signal-payload name="payload" { "null" } }
                    button type="submit" { "Send" }
                    span.note { " As " code { "gaffer signal" } " sends it: the first signal of a name stands." }
                }
            }
        }
        @if let Some(e) = &d.error { h2 { "Error" } pre.err #error { (e) } }
        @if let Some(o) = &d.output { h2 { "Output" } pre #output { (serde_json::to_string_pretty(o).unwrap_or_default()) } }
        @if let Some(b) = &d.output_blob { h2 { "Output" } p { "In the object " code { (b) } } }
        h2 { "Payload" }
        @if let Some(from) = &d.payload_source { p.note #payload-source { "From the dead letter of its earlier attempts (" code { (from) } "): a retry runs the same payload." } }
        @match (&d.payload, &d.payload_ref) {
            (Some(p), _) => pre #payload { (payload(p)) },
            (None, Some(r)) => p { "In the object " code { (r) } },
            (None, None) => p.note #no-payload { (no_payload(d)) },
        }
        @if !d.history.is_empty() {
            h2 { "Attempts" }
            table #attempts {
                tr { th.n { "Claim" } th { "Outcome" } th { "Claimed" } th { "Settled" } th { "Error" } }
                @for a in &d.history {
                    tr {
                        td.n { (a.attempt) } td { (a.outcome) }
                        td.at { (a.claimed_at_ms.map(time).unwrap_or_default()) }
                        td.at { (time(a.recorded_at_ms)) }
                        td.err { (a.error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    };
    respond(app, q, title, "/jobs", html! {}, inner)
}

/// Why a job's page shows no payload.
fn no_payload(d: &JobDetail) -> &'static str {
    match d.state {
        "succeeded" if d.batch.is_some() => {
            "Not kept: the queue deletes an item's delivery, and its payload, when it succeeds."
        }
        "succeeded" => {
            "Not kept: the queue deletes a job's delivery, and its payload, when it succeeds."
        }
        "cancelled" => {
            "Not kept: a job cancelled while it was queued or waiting leaves the queue with its payload."
        }
        _ => "Not kept: the queue no longer keeps its delivery (past its retention).",
    }
}

// ----------------------------------------------------------------- actions

/// `GET /failed`: dead letters with their failure, each with the action
/// that applies to it: retry a job (one, the selected, or all that match
/// the filter, once confirmed); a workflow step's workflow; a batch
/// item's batch to run again. The engine's own intake queue is not listed.
pub async fn failed(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let ty = arg(&q, "type");
    let since = since_minutes(&app, &q)?;
    let from = since.map(|m| now_ms().saturating_sub(m * 60_000));
    let mut rows: Vec<DeadRow> = Vec::new();
    for sh in &app.shards {
        let dead = sh.store.dead(ty, PAGE).await.or_fail(&app)?;
        rows.extend(dead.dead.into_iter().map(|mut d| {
            d.shard = (app.shards.len() > 1).then_some(sh.index);
            d
        }));
    }
    if let Some(from) = from {
        rows.retain(|d| d.failed_at_ms.is_some_and(|at| at >= from));
    }
    rows.sort_by(|a, b| {
        (b.failed_at_ms.is_some(), b.failed_at_ms, b.enqueued_at_ms).cmp(&(
            a.failed_at_ms.is_some(),
            a.failed_at_ms,
            a.enqueued_at_ms,
        ))
    });
    rows.truncate(PAGE * 2);
    let since_s = since.map(|m| m.to_string()).unwrap_or_default();
    let sharded = app.shards.len() > 1;
    let actions = !app.read_only;
    let any_job = rows
        .iter()
        .any(|d| d.batch.is_none() && d.workflow.is_none());
    let table = html! {
        div.wide {
            table #dead {
                tr {
                    @if actions { th { @if any_job { input #select-all type="checkbox" title="select all"; } } }
                    @if sharded { th { "Shard" } }
                    th { "Id" } th { "Type" } th.n { "Attempts" } th { "Failed (UTC)" } th { "Kind" } th { "Error" }
                    @if actions { th {} }
                }
                @for d in &rows {
                    @let item = d.batch.as_deref().zip(d.key.as_deref());
                    tr data-id=(d.id) {
                        @if actions { td { @if item.is_none() && d.workflow.is_none() { input type="checkbox" name="id" value=(d.id); } } }
                        @if sharded { td { (d.shard.map(|s| s.to_string()).unwrap_or_default()) } }
                        td.id { a href=(job_href(&app, &d.id, d.batch.as_deref(), d.key.as_deref())) { (d.id) } }
                        td { (d.job_type) @if let Some((b, k)) = item { " (" a href=(app.href(&format!("/batches/{}", seg(b)))) { (b) } " / " (k) ")" } }
                        td.n { (d.attempts) }
                        td.at { (d.failed_at_ms.map(time).unwrap_or_default()) }
                        td { (d.failure_kind.as_deref().unwrap_or("")) }
                        td.err { (d.error.as_deref().unwrap_or("")) }
                        @if actions {
                            td.action {
                                @if let Some((b, _)) = item {
                                    a.batch-link href=(app.href(&format!("/batches/{}", seg(b)))) title="A batch item is retried by running its batch again" { "Batch →" }
                                } @else if let Some(w) = &d.workflow {
                                    button.secondary.retry-workflow type="submit" formaction=(app.href(&format!("/workflows/{}/retry", seg(w)))) title="A step is retried with its workflow" { "Retry workflow" }
                                } @else {
                                    button.secondary type="submit" name="one" value=(d.id) { "Retry" }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    let body = html! {
        form.filters method="get" action=(app.href("/failed")) {
            div { label for="type" { "Type" } input #type name="type" value=(ty.unwrap_or("")) placeholder="any"; }
            div { label for="since" { "Failed in the last (minutes)" } input #since name="since" value=(since_s) size="6"; }
            button type="submit" { "Filter" }
        }
        @if actions {
            form.filters method="get" action=(app.href("/failed/retry-all")) {
                input type="hidden" name="type" value=(ty.unwrap_or(""));
                input type="hidden" name="since" value=(since_s);
                button.danger #retry-all type="submit" {
                    "Retry all failed jobs of " (ty.unwrap_or("every job type"))
                    @if let Some(m) = since { " from the last " (m) " minutes" }
                    "…"
                }
                span.note { "Shows what it will retry and asks first." }
            }
        }
        @if rows.is_empty() { p.note { "No dead letters." } } @else if actions {
            form method="post" action=(app.href("/failed/retry")) {
                (table)
                @if any_job { button #retry-selected type="submit" { "Retry selected" } }
            }
        } @else {
            (table)
        }
    };
    if fragment(&q) {
        return Ok(Html(body.into_string()).into_response());
    }
    Ok(Html(page(&app, "Failed and dead", "/failed", body).into_string()).into_response())
}

// ----------------------------------------------------------------- batches

/// `GET /periodic`: schedule (with its time zone), missed-tick policy,
/// last tick fired, next tick due.
pub async fn periodic(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let sharded = app.shards.len() > 1;
    let mut rows = Vec::new();
    let mut now = now_ms();
    for sh in &app.shards {
        let p = sh.store.periodic().await.or_fail(&app)?;
        now = p.now_ms;
        rows.extend(p.periodic.into_iter().map(|r| (sh.index, r)));
    }
    let inner = html! {
        @if rows.is_empty() { p.note { "No periodic jobs." } } @else {
            table #periodic {
                tr { @if sharded { th { "Shard" } } th { "Name" } th { "Type" } th { "Schedule" } th { "Missed ticks" } th { "Last fired (UTC)" } th { "Next due (UTC)" } th.n { "Fired" } th { "Last job" } }
                @for (i, p) in &rows {
                    tr {
                        @if sharded { td { (i) } }
                        td { (p.name) } td { (p.job_type) } td { code { (p.schedule) } } td { (p.missed) }
                        td { (p.last_fired_ms.map(time).unwrap_or_else(|| "-".into())) }
                        td { @match p.next_due_ms { None => "never", Some(at) if at <= now => { (time(at)) " (overdue)" }, Some(at) => (time(at)) } }
                        td.n { (p.fired) }
                        td { @if let Some(j) = &p.last_job_id { a href=(app.href(&format!("/jobs/{}", seg(j)))) { (j) } } @else { "-" } }
                    }
                }
            }
        }
    };
    Ok(respond(
        &app,
        &q,
        "Periodic jobs",
        "/periodic",
        html! {},
        inner,
    ))
}

// ------------------------------------------------------------------ queues

/// `GET /queues`: each queue with Pause or Resume.
pub async fn queues(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let stats = all_stats(&app).await?;
    let paused = all_paused(&app).await?;
    let listed: BTreeSet<&str> = stats.queues.iter().map(|r| r.name.as_str()).collect();
    let inner = html! {
        (queue_table(&app, &stats, &paused, true))
        (internal_queues(&stats))
        @let others: Vec<&String> = paused.iter().filter(|p| !listed.contains(p.as_str())).collect();
        @if !others.is_empty() {
            p #paused-others { "No queue yet: " @for p in others { code { (p) } " " (state("paused")) " " } }
        }
    };
    let head = html! {
        p.note { "A pause is durable (as " code { "gaffer pause" } "): nothing more of the type is claimed, across restarts, until resumed; nothing is failed." }
        @if !app.read_only {
            form.filters method="post" action=(app.href("/queues/pause")) #pause-by-name {
                div { label for="pname" { "Pause a type by name" } input #pname name="name" required; }
                button.secondary type="submit" { "Pause" }
            }
        }
    };
    Ok(respond(&app, &q, "Queues", "/queues", head, inner))
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
