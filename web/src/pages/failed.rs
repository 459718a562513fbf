//! The failed and dead jobs, and retrying them.

use super::*;

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
        let dead = sh
            .store()
            .await
            .or_fail(&app)?
            .dead(ty, PAGE)
            .await
            .or_fail(&app)?;
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
