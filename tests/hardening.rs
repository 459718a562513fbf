//! Hardening: the places where the engine could hang, drop data silently or
//! let one job type hold up another. Each test names the defect it guards.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::ractor::{self, Actor, ActorProcessingErr, ActorRef};
use gaffer::{
    BulkCtx, Engine, EngineEvent, EngineMessage, ItemError, Job, JobContext, JobFinished, Pipeline,
};
use gaffer_actors::ChildKind;
use gaffer_actors::testing::{FaultyStore, Ops};
use serde::{Deserialize, Serialize};

use common::{Gate, Ping, eventually, kill};

const LIMIT: Duration = Duration::from_secs(120);

/// Upper bound (tokio time) for a state polled with [`eventually`].
const WAIT: Duration = Duration::from_secs(30);

async fn within<F: std::future::IntoFuture>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("did not finish within the limit")
}

/// Runs until the gate opens.
#[derive(Serialize, Deserialize)]
struct Gated(u32);

impl Job for Gated {
    const NAME: &'static str = "gated";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Gate>().wait().await;
        Ok(self.0)
    }
}

async fn running(engine: &Engine, job_type: &str) -> usize {
    engine
        .engine_ref()
        .pool_stats()
        .await
        .unwrap()
        .get(job_type)
        .map_or(0, |s| s.running)
}

async fn settling(engine: &Engine, job_type: &str) -> usize {
    engine
        .engine_ref()
        .pool_stats()
        .await
        .unwrap()
        .get(job_type)
        .map_or(0, |s| s.settling)
}

// ---------------------------------------------------------------------------
// 1. A waiters restart in the middle of a settlement's commit.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_waiting_when_the_waiters_die_mid_commit_gets_the_durable_outcome_and_never_an_early_one()
 {
    let (store, faults) = FaultyStore::wrap(common::shared_store());
    let gate = Gate::closed();
    let engine = common::store_builder(store, common::mock_clock())
        .state(gate.clone())
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Gated(5)).await.unwrap();
    eventually("the job runs", WAIT, async || {
        running(&engine, "gated").await == 1
    })
    .await;
    let waiting = tokio::spawn({
        let h = handle.clone();
        async move { h.join().await }
    });
    // Hold the settlement's commit: every write stalls (SlateDB retries).
    faults.fail(Ops::WRITES);
    gate.open();
    eventually("the settlement is in flight", WAIT, async || {
        settling(&engine, "gated").await == 1
    })
    .await;
    kill(&engine, ChildKind::Waiters).await;

    // The commit is not durable: neither the old join nor a new one may answer.
    let fresh = tokio::time::timeout(Duration::from_secs(1), handle.join()).await;
    assert!(
        fresh.is_err(),
        "a join after the restart answered {fresh:?} before the outcome was durable"
    );
    assert!(
        !waiting.is_finished(),
        "the waiting join answered before the outcome was durable: {:?}",
        waiting.await
    );

    faults.heal();
    let told = within(waiting).await.unwrap().unwrap().unwrap();
    assert_eq!(told, 5);
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 5);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 2. WatchJob subscriptions survive a waiters restart.

/// Forwards every message it gets to a channel (a watcher of jobs or batches).
struct Forward<M>(std::marker::PhantomData<fn() -> M>);

impl<M: ractor::Message> Forward<M> {
    async fn spawn() -> (ActorRef<M>, tokio::sync::mpsc::UnboundedReceiver<M>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (actor, _) = Actor::spawn(None, Forward(std::marker::PhantomData), tx)
            .await
            .unwrap();
        (actor, rx)
    }
}

impl<M: ractor::Message> Actor for Forward<M> {
    type Msg = M;
    type State = tokio::sync::mpsc::UnboundedSender<M>;
    type Arguments = Self::State;
    async fn pre_start(
        &self,
        _myself: ActorRef<M>,
        tx: Self::State,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }
    async fn handle(
        &self,
        _myself: ActorRef<M>,
        message: M,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = tx.send(message);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_watch_registered_before_a_waiters_restart_is_still_told() {
    let gate = Gate::closed();
    let engine = common::memory_builder(common::mock_clock())
        .state(gate.clone())
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let (watcher, mut rx) = Forward::<JobFinished>::spawn().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let h = engine.submit(Gated(i)).await.unwrap();
        engine
            .actor()
            .cast(EngineMessage::WatchJob(
                h.id().to_string(),
                watcher.get_derived(),
            ))
            .unwrap();
        ids.push(h.id().to_string());
    }
    eventually("the jobs run", WAIT, async || {
        running(&engine, "gated").await == 3
    })
    .await;
    kill(&engine, ChildKind::Waiters).await;
    // Let the supervisor restart it before the jobs end.
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.open();
    let mut told = Vec::new();
    for _ in 0..3 {
        let finished = within(rx.recv()).await.expect("the watcher is told");
        assert!(finished.result.is_ok(), "{finished:?}");
        told.push(finished.run_id);
    }
    told.sort();
    ids.sort();
    assert_eq!(told, ids);
    watcher.stop(None);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// The error of the jobs below.

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failed(String);

// ---------------------------------------------------------------------------
// 8. Shutdown closes the queue as soon as its last user lets go (no polling).

#[tokio::test(start_paused = true)]
async fn shutdown_closes_the_queue_the_moment_its_last_user_lets_go() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Ping>()
        .start()
        .await
        .unwrap();
    let held = engine.engine_ref().services().queue().unwrap();
    let shutdown = tokio::spawn({
        let engine = engine.clone();
        async move {
            let report = engine.shutdown().await.unwrap();
            (report, tokio::time::Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(3)).await;
    let released = tokio::time::Instant::now();
    drop(held);
    let (report, done) = within(shutdown).await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    assert!(
        done.duration_since(released) < Duration::from_millis(1),
        "the queue closed {:?} after its last user let go",
        done.duration_since(released)
    );
}

// ---------------------------------------------------------------------------
// 9. A crashing job type does not hold up a healthy one.

#[derive(Serialize, Deserialize)]
struct PanicsOnce(u32);

impl Job for PanicsOnce {
    const NAME: &'static str = "panics-once";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        if ctx.attempt() == 1 {
            panic!("first attempt of {}", self.0);
        }
        Ok(self.0)
    }
}

#[derive(Serialize, Deserialize)]
struct Healthy;

impl Job for Healthy {
    const NAME: &'static str = "healthy";
    type Output = ();
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<(), Self::Error> {
        tokio::time::sleep(Duration::from_millis(1)).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_healthy_type_runs_at_once_while_another_type_crashes() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<PanicsOnce>()
        .register::<Healthy>()
        .start()
        .await
        .unwrap();
    let mut crashing = Vec::new();
    for i in 0..48 {
        crashing.push(engine.submit(PanicsOnce(i)).await.unwrap());
    }
    let mut events = engine.subscribe();
    common::wait_event(&mut events, LIMIT, |e| {
        matches!(e, EngineEvent::HandlerCrashed { .. })
    })
    .await;
    let started = tokio::time::Instant::now();
    within(engine.submit(Healthy).await.unwrap()).await.unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(500),
        "the healthy job took {took:?} while the other type crashed"
    );
    for h in crashing {
        within(h).await.unwrap();
    }
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 11. A restarted service re-attaches to the batch it started.

/// Items wait for the gate; every run of every item is counted.
struct Counted {
    gate: Gate,
    runs: Arc<Vec<AtomicUsize>>,
}

impl Pipeline for Counted {
    const NAME: &'static str = "counted";
    type Input = u32;
    type Output = u32;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<u32, ItemError> {
        self.runs[ctx.input as usize].fetch_add(1, Ordering::SeqCst);
        self.gate.wait().await;
        Ok(ctx.input * 2)
    }
}

#[derive(Debug)]
enum RunnerMsg {
    Finished(gaffer::BatchFinished),
    Crash,
}

impl From<gaffer::BatchFinished> for RunnerMsg {
    fn from(f: gaffer::BatchFinished) -> Self {
        Self::Finished(f)
    }
}

impl TryFrom<RunnerMsg> for gaffer::BatchFinished {
    type Error = RunnerMsg;
    fn try_from(m: RunnerMsg) -> Result<Self, RunnerMsg> {
        match m {
            RunnerMsg::Finished(f) => Ok(f),
            other => Err(other),
        }
    }
}

/// A service that runs batch `b`; restarted, it re-attaches to it.
struct Runner;

/// The runner's registry name (unique in this test binary).
const RUNNER: &str = "hardening-batch-runner";

struct RunnerArgs {
    engine: Engine,
    restarted: bool,
    told: tokio::sync::mpsc::UnboundedSender<(bool, gaffer::BatchFinished)>,
}

impl Actor for Runner {
    type Msg = RunnerMsg;
    type State = RunnerArgs;
    type Arguments = RunnerArgs;
    async fn pre_start(
        &self,
        myself: ActorRef<RunnerMsg>,
        args: RunnerArgs,
    ) -> Result<RunnerArgs, ActorProcessingErr> {
        let batch = args.engine.batch::<Counted>("b")?;
        // Started (again): run the batch. Restarted, that is refused with a
        // typed error (it runs already), and the service re-attaches.
        let items = batch.encode_items(0..20u32)?;
        args.engine.actor().cast(EngineMessage::RunBatchAndTell(
            Box::new(batch.spec()),
            items,
            myself.get_derived(),
        ))?;
        if args.restarted {
            args.engine.watch_batch("b", myself.get_derived())?;
        }
        Ok(args)
    }
    async fn handle(
        &self,
        _myself: ActorRef<RunnerMsg>,
        message: RunnerMsg,
        state: &mut RunnerArgs,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RunnerMsg::Finished(f) => {
                let _ = state.told.send((state.restarted, f));
                Ok(())
            }
            RunnerMsg::Crash => panic!("the service crashed"),
        }
    }
}

/// Restarts its runner when it fails.
struct Boss;

impl Actor for Boss {
    type Msg = ();
    type State = (
        Engine,
        tokio::sync::mpsc::UnboundedSender<(bool, gaffer::BatchFinished)>,
    );
    type Arguments = Self::State;
    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        (engine, told): Self::State,
    ) -> Result<Self::State, ActorProcessingErr> {
        let args = RunnerArgs {
            engine: engine.clone(),
            restarted: false,
            told: told.clone(),
        };
        Actor::spawn_linked(Some(RUNNER.to_string()), Runner, args, myself.get_cell()).await?;
        Ok((engine, told))
    }
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: ractor::SupervisionEvent,
        (engine, told): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let ractor::SupervisionEvent::ActorFailed(..) = event {
            let args = RunnerArgs {
                engine: engine.clone(),
                restarted: true,
                told: told.clone(),
            };
            Actor::spawn_linked(Some(RUNNER.to_string()), Runner, args, myself.get_cell()).await?;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_service_restarted_mid_batch_re_attaches_and_gets_the_exact_report() {
    let gate = Gate::closed();
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..20).map(|_| AtomicUsize::new(0)).collect());
    let engine = common::memory_builder(common::mock_clock())
        .pipeline_with_concurrency(
            Counted {
                gate: gate.clone(),
                runs: runs.clone(),
            },
            8,
        )
        .start()
        .await
        .unwrap();
    let (told, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let (boss, _) = Actor::spawn(None, Boss, (engine.clone(), told))
        .await
        .unwrap();
    eventually("items run", WAIT, async || {
        runs.iter().map(|r| r.load(Ordering::SeqCst)).sum::<usize>() >= 8
    })
    .await;
    let runner = ActorRef::<RunnerMsg>::where_is(RUNNER).expect("the runner");
    runner.cast(RunnerMsg::Crash).unwrap();
    // The restarted service's second RunBatchAndTell is refused, typed.
    let (restarted, refused) = within(reports.recv()).await.unwrap();
    assert!(restarted);
    assert!(
        matches!(&refused.result, Err(gaffer::EngineError::BatchRunning(id)) if id == "b"),
        "{refused:?}"
    );
    gate.open();
    let (restarted, finished) = within(reports.recv()).await.unwrap();
    assert!(restarted, "the report reaches the restarted service");
    let outcome = finished.result.expect("the run succeeded");
    assert_eq!(
        (outcome.total, outcome.succeeded, outcome.failed),
        (20, 20, 0),
        "{outcome:?}"
    );
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.load(Ordering::SeqCst), 1, "item {i} ran more than once");
    }
    // A watch of a batch no longer running is told so, typed.
    let (watcher, mut rx) = Forward::<gaffer::BatchFinished>::spawn().await;
    engine.watch_batch("b", watcher.get_derived()).unwrap();
    let late = within(rx.recv()).await.unwrap();
    assert!(
        matches!(&late.result, Err(gaffer::EngineError::BatchNotRunning(id)) if id == "b"),
        "{late:?}"
    );
    watcher.stop(None);
    boss.stop(None);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 4. Jobs whose last attempt lost its lease, among thousands of dead jobs.

#[derive(Serialize, Deserialize)]
struct Doomed(u32);

impl Job for Doomed {
    const NAME: &'static str = "doomed";
    type Output = ();
    type Error = Failed;
    async fn run(&self, _ctx: JobContext) -> Result<(), Failed> {
        Err(Failed(format!("doomed {}", self.0)))
    }
    fn classify(&self, _error: &Failed) -> gaffer::FailureKind {
        gaffer::FailureKind::Permanent
    }
}

/// Hangs until the gate opens; one attempt.
#[derive(Serialize, Deserialize)]
struct Hangs(u32);

impl Job for Hangs {
    const NAME: &'static str = "hangs";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Gate>().wait().await;
        Ok(self.0)
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(1)
    }
}

#[tokio::test(start_paused = true)]
async fn lease_lost_last_attempts_get_their_records_among_thousands_of_dead_jobs() {
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let engine = common::memory_builder(clock.clone())
        .state(gate.clone())
        .register::<Doomed>()
        .register_with_concurrency::<Hangs>(100)
        .start()
        .await
        .unwrap();
    let doomed: Vec<_> =
        futures_util::future::join_all((0..2_000).map(|i| engine.submit(Doomed(i))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    for h in doomed {
        assert!(within(h.join()).await.unwrap().is_err());
    }
    let mut hung = Vec::new();
    for i in 0..50 {
        hung.push(engine.submit(Hangs(i)).await.unwrap());
    }
    eventually("the jobs hang", WAIT, async || {
        running(&engine, "hangs").await == 50
    })
    .await;
    // Their leases run out on their last attempt.
    clock.advance(Duration::from_secs(31));
    let queue = engine.engine_ref().services().queue().unwrap();
    queue.reap_now().await.unwrap();
    drop(queue);
    for h in &hung {
        let err = within(h.join()).await.unwrap().unwrap_err();
        assert_eq!(err.kind, gaffer::FailureKind::Transient, "{err:?}");
        assert!(err.message.contains("lease expired"), "{err:?}");
    }
    // Every dead job of the queues was dead-lettered by a settlement, with
    // its record: 2,050 records, and no dead job without one.
    let queue = engine.engine_ref().services().queue().unwrap();
    let totals = common::totals(queue.view(), "jobs.").await;
    drop(queue);
    assert_eq!(totals.dead, 2_050, "{totals:?}");
    gate.open();
    engine.shutdown().await.unwrap();
}
