//! gaffer's metrics through the `metrics` facade, read back with
//! metrics-util's debugging recorder (its own test binary: the recorder is
//! global).

mod common;

use gaffer::{Job, JobContext, job::FailureKind};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Oops(&'static str);

/// 0: succeeds; 1: fails once (transient), then succeeds; 2: fails for good.
#[derive(Debug, Serialize, Deserialize)]
struct Mode(u8);

impl Job for Mode {
    const NAME: &'static str = "mode";
    type Output = ();
    type Error = Oops;

    async fn run(&self, ctx: JobContext) -> Result<(), Oops> {
        match (self.0, ctx.attempt()) {
            (0, _) | (1, 2..) => Ok(()),
            (1, _) => Err(Oops("once")),
            _ => Err(Oops("never")),
        }
    }

    fn classify(&self, e: &Oops) -> FailureKind {
        if e.0 == "never" {
            FailureKind::Permanent
        } else {
            FailureKind::Transient
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_counted_by_result_with_the_job_type() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();
    let engine = common::memory_builder(common::mock_clock())
        .register::<Mode>()
        .start()
        .await
        .unwrap();
    for mode in [0, 0, 1, 2] {
        let h = engine.submit(Mode(mode)).await.unwrap();
        let _ = common::within(h.join()).await.unwrap();
    }
    engine.shutdown().await.unwrap();

    let mut attempts = std::collections::BTreeMap::new();
    let mut runs = 0;
    let mut running = None;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_string())
        };
        match (key.name(), value) {
            ("gaffer_attempts_total", DebugValue::Counter(n)) => {
                assert_eq!(label("job_type").as_deref(), Some("mode"));
                assert_eq!(label("kind").as_deref(), Some("job"));
                attempts.insert(label("result").unwrap(), n);
            }
            ("gaffer_job_run_seconds", DebugValue::Histogram(values)) => {
                assert_eq!(label("job_type").as_deref(), Some("mode"));
                runs += values.len();
            }
            ("gaffer_jobs_running", DebugValue::Gauge(v)) => running = Some(v.into_inner()),
            _ => {}
        }
    }
    let want: std::collections::BTreeMap<String, u64> = [
        ("succeeded".to_string(), 3),
        ("retried".to_string(), 1),
        ("failed".to_string(), 1),
    ]
    .into();
    assert_eq!(attempts, want);
    assert_eq!(runs, 5, "one run duration per attempt");
    assert_eq!(running, Some(0.0), "every started job counted down");
}
