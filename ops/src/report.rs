//! What each read answers: one type per read, serialized as the `gaffer`
//! command's `--json` document (the field names are stable), rendered by
//! the command as tables and by the dashboard as pages.
//!
//! Times are epoch milliseconds (`*_ms`).

use std::collections::BTreeMap;

use serde::Serialize;

/// `gaffer stats`: `{"queues": [...], "snapshot_at_ms": …}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// One row per queue of the engine.
    pub queues: Vec<QueueRow>,
    /// The counts start from the engine's snapshot of them taken then
    /// (epoch ms), with every change committed since added; absent: from
    /// the flushed state and every WAL object past it (`--exact`). Over a
    /// shard set, the oldest shard's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_at_ms: Option<u64>,
}

/// The counts of one queue.
#[derive(Debug, Clone, Serialize)]
pub struct QueueRow {
    /// The taquba queue (`jobs.{type}`, `bulk-items.{pipeline}`).
    pub queue: String,
    /// `job` or `pipeline`.
    pub kind: &'static str,
    /// The job type or pipeline (the queue name without its prefix).
    pub name: String,
    /// Waiting to be claimed.
    pub pending: i64,
    /// Waiting for their time.
    pub scheduled: i64,
    /// Claimed by a handler.
    pub running: i64,
    /// Acked (succeeded) since the queue was created.
    pub done: i64,
    /// Dead letters kept.
    pub dead: i64,
    /// When the queue's first ready job in claim order (priority, then
    /// enqueue order: without priorities, its oldest) was enqueued, epoch
    /// ms by the engine's clock; `null` with no ready job. A job scheduled
    /// for later (`run_at`, a retry's backoff) keeps its enqueue time, so
    /// once due it is as old as its wait. Over a shard set, the oldest of
    /// the shards'.
    pub oldest_ready_ms: Option<u64>,
    /// That job's age when read (ms); `null` with no ready job. With
    /// `pending` and `running`, an autoscaler's signals (#39 §6; the
    /// engine's gauges `gaffer_jobs_ready`, `gaffer_jobs_running` and
    /// `gaffer_oldest_ready_seconds` say the same per type).
    pub oldest_ready_age_ms: Option<u64>,
}

impl QueueRow {
    /// Take `other`'s oldest ready job when it is older than this row's (a
    /// shard set's rows of one queue).
    fn take_older(&mut self, other: &QueueRow) {
        if let Some(at) = other.oldest_ready_ms
            && self.oldest_ready_ms.is_none_or(|o| at < o)
        {
            self.oldest_ready_ms = Some(at);
        }
        self.oldest_ready_age_ms = match (self.oldest_ready_age_ms, other.oldest_ready_age_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

impl Stats {
    /// Add `other`'s counts to these, queue by queue (a queue of `other`
    /// not here is added as a row; rows stay sorted by queue).
    pub fn add(&mut self, other: &Stats) {
        for row in &other.queues {
            match self.queues.iter_mut().find(|q| q.queue == row.queue) {
                Some(q) => {
                    q.pending += row.pending;
                    q.scheduled += row.scheduled;
                    q.running += row.running;
                    q.done += row.done;
                    q.dead += row.dead;
                    q.take_older(row);
                }
                None => self.queues.push(row.clone()),
            }
        }
        self.queues.sort_by(|a, b| a.queue.cmp(&b.queue));
        self.snapshot_at_ms = match (self.snapshot_at_ms, other.snapshot_at_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// `gaffer stats TYPE`: the values of a type whose jobs are spread over
/// partition queues (fairness, a limit per key, a rate limit per header),
/// those with the most ready and running jobs first (see
/// [`crate::tenants`]).
#[derive(Debug, Clone, Serialize)]
pub struct Tenants {
    /// The job type.
    pub job_type: String,
    /// The values shown, most ready and running jobs first.
    pub values: Vec<ValueRow>,
    /// The live values not shown, summed.
    pub rest: ValuesRest,
    /// The type's partition queues listed: from their marks, those that
    /// may hold live jobs (at most [`crate::tenants::MAX_VALUES_EXAMINED`]
    /// per store); on a store whose marks are not complete, every value
    /// that ever had a job.
    pub queues: usize,
    /// Those whose counters were read (at most
    /// [`crate::tenants::MAX_VALUES_EXAMINED`] per store).
    pub examined: usize,
    /// More partition queues exist than were read: the counts cover those
    /// read only.
    pub more: bool,
    /// The values an operator paused, `(header, value)`, shown or not.
    pub paused: Vec<(String, String)>,
}

/// One value of a [`Tenants`] report.
#[derive(Debug, Clone, Serialize)]
pub struct ValueRow {
    /// The value (`None`: not recovered, see [`crate::tenants`]; or the
    /// type's own queue, `no_header`).
    pub value: Option<String>,
    /// The header it is a value of, when recovered.
    pub header: Option<String>,
    /// The type's own queue: its jobs without the header.
    pub no_header: bool,
    /// Its partition queue.
    pub queue: String,
    /// Jobs ready to be claimed.
    pub ready: i64,
    /// Jobs claimed (running).
    pub running: i64,
    /// Jobs waiting for their time (scheduled, retries in backoff).
    pub scheduled: i64,
    /// When its first ready job (claim order) was enqueued, epoch ms.
    pub oldest_ready_ms: Option<u64>,
    /// That job's age when read, ms.
    pub oldest_ready_age_ms: Option<u64>,
    /// An operator paused it (`gaffer pause TYPE --key H=V`).
    pub paused: bool,
}

impl ValueRow {
    /// How the value reads: itself, `(no header)`, or `(hashed …)` with
    /// the queue's digits.
    pub fn label(&self) -> String {
        match (&self.value, self.no_header) {
            (_, true) => "(no header)".to_string(),
            (Some(v), false) => v.clone(),
            (None, false) => {
                let digits = self.queue.rsplit("..p").next().unwrap_or("");
                format!("(hashed {digits})")
            }
        }
    }
}

/// The live values a [`Tenants`] report does not show, summed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ValuesRest {
    /// How many.
    pub values: usize,
    /// Their ready jobs.
    pub ready: i64,
    /// Their running jobs.
    pub running: i64,
    /// Their scheduled jobs.
    pub scheduled: i64,
}

/// `gaffer jobs`: `{"jobs": [...], "more": bool}`.
#[derive(Debug, Clone, Serialize)]
pub struct Jobs {
    /// The jobs, live ones first, then finished ones newest first.
    pub jobs: Vec<JobRow>,
    /// Whether more jobs follow this page.
    pub more: bool,
    /// When more follow: the cursor of the next page (`--after`).
    pub next: Option<String>,
}

/// One job of a listing.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    /// The job's id (its run id); a bulk item's, which has no run
    /// records, is the queue job id of its delivery (what `gaffer job`
    /// reads; `gaffer item BATCH KEY` reads the item whatever became of
    /// it).
    pub id: String,
    /// The job type (or pipeline).
    pub job_type: String,
    /// `queued`, `scheduled`, `running`, `dead`, `succeeded`, `failed`,
    /// `cancelled`.
    pub state: crate::listing::ListedState,
    /// Attempts started (queue jobs) or used (finished jobs).
    pub attempts: u32,
    /// When it entered this state as far as known: enqueued, claimed, run
    /// at, or finished.
    pub at_ms: Option<u64>,
    /// The batch of a bulk item.
    pub batch: Option<String>,
    /// The item key of a bulk item.
    pub key: Option<String>,
    /// The last error.
    pub error: Option<String>,
    /// Its shard, in a listing merged over a shard set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<usize>,
}

impl JobRow {
    /// Where a job stands in a listing merged over shards (the command's
    /// and the dashboard's): live jobs first, by state (running, queued,
    /// scheduled or waiting, dead), each oldest first; then finished ones,
    /// newest first.
    pub fn merged_order(a: &JobRow, b: &JobRow) -> std::cmp::Ordering {
        let (ra, rb) = (a.state.rank(), b.state.rank());
        ra.cmp(&rb).then_with(|| {
            if ra == 4 {
                b.at_ms.cmp(&a.at_ms)
            } else {
                a.at_ms.cmp(&b.at_ms)
            }
        })
    }
}

/// `gaffer submit | retry | cancel | pause | resume`: one request.
#[derive(Debug, Clone, Serialize)]
pub struct RequestReport {
    /// The request's id (its object in the inbox, its job on the intake
    /// queue).
    pub request: String,
    /// `submit`: the job's id.
    pub job: Option<String>,
    /// `sent` (with `--no-wait`, or not applied within `--wait-secs`),
    /// `applied`, `refused`.
    pub status: &'static str,
    /// What an applied operator request came to.
    pub result: Option<String>,
    /// Why it was refused.
    pub reason: Option<String>,
    /// `submit`: the job's state once applied: `queued`, `scheduled`,
    /// `running`, or how it already ended (`succeeded`, `failed`,
    /// `cancelled`).
    pub job_state: Option<String>,
}

/// `gaffer dead`: `{"dead": [...]}`.
#[derive(Debug, Clone, Serialize)]
pub struct Dead {
    /// Dead letters, per queue in enqueue order.
    pub dead: Vec<DeadRow>,
}

/// One dead letter with its failure record.
#[derive(Debug, Clone, Serialize)]
pub struct DeadRow {
    /// The job's id (its run id; a bulk item's, the queue job id of its
    /// delivery, as in [`JobRow::id`]).
    pub id: String,
    /// The queue job id of the dead delivery.
    pub job_id: String,
    /// The job type (or pipeline).
    pub job_type: String,
    /// Attempts used.
    pub attempts: u32,
    /// When the delivery was enqueued.
    pub enqueued_at_ms: u64,
    /// When it ended (from its outcome record).
    pub failed_at_ms: Option<u64>,
    /// `Transient`, `Permanent` or `Cancelled`.
    pub failure_kind: Option<String>,
    /// The failure message.
    pub error: Option<String>,
    /// The batch of a bulk item.
    pub batch: Option<String>,
    /// The item key of a bulk item.
    pub key: Option<String>,
    /// The workflow whose step it is (retry the workflow, not the step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Its shard, in a listing merged over a shard set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<usize>,
}

/// `gaffer batches`: `{"batches": [...], "more": bool}`.
#[derive(Debug, Clone, Serialize)]
pub struct Batches {
    /// Batches in id order.
    pub batches: Vec<BatchRow>,
    /// Whether more batches exist than `--limit`.
    pub more: bool,
}

/// The status of one batch (also `gaffer batch ID`).
#[derive(Debug, Clone, Serialize)]
pub struct BatchRow {
    /// The batch id.
    pub id: String,
    /// Its pipeline.
    pub pipeline: String,
    /// Whether its manifest is complete.
    pub complete: bool,
    /// Items in the manifest.
    pub total: u64,
    /// Items that succeeded.
    pub succeeded: u64,
    /// Items that failed.
    pub failed: u64,
    /// Items cancelled.
    pub cancelled: u64,
    /// Items queued or running now.
    pub active: u64,
    /// Items not settled yet (total − succeeded − failed − cancelled).
    pub outstanding: u64,
    /// The cost rollup of the settled items, by metric.
    pub cost: BTreeMap<String, f64>,
    /// The keys of failed items (`gaffer batch` only, at most 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_keys: Option<Vec<String>>,
}

/// `gaffer health`.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// Whether a writer is alive: a beat younger than three of its
    /// intervals, not closed, from the current writer epoch.
    pub alive: bool,
    /// `alive`, `stale`, `closed`, `superseded` or `absent` (no beat ever).
    pub status: &'static str,
    /// The reader's clock, epoch ms.
    pub now_ms: u64,
    /// When the last beat was written (writer clock).
    pub heartbeat_at_ms: Option<u64>,
    /// `now_ms − heartbeat_at_ms`.
    pub heartbeat_age_ms: Option<u64>,
    /// The writer's beat interval.
    pub heartbeat_interval_ms: Option<u64>,
    /// The writer epoch of the beat.
    pub heartbeat_writer_epoch: Option<u64>,
    /// The writer epoch in the manifest.
    pub writer_epoch: u64,
    /// When the writer last flushed a memtable (writer clock; display only).
    pub last_flush_at_ms: Option<u64>,
    /// The durable sequence number the reader sees.
    pub durable_seq: u64,
    /// WAL objects written since the writer's last memtable flush (a
    /// replaying reader's work; `health` reads the newest of them only).
    /// `None` when read through a replaying reader (`batch --watch`).
    pub unflushed_wal_objects: Option<u64>,
    /// The process that owns the store as a shard, as the engine that
    /// started on it last wrote it (`null`: no sharded engine wrote one, or
    /// the newest writer, started since the last flush, wrote none).
    pub shard_owner: Option<ShardOwnerRow>,
}

/// A shard's owner (its owner record, `gaffer/v1/shard/owner`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardOwnerRow {
    /// Its name in the shards' placement, else `{host}/{pid}`.
    pub owner: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When its engine started on the shard (its clock, epoch ms).
    pub since_ms: u64,
}

/// `gaffer periodic`: `{"now_ms": …, "periodic": [...]}`.
#[derive(Debug, Clone, Serialize)]
pub struct Periodic {
    /// This machine's clock when the records were read (what "overdue" is
    /// judged against).
    pub now_ms: u64,
    /// One row per periodic job the store has a record of, by name.
    pub periodic: Vec<PeriodicRow>,
}

/// One periodic job.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodicRow {
    /// Its name.
    pub name: String,
    /// The job type each tick submits.
    pub job_type: String,
    /// Its schedule (`every 1h`, `cron "0 9 * * *" Europe/Paris`).
    pub schedule: String,
    /// Its policy for ticks missed while no engine ran: `skip`,
    /// `run-once`, `catch-up(N)`.
    pub missed: String,
    /// The last tick fired, epoch ms.
    pub last_fired_ms: Option<u64>,
    /// The job id of the last tick fired.
    pub last_job_id: Option<String>,
    /// The next tick (the first after the last one handled), epoch ms;
    /// `null` if the schedule has none left. Past `now_ms`: overdue (no
    /// engine has checked since).
    pub next_due_ms: Option<u64>,
    /// Ticks fired so far.
    pub fired: u64,
    /// Every tick at or before this time is handled (fired or dropped).
    pub handled_until_ms: u64,
}

mod job;
mod workflows;
pub use job::{AttemptRow, JobDetail};
pub use workflows::{StepCounts, StepRow, WorkflowDetail, WorkflowRow, Workflows};

/// What a retry of every failed job of a type would touch now (the
/// dashboard asks before it sends one; see `Store::retry_preview`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetryPreview {
    /// The job type.
    pub job_type: String,
    /// Failed jobs it runs again.
    pub retried: u64,
    /// Failed workflow steps it skips (a step is retried with its
    /// workflow).
    pub steps: u64,
    /// Failed jobs it skips because the queue no longer keeps their
    /// payload (a dead letter past its retention).
    pub payload_gone: u64,
    /// Whether more failed jobs are there than were counted.
    pub more: bool,
}

/// A number as people read it: `0.8` for `0.8000000000000006`, at most
/// nine decimals (a sum of floats carries the error of each addition),
/// and an exponent only for what that would show as zero.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v != 0.0 && v.abs() < 1e-9 {
        return format!("{v:e}");
    }
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

/// A cost rollup as `metric=value …`, values as [`number`] writes them.
pub fn cost_text(cost: &BTreeMap<String, f64>) -> String {
    cost.iter()
        .map(|(k, v)| format!("{k}={}", number(*v)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(number(0.8000000000000006), "0.8");
        assert_eq!(number(0.1 + 0.2), "0.3");
        assert_eq!(number(50.0), "50");
        assert_eq!(number(-2.5), "-2.5");
        assert_eq!(number(1234567.125), "1234567.125");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(-1e-12), "-1e-12");
        assert_eq!(number(0.000001), "0.000001");
        let cost = BTreeMap::from([
            ("usd".to_string(), 0.8000000000000006),
            ("calls".into(), 3.0),
        ]);
        assert_eq!(cost_text(&cost), "calls=3 usd=0.8");
    }

    fn row(queue: &str, pending: i64, oldest: Option<(u64, u64)>) -> QueueRow {
        QueueRow {
            queue: queue.into(),
            kind: "job",
            name: queue.trim_start_matches("jobs.").into(),
            pending,
            scheduled: 0,
            running: 1,
            done: 0,
            dead: 0,
            oldest_ready_ms: oldest.map(|o| o.0),
            oldest_ready_age_ms: oldest.map(|o| o.1),
        }
    }

    /// A shard set's stats: counts added, and each queue's oldest ready job
    /// the oldest of the shards' (an earlier enqueue, a larger age).
    #[test]
    fn stats_added_over_shards_keep_each_queues_oldest_ready_job() {
        let mut total = Stats::default();
        let shards = [
            vec![row("jobs.a", 2, Some((1_000, 50))), row("jobs.b", 0, None)],
            vec![
                row("jobs.a", 3, Some((900, 70))),
                row("jobs.b", 1, Some((5, 9))),
            ],
            vec![row("jobs.a", 0, None), row("jobs.c", 0, None)],
        ];
        for rows in shards {
            total.add(&Stats {
                queues: rows,
                snapshot_at_ms: None,
            });
        }
        let got: Vec<String> = total
            .queues
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} {:?} {:?}",
                    r.queue, r.pending, r.running, r.oldest_ready_ms, r.oldest_ready_age_ms,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                "jobs.a 5 3 Some(900) Some(70)",
                "jobs.b 1 2 Some(5) Some(9)",
                "jobs.c 0 1 None None",
            ]
        );
        let json = serde_json::to_value(&total.queues[2]).unwrap();
        assert_eq!(json["oldest_ready_ms"], serde_json::Value::Null);
        assert_eq!(json["oldest_ready_age_ms"], serde_json::Value::Null);
    }
}
