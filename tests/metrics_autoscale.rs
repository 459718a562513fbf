//! #39 §6, an autoscaler's signals: `gaffer_jobs_ready`,
//! `gaffer_jobs_running` and `gaffer_oldest_ready_seconds`, per type.
//! A process that runs two engines (as a `ShardedEngine` runs one per owned
//! shard) has one series of each per type: the ready jobs of both engines'
//! pools summed, the oldest of their ages, until an engine goes (its sample
//! leaves with it). A registered type that never ran a job has all three
//! series, at 0, from its pool's first sample. On paused tokio time with
//! the queues on a mock clock: the samples and the ages are exact. Its own
//! test binary: the debugging recorder is global.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use gaffer::{Job, JobContext, JobOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

static STARTED: Semaphore = Semaphore::const_new(0);
static END: Semaphore = Semaphore::const_new(0);

/// Runs until the test lets it end ([`END`]); says it started
/// ([`STARTED`]).
#[derive(Debug, Serialize, Deserialize)]
struct Backlog;

impl Job for Backlog {
    const NAME: &'static str = "metrics-backlog";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, _ctx: JobContext) -> Result<(), std::io::Error> {
        STARTED.add_permits(1);
        END.acquire().await.expect("never closed").forget();
        Ok(())
    }
}

/// Registered, never submitted.
#[derive(Debug, Serialize, Deserialize)]
struct Idle;

impl Job for Idle {
    const NAME: &'static str = "metrics-idle";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, _ctx: JobContext) -> Result<(), std::io::Error> {
        Ok(())
    }
}

/// Every gaffer series now, `name{labels}` → value; one snapshot (taking it
/// resets the recorder's gauges to 0; a registered series stays listed).
fn series(snapshotter: &Snapshotter) -> BTreeMap<String, f64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name().starts_with("gaffer_"))
        .map(|(key, _, _, value)| {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let value = match value {
                DebugValue::Gauge(v) => v.into_inner(),
                DebugValue::Counter(n) => n as f64,
                DebugValue::Histogram(v) => v.len() as f64,
            };
            (
                format!("{}{{{}}}", key.key().name(), labels.join(",")),
                value,
            )
        })
        .collect()
}

const READY: &str = "gaffer_jobs_ready{job_type=metrics-backlog}";
const OLDEST: &str = "gaffer_oldest_ready_seconds{job_type=metrics-backlog}";

/// Mark the type's sampled gauges with -1, a value no sample sets: a read
/// that is not -1 is a sample's (every read is followed by a new mark; on
/// the test's one thread nothing runs between the two).
fn mark() {
    metrics::gauge!("gaffer_jobs_ready", "job_type" => Backlog::NAME).set(-1.0);
    metrics::gauge!("gaffer_oldest_ready_seconds", "job_type" => Backlog::NAME).set(-1.0);
}

/// Wait (virtual time) until a sample reads `ready` and `oldest` seconds;
/// the series then.
async fn sampled(snapshotter: &Snapshotter, ready: f64, oldest: f64) -> BTreeMap<String, f64> {
    mark();
    let mut last = BTreeMap::new();
    let found = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            last = series(snapshotter);
            mark();
            if last.get(READY) == Some(&ready) && last.get(OLDEST) == Some(&oldest) {
                return;
            }
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "wanted {ready} ready, oldest {oldest} s; last read {last:#?}"
    );
    last
}

/// Let `secs` seconds pass on the queue's clock and on tokio's together, a
/// second at a time: the pools renew their running jobs' leases as they
/// would on real time (a 30 s jump of the queue's clock alone would expire
/// them).
async fn pass(clock: &gaffer::taquba::MockClock, secs: u64) {
    for _ in 0..secs {
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn two_engines_in_one_process_sum_their_ready_jobs_and_an_idle_type_reads_zero() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let clock = common::mock_clock();
    let one_at_a_time = || JobOptions {
        concurrency: Some(1),
        ..Default::default()
    };
    let first = common::memory_builder(clock.clone())
        .register_with::<Backlog>(one_at_a_time())
        .register::<Idle>()
        .start()
        .await
        .unwrap();
    let second = common::memory_builder(clock.clone())
        .register_with::<Backlog>(one_at_a_time())
        .shutdown_grace(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    // The first engine: jobs at 0, 10 and 20 s; the second: at 20 and 30 s.
    // Each runs its first (one at a time) until the test ends it.
    let mut handles = Vec::new();
    for advance in [10, 10, 0] {
        handles.push(first.submit(Backlog).await.unwrap());
        pass(&clock, advance).await;
    }
    second.submit(Backlog).await.unwrap();
    pass(&clock, 10).await;
    second.submit(Backlog).await.unwrap();
    common::within(STARTED.acquire_many(2))
        .await
        .expect("never closed")
        .forget();
    let now = series(&snapshotter);
    assert_eq!(
        now.get("gaffer_jobs_running{job_type=metrics-backlog}"),
        Some(&2.0),
        "{now:#?}"
    );

    // At 60 s: the first engine's oldest ready job (10 s) is 50 s old, the
    // second's (30 s) 30 s; 2 and 1 ready.
    pass(&clock, 30).await;
    let now = sampled(&snapshotter, 3.0, 50.0).await;
    // The type that never ran: its three series, at 0.
    for name in [
        "gaffer_jobs_running",
        "gaffer_jobs_ready",
        "gaffer_oldest_ready_seconds",
    ] {
        assert_eq!(
            now.get(&format!("{name}{{job_type=metrics-idle}}")),
            Some(&0.0),
            "{now:#?}"
        );
    }

    // The second engine goes (its running job given back at the end of its
    // grace): its sample goes with its pool, the first's alone remains.
    second.shutdown().await.unwrap();
    sampled(&snapshotter, 2.0, 50.0).await;

    // Every job ends: nothing ready, no age.
    END.add_permits(100);
    for h in handles {
        common::within(h.join()).await.unwrap().unwrap();
    }
    sampled(&snapshotter, 0.0, 0.0).await;
    first.shutdown().await.unwrap();
}
