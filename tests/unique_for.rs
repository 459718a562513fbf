//! Unique for a period (`SubmitOptions::unique_for`): at most one job of a
//! key per period, on a local-disk store and the engine's clock.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{Error, Job, JobContext, SubmitOptions};
use serde::{Deserialize, Serialize};

use common::{T0_MS, within};

const HOUR: Duration = Duration::from_secs(3600);

/// Counts its runs; keyed by `key` when it has one.
#[derive(Serialize, Deserialize)]
struct Digest {
    user: String,
    key: Option<String>,
}

impl Job for Digest {
    const NAME: &'static str = "digest";
    type Output = usize;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<usize, Error> {
        Ok(ctx
            .state::<Arc<AtomicUsize>>()
            .fetch_add(1, Ordering::SeqCst)
            + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}

fn hourly() -> SubmitOptions {
    SubmitOptions::default().unique_for(HOUR)
}

fn digest(user: &str, key: Option<&str>) -> Digest {
    Digest {
        user: user.into(),
        key: key.map(str::to_string),
    }
}

#[tokio::test(start_paused = true)]
async fn one_job_per_period_of_its_payload_and_the_next_period_runs_again() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = common::disk_builder(tmp.path(), clock.clone())
        .register::<Digest>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    let first = engine
        .submit_with(digest("ada", None), hourly())
        .await
        .unwrap();
    // Its id is its payload's key in the hour that holds T0 (on the hour).
    let key = gaffer::job::payload_idempotency_key(&digest("ada", None)).unwrap();
    assert_eq!(
        first.id(),
        gaffer::job::keyed_job_id(&format!("{key}@3600000ms#{}", T0_MS / 3_600_000))
    );
    assert_eq!(within(first.join()).await.unwrap().unwrap(), 1);

    // Later in the same hour: the same job, answered from its record.
    clock.advance(HOUR - Duration::from_secs(1));
    let again = engine
        .submit_with(digest("ada", None), hourly())
        .await
        .unwrap();
    assert_eq!(again.id(), first.id());
    assert_eq!(within(again.join()).await.unwrap().unwrap(), 1);
    // Another payload is another job.
    let other = engine
        .submit_with(digest("bo", None), hourly())
        .await
        .unwrap();
    assert_ne!(other.id(), first.id());
    assert_eq!(within(other.join()).await.unwrap().unwrap(), 2);

    // The next hour: a new job.
    clock.advance(Duration::from_secs(1));
    let next = engine
        .submit_with(digest("ada", None), hourly())
        .await
        .unwrap();
    assert_ne!(next.id(), first.id());
    assert_eq!(within(next.join()).await.unwrap().unwrap(), 3);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_keyed_job_is_unique_per_period_of_its_key_and_a_zero_period_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = common::disk_builder(tmp.path(), clock.clone())
        .register::<Digest>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    let h = engine
        .submit_with(digest("ada", Some("digest:ada")), hourly())
        .await
        .unwrap();
    assert_eq!(
        h.id(),
        gaffer::job::keyed_job_id(&format!("digest:ada@3600000ms#{}", T0_MS / 3_600_000))
    );
    assert_eq!(within(h.join()).await.unwrap().unwrap(), 1);
    // The key decides, as for any keyed job: another payload under it in
    // the same period is refused.
    let mismatch = engine
        .submit_with(digest("eve", Some("digest:ada")), hourly())
        .await
        .unwrap_err();
    assert!(matches!(mismatch, Error::InputMismatch(_)), "{mismatch:?}");
    // The next period's is a new job, whatever its payload.
    clock.advance(HOUR);
    let next = engine
        .submit_with(digest("eve", Some("digest:ada")), hourly())
        .await
        .unwrap();
    assert_ne!(next.id(), h.id());
    assert_eq!(within(next.join()).await.unwrap().unwrap(), 2);

    let zero = engine
        .submit_with(
            digest("ada", None),
            SubmitOptions::default().unique_for(Duration::ZERO),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&zero, Error::InvalidSubmitOptions(m) if m.contains("unique_for")),
        "{zero:?}"
    );
    common::shut_down_cleanly(&engine).await;
}
