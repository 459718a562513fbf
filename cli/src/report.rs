//! What each command answers: one type per command, serialized as its
//! `--json` document (the field names are stable) and rendered as tables.
//!
//! Times are epoch milliseconds (`*_ms`) in JSON, UTC in tables.

use serde::Serialize;

use crate::error::CliError;
use crate::table::{Table, age, time};
pub use gaffer_ops::report::{
    BatchRow, Batches, Dead, DeadRow, Health, JobDetail, JobRow, Jobs, Periodic, RequestReport,
    Stats, Tenants,
};

mod job;

/// Print `value`: one JSON document with `json`, tables otherwise.
pub fn print<T: Serialize + Render>(json: bool, value: &T) -> Result<(), CliError> {
    let text = if json {
        serde_json::to_string_pretty(value).map_err(|e| CliError::Output(e.to_string()))?
    } else {
        value.render()
    };
    out(&text)
}

/// Write `text` and a newline to stdout. A reader that closed the pipe
/// (`gaffer jobs | head`) has all it wants: the rest is dropped quietly
/// and the command ends as it would have.
pub fn out(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Output(e.to_string()))
        }
        _ => Ok(()),
    }
}

/// Write a line to stderr, ignoring a closed stderr (nothing is left to
/// tell it to).
pub fn err(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
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
            "OLDEST READY",
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
                q.oldest_ready_age_ms.map(age).unwrap_or_default(),
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

impl Render for Tenants {
    fn render(&self) -> String {
        let mut out = String::new();
        let ready: i64 = self.values.iter().map(|v| v.ready).sum::<i64>() + self.rest.ready;
        let running: i64 = self.values.iter().map(|v| v.running).sum::<i64>() + self.rest.running;
        out.push_str(&format!(
            "{}: {ready} ready, {running} running, over {} values with live jobs\n",
            self.job_type,
            self.values.len() + self.rest.values
        ));
        if self.values.is_empty() {
            out.push_str("no value has a ready, running or scheduled job\n");
        } else {
            let mut t = Table::new([
                "VALUE",
                "READY",
                "RUNNING",
                "SCHEDULED",
                "OLDEST READY",
                "PAUSED",
            ]);
            for v in &self.values {
                let label = match (&v.header, v.no_header) {
                    (Some(h), false) if v.value.is_some() => format!("{h}={}", v.label()),
                    _ => v.label(),
                };
                t.row([
                    label,
                    v.ready.to_string(),
                    v.running.to_string(),
                    v.scheduled.to_string(),
                    v.oldest_ready_age_ms.map(age).unwrap_or_default(),
                    if v.paused {
                        "paused".into()
                    } else {
                        String::new()
                    },
                ]);
            }
            if self.rest.values > 0 {
                t.row([
                    format!("({} more values)", self.rest.values),
                    self.rest.ready.to_string(),
                    self.rest.running.to_string(),
                    self.rest.scheduled.to_string(),
                    String::new(),
                    String::new(),
                ]);
            }
            out.push_str(&t.render());
            out.push('\n');
        }
        if self.more {
            out.push_str(&format!(
                "counted {} of the type's partition queues, and more exist (the cap per read): \
                 the counts cover those counted only\n",
                self.examined
            ));
        }
        let shown: std::collections::BTreeSet<(&str, &str)> = self
            .values
            .iter()
            .filter(|v| v.paused)
            .filter_map(|v| Some((v.header.as_deref()?, v.value.as_deref()?)))
            .collect();
        let others: Vec<String> = self
            .paused
            .iter()
            .filter(|(h, v)| !shown.contains(&(h.as_str(), v.as_str())))
            .map(|(h, v)| format!("{h}={v}"))
            .collect();
        if !others.is_empty() {
            out.push_str(&format!("also paused: {}\n", others.join(", ")));
        }
        out
    }
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
                    j.state.to_string(),
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

use gaffer_ops::report::cost_text;

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
            t.row([format!("cost {k}"), gaffer_ops::report::number(*v)]);
        }
        if let Some(keys) = self.failed_keys.as_ref().filter(|k| !k.is_empty()) {
            t.row(["failed keys".into(), keys.join(", ")]);
        }
        t.render()
    }
}

impl Render for Health {
    fn render(&self) -> String {
        let mut t = Table::new(["FIELD", "VALUE"]);
        t.row(["writer".into(), self.status.into()]);
        if let Some(o) = &self.shard_owner {
            t.row([
                "owner".into(),
                format!(
                    "{} ({}, pid {}) since {}",
                    o.owner,
                    o.host,
                    o.pid,
                    time(o.since_ms)
                ),
            ]);
        }
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
