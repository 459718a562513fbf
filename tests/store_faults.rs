//! Object-store faults under a running engine, with `FaultyStore` (feature
//! `testing`) around a shared `InMemory`.
//!
//! What the store layers do with a fault decides what is tested:
//!
//! - The queue's commits (submissions, claims, settlements, batch feeds) are
//!   SlateDB WAL and manifest writes. SlateDB 0.17 wraps the store in its
//!   `RetryingObjectStore`, which retries a `Generic` error with backoff
//!   (100 ms .. 1 s) **without limit** (taquba leaves
//!   `object_store_max_retries` at `None`). So a put outage *stalls* every
//!   commit until the store recovers: nothing fails, nothing closes, and no
//!   `StoreClosed` is emitted; callers wait (a submit or a join stays pending).
//! - Objects written outside SlateDB are not retried: gaffer's memo entries
//!   and large outputs, and taquba's offloaded payloads (over 256 KiB) fail at
//!   once with the injected error (an immediate memo write fails the attempt
//!   with a transient error; a large submission returns the error).
//!
//! The tests check: during an outage the engine stays up and reports nothing
//! as done; after it every job and batch item completes exactly once, with its
//! record; a crash in the middle of an outage (another engine takes the store
//! over) loses and duplicates no reported outcome, and the stalled engine is
//! fenced; memo faults retry; latency slows but does not stop a batch.
//!
//! A join (or `fetch_result`, `status`) that starts while a settlement waits
//! for the WAL is not answered from the record SlateDB already holds in memory
//! (taquba's reads include data not yet durable) but once the commit is
//! durable; a shutdown with a grace period returns during an outage.
//!
//! The outage tests run in real time: SlateDB stamps L0 SSTs from a clock
//! that starts at the wall clock and runs on tokio's clock, and refuses (at
//! the next manifest update) an L0 older than one already published, so under
//! paused time a second engine opened after virtual time ran ahead of the
//! wall clock fails with "invalid clock tick, must be monotonic" (a test
//! artifact). The queue clock is a `MockClock`, so leases never expire. The
//! memo test, which opens one engine, runs under paused time.

mod common;

use std::collections::{HashMap, HashSet};
use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::ractor::ActorStatus;
use gaffer::taquba::MockClock;
use gaffer::taquba::object_store::ObjectStore;
use gaffer::taquba::object_store::memory::InMemory;
use gaffer::{
    BulkCtx, Engine, EngineBuilder, EngineEvent, FailureKind, ItemError, Job, JobContext, Pipeline,
};
use gaffer_actors::testing::{FaultControl, FaultyStore, Op, Ops};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use common::{CollectSink, Gate};

/// Upper bound (virtual time) for anything a test waits on.
const LIMIT: Duration = Duration::from_secs(300);

/// How long an outage lasts (real time): several rounds of SlateDB's retry
/// backoff (100 ms doubling to 1 s).
const OUTAGE: Duration = Duration::from_secs(3);

/// After faults start, commits whose write was already through may still land;
/// this long after, nothing can.
const SETTLE: Duration = Duration::from_secs(1);

/// Await `f`, failing the test instead of hanging it.
async fn within<F: IntoFuture>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("did not finish within the limit")
}

// ---------------------------------------------------------------------------
// Jobs, a pipeline and a sink that count what ran
// ---------------------------------------------------------------------------

/// Handler runs per job name (`work-3`, `keyed-7`, …), across engines.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<String, usize>>>);

impl Runs {
    fn hit(&self, name: String) {
        *self.0.lock().unwrap().entry(name).or_default() += 1;
    }

    fn of(&self, name: &str) -> usize {
        self.0.lock().unwrap().get(name).copied().unwrap_or(0)
    }

    /// Names that ran more than once.
    fn repeated(&self) -> Vec<String> {
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

/// An unkeyed job.
#[derive(Serialize, Deserialize)]
struct Work(u32);

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Runs>().hit(format!("work-{}", self.0));
        Ok(self.0 * 2)
    }
}

/// A keyed job: one job per number, whoever submits it.
#[derive(Serialize, Deserialize)]
struct Keyed(u32);

impl Job for Keyed {
    const NAME: &'static str = "keyed";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Runs>().hit(format!("keyed-{}", self.0));
        Ok(self.0 * 3)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("keyed-{}", self.0))
    }
}

/// A job that runs until the gate opens, so the test can hold jobs in their
/// handlers and end them (and start their settlements) when it chooses.
#[derive(Serialize, Deserialize)]
struct Slow(u32);

impl Job for Slow {
    const NAME: &'static str = "slow";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Gate>().wait().await;
        // Counted when the handler is done: a run that completed.
        ctx.state::<Runs>().hit(format!("slow-{}", self.0));
        Ok(self.0 * 7)
    }
}

/// Waits for the gate, then returns how many times its handler has run: the
/// output of a re-run differs from the output of the first run.
#[derive(Serialize, Deserialize)]
struct Stamp(u32);

impl Job for Stamp {
    const NAME: &'static str = "stamp";
    type Output = usize;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<usize, Self::Error> {
        ctx.state::<Gate>().wait().await;
        let name = format!("stamp-{}", self.0);
        let runs = ctx.state::<Runs>();
        runs.hit(name.clone());
        Ok(runs.of(&name))
    }
}

/// A job whose payload is over taquba's offload threshold (256 KiB): its
/// submission writes an object outside SlateDB.
#[derive(Serialize, Deserialize)]
struct Big(Vec<u8>);

impl Job for Big {
    const NAME: &'static str = "big";
    type Output = usize;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<usize, Self::Error> {
        Ok(self.0.len())
    }
}

/// A job that memoizes its one expensive step.
#[derive(Serialize, Deserialize)]
struct Memoed(u32);

impl Job for Memoed {
    const NAME: &'static str = "memoed";
    type Output = u32;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let runs = ctx.state::<Runs>().clone();
        runs.hit(format!("memoed-{}", self.0));
        let n = self.0;
        ctx.memo()
            .memoized("step", || async move {
                runs.hit(format!("memoed-step-{n}"));
                Ok::<_, gaffer::Error>(n * 5)
            })
            .await
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(1000)
    }
}

/// Doubles its input; counts runs per input. Inputs from [`HELD`] on wait for
/// the gate first.
struct Double {
    runs: Arc<Vec<AtomicUsize>>,
    gate: Gate,
}

/// The first input a [`Double`] holds until its gate opens.
const HELD: u64 = 100;

impl Pipeline for Double {
    const NAME: &'static str = "double";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        if ctx.input >= HELD {
            self.gate.wait().await;
        }
        self.runs[ctx.input as usize].fetch_add(1, Ordering::SeqCst);
        Ok(ctx.input * 2)
    }
}

fn item_runs(n: usize) -> Arc<Vec<AtomicUsize>> {
    Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect())
}

// ---------------------------------------------------------------------------
// Engines and events
// ---------------------------------------------------------------------------

const ITEMS: usize = 200;

/// Jobs held in their handlers by the gate when an outage starts.
const SLOW: u32 = 8;

fn builder(
    store: Arc<dyn ObjectStore>,
    clock: Arc<MockClock>,
    runs: &Runs,
    gate: &Gate,
) -> EngineBuilder {
    common::store_builder(store, clock)
        .state(runs.clone())
        .state(gate.clone())
        .register::<Work>()
        .register::<Slow>()
        .register::<Stamp>()
        .register::<Keyed>()
        .register::<Big>()
        .register::<Memoed>()
}

fn faulty(inner: &Arc<InMemory>) -> (Arc<dyn ObjectStore>, FaultControl) {
    FaultyStore::wrap(inner.clone())
}

/// Every event of one engine, kept as they arrive.
#[derive(Clone)]
struct EventLog {
    events: Arc<Mutex<Vec<EngineEvent>>>,
    lagged: Arc<AtomicUsize>,
    seen: tokio::sync::watch::Sender<usize>,
}

impl EventLog {
    fn follow(engine: &Engine) -> Self {
        Self::follow_from(engine.subscribe())
    }

    /// Follow from a subscription taken on the builder: no event of the
    /// engine's start is missed (a takeover engine runs jobs at once).
    fn follow_from(mut rx: tokio::sync::broadcast::Receiver<EngineEvent>) -> Self {
        let log = Self {
            events: Arc::default(),
            lagged: Arc::default(),
            seen: tokio::sync::watch::channel(0).0,
        };
        let l = log.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(event) => {
                        let mut events = l.events.lock().unwrap();
                        events.push(event);
                        l.seen.send_replace(events.len());
                    }
                    Err(RecvError::Lagged(n)) => {
                        l.lagged.fetch_add(n as usize, Ordering::SeqCst);
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        });
        log
    }

    /// Run ids of `JobSucceeded` events, in order (duplicates kept).
    fn succeeded(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                EngineEvent::JobSucceeded { run_id, .. } => Some(run_id.clone()),
                _ => None,
            })
            .collect()
    }

    fn count(&self, pred: impl Fn(&EngineEvent) -> bool) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| pred(e))
            .count()
    }

    fn store_closed(&self) -> Option<String> {
        self.events.lock().unwrap().iter().find_map(|e| match e {
            EngineEvent::StoreClosed { reason } => Some(reason.clone()),
            _ => None,
        })
    }

    /// Wait until `pred` holds for the events so far.
    async fn wait_until(&self, pred: impl Fn(&[EngineEvent]) -> bool) {
        let mut rx = self.seen.subscribe();
        within(async {
            loop {
                if pred(&self.events.lock().unwrap()) {
                    return;
                }
                rx.changed().await.unwrap();
            }
        })
        .await
    }

    fn lagged(&self) -> usize {
        self.lagged.load(Ordering::SeqCst)
    }
}

fn started(events: &[EngineEvent], job: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, EngineEvent::JobStarted { job_type, .. } if job_type == job))
        .count()
}

fn successes(events: &[EngineEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, EngineEvent::JobSucceeded { .. }))
        .count()
}

/// The engine answers while the store is out: the supervisor runs and the
/// pools report.
async fn assert_engine_up(engine: &Engine) -> HashMap<String, gaffer::PoolStats> {
    assert_eq!(engine.actor().get_status(), ActorStatus::Running);
    tokio::time::timeout(Duration::from_secs(5), engine.engine_ref().pool_stats())
        .await
        .expect("pool stats did not answer during the outage")
        .expect("pool stats")
}

/// Wait (bounded) until `n` settlements of `job_type` are in flight, asking
/// the engine (it must answer throughout the outage).
async fn wait_settling(
    engine: &Engine,
    job_type: &str,
    n: usize,
) -> HashMap<String, gaffer::PoolStats> {
    let mut stats = HashMap::new();
    common::eventually(
        "the settlements are in flight",
        Duration::from_secs(10),
        async || {
            stats = assert_engine_up(engine).await;
            stats[job_type].settling >= n
        },
    )
    .await;
    stats
}

/// Durable check on a fresh engine over the raw store: every job reported
/// succeeded has its outcome record with the right value. Returns the number
/// of reported outcomes without a record (lost).
async fn lost_outcomes(engine: &Engine, reported: &HashMap<String, (String, u32)>) -> usize {
    let mut lost = 0;
    for (run_id, (kind, expected)) in reported {
        let found = match kind.as_str() {
            "work" => engine.handle::<Work>(run_id).unwrap().fetch_result().await,
            "keyed" => engine.handle::<Keyed>(run_id).unwrap().fetch_result().await,
            "slow" => engine.handle::<Slow>(run_id).unwrap().fetch_result().await,
            other => unreachable!("{other}"),
        }
        .unwrap();
        match found {
            Some(Ok(v)) => assert_eq!(v, *expected, "{run_id}"),
            Some(Err(e)) => panic!("{run_id} was reported succeeded but recorded {e:?}"),
            None => lost += 1,
        }
    }
    lost
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_outage_stalls_commits_without_false_successes_and_afterwards_every_job_runs_exactly_once()
 {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let engine = builder(store, clock.clone(), &runs, &gate)
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);

    // Load: 8 jobs held in their handlers by the gate, 100 unkeyed and 20
    // keyed jobs. The outage starts while they run.
    let mut slow = Vec::new();
    for n in 0..SLOW {
        slow.push((n, engine.submit(Slow(n)).await.unwrap()));
    }
    let mut work = Vec::new();
    for n in 0..100 {
        work.push((n, engine.submit(Work(n)).await.unwrap()));
    }
    let mut keyed = Vec::new();
    for n in 0..20 {
        keyed.push((n, engine.submit(Keyed(n)).await.unwrap()));
    }
    log.wait_until(|e| successes(e) >= 10 && started(e, "slow") >= SLOW as usize)
        .await;
    // Callers wait on the held jobs. Their waiters register while the jobs
    // still run (the gate is closed, so no settlement can have started), and
    // are told by the settlement once it commits, durably. (A join that
    // starts during the outage waits for durability too: see
    // `a_join_during_an_outage_is_not_answered_before_the_outcome_is_durable`.)
    let mut pending_joins: Vec<_> = slow
        .iter()
        .map(|(_, h)| {
            let h = h.clone();
            tokio::spawn(async move { h.join().await })
        })
        .collect();
    // Time for the waiters to read the run records (nothing can settle before
    // the gate opens, so this only orders the reads before the outage).
    tokio::time::sleep(Duration::from_millis(200)).await;
    faults.fail(Ops::PUT | Ops::MULTIPART);
    // The held jobs end now: their handlers are done, their settlements
    // cannot commit.
    gate.open();
    // Commits whose WAL write was already through may still land.
    tokio::time::sleep(SETTLE).await;
    let reported_before = log.succeeded().len();
    let faults_at_start = faults.injected();

    // During the outage: submissions stall (they are not refused, and not
    // acknowledged).
    let mut stalled_work = Vec::new();
    for n in 100..130 {
        let e = engine.clone();
        stalled_work.push((n, tokio::spawn(async move { e.submit(Work(n)).await })));
    }
    let mut stalled_keyed = Vec::new();
    for n in 20..30 {
        let e = engine.clone();
        stalled_keyed.push((n, tokio::spawn(async move { e.submit(Keyed(n)).await })));
    }

    // A submission whose payload goes to an object outside SlateDB fails at
    // once, and its error says what failed.
    let big = tokio::time::timeout(
        Duration::from_secs(5),
        engine.submit(Big(vec![7; 300 * 1024])),
    )
    .await
    .expect("a large submission during the outage did not answer");
    let big_err = big.expect_err("a large submission during a put outage must fail");
    eprintln!("large submission during the outage: {big_err}");
    assert!(big_err.to_string().contains("injected fault"), "{big_err}");
    assert!(!big_err.is_permanent(), "{big_err}");

    tokio::time::sleep(OUTAGE).await;
    let stats = assert_engine_up(&engine).await;
    eprintln!("pool stats during the outage: {stats:?}");
    for (n, task) in &stalled_work {
        assert!(
            !task.is_finished(),
            "submission of work-{n} answered during the outage"
        );
    }
    for (n, task) in &stalled_keyed {
        assert!(
            !task.is_finished(),
            "submission of keyed-{n} answered during the outage"
        );
    }
    for join in pending_joins.iter_mut() {
        if join.is_finished() {
            let answer = join.await;
            panic!("a join answered during the outage: {answer:?}");
        }
    }
    // The held jobs ran and wait on their settlements.
    assert_eq!(stats["slow"].settling, SLOW as usize, "{stats:?}");
    for n in 0..SLOW {
        assert_eq!(runs.of(&format!("slow-{n}")), 1);
    }
    assert_eq!(
        log.succeeded().len(),
        reported_before,
        "a job was reported succeeded while no write could commit"
    );
    assert!(faults.injected() > faults_at_start, "{}", faults.stats());
    assert_eq!(log.store_closed(), None);
    let during = faults.stats();

    // The store recovers: everything stalled goes through.
    faults.heal();
    for (n, task) in stalled_work {
        work.push((n, within(task).await.unwrap().unwrap()));
    }
    for (n, task) in stalled_keyed {
        keyed.push((n, within(task).await.unwrap().unwrap()));
    }
    for join in pending_joins {
        within(join).await.unwrap().unwrap().unwrap();
    }
    let mut reported = HashMap::new();
    for (n, handle) in &slow {
        assert_eq!(within(handle.join()).await.unwrap().unwrap(), n * 7);
        reported.insert(handle.id().to_string(), ("slow".to_string(), n * 7));
    }
    for (n, handle) in &work {
        assert_eq!(within(handle.join()).await.unwrap().unwrap(), n * 2);
        reported.insert(handle.id().to_string(), ("work".to_string(), n * 2));
    }
    for (n, handle) in &keyed {
        assert_eq!(within(handle.join()).await.unwrap().unwrap(), n * 3);
        reported.insert(handle.id().to_string(), ("keyed".to_string(), n * 3));
    }
    // A keyed resubmission is answered from the record, not run again.
    for n in 0..30 {
        let again = engine.submit(Keyed(n)).await.unwrap();
        assert!(!again.newly_submitted());
        assert_eq!(within(again.join()).await.unwrap().unwrap(), n * 3);
    }
    // The large job goes through once the store is back.
    let big = engine.submit(Big(vec![7; 300 * 1024])).await.unwrap();
    assert_eq!(within(big).await.unwrap(), 300 * 1024);

    for n in 0..130 {
        assert_eq!(runs.of(&format!("work-{n}")), 1, "work-{n}");
    }
    for n in 0..30 {
        assert_eq!(runs.of(&format!("keyed-{n}")), 1, "keyed-{n}");
    }
    for n in 0..SLOW {
        assert_eq!(runs.of(&format!("slow-{n}")), 1, "slow-{n}");
    }
    let succeeded = log.succeeded();
    let distinct: HashSet<_> = succeeded.iter().collect();
    let duplicated = succeeded.len() - distinct.len();
    assert_eq!(duplicated, 0, "a job was reported succeeded twice");
    assert_eq!(distinct.len(), SLOW as usize + 130 + 30 + 1);
    assert_eq!(log.store_closed(), None);
    assert_eq!(log.lagged(), 0);
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");

    // Another engine on the raw store finds every reported outcome.
    let engine = builder(inner.clone(), clock, &runs, &gate)
        .start()
        .await
        .unwrap();
    let lost = lost_outcomes(&engine, &reported).await;
    assert_eq!(lost, 0);
    let queue = engine.engine_ref().services().queue().unwrap();
    let jobs = common::totals(queue.view(), "jobs.").await;
    assert_eq!((jobs.pending, jobs.claimed), (0, 0), "{jobs:?}");
    drop(queue);
    assert!(runs.repeated().is_empty(), "{:?}", runs.repeated());
    engine.shutdown().await.unwrap();

    eprintln!(
        "store_faults[jobs outage]: {} faults injected during a {}s put outage \
         ({during}); store totals: {}; jobs completed {} ({SLOW} held in handlers at the \
         outage, 130 work, 30 keyed, 1 big); reported before the outage {reported_before}; \
         lost outcomes {lost}; duplicated outcomes {duplicated}; handler re-runs {}",
        during.injected,
        OUTAGE.as_secs(),
        faults.stats(),
        distinct.len(),
        runs.repeated().len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_interrupted_by_a_put_outage_completes_every_item_exactly_once() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let per_item = item_runs(ITEMS);
    let gate = Gate::closed();
    let engine = builder(store, clock.clone(), &runs, &Gate::opened())
        .pipeline(Double {
            runs: per_item.clone(),
            gate: gate.clone(),
        })
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);
    let sink = CollectSink::new();
    let batch = engine.batch::<Double>("outage").unwrap().sink(sink.clone());
    let run = {
        let engine = engine.clone();
        let sink = sink.clone();
        tokio::spawn(async move {
            engine
                .batch::<Double>("outage")
                .unwrap()
                .sink(sink)
                .run(0..ITEMS as u64)
                .await
        })
    };

    // The items below HELD settle; the others wait in their handlers until
    // the outage has started, then end with settlements that cannot commit.
    sink.wait_for(HELD as usize, LIMIT).await;
    faults.fail(Ops::PUT | Ops::MULTIPART);
    gate.open();
    tokio::time::sleep(SETTLE).await;
    let settled_before = sink.len();
    assert_eq!(settled_before, HELD as usize);
    tokio::time::sleep(OUTAGE).await;
    let stats = assert_engine_up(&engine).await;
    assert_eq!(
        sink.len(),
        settled_before,
        "items were reported settled while no write could commit"
    );
    assert!(!run.is_finished());
    // The held items ran and wait on their settlements.
    assert_eq!(stats["double"].settling, ITEMS - HELD as usize, "{stats:?}");
    let progress = batch.progress().await.expect("the run is active");
    assert_eq!(progress.completed, HELD, "{progress:?}");
    let during = faults.stats();
    assert!(during.injected > 0, "{during}");

    faults.heal();
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(
        (
            report.total,
            report.succeeded,
            report.failed,
            report.cancelled
        ),
        (ITEMS as u64, ITEMS as u64, 0, 0),
        "{report:?}"
    );
    let status = batch.status().await.unwrap();
    assert_eq!(
        (
            status.total,
            status.succeeded,
            status.failed,
            status.pending
        ),
        (ITEMS as u64, ITEMS as u64, 0, 0),
        "{status:?}"
    );
    let records = sink.records();
    let keys: HashSet<_> = records.iter().map(|r| r.key.clone()).collect();
    let duplicated = records.len() - keys.len();
    assert_eq!(duplicated, 0, "an item was streamed twice");
    assert_eq!(keys.len(), ITEMS);
    assert!(records.iter().all(|r| r.status == "succeeded"));
    let reruns: Vec<_> = (0..ITEMS)
        .filter(|&i| per_item[i].load(Ordering::SeqCst) != 1)
        .collect();
    assert!(reruns.is_empty(), "items not run exactly once: {reruns:?}");
    assert_eq!(log.store_closed(), None);
    engine.shutdown().await.unwrap();

    // The records survive: a fresh engine on the raw store reads them.
    let engine = builder(inner.clone(), clock, &runs, &Gate::opened())
        .pipeline(Double {
            runs: per_item.clone(),
            gate: gate.clone(),
        })
        .start()
        .await
        .unwrap();
    let status = engine
        .batch::<Double>("outage")
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(
        (status.succeeded, status.pending),
        (ITEMS as u64, 0),
        "{status:?}"
    );
    engine.shutdown().await.unwrap();

    eprintln!(
        "store_faults[batch outage]: {} faults injected during a {}s put outage; \
         store totals: {}; items completed {} of {ITEMS} ({} settled before the outage, the rest held in handlers into it); \
         lost items 0; duplicated items {duplicated}; item re-runs {}",
        during.injected,
        OUTAGE.as_secs(),
        faults.stats(),
        status.succeeded,
        settled_before,
        reruns.len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_an_outage_loses_and_duplicates_no_reported_outcome() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let first = builder(store, clock.clone(), &runs, &gate)
        .start()
        .await
        .unwrap();
    let log1 = EventLog::follow(&first);

    let mut jobs = Vec::new(); // (run id, name, expected)
    for n in 0..SLOW {
        let h = first.submit(Slow(n)).await.unwrap();
        jobs.push((h.id().to_string(), format!("slow-{n}"), n * 7));
    }
    for n in 0..60 {
        let h = first.submit(Work(n)).await.unwrap();
        jobs.push((h.id().to_string(), format!("work-{n}"), n * 2));
    }
    for n in 0..20 {
        let h = first.submit(Keyed(n)).await.unwrap();
        jobs.push((h.id().to_string(), format!("keyed-{n}"), n * 3));
    }
    log1.wait_until(|e| successes(e) >= 10 && started(e, "slow") >= SLOW as usize)
        .await;
    // Writes fail from now on, for this engine for good: it "crashes" in the
    // middle of the outage. Reads still work.
    faults.fail(Ops::WRITES);
    // The held jobs finish their handlers; their settlements cannot commit.
    gate.open();
    tokio::time::sleep(SETTLE).await;
    let reported_by_first: HashSet<String> = log1.succeeded().into_iter().collect();

    // Another engine takes the store over (its open fences the first and
    // re-queues the jobs the first had claimed).
    let second = builder(inner.clone(), clock.clone(), &runs, &gate);
    let log2 = EventLog::follow_from(second.subscribe());
    let second = second.start().await.unwrap();
    let mut reported = HashMap::new();
    for (run_id, name, expected) in &jobs {
        let v = if name.starts_with("work") {
            within(second.handle::<Work>(run_id).unwrap().join())
                .await
                .unwrap()
                .unwrap()
        } else if name.starts_with("slow") {
            within(second.handle::<Slow>(run_id).unwrap().join())
                .await
                .unwrap()
                .unwrap()
        } else {
            within(second.handle::<Keyed>(run_id).unwrap().join())
                .await
                .unwrap()
                .unwrap()
        };
        assert_eq!(v, *expected, "{name}");
        let kind = name.split('-').next().unwrap().to_string();
        reported.insert(run_id.clone(), (kind, *expected));
    }

    // The first engine notices the fence (SlateDB's manifest poll reads, and
    // reads work) and stops.
    log1.wait_until(|e| {
        e.iter()
            .any(|e| matches!(e, EngineEvent::StoreClosed { .. }))
    })
    .await;
    let reason = log1.store_closed().unwrap();
    eprintln!("first engine: StoreClosed: {reason}");

    // Its store comes back: nothing it still had in flight may commit.
    faults.heal();
    tokio::time::sleep(OUTAGE).await;
    let late: HashSet<String> = log1.succeeded().into_iter().collect();
    assert_eq!(
        late, reported_by_first,
        "the fenced engine reported a success after the takeover"
    );

    // Every job has exactly one reported success across both engines, and
    // each job the first engine reported ran exactly once.
    let mut all = log1.succeeded();
    all.extend(log2.succeeded());
    let mut per_job: HashMap<String, usize> = HashMap::new();
    for id in &all {
        *per_job.entry(id.clone()).or_default() += 1;
    }
    let duplicated = per_job.values().filter(|n| **n > 1).count();
    let missing = jobs
        .iter()
        .filter(|(id, _, _)| !per_job.contains_key(id))
        .count();
    assert_eq!(duplicated, 0, "{per_job:?}");
    assert_eq!(missing, 0);
    let mut interrupted = 0;
    for (run_id, name, _) in &jobs {
        let n = runs.of(name);
        if reported_by_first.contains(run_id) {
            assert_eq!(
                n, 1,
                "{name} was reported by the first engine and ran again"
            );
        } else {
            assert!((1..=2).contains(&n), "{name} ran {n} times");
            interrupted += usize::from(n == 2);
        }
        // A held job finished its handler on the first engine, whose
        // settlement never committed: the takeover ran it again (at least
        // once), and recorded it once.
        if name.starts_with("slow") {
            assert_eq!(n, 2, "{name}");
        }
    }
    // And the records agree.
    let lost = lost_outcomes(&second, &reported).await;
    assert_eq!(lost, 0);
    let report = second.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    let _ = first.shutdown().await;

    eprintln!(
        "store_faults[crash mid-outage]: store totals of the first engine: {}; \
         jobs {} ({} reported by the first engine before the outage, {} finished by the \
         takeover engine, {interrupted} of them re-run after an interrupted attempt); \
         lost outcomes {lost}; duplicated outcomes {duplicated}; first engine: {reason}",
        faults.stats(),
        jobs.len(),
        reported_by_first.len(),
        log2.succeeded().len(),
    );
}

#[tokio::test(start_paused = true)]
async fn a_fault_on_memo_writes_fails_attempts_transiently_and_the_job_succeeds_once_it_stops() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    // Immediate memo writes: each `put` writes its object (by default a
    // successful attempt writes none; `tests/memo.rs` covers a failing write
    // of a failed attempt's entries).
    let engine = builder(store, clock, &runs, &Gate::opened())
        .memo_writes(gaffer::MemoWrites::Immediate)
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);
    faults.only_prefix("gaffer-blobs/");

    // The next three memo writes fail: three attempts fail, the fourth succeeds.
    faults.fail_next(Ops::PUT, 3);
    let handle = engine.submit(Memoed(1)).await.unwrap();
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 5);
    let record = engine
        .engine_ref()
        .services()
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.attempts, 4, "{record:?}");
    let retries: Vec<(FailureKind, String, bool)> = log
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            EngineEvent::JobFailed {
                run_id,
                kind,
                message,
                retrying,
                ..
            } if run_id == handle.id() => Some((*kind, message.clone(), *retrying)),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 3, "{retries:?}");
    for (kind, message, retrying) in &retries {
        assert_eq!(*kind, FailureKind::Transient);
        assert!(*retrying);
        assert!(message.contains("injected fault"), "{message}");
        assert!(message.contains("gaffer-blobs/"), "{message}");
    }
    assert_eq!(runs.of("memoed-1"), 4);
    // The step ran again on each attempt: its memo entry was never written.
    assert_eq!(runs.of("memoed-step-1"), 4);
    assert_eq!(faults.stats().of(Op::Put).1, 3);

    // A fault that lasts until the test stops it: attempts keep failing
    // (the queue itself is untouched), then the job succeeds.
    faults.fail(Ops::PUT);
    let handle = engine.submit(Memoed(2)).await.unwrap();
    let id = handle.id().to_string();
    log.wait_until(|e| {
        e.iter()
            .filter(|e| matches!(e, EngineEvent::JobFailed { run_id, retrying: true, .. } if *run_id == id))
            .count()
            >= 2
    })
    .await;
    assert_engine_up(&engine).await;
    faults.heal();
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 10);
    let attempts = engine
        .engine_ref()
        .services()
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap()
        .attempts;
    let failed = log.count(
        |e| matches!(e, EngineEvent::JobFailed { run_id, retrying: true, .. } if *run_id == id),
    );
    assert_eq!(attempts as usize, failed + 1);
    assert_eq!(runs.of("memoed-2"), attempts as usize);
    assert_eq!(log.store_closed(), None);
    engine.shutdown().await.unwrap();

    eprintln!(
        "store_faults[memo faults]: {}; attempts: 4 with a 3-fault countdown, {attempts} \
         with a fault held for {failed} attempts; outcomes lost 0, duplicated 0",
        faults.stats(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_5ms_of_latency_on_every_store_operation_a_batch_and_jobs_still_complete() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    faults.set_latency(Duration::from_millis(5));
    let clock = common::mock_clock();
    let runs = Runs::default();
    let per_item = item_runs(ITEMS);
    let started = std::time::Instant::now();
    let engine = builder(store, clock, &runs, &Gate::opened())
        .pipeline(Double {
            runs: per_item.clone(),
            gate: Gate::opened(),
        })
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Double>("slow").unwrap().sink(sink.clone());
    let jobs: Vec<_> = futures_util::future::join_all((0..20).map(|n| engine.submit(Work(n))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let report = tokio::time::timeout(Duration::from_secs(120), batch.run(0..ITEMS as u64))
        .await
        .expect("the batch did not complete in 120 s of real time")
        .unwrap();
    assert_eq!(
        (report.succeeded, report.failed),
        (ITEMS as u64, 0),
        "{report:?}"
    );
    for (n, h) in jobs.into_iter().enumerate() {
        let v = tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v, n as u32 * 2);
    }
    assert_eq!(sink.len(), ITEMS);
    let reruns = (0..ITEMS)
        .filter(|&i| per_item[i].load(Ordering::SeqCst) != 1)
        .count();
    assert_eq!(reruns, 0);
    assert_eq!(faults.injected(), 0);
    engine.shutdown().await.unwrap();
    eprintln!(
        "store_faults[latency 5 ms]: {ITEMS} items and 20 jobs completed in {:?} \
         (batch run {:?}); {}; item re-runs {reruns}",
        started.elapsed(),
        report.elapsed,
        faults.stats(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_during_an_outage_is_not_answered_before_the_outcome_is_durable() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let first = builder(store, clock.clone(), &runs, &gate)
        .start()
        .await
        .unwrap();
    let log1 = EventLog::follow(&first);
    let handle = first.submit(Stamp(5)).await.unwrap();
    log1.wait_until(|e| started(e, "stamp") >= 1).await;
    faults.fail(Ops::WRITES);
    gate.open();
    // The handler returned; its settlement waits for a WAL write that fails.
    let stats = wait_settling(&first, "stamp", 1).await;
    assert_eq!(stats["stamp"].settling, 1, "{stats:?}");
    assert_eq!(log1.succeeded().len(), 0);

    // A caller asks now. Nothing is durable, so it must wait (or be told the
    // job is still running).
    let answered = tokio::time::timeout(OUTAGE, handle.join()).await;
    let fetched = handle.fetch_result().await.unwrap();
    let status = handle.status().await.unwrap();
    let seen = first
        .engine_ref()
        .services()
        .outcome(handle.id())
        .await
        .unwrap();

    // The process dies in the outage: another engine takes the store over.
    let second = builder(inner.clone(), clock, &runs, &gate)
        .start()
        .await
        .unwrap();
    let durable_value = within(second.handle::<Stamp>(handle.id()).unwrap().join())
        .await
        .unwrap()
        .unwrap();
    let durable = second
        .engine_ref()
        .services()
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap();
    let handler_runs = runs.of("stamp-5");
    eprintln!(
        "store_faults[join during outage]: the first engine answered join = {answered:?}, \
         fetch_result = {fetched:?}, status = {status:?} from record {seen:?}; the durable \
         record after the takeover: value {durable_value}, attempts {}, finished_at_ms {}; \
         handler runs {handler_runs}",
        durable.attempts, durable.finished_at_ms,
    );
    // The first engine was fenced by the takeover; once its store is back its
    // stalled settlement fails and it can stop.
    log1.wait_until(|e| {
        e.iter()
            .any(|e| matches!(e, EngineEvent::StoreClosed { .. }))
    })
    .await;
    faults.heal();
    second.shutdown().await.unwrap();
    let _ = within(first.shutdown()).await;

    if let Ok(Ok(Ok(told))) = &answered {
        assert_eq!(
            *told, durable_value,
            "the caller was told the job's output is {told}, the durable record says \
             {durable_value}: the told outcome was lost"
        );
    }
    assert!(
        answered.is_err(),
        "a join answered {answered:?} during the outage, before the outcome was durable \
         (the handler ran {handler_runs} times)"
    );
    assert_eq!(fetched, None, "fetch_result answered a non-durable outcome");
    assert_ne!(status, gaffer::JobState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_grace_period_returns_during_a_put_outage() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let engine = builder(store, clock.clone(), &runs, &gate)
        .shutdown_grace(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);
    let handle = engine.submit(Slow(1)).await.unwrap();
    log.wait_until(|e| started(e, "slow") >= 1).await;
    faults.fail(Ops::PUT | Ops::MULTIPART);
    gate.open();
    assert_eq!(wait_settling(&engine, "slow", 1).await["slow"].settling, 1);

    let mut shutdown = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.shutdown().await })
    };
    let bounded = tokio::time::timeout(Duration::from_secs(10), &mut shutdown).await;
    // Let it end either way, then check the job is not lost.
    faults.heal();
    let returned = bounded.is_ok();
    let report = match bounded {
        Ok(report) => report.unwrap(),
        Err(_) => within(shutdown).await.unwrap(),
    };
    eprintln!(
        "store_faults[shutdown in outage]: returned within grace + 9 s: {}; report after \
         the store recovered: {report:?}",
        returned
    );
    let engine = builder(inner.clone(), clock, &runs, &gate)
        .start()
        .await
        .unwrap();
    let value = within(engine.handle::<Slow>(handle.id()).unwrap().join())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(value, 7);
    engine.shutdown().await.unwrap();
    assert!(
        returned,
        "shutdown with a 1 s grace period did not return in 10 s of a put outage"
    );
}
