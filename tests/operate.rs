//! Operator actions: retry a failed job (after a fix), pause and resume a
//! job type durably, cancel; from the engine's API and from a `Client` in
//! the store's inbox. On a real local-disk store, restarted in between.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{Engine, Error, Job, JobContext, job::FailureKind, job::JobState, remote::Client};
use serde::{Deserialize, Serialize};

use common::{LIMIT, eventually, within};

/// Whether `Parse` is fixed yet, and how often it ran.
#[derive(Default)]
struct Fix {
    fixed: AtomicBool,
    runs: AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Bug(String);

#[derive(Debug, Serialize, Deserialize)]
struct Parse {
    text: String,
}

impl Job for Parse {
    const NAME: &'static str = "parse";
    type Output = usize;
    type Error = Bug;

    async fn run(&self, ctx: JobContext) -> Result<usize, Bug> {
        let fix = ctx.state::<Arc<Fix>>();
        fix.runs.fetch_add(1, Ordering::SeqCst);
        if fix.fixed.load(Ordering::SeqCst) {
            Ok(self.text.len())
        } else {
            Err(Bug("parser bug".into()))
        }
    }

    fn classify(&self, _: &Bug) -> FailureKind {
        FailureKind::Permanent
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Ping;

impl Job for Ping {
    const NAME: &'static str = "ping";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, _: JobContext) -> Result<(), gaffer::Error> {
        Ok(())
    }
}

async fn start(dir: &Path, fix: &Arc<Fix>) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .intake_poll(Duration::from_millis(20))
        .register::<Parse>()
        .register::<Ping>()
        .state(fix.clone())
        .start()
        .await
        .expect("engine starts")
}

/// Submitted and waiting: queued (a paused pool that had claimed it gave it
/// back at once), or scheduled.
fn waits(state: &gaffer::remote::RequestState) -> bool {
    matches!(
        state,
        gaffer::remote::RequestState::Job(JobState::Queued | JobState::Scheduled)
    )
}

async fn client(dir: &Path) -> Client {
    Client::builder()
        .store(gaffer::Store::local_dir(dir))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .expect("client opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_jobs_retried_after_a_fix_and_a_restart_succeed_under_their_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = start(tmp.path(), &fix).await;
    let mut ids = Vec::new();
    for text in ["a", "bb", "ccc"] {
        let h = engine.submit(Parse { text: text.into() }).await.unwrap();
        assert!(within(h.join()).await.unwrap().is_err());
        ids.push(h.id().to_string());
    }
    // A succeeded job cannot be retried; an unknown one is unknown.
    let ok = engine.submit(Ping).await.unwrap();
    within(ok.join()).await.unwrap().unwrap();
    assert!(matches!(
        engine.retry(ok.id()).await,
        Err(Error::NotRetryable { .. })
    ));
    assert!(matches!(
        engine.retry("no-such-job").await,
        Err(Error::JobNotFound(_))
    ));
    engine.shutdown().await.unwrap();

    // The fix ships; the engine restarts; the failures are retried.
    fix.fixed.store(true, Ordering::SeqCst);
    let engine = start(tmp.path(), &fix).await;
    assert_eq!(engine.retry_failed("parse", None).await.unwrap(), 3);
    for (id, want) in ids.iter().zip([1, 2, 3]) {
        let h = engine.handle::<Parse>(id).unwrap();
        assert_eq!(within(h.join()).await.unwrap().unwrap(), want);
        assert_eq!(engine.status(id).await.unwrap(), JobState::Succeeded);
    }
    assert_eq!(fix.runs.load(Ordering::SeqCst), 6);
    // Nothing failed is left to retry.
    assert_eq!(engine.retry_failed("parse", None).await.unwrap(), 0);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_retries_cancels_pauses_and_resumes_through_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = start(tmp.path(), &fix).await;
    let client = client(tmp.path()).await;

    // Retry one failed job from the client.
    let h = client
        .submit(Parse {
            text: "abcd".into(),
        })
        .await
        .unwrap();
    assert!(within(h.join()).await.unwrap().is_err());
    fix.fixed.store(true, Ordering::SeqCst);
    let done = within(client.retry(h.id()).await.unwrap().wait())
        .await
        .unwrap();
    assert!(done.contains("retried"), "{done}");
    assert_eq!(within(h.join()).await.unwrap().unwrap(), 4);
    // Retrying it again (it succeeded) is refused, with the reason.
    match within(client.retry(h.id()).await.unwrap().wait()).await {
        Err(Error::Refused { reason, .. }) => assert!(reason.contains("succeeded"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }

    // Pause: the type's jobs wait (nothing fails); another type runs on.
    within(client.pause("parse").await.unwrap().wait())
        .await
        .unwrap();
    let waiting = client.submit(Parse { text: "xy".into() }).await.unwrap();
    let other = client.submit(Ping).await.unwrap();
    within(other.join()).await.unwrap().unwrap();
    eventually("the paused type's job waits", LIMIT, async || {
        waits(&waiting.status().await.unwrap())
    })
    .await;
    // A queued job is cancelled from the client.
    let doomed = client.submit(Parse { text: "zzz".into() }).await.unwrap();
    eventually("the job to cancel waits", LIMIT, async || {
        waits(&doomed.status().await.unwrap())
    })
    .await;
    let cancelled = within(client.cancel(doomed.id()).await.unwrap().wait())
        .await
        .unwrap();
    assert!(cancelled.contains("Cancelled"), "{cancelled}");
    assert!(
        within(doomed.join())
            .await
            .unwrap()
            .unwrap_err()
            .is_cancelled()
    );

    // The pause survives a restart.
    engine.shutdown().await.unwrap();
    let engine = start(tmp.path(), &fix).await;
    let ping = engine.submit(Ping).await.unwrap();
    within(ping.join()).await.unwrap().unwrap();
    let state = engine.status(waiting.id()).await.unwrap();
    assert!(
        matches!(state, JobState::Queued | JobState::Scheduled),
        "{state:?}"
    );

    // Resume: the waiting job runs.
    within(client.resume("parse").await.unwrap().wait())
        .await
        .unwrap();
    assert_eq!(within(waiting.join()).await.unwrap().unwrap(), 2);
    // Engine API: pause and resume answer what they changed.
    assert!(engine.pause("parse").await.unwrap());
    assert!(!engine.pause("parse").await.unwrap());
    assert!(engine.resume("parse").await.unwrap());
    assert!(matches!(
        engine.pause("nope").await,
        Err(Error::UnknownJobType(_))
    ));
    client.close().await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_requests_result_is_kept_for_its_retention_then_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let engine = common::disk_builder(tmp.path(), clock.clone())
        .intake_poll(Duration::from_millis(20))
        .request_retention(Duration::from_secs(3600))
        .register::<Ping>()
        .start()
        .await
        .unwrap();
    let client = client(tmp.path()).await;
    let request = client.pause("ping").await.unwrap();
    let result = within(request.wait()).await.unwrap();
    assert!(result.contains("paused"), "{result}");
    let key = gaffer::testing::intake::request_result_key(request.id());
    let record = async || {
        let queue = gaffer::testing::raw_queue(&engine).unwrap();
        queue.view().kv_get(&key).await.unwrap().is_some()
    };
    assert!(record().await);
    // The intake's job for the request is gone with its ack: nothing of it
    // is kept but the record.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    assert!(
        queue
            .view()
            .job_record(request.id())
            .await
            .unwrap()
            .is_none()
    );
    drop(queue);
    // Within its retention, its sender still reads what it came to.
    clock.advance(Duration::from_secs(3500));
    engine.sweep_now().await.unwrap();
    assert!(record().await);
    assert_eq!(within(request.result()).await.unwrap(), Some(result));
    // Past it, a pass removes it: the one asked for, or a pass of the
    // sweeper's own timer (every 20 ms here) that read the moved clock
    // first. The pass asked for starts after any pass in flight ends, so
    // once it answers the record is gone either way.
    clock.advance(Duration::from_secs(200));
    let swept = engine.sweep_now().await.unwrap();
    assert!(swept.expired <= 1, "{swept:?}");
    assert!(!record().await);
    client.close().await;
    engine.shutdown().await.unwrap();
}
