//! #37 §4's metrics: a job type's ready jobs over all its values and its
//! oldest ready job's age, one series each per type (no label per value),
//! sampled by the type's pool every 10 s. On paused tokio time with the
//! queue on a mock clock: the samples and the ages are exact. Its own test
//! binary: the debugging recorder is global.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use gaffer::{Fairness, Job, JobContext, JobOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Tenanted;

impl Job for Tenanted {
    const NAME: &'static str = "metrics-tenanted";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, _ctx: JobContext) -> Result<(), std::io::Error> {
        Ok(())
    }
}

/// Every gaffer series now, by name then labels (sorted, `k=v`); one
/// snapshot (taking it resets the recorder's values).
fn series(snapshotter: &Snapshotter) -> BTreeMap<String, BTreeMap<String, f64>> {
    let mut out: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name().to_string();
        if !name.starts_with("gaffer_") {
            continue;
        }
        let (labels, value) = {
            let mut labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let value = match value {
                DebugValue::Gauge(v) => v.into_inner(),
                DebugValue::Counter(n) => n as f64,
                DebugValue::Histogram(v) => v.len() as f64,
            };
            (labels.join(","), value)
        };
        out.entry(name).or_default().insert(labels, value);
    }
    out
}

const LABEL: &str = "job_type=metrics-tenanted";

/// Mark both gauges of the type with -1, a value no sample sets: a read
/// that is not -1 is a sample's (a snapshot resets gauges to 0, so every
/// read is followed by a new mark; on the test's one thread nothing runs
/// between the two).
fn mark() {
    metrics::gauge!("gaffer_jobs_ready", "job_type" => "metrics-tenanted").set(-1.0);
    metrics::gauge!("gaffer_oldest_ready_seconds", "job_type" => "metrics-tenanted").set(-1.0);
}

/// Wait (virtual time) until a sample of the type's gauges reads `ready`
/// and `oldest` seconds.
async fn sampled(snapshotter: &Snapshotter, ready: f64, oldest: f64) {
    mark();
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let found = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut now = series(snapshotter);
            mark();
            last = (
                now.remove("gaffer_jobs_ready").unwrap_or_default(),
                now.remove("gaffer_oldest_ready_seconds")
                    .unwrap_or_default(),
            );
            if last.0.get(LABEL) == Some(&ready) && last.1.get(LABEL) == Some(&oldest) {
                return;
            }
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "wanted {ready} ready, oldest {oldest} s; last read {last:?}"
    );
    // One series per type: no label per value.
    assert_eq!(last.0.keys().collect::<Vec<_>>(), vec![LABEL]);
    assert_eq!(last.1.keys().collect::<Vec<_>>(), vec![LABEL]);
}

#[tokio::test(start_paused = true)]
async fn ready_jobs_and_the_oldest_ones_age_per_type_over_every_value() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock.clone())
        .register_with::<Tenanted>(JobOptions {
            fair_by: Some(Fairness::header("tenant")),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    engine.pause(Tenanted::NAME).await.unwrap();
    let mut handles = Vec::new();
    for (tenant, n) in [("acme", 3), ("globex", 2)] {
        for _ in 0..n {
            let mut opts = gaffer::SubmitOptions::default();
            opts.headers.insert("tenant".into(), tenant.into());
            handles.push((tenant, engine.submit_with(Tenanted, opts).await.unwrap()));
        }
    }
    handles.push(("", engine.submit(Tenanted).await.unwrap()));
    // Queued 30 s ago (the queue's clock), 6 ready over three values.
    clock.advance(Duration::from_secs(30));
    sampled(&snapshotter, 6.0, 30.0).await;

    // acme paused and the type resumed: the others run; acme's 3 are still
    // ready (held), and as old.
    assert!(
        engine
            .pause_value(Tenanted::NAME, "tenant", "acme")
            .await
            .unwrap()
    );
    engine.resume(Tenanted::NAME).await.unwrap();
    for (tenant, h) in &handles {
        if *tenant != "acme" {
            common::within(h.join()).await.unwrap().unwrap();
        }
    }
    sampled(&snapshotter, 3.0, 30.0).await;
    clock.advance(Duration::from_secs(15));
    sampled(&snapshotter, 3.0, 45.0).await;

    // Resumed: nothing ready, no age.
    engine
        .resume_value(Tenanted::NAME, "tenant", "acme")
        .await
        .unwrap();
    for (_, h) in &handles {
        common::within(h.join()).await.unwrap().unwrap();
    }
    sampled(&snapshotter, 0.0, 0.0).await;
    engine.shutdown().await.unwrap();
}
