//! Acceptance tests of the bulk runner, after taquba-workflow 0.11's bulk
//! reference suite: runs, reports and cost rollups, sinks, re-runs and resume,
//! manifests and their validation, status, forgetting and retention, memo,
//! isolation from jobs, and progress.
//!
//! Every test runs under paused tokio time on the in-memory store with a
//! `MockClock`, and waits on run futures, sink records, pipeline start signals
//! or explicit calls, never on wall time.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::IntoFuture;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::ractor::{self, Actor, ActorProcessingErr, ActorRef};
use gaffer::taquba::KvOrder;
use gaffer::{
    ActorSink, Batch, BulkCtx, CostReport, Engine, EngineError, Error, ItemError, Job, JobContext,
    JsonlSink, OutputRecord, Pipeline, Settings,
};
use gaffer_actors::records::ItemMarker;
use gaffer_actors::{BatchSpec, ItemRecord, ItemStatus, RecordSink};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use common::{CollectSink, Gate};

// ---------------------------------------------------------------------------
// Shared test plumbing
// ---------------------------------------------------------------------------

/// Upper bound (virtual time) for anything a test waits on.
const LIMIT: Duration = Duration::from_secs(60);

/// Inputs at or above this block on the probe's gate until it opens.
const BLOCKING: u64 = 1000;

/// The input the probe fails permanently.
const UNLUCKY: u64 = 13;

/// Await `f`, failing the test instead of hanging it.
async fn within<F: IntoFuture>(f: F) -> F::Output {
    tokio::time::timeout(LIMIT, f)
        .await
        .expect("did not finish within the limit")
}

async fn shutdown(engine: Engine) {
    let report = engine.shutdown().await.expect("shutdown");
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
}

/// What a [`Probe`] saw.
struct Shared {
    runs: AtomicUsize,
    keys: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    gate: Gate,
    started: mpsc::UnboundedSender<String>,
}

impl Shared {
    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// Item keys in the order their runs started.
    fn keys(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }

    fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

/// The workhorse pipeline: counts runs (and their keys), records one `calls`
/// of cost per attempt, fails [`UNLUCKY`] permanently, makes inputs at or over
/// [`BLOCKING`] wait for the gate, and outputs `input * 2`.
struct Probe(Arc<Shared>);

impl Pipeline for Probe {
    const NAME: &'static str = "probe";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        let s = &self.0;
        s.runs.fetch_add(1, Ordering::SeqCst);
        s.keys.lock().unwrap().push(ctx.key.clone());
        let _ = s.started.send(ctx.key.clone());
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_in_flight.fetch_max(now, Ordering::SeqCst);
        // Give other workers a chance to overlap with this one.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        if ctx.input >= BLOCKING {
            s.gate.wait().await;
        }
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        ctx.record_cost("calls", 1.0);
        if ctx.input == UNLUCKY {
            return Err(ItemError::permanent("unlucky"));
        }
        Ok(ctx.input * 2)
    }
}

/// A probe, the state it shares, and the stream of item keys as they start.
fn probe() -> (Probe, Arc<Shared>, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        runs: AtomicUsize::new(0),
        keys: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        gate: Gate::closed(),
        started: tx,
    });
    (Probe(shared.clone()), shared, rx)
}

/// Wait until `n` items have started.
async fn wait_started(rx: &mut mpsc::UnboundedReceiver<String>, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push(within(rx.recv()).await.expect("probe dropped"));
    }
    keys
}

/// An engine on the in-memory store with the probe registered.
async fn probe_engine() -> (
    Engine,
    Arc<Shared>,
    mpsc::UnboundedReceiver<String>,
    Arc<gaffer::taquba::MockClock>,
) {
    let clock = common::mock_clock();
    let (p, shared, rx) = probe();
    let engine = common::memory_builder(clock.clone())
        .pipeline(p)
        .start()
        .await
        .unwrap();
    (engine, shared, rx, clock)
}

/// Wait (without time passing) until no run of `batch` is active in this
/// process: a dropped run's coordinator stops asynchronously.
async fn wait_not_running<P: Pipeline>(batch: &Batch<P>) {
    for _ in 0..10_000 {
        if batch.progress().await.is_none() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the dropped run of `{}` never stopped", batch.id());
}

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

fn json(n: u64) -> Option<serde_json::Value> {
    Some(serde_json::json!(n))
}

fn counts(r: &gaffer::BulkReport) -> (u64, u64, u64) {
    (r.total, r.succeeded, r.failed)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Everything under `gaffer/v1/batches/{id}/` in KV (first 10 entries).
async fn batch_kv(engine: &Engine, id: &str) -> Vec<Vec<u8>> {
    let prefix = format!("gaffer/v1/batches/{id}/");
    engine
        .engine_ref()
        .services()
        .queue()
        .unwrap()
        .view()
        .kv_scan(prefix.as_bytes(), .., KvOrder::Ascending, 10)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

// ---------------------------------------------------------------------------
// Runs, reports and sinks
// ---------------------------------------------------------------------------

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
    let records: Vec<OutputRecord> = gaffer::read_jsonl(text.as_slice())
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
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn large_batch_submits_with_bounded_concurrency() {
    let (p, shared, _rx) = probe();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline_with_concurrency(p, 4)
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
}

/// Reads `seed` from KV, stages `out/{key}`, then waits for the gate; input
/// `"fail"` stages and then fails.
struct Stage {
    gate: Gate,
    started: mpsc::UnboundedSender<String>,
}

impl Pipeline for Stage {
    const NAME: &'static str = "stage";
    type Input = String;
    type Output = String;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<String>) -> Result<String, ItemError> {
        let seed = ctx.kv_get(b"seed").await?.unwrap_or_default();
        let seed = String::from_utf8(seed).unwrap();
        ctx.effects()
            .put(
                format!("out/{}", ctx.key),
                format!("{seed}:{}", ctx.input).into_bytes(),
            )
            .map_err(|e| ItemError::permanent(e.to_string()))?;
        let _ = self.started.send(ctx.key.clone());
        self.gate.wait().await;
        if ctx.input == "fail" {
            return Err(ItemError::permanent("staged, then failed"));
        }
        Ok(seed)
    }
}

fn stage() -> (Stage, Gate, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gate = Gate::closed();
    (
        Stage {
            gate: gate.clone(),
            started: tx,
        },
        gate,
        rx,
    )
}

#[tokio::test(start_paused = true)]
async fn a_pipelines_staged_write_is_visible_after_the_item_acks() {
    let (s, gate, mut rx) = stage();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(s)
        .start()
        .await
        .unwrap();
    let services = engine.engine_ref().services().clone();
    services
        .queue()
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
        Err(Error::Engine(EngineError::BatchRunning(id))) => assert_eq!(id, "held"),
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
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
    shutdown(engine).await;
}

fn assert_mismatch(result: gaffer::Result<gaffer::BulkReport>, id: &str) {
    match result {
        Err(Error::Engine(EngineError::BatchMismatch(got))) => assert_eq!(got, id),
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
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn resume_of_an_unknown_batch_and_duplicate_keys_are_rejected() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    match within(engine.batch::<Probe>("missing").unwrap().resume()).await {
        Err(Error::Engine(EngineError::BatchNotFound(id))) => assert_eq!(id, "missing"),
        other => panic!("expected BatchNotFound, got {other:?}"),
    }

    let dups = engine
        .batch::<Probe>("dups")
        .unwrap()
        .key_fn(|_| "same".to_string());
    match within(dups.run([1u64, 2, 3])).await {
        Err(Error::Engine(EngineError::DuplicateItemKey(key))) => assert_eq!(key, "same"),
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
    let queue = engine.engine_ref().services().queue().unwrap();
    let stats = common::totals(queue.view(), "bulk-items.").await;
    drop(queue);
    assert_eq!(
        (stats.pending, stats.claimed, stats.done, stats.dead),
        (0, 0, 0, 0)
    );
    assert_eq!(shared.runs(), 0);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn status_reports_the_last_recorded_outcome_of_each_item() {
    let (engine, _shared, _rx, _clock) = probe_engine().await;
    let batch = engine.batch::<Probe>("st").unwrap();
    match batch.status().await {
        Err(Error::Engine(EngineError::BatchNotFound(id))) => assert_eq!(id, "st"),
        other => panic!("expected BatchNotFound, got {other:?}"),
    }

    within(batch.run([1u64, UNLUCKY, 3])).await.unwrap();

    let status = batch.status().await.unwrap();
    assert_eq!(status.batch_id, "st");
    assert_eq!(
        (
            status.total,
            status.succeeded,
            status.failed,
            status.pending
        ),
        (3, 2, 1, 0)
    );
    assert_eq!(status.failed_keys, strings(&["item-1"]));
    // The marker keeps the cost of the attempt that settled the item, success
    // or final failure: 2 successes + 1 failure, one call each.
    assert_eq!(status.cost.get("calls"), 3.0);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn forget_removes_the_batch_state_and_a_later_run_starts_over() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let batch = engine.batch::<Probe>("b").unwrap();
    // A neighbour whose id extends this one's must survive.
    let neighbour = engine.batch::<Probe>("b2").unwrap();
    within(batch.run([1u64, 2])).await.unwrap();
    within(neighbour.run([1u64])).await.unwrap();
    assert!(!batch_kv(&engine, "b").await.is_empty());

    within(batch.forget()).await.unwrap();

    match batch.status().await {
        Err(Error::Engine(EngineError::BatchNotFound(id))) => assert_eq!(id, "b"),
        other => panic!("expected BatchNotFound, got {other:?}"),
    }
    let left = batch_kv(&engine, "b").await;
    assert!(
        left.is_empty(),
        "left behind: {:?}",
        left.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    assert_eq!(neighbour.status().await.unwrap().succeeded, 1);

    let report = within(batch.run([1u64, 2])).await.unwrap();
    assert_eq!(counts(&report), (2, 2, 0));
    assert_eq!(shared.runs(), 5);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn forget_is_refused_while_the_batch_runs_or_has_live_items() {
    let (engine, shared, mut rx, _clock) = probe_engine().await;
    let e = engine.clone();
    let run = tokio::spawn(async move {
        e.batch::<Probe>("live")
            .unwrap()
            .run([BLOCKING, BLOCKING + 1])
            .await
    });
    wait_started(&mut rx, 2).await;
    let batch = engine.batch::<Probe>("live").unwrap();

    match within(batch.forget()).await {
        Err(Error::Engine(EngineError::BatchRunning(id))) => assert_eq!(id, "live"),
        other => panic!("expected BatchRunning, got {other:?}"),
    }

    run.abort();
    let _ = run.await;
    wait_not_running(&batch).await;
    match within(batch.forget()).await {
        Err(Error::Engine(EngineError::BatchActive { batch_id, active })) => {
            assert_eq!((batch_id.as_str(), active), ("live", 2));
        }
        other => panic!("expected BatchActive, got {other:?}"),
    }
    // Refusals removed nothing.
    assert_eq!(batch.status().await.unwrap().pending, 2);

    shared.gate.open();
    let report = within(batch.resume()).await.unwrap();
    assert_eq!(counts(&report), (2, 2, 0));
    within(batch.forget()).await.unwrap();
    assert!(batch_kv(&engine, "live").await.is_empty());
    shutdown(engine).await;
}

/// A finished run leaves nothing behind that blocks the next call. Needs a
/// multi-threaded runtime: on the current-thread runtime of the other tests the
/// finished coordinator happens to be deregistered before the caller's next
/// message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_can_run_again_resume_or_be_forgotten_as_soon_as_its_run_returns() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    for i in 0..50 {
        let batch = engine.batch::<Probe>(&format!("next-{i}")).unwrap();
        within(batch.run([1u64])).await.unwrap();
        within(batch.run([1u64]))
            .await
            .unwrap_or_else(|e| panic!("re-run #{i} right after a run: {e}"));
        within(batch.resume())
            .await
            .unwrap_or_else(|e| panic!("resume #{i} right after a run: {e}"));
        within(batch.forget())
            .await
            .unwrap_or_else(|e| panic!("forget #{i} right after a run: {e}"));
    }
    assert_eq!(shared.runs(), 50);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_batch_is_swept_on_the_retention_interval() {
    let (engine, _shared, _rx, clock) = probe_engine().await;
    let retention = Duration::from_secs(60);
    let old = engine.batch::<Probe>("old").unwrap().retention(retention);
    within(old.run([1u64, 2])).await.unwrap();
    clock.advance(Duration::from_secs(30));
    let young = engine.batch::<Probe>("young").unwrap().retention(retention);
    within(young.run([1u64, 2])).await.unwrap();

    // Inside both windows: nothing goes.
    clock.advance(Duration::from_secs(29));
    engine.engine_ref().sweep_now().await.unwrap();
    assert_eq!(old.status().await.unwrap().succeeded, 2);
    assert_eq!(young.status().await.unwrap().succeeded, 2);

    // Past the old batch's window, inside the young one's.
    clock.advance(Duration::from_secs(2));
    engine.engine_ref().sweep_now().await.unwrap();
    match old.status().await {
        Err(Error::Engine(EngineError::BatchNotFound(id))) => assert_eq!(id, "old"),
        other => panic!("expected the old batch forgotten, got {other:?}"),
    }
    assert!(batch_kv(&engine, "old").await.is_empty());
    assert_eq!(young.status().await.unwrap().succeeded, 2);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_runs_again_is_kept_until_its_latest_run_expires() {
    let (engine, shared, _rx, clock) = probe_engine().await;
    let retention = Duration::from_secs(60);
    let batch = engine.batch::<Probe>("kept").unwrap().retention(retention);
    within(batch.run([1u64, 2])).await.unwrap();
    clock.advance(Duration::from_secs(50));
    within(batch.run([1u64, 2])).await.unwrap();

    // Past the first run's window, inside the second's.
    clock.advance(Duration::from_secs(20));
    engine.engine_ref().sweep_now().await.unwrap();
    assert_eq!(batch.status().await.unwrap().succeeded, 2);

    // Past the second run's window.
    clock.advance(Duration::from_secs(41));
    engine.engine_ref().sweep_now().await.unwrap();
    match batch.status().await {
        Err(Error::Engine(EngineError::BatchNotFound(id))) => assert_eq!(id, "kept"),
        other => panic!("expected the batch forgotten, got {other:?}"),
    }
    assert_eq!(shared.runs(), 2);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn an_invalid_batch_id_is_rejected() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let long = "x".repeat(129);
    for bad in ["a/b", "", "..", long.as_str(), "é"] {
        match engine.batch::<Probe>(bad) {
            Err(Error::Engine(EngineError::InvalidBatchId(id))) => assert_eq!(id, bad),
            Err(other) => panic!("{bad:?}: expected InvalidBatchId, got {other:?}"),
            Ok(b) => panic!("{bad:?}: accepted as {b:?}"),
        }
    }
    let longest = "y".repeat(128);
    for good in ["ok-1", longest.as_str()] {
        let report = within(engine.batch::<Probe>(good).unwrap().run([1u64]))
            .await
            .unwrap();
        assert_eq!(report.succeeded, 1, "{good}");
    }
    let fresh = engine.new_batch::<Probe>();
    assert!(engine.batch::<Probe>(fresh.id()).is_ok());
    assert_eq!(within(fresh.run([1u64])).await.unwrap().succeeded, 1);
    assert_eq!(shared.runs(), 3);

    let nul = "a\0b".to_string();
    let huge = "k".repeat(2000);
    for (i, bad) in ["".to_string(), nul, huge].into_iter().enumerate() {
        let batch = engine
            .batch::<Probe>(&format!("badkey-{i}"))
            .unwrap()
            .key_fn(move |_| bad.clone());
        match within(batch.run([1u64])).await {
            Err(Error::Engine(EngineError::InvalidItemKey { .. })) => {}
            other => panic!("key #{i}: expected InvalidItemKey, got {other:?}"),
        }
    }
    // The longest acceptable key.
    let max_key = engine
        .batch::<Probe>("maxkey")
        .unwrap()
        .key_fn(|_| "k".repeat(1024));
    assert_eq!(within(max_key.run([1u64])).await.unwrap().succeeded, 1);
    assert_eq!(shared.runs(), 4);
    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// Memo, inputs, isolation, outputs, sinks, progress
// ---------------------------------------------------------------------------

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
    let raw = engine
        .engine_ref()
        .services()
        .kv_get(key)
        .await
        .unwrap()
        .expect("the item's marker");
    let marker: ItemMarker = gaffer_actors::records::decode(key, &raw).unwrap();
    assert_eq!(marker.status, ItemStatus::Succeeded);
    assert_eq!(marker.cost.get("tokens"), Some(&42.0));
    shutdown(engine).await;
}

/// Collects raw records (the engine's sink seam).
#[derive(Default)]
struct RawSink(Mutex<Vec<(String, ItemStatus, Option<String>)>>);

impl RecordSink for RawSink {
    fn write(&self, key: &str, record: ItemRecord<'_>) -> Result<(), gaffer_actors::SinkError> {
        let (status, error) = match record {
            ItemRecord::Succeeded { .. } => (ItemStatus::Succeeded, None),
            ItemRecord::Failed { error } => (ItemStatus::Failed, Some(error.to_string())),
            ItemRecord::Cancelled => (ItemStatus::Cancelled, None),
            ItemRecord::OutputUnavailable { error } => {
                (ItemStatus::Succeeded, Some(error.to_string()))
            }
        };
        self.0
            .lock()
            .unwrap()
            .push((key.to_string(), status, error));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn undecodable_input_is_permanent() {
    let (s, gate, _rx) = stage();
    gate.open();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(s)
        .start()
        .await
        .unwrap();
    let sink = Arc::new(RawSink::default());
    let spec = BatchSpec {
        batch_id: "junk".into(),
        pipeline: Stage::NAME.into(),
        headers: HashMap::new(),
        sink: Some(sink.clone()),
        retention: None,
        window: 10_000,
    };

    let outcome = within(async {
        ractor::call!(
            engine.actor(),
            gaffer::EngineMessage::RunBatch,
            Box::new(spec),
            vec![("k".into(), b"junk".to_vec())]
        )
    })
    .await
    .unwrap()
    .unwrap();

    assert_eq!(
        (outcome.total, outcome.succeeded, outcome.failed),
        (1, 0, 1)
    );
    assert_eq!(outcome.failed_keys, strings(&["k"]));
    let records = sink.0.lock().unwrap().clone();
    assert_eq!(records.len(), 1);
    let (key, status, error) = &records[0];
    assert_eq!((key.as_str(), *status), ("k", ItemStatus::Failed));
    let error = error.as_deref().unwrap_or_default();
    assert!(error.contains("invalid input"), "{error}");
    // Failed at once (permanent): no effects, no retry; a resume fails it again.
    let again = within(engine.batch::<Stage>("junk").unwrap().resume())
        .await
        .unwrap();
    assert_eq!(counts(&again), (1, 0, 1));
    shutdown(engine).await;
}

#[derive(Serialize, Deserialize)]
struct Ping;

impl Job for Ping {
    const NAME: &'static str = "ping";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<String, Self::Error> {
        Ok("pong".into())
    }
}

#[tokio::test(start_paused = true)]
async fn bulk_items_run_on_their_own_queue_so_a_big_batch_never_starves_jobs() {
    let (p, shared, mut rx) = probe();
    let engine = common::memory_builder(common::mock_clock())
        .register::<Ping>()
        .pipeline_with_concurrency(p, 1)
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
    shutdown(engine).await;
}

/// Outputs a map with non-string keys: MessagePack encodes it, JSON cannot.
struct Pairs;

impl Pipeline for Pairs {
    const NAME: &'static str = "pairs";
    type Input = u8;
    type Output = BTreeMap<(u8, u8), u8>;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u8>) -> Result<Self::Output, ItemError> {
        Ok(BTreeMap::from([((ctx.input, ctx.input), ctx.input)]))
    }
}

#[tokio::test(start_paused = true)]
async fn a_pipeline_output_that_fails_json_conversion_is_reported() {
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Pairs)
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Pairs>("pairs").unwrap().sink(sink.clone());

    let report = within(batch.run([3u8])).await.unwrap();

    assert_eq!(counts(&report), (1, 1, 0));
    assert_eq!(report.sink_errors, 1);
    let records = sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key, "item-0");
    // Never written as succeeded without its output.
    assert_eq!(records[0].status, gaffer::STATUS_OUTPUT_UNAVAILABLE);
    assert_eq!(records[0].output, None);
    let error = records[0].error.as_deref().unwrap_or_default();
    assert!(error.contains("JSON"), "{error}");
    assert_eq!(report.sink_error_keys, vec!["item-0".to_string()]);
    shutdown(engine).await;
}

/// Forwards every record it gets to a channel.
struct Forwarder;

impl Actor for Forwarder {
    type Msg = OutputRecord;
    type State = mpsc::UnboundedSender<OutputRecord>;
    type Arguments = mpsc::UnboundedSender<OutputRecord>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        record: OutputRecord,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = tx.send(record);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_actor_sink_forwards_each_record_to_an_actor() {
    let (engine, _shared, _rx, _clock) = probe_engine().await;
    let (tx, mut records) = mpsc::unbounded_channel();
    let (actor, handle) = Actor::spawn(None, Forwarder, tx).await.unwrap();
    let sink = Arc::new(ActorSink::new(actor.get_derived()));
    let batch = engine.batch::<Probe>("actor").unwrap().sink(sink);

    let report = within(batch.run([1u64, UNLUCKY])).await.unwrap();
    assert_eq!(counts(&report), (2, 1, 1));
    assert_eq!(report.sink_errors, 0);

    let mut got = HashMap::new();
    for _ in 0..2 {
        let r = within(records.recv()).await.unwrap();
        got.insert(r.key.clone(), r);
    }
    assert_eq!(got["item-0"].status, "succeeded");
    assert_eq!(got["item-0"].output, json(2));
    assert_eq!(got["item-1"].status, "failed");
    assert_eq!(got["item-1"].error.as_deref(), Some("unlucky"));

    actor.stop(None);
    handle.await.unwrap();
    shutdown(engine).await;
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
    shutdown(engine).await;
}
