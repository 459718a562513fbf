//! Every queue of the store.

use super::*;

/// `GET /queues`: each queue with Pause or Resume.
pub async fn queues(State(app): State<Arc<App>>, Query(q): Q) -> Result<Response, Fail> {
    let stats = all_stats_recent(&app, fragment(&q)).await?;
    let paused = all_paused(&app).await?;
    let listed: BTreeSet<&str> = stats.queues.iter().map(|r| r.name.as_str()).collect();
    let inner = html! {
        (queue_table(&app, &stats, &paused, true))
        (internal_queues(&stats))
        @let others: Vec<&String> = paused.iter().filter(|p| !listed.contains(p.as_str())).collect();
        @if !others.is_empty() {
            p #paused-others { "No queue yet: " @for p in others { code { (p) } " " (state("paused")) " " } }
        }
    };
    let head = html! {
        p.note { "A pause is durable (as " code { "gaffer pause" } "): nothing more of the type is claimed, across restarts, until resumed; nothing is failed." }
        @if !app.read_only {
            form.filters method="post" action=(app.href("/queues/pause")) #pause-by-name {
                div { label for="pname" { "Pause a type by name" } input #pname name="name" required; }
                button.secondary type="submit" { "Pause" }
            }
        }
    };
    Ok(respond(&app, &q, "Queues", "/queues", head, inner))
}
