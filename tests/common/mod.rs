//! Shared test helpers: engines on the in-memory store (paused-time friendly)
//! or a local directory, a mock clock, and event waiting without sleeps.
//!
//! The fixtures that only one family of test files shares live in submodules:
//! [`bulk`] (the bulk runner's tests), [`jobs`] (the `jobs_*` files and
//! `idempotency.rs`), [`faults`] (the object-store fault tests) and [`s3`]
//! (moto's S3 server on loopback). The child-process helpers
//! ([`test_child`], [`spawn_test_child`], [`Children`], [`child_logs`],
//! [`eventually_blocking`]) serve the tests that run real processes.
#![allow(dead_code)]

pub mod bulk;
pub mod faults;
pub mod jobs;
pub mod s3;

use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::taquba::{MockClock, OpenOptions, QueueConfig};
use gaffer::{EngineBuilder, EngineEvent, Job, JobContext};
use serde::{Deserialize, Serialize};

/// Upper bound (tokio time: virtual under paused time) for anything a test
/// waits on with [`within`].
pub const LIMIT: Duration = Duration::from_secs(60);

/// Await `f`; panics after [`LIMIT`] instead of hanging the test.
pub async fn within<F: IntoFuture>(f: F) -> F::Output {
    within_for(LIMIT, f).await
}

/// Await `f`; panics after `limit` instead of hanging the test.
pub async fn within_for<F: IntoFuture>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

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

/// A fixed start time for mock clocks (2026-01-01T00:00:00Z).
pub const T0_MS: u64 = 1_767_225_600_000;

/// A mock clock at [`T0_MS`].
pub fn mock_clock() -> Arc<MockClock> {
    Arc::new(MockClock::new(T0_MS))
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

/// Receive events until one matches `pred`; panics after `limit` of wall/virtual time.
pub async fn wait_event(
    rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    limit: Duration,
    mut pred: impl FnMut(&EngineEvent) -> bool,
) -> EngineEvent {
    tokio::time::timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(ev) if pred(&ev) => return ev,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event channel closed: {e}"),
            }
        }
    })
    .await
    .expect("the expected event did not arrive in time")
}

/// Poll `check` every 5 ms of tokio time (paused tests advance it) until it
/// says yes; panics, naming `what`, if it has not said so within `limit`.
/// For states that no event announces; wait for an event with [`wait_event`].
pub async fn eventually(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let polled = tokio::time::timeout(limit, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    if polled.is_err() {
        panic!("timed out after {limit:?} waiting until {what}");
    }
}

/// [`eventually`], and a timeout's panic also says `context()` (the child
/// processes' logs, say: [`child_logs`]).
pub async fn eventually_or(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    let polled = tokio::time::timeout(limit, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    if polled.is_err() {
        panic!(
            "timed out after {limit:?} waiting until {what}; {}",
            context()
        );
    }
}

/// [`eventually`] for a test thread without a runtime (the parent of child
/// processes): polls `check` every 20 ms of real time until it says yes;
/// panics, naming `what`, if it has not said so within `limit`.
pub fn eventually_blocking(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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

/// Receive events (keeping them all) until `done` says the collection is
/// complete; panics after `limit` of wall/virtual time.
pub async fn collect_events_until(
    rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    limit: Duration,
    mut done: impl FnMut(&[EngineEvent]) -> bool,
) -> Vec<EngineEvent> {
    let mut seen = Vec::new();
    let outcome = tokio::time::timeout(limit, async {
        loop {
            if done(&seen) {
                return;
            }
            match rx.recv().await {
                Ok(ev) => seen.push(ev),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    panic!("event subscriber lagged by {n} events")
                }
                Err(e) => panic!("event channel closed: {e}"),
            }
        }
    })
    .await;
    if outcome.is_err() {
        panic!("the expected events did not arrive in time; saw {seen:#?}");
    }
    seen
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

/// Counts handler runs; shared (in an `Arc`, as engine state) between a test
/// and every engine it starts.
#[derive(Debug, Default)]
pub struct Runs(AtomicUsize);

impl Runs {
    /// Count one run.
    pub fn hit(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    /// The runs counted so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
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

/// This test binary as a child process that runs its ignored test `test`
/// alone (`test --exact --ignored --nocapture`); the caller adds the
/// environment and where the output goes. A real process, for tests that
/// SIGKILL it or that need several processes.
pub fn test_child(test: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--ignored", "--nocapture"]);
    cmd
}

/// Run this test binary's ignored test `test` as a child process with
/// `{var}={dir}` set (the child reads its directory from it), its output in
/// `{dir}/child.log`: a real process, for crash tests that SIGKILL it.
pub fn spawn_test_child(test: &str, var: &str, dir: &std::path::Path) -> std::process::Child {
    let log = std::fs::File::create(dir.join("child.log")).unwrap();
    test_child(test)
        .env(var, dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Write `contents` to `path` whole: to a file beside it first, then
/// renamed. For a file another process waits to see (it polls for it to
/// exist): a plain `std::fs::write` creates the file before it writes to it,
/// so the other could read it empty or cut short (and a kill that follows
/// at once would leave it so).
pub fn write_whole(path: &std::path::Path, contents: impl AsRef<[u8]>) {
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    std::fs::write(&part, contents).unwrap();
    std::fs::rename(&part, path).unwrap();
}

/// Wait until the child process that logs to `{dir}/child.log` has written
/// `path` (a minute at most; then panic with its log).
pub async fn wait_for_child_file(dir: &std::path::Path, path: &std::path::Path, what: &str) {
    let t0 = std::time::Instant::now();
    while !path.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what} did not happen in the child process: {}",
            std::fs::read_to_string(dir.join("child.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The end (its last `tail` bytes, or fewer to end on a character
/// boundary) of every `*.log` file in `dir` but the `runs-*` ones, each
/// under its name: what child processes said, for a test's panic message.
pub fn child_logs(dir: &std::path::Path, tail: usize) -> String {
    let mut logs: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with("runs-"))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let mut start = text.len().saturating_sub(tail);
            while !text.is_char_boundary(start) {
                start += 1;
            }
            format!("{:?}: {}", e.file_name(), &text[start..])
        })
        .collect();
    logs.sort();
    logs.join("\n")
}

/// Child processes by name, killed (and reaped) when dropped: a failed
/// assertion leaves none running.
#[derive(Default)]
pub struct Children(pub std::collections::HashMap<String, std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in self.0.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
