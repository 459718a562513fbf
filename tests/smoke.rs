//! Smoke tests: the shortest path through the engine, under paused time on
//! the in-memory store. A job runs and answers; a batch runs, reports, and
//! a second run skips the items that succeeded.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use gaffer::{BulkCtx, Job, JobContext, Pipeline, bulk::ItemError, sink::JsonlSink};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Inc(u64);
impl Job for Inc {
    const NAME: &'static str = "inc";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 + 1)
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_under_paused_time_on_the_in_memory_store() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Inc>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Inc(41)).await.unwrap();
    assert_eq!(h.await.unwrap(), 42);
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
}

struct Double {
    runs: Arc<AtomicUsize>,
}

impl Pipeline for Double {
    const NAME: &'static str = "double";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        ctx.record_cost("calls", 1.0);
        if ctx.input == 13 {
            return Err(ItemError::permanent("unlucky"));
        }
        Ok(ctx.input * 2)
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_runs_and_a_second_run_skips_succeeded_items() {
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Double { runs: runs.clone() })
        .start()
        .await
        .unwrap();
    let sink = Arc::new(JsonlSink::new(Vec::new()));
    let batch = engine.batch::<Double>("b1").unwrap().sink(sink.clone());
    let report = batch.run(0..100u64).await.unwrap();
    assert_eq!(
        (report.total, report.succeeded, report.failed),
        (100, 99, 1)
    );
    assert_eq!(report.failed_keys, vec!["item-13".to_string()]);
    assert_eq!(report.cost.get("calls"), 100.0);
    assert_eq!(runs.load(Ordering::SeqCst), 100);
    let again = batch.run(0..100u64).await.unwrap();
    assert_eq!((again.total, again.succeeded, again.failed), (100, 99, 1));
    assert_eq!(runs.load(Ordering::SeqCst), 101);
    let status = batch.status().await.unwrap();
    assert_eq!(
        (
            status.total,
            status.succeeded,
            status.failed,
            status.pending
        ),
        (100, 99, 1, 0)
    );
    engine.shutdown().await.unwrap();
}
