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
    act::send(&sh.store, &op, &request).await.or_fail(app)?;
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

/// `POST /failed/retry-all`: every failed job of the filter's type (each
/// job type without one) that failed in the last `since` minutes (all
/// without), one request per type and store: the engine retries them.
pub async fn retry_all(
    State(app): State<Arc<App>>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    let since = since_minutes(&app, &form)?;
    let since_ms = since.map_or(0, |m| now_ms().saturating_sub(m * 60_000));
    let types: Vec<String> = match arg(&form, "type") {
        Some(t) => vec![t.to_string()],
        None => all_stats(&app)
            .await?
            .queues
            .into_iter()
            .filter(|r| r.kind == "job")
            .map(|r| r.name)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
    };
    if types.is_empty() {
        return Err(bad(&app, "No job type to retry."));
    }
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
        let (status, detail) = match act::progress(&sh.store, rid).await.or_fail(&app)? {
            RequestProgress::Sent => ("sent", String::new()),
            RequestProgress::Refused(reason) => ("refused", reason),
            RequestProgress::Applied(result) => ("applied", result.unwrap_or_default()),
        };
        let job_state = match job {
            Some(j) => act::job_state(&sh.store, j).await.or_fail(&app)?,
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
    act::send(&sh.store, &op, &request).await.or_fail(&app)?;
    let deadline = Instant::now() + SUBMIT_WAIT;
    loop {
        match act::progress(&sh.store, &request).await.or_fail(&app)? {
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
