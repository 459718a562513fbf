//! A tag's jobs (`/jobs?tag=order:42`, or `tag:order:42` in the jobs
//! page's search): read from the tag's index, in any state, newest first;
//! over shards each shard's first page, merged.

use super::*;

/// `GET /jobs?tag=T`: the jobs submitted with the tag `T`.
pub(super) async fn tagged(
    app: &Arc<App>,
    q: &[(String, String)],
    tag: &str,
) -> Result<Response, Fail> {
    let tag = tag.trim();
    let shard = match arg(q, "shard") {
        None => None,
        Some(s) => Some(
            s.parse::<usize>()
                .ok()
                .filter(|i| *i < app.shards.len())
                .ok_or_else(|| bad(app, format!("no shard `{s}`")))?,
        ),
    };
    let after = arg(q, "after");
    if after.is_some() && shard.is_none() && app.shards.len() > 1 {
        return Err(bad(app, "a cursor pages one shard: pass shard too"));
    }
    let sharded = app.shards.len() > 1;
    type Listed = (Vec<(Option<usize>, JobRow)>, Option<(usize, String)>);
    let (rows, next): Listed = match (shard, app.shards.len()) {
        (Some(_), _) | (None, 1) => {
            let i = shard.unwrap_or(0);
            let sh = app.shard(i).ok_or_else(|| bad(app, "no such shard"))?;
            let page = sh
                .store()
                .await
                .or_fail(app)?
                .jobs_by_tag(tag, PAGE, after)
                .await
                .or_fail(app)?;
            let mark = sharded.then_some(i);
            (
                page.jobs.into_iter().map(|j| (mark, j)).collect(),
                page.next.map(|n| (i, n)),
            )
        }
        _ => {
            let mut all = Vec::new();
            for sh in &app.shards {
                let page = sh
                    .store()
                    .await
                    .or_fail(app)?
                    .jobs_by_tag(tag, PAGE, None)
                    .await
                    .or_fail(app)?;
                all.extend(page.jobs.into_iter().map(|j| (Some(sh.index), j)));
            }
            merge_jobs(&mut all);
            all.truncate(PAGE);
            (all, None)
        }
    };
    let head = html! {
        form.filters method="get" action=(app.href("/jobs")) {
            div { label for="tag" { "Tag" } input #tag name="tag" value=(tag) size="40"; }
            button type="submit" { "List" }
        }
        p.note { "The jobs submitted with the tag " code { (tag) } ", in any state: live ones first, then finished ones newest first, read from the tag's index. A job leaves it when its outcome record passes retention." }
    };
    let inner = html! {
        (job_rows(app, &rows, sharded))
        @if let Some((i, n)) = &next {
            @let i = i.to_string();
            p { a.next href=(link(app, "/jobs", &[("tag", tag), ("after", n), ("shard", if sharded { &i } else { "" })])) { "Next page →" } }
        }
    };
    let title = format!("Jobs tagged {tag}");
    Ok(respond(app, q, &title, "/jobs", head, inner))
}
