//! The listing of jobs (`gaffer jobs`): live jobs queue by queue, then
//! finished ones newest first through the finished-jobs index, a page at a
//! time from a cursor.

use gaffer_layout::inspect::{self, EndedState};
use gaffer_layout::keys;
use taquba::JobStatus;

use crate::error::OpsError;
use crate::queries::{outcome_error, outcome_state, queue_row};
use crate::report::{JobRow, Jobs, QueueRow, Stats};
use crate::store::Store;
use std::collections::HashMap;

/// A job's state as a listing shows it, and a state to list jobs in
/// (`gaffer jobs --state`, the dashboard's tabs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListedState {
    /// Waiting to be claimed.
    Queued,
    /// Waiting for its time (run_at or a retry's backoff), or for a signal.
    Scheduled,
    /// Waiting for a signal (or its timeout): of the scheduled jobs, those
    /// parked by `JobContext::wait_signal`.
    Waiting,
    /// Claimed by a handler.
    Running,
    /// Dead-lettered (failed or cancelled).
    Dead,
    /// Ended with an output.
    Succeeded,
    /// Ended with a failure.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// The name the filters have had (a state to list jobs in).
pub type StateFilter = ListedState;

impl ListedState {
    /// Every state, in the order of a listing merged over shards.
    pub const ALL: [ListedState; 8] = [
        Self::Running,
        Self::Queued,
        Self::Scheduled,
        Self::Waiting,
        Self::Dead,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Its name, as the command, the dashboard and `--json` show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Scheduled => "scheduled",
            Self::Waiting => "waiting",
            Self::Running => "running",
            Self::Dead => "dead",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether the job has ended (its outcome is recorded).
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// Whether it ended without succeeding (failed, cancelled or dead):
    /// what a retry takes back.
    pub fn ended_unsuccessfully(self) -> bool {
        matches!(self, Self::Failed | Self::Cancelled | Self::Dead)
    }

    /// Whether the job is still to run or running: what a cancel can stop.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            Self::Queued | Self::Scheduled | Self::Waiting | Self::Running
        )
    }

    /// Its place in a listing merged over shards: live jobs first (running,
    /// queued, scheduled or waiting, dead), then finished ones.
    pub fn rank(self) -> u8 {
        match self {
            Self::Running => 0,
            Self::Queued => 1,
            Self::Scheduled | Self::Waiting => 2,
            Self::Dead => 3,
            Self::Succeeded | Self::Failed | Self::Cancelled => 4,
        }
    }
}

impl std::fmt::Display for ListedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ListedState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "`{s}` is not a state: one of {}",
                    Self::ALL.map(Self::as_str).join(", ")
                )
            })
    }
}

impl serde::Serialize for ListedState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Store {
    /// `gaffer jobs`: live jobs (running, queued, scheduled; or dead with
    /// `--state dead`) queue by queue, then finished jobs newest first
    /// through the finished-jobs index; from `after`, a previous page's
    /// cursor.
    pub async fn jobs(
        &self,
        state: Option<StateFilter>,
        job_type: Option<&str>,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Jobs, OpsError> {
        self.list(state, job_type, limit, after, None).await
    }

    /// [`Self::jobs`] with each queue's counters taken from `stats`, what
    /// [`Self::stats`] answered for this store a moment ago (the dashboard's
    /// jobs page reads them once for its tabs and its listing): the
    /// store's counters are not read again. They say which (queue, state)
    /// to scan (none that they count empty), as in [`Self::jobs`]; a job
    /// that moved since is listed where the scan finds it.
    ///
    /// Beside a writer that has not flushed its memtable for a while, each
    /// read of the counters folds every change to them since its last flush
    /// (taquba's counters are merge operands, and the queues' list is a scan
    /// of them): at 4 000 unflushed WAL objects (about 2 000 jobs) `stats`
    /// took 11–16 ms at p50 on a shared 2-vCPU machine (`web/benches/wal.rs`).
    pub async fn jobs_counted(
        &self,
        stats: &Stats,
        state: Option<StateFilter>,
        job_type: Option<&str>,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Jobs, OpsError> {
        self.list(state, job_type, limit, after, Some(stats)).await
    }

    async fn list(
        &self,
        state: Option<StateFilter>,
        job_type: Option<&str>,
        limit: usize,
        after: Option<&str>,
        given: Option<&Stats>,
    ) -> Result<Jobs, OpsError> {
        let limit = limit.clamp(1, 1000);
        let live: &[JobStatus] = match state {
            None => &[JobStatus::Claimed, JobStatus::Pending, JobStatus::Scheduled],
            Some(StateFilter::Running) => &[JobStatus::Claimed],
            Some(StateFilter::Queued) => &[JobStatus::Pending],
            Some(StateFilter::Scheduled | StateFilter::Waiting) => &[JobStatus::Scheduled],
            Some(StateFilter::Dead) => &[JobStatus::Dead],
            Some(_) => &[],
        };
        let ended: &[EndedState] = match state {
            None => &EndedState::ALL,
            Some(StateFilter::Succeeded) => &[EndedState::Succeeded],
            Some(StateFilter::Failed) => &[EndedState::Failed],
            Some(StateFilter::Cancelled) => &[EndedState::Cancelled],
            Some(_) => &[],
        };
        let from = match after {
            Some(c) => Cursor::parse(c)?,
            None => Cursor::Live {
                phase: 0,
                queue: String::new(),
                at: None,
            },
        };
        let mut jobs = Vec::new();
        let mut next = None;
        if let Cursor::Live {
            phase: from_phase,
            queue: from_queue,
            at: from_at,
        } = &from
        {
            // Each queue's counters: a (queue, state) they count empty is
            // not scanned. Beside a store of many settled jobs, a scan of an
            // empty state steps over what they left in its key space until
            // SlateDB compacts it (0.1–0.2 s per state after 100 000 jobs).
            let mut counts: HashMap<String, Counts> = HashMap::new();
            let queues: Vec<String> = match given {
                Some(stats) => stats
                    .queues
                    .iter()
                    .filter(|row| row.kind != "intake" && self.of_type(&row.queue, job_type))
                    .map(|row| {
                        counts.insert(row.queue.clone(), Counts::of_row(row));
                        row.queue.clone()
                    })
                    .collect(),
                None => self
                    .queues(job_type)
                    .await?
                    .into_iter()
                    .map(|(queue, _, _)| queue)
                    .collect(),
            };
            // In name order, as a cursor's `queue` is compared.
            let mut queues = queues;
            queues.sort();
            queues.dedup();
            'live: for (phase, &status) in live.iter().enumerate().skip(*from_phase) {
                for queue in &queues {
                    let first = phase == *from_phase && queue == from_queue;
                    if phase == *from_phase && queue < from_queue {
                        continue;
                    }
                    let s = match counts.get(queue) {
                        Some(s) => *s,
                        None => {
                            let s = Counts::of_view(&self.view().stats(queue).await?);
                            counts.insert(queue.clone(), s);
                            s
                        }
                    };
                    if s.of(status) <= 0 {
                        continue;
                    }
                    let at = if first { from_at.as_deref() } else { None };
                    if jobs.len() == limit {
                        // Full: is there anything after it?
                        let probe = self.view().list_jobs(queue, status, at, 1).await?;
                        if !probe.jobs.is_empty() {
                            next = Some(Cursor::Live {
                                phase,
                                queue: queue.clone(),
                                at: at.map(<[u8]>::to_vec),
                            });
                            break 'live;
                        }
                        continue;
                    }
                    let page = self
                        .view()
                        .list_jobs(queue, status, at, limit - jobs.len())
                        .await?;
                    let waiting_only = state == Some(StateFilter::Waiting);
                    jobs.extend(
                        page.jobs
                            .iter()
                            .filter(|j| !waiting_only || j.signal_wait)
                            .map(|j| queue_row(j, status)),
                    );
                    if let Some(at) = page.next_cursor {
                        next = Some(Cursor::Live {
                            phase,
                            queue: queue.clone(),
                            at: Some(at),
                        });
                        break 'live;
                    }
                }
            }
        }
        if next.is_none() && !ended.is_empty() {
            if !inspect::ended_index_ready(self.view()).await? {
                return Err(OpsError::IndexNotReady);
            }
            let before = match &from {
                Cursor::Ended(pos) => Some(pos.as_str()),
                Cursor::Live { .. } => None,
            };
            let types = job_type.map(|t| [t]);
            let types = types.as_ref().map(|t| &t[..]);
            let room = limit - jobs.len();
            let page = inspect::ended_page(self.view(), types, ended, before, room.max(1)).await?;
            if room == 0 {
                if !page.jobs.is_empty() {
                    next = Some(Cursor::Ended(before.unwrap_or_default().to_string()));
                }
            } else {
                next = page.next.map(Cursor::Ended);
                jobs.extend(page.jobs.into_iter().map(|(id, rec)| JobRow {
                    id,
                    job_type: rec.job_type.clone(),
                    state: outcome_state(&rec.outcome),
                    attempts: rec.attempts,
                    at_ms: Some(rec.finished_at_ms),
                    batch: None,
                    key: None,
                    error: outcome_error(&rec.outcome),
                    shard: None,
                }));
            }
        }
        let next = next.map(|c| c.render());
        // Errors as the keyring shows them (`encrypted (key ID)` where it
        // cannot open them).
        for job in &mut jobs {
            job.error = job.error.take().map(|e| self.keyring().show_text(&e));
        }
        Ok(Jobs {
            jobs,
            more: next.is_some(),
            next,
        })
    }
}

/// A queue's counters, as the listing asks them: from the view's
/// (`QueueView::stats`) or from a row of [`Stats`].
#[derive(Debug, Clone, Copy)]
struct Counts {
    claimed: i64,
    pending: i64,
    scheduled: i64,
    dead: i64,
    done: i64,
}

impl Counts {
    fn of_view(s: &taquba::QueueStats) -> Self {
        Self {
            claimed: s.claimed,
            pending: s.pending,
            scheduled: s.scheduled,
            dead: s.dead,
            done: s.done,
        }
    }

    fn of_row(r: &QueueRow) -> Self {
        Self {
            claimed: r.running,
            pending: r.pending,
            scheduled: r.scheduled,
            dead: r.dead,
            done: r.done,
        }
    }

    fn of(self, status: JobStatus) -> i64 {
        match status {
            JobStatus::Claimed => self.claimed,
            JobStatus::Pending => self.pending,
            JobStatus::Scheduled => self.scheduled,
            JobStatus::Dead => self.dead,
            JobStatus::Done => self.done,
        }
    }
}

impl Store {
    /// Whether `queue` is one of `job_type`'s (its own or a partition
    /// queue of it, a job type's or a pipeline's), as
    /// [`Store::queues`] picks them; any with `None`.
    fn of_type(&self, queue: &str, job_type: Option<&str>) -> bool {
        let Some(t) = job_type else {
            return true;
        };
        let base = keys::partition_base(queue).unwrap_or(queue);
        base == keys::queue_for(&self.jobs_prefix, t)
            || base == keys::queue_for(&self.bulk_prefix, t)
    }
}

/// Where a page of `gaffer jobs` starts: printed as the previous page's
/// `next`, passed back as `--after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cursor {
    /// In the live part: the `phase`-th state of the listing, at `queue`,
    /// from the queue's own listing cursor `at` (its start with `None`).
    Live {
        phase: usize,
        queue: String,
        at: Option<Vec<u8>>,
    },
    /// In the finished part, before this index position (from the newest
    /// when empty).
    Ended(String),
}

impl Cursor {
    /// The cursor as printed (`next`).
    pub(crate) fn render(&self) -> String {
        match self {
            Self::Live { phase, queue, at } => format!(
                "live:{phase}:{queue}:{}",
                at.as_deref().map(keys::hex).unwrap_or_default()
            ),
            Self::Ended(pos) => format!("ended:{pos}"),
        }
    }

    /// A printed cursor read back; [`OpsError::BadCursor`] if no page printed it.
    pub(crate) fn parse(s: &str) -> Result<Self, OpsError> {
        let bad = || OpsError::BadCursor(s.to_string());
        if let Some(pos) = s.strip_prefix("ended:") {
            return Ok(Self::Ended(pos.to_string()));
        }
        let rest = s.strip_prefix("live:").ok_or_else(bad)?;
        let mut parts = rest.splitn(3, ':');
        let phase = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let queue = parts.next().ok_or_else(bad)?.to_string();
        let at = parts.next().ok_or_else(bad)?;
        let at = if at.is_empty() {
            None
        } else {
            Some(unhex(at).ok_or_else(bad)?)
        };
        Ok(Self::Live { phase, queue, at })
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        for c in [
            Cursor::Live {
                phase: 2,
                queue: "jobs.a-b".into(),
                at: Some(vec![0, 0xff, 0x10]),
            },
            Cursor::Live {
                phase: 0,
                queue: String::new(),
                at: None,
            },
            Cursor::Ended("0000018c/01ABC".into()),
            Cursor::Ended(String::new()),
        ] {
            assert_eq!(Cursor::parse(&c.render()).unwrap(), c);
        }
        for bad in ["", "live:x:q:", "live:1:q:zz", "live:1:q:abc", "other:1"] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            failure_persistence: None,
            rng_seed: proptest::test_runner::RngSeed::Fixed(
                std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(36),
            ),
            ..Default::default()
        })]

        /// `--after` as typed (or a dashboard's `after`): a cursor that
        /// prints as itself read back, or `BadCursor` naming it.
        #[test]
        fn any_cursor_text_reads_back_or_is_refused(
            text in proptest::prop_oneof![
                proptest::prelude::any::<String>(),
                "live:[0-9]{0,22}:[a-z.:]{0,8}:[0-9a-fA-F\\u{e9}]{0,9}",
                "ended:.{0,24}",
            ],
        ) {
            match Cursor::parse(&text) {
                Ok(cursor) => proptest::prop_assert_eq!(Cursor::parse(&cursor.render()).ok(), Some(cursor)),
                Err(OpsError::BadCursor(named)) => proptest::prop_assert_eq!(named, text),
                Err(other) => proptest::prop_assert!(false, "not BadCursor: {other:?}"),
            }
        }
    }
}
