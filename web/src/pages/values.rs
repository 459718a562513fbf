//! A job type's queue page: its counts, its pause, and for a type whose
//! jobs are spread over the values of a header (fairness, a limit per key,
//! a rate limit per header) the values with the most ready and running
//! jobs, the rest summed, each with its oldest ready job's age and a
//! pause or resume button (#37 §4). The reads are `gaffer stats TYPE`'s
//! (`gaffer_ops::tenants`, bounded per store), on every refresh.

use super::actions::{send, to_requests, type_name};
use super::*;

/// Values the page shows, the rest summed (`?top=N`, 1 to 100).
const TOP: usize = 10;

/// `GET /queues/{name}/values`: the type's counts and its values.
pub async fn queue_values(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(q): Q,
) -> Result<Response, Fail> {
    type_name(&app, &name)?;
    let top = match arg(&q, "top") {
        None => TOP,
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=gaffer_ops::tenants::MAX_TOP).contains(n))
            .ok_or_else(|| bad(&app, "`top` is a number of values from 1 to 100"))?,
    };
    // Every store's counts added up (a value's queue has the same name on
    // every shard), the top chosen over the set, then each store names
    // the shown values it holds jobs of.
    let Some(first) = app.shards.first() else {
        return Err(missing(&app, "This dashboard serves no store."));
    };
    let own = keys::queue_for(first.store().await.or_fail(&app)?.jobs_prefix(), &name);
    let mut counts = gaffer_ops::tenants::ValueCounts::default();
    for sh in &app.shards {
        counts.add(
            &sh.store()
                .await
                .or_fail(&app)?
                .value_counts(&name)
                .await
                .or_fail(&app)?,
        );
    }
    let mut report = counts.top(&name, &own, top);
    let now = now_ms();
    let mut paused_values = Vec::new();
    for sh in &app.shards {
        sh.store()
            .await
            .or_fail(&app)?
            .describe_values(&mut report, now)
            .await
            .or_fail(&app)?;
        paused_values.extend(
            sh.store()
                .await
                .or_fail(&app)?
                .paused_values(&name)
                .await
                .or_fail(&app)?,
        );
    }
    gaffer_ops::tenants::apply_paused(&mut report, &own, paused_values);
    let type_paused = all_paused(&app).await?.contains(&name);
    let actions = !app.read_only;
    let (ready, running): (i64, i64) = report
        .values
        .iter()
        .fold((report.rest.ready, report.rest.running), |(r, n), v| {
            (r + v.ready, n + v.running)
        });
    let shown: BTreeSet<(&str, &str)> = report
        .values
        .iter()
        .filter(|v| v.paused)
        .filter_map(|v| Some((v.header.as_deref()?, v.value.as_deref()?)))
        .collect();
    let other_paused: Vec<&(String, String)> = report
        .paused
        .iter()
        .filter(|(h, v)| !shown.contains(&(h.as_str(), v.as_str())))
        .collect();
    let inner = html! {
        p #type-counts {
            (ready) " ready, " (running) " running over "
            (report.values.len() + report.rest.values) " values with live jobs. "
            "Type: " @if type_paused { (state("paused")) } @else { "running" } ". "
            a href=(link(&app, "/jobs", &[("type", &name)])) { "Its jobs" }
        }
        @if report.values.is_empty() {
            p.note { "No value has a ready, running or scheduled job." }
        } @else {
            table #values {
                tr {
                    th { "Value" } th.n { "Ready" } th.n { "Running" } th.n { "Scheduled" }
                    th { "Oldest ready" } th { "Paused" }
                    @if actions { th {} }
                }
                @for v in &report.values {
                    tr data-value=(v.value.as_deref().unwrap_or("")) data-queue=(v.queue) {
                        td {
                            @if let (Some(h), false) = (&v.header, v.no_header) { code { (h) "=" } }
                            (v.label())
                        }
                        td.n.ready { (v.ready) }
                        td.n.running { (v.running) }
                        td.n.scheduled { (v.scheduled) }
                        td.oldest { @if let Some(a) = v.oldest_ready_age_ms { (age(a)) } }
                        td.paused { @if v.paused { (state("paused")) } @else { "no" } }
                        @if actions {
                            td {
                                @if let (Some(h), Some(val), false) = (&v.header, &v.value, v.no_header) {
                                    (value_button(&app, &name, h, val, v.paused))
                                }
                            }
                        }
                    }
                }
                @if report.rest.values > 0 {
                    tr #values-rest {
                        td { "(" (report.rest.values) " more values)" }
                        td.n { (report.rest.ready) }
                        td.n { (report.rest.running) }
                        td.n { (report.rest.scheduled) }
                        td {} td {}
                        @if actions { td {} }
                    }
                }
            }
        }
        @if report.more {
            p.note #values-capped {
                "Counted " (report.examined) " of the type's partition queues, and more exist "
                "(the cap per store and read): the counts cover those counted only."
            }
        }
        @if !other_paused.is_empty() {
            p #paused-values {
                "Also paused: "
                @for (h, v) in &other_paused {
                    code { (h) "=" (v) } " "
                    @if actions { (value_button(&app, &name, h, v, true)) " " }
                }
            }
        }
    };
    let head = html! {
        p.note {
            "A value's pause is durable (as " code { "gaffer pause TYPE --key HEADER=VALUE" } "): "
            "nothing more of its jobs is claimed, across restarts, while the type's other values run; "
            "running jobs finish. A value's name is read from one of its jobs (its queue is named by a hash)."
        }
        @if actions {
            form.filters method="post" action=(app.href(&format!("/queues/{}/values/pause", seg(&name)))) #pause-value {
                div { label for="vheader" { "Header" } input #vheader name="header" required; }
                div { label for="vvalue" { "Value" } input #vvalue name="value" required; }
                button.secondary type="submit" { "Pause the value" }
            }
        }
    };
    Ok(respond(
        &app,
        &q,
        &format!("Queue {name}"),
        "/queues",
        head,
        inner,
    ))
}

/// The pause (or resume) button of one value.
fn value_button(app: &App, name: &str, header: &str, value: &str, paused: bool) -> Markup {
    let (verb, label) = if paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        form.inline method="post" action=(app.href(&format!("/queues/{}/values/{verb}", seg(name)))) {
            input type="hidden" name="header" value=(header);
            input type="hidden" name="value" value=(value);
            button.secondary type="submit" { (label) }
        }
    }
}

/// `POST /queues/{name}/values/pause` with `header` and `value`: on every
/// store of the set.
pub async fn pause_value(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    value_request(&app, name, &form, true).await
}

/// `POST /queues/{name}/values/resume` with `header` and `value`.
pub async fn resume_value(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    axum::Form(form): axum::Form<Vec<(String, String)>>,
) -> Result<Response, Fail> {
    value_request(&app, name, &form, false).await
}

async fn value_request(
    app: &App,
    name: String,
    form: &[(String, String)],
    pause: bool,
) -> Result<Response, Fail> {
    type_name(app, &name)?;
    let (Some(header), Some(value)) = (arg(form, "header"), arg(form, "value")) else {
        return Err(bad(app, "Give the header and the value to pause."));
    };
    if value.len() > keys::MAX_PAUSED_VALUE_LEN {
        return Err(bad(
            app,
            format!(
                "A value to pause is at most {} bytes.",
                keys::MAX_PAUSED_VALUE_LEN
            ),
        ));
    }
    let mut refs = Vec::new();
    for sh in &app.shards {
        let (job_type, header, value) = (name.clone(), header.to_string(), value.to_string());
        let op = if pause {
            IntakeOp::PauseValue {
                job_type,
                header,
                value,
            }
        } else {
            IntakeOp::ResumeValue {
                job_type,
                header,
                value,
            }
        };
        refs.push(send(app, sh, op, None).await?);
    }
    Ok(to_requests(app, &refs))
}
