//! Running a batch again and resuming it, after taquba-workflow 0.11's bulk
//! reference suite: a second run answers finished items from their markers
//! (and their output blobs) and runs failed ones again, a resume continues
//! from the manifest, a run is refused while one is active here or when its
//! items differ, and a batch interrupted by a crash resumes on a real
//! local-disk store across a real reopen: finished items never run again,
//! queued ones continue, and the report and the sink output are exact.
//!
//! All but the crash test run under paused tokio time on the in-memory store
//! with a `MockClock`, and wait on run futures, sink records, pipeline start
//! signals or explicit calls, never on wall time.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{BulkCtx, Error, Pipeline, bulk::ItemError, sink::OutputRecord};

use common::bulk::{
    BLOCKING, Probe, UNLUCKY, counts, json, probe_engine, strings, wait_not_running, wait_started,
};
use common::{CollectSink, Gate, LIMIT, Runs, shut_down_cleanly, within};

struct Gated {
    runs: Runs,
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
        self.runs.hit_of(ctx.input.to_string());
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
    let runs = Runs::default();

    // First process: half the items finish, the rest hang until it "crashes".
    let engine = common::disk_builder(dir.path(), clock.clone())
        .pipeline_with(
            Gated {
                runs: runs.clone(),
                gate_from: 50,
                gate: Gate::closed(),
            },
            gaffer::JobOptions {
                concurrency: Some(4),
                ..Default::default()
            },
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
        .pipeline_with(
            Gated {
                runs: runs.clone(),
                gate_from: u64::MAX,
                gate: Gate::closed(),
            },
            gaffer::JobOptions {
                concurrency: Some(4),
                ..Default::default()
            },
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

    for input in 0..50u64 {
        assert_eq!(
            runs.of(&input.to_string()),
            1,
            "item {input} finished before the crash and must not run again"
        );
    }
    for input in 50..100u64 {
        assert!(runs.of(&input.to_string()) >= 1, "item {input} never ran");
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

#[tokio::test(start_paused = true)]
async fn a_batch_running_in_this_process_is_rejected_until_its_run_is_dropped() {
    let (engine, shared, mut rx, _clock) = probe_engine().await;
    let e = engine.clone();
    let first = tokio::spawn(async move {
        e.batch::<Probe>("held")
            .unwrap()
            .run([BLOCKING, BLOCKING + 1])
            .await
    });
    wait_started(&mut rx, 2).await;
    let batch = engine.batch::<Probe>("held").unwrap();

    let progress = batch.progress().await.expect("the first run is active");
    assert_eq!(progress.total, 2);
    assert_eq!(progress.completed, 0);

    match within(batch.run([BLOCKING, BLOCKING + 1])).await {
        Err(Error::BatchRunning(id)) => assert_eq!(id, "held"),
        other => panic!("expected BatchRunning, got {other:?}"),
    }

    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    wait_not_running(&batch).await;
    assert!(batch.progress().await.is_none());

    shared.gate.open();
    let report = within(batch.resume()).await.unwrap();
    assert_eq!(counts(&report), (2, 2, 0));
    // The items of the dropped run were waited for, not run again.
    assert_eq!(shared.runs(), 2);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_second_run_of_a_batch_skips_succeeded_items_and_reruns_failed_ones() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let batch = engine.batch::<Probe>("again").unwrap().sink(sink.clone());

    let first = within(batch.run([1u64, UNLUCKY, 3])).await.unwrap();
    assert_eq!(counts(&first), (3, 2, 1));
    assert_eq!(shared.runs(), 3);

    let second = within(batch.run([1u64, UNLUCKY, 3])).await.unwrap();
    assert_eq!(counts(&second), (3, 2, 1));
    assert_eq!(second.failed_keys, strings(&["item-1"]));
    assert_eq!(shared.runs(), 4);
    assert_eq!(shared.keys().last().map(String::as_str), Some("item-1"));

    let records = sink.records();
    assert_eq!(records.len(), 6);
    let again: HashMap<_, _> = records[3..].iter().map(|r| (r.key.as_str(), r)).collect();
    assert_eq!(again.len(), 3);
    assert_eq!(again["item-0"].status, "succeeded");
    assert_eq!(again["item-0"].output, json(2));
    assert_eq!(again["item-2"].status, "succeeded");
    assert_eq!(again["item-2"].output, json(6));
    assert_eq!(again["item-1"].status, "failed");
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_rerun_of_a_large_batch_answers_each_finished_item_from_its_marker_once() {
    // 1500 items: two manifest chunks. The keys of the first chunk
    // (`item-0`..`item-999`) do not sort together (`item-1000`.. lie between
    // them), those of the second do: the re-run finds markers both by scans
    // and one by one, and must count and stream each item exactly once.
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let batch = engine
        .batch::<Probe>("big-again")
        .unwrap()
        .sink(sink.clone());
    const N: u64 = 1500;
    // Inputs below BLOCKING (the probe waits on those at or above it).
    let input = |i: u64| if i < BLOCKING { i } else { i - 500 };
    let inputs: Vec<u64> = (0..N).map(input).collect();

    let first = within(batch.run(inputs.clone())).await.unwrap();
    assert_eq!(counts(&first), (N, N - 1, 1));
    assert_eq!(shared.runs(), N as usize);

    let second = within(batch.run(inputs)).await.unwrap();
    assert_eq!(counts(&second), (N, N - 1, 1));
    assert_eq!(second.failed_keys, strings(&["item-13"]));
    assert_eq!(
        shared.runs(),
        N as usize + 1,
        "only the failed item ran again"
    );
    assert_eq!(shared.keys().last().map(String::as_str), Some("item-13"));

    let records = sink.records();
    assert_eq!(records.len(), 2 * N as usize);
    let again: HashMap<_, _> = records[N as usize..]
        .iter()
        .map(|r| (r.key.as_str(), r))
        .collect();
    assert_eq!(
        again.len(),
        N as usize,
        "each item streamed once by the re-run"
    );
    for i in 0..N {
        let r = again[format!("item-{i}").as_str()];
        if i == UNLUCKY {
            assert_eq!(r.status, "failed");
        } else {
            assert_eq!(r.status, "succeeded", "item-{i}");
            assert_eq!(r.output, json(input(i) * 2), "item-{i}");
        }
    }
    // The markers say the same.
    let status = batch.status().await.unwrap();
    assert_eq!((status.succeeded, status.failed), (N - 1, 1));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_resume_waits_for_items_still_running_and_answers_the_rest_from_markers() {
    let (engine, shared, mut rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let batch = engine
        .batch::<Probe>("big-resume")
        .unwrap()
        .sink(sink.clone());
    // 290 items that finish and 10 that wait for the gate.
    let inputs: Vec<u64> = (100..390).chain(BLOCKING..BLOCKING + 10).collect();
    let first = tokio::spawn({
        let batch = engine
            .batch::<Probe>("big-resume")
            .unwrap()
            .sink(sink.clone());
        let inputs = inputs.clone();
        async move { batch.run(inputs).await }
    });
    wait_started(&mut rx, 300).await;
    sink.wait_for(290, LIMIT).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    wait_not_running(&batch).await;

    // The resume answers the 290 from their markers while the 10 still run
    // (they cannot end before the gate opens), and waits for those.
    let resumed = tokio::spawn({
        let batch = engine
            .batch::<Probe>("big-resume")
            .unwrap()
            .sink(sink.clone());
        async move { batch.resume().await }
    });
    sink.wait_for(290 + 290, LIMIT).await;
    let progress = batch.progress().await.expect("the resume is running");
    assert_eq!(progress.completed, 290);
    shared.gate.open();
    let report = within(resumed).await.unwrap().unwrap();

    assert_eq!(counts(&report), (300, 300, 0));
    assert_eq!(shared.runs(), 300, "no item ran twice");
    let records = sink.records();
    assert_eq!(records.len(), 290 + 300);
    let resumed: HashMap<_, _> = records[290..].iter().map(|r| (r.key.as_str(), r)).collect();
    assert_eq!(resumed.len(), 300, "each item streamed once by the resume");
    for (i, input) in inputs.iter().enumerate() {
        assert_eq!(
            resumed[format!("item-{i}").as_str()].output,
            json(input * 2)
        );
    }
    shut_down_cleanly(&engine).await;
}

/// Outputs a string of `input` KiB: inputs over 240 are stored as blobs.
struct Sized(Arc<AtomicUsize>);

impl Pipeline for Sized {
    const NAME: &'static str = "sized";
    type Input = u64;
    type Output = String;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<String, ItemError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok("x".repeat(ctx.input as usize * 1024))
    }
}

#[tokio::test(start_paused = true)]
async fn a_rerun_answers_items_with_large_outputs_from_their_blobs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Sized(runs.clone()))
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Sized>("sized").unwrap().sink(sink.clone());
    // 40 items (read together), every tenth with an output over the KV cap.
    let inputs: Vec<u64> = (0..40)
        .map(|i| if i % 10 == 3 { 300 } else { i % 5 })
        .collect();

    let first = within(batch.run(inputs.clone())).await.unwrap();
    assert_eq!(counts(&first), (40, 40, 0));
    let second = within(batch.run(inputs.clone())).await.unwrap();
    assert_eq!(counts(&second), (40, 40, 0));
    assert_eq!(runs.load(Ordering::SeqCst), 40, "nothing ran again");

    let records = sink.records();
    assert_eq!(records.len(), 80);
    let again: HashMap<_, _> = records[40..].iter().map(|r| (r.key.as_str(), r)).collect();
    assert_eq!(again.len(), 40);
    for (i, input) in inputs.iter().enumerate() {
        let r = again[format!("item-{i}").as_str()];
        assert_eq!(r.status, "succeeded");
        assert_eq!(
            r.output,
            Some(serde_json::json!("x".repeat(*input as usize * 1024))),
            "item-{i}"
        );
    }
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn resume_runs_a_batch_from_its_manifest() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let batch = engine.batch::<Probe>("resumed").unwrap().sink(sink.clone());
    within(batch.run([1u64, UNLUCKY])).await.unwrap();
    assert_eq!(shared.runs(), 2);

    let report = within(batch.resume()).await.unwrap();

    assert_eq!(counts(&report), (2, 1, 1));
    assert_eq!(report.failed_keys, strings(&["item-1"]));
    // Only the failed item ran again.
    assert_eq!(shared.runs(), 3);
    assert_eq!(shared.keys().last().map(String::as_str), Some("item-1"));
    let records = sink.records();
    assert_eq!(records.len(), 4);
    let resumed: HashMap<_, _> = records[2..].iter().map(|r| (r.key.as_str(), r)).collect();
    assert_eq!(resumed["item-0"].output, json(2));
    assert_eq!(resumed["item-1"].status, "failed");
    shut_down_cleanly(&engine).await;
}

fn assert_mismatch(result: gaffer::Result<gaffer::BulkReport>, id: &str) {
    match result {
        Err(Error::BatchMismatch(got)) => assert_eq!(got, id),
        other => panic!("expected BatchMismatch({id}), got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_run_with_a_different_item_set_is_rejected() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let batch = engine.batch::<Probe>("b").unwrap();
    within(batch.run([1u64, 2, 3])).await.unwrap();

    assert_mismatch(within(batch.run([1u64, 2, 4])).await, "b");
    assert_mismatch(within(batch.run([1u64, 2])).await, "b");
    assert_mismatch(within(batch.run([1u64, 2, 3, 4])).await, "b");

    // The same keys and inputs in another order.
    let ordered = engine
        .batch::<Probe>("ordered")
        .unwrap()
        .key_fn(|n| format!("n-{n}"));
    within(ordered.run([1u64, 2, 3])).await.unwrap();
    assert_mismatch(within(ordered.run([3u64, 2, 1])).await, "ordered");
    assert_eq!(shared.runs(), 6);

    // The refused runs changed nothing: the original set still answers.
    let report = within(batch.run([1u64, 2, 3])).await.unwrap();
    assert_eq!(counts(&report), (3, 3, 0));
    assert_eq!(shared.runs(), 6);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn resume_of_an_unknown_batch_and_duplicate_keys_are_rejected() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    match within(engine.batch::<Probe>("missing").unwrap().resume()).await {
        Err(Error::BatchNotFound(id)) => assert_eq!(id, "missing"),
        other => panic!("expected BatchNotFound, got {other:?}"),
    }

    let dups = engine
        .batch::<Probe>("dups")
        .unwrap()
        .key_fn(|_| "same".to_string());
    match within(dups.run([1u64, 2, 3])).await {
        Err(Error::DuplicateItemKey(key)) => assert_eq!(key, "same"),
        other => panic!("expected DuplicateItemKey, got {other:?}"),
    }
    let status = dups.status().await.unwrap();
    assert_eq!(
        (
            status.succeeded,
            status.failed,
            status.cancelled,
            status.pending
        ),
        (0, 0, 0, 0)
    );
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let stats = common::totals(queue.view(), "bulk-items.").await;
    drop(queue);
    assert_eq!(
        (stats.pending, stats.claimed, stats.done, stats.dead),
        (0, 0, 0, 0)
    );
    assert_eq!(shared.runs(), 0);
    shut_down_cleanly(&engine).await;
}
