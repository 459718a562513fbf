//! The periodic jobs.

use super::*;

/// `GET /periodic`: schedule (with its time zone), missed-tick policy,
/// last tick fired, next tick due.
pub async fn periodic(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let sharded = app.shards.len() > 1;
    let mut rows = Vec::new();
    let mut now = now_ms();
    for sh in &app.shards {
        let p = sh
            .store()
            .await
            .or_fail(&app)?
            .periodic()
            .await
            .or_fail(&app)?;
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
