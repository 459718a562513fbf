//! A tag's jobs, read: a backwards scan of the tag's index entries, then
//! each listed job's records by id (see the [`tags`](super) module).

use std::ops::Bound;

use taquba::{KvOrder, QueueView};

use super::{Tags, check_tag, tag_position, tag_prefix};
use crate::error::Result;
use crate::inspect;
use crate::records::{JobState, OutcomeRecord, RunRecord};

/// The most jobs one [`page`] lists.
pub const MAX_PAGE: usize = 1000;

/// One job of a tag, as its records say.
#[derive(Debug, Clone)]
pub struct TaggedEntry {
    /// The job's id (its run id).
    pub run_id: String,
    /// Where it is: a live job's state (its queue job read), or how it ended.
    pub state: JobState,
    /// Its run record, while it lives.
    pub run: Option<RunRecord>,
    /// Its live queue job, as the queue keeps it (while it lives).
    pub queue_job: Option<taquba::JobRecord>,
    /// Its outcome record, once it ended (as stored: texts may be sealed).
    pub outcome: Option<OutcomeRecord>,
    /// Its tags (the tag listed among them).
    pub tags: Tags,
}

impl TaggedEntry {
    /// The job's type.
    pub fn job_type(&self) -> &str {
        match (&self.run, &self.outcome) {
            (Some(run), _) => &run.job_type,
            (None, Some(rec)) => &rec.job_type,
            (None, None) => "",
        }
    }
}

/// A page of a tag's jobs (see [`page`]).
#[derive(Debug, Clone)]
pub struct TaggedPage {
    /// The jobs, newest (by creation) first.
    pub jobs: Vec<TaggedEntry>,
    /// Pass as `before` for the next page; `None` when this page reached
    /// the end.
    pub next: Option<String>,
}

/// One job of a tag, as `Engine::jobs_by_tag` and `Client::jobs_by_tag`
/// answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedJob {
    /// The job's id.
    pub id: String,
    /// Its type.
    pub job_type: String,
    /// Where it is now.
    pub state: JobState,
    /// When it was created (queue clock, epoch ms).
    pub created_at_ms: u64,
    /// When it ended, once it did.
    pub finished_at_ms: Option<u64>,
    /// All its tags.
    pub tags: Vec<String>,
}

/// A page of a tag's jobs, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedJobs {
    /// The jobs, newest (by creation) first.
    pub jobs: Vec<TaggedJob>,
    /// Pass as `before` for the next page; `None` when this page reached
    /// the end.
    pub next: Option<String>,
}

impl From<TaggedPage> for TaggedJobs {
    fn from(page: TaggedPage) -> Self {
        let jobs = page
            .jobs
            .into_iter()
            .map(|e| TaggedJob {
                job_type: e.job_type().to_string(),
                id: e.run_id,
                state: e.state,
                created_at_ms: e.tags.at_ms,
                finished_at_ms: e.outcome.as_ref().map(|r| r.finished_at_ms),
                tags: e.tags.names,
            })
            .collect();
        Self {
            jobs,
            next: page.next,
        }
    }
}

/// The jobs tagged `tag`, newest first (by when they were created), in
/// any state: up to `limit` (1 to [`MAX_PAGE`]) index entries created before
/// the position `before` (a previous page's [`TaggedPage::next`]; from the
/// newest with `None`), then each job's records by id (its run record and
/// queue job while it lives, else its outcome record). An entry whose job
/// has no record carrying it (removed between the scan and the read, or a
/// record that did not decode at retention) is skipped, so a page may hold
/// fewer jobs than `limit` with more to come. An unacceptable `tag` is
/// [`EngineError::InvalidTag`](crate::EngineError::InvalidTag).
pub async fn page(
    view: &QueueView,
    tag: &str,
    before: Option<&str>,
    limit: usize,
) -> Result<TaggedPage> {
    check_tag(tag)?;
    let limit = limit.clamp(1, MAX_PAGE);
    let prefix = tag_prefix(tag);
    let end = match before {
        Some(pos) => {
            let mut k = prefix.clone();
            k.extend_from_slice(pos.as_bytes());
            Bound::Excluded(k)
        }
        None => Bound::Unbounded,
    };
    let scanned = view
        .kv_scan(&prefix, (Bound::Unbounded, end), KvOrder::Descending, limit)
        .await?;
    let mut found: Vec<String> = scanned
        .entries
        .into_iter()
        .map(|(key, _)| String::from_utf8_lossy(&key[prefix.len()..]).into_owned())
        .collect();
    found.sort_unstable_by(|a, b| b.cmp(a));
    let mut jobs = Vec::with_capacity(found.len());
    for pos in &found {
        if let Some(entry) = entry_at(view, tag, pos).await? {
            jobs.push(entry);
        }
    }
    let next = if scanned.more {
        found.last().cloned()
    } else {
        None
    };
    Ok(TaggedPage { jobs, next })
}

/// The job at the index position `pos` of `tag`, if a record of it
/// carries that entry.
async fn entry_at(view: &QueueView, tag: &str, pos: &str) -> Result<Option<TaggedEntry>> {
    let Some((_, run_id)) = pos.split_once('/') else {
        return Ok(None);
    };
    if !crate::keys::is_valid_id(run_id) {
        return Ok(None);
    }
    let carries = |tags: &Option<Tags>| -> Option<Tags> {
        tags.as_ref()
            .filter(|t| tag_position(t.at_ms, run_id) == pos && t.names.iter().any(|n| n == tag))
            .cloned()
    };
    if let Some(run) = inspect::run_record(view, run_id).await? {
        let Some(tags) = carries(&run.tags) else {
            return Ok(None);
        };
        let queue_job = view.job_record(&run.job_id).await?;
        return Ok(Some(TaggedEntry {
            run_id: run_id.to_string(),
            state: inspect::live_state_of(queue_job.as_ref()),
            queue_job,
            run: Some(run),
            outcome: None,
            tags,
        }));
    }
    // It may have ended between the reads: its outcome record was written
    // with the deletion of its run record.
    let Some(rec) = inspect::outcome_record(view, run_id).await? else {
        return Ok(None);
    };
    let Some(tags) = carries(&rec.tags) else {
        return Ok(None);
    };
    Ok(Some(TaggedEntry {
        run_id: run_id.to_string(),
        state: JobState::of(&rec.outcome),
        queue_job: None,
        run: None,
        outcome: Some(rec),
        tags,
    }))
}

/// The pages of one tag read in several stores (a shard set: each asked
/// for `limit` jobs before the same `before`) as one page: their jobs
/// newest first, at most `limit`, and the position to go on from. A store
/// with more to list bounds the page at its own cursor, so no job of
/// it between that cursor and the page's end is passed over.
pub fn merge(pages: Vec<TaggedJobs>, limit: usize) -> TaggedJobs {
    let limit = limit.clamp(1, MAX_PAGE);
    let floor = pages.iter().filter_map(|p| p.next.clone()).max();
    let mut jobs: Vec<(String, TaggedJob)> = pages
        .into_iter()
        .flat_map(|p| p.jobs)
        .map(|j| (tag_position(j.created_at_ms, &j.id), j))
        .filter(|(pos, _)| floor.as_ref().is_none_or(|f| pos >= f))
        .collect();
    jobs.sort_by(|a, b| b.0.cmp(&a.0));
    let next = if jobs.len() > limit {
        jobs.truncate(limit);
        jobs.last().map(|(pos, _)| pos.clone())
    } else {
        floor
    };
    TaggedJobs {
        jobs: jobs.into_iter().map(|(_, j)| j).collect(),
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(at: u64, id: &str) -> TaggedJob {
        TaggedJob {
            id: id.into(),
            job_type: "t".into(),
            state: JobState::Queued,
            created_at_ms: at,
            finished_at_ms: None,
            tags: vec!["x".into()],
        }
    }

    fn ids(page: &TaggedJobs) -> Vec<&str> {
        page.jobs.iter().map(|j| j.id.as_str()).collect()
    }

    #[test]
    fn pages_of_several_stores_merge_newest_first_without_passing_a_job_over() {
        // Store a has more than its page: nothing older than its cursor is
        // listed from b, and the next page starts at a's cursor.
        let a = TaggedJobs {
            jobs: vec![job(10, "A10"), job(9, "A9")],
            next: Some(tag_position(9, "A9")),
        };
        let b = TaggedJobs {
            jobs: vec![job(8, "B8"), job(7, "B7")],
            next: None,
        };
        let page = merge(vec![a, b], 4);
        assert_eq!(ids(&page), ["A10", "A9"]);
        assert_eq!(page.next, Some(tag_position(9, "A9")));
        // Cut at the limit: the next page starts after the last listed.
        let a = TaggedJobs {
            jobs: vec![job(10, "A10"), job(6, "A6")],
            next: None,
        };
        let b = TaggedJobs {
            jobs: vec![job(8, "B8"), job(7, "B7")],
            next: None,
        };
        let page = merge(vec![a, b], 3);
        assert_eq!(ids(&page), ["A10", "B8", "B7"]);
        assert_eq!(page.next, Some(tag_position(7, "B7")));
        let page = merge(
            vec![TaggedJobs {
                jobs: vec![],
                next: None,
            }],
            3,
        );
        assert!(page.jobs.is_empty() && page.next.is_none());
    }
}
