//! The overview: the queues, their counts and the throughput chart.

use super::*;

/// `GET /`: per queue counts and paused state, the writers' health, and
/// jobs finished per minute over the last hour.
pub async fn overview(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let stats = all_stats_recent(&app, fragment(&q)).await?;
    let paused = all_paused(&app).await?;
    let now = now_ms();
    let from = (now - now % 60_000).saturating_sub(59 * 60_000);
    let mut total: chart::Series = [[0; 3]; chart::MINUTES];
    let mut per_type: BTreeMap<String, chart::Series> = BTreeMap::new();
    let mut capped = false;
    let mut health = Vec::new();
    for sh in &app.shards {
        health.push((
            sh.index,
            &sh.url,
            sh.store()
                .await
                .or_fail(&app)?
                .health()
                .await
                .or_fail(&app)?,
        ));
        let mut counted = sh.chart.lock().await;
        capped |= !counted
            .update(&*sh.store().await.or_fail(&app)?, from, CHART_BUDGET)
            .await
            .or_fail(&app)?;
        counted.add_to(from, &mut total, &mut per_type);
    }
    let sharded = app.shards.len() > 1;
    let inner = html! {
        h2 { "Writer" }
        table {
            tr { @if sharded { th { "Shard" } } th { "Store" } th { "Status" } th { "Owner" } th.n { "Heartbeat age" } th.n { "Writer epoch" } th.n { "Durable seq" } }
            @for (i, url, h) in &health {
                tr {
                    @if sharded { td { (i) } }
                    td { (url) }
                    td { (state(h.status)) }
                    td {
                        @if let Some(o) = &h.shard_owner {
                            span title=(format!("{}, pid {}, since {}", o.host, o.pid, time(o.since_ms))) { (o.owner) }
                        } @else { "-" }
                    }
                    td.n { (h.heartbeat_age_ms.map(age).unwrap_or_else(|| "-".into())) }
                    // Through the engine's own view (`WebConfig::live`)
                    // neither is read: 0.
                    td.n { @if h.writer_epoch > 0 { (h.writer_epoch) } @else { "-" } }
                    td.n { @if h.durable_seq > 0 { (h.durable_seq) } @else { "-" } }
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
pub(super) fn internal_queues(stats: &Stats) -> Markup {
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

pub(super) fn queue_table(
    app: &App,
    stats: &Stats,
    paused: &BTreeSet<String>,
    actions: bool,
) -> Markup {
    html! {
        @if stats.queues.iter().all(|r| r.kind == "intake") { p.note { "No queues yet." } } @else {
            @if let Some(at) = stats.snapshot_at_ms {
                p.note #counted-at {
                    "Counts and oldest ready jobs as of " (time(at)) ": a refresh reads them again when the engine takes its next snapshot of its counters (every "
                    (gaffer_ops::queries::SNAPSHOT_EVERY_MS / 1000) " s while they change). Load the page to count now."
                }
            }
            table #queues {
                tr {
                    th { "Queue" } th { "Kind" } th.n { "Pending" } th.n { "Scheduled" } th.n { "Running" }
                    th.n { "Done" } th.n { "Dead" } th.n { "Oldest ready" } th { "Paused" }
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
                        td.n.oldest { @if let Some(a) = row.oldest_ready_age_ms { (age(a)) } }
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
