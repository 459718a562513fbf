//! A job's page, and a batch item's.

use super::*;
use gaffer_ops::ListedState;

/// The job `id` and the shard that holds it: the shard of its id first;
/// a batch item's delivery (its queue job id says nothing of its shard,
/// its batch's does) is looked for on the others after.
pub(super) async fn find_job<'a>(app: &'a App, id: &str) -> Result<(&'a Shard, JobDetail), Fail> {
    if !keys::is_valid_id(id) {
        return Err(missing(app, format!("No job `{id}`: not a job id.")));
    }
    let first = app.shard_of(id);
    let others = app.shards.iter().filter(|s| s.index != first.index);
    let mut last = None;
    for sh in std::iter::once(first).chain(others) {
        match sh.store().await.or_fail(app)?.job(id).await {
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
    let d = sh
        .store()
        .await
        .or_fail(&app)?
        .item(&id, &key)
        .await
        .or_fail(&app)?;
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
pub(super) fn job_page(
    app: &App,
    sh: &Shard,
    d: &JobDetail,
    q: &[(String, String)],
    title: &str,
) -> Response {
    let item = d.batch.is_some() && d.key.is_some();
    // Retry only where the engine can apply it: a failed or cancelled job
    // whose payload the queue keeps, not a workflow step (retried with its
    // workflow) nor a batch item (run the batch again).
    let retryable = d.retryable && !item;
    let cancellable = d.state.is_live();
    let ended = d.state.ended_unsuccessfully();
    let opt = |v: Option<u64>| v.map(time);
    let due_label = if d.waiting_for.is_some() {
        "Times out at"
    } else if d.sleeping {
        "Sleeping until"
    } else {
        "Due at"
    };
    let inner = html! {
        dl.fields #job {
            dt { "Id" } dd #job-id { (d.id) }
            @if let Some(j) = d.job_id.as_ref().filter(|j| **j != d.id) { dt { "Queue job" } dd { (j) } }
            dt { "Type" } dd { a href=(link(app, "/jobs", &[("type", &d.job_type)])) { (d.job_type) } }
            dt { "State" } dd #job-state { (state(d.state.as_str())) }
            @if let Some(signal) = &d.waiting_for { dt { "Waits for" } dd #waits-for { "the signal " code { (signal) } } }
            dt { "Attempts" } dd { (d.attempts) }
            @if let Some(key) = &d.debounced {
                dt { "Debounced by" }
                dd #debounced { "the key " code { (key) } @if let Some(n) = d.debounced_submits { " (its burst open: " (n) " submissions so far)" } }
            }
            @if d.snoozes > 0 { dt { "Snoozed" } dd #snoozes { (d.snoozes) @if d.snoozes == 1 { " time" } @else { " times" } } }
            @if !d.tags.is_empty() {
                dt { "Tags" }
                dd #job-tags { @for t in &d.tags { a.tag href=(link(app, "/jobs", &[("tag", t)])) { (t) } " " } }
            }
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
pub(super) fn no_payload(d: &JobDetail) -> &'static str {
    match d.state {
        ListedState::Succeeded if d.batch.is_some() => {
            "Not kept: the queue deletes an item's delivery, and its payload, when it succeeds."
        }
        ListedState::Succeeded => {
            "Not kept: the queue deletes a job's delivery, and its payload, when it succeeds."
        }
        ListedState::Cancelled => {
            "Not kept: a job cancelled while it was queued or waiting leaves the queue with its payload."
        }
        _ => "Not kept: the queue no longer keeps its delivery (past its retention).",
    }
}
