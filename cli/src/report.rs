//! What each command answers: one type per command, serialized as its
//! `--json` document (the field names are stable) and rendered as tables.
//!
//! Times are epoch milliseconds (`*_ms`) in JSON, UTC in tables.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::CliError;
use crate::table::{Table, age, time};

/// Print `value`: one JSON document with `json`, tables otherwise.
pub fn print<T: Serialize + Render>(json: bool, value: &T) -> Result<(), CliError> {
    let text = if json {
        serde_json::to_string_pretty(value).map_err(|e| CliError::Output(e.to_string()))?
    } else {
        value.render()
    };
    println!("{text}");
    Ok(())
}

/// A command's report on each shard of a set (`--shards`):
/// `{"shards": [{"shard", "url", "report"}]}`; for `stats` the counts
/// of every shard added up, `"total": {"queues": [...]}`; for `jobs` and
/// `dead` the shards' rows merged into one listing, each row with its
/// `shard`, `"all": {"jobs": [...], "more"}` or `"all": {"dead": [...]}`
/// (the text shows only the merged listing).
#[derive(Debug, Serialize)]
pub struct Shards {
    /// One part per shard, in shard order.
    pub shards: Vec<ShardPart>,
    /// `stats` only: each queue's counts summed over the shards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<Stats>,
    /// `jobs` and `dead` only: the merged listing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<serde_json::Value>,
    /// The merged listing as text.
    #[serde(skip)]
    pub all_text: Option<String>,
}

/// `value` as JSON (with `--json`) or as text: a shard's part, or the
/// merged listing of a set's shards ([`Shards::all`], [`Shards::all_text`]).
pub fn as_report<T: Serialize + Render>(
    json: bool,
    value: &T,
) -> Result<(Option<serde_json::Value>, Option<String>), CliError> {
    Ok(if json {
        let v = serde_json::to_value(value).map_err(|e| CliError::Output(e.to_string()))?;
        (Some(v), None)
    } else {
        (None, Some(value.render()))
    })
}

/// One shard's part of [`Shards`].
#[derive(Debug, Serialize)]
pub struct ShardPart {
    /// The shard's index.
    pub shard: usize,
    /// Its store URL.
    pub url: String,
    /// The command's report on it (the document the command prints for
    /// one store).
    pub report: serde_json::Value,
    #[serde(skip)]
    text: String,
}

impl ShardPart {
    /// The part of `shard` at `url`: `value` as JSON, or as text.
    pub fn new<T: Serialize + Render>(
        shard: usize,
        url: String,
        json: bool,
        value: &T,
    ) -> Result<Self, CliError> {
        let (report, text) = as_report(json, value)?;
        Ok(Self {
            shard,
            url,
            report: report.unwrap_or_default(),
            text: text.unwrap_or_default(),
        })
    }
}

impl Render for Shards {
    fn render(&self) -> String {
        if let Some(all) = &self.all_text {
            return format!("all {} shards\n{all}", self.shards.len());
        }
        let mut parts: Vec<String> = self
            .shards
            .iter()
            .map(|p| format!("shard {} ({})\n{}", p.shard, p.url, p.text))
            .collect();
        if let Some(total) = &self.total {
            parts.push(format!(
                "all {} shards\n{}",
                self.shards.len(),
                total.render()
            ));
        }
        parts.join("\n")
    }
}

/// A report as text.
pub trait Render {
    /// The aligned tables of the report.
    fn render(&self) -> String;
}

/// `gaffer stats`: `{"queues": [...], "snapshot_at_ms": …}`.
#[derive(Debug, Default, Serialize)]
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

impl Render for Stats {
    fn render(&self) -> String {
        let mut t = Table::new([
            "QUEUE",
            "KIND",
            "NAME",
            "PENDING",
            "SCHEDULED",
            "RUNNING",
            "DONE",
            "DEAD",
        ]);
        for q in &self.queues {
            t.row([
                q.queue.clone(),
                q.kind.into(),
                q.name.clone(),
                q.pending.to_string(),
                q.scheduled.to_string(),
                q.running.to_string(),
                q.done.to_string(),
                q.dead.to_string(),
            ]);
        }
        if self.queues.is_empty() {
            return "no queues yet".into();
        }
        match self.snapshot_at_ms {
            Some(at) => format!(
                "{}\nfrom the engine's snapshot of {} and the changes since (--exact reads every \
                 unflushed WAL object instead)\n",
                t.render().trim_end(),
                crate::table::time(at)
            ),
            None => t.render(),
        }
    }
}

/// `gaffer jobs`: `{"jobs": [...], "more": bool}`.
#[derive(Debug, Serialize)]
pub struct Jobs {
    /// The jobs, live ones first, then finished ones newest first.
    pub jobs: Vec<JobRow>,
    /// Whether more jobs follow this page.
    pub more: bool,
    /// When more follow: the cursor of the next page (`--after`).
    pub next: Option<String>,
}

/// One job of a listing.
#[derive(Debug, Serialize)]
pub struct JobRow {
    /// The job's id (its run id).
    pub id: String,
    /// The job type (or pipeline).
    pub job_type: String,
    /// `queued`, `scheduled`, `running`, `dead`, `succeeded`, `failed`,
    /// `cancelled`.
    pub state: &'static str,
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

impl Render for Jobs {
    fn render(&self) -> String {
        let mut t = Table::with_shard(
            self.jobs.iter().any(|j| j.shard.is_some()),
            &["ID", "TYPE", "STATE", "ATTEMPTS", "AT", "ERROR"],
        );
        for j in &self.jobs {
            let ty = match (&j.batch, &j.key) {
                (Some(b), Some(k)) => format!("{} ({b}/{k})", j.job_type),
                _ => j.job_type.clone(),
            };
            t.shard_row(
                j.shard,
                [
                    j.id.clone(),
                    ty,
                    j.state.into(),
                    j.attempts.to_string(),
                    j.at_ms.map(time).unwrap_or_default(),
                    j.error.clone().unwrap_or_default(),
                ],
            );
        }
        let mut s = if self.jobs.is_empty() {
            "no jobs".to_string()
        } else {
            t.render()
        };
        if let Some(next) = &self.next {
            s.push_str(&format!("\n(more: pass --after {next})"));
        } else if self.more {
            s.push_str("\n(more: narrow with --state or --type, or page one shard with --shard)");
        }
        s
    }
}

/// `gaffer submit | retry | cancel | pause | resume`: one request.
#[derive(Debug, Serialize)]
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

impl Render for RequestReport {
    fn render(&self) -> String {
        let mut t = Table::new(["FIELD", "VALUE"]);
        t.row(["request".to_string(), self.request.clone()]);
        if let Some(job) = &self.job {
            t.row(["job".to_string(), job.clone()]);
        }
        t.row(["status".to_string(), self.status.to_string()]);
        for (name, v) in [
            ("result", self.result.as_deref()),
            ("reason", self.reason.as_deref()),
            ("job state", self.job_state.as_deref()),
        ] {
            if let Some(v) = v {
                t.row([name.to_string(), v.to_string()]);
            }
        }
        t.render()
    }
}

/// `gaffer job ID`: one job.
#[derive(Debug, Serialize)]
pub struct JobDetail {
    /// The job's id (its run id).
    pub id: String,
    /// The queue job id of its current or last delivery.
    pub job_id: Option<String>,
    /// The job type (or pipeline).
    pub job_type: String,
    /// As in [`JobRow::state`].
    pub state: &'static str,
    /// Attempts started or used.
    pub attempts: u32,
    /// When it was submitted (live runs).
    pub submitted_at_ms: Option<u64>,
    /// When its delivery was enqueued.
    pub enqueued_at_ms: Option<u64>,
    /// When its delivery was last claimed.
    pub claimed_at_ms: Option<u64>,
    /// When it is due (scheduled jobs).
    pub run_at_ms: Option<u64>,
    /// When it ended.
    pub finished_at_ms: Option<u64>,
    /// The output, decoded to JSON (succeeded jobs with an inline output).
    pub output: Option<serde_json::Value>,
    /// The object path of an output too large for KV.
    pub output_blob: Option<String>,
    /// The failure message.
    pub error: Option<String>,
    /// `Transient` or `Permanent` (failed jobs).
    pub failure_kind: Option<String>,
    /// The batch of a bulk item.
    pub batch: Option<String>,
    /// The item key of a bulk item.
    pub key: Option<String>,
    /// Each settled claim, in order: the queue's attempt history, or for a
    /// job that succeeded after earlier claims, the one its outcome record kept.
    pub history: Vec<AttemptRow>,
    /// The ids of the follow-up jobs its success created (`ctx.then`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub followups: Vec<String>,
}

/// One settled attempt.
#[derive(Debug, Serialize)]
pub struct AttemptRow {
    /// The queue's claim number (it counts interrupted and released claims,
    /// which the job's `attempts` do not).
    pub attempt: u32,
    /// How the claim ended: `failed` (retried), `released` (given back
    /// without spending an attempt), `lease-expired`, `interrupted` (the
    /// process exited), `revived` (an operator requeued the dead job),
    /// `dead-lettered`, `completed`.
    pub outcome: String,
    /// When it was claimed.
    pub claimed_at_ms: Option<u64>,
    /// When it was settled.
    pub recorded_at_ms: u64,
    /// Its error.
    pub error: Option<String>,
}

impl Render for JobDetail {
    fn render(&self) -> String {
        let opt = |v: Option<u64>| v.map(time).unwrap_or_default();
        let mut t = Table::new(["FIELD", "VALUE"]);
        let mut kv = |k: &str, v: String| {
            if !v.is_empty() {
                t.row([k.to_string(), v]);
            }
        };
        kv("id", self.id.clone());
        kv("job id", self.job_id.clone().unwrap_or_default());
        kv("type", self.job_type.clone());
        kv("state", self.state.into());
        kv("attempts", self.attempts.to_string());
        kv("batch", self.batch.clone().unwrap_or_default());
        kv("key", self.key.clone().unwrap_or_default());
        kv("submitted", opt(self.submitted_at_ms));
        kv("enqueued", opt(self.enqueued_at_ms));
        kv("claimed", opt(self.claimed_at_ms));
        kv("run at", opt(self.run_at_ms));
        kv("finished", opt(self.finished_at_ms));
        kv(
            "output",
            self.output
                .as_ref()
                .map(|o| o.to_string())
                .unwrap_or_default(),
        );
        kv("output blob", self.output_blob.clone().unwrap_or_default());
        kv("failure", self.failure_kind.clone().unwrap_or_default());
        kv("error", self.error.clone().unwrap_or_default());
        kv("follow-ups", self.followups.join(" "));
        let mut s = t.render();
        if !self.history.is_empty() {
            let mut h = Table::new(["ATTEMPT", "OUTCOME", "CLAIMED", "SETTLED", "ERROR"]);
            for a in &self.history {
                h.row([
                    a.attempt.to_string(),
                    a.outcome.clone(),
                    a.claimed_at_ms.map(time).unwrap_or_default(),
                    time(a.recorded_at_ms),
                    a.error.clone().unwrap_or_default(),
                ]);
            }
            s.push_str("\n\n");
            s.push_str(&h.render());
        }
        s
    }
}

/// `gaffer dead`: `{"dead": [...]}`.
#[derive(Debug, Serialize)]
pub struct Dead {
    /// Dead letters, per queue in enqueue order.
    pub dead: Vec<DeadRow>,
}

/// One dead letter with its failure record.
#[derive(Debug, Serialize)]
pub struct DeadRow {
    /// The job's id (its run id).
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
    /// Its shard, in a listing merged over a shard set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<usize>,
}

impl Render for Dead {
    fn render(&self) -> String {
        if self.dead.is_empty() {
            return "no dead letters".into();
        }
        let mut t = Table::with_shard(
            self.dead.iter().any(|d| d.shard.is_some()),
            &["ID", "TYPE", "ATTEMPTS", "FAILED", "KIND", "ERROR"],
        );
        for d in &self.dead {
            let ty = match (&d.batch, &d.key) {
                (Some(b), Some(k)) => format!("{} ({b}/{k})", d.job_type),
                _ => d.job_type.clone(),
            };
            t.shard_row(
                d.shard,
                [
                    d.id.clone(),
                    ty,
                    d.attempts.to_string(),
                    d.failed_at_ms.map(time).unwrap_or_default(),
                    d.failure_kind.clone().unwrap_or_default(),
                    d.error.clone().unwrap_or_default(),
                ],
            );
        }
        t.render()
    }
}

/// `gaffer batches`: `{"batches": [...], "more": bool}`.
#[derive(Debug, Serialize)]
pub struct Batches {
    /// Batches in id order.
    pub batches: Vec<BatchRow>,
    /// Whether more batches exist than `--limit`.
    pub more: bool,
}

/// The status of one batch (also `gaffer batch ID`).
#[derive(Debug, Serialize)]
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

fn cost_text(cost: &BTreeMap<String, f64>) -> String {
    cost.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Render for Batches {
    fn render(&self) -> String {
        if self.batches.is_empty() {
            return "no batches".into();
        }
        let mut t = Table::new([
            "BATCH",
            "PIPELINE",
            "TOTAL",
            "SUCCEEDED",
            "FAILED",
            "CANCELLED",
            "OUTSTANDING",
            "COST",
        ]);
        for b in &self.batches {
            t.row([
                b.id.clone(),
                b.pipeline.clone(),
                b.total.to_string(),
                b.succeeded.to_string(),
                b.failed.to_string(),
                b.cancelled.to_string(),
                b.outstanding.to_string(),
                cost_text(&b.cost),
            ]);
        }
        let mut s = t.render();
        if self.more {
            s.push_str("\n(more: raise --limit)");
        }
        s
    }
}

impl Render for BatchRow {
    fn render(&self) -> String {
        let mut t = Table::new(["FIELD", "VALUE"]);
        t.row(["batch".into(), self.id.clone()]);
        t.row(["pipeline".into(), self.pipeline.clone()]);
        t.row([
            "manifest".into(),
            if self.complete {
                "complete"
            } else {
                "incomplete"
            }
            .into(),
        ]);
        t.row(["total".into(), self.total.to_string()]);
        t.row(["succeeded".into(), self.succeeded.to_string()]);
        t.row(["failed".into(), self.failed.to_string()]);
        t.row(["cancelled".into(), self.cancelled.to_string()]);
        t.row(["active".into(), self.active.to_string()]);
        t.row(["outstanding".into(), self.outstanding.to_string()]);
        for (k, v) in &self.cost {
            t.row([format!("cost {k}"), v.to_string()]);
        }
        if let Some(keys) = self.failed_keys.as_ref().filter(|k| !k.is_empty()) {
            t.row(["failed keys".into(), keys.join(", ")]);
        }
        t.render()
    }
}

/// `gaffer health`.
#[derive(Debug, Serialize)]
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
}

impl Render for Health {
    fn render(&self) -> String {
        let mut t = Table::new(["FIELD", "VALUE"]);
        t.row(["writer".into(), self.status.into()]);
        if let (Some(at), Some(a)) = (self.heartbeat_at_ms, self.heartbeat_age_ms) {
            t.row(["heartbeat".into(), format!("{} ({} ago)", time(at), age(a))]);
        }
        if let Some(i) = self.heartbeat_interval_ms {
            t.row(["interval".into(), age(i)]);
        }
        t.row(["writer epoch".into(), self.writer_epoch.to_string()]);
        if let Some(f) = self.last_flush_at_ms {
            t.row([
                "last flush".into(),
                format!("{} ({} ago)", time(f), age(self.now_ms.saturating_sub(f))),
            ]);
        }
        t.row(["durable seq".into(), self.durable_seq.to_string()]);
        if let Some(n) = self.unflushed_wal_objects {
            t.row(["unflushed WAL".into(), format!("{n} objects")]);
        }
        t.render()
    }
}

/// `gaffer periodic`: `{"now_ms": …, "periodic": [...]}`.
#[derive(Debug, Serialize)]
pub struct Periodic {
    /// This machine's clock when the records were read (what "overdue" is
    /// judged against).
    pub now_ms: u64,
    /// One row per periodic job the store has a record of, by name.
    pub periodic: Vec<PeriodicRow>,
}

/// One periodic job.
#[derive(Debug, Serialize)]
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

impl Render for Periodic {
    fn render(&self) -> String {
        if self.periodic.is_empty() {
            return "no periodic jobs".into();
        }
        let mut t = Table::new([
            "NAME",
            "TYPE",
            "SCHEDULE",
            "MISSED",
            "LAST FIRED",
            "NEXT DUE",
            "FIRED",
            "LAST JOB",
        ]);
        for p in &self.periodic {
            let next = match p.next_due_ms {
                None => "never".to_string(),
                Some(at) if at <= self.now_ms => format!("{} (overdue)", time(at)),
                Some(at) => time(at),
            };
            t.row([
                p.name.clone(),
                p.job_type.clone(),
                p.schedule.clone(),
                p.missed.clone(),
                p.last_fired_ms.map(time).unwrap_or_else(|| "-".into()),
                next,
                p.fired.to_string(),
                p.last_job_id.clone().unwrap_or_else(|| "-".into()),
            ]);
        }
        t.render()
    }
}
