//! Each queue's oldest ready job, as `gaffer stats` and the dashboard's
//! Queues page show it beside the counts (#39 §6: with the ready and
//! running counts, an autoscaler's signals): the queue's first pending job
//! in claim order (priority, then enqueue order; without priorities, its
//! oldest), the one taquba hands out next. One row of the view read per
//! queue that holds a ready job; none for the others.
//!
//! Through a replaying reader (the dashboard, `gaffer stats TYPE`) the
//! view is the whole state. `gaffer stats` reads the flushed state only
//! ([`crate::Reading::Flushed`]): a job ready there may have been claimed
//! since, and a job enqueued since is not there. So it also takes, from the
//! unflushed WAL, the changes to the ready jobs ([`PendingChanges`]: each
//! entry added or gone since), and the first ready job is the first of two:
//! the first entry the WAL added that is still there, and the flushed
//! state's first entry the WAL did not remove. The flushed entries read are
//! at most one more than the WAL removed from that queue.

use std::collections::BTreeMap;

use taquba::JobStatus;

use crate::error::OpsError;
use crate::report::Stats;
use crate::store::Store;
use crate::unflushed::{PendingChanges, PendingKey};

/// The most flushed entries one page of the walk past removed ones reads.
const PAGE: usize = 1_000;

impl Store {
    /// Fill the oldest ready job of each row that has a ready job, as of
    /// `now_ms`: from the view, with `wal`'s changes over it (`None`: the
    /// view is whole).
    pub(crate) async fn oldest_ready(
        &self,
        stats: &mut Stats,
        wal: Option<&PendingChanges>,
        now_ms: u64,
    ) -> Result<(), OpsError> {
        for row in &mut stats.queues {
            if row.pending <= 0 {
                continue;
            }
            let first = match wal {
                None => self
                    .first_job(&row.queue, JobStatus::Pending)
                    .await?
                    .map(|j| j.enqueued_at),
                Some(wal) => self
                    .first_ready(&row.queue, wal.of(&row.queue))
                    .await?
                    .map(|k| k.enqueued_at),
            };
            if let Some(at) = first {
                row.oldest_ready_ms = Some(at);
                row.oldest_ready_age_ms = Some(now_ms.saturating_sub(at));
            }
        }
        Ok(())
    }

    /// The first job of `queue` in `status` (one row read).
    pub(crate) async fn first_job(
        &self,
        queue: &str,
        status: JobStatus,
    ) -> Result<Option<taquba::JobRecord>, OpsError> {
        let page = self.view().list_jobs(queue, status, None, 1).await?;
        Ok(page.jobs.into_iter().next())
    }

    /// The first ready job of `queue` in claim order, of the flushed view
    /// with `changes` (the WAL's to the queue's ready jobs) over it.
    async fn first_ready(
        &self,
        queue: &str,
        changes: Option<&BTreeMap<PendingKey, bool>>,
    ) -> Result<Option<PendingKey>, OpsError> {
        let empty = BTreeMap::new();
        let changes = changes.unwrap_or(&empty);
        let added = changes
            .iter()
            .find(|(_, there)| **there)
            .map(|(k, _)| k.clone());
        let removed = changes.values().filter(|there| !**there).count();
        let mut kept = None;
        let mut cursor: Option<Vec<u8>> = None;
        'pages: loop {
            let page = self
                .view()
                .list_jobs(
                    queue,
                    JobStatus::Pending,
                    cursor.as_deref(),
                    (removed + 1).min(PAGE),
                )
                .await?;
            for job in &page.jobs {
                let key = PendingKey::of(job);
                if added.as_ref().is_some_and(|a| *a < key) {
                    // What the WAL added comes first.
                    break 'pages;
                }
                if changes.get(&key) != Some(&false) {
                    kept = Some(key);
                    break 'pages;
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(match (added, kept) {
            (Some(a), Some(k)) => Some(a.min(k)),
            (a, k) => a.or(k),
        })
    }
}
