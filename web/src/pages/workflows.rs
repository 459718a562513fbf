//! The workflows: the list with each workflow's steps counted by state,
//! and a workflow's page with its steps in dependency order, each linked
//! to its job's page, with its Cancel and Retry (one request each through
//! the inbox of the store that holds it, as `gaffer cancel|retry
//! --workflow` sends).

use gaffer_ops::report::{StepRow, WorkflowDetail, WorkflowRow};

use super::*;

/// `GET /workflows`: workflows in id order, a page at a time (`after`:
/// the id to list after; over a shard set, with `shard`).
pub async fn workflows(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
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
    let sharded = app.shards.len() > 1;
    if after.is_some() && shard.is_none() && sharded {
        return Err(bad(&app, "a cursor pages one shard: pass shard too"));
    }
    let mut rows: Vec<(usize, WorkflowRow)> = Vec::new();
    let mut next = None;
    let mut more = false;
    for sh in &app.shards {
        if shard.is_some_and(|i| i != sh.index) {
            continue;
        }
        let page = sh
            .store()
            .await
            .or_fail(&app)?
            .workflows(after, PAGE)
            .await
            .or_fail(&app)?;
        more |= page.more;
        if let Some(n) = page.next {
            next = Some((sh.index, n));
        }
        rows.extend(page.workflows.into_iter().map(|w| (sh.index, w)));
    }
    // Over every shard at once: each shard's first page, no cursor.
    if sharded && shard.is_none() {
        next = None;
    }
    let inner = html! {
        @if rows.is_empty() { p.note { "No workflows." } } @else {
            table #workflows {
                tr {
                    @if sharded { th { "Shard" } }
                    th { "Workflow" } th { "Name" } th { "Created (UTC)" } th { "Progress" } th.n { "Steps" }
                    th.n { "Succeeded" } th.n { "Failed" } th.n { "Cancelled" } th.n { "Active" } th.n { "Blocked" } th { "State" }
                }
                @for (i, w) in &rows {
                    @let c = &w.counts;
                    tr data-workflow=(w.id) {
                        @if sharded { td { (i) } }
                        td { a href=(app.href(&format!("/workflows/{}", seg(&w.id)))) { (w.id) } }
                        td { (w.name) }
                        td { (time(w.created_at_ms)) }
                        td { (progress(w.steps as u64, c.succeeded.into(), u64::from(c.failed + c.cancelled))) }
                        td.n { (w.steps) }
                        td.n { (c.succeeded) }
                        td.n { (c.failed) }
                        td.n { (c.cancelled) }
                        td.n { (c.active()) }
                        td.n { (c.blocked) }
                        td.wf-state { (state(w.state)) }
                    }
                }
            }
            @if let Some((i, n)) = &next {
                @let i = i.to_string();
                p { a.next href=(link(&app, "/workflows", &[("after", n), ("shard", if sharded { &i } else { "" })])) { "Next page →" } }
            } @else if more {
                p.note { "More workflows than " (PAGE) " per store: page one shard." }
            }
        }
    };
    let head = html! {
        p.note { "A workflow's steps: blocked (waiting for the steps they need), active (their job is scheduled, waiting, queued or running), or ended. Cancel or retry a workflow from its page." }
    };
    Ok(respond(&app, &q, "Workflows", "/workflows", head, inner))
}

/// What a step needs: each step (linked to its row), and whether it is a
/// cleanup step.
fn needs(step: &StepRow) -> Markup {
    html! {
        @for (n, d) in step.deps.iter().enumerate() {
            @if n > 0 { ", " }
            a href=(format!("#step-{d}")) { (d) }
        }
        @if step.regardless { " " span.note { "(cleanup)" } }
    }
}

/// The workflow of `id`, from the store that has it (404 for an id that
/// cannot be one).
async fn find(app: &App, id: &str) -> Result<(usize, WorkflowDetail), Fail> {
    if !keys::is_valid_id(id) {
        return Err(missing(
            app,
            format!("No workflow `{id}`: not a workflow id."),
        ));
    }
    for sh in &app.shards {
        match sh.store().await.or_fail(app)?.workflow(id).await {
            Ok(d) => return Ok((sh.index, d)),
            Err(OpsError::WorkflowNotFound(_)) => {}
            Err(e) => return Err(Err::<(), _>(e).or_fail(app).unwrap_err()),
        }
    }
    Err(missing(app, format!("No workflow `{id}`.")))
}

/// `GET /workflows/{id}`: a workflow and its steps, each after the steps
/// it needs, with its state, type, job (linked) and the steps it needs.
pub async fn workflow(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Result<Response, Fail> {
    let (shard, d) = find(&app, &id).await?;
    let w = &d.workflow;
    let c = &w.counts;
    let (cancellable, retryable) = actions_of(w);
    let inner = html! {
        dl.fields #workflow {
            dt { "Id" } dd #workflow-id { (w.id) }
            dt { "Name" } dd { (w.name) }
            dt { "State" } dd #workflow-state { (state(w.state)) }
            @if app.shards.len() > 1 { dt { "Shard" } dd { (shard) } }
            dt { "Created" } dd { (time(w.created_at_ms)) " UTC" }
            @if let Some(at) = w.ended_at_ms { dt { "Ended" } dd { (time(at)) " UTC" } }
            @if w.cancelled { dt { "Cancelled" } dd { "yes" } }
            dt { "Progress" } dd { (progress(w.steps as u64, c.succeeded.into(), u64::from(c.failed + c.cancelled))) }
            dt { "Steps" } dd #counts {
                (w.steps) ": " (c.succeeded) " succeeded, " (c.failed) " failed, " (c.cancelled) " cancelled, "
                (c.active()) " active, " (c.blocked) " blocked"
            }
        }
        @if !app.read_only && (cancellable || retryable) {
            p {
                @if retryable {
                    form.inline method="post" action=(app.href(&format!("/workflows/{}/retry", seg(&w.id)))) { button #retry-workflow type="submit" { "Retry failed and cancelled steps" } }
                    " "
                }
                @if cancellable {
                    form.inline method="post" action=(app.href(&format!("/workflows/{}/cancel", seg(&w.id)))) { button.danger #cancel-workflow type="submit" { "Cancel workflow" } }
                }
            }
        }
        h2 { "Steps" }
        p.note { "Each step after the steps it needs. Blocked: its job is not created yet, it waits for them." }
        table #steps {
            tr { th { "Step" } th { "State" } th { "Type" } th { "Job" } th { "Needs" } }
            @for s in &d.steps {
                tr id=(format!("step-{}", s.name)) {
                    td { (s.name) }
                    td.step-state { (state(s.state)) }
                    td { (s.job_type) }
                    td {
                        @if s.state == "blocked" { span.note { (s.job) } }
                        @else { a href=(app.href(&format!("/jobs/{}", seg(&s.job)))) { (s.job) } }
                    }
                    td { (needs(s)) }
                }
            }
        }
    };
    Ok(respond(
        &app,
        &q,
        &format!("Workflow {}", w.name),
        "/workflows",
        html! {},
        inner,
    ))
}

/// Which actions a workflow's page offers: Cancel while a step has not
/// ended and it is not cancelled already; Retry once a step failed or was
/// cancelled (its steps set back, the graph resumed from them).
fn actions_of(w: &WorkflowRow) -> (bool, bool) {
    let c = &w.counts;
    (!w.ended && !w.cancelled, c.failed + c.cancelled > 0)
}

/// `POST /workflows/{id}/cancel`: one request to the store that holds it.
pub async fn cancel_workflow(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, Fail> {
    act_on_workflow(&app, &id, IntakeOp::CancelWorkflow { id: id.clone() }).await
}

/// `POST /workflows/{id}/retry`: one request to the store that holds it.
pub async fn retry_workflow(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, Fail> {
    act_on_workflow(&app, &id, IntakeOp::RetryWorkflow { id: id.clone() }).await
}

async fn act_on_workflow(app: &App, id: &str, op: IntakeOp) -> Result<Response, Fail> {
    let (shard, _) = find(app, id).await?;
    let sh = app
        .shards
        .iter()
        .find(|s| s.index == shard)
        .ok_or_else(|| missing(app, format!("No workflow `{id}`.")))?;
    let r = send(app, sh, op, None).await?;
    Ok(to_requests(app, &[r]))
}
