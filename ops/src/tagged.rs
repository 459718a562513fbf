//! A tag's jobs (`gaffer jobs --tag`, the dashboard's search): the tag's
//! index entries newest first, a page at a time, each job read by id
//! (`gaffer_layout::tags::listing::page`): never a scan of the other jobs.

use gaffer_layout::records::JobState;
use gaffer_layout::tags::listing::{self, TaggedEntry};

use crate::error::OpsError;
use crate::listing::ListedState;
use crate::queries::{outcome_error, outcome_state, queue_row};
use crate::report::{JobRow, Jobs};
use crate::store::Store;

/// How a page of a tag's jobs is named as a cursor (`--after`): `tag:` and
/// the index position it ends at.
const CURSOR: &str = "tag:";

impl Store {
    /// `gaffer jobs --tag TAG`: the jobs tagged `tag`, in any state, newest
    /// (by creation) first, up to `limit` (1 to 1000), after `after` (a
    /// previous page's `next`). A tag no job can have is
    /// `EngineError::InvalidTag`; a cursor no page printed is `BadCursor`.
    pub async fn jobs_by_tag(
        &self,
        tag: &str,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Jobs, OpsError> {
        let before = match after {
            Some(c) => Some(
                c.strip_prefix(CURSOR)
                    .filter(|pos| !pos.is_empty())
                    .ok_or_else(|| OpsError::BadCursor(c.to_string()))?,
            ),
            None => None,
        };
        let page = listing::page(self.view(), tag, before, limit).await?;
        let mut jobs: Vec<JobRow> = page.jobs.iter().map(tagged_row).collect();
        for job in &mut jobs {
            job.error = job.error.take().map(|e| self.keyring().show_text(&e));
        }
        let next = page.next.map(|pos| format!("{CURSOR}{pos}"));
        Ok(Jobs {
            jobs,
            more: next.is_some(),
            next,
        })
    }
}

/// A listing row of a tagged job: its queue job's while it lives, its
/// outcome record's once it ended.
pub fn tagged_row(entry: &TaggedEntry) -> JobRow {
    if let Some(rec) = &entry.outcome {
        return JobRow {
            id: entry.run_id.clone(),
            job_type: rec.job_type.clone(),
            state: outcome_state(&rec.outcome),
            attempts: rec.attempts,
            at_ms: Some(rec.finished_at_ms),
            batch: None,
            key: None,
            error: outcome_error(&rec.outcome),
            shard: None,
        };
    }
    match &entry.queue_job {
        Some(job) => {
            let mut row = queue_row(job, job.status);
            row.id = entry.run_id.clone();
            // A settlement in progress (its queue job ended, its run
            // record not yet gone) shows as running, as the job's state.
            if entry.state == JobState::Running {
                row.state = ListedState::Running;
            }
            row
        }
        None => JobRow {
            id: entry.run_id.clone(),
            job_type: entry.job_type().to_string(),
            state: ListedState::Queued,
            attempts: 0,
            at_ms: Some(entry.tags.at_ms),
            batch: None,
            key: None,
            error: None,
            shard: None,
        },
    }
}
