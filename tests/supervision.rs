//! Every actor of the engine is supervised: killing one on purpose loses
//! nothing that matters. (`EngineMessage::KillChild`, feature `testing`.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{BulkCtx, ItemError, Job, JobContext, Pipeline};
use gaffer_actors::ChildKind;
use serde::{Deserialize, Serialize};

use common::{Gate, kill};

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
        engine.engine_ref().sweep_now().await.is_ok()
    })
    .await;
    assert!(
        matches!(
            h.fetch_result().await,
            Err(gaffer::Error::Engine(gaffer::EngineError::JobNotFound(_)))
        ),
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
    let queue = engine.engine_ref().services().queue().unwrap();
    queue.reap_now().await.unwrap();
    drop(queue);
    assert_eq!(h.await.unwrap(), 5);
    assert_eq!(gauge.runs.load(Ordering::SeqCst), 2);
    engine.shutdown().await.unwrap();
}

async fn batch_engine(gate: Gate, runs: Arc<AtomicUsize>) -> gaffer::Engine {
    common::memory_builder(common::mock_clock())
        .pipeline_with_concurrency(GatedItems { gate, runs }, 4)
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
