//! The engine's test helpers: engines on the in-memory store (paused-time
//! friendly) or a local directory, the queues' counts, gates, counters and
//! sinks. The limits, the waits, the event waits, the child processes and
//! moto's S3 server are the test kit's (`gaffer-testkit`, shared with the
//! dashboard's and the command's tests), re-exported here.
//!
//! The fixtures that only one family of test files shares live in submodules:
//! [`bulk`] (the bulk runner's tests), [`jobs`] (the `jobs_*` files and
//! `idempotency.rs`) and [`faults`] (the object-store fault tests).
#![allow(dead_code, unused_imports)]

pub mod bulk;
pub mod faults;
pub mod jobs;

pub use gaffer_testkit::events::{collect_events_until, wait_event};
pub use gaffer_testkit::process::{
    Children, child_logs, lines, spawn_test_child, test_child, wait_for_child_file, write_whole,
};
pub use gaffer_testkit::{
    LIMIT, T0_MS, eventually, eventually_blocking, eventually_ok, eventually_or, mock_clock, s3,
    within, within_for,
};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::taquba::{MockClock, OpenOptions, QueueConfig};
use gaffer::{EngineBuilder, EngineEvent, Job, JobContext};
use serde::{Deserialize, Serialize};

/// Shut `engine` down and check it stopped cleanly: the queue closed and no
/// problem reported.
pub async fn shut_down_cleanly(engine: &gaffer::Engine) {
    let report = engine.shutdown().await.expect("shutdown answers");
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
}

/// Ids that are not valid job or batch ids: a path, empty, a path segment,
/// one byte over the 128 allowed, a NUL, non-ASCII.
pub fn bad_ids() -> Vec<String> {
    vec![
        "a/b".into(),
        "".into(),
        "..".into(),
        "x".repeat(129),
        "a\0b".into(),
        "ünï".into(),
    ]
}

/// A job that answers at once: the engine still serves jobs.
#[derive(Serialize, Deserialize)]
pub struct Ping;

impl Job for Ping {
    const NAME: &'static str = "ping";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<String, Self::Error> {
        Ok("pong".into())
    }
}

/// Queue options for tests: a 1 ms flush, zero retry backoff (retries are
/// immediate), the given clock.
pub fn test_options(clock: Arc<MockClock>) -> OpenOptions {
    OpenOptions::default()
        .flush_interval(Duration::from_millis(1))
        .clock(clock)
        .default_queue_config(QueueConfig::default().retry_backoff_base(Duration::ZERO))
}

/// A builder on the in-memory store with [`test_options`].
pub fn memory_builder(clock: Arc<MockClock>) -> EngineBuilder {
    gaffer::Engine::builder()
        .store(gaffer::Store::in_memory())
        .open_options(test_options(clock))
        .poll_interval(Duration::from_millis(20))
}

/// A builder on a local directory with [`test_options`].
pub fn disk_builder(dir: &std::path::Path, clock: Arc<MockClock>) -> EngineBuilder {
    gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .open_options(test_options(clock))
        .poll_interval(Duration::from_millis(20))
}

/// A fresh in-memory object store that several engines (one after another)
/// can open, to check what survives a shutdown.
pub fn shared_store() -> Arc<gaffer::taquba::object_store::memory::InMemory> {
    Arc::new(gaffer::taquba::object_store::memory::InMemory::new())
}

/// SlateDB's clock under paused tokio time: each open starts it at the real
/// time, and it advances with tokio's (paused) time, so an engine that ran
/// through seconds of paused time leaves ticks in the store ahead of the
/// real clock, and the next open of that store refuses them as going back
/// in time ("invalid clock tick, must be monotonic"). Call with when the
/// previous engine opened (real and paused time) before opening the store
/// again: blocks until the real clock has caught up with its ticks.
pub fn let_the_store_clock_catch_up(opened: (std::time::SystemTime, tokio::time::Instant)) {
    let paused = tokio::time::Instant::now().duration_since(opened.1);
    let real = opened.0.elapsed().unwrap_or_default();
    if let Some(ahead) = paused.checked_sub(real) {
        // A blocking wait on purpose: nothing runs meanwhile (the engine
        // is shut down), and tokio's paused time must not move.
        std::thread::sleep(ahead + Duration::from_millis(20));
    }
}

/// A builder on the given object store with [`test_options`].
pub fn store_builder(
    store: Arc<dyn gaffer::taquba::object_store::ObjectStore>,
    clock: Arc<MockClock>,
) -> EngineBuilder {
    gaffer::Engine::builder()
        .store(gaffer::Store::object_store(store))
        .open_options(test_options(clock))
        .poll_interval(Duration::from_millis(20))
}

/// A builder on the given in-memory store with [`test_options`]: engines
/// started one after the other on the same store see each other's records.
pub fn shared_memory_builder(
    store: Arc<gaffer::taquba::object_store::memory::InMemory>,
    clock: Arc<MockClock>,
) -> EngineBuilder {
    gaffer::Engine::builder()
        .store(gaffer::Store::object_store(store))
        .open_options(test_options(clock))
        .poll_interval(Duration::from_millis(20))
}

/// The counts of every queue in the store, summed: the engine keeps one queue
/// per job type and pipeline.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub pending: i64,
    pub claimed: i64,
    pub scheduled: i64,
    pub done: i64,
    pub dead: i64,
}

/// [`Totals`] of the queues whose names start with `prefix` (`""`: all).
pub async fn totals(view: &gaffer::taquba::QueueView, prefix: &str) -> Totals {
    let mut t = Totals::default();
    for name in view.list_queues().await.unwrap() {
        if !name.starts_with(prefix) {
            continue;
        }
        let s = view.stats(&name).await.unwrap();
        t.pending += s.pending;
        t.claimed += s.claimed;
        t.scheduled += s.scheduled;
        t.done += s.done;
        t.dead += s.dead;
    }
    t
}

/// The queue of job type `name` under the default prefix.
pub fn job_queue(name: &str) -> String {
    gaffer::testing::layout::keys::queue_for("jobs", name)
}

/// The queue of pipeline `name` under the default prefix.
pub fn item_queue(name: &str) -> String {
    gaffer::testing::layout::keys::queue_for("bulk-items", name)
}

/// Submit options that queue a job for a minute after [`T0_MS`] on the mock
/// clock, so it is still queued when the engine that submitted it stops.
pub fn a_minute_later() -> gaffer::SubmitOptions {
    gaffer::SubmitOptions {
        run_at: Some(std::time::UNIX_EPOCH + Duration::from_millis(T0_MS + 60_000)),
        ..Default::default()
    }
}

/// Move `clock` on by `by` and have `engine`'s queue promote what is due.
pub async fn time_passes(engine: &gaffer::Engine, clock: &MockClock, by: Duration) {
    clock.advance(by);
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    queue.promote_scheduled_now().await.unwrap();
}

/// A mock clock `by` ahead of the wall clock: an engine opened on it after
/// a killed one finds the waits the killed one began (on the wall clock)
/// over.
pub fn clock_ahead(by: Duration) -> Arc<MockClock> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        + by;
    Arc::new(MockClock::new(u64::try_from(now.as_millis()).unwrap()))
}

/// Move `clock` past [`a_minute_later`] and have `engine`'s queue promote what
/// was scheduled for then.
pub async fn a_minute_passes(engine: &gaffer::Engine, clock: &MockClock) {
    clock.advance(Duration::from_secs(61));
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    queue.promote_scheduled_now().await.unwrap();
}

/// A gate that jobs (or batch items) wait at until the test lets them through.
///
/// [`Gate::open`] lets every waiter through, now and later: the gate stays
/// open, so a later attempt of the same job passes straight on.
/// [`Gate::release`] lets `n` more waiters through, one each, and keeps the
/// gate closed for the rest. The gate counts the waiters that reached it
/// ([`Gate::entered`], [`Gate::wait_entered`]). Clones share the gate.
#[derive(Clone, Debug)]
pub struct Gate(Arc<GateInner>);

#[derive(Debug)]
struct GateInner {
    open: tokio::sync::watch::Sender<bool>,
    permits: tokio::sync::Semaphore,
    entered: tokio::sync::watch::Sender<usize>,
}

impl Gate {
    /// A closed gate: waiters wait until it opens or is released.
    pub fn closed() -> Self {
        Self(Arc::new(GateInner {
            open: tokio::sync::watch::channel(false).0,
            permits: tokio::sync::Semaphore::new(0),
            entered: tokio::sync::watch::channel(0).0,
        }))
    }

    /// An open gate: waiters pass straight through.
    pub fn opened() -> Self {
        let gate = Self::closed();
        gate.open();
        gate
    }

    /// Let every waiter through, now and from now on.
    pub fn open(&self) {
        self.0.open.send_replace(true);
    }

    /// Let `n` more waiters through (one each); the gate stays closed.
    pub fn release(&self, n: usize) {
        self.0.permits.add_permits(n);
    }

    /// Count this waiter as entered (at once, when called), then wait until
    /// the gate is open or a released place is free for it.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + '_ {
        self.0.entered.send_modify(|n| *n += 1);
        async move {
            let mut open = self.0.open.subscribe();
            tokio::select! {
                biased;
                _ = open.wait_for(|open| *open) => {}
                permit = self.0.permits.acquire() => {
                    permit.expect("the gate's semaphore is never closed").forget();
                }
            }
        }
    }

    /// How many waiters have reached the gate so far (through or not).
    pub fn entered(&self) -> usize {
        *self.0.entered.borrow()
    }

    /// Wait until `n` waiters have reached the gate; panics after `limit`.
    pub async fn wait_entered(&self, n: usize, limit: Duration) {
        let mut entered = self.0.entered.subscribe();
        tokio::time::timeout(limit, entered.wait_for(|e| *e >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} waiters did not reach the gate within {limit:?}"))
            .expect("the gate is alive while borrowed");
    }
}

/// Counts handler runs, in all and by name (`work-3`, `keyed-7`, …). Clones
/// share the counts: engine state (as it is, or in an `Arc`) shared between
/// a test and every engine it starts.
#[derive(Clone, Debug, Default)]
pub struct Runs(Arc<Mutex<HashMap<String, usize>>>);

impl Runs {
    /// Count one run.
    pub fn hit(&self) {
        self.hit_of(String::new());
    }

    /// Count one run of `name`.
    pub fn hit_of(&self, name: impl Into<String>) {
        *self.0.lock().unwrap().entry(name.into()).or_default() += 1;
    }

    /// The runs counted so far, of every name.
    pub fn get(&self) -> usize {
        self.0.lock().unwrap().values().sum()
    }

    /// The runs of `name` counted so far.
    pub fn of(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    /// The names that ran more than once, sorted.
    pub fn repeated(&self) -> Vec<String> {
        let mut names: Vec<_> = self
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, _)| k.clone())
            .collect();
        names.sort();
        names
    }
}

/// A batch sink that keeps every record it is given, in order, and publishes
/// how many it has.
pub struct CollectSink {
    records: std::sync::Mutex<Vec<gaffer::sink::OutputRecord>>,
    count: tokio::sync::watch::Sender<usize>,
}

impl CollectSink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            records: std::sync::Mutex::new(Vec::new()),
            count: tokio::sync::watch::channel(0).0,
        })
    }

    /// The records so far, in the order they were written.
    pub fn records(&self) -> Vec<gaffer::sink::OutputRecord> {
        self.records.lock().unwrap().clone()
    }

    /// The records so far by item key.
    pub fn by_key(&self) -> std::collections::HashMap<String, gaffer::sink::OutputRecord> {
        self.records()
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect()
    }

    /// How many records were written so far.
    pub fn len(&self) -> usize {
        self.records.lock().unwrap().len()
    }

    /// Wait until `n` records were written; panics after `limit`.
    pub async fn wait_for(&self, n: usize, limit: Duration) {
        let mut count = self.count.subscribe();
        tokio::time::timeout(limit, count.wait_for(|c| *c >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} records were not written within {limit:?}"))
            .expect("the sink is alive while borrowed");
    }
}

impl gaffer::sink::OutputSink for CollectSink {
    fn write(&self, record: &gaffer::sink::OutputRecord) -> gaffer::Result<()> {
        let mut records = self.records.lock().unwrap();
        records.push(record.clone());
        self.count.send_replace(records.len());
        Ok(())
    }
}

/// Kill the engine's child `kind` (feature `testing`); panics if it has none.
pub async fn kill(engine: &gaffer::Engine, kind: gaffer::testing::ChildKind) {
    let found = gaffer::ractor::call!(
        engine.actor(),
        gaffer::protocol::EngineMessage::KillChild,
        kind.clone()
    )
    .unwrap();
    assert!(found, "{kind:?} not found");
}

/// Workers of `job_type` running a job now (0 if it has no pool).
pub async fn running(engine: &gaffer::Engine, job_type: &str) -> usize {
    engine
        .pool_stats()
        .await
        .unwrap()
        .get(job_type)
        .map_or(0, |s| s.running)
}

/// Settlements of `job_type` in flight now (0 if it has no pool).
pub async fn settling(engine: &gaffer::Engine, job_type: &str) -> usize {
    engine
        .pool_stats()
        .await
        .unwrap()
        .get(job_type)
        .map_or(0, |s| s.settling)
}

/// The engine's waiters actor (the supervisor's child that takes
/// `WaitersMessage`), if one is alive.
pub fn waiters(
    engine: &gaffer::Engine,
) -> Option<gaffer::ractor::ActorRef<gaffer::testing::WaitersMessage>> {
    engine
        .actor()
        .get_children()
        .into_iter()
        .find(|child| {
            child.is_message_type_of::<gaffer::testing::WaitersMessage>() == Some(true)
                && child.get_status() == gaffer::ractor::ActorStatus::Running
        })
        .map(Into::into)
}

/// How many runs callers wait on (`join`s, watches) in the waiters actor now.
pub async fn waiting_runs(engine: &gaffer::Engine) -> usize {
    let waiters = waiters(engine).expect("the engine has a waiters actor");
    gaffer::ractor::call!(waiters, gaffer::testing::WaitersMessage::GetWaiting)
        .expect("the waiters answer")
}
