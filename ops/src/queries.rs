//! Queries: what each read of the store answers, one file per subject:
//! a job (`job.rs`), the failed and dead (`ended.rs`), batches and periodic
//! jobs (`batches.rs`), each queue's oldest ready job (`ready.rs`), the
//! stats kept across rounds (`watch.rs`, `gaffer stats --watch`); the
//! store's whole state (stats, paused types, the writer's health) here.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use gaffer_layout::EngineError;
use gaffer_layout::inspect;
use gaffer_layout::keys;
use gaffer_layout::records;
use gaffer_layout::records::{ItemMarker, Outcome, OutcomeRecord, OutputRef, PastAttempt};
use taquba::{JobRecord, JobStatus};

use crate::error::OpsError;
use crate::listing::StateFilter;
use crate::report::{
    AttemptRow, BatchRow, Batches, Dead, DeadRow, Health, JobDetail, JobRow, Periodic, PeriodicRow,
    QueueRow, RetryPreview, ShardOwnerRow, Stats,
};
use crate::store::{Source, Store};
use crate::unflushed::{AtStart, Counter, Newest};
use gaffer_layout::workflow::{HEADER_STEP, HEADER_WORKFLOW};

mod batches;
mod ended;
mod job;
mod ready;
mod recent;
mod watch;
pub use recent::SNAPSHOT_EVERY_MS;

pub use ended::{EndedScan, FAILED_KEYS_SHOWN};
use job::*;
pub use job::{json_of, output, output_with};
pub(crate) use job::{outcome_error, outcome_state, queue_row};
pub use watch::{REBASE_AFTER, Round, StatsWatch};

impl Store {
    /// `gaffer stats`: each queue's counters and its oldest ready job; read
    /// [`crate::Reading::Flushed`], the flushed counters with the WAL's
    /// changes to them applied (the same counts as a replaying reader's),
    /// and the first ready job of each queue that has one from the flushed
    /// state with the WAL's changes to the ready jobs applied
    /// (`queries/ready.rs`). The dashboard reads it through a replaying
    /// reader, whose state is whole.
    pub async fn stats(&self, exact: bool) -> Result<Stats, OpsError> {
        let above = self.activity().map_or(0, |a| a.durable_seq);
        let (mut stats, pending) = match &self.unflushed {
            // Beside a live engine, its latest snapshot of the counters is
            // among the newest WAL objects: read back to it, not through
            // every one.
            Some(u) if !exact => match u.newest_or_counters(keys::STATS_KEY, above).await? {
                Newest::Found { value, since } => {
                    let snapshot: records::StatsSnapshot =
                        records::decode(keys::STATS_KEY, &value)?;
                    (self.rows_from_snapshot(snapshot, &since), None)
                }
                Newest::Counters(changes, pending) => {
                    (self.rows_from_counters(&changes).await?, Some(pending))
                }
            },
            Some(u) => {
                let (changes, pending) = u.changes(above).await?;
                (self.rows_from_counters(&changes).await?, Some(pending))
            }
            None => (self.rows_from_counters(&BTreeMap::new()).await?, None),
        };
        let pending = match (&self.unflushed, pending) {
            (Some(u), None) if stats.queues.iter().any(|r| r.pending > 0) => {
                Some(u.pending(above).await?)
            }
            (_, pending) => pending,
        };
        self.oldest_ready(&mut stats, pending.as_ref(), crate::format::now_ms())
            .await?;
        Ok(stats)
    }

    /// The rows of every queue from the flushed counters with `changes`
    /// (the WAL's past them) applied.
    async fn rows_from_counters(
        &self,
        changes: &BTreeMap<(String, String), Counter>,
    ) -> Result<Stats, OpsError> {
        let more = changes.keys().map(|(queue, _)| queue.clone()).collect();
        let mut queues = Vec::new();
        for (queue, kind, name) in self.queues_and(None, more).await? {
            let s = self.view().stats(&queue).await?;
            let count = |metric: &str, flushed: i64| {
                changes
                    .get(&(queue.clone(), metric.to_string()))
                    .map_or(flushed, |c| c.over(flushed))
            };
            queues.push(QueueRow {
                pending: count("pending", s.pending),
                scheduled: count("scheduled", s.scheduled),
                running: count("claimed", s.claimed),
                done: count("done", s.done),
                dead: count("dead", s.dead),
                queue,
                kind,
                name,
                oldest_ready_ms: None,
                oldest_ready_age_ms: None,
            });
        }
        Ok(Stats {
            queues,
            snapshot_at_ms: None,
        })
    }

    /// The rows of the engine's counters snapshot with the changes
    /// committed after it (`since`) applied.
    fn rows_from_snapshot(
        &self,
        snapshot: records::StatsSnapshot,
        since: &BTreeMap<(String, String), Counter>,
    ) -> Stats {
        let mut counts: BTreeMap<String, records::QueueCounts> = snapshot
            .queues
            .into_iter()
            .map(|c| (c.queue.clone(), c))
            .collect();
        // A queue created since has only changes.
        for (queue, _) in since.keys() {
            counts
                .entry(queue.clone())
                .or_insert_with(|| records::QueueCounts {
                    queue: queue.clone(),
                    pending: 0,
                    claimed: 0,
                    scheduled: 0,
                    done: 0,
                    dead: 0,
                });
        }
        let queues = counts
            .into_values()
            .filter_map(|c| {
                let (kind, name) = self.classify(&c.queue)?;
                let count = |metric: &str, at: i64| {
                    since
                        .get(&(c.queue.clone(), metric.to_string()))
                        .map_or(at, |d| d.over(at))
                };
                Some(QueueRow {
                    pending: count("pending", c.pending),
                    scheduled: count("scheduled", c.scheduled),
                    running: count("claimed", c.claimed),
                    done: count("done", c.done),
                    dead: count("dead", c.dead),
                    queue: c.queue,
                    kind,
                    name,
                    oldest_ready_ms: None,
                    oldest_ready_age_ms: None,
                })
            })
            .collect();
        Stats {
            queues,
            snapshot_at_ms: Some(snapshot.at_ms),
        }
    }

    /// The job types an operator paused (`gaffer pause`), by name.
    pub async fn paused(&self) -> Result<Vec<String>, OpsError> {
        let page = self
            .view()
            .kv_scan(
                keys::PAUSED_PREFIX,
                (
                    std::ops::Bound::<Vec<u8>>::Unbounded,
                    std::ops::Bound::Unbounded,
                ),
                taquba::KvOrder::Ascending,
                1000,
            )
            .await?;
        Ok(page
            .entries
            .into_iter()
            .map(|(_, name)| String::from_utf8_lossy(&name).into_owned())
            .collect())
    }

    /// `gaffer health`.
    pub async fn health(&self) -> Result<Health, OpsError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let (activity, flushed) = match &self.reader {
            Source::Reader(r) => (r.last_store_activity(), r.writer_heartbeat().await?),
            // Through the writer's own view this process is the writer, and
            // a read that answered shows it is open: alive, with no beat
            // read (taquba keeps the writer's beat to its readers).
            Source::Live(_) => return self.live_health(now_ms).await,
        };
        // Read flushed: the newest beat is in the WAL past the flushed
        // state if any is, else the flushed one.
        let (beat, durable_seq, unflushed) = match &self.unflushed {
            None => (flushed, activity.durable_seq, None),
            Some(u) => {
                let (found, newest_seq) = u.newest_beat().await?;
                let beat = match found {
                    Some(b) if b.seq > activity.durable_seq => b.beat,
                    _ => flushed,
                };
                let durable = newest_seq.unwrap_or(0).max(activity.durable_seq);
                (beat, durable, Some(u.objects()))
            }
        };
        let (status, alive) = match &beat {
            None => ("absent", false),
            Some(b) if b.closed => ("closed", false),
            Some(b) if b.writer_epoch < activity.writer_epoch => ("superseded", false),
            Some(b) => {
                let allowed = (b.interval.as_millis() as u64).saturating_mul(3).max(1000);
                if now_ms.saturating_sub(b.at_ms) <= allowed {
                    ("alive", true)
                } else {
                    ("stale", false)
                }
            }
        };
        Ok(Health {
            alive,
            status,
            now_ms,
            heartbeat_at_ms: beat.as_ref().map(|b| b.at_ms),
            heartbeat_age_ms: beat.as_ref().map(|b| now_ms.saturating_sub(b.at_ms)),
            heartbeat_interval_ms: beat.as_ref().map(|b| b.interval.as_millis() as u64),
            heartbeat_writer_epoch: beat.as_ref().map(|b| b.writer_epoch),
            writer_epoch: activity.writer_epoch,
            last_flush_at_ms: activity.last_flush_at_ms,
            durable_seq,
            unflushed_wal_objects: unflushed,
            shard_owner: self.shard_owner().await?,
        })
    }

    /// `health` through the writer's own view ([`Source::Live`]).
    async fn live_health(&self, now_ms: u64) -> Result<Health, OpsError> {
        Ok(Health {
            alive: true,
            status: "alive",
            now_ms,
            heartbeat_at_ms: None,
            heartbeat_age_ms: None,
            heartbeat_interval_ms: None,
            heartbeat_writer_epoch: None,
            writer_epoch: 0,
            last_flush_at_ms: None,
            durable_seq: 0,
            unflushed_wal_objects: None,
            shard_owner: self.shard_owner().await?,
        })
    }

    /// The shard's owner record (`keys::SHARD_OWNER_KEY`), the newest
    /// writer's. Each start of a sharded engine rewrites it, so read
    /// [`crate::Reading::Flushed`] the flushed value can be an earlier
    /// writer's while the newest one's is still only in the WAL (a shard
    /// taken over seconds ago): the WAL is asked where the newest writer
    /// started (`unflushed/start.rs`, a bounded read, so `health` does not
    /// grow with the WAL either). A store that no sharded engine had
    /// started on at its last flush has none to look for. A replaying
    /// reader's view is whole.
    async fn shard_owner(&self) -> Result<Option<ShardOwnerRow>, OpsError> {
        let flushed = self.view().kv_get(keys::SHARD_OWNER_KEY).await?;
        let raw = match &self.unflushed {
            None => flushed.map(|v| v.to_vec()),
            Some(_) if flushed.is_none() && !self.maybe_shard().await? => None,
            Some(u) => match u.written_at_start(keys::SHARD_OWNER_KEY).await? {
                AtStart::Flushed => flushed.map(|v| v.to_vec()),
                AtStart::Written(newest) => newest,
            },
        };
        let Some(raw) = raw else {
            return Ok(None);
        };
        let record: records::ShardOwnerRecord = records::decode(keys::SHARD_OWNER_KEY, &raw)?;
        Ok(Some(ShardOwnerRow {
            owner: record.owner,
            host: record.host,
            pid: record.pid,
            since_ms: record.since_ms,
        }))
    }

    /// Whether the store can be a shard by its flushed state: it has the
    /// shard marker, or it is young enough that its first start's
    /// commits, the layout marker's among them, were never flushed.
    async fn maybe_shard(&self) -> Result<bool, OpsError> {
        Ok(self.view().kv_get(keys::SHARD_KEY).await?.is_some()
            || self.view().kv_get(keys::LAYOUT_KEY).await?.is_none())
    }
}
