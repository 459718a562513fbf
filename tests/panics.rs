//! No panic in the engine's own work leaves its owner waiting: a panic
//! injected (feature `testing`) in a claimer, a settlement, a sweeper pass,
//! a check of the periodic jobs or a request of the supervisor ends in a
//! retry or a restart, never a stalled job type or a hung shutdown.
//!
//! Each test arms its panic for a scope of its own (a job type's queue, or
//! an engine's `queue_name`), so the tests of this file run side by side.

mod common;

use gaffer::Error;
use std::sync::Arc;
use std::time::Duration;

use gaffer::testing::panics::{self, PanicPoint};
use gaffer::{Job, JobContext, periodic::Schedule};
use serde::{Deserialize, Serialize};

use common::{LIMIT, Runs, within};

macro_rules! counted_job {
    ($name:ident, $type_name:literal) => {
        #[derive(Serialize, Deserialize)]
        struct $name(u32);

        impl Job for $name {
            const NAME: &'static str = $type_name;
            type Output = u32;
            type Error = std::convert::Infallible;
            async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
                ctx.state::<Arc<Runs>>().hit();
                Ok(self.0 * 2)
            }
        }
    };
}

counted_job!(ClaimedAfterAPanic, "claimed-after-a-panic");
counted_job!(SettledAfterAPanic, "settled-after-a-panic");
counted_job!(Ticked, "ticked");
counted_job!(Asked, "asked");

/// A shutdown without a grace period (it waits for everything) that ends,
/// with the queue closed.
async fn shuts_down(engine: &gaffer::Engine) {
    let report = within(engine.shutdown()).await.expect("shutdown answers");
    assert!(report.queue_closed, "{report:?}");
}

#[tokio::test]
async fn a_claimer_that_panics_is_replaced_and_its_type_goes_on_claiming() {
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let queue = common::job_queue(ClaimedAfterAPanic::NAME);
    // The pool's first ask panics its claimer before it claims anything.
    panics::panic_next(PanicPoint::Claim, &queue);
    let engine = common::memory_builder(clock)
        .register::<ClaimedAfterAPanic>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    common::eventually("the claimer panicked", LIMIT, async || {
        !panics::is_armed(PanicPoint::Claim, &queue)
    })
    .await;
    // A new claimer claims the jobs submitted since.
    let handle = engine.submit(ClaimedAfterAPanic(21)).await.unwrap();
    assert_eq!(within(handle).await.unwrap(), 42);
    assert_eq!(runs.get(), 1);
    shuts_down(&engine).await;
}

#[tokio::test]
async fn a_settlement_that_panics_frees_its_slot_and_its_job_runs_again() {
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let queue = common::job_queue(SettledAfterAPanic::NAME);
    panics::panic_next(PanicPoint::Settlement, &queue);
    // One worker, one settlement at a time: a settlement that never
    // reported would stall the type for good.
    let engine = common::memory_builder(clock.clone())
        .register_with::<SettledAfterAPanic>(gaffer::JobOptions {
            concurrency: Some(1),
            ..Default::default()
        })
        .settlement_window(1)
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    let first = engine.submit(SettledAfterAPanic(1)).await.unwrap();
    common::eventually("the settlement panicked", LIMIT, async || {
        !panics::is_armed(PanicPoint::Settlement, &queue)
    })
    .await;
    // The type goes on: the next job runs and settles.
    let second = engine.submit(SettledAfterAPanic(2)).await.unwrap();
    assert_eq!(within(second).await.unwrap(), 4);
    // The first job's claim was never settled: it runs again once its lease
    // expires, and settles then.
    clock.advance(Duration::from_secs(31));
    let queue_handle = gaffer::testing::raw_queue(&engine).unwrap();
    queue_handle.reap_now().await.unwrap();
    drop(queue_handle);
    assert_eq!(within(first).await.unwrap(), 2);
    assert_eq!(runs.get(), 3);
    shuts_down(&engine).await;
}

#[tokio::test]
async fn a_sweeper_pass_that_panics_is_reported_and_the_next_pass_runs() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock)
        .queue_name("sweep-panics")
        .retention(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    panics::panic_next(PanicPoint::SweepPass, "sweep-panics");
    // The pass that panics still answers its callers (with nothing swept),
    // and the next one sweeps.
    within(engine.sweep_now()).await.unwrap();
    assert!(!panics::is_armed(PanicPoint::SweepPass, "sweep-panics"));
    within(engine.sweep_now()).await.unwrap();
    shuts_down(&engine).await;
}

#[tokio::test]
async fn a_periodic_check_that_panics_fails_once_and_the_next_fires_the_tick() {
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let engine = common::memory_builder(clock.clone())
        .queue_name("periodic-panics")
        .register::<Ticked>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    panics::panic_next(PanicPoint::PeriodicCheck, "periodic-panics");
    engine
        .add_periodic::<Ticked>(
            "every-minute",
            Schedule::every(Duration::from_secs(60)),
            |tick| Ticked(u32::try_from(tick.at_ms % 1000).unwrap_or(0)),
        )
        .await
        .unwrap();
    // The check that panicked is over (it wrote nothing: the periodic job
    // has no record yet); a later check writes its record, and the next
    // one due fires its first tick.
    common::eventually("the check panicked", LIMIT, async || {
        !panics::is_armed(PanicPoint::PeriodicCheck, "periodic-panics")
    })
    .await;
    common::eventually("a check succeeds", LIMIT, async || {
        engine.check_periodic().await.is_ok()
    })
    .await;
    clock.advance(Duration::from_secs(61));
    common::eventually("the tick ran", LIMIT, async || {
        let _ = engine.check_periodic().await;
        runs.get() >= 1
    })
    .await;
    shuts_down(&engine).await;
}

#[tokio::test]
async fn a_request_whose_task_panics_is_answered_with_an_internal_error() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock)
        .queue_name("request-panics")
        .register::<Asked>()
        .state(Arc::new(Runs::default()))
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Asked(1)).await.unwrap();
    let id = handle.id().to_string();
    assert_eq!(within(handle).await.unwrap(), 2);
    panics::panic_next(PanicPoint::Request, "request-panics");
    // The caller is answered (not left to retry a dropped reply), with an
    // error that says what the engine was doing.
    let ask = async || {
        let id = id.clone();
        gaffer::ractor::call!(
            engine.actor(),
            gaffer::protocol::EngineMessage::JobStatus,
            id
        )
    };
    match within(ask()).await.expect("the supervisor answers") {
        Err(Error::Internal { doing, .. }) => assert_eq!(doing, "reading a job's status"),
        other => panic!("expected an internal error, got {other:?}"),
    }
    // The next request is answered as usual.
    let state = within(ask()).await.expect("the supervisor answers");
    assert!(state.is_ok(), "{state:?}");
    shuts_down(&engine).await;
}
