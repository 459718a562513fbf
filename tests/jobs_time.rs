//! Acceptance tests of the jobs runner, after taquba-workflow 0.11's reference
//! suite: what time does to a job. A lease its handler extends, a lease that
//! expires (the reaper re-queues the job, and the late first attempt changes
//! nothing), a job scheduled for later, and retention of outcome records.
//!
//! Every test runs under paused tokio time on the in-memory store; leases,
//! schedules and retention follow a `MockClock` the test moves. A lease
//! expires here because the queue's clock jumps past it while no tokio time
//! passes: to the engine, which renews the leases of the jobs it runs on a
//! tokio timer (`tests/long_jobs.rs`), that is a process stalled past its
//! lease.

mod common;

use std::sync::Arc;
use std::time::Duration;

use gaffer::testing::layout::inspect;
use gaffer::{Error, Job, JobContext, SubmitOptions, job::JobState};
use serde::{Deserialize, Serialize};

use common::jobs::{Factor, Probe, Scale, at_ms, join, wait_started};
use common::{Gate, LIMIT, shut_down_cleanly};

/// Channel a job reports on (used where the test must act while it runs).
struct Reports(tokio::sync::mpsc::UnboundedSender<Result<(), String>>);

/// Extends its lease to ten minutes, reports, waits for the gate and returns
/// the attempt it ran as.
#[derive(Serialize, Deserialize)]
struct LongLease;

impl Job for LongLease {
    const NAME: &'static str = "long-lease";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let extended = ctx
            .lease()
            .ensure_at_least(Duration::from_secs(600))
            .map_err(|e| e.to_string());
        let _ = ctx.state::<Reports>().0.send(extended);
        ctx.state::<Arc<Probe>>().gate.wait().await;
        Ok(ctx.attempt())
    }
}

/// First attempt hangs on the gate (a lost-lease zombie); later attempts
/// return at once. Returns the attempt it ran as.
#[derive(Serialize, Deserialize)]
struct StuckFirst;

impl Job for StuckFirst {
    const NAME: &'static str = "stuck-first";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        if ctx.attempt() == 1 {
            ctx.state::<Arc<Probe>>().gate.wait().await;
        }
        Ok(ctx.attempt())
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_extends_its_lease_through_the_context() {
    let clock = common::mock_clock();
    let probe = Probe::new(Gate::closed());
    let (tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let engine = common::memory_builder(clock.clone())
        .register::<LongLease>()
        .state(probe.clone())
        .state(Reports(tx))
        .start()
        .await
        .unwrap();

    let handle = engine.submit(LongLease).await.unwrap();
    let extended = tokio::time::timeout(LIMIT, reports.recv())
        .await
        .expect("the job did not start")
        .expect("report channel closed");
    assert_eq!(extended, Ok(()), "ensure_at_least failed");

    // An unkeyed job's id is its queue job id. The default lease would end at
    // T0 + 30 s; the extended one ends at least 600 s from now.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let expiry = queue
        .lease_expiry(&common::job_queue(LongLease::NAME), handle.id())
        .expect("the running job has a lease");
    assert!(
        expiry >= common::T0_MS + 600_000,
        "lease ends at T0 + {} ms, not at least T0 + 600 s",
        expiry - common::T0_MS
    );

    // Past the default lease, a reap does not take the job away: it finishes
    // as its first attempt.
    clock.advance(Duration::from_secs(60));
    queue.reap_now().await.unwrap();
    drop(queue);
    assert_eq!(handle.status().await.unwrap(), JobState::Running);
    probe.gate.open();
    assert_eq!(join(&handle).await, Ok(1), "the job was redelivered");

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn lease_expiry_triggers_reaper_requeue() {
    let clock = common::mock_clock();
    let store = Arc::new(gaffer::taquba::object_store::memory::InMemory::new());
    let probe = Probe::new(Gate::closed());
    let engine = common::shared_memory_builder(store.clone(), clock.clone())
        .register::<StuckFirst>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let handle = engine.submit(StuckFirst).await.unwrap();
    wait_started(&mut events, handle.id(), 1).await;

    // The first attempt hangs past its 30 s lease; the reaper requeues it.
    clock.advance(Duration::from_secs(31));
    gaffer::testing::raw_queue(&engine)
        .unwrap()
        .reap_now()
        .await
        .unwrap();
    wait_started(&mut events, handle.id(), 2).await;
    assert_eq!(join(&handle).await, Ok(2), "attempt 2's result");

    // The zombie first attempt returns late; its settlement must not override.
    probe.gate.open();
    shut_down_cleanly(&engine).await; // drains: the zombie has returned and settled
    let engine = common::shared_memory_builder(store, clock)
        .register::<StuckFirst>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let reopened = engine.handle::<StuckFirst>(handle.id()).unwrap();
    assert_eq!(reopened.outcome().await.unwrap(), Some(Ok(2)));
    assert_eq!(reopened.status().await.unwrap(), JobState::Succeeded);

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn scheduled_job_runs_when_clock_passes_run_at() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock.clone())
        .register::<Scale>()
        .state(Factor(3))
        .start()
        .await
        .unwrap();

    let handle = engine
        .submit_with(
            Scale { x: 3 },
            SubmitOptions {
                run_at: Some(at_ms(common::T0_MS + 60_000)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(handle.status().await.unwrap(), JobState::Scheduled);
    // Scheduler ticks (tokio time) pass, the queue clock does not: it waits.
    assert_eq!(
        handle.join_timeout(Duration::from_secs(5)).await.unwrap(),
        None,
        "the job ran before its run_at"
    );
    assert_eq!(handle.status().await.unwrap(), JobState::Scheduled);

    clock.advance(Duration::from_secs(61));
    assert_eq!(join(&handle).await, Ok(9));

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn retention_removes_the_outcome_record() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock.clone())
        .register::<Scale>()
        .state(Factor(3))
        .retention(Duration::from_secs(60))
        .start()
        .await
        .unwrap();

    let handle = engine.submit(Scale { x: 5 }).await.unwrap();
    assert_eq!(join(&handle).await, Ok(15));

    // The finished-jobs index lists it, under its type.
    let services = gaffer::testing::services(&engine);
    let queue = services.raw_queue().unwrap();
    let listed = async || {
        let view = queue.view();
        let page = inspect::ended_page(view, None, &[], None, 10)
            .await
            .unwrap();
        let types = inspect::ended_types(view).await.unwrap();
        (
            page.jobs.into_iter().map(|(id, _)| id).collect::<Vec<_>>(),
            types,
        )
    };
    assert_eq!(
        listed().await,
        (vec![handle.id().to_string()], vec!["scale".to_string()])
    );

    // Within the retention window the record stays.
    clock.advance(Duration::from_secs(30));
    engine.sweep_now().await.unwrap();
    assert_eq!(handle.outcome().await.unwrap(), Some(Ok(15)));
    assert_eq!(handle.status().await.unwrap(), JobState::Succeeded);

    // Past it, a sweep removes it, and its index entry with it (no type
    // left in the index: the entry is gone, not just skipped).
    clock.advance(Duration::from_secs(31));
    engine.sweep_now().await.unwrap();
    assert_eq!(listed().await, (vec![], vec![]));
    drop(queue);
    assert!(matches!(handle.outcome().await, Err(Error::JobNotFound(_))));
    assert!(matches!(handle.status().await, Err(Error::JobNotFound(_))));
    match handle.join().await {
        Err(Error::JobNotFound(id)) => assert_eq!(id, handle.id()),
        other => panic!("expected JobNotFound, got {other:?}"),
    }

    shut_down_cleanly(&engine).await;
}
