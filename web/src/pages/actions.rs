//! The actions: retry, cancel, retry selected or all that match, pause and
//! resume, submit; each one request (or one per job) through a store's
//! inbox, and the requests page that shows their fate.

use super::*;

/// Send `op` to the store of `sh`; the request's reference for `/requests`.
pub(super) async fn send(
    app: &App,
    sh: &Shard,
    op: IntakeOp,
    job: Option<&str>,
) -> Result<String, Fail> {
    let request = ulid::Ulid::new().to_string();
    act::send(&*sh.store().await.or_fail(app)?, &op, &request)
        .await
        .or_fail(app)?;
    Ok(format!("{}:{request}:{}", sh.index, job.unwrap_or("")))
}

pub(super) fn to_requests(app: &App, refs: &[String]) -> Response {
    let pairs: Vec<(&str, &str)> = refs.iter().map(|r| ("r", r.as_str())).collect();
    Redirect::to(&link(app, "/requests", &pairs)).into_response()
}

pub(super) fn job_id(app: &App, id: &str) -> Result<(), Fail> {
    if keys::is_valid_id(id) {
        Ok(())
    } else {
        Err(missing(app, format!("No job `{id}`: not a job id.")))
    }
}

/// `POST /jobs/{id}/retry`.
pub async fn retry(State(app): State<Arc<App>>, Path(id): Path<String>) -> Result<Response, Fail> {
    job_id(&app, &id)?;
    let r = send(
        &app,
        app.shard_of(&id),
        IntakeOp::Retry { run_id: id.clone() },
        Some(&id),
    )
    .await?;
    Ok(to_requests(&app, &[r]))
}

/// `POST /jobs/{id}/cancel`.
pub async fn cancel(State(app): State<Arc<App>>, Path(id): Path<String>) -> Result<Response, Fail> {
    job_id(&app, &id)?;
    let r = send(
        &app,
        app.shard_of(&id),
        IntakeOp::Cancel { run_id: id.clone() },
        Some(&id),
    )
    .await?;
    Ok(to_requests(&app, &[r]))
}

/// `POST /failed/retry`: the job of the row's button (`one`), or every
/// selected one (`id`), one request each.
pub async fn retry_selected(
    State(app): State<Arc<App>>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    let ids: Vec<&str> = match arg(&form, "one") {
        Some(one) => vec![one],
        None => form
            .iter()
            .filter(|(k, v)| k == "id" && !v.is_empty())
            .map(|(_, v)| v.as_str())
            .collect(),
    };
    if ids.is_empty() {
        return Err(bad(&app, "Select at least one job to retry."));
    }
    if ids.len() > 1000 {
        return Err(bad(&app, "At most 1000 jobs at once."));
    }
    for id in &ids {
        if !keys::is_valid_id(id) {
            return Err(bad(&app, format!("`{id}` is not a job id.")));
        }
    }
    let mut refs = Vec::new();
    for id in ids {
        refs.push(
            send(
                &app,
                app.shard_of(id),
                IntakeOp::Retry {
                    run_id: id.to_string(),
                },
                Some(id),
            )
            .await?,
        );
    }
    Ok(to_requests(&app, &refs))
}

/// Minutes in a `since` filter, checked.
pub(super) fn since_minutes(app: &App, q: &[(String, String)]) -> Result<Option<u64>, Fail> {
    match arg(q, "since") {
        None => Ok(None),
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|m| *m <= 10 * 365 * 24 * 60)
            .map(Some)
            .ok_or_else(|| bad(app, format!("`{s}` is not a number of minutes"))),
    }
}

/// The job types a Retry all covers: the filter's, else every job type
/// the stores have (pipelines are not: a batch item runs again with its
/// batch).
async fn retry_types(app: &App, form: &[(String, String)]) -> Result<Vec<String>, Fail> {
    let types = match arg(form, "type") {
        Some(t) => {
            type_name(app, t)?;
            vec![t.to_string()]
        }
        None => job_types(app).await?,
    };
    if types.is_empty() {
        return Err(bad(app, "No job type to retry."));
    }
    Ok(types)
}

/// `GET /failed/retry-all?type=&since=` (and a `POST` without
/// `confirm`): what a Retry all would touch, counted per type, and the
/// form that confirms it.
pub async fn retry_all_confirm(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    confirm_page(&app, &q).await
}

async fn confirm_page(app: &App, form: &[(String, String)]) -> Result<Response, Fail> {
    let since = since_minutes(app, form)?;
    let since_ms = since.map_or(0, |m| now_ms().saturating_sub(m * 60_000));
    let types = retry_types(app, form).await?;
    let mut rows = Vec::new();
    for t in &types {
        let mut total = gaffer_ops::report::RetryPreview {
            job_type: t.clone(),
            ..Default::default()
        };
        for sh in &app.shards {
            let p = sh
                .store()
                .await
                .or_fail(app)?
                .retry_preview(t, since_ms, PREVIEW_CAP)
                .await
                .or_fail(app)?;
            total.retried += p.retried;
            total.steps += p.steps;
            total.payload_gone += p.payload_gone;
            total.more |= p.more;
        }
        rows.push(total);
    }
    rows.retain(|r| r.retried + r.steps + r.payload_gone > 0 || types.len() == 1);
    let retried: u64 = rows.iter().map(|r| r.retried).sum();
    let more = rows.iter().any(|r| r.more);
    let since_s = since.map(|m| m.to_string()).unwrap_or_default();
    let plus = |n: u64, more: bool| if more { format!("{n}+") } else { n.to_string() };
    let jobs = |n: u64, more: bool| {
        format!(
            "{} {}",
            plus(n, more),
            if n == 1 && !more { "job" } else { "jobs" }
        )
    };
    let body = html! {
        div.confirm #confirm {
            p {
                "Retry all failed jobs of " (arg(form, "type").unwrap_or("every job type"))
                @if let Some(m) = since { " that failed in the last " (m) " minutes" }
                ": " strong #will-retry { (plus(retried, more)) } (if retried == 1 && !more { " job runs" } else { " jobs run" }) " again, one request per job type and store."
            }
            @if rows.is_empty() { p.note { "No failed job matches." } } @else {
                table #preview {
                    tr { th { "Job type" } th.n { "Retried" } th.n { "Skipped: workflow steps" } th.n { "Skipped: payload gone" } }
                    @for r in &rows {
                        tr data-type=(r.job_type) {
                            td { (r.job_type) } td.n.retried { (plus(r.retried, r.more)) } td.n { (r.steps) } td.n { (r.payload_gone) }
                        }
                    }
                }
            }
            p.note {
                "Skipped: workflow steps (retry their workflow from its page: its failed and cancelled steps run again) and jobs whose payload the queue no longer keeps. "
                "Batch items are not jobs of a type: run their batch again. "
                @if more { "Counted up to " (PREVIEW_CAP) " failed jobs per type and store; the engine retries them all. " }
                "The counts are of now: the engine retries what has failed when it applies the request."
            }
            @if retried > 0 || more {
                form method="post" action=(app.href("/failed/retry-all")) {
                    input type="hidden" name="type" value=(arg(form, "type").unwrap_or(""));
                    input type="hidden" name="since" value=(since_s);
                    input type="hidden" name="confirm" value="yes";
                    button.danger #confirm-retry-all type="submit" { "Retry " (jobs(retried, more)) }
                    " "
                    a href=(link(app, "/failed", &[("type", arg(form, "type").unwrap_or("")), ("since", &since_s)])) { "Cancel" }
                }
            } @else {
                p { a href=(app.href("/failed")) { "Back" } }
            }
        }
    };
    Ok(Html(page(app, "Retry all failed jobs?", "/failed", body).into_string()).into_response())
}

/// `POST /failed/retry-all` with `confirm=yes`: every failed job of the
/// filter's type (each job type without one) that failed in the last
/// `since` minutes (all without), one request per type and store: the
/// engine retries them. Without `confirm`: the confirmation page.
pub async fn retry_all(
    State(app): State<Arc<App>>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    if arg(&form, "confirm") != Some("yes") {
        return confirm_page(&app, &form).await;
    }
    let since = since_minutes(&app, &form)?;
    let since_ms = since.map_or(0, |m| now_ms().saturating_sub(m * 60_000));
    let types = retry_types(&app, &form).await?;
    let mut refs = Vec::new();
    for sh in &app.shards {
        for t in &types {
            refs.push(
                send(
                    &app,
                    sh,
                    IntakeOp::RetryFailed {
                        job_type: t.clone(),
                        since_ms,
                    },
                    None,
                )
                .await?,
            );
        }
    }
    Ok(to_requests(&app, &refs))
}

/// `POST /jobs/{id}/signal` (`name`, `payload` as JSON): the signal, as
/// `gaffer signal` sends it.
pub async fn signal(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    job_id(&app, &id)?;
    let name = arg(&form, "name").unwrap_or("");
    if name.len() > 200 {
        return Err(bad(&app, "a signal's name is at most 200 bytes"));
    }
    let op = act::signal_op(&id, name, arg(&form, "payload").unwrap_or("null"))
        .map_err(|e| bad(&app, e.to_string()))?;
    let r = send(&app, app.shard_of(&id), op, Some(&id)).await?;
    Ok(to_requests(&app, &[r]))
}

pub(super) fn type_name(app: &App, name: &str) -> Result<(), Fail> {
    if name.is_empty() || name.len() > 200 {
        return Err(bad(app, "a job type is 1 to 200 bytes"));
    }
    Ok(())
}

/// `POST /queues/{name}/pause`: on every store of the set.
pub async fn pause(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Response, Fail> {
    type_name(&app, &name)?;
    let mut refs = Vec::new();
    for sh in &app.shards {
        refs.push(
            send(
                &app,
                sh,
                IntakeOp::Pause {
                    job_type: name.clone(),
                },
                None,
            )
            .await?,
        );
    }
    Ok(to_requests(&app, &refs))
}

/// `POST /queues/pause` with the type in the form's `name`.
pub async fn pause_named(
    state: State<Arc<App>>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    let name = arg(&form, "name").unwrap_or("").to_string();
    pause(state, Path(name)).await
}

/// `POST /queues/{name}/resume`: on every store of the set.
pub async fn resume(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Response, Fail> {
    type_name(&app, &name)?;
    let mut refs = Vec::new();
    for sh in &app.shards {
        refs.push(
            send(
                &app,
                sh,
                IntakeOp::Resume {
                    job_type: name.clone(),
                },
                None,
            )
            .await?,
        );
    }
    Ok(to_requests(&app, &refs))
}

/// `GET /requests?r=SHARD:REQUEST:JOB…`: what became of each request.
pub async fn requests(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let mut parsed = Vec::new();
    for (k, v) in &q {
        if k != "r" {
            continue;
        }
        let mut parts = v.splitn(3, ':');
        let (s, rid, job) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let shard = s.parse::<usize>().ok().and_then(|i| app.shard(i));
        match shard {
            Some(sh) if keys::is_valid_id(rid) && (job.is_empty() || keys::is_valid_id(job)) => {
                parsed.push((
                    sh,
                    rid.to_string(),
                    (!job.is_empty()).then(|| job.to_string()),
                ));
            }
            _ => {
                return Err(bad(
                    &app,
                    format!("`{v}` is not a request of this dashboard"),
                ));
            }
        }
    }
    if parsed.is_empty() || parsed.len() > 1000 {
        return Err(bad(&app, "name 1 to 1000 requests"));
    }
    let mut rows = Vec::new();
    for (sh, rid, job) in &parsed {
        let (status, detail) = match act::progress(&*sh.store().await.or_fail(&app)?, rid)
            .await
            .or_fail(&app)?
        {
            RequestProgress::Sent => ("sent", String::new()),
            RequestProgress::Refused(reason) => ("refused", reason),
            RequestProgress::Applied(result) => ("applied", result.unwrap_or_default()),
        };
        let job_state = match job {
            Some(j) => act::job_state(&*sh.store().await.or_fail(&app)?, j)
                .await
                .or_fail(&app)?,
            None => None,
        };
        rows.push((sh.index, rid, job, status, detail, job_state));
    }
    let sharded = app.shards.len() > 1;
    let inner = html! {
        table #requests {
            tr { @if sharded { th { "Shard" } } th { "Request" } th { "Job" } th { "Fate" } th { "Result or reason" } th { "Job state" } }
            @for (i, rid, job, status, detail, js) in &rows {
                tr {
                    @if sharded { td { (i) } }
                    td { code { (rid) } }
                    td { @if let Some(j) = job { a href=(app.href(&format!("/jobs/{}", seg(j)))) { (j) } } }
                    td.fate { (state(status)) }
                    td { (detail) }
                    td.job-state { @if let Some(s) = js { (state(s)) } }
                }
            }
        }
        p.note { "sent: in the store's inbox, not taken by the engine yet; applied: done; refused: with the engine's reason." }
    };
    Ok(respond(&app, &q, "Requests", "", html! {}, inner))
}

// ------------------------------------------------------------------ failed

pub(super) fn submit_page(
    app: &App,
    types: &[String],
    form: &[(String, String)],
    refusal: Option<&str>,
) -> Markup {
    let v = |k: &str| arg(form, k).unwrap_or("").to_string();
    let body = html! {
        @if let Some(r) = refusal { p.error #refusal { "Refused: " (r) } }
        form method="post" action=(app.href("/submit")) #submit {
            p { label for="type" { "Job type (registered)" } input #type name="type" list="types" required value=(v("type")); }
            datalist #types { @for t in types { option value=(t) {} } }
            p { label for="payload" { "Payload (JSON: the job's fields)" } textarea #payload name="payload" { (if v("payload").is_empty() { "{}".to_string() } else { v("payload") }) } }
            p { label for="key" { "Idempotency key (optional)" } input #key name="key" value=(v("key")) size="50"; }
            p { label for="run_at" { "Run at, UTC (optional)" } input #run_at type="datetime-local" step="1" name="run_at" value=(v("run_at")); }
            button type="submit" { "Submit" }
        }
    };
    page(app, "Submit a job", "/submit", body)
}

pub(super) async fn job_types(app: &App) -> Result<Vec<String>, Fail> {
    Ok(all_stats(app)
        .await?
        .queues
        .into_iter()
        .filter(|r| r.kind == "job")
        .map(|r| r.name)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect())
}

/// `GET /submit`.
pub async fn submit_form(State(app): State<Arc<App>>) -> Result<Response, Fail> {
    if app.read_only {
        return Err(Fail::from(error_page(
            &app,
            StatusCode::FORBIDDEN,
            "This dashboard is read-only: it takes no action.",
        )));
    }
    let types = job_types(&app).await?;
    Ok(Html(submit_page(&app, &types, &[], None).into_string()).into_response())
}

/// `POST /submit`: the job's request; the job's page once the engine took
/// it, the form with the reason when it refused, the request's page when
/// it has not answered within a few seconds.
pub async fn submit(
    State(app): State<Arc<App>>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    let again = |status: StatusCode, why: &str, types: &[String]| {
        (
            status,
            Html(submit_page(&app, types, &form, Some(why)).into_string()),
        )
            .into_response()
    };
    let types = job_types(&app).await?;
    let Some(ty) = arg(&form, "type") else {
        return Ok(again(StatusCode::BAD_REQUEST, "name a job type", &types));
    };
    let json = arg(&form, "payload").unwrap_or("{}");
    let run_at = match arg(&form, "run_at") {
        None => None,
        Some(s) => match crate::view::parse_time(s) {
            Some(ms) => Some(ms),
            None => {
                return Ok(again(
                    StatusCode::BAD_REQUEST,
                    &format!("`{s}` is not a time (YYYY-MM-DDTHH:MM[:SS], UTC)"),
                    &types,
                ));
            }
        },
    };
    let (op, request, run_id) = match act::submit_op_at(ty, json, arg(&form, "key"), run_at) {
        Ok(x) => x,
        Err(e) => return Ok(again(StatusCode::BAD_REQUEST, &e.to_string(), &types)),
    };
    let sh = app.shard_of(&run_id);
    act::send(&*sh.store().await.or_fail(&app)?, &op, &request)
        .await
        .or_fail(&app)?;
    let deadline = Instant::now() + SUBMIT_WAIT;
    loop {
        match act::progress(&*sh.store().await.or_fail(&app)?, &request)
            .await
            .or_fail(&app)?
        {
            RequestProgress::Refused(reason) => {
                return Ok(again(StatusCode::UNPROCESSABLE_ENTITY, &reason, &types));
            }
            RequestProgress::Applied(_) => {
                return Ok(Redirect::to(&app.href(&format!("/jobs/{run_id}"))).into_response());
            }
            RequestProgress::Sent if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            RequestProgress::Sent => {
                return Ok(to_requests(
                    &app,
                    &[format!("{}:{request}:{run_id}", sh.index)],
                ));
            }
        }
    }
}
