//! A batch interrupted by a crash resumes on a real local-disk store across a
//! real reopen: finished items never run again, queued ones continue, and the
//! report and the sink output are exact.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::{BulkCtx, ItemError, OutputRecord, Pipeline};

use common::{CollectSink, Gate};

#[derive(Default)]
struct Runs(Mutex<HashMap<u64, usize>>);

struct Gated {
    runs: Arc<Runs>,
    /// Inputs at or above this wait at `gate` (never opened).
    gate_from: u64,
    gate: Gate,
}

impl Pipeline for Gated {
    const NAME: &'static str = "gate";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        *self.runs.0.lock().unwrap().entry(ctx.input).or_default() += 1;
        if ctx.input >= self.gate_from {
            self.gate.wait().await;
        }
        Ok(ctx.input * 10)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_interrupted_by_a_crash_resumes_exactly_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());

    // First process: half the items finish, the rest hang until it "crashes".
    let engine = common::disk_builder(dir.path(), clock.clone())
        .pipeline_with_concurrency(
            Gated {
                runs: runs.clone(),
                gate_from: 50,
                gate: Gate::closed(),
            },
            4,
        )
        .start()
        .await
        .unwrap();
    let first_sink = CollectSink::new();
    let batch = engine
        .batch::<Gated>("crashy")
        .unwrap()
        .sink(first_sink.clone());
    let run = tokio::spawn(async move { batch.run(0..100u64).await });
    let probe = engine.batch::<Gated>("crashy").unwrap();
    common::eventually("50 items succeed", Duration::from_secs(60), async || {
        probe.progress().await.is_some_and(|p| p.succeeded == 50)
    })
    .await;
    // Crash: kill the whole tree; the queue is dropped without a close.
    engine.actor().kill_and_wait(None).await.unwrap();
    run.abort();
    let _ = run.await;
    drop(engine);

    // Second process on the same directory.
    let engine = common::disk_builder(dir.path(), clock.clone())
        .pipeline_with_concurrency(
            Gated {
                runs: runs.clone(),
                gate_from: u64::MAX,
                gate: Gate::closed(),
            },
            4,
        )
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Gated>("crashy").unwrap().sink(sink.clone());
    let report = batch.resume().await.unwrap();
    assert_eq!(
        (
            report.total,
            report.succeeded,
            report.failed,
            report.cancelled
        ),
        (100, 100, 0, 0),
        "{report:?}"
    );

    let runs = runs.0.lock().unwrap().clone();
    for input in 0..50u64 {
        assert_eq!(
            runs.get(&input),
            Some(&1),
            "item {input} finished before the crash and must not run again"
        );
    }
    for input in 50..100u64 {
        assert!(
            runs.get(&input).is_some_and(|n| *n >= 1),
            "item {input} never ran"
        );
    }
    let records = sink.records();
    assert_eq!(records.len(), 100, "one record per item in the resumed run");
    let mut by_key: HashMap<String, OutputRecord> = HashMap::new();
    for r in records {
        assert!(
            by_key.insert(r.key.clone(), r).is_none(),
            "a key was written twice"
        );
    }
    for i in 0..100u64 {
        let r = &by_key[&format!("item-{i}")];
        assert_eq!(r.status, "succeeded");
        assert_eq!(r.output, Some(serde_json::json!(i * 10)));
    }
    let status = batch.status().await.unwrap();
    assert_eq!(
        (status.succeeded, status.failed, status.pending),
        (100, 0, 0)
    );
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");

    // Nothing is left claimed or pending in the bulk queue.
    let store: Arc<dyn gaffer::taquba::object_store::ObjectStore> = Arc::new(
        gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap(),
    );
    let queue =
        gaffer::taquba::Queue::open_with_options(store, "queue", common::test_options(clock))
            .await
            .unwrap();
    let stats = common::totals(queue.view(), "bulk-items.").await;
    assert_eq!(
        (stats.pending, stats.claimed, stats.scheduled),
        (0, 0, 0),
        "{stats:?}"
    );
    queue.close().await.unwrap();
}
