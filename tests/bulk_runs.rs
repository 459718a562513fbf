//! Acceptance tests of the bulk runner, after taquba-workflow 0.11's bulk
//! reference suite: runs and their reports and cost rollups, failed items and
//! the failure threshold, item keys, concurrency and the batch window, staged
//! effects, memo, isolation from jobs and between batches, progress. (Items
//! that do not decode: `input_batches.rs`.)
//!
//! Every test runs under paused tokio time on the in-memory store with a
//! `MockClock`, and waits on run futures, sink records, pipeline start signals
//! or explicit calls, never on wall time.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::testing::layout::records::ItemMarker;
use gaffer::testing::layout::records::ItemStatus;
use gaffer::{
    BulkCtx, Error, Pipeline, Settings, bulk::CostReport, bulk::ItemError, sink::JsonlSink,
    sink::OutputRecord,
};

use common::bulk::{
    BLOCKING, Probe, Stage, UNLUCKY, counts, json, probe, probe_engine, stage, strings,
    wait_started,
};
use common::{CollectSink, LIMIT, Ping, shut_down_cleanly, within};

/// A writer over a shared buffer, readable after the sink took the writer.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn runs_all_items_and_rolls_up_cost() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let buf = SharedBuf::default();
    let sink = Arc::new(JsonlSink::new(buf.clone()));
    let batch = engine.batch::<Probe>("all").unwrap().sink(sink);

    let report = within(batch.run([1u64, 2, 3])).await.unwrap();

    assert_eq!(report.batch_id, "all");
    assert_eq!(counts(&report), (3, 3, 0));
    assert_eq!(report.cancelled, 0);
    assert!(report.failed_keys.is_empty());
    assert_eq!(report.cost.get("calls"), 3.0);
    assert_eq!(report.sink_errors, 0);
    assert_eq!(shared.runs(), 3);

    let text = buf.0.lock().unwrap().clone();
    let records: Vec<OutputRecord> = gaffer::sink::read_jsonl(text.as_slice())
        .collect::<gaffer::Result<_>>()
        .unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
    let by_key: HashMap<_, _> = records.iter().map(|r| (r.key.as_str(), r)).collect();
    for (key, out) in [("item-0", 2), ("item-1", 4), ("item-2", 6)] {
        let r = by_key[key];
        assert_eq!(r.status, "succeeded");
        assert_eq!(r.output, json(out));
        assert_eq!(r.error, None);
    }
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn large_batch_submits_with_bounded_concurrency() {
    let (p, shared, _rx) = probe();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline_with(
            p,
            gaffer::JobOptions {
                concurrency: Some(4),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Probe>("large").unwrap().sink(sink.clone());

    let report = within(batch.run(0..80u64)).await.unwrap();

    assert_eq!(counts(&report), (80, 79, 1));
    assert_eq!(report.failed_keys, strings(&["item-13"]));
    assert_eq!(shared.runs(), 80);
    let max = shared.max_in_flight();
    assert!(
        (2..=4).contains(&max),
        "items in flight at once: {max} (4 workers)"
    );
    let records = sink.records();
    assert_eq!(records.len(), 80);
    let keys: HashSet<_> = records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(keys.len(), 80);
    shut_down_cleanly(&engine).await;
}

fn windowed_settings(window: usize) -> Settings {
    Settings {
        batch_window: window,
        poll_interval: Duration::from_millis(20),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_much_larger_than_the_window_completes() {
    let (p, shared, _rx) = probe();
    let engine = common::memory_builder(common::mock_clock())
        .settings(windowed_settings(10))
        .pipeline(p)
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine
        .batch::<Probe>("windowed")
        .unwrap()
        .sink(sink.clone());

    let report = within(batch.run(0..500u64)).await.unwrap();

    assert_eq!(counts(&report), (500, 499, 1));
    assert_eq!(report.failed_keys, strings(&["item-13"]));
    assert_eq!(shared.runs(), 500);
    let keys: HashSet<_> = sink.records().into_iter().map(|r| r.key).collect();
    assert_eq!(keys.len(), 500);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn the_batch_window_bounds_the_items_enqueued_and_not_settled() {
    let (p, shared, mut rx) = probe();
    let engine = common::memory_builder(common::mock_clock())
        .settings(windowed_settings(10))
        .pipeline(p)
        .start()
        .await
        .unwrap();
    let e = engine.clone();
    let run = tokio::spawn(async move {
        e.batch::<Probe>("bounded")
            .unwrap()
            .run(BLOCKING..BLOCKING + 500)
            .await
    });
    wait_started(&mut rx, 1).await;
    let batch = engine.batch::<Probe>("bounded").unwrap();
    let status = batch.status().await.unwrap();
    assert!(
        status.pending <= 10,
        "{} items enqueued and not settled under a window of 10",
        status.pending
    );
    shared.gate.open();
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(counts(&report), (500, 500, 0));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_pipelines_staged_write_is_visible_after_the_item_acks() {
    let (s, gate, mut rx) = stage();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(s)
        .start()
        .await
        .unwrap();
    let services = gaffer::testing::services(&engine).clone();
    services
        .raw_queue()
        .unwrap()
        .kv_put(b"seed", b"hello")
        .await
        .unwrap();

    let e = engine.clone();
    let run = tokio::spawn(async move {
        e.batch::<Stage>("fx")
            .unwrap()
            .run(["a".to_string(), "fail".to_string()])
            .await
    });
    wait_started(&mut rx, 2).await;
    // Staged while running: not visible yet.
    assert_eq!(services.kv_get(b"out/item-0").await.unwrap(), None);
    assert_eq!(services.kv_get(b"out/item-1").await.unwrap(), None);

    gate.open();
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(counts(&report), (2, 1, 1));
    assert_eq!(report.failed_keys, strings(&["item-1"]));
    // Committed with the ack of the item that succeeded, and only that one.
    assert_eq!(
        services.kv_get(b"out/item-0").await.unwrap(),
        Some(b"hello:a".to_vec())
    );
    assert_eq!(services.kv_get(b"out/item-1").await.unwrap(), None);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn records_failed_items() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let batch = engine.batch::<Probe>("fails").unwrap().sink(sink.clone());

    let report = within(batch.run([1u64, UNLUCKY, 3])).await.unwrap();

    assert_eq!(counts(&report), (3, 2, 1));
    assert_eq!(report.failed_keys, strings(&["item-1"]));
    // A permanent error is not retried.
    assert_eq!(shared.runs(), 3);
    let r = &sink.by_key()["item-1"];
    assert_eq!(r.status, "failed");
    assert_eq!(r.output, None);
    assert_eq!(r.error.as_deref(), Some("unlucky"));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn fail_threshold_trips_when_exceeded() {
    let (engine, _shared, _rx, _clock) = probe_engine().await;

    let strict = engine
        .batch::<Probe>("strict")
        .unwrap()
        .fail_threshold(20.0);
    match within(strict.run([1u64, UNLUCKY, 3])).await {
        Err(Error::FailureThresholdExceeded {
            failed,
            total,
            threshold,
            report,
        }) => {
            assert_eq!((failed, total, threshold), (1, 3, 20.0));
            assert_eq!(counts(&report), (3, 2, 1));
            assert_eq!(report.failed_keys, strings(&["item-1"]));
            assert_eq!(report.batch_id, "strict");
        }
        other => panic!("expected FailureThresholdExceeded, got {other:?}"),
    }

    let lenient = engine
        .batch::<Probe>("lenient")
        .unwrap()
        .fail_threshold(50.0);
    let report = within(lenient.run([1u64, UNLUCKY, 3])).await.unwrap();
    assert_eq!(counts(&report), (3, 2, 1));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn custom_key_fn_sets_item_keys() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let batch = engine
        .batch::<Probe>("keyed")
        .unwrap()
        .key_fn(|n| format!("n-{n}"))
        .sink(sink.clone());

    let report = within(batch.run([1u64, UNLUCKY, 3])).await.unwrap();

    assert_eq!(report.failed_keys, strings(&["n-13"]));
    let mut seen = shared.keys();
    seen.sort();
    assert_eq!(seen, strings(&["n-1", "n-13", "n-3"]));
    let by_key = sink.by_key();
    assert_eq!(by_key.len(), 3);
    assert_eq!(by_key["n-1"].output, json(2));
    assert_eq!(by_key["n-3"].output, json(6));
    assert_eq!(by_key["n-13"].status, "failed");
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_batches_on_one_worker_report_independently() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let a = engine.batch::<Probe>("a").unwrap();
    let b = engine.batch::<Probe>("b").unwrap();

    let (ra, rb) = within(async { tokio::join!(a.run([1u64, 2]), b.run([3u64, UNLUCKY])) }).await;
    let (ra, rb) = (ra.unwrap(), rb.unwrap());

    assert_eq!(ra.batch_id, "a");
    assert_eq!(counts(&ra), (2, 2, 0));
    assert!(ra.failed_keys.is_empty());
    assert_eq!(ra.cost.get("calls"), 2.0);
    assert_eq!(rb.batch_id, "b");
    assert_eq!(counts(&rb), (2, 1, 1));
    assert_eq!(rb.failed_keys, strings(&["item-1"]));
    assert_eq!(rb.cost.get("calls"), 2.0);
    assert_eq!(shared.runs(), 4);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn batches_with_the_same_keys_do_not_share_state() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let a = engine.batch::<Probe>("a").unwrap();
    let b = engine.batch::<Probe>("b").unwrap();

    let ra = within(a.run([1u64, 2])).await.unwrap();
    let rb = within(b.run([5u64, 6])).await.unwrap();

    assert_eq!(counts(&ra), (2, 2, 0));
    assert_eq!(counts(&rb), (2, 2, 0));
    assert_eq!(shared.runs(), 4);
    let mut keys = shared.keys();
    keys.sort();
    assert_eq!(keys, strings(&["item-0", "item-0", "item-1", "item-1"]));
    shut_down_cleanly(&engine).await;
}

/// Memoizes an expensive phase with its cost, then fails attempt 1
/// transiently.
struct Memoizing {
    computes: Arc<AtomicUsize>,
    attempts: Arc<Mutex<Vec<u32>>>,
}

impl Pipeline for Memoizing {
    const NAME: &'static str = "memoizing";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        self.attempts.lock().unwrap().push(ctx.attempt());
        let value: u64 = ctx
            .memoized_with_cached_cost("expensive", || async {
                self.computes.fetch_add(1, Ordering::SeqCst);
                let mut cost = CostReport::new();
                cost.record("tokens", 42.0);
                Ok::<_, ItemError>((ctx.input * 10, cost))
            })
            .await?;
        if ctx.attempt() == 1 {
            return Err(ItemError::transient("flaky"));
        }
        Ok(value)
    }
}

#[tokio::test(start_paused = true)]
async fn memoized_with_cached_cost_records_cost_on_compute_and_memo_hit() {
    let computes = Arc::new(AtomicUsize::new(0));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Memoizing {
            computes: computes.clone(),
            attempts: attempts.clone(),
        })
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Memoizing>("m").unwrap().sink(sink.clone());

    let report = within(batch.run([7u64])).await.unwrap();

    assert_eq!(counts(&report), (1, 1, 0));
    assert_eq!(*attempts.lock().unwrap(), vec![1, 2]);
    assert_eq!(computes.load(Ordering::SeqCst), 1);
    assert_eq!(sink.by_key()["item-0"].output, json(70));
    assert_eq!(report.cost.get("tokens"), 42.0);

    let key = b"gaffer/v1/batches/m/items/item-0";
    let raw = gaffer::testing::services(&engine)
        .kv_get(key)
        .await
        .unwrap()
        .expect("the item's marker");
    let marker: ItemMarker = gaffer::testing::layout::records::decode(key, &raw).unwrap();
    assert_eq!(marker.status, ItemStatus::Succeeded);
    assert_eq!(marker.cost.get("tokens"), Some(&42.0));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn bulk_items_run_on_their_own_queue_so_a_big_batch_never_starves_jobs() {
    let (p, shared, mut rx) = probe();
    let engine = common::memory_builder(common::mock_clock())
        .register::<Ping>()
        .pipeline_with(
            p,
            gaffer::JobOptions {
                concurrency: Some(1),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap();
    let e = engine.clone();
    let run = tokio::spawn(async move {
        e.batch::<Probe>("big")
            .unwrap()
            .run(BLOCKING..BLOCKING + 50)
            .await
    });
    wait_started(&mut rx, 1).await;

    let handle = engine.submit(Ping).await.unwrap();
    let out = within(handle).await.unwrap();
    assert_eq!(out, "pong");

    // The batch's items are still blocked.
    let batch = engine.batch::<Probe>("big").unwrap();
    let progress = batch.progress().await.expect("the batch still runs");
    assert_eq!((progress.total, progress.completed), (50, 0));
    assert_eq!(shared.runs(), 1);

    shared.gate.open();
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(counts(&report), (50, 50, 0));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn progress_reports_rate_and_time_remaining() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let sink = CollectSink::new();
    let e = engine.clone();
    let s = sink.clone();
    let run = tokio::spawn(async move {
        e.batch::<Probe>("prog")
            .unwrap()
            .sink(s)
            .run([1u64, 2, BLOCKING, BLOCKING + 1])
            .await
    });
    sink.wait_for(2, LIMIT).await;
    let batch = engine.batch::<Probe>("prog").unwrap();

    tokio::time::advance(Duration::from_secs(10)).await;
    let p = batch.progress().await.expect("the run is active");

    assert_eq!(p.total, 4);
    assert_eq!(
        (p.completed, p.succeeded, p.failed, p.cancelled),
        (2, 2, 0, 0)
    );
    assert_eq!(p.cost.get("calls"), 2.0);
    assert!(p.elapsed >= Duration::from_secs(10), "{p:?}");
    let expected_rate = 2.0 / p.elapsed.as_secs_f64();
    assert!((p.rate_per_sec - expected_rate).abs() < 1e-9, "{p:?}");
    assert!(p.rate_per_sec > 0.0);
    // Half done: the rest takes as long again.
    let left = p.time_remaining.expect("time remaining");
    let diff = left.as_secs_f64() - p.elapsed.as_secs_f64();
    assert!(diff.abs() < 1e-3, "{p:?}");

    shared.gate.open();
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(counts(&report), (4, 4, 0));
    shut_down_cleanly(&engine).await;
}

/// A batch with a `max_rate` enqueues no faster than its pace: by (virtual)
/// time t after the run began, at most `rate·t` items plus a tenth of a
/// second's worth have started; and every item still runs once.
#[tokio::test(start_paused = true)]
async fn a_paced_batch_starts_its_items_no_faster_than_its_rate() {
    let (engine, shared, mut rx, _clock) = probe_engine().await;
    let batch = engine.batch::<Probe>("paced").unwrap().max_rate(20);
    let inputs: Vec<u64> = (100..140).collect();
    assert!(inputs.iter().all(|i| *i != UNLUCKY && *i < BLOCKING));
    let began = tokio::time::Instant::now();
    let run = tokio::spawn(async move { batch.run(inputs).await });
    let mut starts = Vec::new();
    for _ in 0..40 {
        within(rx.recv()).await.expect("probe dropped");
        starts.push(began.elapsed());
    }
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(counts(&report), (40, 40, 0));
    assert_eq!(shared.runs(), 40);
    // Item i (0-based) may start once i + 1 items are allowed: rate·t + 2 ≥ i + 1.
    for (i, at) in starts.iter().enumerate() {
        let earliest = Duration::from_millis((i as u64 + 1).saturating_sub(2) * 1000 / 20);
        assert!(
            *at >= earliest,
            "item {i} started at {at:?}, before {earliest:?}"
        );
    }
    shut_down_cleanly(&engine).await;
}
