//! The batches: the list with progress, rate, time left and cost, and a
//! batch's page with its items a page at a time.

use super::*;

pub(super) fn eta(rate: Option<f64>, outstanding: u64) -> String {
    match rate {
        Some(r) if r > 0.0 && outstanding > 0 => age((outstanding as f64 / r * 1000.0) as u64),
        _ if outstanding == 0 => "done".into(),
        _ => "-".into(),
    }
}

pub(super) fn cost(c: &BTreeMap<String, f64>) -> String {
    gaffer_ops::report::cost_text(c)
}

/// `GET /batches`: each batch with its progress, rate, time left and cost.
pub async fn batches(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let sharded = app.shards.len() > 1;
    let mut rows = Vec::new();
    let mut more = false;
    for sh in &app.shards {
        let b = sh
            .store()
            .await
            .or_fail(&app)?
            .batches(PAGE)
            .await
            .or_fail(&app)?;
        more |= b.more;
        for row in b.batches {
            let settled = row.succeeded + row.failed + row.cancelled;
            let rate = app.rate(sh.index, &row.id, settled);
            rows.push((sh.index, row, rate));
        }
    }
    let inner = html! {
        @if rows.is_empty() { p.note { "No batches." } } @else {
            table #batches {
                tr { @if sharded { th { "Shard" } } th { "Batch" } th { "Pipeline" } th { "Progress" } th.n { "Settled" } th.n { "Failed" } th.n { "Outstanding" } th.n { "Rate" } th { "Time left" } th { "Cost" } }
                @for (i, b, rate) in &rows {
                    tr data-batch=(b.id) {
                        @if sharded { td { (i) } }
                        td { a href=(app.href(&format!("/batches/{}", seg(&b.id)))) { (b.id) } }
                        td { (b.pipeline) }
                        td { (progress(b.total, b.succeeded, b.failed + b.cancelled)) }
                        td.n.settled { (b.succeeded + b.failed + b.cancelled) " / " (b.total) }
                        td.n { (b.failed) }
                        td.n { (b.outstanding) }
                        td.n { (rate.map(|r| format!("{r:.1}/s")).unwrap_or_else(|| "-".into())) }
                        td { (eta(*rate, b.outstanding)) }
                        td { (cost(&b.cost)) }
                    }
                }
            }
            @if more { p.note { "More batches than " (PAGE) " per store." } }
        }
    };
    Ok(respond(&app, &q, "Batches", "/batches", html! {}, inner))
}

/// `GET /batches/{id}`: a batch's status and its settled items, a page at
/// a time, and its failed keys.
pub async fn batch(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Q,
) -> Result<Response, Fail> {
    if keys::check_batch_id(&id).is_err() {
        return Err(missing(&app, format!("No batch `{id}`: not a batch id.")));
    }
    let sh = app.shard_of(&id);
    let store = sh.store().await.or_fail(&app)?;
    let b = store.batch(&id).await.or_fail(&app)?;
    let after = arg(&q, "after");
    let items = inspect::item_markers(store.view(), &id, after, PAGE)
        .await
        .or_fail(&app)?;
    let settled = b.succeeded + b.failed + b.cancelled;
    let rate = app.rate(sh.index, &id, settled);
    let inner = html! {
        dl.fields #batch {
            dt { "Pipeline" } dd { (b.pipeline) }
            dt { "Manifest" } dd { (if b.complete { "complete" } else { "incomplete" }) }
            dt { "Progress" } dd { (progress(b.total, b.succeeded, b.failed + b.cancelled)) }
            dt { "Settled" } dd #settled { (settled) " / " (b.total) }
            dt { "Succeeded" } dd { (b.succeeded) }
            dt { "Failed" } dd { (b.failed) }
            dt { "Cancelled" } dd { (b.cancelled) }
            dt { "Active" } dd { (b.active) }
            dt { "Outstanding" } dd { (b.outstanding) }
            dt { "Rate" } dd { (rate.map(|r| format!("{r:.1} items/s")).unwrap_or_else(|| "-".into())) }
            dt { "Time left" } dd { (eta(rate, b.outstanding)) }
            dt { "Cost" } dd { (cost(&b.cost)) }
        }
        @if let Some(keys) = b.failed_keys.as_ref().filter(|k| !k.is_empty()) {
            h2 { "Failed keys" }
            p #failed-keys { @for k in keys { code { (k) } " " } }
        }
        h2 { "Settled items" }
        @if items.items.is_empty() { p.note { "None settled yet." } } @else {
            table #items {
                tr { th { "Key" } th { "Status" } th { "Error" } th { "Output" } }
                @for (key, m) in &items.items {
                    tr {
                        td { a href=(item_href(&app, &id, key)) { (key) } }
                        td { (state(match m.status { records::ItemStatus::Succeeded => "succeeded", records::ItemStatus::Failed => "failed", records::ItemStatus::Cancelled => "cancelled" })) }
                        td.err { (m.error.as_deref().map(|e| store.keyring().show_text(e)).unwrap_or_default()) }
                        td { @if let Some(o) = &m.output {
                            @let (json, blob) = gaffer_ops::queries::output_with(o, store.keyring());
                            @if let Some(j) = json { code { (j.to_string()) } }
                            @if let Some(b) = blob { "object " code { (b) } }
                        } }
                    }
                }
            }
            @if let Some(n) = &items.next { p { a.next href=(link(&app, &format!("/batches/{}", seg(&id)), &[("after", n)])) { "Next items →" } } }
        }
    };
    Ok(respond(
        &app,
        &q,
        &format!("Batch {id}"),
        "/batches",
        html! {},
        inner,
    ))
}

// ---------------------------------------------------------------- periodic
