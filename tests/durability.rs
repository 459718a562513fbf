//! Durability: what a real local-disk store keeps across a clean shutdown and
//! a reopen of the same directory, what the engine refuses to open, and the
//! failure record of a job whose last attempt lost its lease (alone, and
//! among thousands of dead jobs).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gaffer::taquba::object_store::local::LocalFileSystem;
use gaffer::taquba::{Clock, MockClock, Queue};
use gaffer::{
    Engine, EngineEvent, Error, Job, JobContext, SubmitOptions, job::FailureKind, job::JobState,
};
use serde::{Deserialize, Serialize};

use common::jobs::Fail;
use common::{Gate, LIMIT, Runs, shut_down_cleanly};

/// Doubles its value; optionally keyed; counts its runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Double {
    key: Option<String>,
    value: u64,
}

impl Job for Double {
    const NAME: &'static str = "durability-double";
    type Output = u64;
    type Error = std::convert::Infallible;

    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(self.value * 2)
    }

    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// Waits at the registered [`Gate`] (released one job at a time), then
/// returns its number.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Gated {
    n: u32,
}

impl Job for Gated {
    const NAME: &'static str = "durability-gated";
    type Output = u32;
    type Error = std::convert::Infallible;

    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        ctx.state::<Gate>().wait().await;
        Ok(self.n)
    }
}

/// Never returns on its own: only its cancel token or the gate end it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hang;

impl Job for Hang {
    const NAME: &'static str = "durability-hang";
    type Output = ();
    type Error = std::convert::Infallible;

    async fn run(&self, ctx: JobContext) -> Result<(), Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        let released = ctx.state::<Gate>().wait();
        tokio::select! {
            _ = ctx.cancel_token().cancelled() => {}
            _ = released => {}
        }
        Ok(())
    }
}

/// A `run_at` this far after the mock clock's now.
fn after(clock: &MockClock, delay: Duration) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(clock.now_ms()) + delay
}

/// An engine on `dir` with [`Double`] registered.
async fn start_double(dir: &Path, clock: &Arc<MockClock>, runs: &Arc<Runs>) -> Engine {
    common::disk_builder(dir, clock.clone())
        .register::<Double>()
        .state(runs.clone())
        .start()
        .await
        .expect("the engine starts on the directory")
}

/// A plain taquba queue on the engine's directory and queue path.
async fn open_plain_queue(dir: &Path, clock: &Arc<MockClock>) -> Queue {
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir).expect("local store"));
    Queue::open_with_options(store, "queue", common::test_options(clock.clone()))
        .await
        .expect("the queue opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_mismatch_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let key = Some("order-17".to_string());

    let first = start_double(dir.path(), &clock, &runs).await;
    let original = first
        .submit_with(
            Double {
                key: key.clone(),
                value: 1,
            },
            SubmitOptions {
                run_at: Some(after(&clock, Duration::from_secs(3600))),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(original.newly_submitted());
    assert_eq!(original.status().await.unwrap(), JobState::Scheduled);
    let id = original.id().to_string();
    shut_down_cleanly(&first).await;

    let second = start_double(dir.path(), &clock, &runs).await;
    let err = second
        .submit(Double {
            key: key.clone(),
            value: 2,
        })
        .await
        .expect_err("another payload under the same key must be refused");
    assert!(
        matches!(&err, Error::InputMismatch(run) if *run == id),
        "{err:?}"
    );
    // The same payload still joins the job pending since before the restart.
    let same = second.submit(Double { key, value: 1 }).await.unwrap();
    assert!(!same.newly_submitted());
    assert_eq!(same.id(), id);
    assert_eq!(same.status().await.unwrap(), JobState::Scheduled);
    assert_eq!(runs.get(), 0, "the scheduled job must not have run");
    shut_down_cleanly(&second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pending_at_shutdown_runs_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());

    let first = start_double(dir.path(), &clock, &runs).await;
    let pending = first
        .submit_with(
            Double {
                key: None,
                value: 5,
            },
            SubmitOptions {
                run_at: Some(after(&clock, Duration::from_secs(3600))),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(pending.status().await.unwrap(), JobState::Scheduled);
    let id = pending.id().to_string();
    shut_down_cleanly(&first).await;
    assert_eq!(runs.get(), 0);

    let second = start_double(dir.path(), &clock, &runs).await;
    let handle = second.handle::<Double>(&id).unwrap();
    assert_eq!(handle.status().await.unwrap(), JobState::Scheduled);
    assert_eq!(handle.outcome().await.unwrap(), None);
    assert_eq!(runs.get(), 0, "not due yet");

    clock.advance(Duration::from_secs(2 * 3600));
    gaffer::testing::raw_queue(&second)
        .unwrap()
        .promote_scheduled_now()
        .await
        .unwrap();
    let out = tokio::time::timeout(LIMIT, handle.join())
        .await
        .expect("the job ends after its run_at")
        .unwrap();
    assert_eq!(out, Ok(10));
    assert_eq!(runs.get(), 1);
    assert_eq!(handle.status().await.unwrap(), JobState::Succeeded);
    shut_down_cleanly(&second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_from_an_id_works_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());

    let first = start_double(dir.path(), &clock, &runs).await;
    let handle = first
        .submit(Double {
            key: None,
            value: 7,
        })
        .await
        .unwrap();
    assert_eq!(handle.clone().await.unwrap(), 14);
    let id = handle.id().to_string();
    shut_down_cleanly(&first).await;

    let second = start_double(dir.path(), &clock, &runs).await;
    let rebuilt = second.handle::<Double>(&id).unwrap();
    assert_eq!(rebuilt.id(), id);
    assert!(!rebuilt.newly_submitted());
    let out = tokio::time::timeout(LIMIT, rebuilt.join())
        .await
        .expect("a finished job answers at once")
        .unwrap();
    assert_eq!(out, Ok(14));
    assert_eq!(rebuilt.status().await.unwrap(), JobState::Succeeded);
    assert_eq!(second.status(&id).await.unwrap(), JobState::Succeeded);
    assert_eq!(rebuilt.outcome().await.unwrap(), Some(Ok(14)));
    assert_eq!(runs.get(), 1, "answering from the record does not run it");
    shut_down_cleanly(&second).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_another_layout_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());

    let queue = open_plain_queue(dir.path(), &clock).await;
    queue
        .kv_put(b"gaffer/layout", b"gaffer-layout-0")
        .await
        .unwrap();
    queue.close().await.unwrap();

    let refused = common::disk_builder(dir.path(), clock.clone())
        .register::<Double>()
        .state(runs.clone())
        .start()
        .await
        .expect_err("a store of another layout must be refused");
    match &refused {
        Error::LayoutMismatch { found, expected } => {
            assert_eq!(found, "gaffer-layout-0");
            assert_ne!(expected, found);
        }
        other => panic!("expected LayoutMismatch, got {other:?}"),
    }

    // The refusal closed the queue and left the marker alone: the directory
    // opens again and still holds the foreign layout.
    let queue = open_plain_queue(dir.path(), &clock).await;
    assert_eq!(
        queue
            .view()
            .kv_get(b"gaffer/layout")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"gaffer-layout-0"[..])
    );
    queue.close().await.unwrap();

    // And it is refused again, the same way.
    let again = common::disk_builder(dir.path(), clock.clone())
        .start()
        .await
        .expect_err("still refused");
    assert!(matches!(again, Error::LayoutMismatch { .. }), "{again:?}");
    assert_eq!(runs.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_left_claimed_after_a_clean_shutdown() {
    const JOBS: u32 = 4;
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let gate = Gate::closed();

    let engine = common::disk_builder(dir.path(), clock.clone())
        .register::<Gated>()
        .state(runs.clone())
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..JOBS {
        ids.push(engine.submit(Gated { n }).await.unwrap().id().to_string());
    }
    // Every job is running (held by the gate) before shutdown is asked for.
    gate.wait_entered(JOBS as usize, LIMIT).await;
    assert_eq!(runs.get(), JOBS as usize);
    for id in &ids {
        assert_eq!(engine.status(id).await.unwrap(), JobState::Running);
    }

    let shutting_down = engine.clone();
    let mut shutdown = tokio::spawn(async move { shutting_down.shutdown().await });
    // Shutdown waits for the running jobs: it cannot end while they are held.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut shutdown)
            .await
            .is_err(),
        "shutdown ended while its jobs were still running"
    );
    gate.release(JOBS as usize);
    let report = tokio::time::timeout(LIMIT, shutdown)
        .await
        .expect("shutdown ends once the jobs return")
        .unwrap()
        .unwrap();
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");

    // The store, read without the engine: nothing claimed, nothing pending.
    let queue = open_plain_queue(dir.path(), &clock).await;
    let stats = common::totals(queue.view(), "jobs.").await;
    assert_eq!(stats.claimed, 0, "{stats:?}");
    assert_eq!(stats.pending, 0, "{stats:?}");
    assert_eq!(stats.scheduled, 0, "{stats:?}");
    assert_eq!(stats.dead, 0, "{stats:?}");
    assert_eq!(stats.done, i64::from(JOBS), "{stats:?}");
    queue.close().await.unwrap();

    // Every outcome was recorded before the queue closed.
    let reopened = common::disk_builder(dir.path(), clock.clone())
        .register::<Gated>()
        .state(runs.clone())
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    for (n, id) in ids.iter().enumerate() {
        let handle = reopened.handle::<Gated>(id).unwrap();
        assert_eq!(handle.outcome().await.unwrap(), Some(Ok(n as u32)));
    }
    assert_eq!(runs.get(), JOBS as usize, "no job ran twice");
    shut_down_cleanly(&reopened).await;
}

/// In-memory store, paused time: the lease is the queue's (mock) clock,
/// which jumps past it while no tokio time passes (the engine renews a
/// running job's lease on a tokio timer: this is a stalled process).
#[tokio::test(start_paused = true)]
async fn a_job_whose_last_attempt_lost_its_lease_gets_a_failure_record() {
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let gate = Gate::closed();
    let engine = common::memory_builder(clock.clone())
        .register::<Hang>()
        .state(runs.clone())
        .state(gate.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let handle = engine
        .submit_with(
            Hang,
            SubmitOptions {
                max_attempts: Some(1),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let id = handle.id().to_string();
    gate.wait_entered(1, LIMIT).await;
    assert_eq!(handle.status().await.unwrap(), JobState::Running);

    // The lease (30 s by default) runs out on the queue's clock; the reaper
    // gives the job back to the queue (taquba never ends a gaffer job on its
    // own), and when the engine claims it again its attempts are spent: it
    // fails, with its record, without running.
    clock.advance(Duration::from_secs(31));
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    queue.reap_now().await.unwrap();
    drop(queue);
    common::wait_event(
        &mut events,
        LIMIT,
        |e| matches!(e, EngineEvent::JobFailed { run_id, retrying: false, .. } if *run_id == id),
    )
    .await;

    let err = tokio::time::timeout(LIMIT, handle.join())
        .await
        .expect("the waiter is told of the failure")
        .unwrap()
        .expect_err("the job did not succeed");
    assert_eq!(err.kind, FailureKind::Transient, "{err:?}");
    assert!(!err.is_cancelled(), "{err:?}");
    match handle.outcome().await.unwrap() {
        Some(Err(recorded)) => assert_eq!(recorded, err),
        other => panic!("expected a recorded failure, got {other:?}"),
    }
    assert_eq!(handle.status().await.unwrap(), JobState::Failed);
    assert_eq!(runs.get(), 1, "max_attempts 1: no second delivery");

    // Let the stale delivery return (if the reap did not cancel it already)
    // and wait until its settlement is over: it must not change the record.
    gate.release(1);
    common::eventually(
        "the stale delivery returns and settles",
        LIMIT,
        async || {
            let stats = engine.pool_stats().await.unwrap();
            let pool = stats[Hang::NAME];
            pool.running == 0 && pool.settling == 0
        },
    )
    .await;
    assert_eq!(handle.outcome().await.unwrap(), Some(Err(err)));
    assert_eq!(handle.status().await.unwrap(), JobState::Failed);
    shut_down_cleanly(&engine).await;
    assert_eq!(runs.get(), 1);
}

/// Fails for good at once.
#[derive(Serialize, Deserialize)]
struct Doomed(u32);

impl Job for Doomed {
    const NAME: &'static str = "doomed";
    type Output = ();
    type Error = Fail;
    async fn run(&self, _ctx: JobContext) -> Result<(), Fail> {
        Err(Fail::Msg(format!("doomed {}", self.0)))
    }
    fn classify(&self, _error: &Fail) -> gaffer::job::FailureKind {
        gaffer::job::FailureKind::Permanent
    }
}

/// Hangs until the gate opens; one attempt.
#[derive(Serialize, Deserialize)]
struct Hangs(u32);

impl Job for Hangs {
    const NAME: &'static str = "hangs";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Gate>().wait().await;
        Ok(self.0)
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(1)
    }
}

#[tokio::test(start_paused = true)]
async fn lease_lost_last_attempts_get_their_records_among_thousands_of_dead_jobs() {
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let engine = common::memory_builder(clock.clone())
        .state(gate.clone())
        .register::<Doomed>()
        .register_with::<Hangs>(gaffer::JobOptions {
            concurrency: Some(100),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let doomed: Vec<_> =
        futures_util::future::join_all((0..2_000).map(|i| engine.submit(Doomed(i))))
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    for h in doomed {
        assert!(common::within(h.join()).await.unwrap().is_err());
    }
    let mut hung = Vec::new();
    for i in 0..50 {
        hung.push(engine.submit(Hangs(i)).await.unwrap());
    }
    common::eventually("the jobs hang", LIMIT, async || {
        common::running(&engine, "hangs").await == 50
    })
    .await;
    // Their leases run out on their last attempt.
    clock.advance(Duration::from_secs(31));
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    queue.reap_now().await.unwrap();
    drop(queue);
    for h in &hung {
        let err = common::within(h.join()).await.unwrap().unwrap_err();
        assert_eq!(err.kind, gaffer::job::FailureKind::Transient, "{err:?}");
        assert!(err.message.contains("lease expired"), "{err:?}");
    }
    // Every dead job of the queues was dead-lettered by a settlement, with
    // its record: 2,050 records, and no dead job without one.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let totals = common::totals(queue.view(), "jobs.").await;
    drop(queue);
    assert_eq!(totals.dead, 2_050, "{totals:?}");
    gate.open();
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_url_is_the_same_store_as_its_local_directory() {
    let dir = tempfile::tempdir().unwrap();
    let runs = Arc::new(Runs::default());
    let url = format!("file://{}/nested/store", dir.path().display());
    let engine = Engine::builder()
        .store(gaffer::Store::url(url))
        .flush_interval(Duration::from_millis(1))
        .register::<Double>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    let keyed = Double {
        key: Some("file-url".into()),
        value: 21,
    };
    let first = engine.submit(keyed.clone()).await.unwrap();
    assert_eq!(
        tokio::time::timeout(LIMIT, first.join())
            .await
            .unwrap()
            .unwrap(),
        Ok(42)
    );
    shut_down_cleanly(&engine).await;

    // The directory the URL names (created by the engine) holds the store.
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.path().join("nested/store")))
        .flush_interval(Duration::from_millis(1))
        .register::<Double>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    let again = engine.submit(keyed).await.unwrap();
    assert_eq!(again.id(), first.id());
    assert_eq!(
        tokio::time::timeout(LIMIT, again.join())
            .await
            .unwrap()
            .unwrap(),
        Ok(42)
    );
    assert_eq!(
        runs.get(),
        1,
        "answered from the record the URL's engine wrote"
    );
    shut_down_cleanly(&engine).await;
}

#[tokio::test]
async fn a_bad_store_url_or_a_backend_not_built_in_is_a_typed_error_at_start() {
    let start = |url: &str| {
        Engine::builder()
            .store(gaffer::Store::url(url))
            .register::<Double>()
            .start()
    };
    match start("not a url").await {
        Err(Error::InvalidStoreUrl { url, .. }) => {
            assert_eq!(url, "not a url")
        }
        other => panic!("expected InvalidStoreUrl, got {:?}", other.err()),
    }
    match start("unknown://bucket/x").await {
        Err(Error::InvalidStoreUrl { .. }) => {}
        other => panic!("expected InvalidStoreUrl, got {:?}", other.err()),
    }
    // The tests build with `aws` only: an Azure URL names its feature.
    match start("az://container/app").await {
        Err(
            e @ Error::StoreFeatureMissing {
                feature: "azure", ..
            },
        ) => {
            assert!(e.to_string().contains("--features azure"), "{e}");
        }
        other => panic!("expected StoreFeatureMissing, got {:?}", other.err()),
    }
}
