//! Engine settings: a plain struct with defaults and `validate()`.

use std::time::Duration;

use crate::error::{EngineError, Result};

/// Default object-store prefix of memo entries and output blobs
/// ([`Settings::blob_prefix`]).
pub(crate) const DEFAULT_BLOB_PREFIX: &str = "gaffer-blobs";

/// Default [`Settings::memory_budget`]: 1 GiB of resident memory.
pub(crate) const DEFAULT_MEMORY_BUDGET: u64 = 1 << 30;

/// Settings of one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Prefix of the taquba queues of job types: each job type has a queue of
    /// its own, `{queue_name}.{type}`, so no type ever waits behind another's
    /// jobs. Queues under this prefix are the engine's. Default `"jobs"`.
    pub queue_name: String,
    /// Prefix of the taquba queues of pipelines (`{bulk_queue_name}.{name}`),
    /// apart from jobs so a big batch never starves single jobs. Must differ
    /// from `queue_name` (neither may start with the other followed by
    /// `.`). Default `"bulk-items"`.
    pub bulk_queue_name: String,
    /// Items of one batch enqueued and not yet settled, at most: bounds the
    /// engine's memory for a run (and how far a run gets ahead of its
    /// items). At least 1. Default 10 000.
    pub batch_window: usize,
    /// Jobs of one type running at once, for a type registered without a
    /// count of its own. Each job type has its own workers and its own queue:
    /// a type never takes another's capacity. At least 1. Default 16.
    pub max_concurrent_jobs: usize,
    /// Longest idle wait of a pool before it looks at its queue again, and
    /// period of the sweeper (retention). In-process submissions, retries and
    /// scheduled promotions wake the pool at once. Greater than zero.
    /// Default 100 ms.
    pub poll_interval: Duration,
    /// A fair type (fairness or a limit per key) forgets a value whose
    /// partition queue stayed drained this long and holds no live job: it
    /// keeps nothing for it in memory and no longer lists it at its start
    /// (a job submitted to it later brings it back). Also how often such a
    /// pool looks at its type's marks for values it does not know. Greater
    /// than zero. Default 60 s.
    pub forget_drained_after: Duration,
    /// Keep outcome records (and memo entries, large outputs) this long after
    /// a job ends; after that the job is unknown (`JobNotFound`). On a queue
    /// the engine opens itself, a job type's dead letters (its permanently
    /// failed jobs in taquba's dead set, which `retry` reads) then go a
    /// minute after their records, instead of after taquba's default 7 days
    /// (`QueueConfig::dead_retention`; a queue given its own config in the
    /// open options keeps it). At least 1 ms; `None` keeps them forever.
    /// Default `None`.
    pub retention: Option<Duration>,
    /// Object-store prefix for memo entries and large outputs. Must not overlap
    /// the queue's path. Default `"gaffer-blobs"`.
    pub blob_prefix: String,
    /// Settlements (ack/nack commits) in flight per job type before the pool
    /// stops asking for more jobs. Settlements commit together, so a handler
    /// slot takes its next job while its last one's settlement waits for the
    /// queue's flush. At least 1. Default 1024.
    pub settlement_window: usize,
    /// A crashed handler worker is replaced at once, unless more attempts
    /// than the type has workers panicked in a row: then this is the first
    /// delay before it restarts, doubling per further panic in a row up to
    /// `restart_backoff_max`. Default 50 ms.
    pub restart_backoff_base: Duration,
    /// Longest restart delay. Default 5 s.
    pub restart_backoff_max: Duration,
    /// How long a graceful shutdown lets running jobs finish; at its end they
    /// are given back to the queue (their attempt is not counted: they run
    /// again after the next start) and reported as abandoned. `None` waits
    /// for them however long they take. Default `None`.
    pub shutdown_grace: Option<Duration>,
    /// Crashes of one job type's workers tolerated within `restart_window`
    /// before the type is paused (`EngineEvent::JobTypePaused`: it claims
    /// nothing until `Engine::resume` or a restart; other types go on).
    /// Default 100.
    pub max_restarts: usize,
    /// Window of `max_restarts`. Default 10 s.
    pub restart_window: Duration,
    /// A job that was running when the process died is run again without
    /// spending an attempt. A job under which the process keeps dying is a
    /// poison pill: once it has been interrupted in this many separate
    /// episodes (see `interruption_window`) within `interruption_memory`, it
    /// fails permanently instead of running again. At least 1. Default 3.
    pub max_interruptions: u32,
    /// Interruptions of one job closer together than this count once toward
    /// `max_interruptions` (a crash loop, or many kills in a row, is one
    /// episode). Default 60 s.
    pub interruption_window: Duration,
    /// An interruption episode is forgotten this long after it began, so a
    /// long job that runs through unrelated crashes hours apart is never
    /// taken for a poison pill, while a crash loop (its restarts at most
    /// minutes apart, as Kubernetes' capped back-off and systemd's restarts
    /// are) still reaches `max_interruptions` well within it. Longer than
    /// `interruption_window`. Default 1 h.
    pub interruption_memory: Duration,
    /// The most times one job may snooze (`JobContext::snooze`: run again
    /// after a delay without spending an attempt); the snooze after that
    /// fails the job permanently, saying so, so a job that snoozes forever
    /// ends. A type's `JobOptions::max_snoozes` beats it. Default 1000.
    pub max_snoozes: u32,
    /// The longest a debounced burst is put off from its first submission
    /// when its submissions do not say (`Debounce::max_delay`): a stream of
    /// submissions closer than the window still runs the job this long
    /// after the stream began. Default 1 h.
    pub debounce_max_delay: Duration,
    /// When memo entries reach the object store. Default
    /// [`MemoWrites::OnFailure`].
    pub memo_writes: MemoWrites,
    /// Take submissions from other processes (`gaffer::Client`) through
    /// the store's inbox (see the `intake` module). The engine's writer then
    /// polls the inbox's touch object every `intake_poll` (on S3, one HEAD
    /// request each: 43 200 a day at 2 s) and lists the inbox at most once a
    /// minute without a touch. Default `true`.
    pub client_intake: bool,
    /// How long the result of an operator request from another process
    /// (`gaffer retry`, `cancel`, `pause` … through the store's inbox) is
    /// kept for its sender to read (`gaffer/v1/requests/{id}`), from when
    /// the engine applied it. Matches how long taquba keeps the inbox's own
    /// record of the request and a refused request's dead letter. At least
    /// 1 ms. Default 7 days.
    pub request_retention: Duration,
    /// How often the writer looks for client requests (the touch poll):
    /// a client's submission waits up to this long before the engine sees
    /// it. Default 2 s.
    pub intake_poll: Duration,
    /// The memory budget, in bytes of the process's resident memory (its
    /// RSS, read from `/proc/self/status` at most every 50 ms while a batch
    /// feeds). From three quarters of it a batch's items are enqueued at a
    /// rate adjusted every second by what the RSS did: cut while it grows
    /// toward seven eighths of the budget (halved while it grows past
    /// them), raised again while it holds still (the allocator reusing what
    /// the store freed after its memtable flushes), between a tenth of the rate the run fed
    /// at unpaced and that rate. SlateDB, inside taquba, holds every write
    /// in memory until its memtable is flushed, so feeding more slowly lets
    /// the flushes catch up. A run never stops: over the budget it still
    /// feeds at that tenth at least. The RSS is the whole process's: an
    /// application that holds much memory of its own raises this. Jobs
    /// submitted one at a time, claims and settlements are not paced.
    /// Pacing trims a large batch's peak, it does not cap it: SlateDB's
    /// block and meta caches fill as the store grows whatever the pace
    /// (measured: a 1M-item batch 0.96–1.07 GiB against 1.23–1.25 GiB
    /// unpaced, at 0.71–0.73× the rate on an idle machine; docs/guide/tuning.md,
    /// *Memory*). Without `/proc` (not Linux) nothing is paced. At least
    /// 1 MiB; `None` turns pacing off (as before #30). Default 1 GiB.
    pub memory_budget: Option<u64>,
    /// The keys that seal every user-supplied value the engine stores
    /// (payloads, outputs, errors, memo entries, KV writes, signals, batch
    /// manifests and item records, workflow steps' jobs, client requests):
    /// the newest seals, every key opens what it sealed (docs/guide/encryption.md).
    /// Empty (the default): nothing is sealed, and the stored bytes are the
    /// plain ones. A store whose values were sealed refuses to start with a
    /// keyring that lacks one of its keys (`EncryptionKeyMissing`).
    pub encryption: crate::layout::sealed::Keyring,
}

/// When a memo entry is written to the object store.
///
/// A memo entry exists so that a later attempt of the same run (a retry, or a
/// re-run of a bulk item) can skip work an earlier attempt finished. An attempt
/// that succeeds never needs its entries again: its outcome record or item
/// marker answers from then on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MemoWrites {
    /// Keep the attempt's new entries in memory (later reads in the same
    /// attempt see them) and write them when the attempt does not succeed:
    /// it fails (transient or permanent), its handler panics, or the shutdown
    /// grace period ends. A successful attempt writes none. An attempt cut
    /// short by the process dying loses its unwritten entries, so the next
    /// attempt computes them again. The default: no object write on the path
    /// of an attempt that succeeds.
    #[default]
    OnFailure,
    /// Write each entry when it is put, before `put` returns (one object
    /// write per entry). Entries survive even a process crash mid-attempt;
    /// choose this when a memoized step is costly to repeat (a paid API
    /// call) and crashes are a real risk.
    Immediate,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            queue_name: "jobs".into(),
            bulk_queue_name: "bulk-items".into(),
            batch_window: 10_000,
            max_concurrent_jobs: 16,
            poll_interval: Duration::from_millis(100),
            forget_drained_after: Duration::from_secs(60),
            retention: None,
            blob_prefix: DEFAULT_BLOB_PREFIX.into(),
            settlement_window: 1024,
            restart_backoff_base: Duration::from_millis(50),
            restart_backoff_max: Duration::from_secs(5),
            shutdown_grace: None,
            max_restarts: 100,
            restart_window: Duration::from_secs(10),
            max_interruptions: 3,
            max_snoozes: 1000,
            debounce_max_delay: Duration::from_secs(3600),
            interruption_window: Duration::from_secs(60),
            interruption_memory: Duration::from_secs(3600),
            memo_writes: MemoWrites::OnFailure,
            client_intake: true,
            intake_poll: Duration::from_secs(2),
            request_retention: Duration::from_secs(7 * 24 * 3600),
            memory_budget: Some(DEFAULT_MEMORY_BUDGET),
            encryption: crate::layout::sealed::Keyring::new(),
        }
    }
}

impl Settings {
    /// Check every field; the error says which and how to fix it.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidConfig(m));
        if self.max_concurrent_jobs == 0 {
            return bad("max_concurrent_jobs must be at least 1".into());
        }
        if self.settlement_window == 0 {
            return bad("settlement_window must be at least 1".into());
        }
        if self.poll_interval.is_zero() {
            return bad("poll_interval must be greater than zero".into());
        }
        if self.forget_drained_after.is_zero() {
            return bad("forget_drained_after must be greater than zero".into());
        }
        if let Some(r) = self.retention
            && r < Duration::from_millis(1)
        {
            return bad(format!("retention must be at least 1 ms (got {r:?})"));
        }
        for name in [&self.queue_name, &self.bulk_queue_name] {
            if taquba::QueueName::new(name.as_str()).is_err() {
                return bad(format!(
                    "queue name `{name}` must be 1-255 bytes of [A-Za-z0-9._-] starting with a letter or digit"
                ));
            }
        }
        if self.queue_name == self.bulk_queue_name
            || self
                .queue_name
                .starts_with(&format!("{}.", self.bulk_queue_name))
            || self
                .bulk_queue_name
                .starts_with(&format!("{}.", self.queue_name))
        {
            return bad(format!(
                "the jobs queue prefix `{}` and the bulk queue prefix `{}` must differ and \
                 neither may start with the other followed by `.`",
                self.queue_name, self.bulk_queue_name
            ));
        }
        if self.request_retention < Duration::from_millis(1) {
            return bad(format!(
                "request_retention must be at least 1 ms (got {:?})",
                self.request_retention
            ));
        }
        if self.intake_poll.is_zero() {
            return bad("intake_poll must be greater than zero".into());
        }
        if self.interruption_memory <= self.interruption_window {
            return bad(format!(
                "interruption_memory ({:?}) must be longer than interruption_window ({:?})",
                self.interruption_memory, self.interruption_window
            ));
        }
        if self.max_interruptions == 0 {
            return bad("max_interruptions must be at least 1".into());
        }
        if self.batch_window == 0 {
            return bad("batch_window must be at least 1".into());
        }
        if let Some(budget) = self.memory_budget
            && budget < 1 << 20
        {
            return bad(format!(
                "memory_budget must be at least 1 MiB (got {budget} bytes); None turns it off"
            ));
        }
        if self.blob_prefix.is_empty() || self.blob_prefix.contains("//") {
            return bad(format!(
                "blob prefix `{}` must be a non-empty object path",
                self.blob_prefix
            ));
        }
        Ok(())
    }
}
