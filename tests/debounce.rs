//! Debounce (`SubmitOptions::debounce`): many submissions of one key are
//! one run after the burst, on a local-disk store and the engine's clock;
//! race-free under concurrent submissions from the engine and from a
//! `Client` in another process; durable across a kill.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::job::JobState;
use gaffer::{Debounce, Error, Job, JobContext, SubmitOptions};
use serde::{Deserialize, Serialize};

use common::{LIMIT, within};

const WINDOW: Duration = Duration::from_secs(2);
const HOUR: Duration = Duration::from_secs(3600);

/// Re-indexes a document: answers the version it was given, counting runs.
#[derive(Debug, Serialize, Deserialize)]
struct Reindex {
    doc: String,
    version: u32,
}

impl Job for Reindex {
    const NAME: &'static str = "reindex";
    type Output = u32;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, Error> {
        ctx.state::<Arc<AtomicUsize>>()
            .fetch_add(1, Ordering::SeqCst);
        Ok(self.version)
    }
}

fn reindex(version: u32) -> Reindex {
    Reindex {
        doc: "doc-1".into(),
        version,
    }
}

fn trailing() -> SubmitOptions {
    SubmitOptions::default().debounce("doc-1", WINDOW)
}

async fn engine(
    dir: &std::path::Path,
    clock: Arc<gaffer::taquba::MockClock>,
    runs: &Arc<AtomicUsize>,
) -> gaffer::Engine {
    common::disk_builder(dir, clock)
        .register::<Reindex>()
        .state(runs.clone())
        .start()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_burst_runs_once_after_its_quiet_window_with_its_last_payload() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), clock.clone(), &runs).await;
    let mut handles = Vec::new();
    for version in 1..=40 {
        handles.push(
            engine
                .submit_with(reindex(version), trailing())
                .await
                .unwrap(),
        );
        if version == 1 {
            // Its run waits for the burst's end.
            let state = engine.status(handles[0].id()).await.unwrap();
            assert_eq!(state, JobState::Scheduled);
        }
        // Closer than the window: each pushes the run back.
        common::time_passes(&engine, &clock, WINDOW / 4).await;
    }
    let id = handles[0].id().to_string();
    assert!(handles.iter().all(|h| h.id() == id));
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    common::time_passes(&engine, &clock, WINDOW).await;
    for h in &handles {
        assert_eq!(within(h.join()).await.unwrap().unwrap(), 40);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Once it ran, the next submission starts a new burst.
    let next = engine.submit_with(reindex(41), trailing()).await.unwrap();
    assert_ne!(next.id(), id);
    common::time_passes(&engine, &clock, WINDOW).await;
    assert_eq!(within(next.join()).await.unwrap().unwrap(), 41);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_leading_burst_keeps_its_first_payload_and_another_key_is_its_own_burst() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), clock.clone(), &runs).await;
    let leading = SubmitOptions::default().debounce_with(Debounce::new("doc-1", WINDOW).leading());
    let mut handles = Vec::new();
    for version in 1..=5 {
        handles.push(
            engine
                .submit_with(reindex(version), leading.clone())
                .await
                .unwrap(),
        );
    }
    let other = engine
        .submit_with(
            reindex(9),
            SubmitOptions::default().debounce("doc-2", WINDOW),
        )
        .await
        .unwrap();
    assert_ne!(other.id(), handles[0].id());
    common::time_passes(&engine, &clock, WINDOW).await;
    for h in &handles {
        assert_eq!(within(h.join()).await.unwrap().unwrap(), 1);
    }
    assert_eq!(within(other.join()).await.unwrap().unwrap(), 9);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_of_submissions_runs_at_its_max_delay() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), clock.clone(), &runs).await;
    let capped = SubmitOptions::default()
        .debounce_with(Debounce::new("doc-1", WINDOW).max_delay(Duration::from_secs(5)));
    // One a second: never quiet for the window; the fifth is the last
    // before the max delay.
    let mut handles = Vec::new();
    for version in 1..=5 {
        handles.push(
            engine
                .submit_with(reindex(version), capped.clone())
                .await
                .unwrap(),
        );
        common::time_passes(&engine, &clock, Duration::from_secs(1)).await;
    }
    // Five seconds after the first: it runs, though the stream goes on.
    assert_eq!(within(handles[0].join()).await.unwrap().unwrap(), 5);
    let later = engine.submit_with(reindex(6), capped).await.unwrap();
    assert_ne!(later.id(), handles[0].id());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_burst_ends_and_the_next_submission_starts_another() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), clock.clone(), &runs).await;
    let h = engine.submit_with(reindex(1), trailing()).await.unwrap();
    h.cancel().await.unwrap();
    assert!(within(h.join()).await.unwrap().unwrap_err().is_cancelled());
    let next = engine.submit_with(reindex(2), trailing()).await.unwrap();
    assert_ne!(next.id(), h.id());
    common::time_passes(&engine, &clock, WINDOW).await;
    assert_eq!(within(next.join()).await.unwrap().unwrap(), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // What its burst decides, a submission cannot set.
    for (opts, what) in [
        (
            SubmitOptions {
                run_at: Some(std::time::SystemTime::now()),
                ..trailing()
            },
            "due time",
        ),
        (SubmitOptions::default().debounce("", WINDOW), "1-256 bytes"),
        (
            SubmitOptions::default().debounce("doc-1", Duration::ZERO),
            "at least 1 ms",
        ),
    ] {
        let err = engine.submit_with(reindex(3), opts).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidSubmitOptions(m) if m.contains(what)),
            "{err:?}"
        );
    }
    common::shut_down_cleanly(&engine).await;
}

/// The client process of the race test: 100 debounced submissions at once
/// through a `Client`, then each handle's job id (once the engine took its
/// request) and output, one line each, to `ids` and `outputs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by two_hundred_racing_submissions_from_two_processes_are_one_run as a child process"]
async fn debounce_client_child() {
    let Ok(dir) = std::env::var("GAFFER_DEBOUNCE_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let client = gaffer::remote::Client::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .unwrap();
    let sends = (1000..1100).map(|version| {
        let client = &client;
        async move {
            client
                .submit_with(reindex(version), trailing())
                .await
                .unwrap()
        }
    });
    let handles = futures_util::future::join_all(sends).await;
    let mut ids = Vec::new();
    for h in &handles {
        let id = common::eventually_ok("the engine takes the request", LIMIT, async || {
            match h.job_id().await {
                Ok(Some(id)) => Ok(id),
                Ok(None) => Err("not taken yet".to_string()),
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
        ids.push(id);
    }
    common::write_whole(&dir.join("ids"), ids.join("\n"));
    let mut outputs = Vec::new();
    for h in &handles {
        outputs.push(within(h.join()).await.unwrap().unwrap().to_string());
    }
    common::write_whole(&dir.join("outputs"), outputs.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_racing_submissions_from_two_processes_are_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    // The engine's clock stands still while the submissions race: the
    // burst cannot close before all of them are in.
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = common::disk_builder(&tmp.path().join("store"), clock.clone())
        .intake_poll(Duration::from_millis(20))
        .register::<Reindex>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    let mut child =
        common::spawn_test_child("debounce_client_child", "GAFFER_DEBOUNCE_DIR", tmp.path());
    let sends = (0..100).map(|version| {
        let engine = &engine;
        async move {
            engine
                .submit_with(reindex(version), trailing())
                .await
                .unwrap()
        }
    });
    let handles = futures_util::future::join_all(sends).await;
    let ids_file = tmp.path().join("ids");
    common::wait_for_child_file(tmp.path(), &ids_file, "the client's job ids").await;
    let id = handles[0].id().to_string();
    assert!(handles.iter().all(|h| h.id() == id));
    let theirs = std::fs::read_to_string(&ids_file).unwrap();
    assert_eq!(theirs.lines().count(), 100);
    assert!(theirs.lines().all(|l| l == id), "{theirs}");

    common::time_passes(&engine, &clock, WINDOW).await;
    let output = within(handles[0].join()).await.unwrap().unwrap();
    for h in &handles {
        assert_eq!(within(h.join()).await.unwrap().unwrap(), output);
    }
    let outputs_file = tmp.path().join("outputs");
    common::wait_for_child_file(tmp.path(), &outputs_file, "the client's outputs").await;
    let theirs = std::fs::read_to_string(&outputs_file).unwrap();
    assert_eq!(theirs.lines().count(), 100);
    assert!(theirs.lines().all(|l| l == output.to_string()), "{theirs}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(child.wait().unwrap().success());
    engine.shutdown().await.unwrap();
}

/// The engine process of the kill test: three debounced submissions of a
/// burst an hour long (real time), then its id to `burst`; waits to be
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_burst_survives_a_kill_and_runs_once_with_its_last_payload as a child process"]
async fn debounce_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_DEBOUNCE_KILL_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .flush_interval(Duration::from_millis(1))
        .register::<Reindex>()
        .state(Arc::new(AtomicUsize::new(0)))
        .start()
        .await
        .unwrap();
    let hourly = SubmitOptions::default().debounce("doc-1", HOUR);
    let mut id = String::new();
    for version in 1..=3 {
        id = engine
            .submit_with(reindex(version), hourly.clone())
            .await
            .unwrap()
            .id()
            .to_string();
    }
    common::write_whole(&dir.join("burst"), &id);
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_survives_a_kill_and_runs_once_with_its_last_payload() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = common::spawn_test_child(
        "debounce_engine_child",
        "GAFFER_DEBOUNCE_KILL_DIR",
        tmp.path(),
    );
    let burst = tmp.path().join("burst");
    common::wait_for_child_file(tmp.path(), &burst, "the burst").await;
    child.kill().unwrap();
    child.wait().unwrap();
    let id = std::fs::read_to_string(&burst).unwrap();

    // The next engine's clock starts two hours on: the burst is over.
    let clock = common::clock_ahead(2 * HOUR);
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(&tmp.path().join("store"), clock, &runs).await;
    let handle = engine.handle::<Reindex>(&id).unwrap();
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 3);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    engine.shutdown().await.unwrap();
}
