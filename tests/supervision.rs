//! Every actor of the engine is supervised: killing one on purpose loses
//! nothing that matters (`EngineMessage::KillChild`, feature `testing`). A
//! join or a watch in place when the waiters restart gets the durable outcome
//! and never an early one, and a service of the application's that restarts
//! re-attaches to the batch it started.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::ractor::{self, Actor, ActorProcessingErr, ActorRef};
use gaffer::testing::ChildKind;
use gaffer::testing::{FaultyStore, Ops};
use gaffer::{
    BulkCtx, Engine, Job, JobContext, Pipeline, bulk::ItemError, protocol::EngineMessage,
    protocol::JobFinished,
};
use serde::{Deserialize, Serialize};

use common::{Gate, LIMIT, kill, within};

#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    max: AtomicUsize,
    runs: AtomicUsize,
}

#[derive(Serialize, Deserialize)]
struct Gated(u32);

impl Job for Gated {
    const NAME: &'static str = "gated";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let gauge = ctx.state::<Arc<Gauge>>();
        gauge.runs.fetch_add(1, Ordering::SeqCst);
        let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.max.fetch_max(now, Ordering::SeqCst);
        ctx.state::<Gate>().wait().await;
        gauge.now.fetch_sub(1, Ordering::SeqCst);
        Ok(self.0)
    }
}

struct GatedItems {
    gate: Gate,
    runs: Arc<AtomicUsize>,
}

impl Pipeline for GatedItems {
    const NAME: &'static str = "gated-items";
    type Input = u32;
    type Output = u32;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<u32, ItemError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if ctx.input >= 10 {
            self.gate.wait().await;
        }
        Ok(ctx.input)
    }
}

/// Upper bound (tokio time) for a state polled with [`common::eventually`].
const WAIT: Duration = Duration::from_secs(5);

async fn started(n: usize, gauge: &Gauge) {
    common::eventually("the jobs start", WAIT, async || {
        gauge.now.load(Ordering::SeqCst) >= n
    })
    .await;
}

fn jobs_engine(gate: Gate, gauge: Arc<Gauge>) -> gaffer::EngineBuilder {
    common::memory_builder(common::mock_clock())
        .max_concurrent_jobs(2)
        .state(gate)
        .state(gauge)
        .register::<Gated>()
}

#[tokio::test(start_paused = true)]
async fn a_killed_waiters_actor_is_restarted_and_waiting_handles_still_resolve() {
    let gate = Gate::closed();
    let gauge = Arc::new(Gauge::default());
    let engine = jobs_engine(gate.clone(), gauge.clone())
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Gated(7)).await.unwrap();
    let waiting = tokio::spawn({
        let h = handle.clone();
        async move { h.await }
    });
    started(1, &gauge).await;
    common::eventually("the handle waits", WAIT, async || {
        common::waiting_runs(&engine).await == 1
    })
    .await;
    kill(&engine, ChildKind::Waiters).await;
    gate.open();
    assert_eq!(waiting.await.unwrap().unwrap(), 7);
    // The new waiters serve new handles too.
    assert_eq!(engine.submit(Gated(8)).await.unwrap().await.unwrap(), 8);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_killed_sweeper_is_restarted_and_retention_still_runs() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock.clone())
        .retention(Duration::from_secs(60))
        .state(Gate::opened())
        .state(Arc::new(Gauge::default()))
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Gated(1)).await.unwrap();
    assert_eq!(h.clone().await.unwrap(), 1);
    kill(&engine, ChildKind::Sweeper).await;
    clock.advance(Duration::from_secs(61));
    common::eventually("the sweeper is back", Duration::from_secs(1), async || {
        engine.sweep_now().await.is_ok()
    })
    .await;
    assert!(
        matches!(h.outcome().await, Err(gaffer::Error::JobNotFound(_))),
        "the expired record was not removed"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_killed_pool_is_restarted_and_its_lost_job_runs_again_after_its_lease() {
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let gauge = Arc::new(Gauge::default());
    let engine = common::memory_builder(clock.clone())
        .state(gate.clone())
        .state(gauge.clone())
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Gated(5)).await.unwrap();
    started(1, &gauge).await;
    kill(&engine, ChildKind::Pool("gated".into())).await;
    gate.open();
    // The claim died with the pool: the lease expires and the queue redelivers.
    clock.advance(Duration::from_secs(31));
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    queue.reap_now().await.unwrap();
    drop(queue);
    assert_eq!(h.await.unwrap(), 5);
    assert_eq!(gauge.runs.load(Ordering::SeqCst), 2);
    engine.shutdown().await.unwrap();
}

async fn batch_engine(gate: Gate, runs: Arc<AtomicUsize>) -> gaffer::Engine {
    common::memory_builder(common::mock_clock())
        .pipeline_with(
            GatedItems { gate, runs },
            gaffer::JobOptions {
                concurrency: Some(4),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap()
}

async fn run_with_a_kill(kind: ChildKind) {
    let gate = Gate::closed();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = batch_engine(gate.clone(), runs.clone()).await;
    let batch = engine.batch::<GatedItems>("b").unwrap();
    let run = tokio::spawn(async move { batch.run(0..50u32).await });
    let probe = engine.batch::<GatedItems>("b").unwrap();
    common::eventually("10 items succeed", WAIT, async || {
        probe.progress().await.is_some_and(|p| p.succeeded >= 10)
    })
    .await;
    kill(&engine, kind).await;
    gate.open();
    let report = run.await.unwrap().unwrap();
    assert_eq!(
        (report.total, report.succeeded, report.failed),
        (50, 50, 0),
        "{report:?}"
    );
    let status = engine
        .batch::<GatedItems>("b")
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!((status.succeeded, status.pending), (50, 0));
    assert_eq!(runs.load(Ordering::SeqCst), 50, "no item ran twice");
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_killed_coordinator_is_replaced_and_rebuilds_its_counts_from_the_markers() {
    run_with_a_kill(ChildKind::Coordinator("b".into())).await;
}

#[tokio::test(start_paused = true)]
async fn a_killed_batches_registry_is_restarted_and_the_running_batch_completes_exactly() {
    run_with_a_kill(ChildKind::BatchRegistry).await;
}

// ---------------------------------------------------------------------------
// A waiters restart while callers wait

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_waiting_when_the_waiters_die_mid_commit_gets_the_durable_outcome_and_never_an_early_one()
 {
    let (store, faults) = FaultyStore::wrap(common::shared_store());
    let gate = Gate::closed();
    let engine = common::store_builder(store, common::mock_clock())
        .state(gate.clone())
        .state(Arc::new(Gauge::default()))
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Gated(5)).await.unwrap();
    common::eventually("the job runs", LIMIT, async || {
        common::running(&engine, "gated").await == 1
    })
    .await;
    let waiting = tokio::spawn({
        let h = handle.clone();
        async move { h.join().await }
    });
    common::eventually("the join waits", LIMIT, async || {
        common::waiting_runs(&engine).await == 1
    })
    .await;
    // Hold the settlement's commit: every write stalls (SlateDB retries).
    faults.fail(Ops::WRITES);
    gate.open();
    common::eventually("the settlement is in flight", LIMIT, async || {
        common::settling(&engine, "gated").await == 1
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
        .state(Arc::new(Gauge::default()))
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
    common::eventually("the jobs run", LIMIT, async || {
        common::running(&engine, "gated").await == 3
    })
    .await;
    let killed = common::waiters(&engine).expect("the waiters").get_id();
    kill(&engine, ChildKind::Waiters).await;
    // The supervisor restarts it before the jobs end.
    common::eventually("the waiters are restarted", LIMIT, async || {
        common::waiters(&engine).is_some_and(|w| w.get_id() != killed)
    })
    .await;
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
// A restarted service re-attaches to the batch it started

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
    Finished(gaffer::protocol::BatchFinished),
    Crash,
}

// With feature `cluster`, ractor has no blanket `Message` impl.
#[cfg(feature = "cluster")]
impl ractor::Message for RunnerMsg {}

impl From<gaffer::protocol::BatchFinished> for RunnerMsg {
    fn from(f: gaffer::protocol::BatchFinished) -> Self {
        Self::Finished(f)
    }
}

impl TryFrom<RunnerMsg> for gaffer::protocol::BatchFinished {
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
const RUNNER: &str = "supervision-batch-runner";

struct RunnerArgs {
    engine: Engine,
    restarted: bool,
    told: tokio::sync::mpsc::UnboundedSender<(bool, gaffer::protocol::BatchFinished)>,
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
        tokio::sync::mpsc::UnboundedSender<(bool, gaffer::protocol::BatchFinished)>,
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
        .pipeline_with(
            Counted {
                gate: gate.clone(),
                runs: runs.clone(),
            },
            gaffer::JobOptions {
                concurrency: Some(8),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap();
    let (told, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let (boss, _) = Actor::spawn(None, Boss, (engine.clone(), told))
        .await
        .unwrap();
    common::eventually("items run", LIMIT, async || {
        runs.iter().map(|r| r.load(Ordering::SeqCst)).sum::<usize>() >= 8
    })
    .await;
    let runner = ActorRef::<RunnerMsg>::where_is(RUNNER).expect("the runner");
    runner.cast(RunnerMsg::Crash).unwrap();
    // The restarted service's second RunBatchAndTell is refused, typed.
    let (restarted, refused) = within(reports.recv()).await.unwrap();
    assert!(restarted);
    assert!(
        matches!(&refused.result, Err(gaffer::Error::BatchRunning(id)) if id == "b"),
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
    let (watcher, mut rx) = Forward::<gaffer::protocol::BatchFinished>::spawn().await;
    engine.watch_batch("b", watcher.get_derived()).unwrap();
    let late = within(rx.recv()).await.unwrap();
    assert!(
        matches!(&late.result, Err(gaffer::Error::BatchNotRunning(id)) if id == "b"),
        "{late:?}"
    );
    watcher.stop(None);
    boss.stop(None);
    engine.shutdown().await.unwrap();
}
