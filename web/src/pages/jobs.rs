//! The jobs listing, filtered by state, type and time, merged over shards.

use super::*;

pub(super) const STATES: [&str; 8] = [
    "running",
    "queued",
    "scheduled",
    "waiting",
    "dead",
    "succeeded",
    "failed",
    "cancelled",
];

pub(super) fn state_filter(s: &str) -> Option<StateFilter> {
    s.parse().ok()
}

/// `GET /jobs`: by state (tabs with counts), type, a search by id or
/// idempotency key (or `tag:T`), newest finished first, a page at a time;
/// with `tag`, that tag's jobs (`tagged`).
pub async fn jobs(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    if let Some(tag) = arg(&q, "tag") {
        return super::tagged::tagged(&app, &q, tag).await;
    }
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
        if let Some(tag) = search.strip_prefix("tag:") {
            return Ok(Redirect::to(&link(&app, "/jobs", &[("tag", tag.trim())])).into_response());
        }
        for id in [search.to_string(), keys::keyed_run_id(search)] {
            if !keys::is_valid_id(&id) {
                continue;
            }
            match app
                .shard_of(&id)
                .store()
                .await
                .or_fail(&app)?
                .job(&id)
                .await
            {
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
    // The counters are read once: for the tabs' counts here, and for the
    // listing below (which (queue, state) to scan). Beside a writer that
    // has not flushed its memtable for a while, each read of them folds
    // every change since (taquba's counters are merge operands).
    let (each, stats) = each_stats(&app).await?;
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
        for (store, _) in &each {
            match store.count_ended(ty, f, COUNT_CAP).await {
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
            let (store, counted) = each.get(i).ok_or_else(|| bad(&app, "no such shard"))?;
            let page = store
                .jobs_counted(counted, filter, ty, PAGE, after)
                .await
                .or_fail(&app)?;
            let tag = (app.shards.len() > 1).then_some(i);
            (
                page.jobs.into_iter().map(|j| (tag, j)).collect(),
                page.next.map(|n| (i, n)),
            )
        }
        _ => {
            let mut all = Vec::new();
            for (i, (store, counted)) in each.iter().enumerate() {
                let page = store
                    .jobs_counted(counted, filter, ty, PAGE, None)
                    .await
                    .or_fail(&app)?;
                all.extend(page.jobs.into_iter().map(|j| (Some(i), j)));
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
            div { label for="q" { "Job id, idempotency key, or tag:T" } input #q name="q" size="50" placeholder="tag:order:42"; }
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
pub(super) fn merge_jobs(jobs: &mut [(Option<usize>, JobRow)]) {
    jobs.sort_by(|(_, a), (_, b)| JobRow::merged_order(a, b));
}

/// Where a listed job's page is: a batch item's (it has no run records)
/// by its batch and key, any other job's by its id.
pub(super) fn job_href(app: &App, id: &str, batch: Option<&str>, key: Option<&str>) -> String {
    match (batch, key) {
        (Some(b), Some(k)) => item_href(app, b, k),
        _ => app.href(&format!("/jobs/{}", seg(id))),
    }
}

/// The page of the item `key` of batch `batch`.
pub(super) fn item_href(app: &App, batch: &str, key: &str) -> String {
    link(
        app,
        &format!("/batches/{}/item", seg(batch)),
        &[("key", key)],
    )
}

pub(super) fn job_rows(app: &App, rows: &[(Option<usize>, JobRow)], sharded: bool) -> Markup {
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
                        td { (state(j.state.as_str())) }
                        td.n { (j.attempts) }
                        td.at { (j.at_ms.map(time).unwrap_or_default()) }
                        td.err { (j.error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}
