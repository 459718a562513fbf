//! Which partition queues this process has marked (#37 §3), so that a
//! submission to a busy value does not write its mark again.
//!
//! Every job created on a partition queue must leave the queue marked
//! (`keys::partition_mark_key`), so that the type's pool lists it at its
//! next start. Writing the mark in every submission's transaction makes
//! concurrent submissions to one value conflict on that key (taquba's
//! transactions are snapshot-isolated: two that write one key cannot both
//! commit), which measured 2.3× slower submission to one busy value
//! (`benches/fairness`). So a submission writes the mark only while this
//! process does not know it is written; once a submission that wrote it
//! committed, later ones skip it.
//!
//! A skipped mark must never let a pool's forget check delete the mark of
//! a queue a job is landing on. The check (`exec::rate::forget::check`)
//! first says the mark is no longer known here (`Marks::unmark`), then
//! waits until no submission that skipped it is still in flight, and only
//! then reads the mark and the queue's counts: a skipping submission either
//! committed before the counts were read (they show its job), or started
//! after the unmark and wrote the mark itself (the compare fails). The
//! handshake is two sequentially consistent atomics per queue: a submitter
//! counts itself in flight and then reads "marked"; the check clears
//! "marked" and then reads the count; one of the two sees the other.
//!
//! This is a cache shared by the submitting tasks and the pools' checks,
//! not engine state: losing it (a restart) only means the next submission
//! to each value writes its mark again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use dashmap::DashMap;

/// Partition queues and what this process knows of their marks.
#[derive(Debug, Default)]
pub(crate) struct Marks(DashMap<String, Arc<MarkState>>);

#[derive(Debug, Default)]
pub(crate) struct MarkState {
    /// A submission that wrote the mark committed, and no check unmarked
    /// it since.
    marked: AtomicBool,
    /// Submissions that skipped the mark and have not finished.
    in_flight: AtomicUsize,
}

/// How a submission treats its queue's mark.
#[derive(Debug)]
pub(crate) enum Marking {
    /// Not a partition queue.
    None,
    /// The mark is known written: skipped, and the submission counts as in
    /// flight until this is dropped (after its commit, or its failure).
    Skipped {
        /// Held for its drop.
        _in_flight: InFlight,
    },
    /// The submission writes the mark: once it committed, call
    /// [`Marking::committed`].
    Writes(Arc<MarkState>),
}

/// A skipping submission in flight (dropped when it ended, however).
#[derive(Debug)]
pub(crate) struct InFlight(Arc<MarkState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, SeqCst);
    }
}

impl Marking {
    /// Whether the submission must write the mark.
    pub(crate) fn writes(&self) -> bool {
        matches!(self, Marking::Writes(_))
    }

    /// The submission committed: a mark it wrote is known from now on.
    pub(crate) fn committed(self) {
        if let Marking::Writes(state) = self {
            state.marked.store(true, SeqCst);
        }
    }
}

impl Marks {
    /// A submission to the partition queue `queue` starts.
    pub(crate) fn begin(&self, queue: &str) -> Marking {
        let state = self.0.entry(queue.to_string()).or_default().clone();
        state.in_flight.fetch_add(1, SeqCst);
        if state.marked.load(SeqCst) {
            Marking::Skipped {
                _in_flight: InFlight(state),
            }
        } else {
            state.in_flight.fetch_sub(1, SeqCst);
            Marking::Writes(state)
        }
    }

    /// A forget check of `queue` starts: its mark is no longer known here
    /// (the next submission writes it), and this waits until every
    /// submission that skipped it has ended, at most `limit`; `false` if
    /// one was still in flight then (the check keeps the queue).
    pub(crate) async fn unmark(&self, queue: &str, limit: Duration) -> bool {
        let Some(state) = self.0.get(queue).map(|s| s.clone()) else {
            return true;
        };
        state.marked.store(false, SeqCst);
        let deadline = tokio::time::Instant::now() + limit;
        while state.in_flight.load(SeqCst) > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        true
    }

    /// `queue` was forgotten: its entry goes, unless a submission uses it.
    pub(crate) fn forget(&self, queue: &str) {
        self.0.remove_if(queue, |_, s| {
            !s.marked.load(SeqCst) && s.in_flight.load(SeqCst) == 0
        });
    }

    /// Queues with an entry (for tests of what is kept).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_submission_writes_the_mark_and_later_ones_skip_it() {
        let marks = Marks::default();
        let first = marks.begin("q..p1");
        assert!(first.writes());
        // Two at once before the first committed: both write.
        assert!(marks.begin("q..p1").writes());
        first.committed();
        let later = marks.begin("q..p1");
        assert!(!later.writes());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unmark_waits_for_skipping_submissions_and_the_next_one_writes() {
        let marks = Marks::default();
        marks.begin("q..p1").committed();
        let skipping = marks.begin("q..p1");
        assert!(!skipping.writes());
        // Still in flight: the check gives up at its limit.
        assert!(!marks.unmark("q..p1", Duration::from_millis(50)).await);
        // After the unmark, a new submission writes the mark.
        assert!(marks.begin("q..p1").writes());
        drop(skipping);
        assert!(marks.unmark("q..p1", Duration::from_millis(50)).await);
        marks.forget("q..p1");
        assert_eq!(marks.len(), 0);
        // An unknown queue needs no wait.
        assert!(marks.unmark("q..p2", Duration::ZERO).await);
    }
}
