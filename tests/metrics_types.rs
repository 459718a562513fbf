//! The metrics a job type's pool holds as handles (registered at their
//! first update, then kept): a handler crash, a pause, batch items, queue
//! waits, settlements and run times carry their type's labels, and a series
//! appears only once it has a value. Read back with metrics-util's
//! debugging recorder, installed before the engine starts (its own test
//! binary: the recorder is global).

mod common;

use std::collections::BTreeMap;

use gaffer::{Job, JobContext};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde::{Deserialize, Serialize};

/// Panics on its first attempt, succeeds on the second.
#[derive(Debug, Serialize, Deserialize)]
struct PanicsOnce;

impl Job for PanicsOnce {
    const NAME: &'static str = "metrics-panics-once";
    type Output = u32;
    type Error = std::convert::Infallible;

    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        if ctx.attempt() == 1 {
            panic!("deliberate panic on attempt 1 (expected in this test)");
        }
        Ok(ctx.attempt())
    }
}

/// Upper-cases its input and records a cost; "bad" fails for good.
#[derive(Debug)]
struct Upper;

impl gaffer::Pipeline for Upper {
    const NAME: &'static str = "metrics-upper";
    type Input = String;
    type Output = String;
    type Error = gaffer::bulk::ItemError;

    async fn run(&self, ctx: &gaffer::BulkCtx<String>) -> Result<String, gaffer::bulk::ItemError> {
        if ctx.input == "bad" {
            return Err(gaffer::bulk::ItemError::permanent("bad input"));
        }
        ctx.record_cost("tokens", 2.0);
        Ok(ctx.input.to_uppercase())
    }
}

/// A metric's name and its labels, as `name{k=v,…}` (labels sorted).
fn series(key: &metrics::Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

/// Every `gaffer_` series now (counters and gauges by value, histograms by
/// their number of values); taking it resets the recorder's values.
fn snapshot(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name().starts_with("gaffer_"))
        .map(|(key, _, _, value)| {
            let value = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(v) => v.into_inner(),
                DebugValue::Histogram(values) => values.len() as f64,
            };
            (series(key.key()), value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_metrics_carry_its_labels_and_appear_with_their_first_value() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let engine = common::memory_builder(common::mock_clock())
        .register::<PanicsOnce>()
        .pipeline(Upper)
        .start()
        .await
        .unwrap();

    // Nothing ran yet: no series of the types' own.
    let before = snapshot(&snapshotter);
    assert!(
        before.keys().all(|k| !k.contains("metrics-")),
        "{before:#?}"
    );

    assert!(engine.pause(PanicsOnce::NAME).await.unwrap());
    let paused = snapshot(&snapshotter);
    assert_eq!(
        paused.get("gaffer_job_type_paused{job_type=metrics-panics-once}"),
        Some(&1.0),
        "{paused:#?}"
    );
    assert!(engine.resume(PanicsOnce::NAME).await.unwrap());

    let handle = engine.submit(PanicsOnce).await.unwrap();
    assert_eq!(common::within(handle.join()).await.unwrap(), Ok(2));
    let inputs: Vec<String> = ["a", "b", "bad"].map(String::from).to_vec();
    let report = common::within(engine.batch::<Upper>("metrics-batch").unwrap().run(inputs))
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.failed), (2, 1));
    engine.shutdown().await.unwrap();

    // The ready-jobs sample (every 10 s, tests/metrics_tenants.rs) is left
    // out: whether one ran depends on how long this test took.
    let seen: BTreeMap<String, f64> = snapshot(&snapshotter)
        .into_iter()
        .filter(|(k, _)| k.contains("metrics-"))
        .filter(|(k, _)| {
            !k.starts_with("gaffer_jobs_ready") && !k.starts_with("gaffer_oldest_ready_seconds")
        })
        .collect();
    let job = "job_type=metrics-panics-once";
    let pipeline = "job_type=metrics-upper";
    let want: BTreeMap<String, f64> = [
        // The pause and resume before.
        (format!("gaffer_job_type_paused{{{job}}}"), 0.0),
        // The panic: a crash, its attempt retried, then a success.
        (format!("gaffer_handler_crashes_total{{{job}}}"), 1.0),
        (
            format!("gaffer_attempts_total{{{job},kind=job,result=retried}}"),
            1.0,
        ),
        (
            format!("gaffer_attempts_total{{{job},kind=job,result=succeeded}}"),
            1.0,
        ),
        (format!("gaffer_job_queue_wait_seconds{{{job}}}"), 2.0),
        (format!("gaffer_settlement_seconds{{{job}}}"), 2.0),
        // Only the run that returned has a duration.
        (format!("gaffer_job_run_seconds{{{job}}}"), 1.0),
        (format!("gaffer_jobs_running{{{job}}}"), 0.0),
        // The batch: two items succeeded, one failed for good.
        (
            format!("gaffer_attempts_total{{{pipeline},kind=item,result=succeeded}}"),
            2.0,
        ),
        (
            format!("gaffer_attempts_total{{{pipeline},kind=item,result=failed}}"),
            1.0,
        ),
        (
            "gaffer_batch_items_total{pipeline=metrics-upper,result=succeeded}".into(),
            2.0,
        ),
        (
            "gaffer_batch_items_total{pipeline=metrics-upper,result=failed}".into(),
            1.0,
        ),
        (
            "gaffer_cost_total{metric=tokens,pipeline=metrics-upper}".into(),
            4.0,
        ),
        (format!("gaffer_job_queue_wait_seconds{{{pipeline}}}"), 3.0),
        (format!("gaffer_settlement_seconds{{{pipeline}}}"), 3.0),
        (format!("gaffer_job_run_seconds{{{pipeline}}}"), 3.0),
        (format!("gaffer_jobs_running{{{pipeline}}}"), 0.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(seen, want);
}
