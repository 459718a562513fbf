//! Durable sleep and snooze: a job pauses its run without a worker and
//! without spending an attempt (`ctx.sleep`: on past the sleep when its
//! time comes; `ctx.snooze`: again from the top after a delay), on a
//! local-disk store, on paused time, across a kill.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::job::JobState;
use gaffer::{EngineEvent, Error, Job, JobContext, JobOptions, SubmitOptions};
use serde::{Deserialize, Serialize};

use common::{LIMIT, T0_MS, within};

const HOUR: Duration = Duration::from_secs(3600);

/// How often the parts of the jobs ran.
#[derive(Default)]
struct Counts {
    /// Runs, each from the top.
    runs: AtomicUsize,
    /// Computations of the memoized draft (before the first sleep).
    drafted: AtomicUsize,
    /// Computations of the memoized send (between the two sleeps).
    sent: AtomicUsize,
}

/// Drafts (memoized), sleeps an hour, sends (memoized), sleeps half an
/// hour, answers both.
#[derive(Serialize, Deserialize)]
struct Remind {
    to: String,
}

impl Job for Remind {
    const NAME: &'static str = "remind";
    type Output = Vec<String>;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<Vec<String>, Error> {
        let counts = ctx.state::<Arc<Counts>>();
        counts.runs.fetch_add(1, Ordering::SeqCst);
        let draft: String = ctx
            .memo()
            .memoized("draft", || async {
                counts.drafted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(format!("dear {}", self.to))
            })
            .await?;
        ctx.sleep(HOUR).await;
        let sent: String = ctx
            .memo()
            .memoized("send", || async {
                counts.sent.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(format!("sent to {}", self.to))
            })
            .await?;
        ctx.sleep(HOUR / 2).await;
        Ok(vec![draft, sent])
    }
}

/// Snoozes an hour until its run snoozed `times` times, then answers how
/// often it did.
#[derive(Serialize, Deserialize)]
struct Busy {
    times: u32,
}

impl Job for Busy {
    const NAME: &'static str = "busy";
    type Output = u32;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, Error> {
        ctx.state::<Arc<Counts>>()
            .runs
            .fetch_add(1, Ordering::SeqCst);
        if ctx.snoozes() < self.times {
            ctx.snooze(HOUR).await;
        }
        Ok(ctx.snoozes())
    }
}

fn builder(
    dir: &std::path::Path,
    clock: Arc<gaffer::taquba::MockClock>,
    counts: &Arc<Counts>,
) -> gaffer::EngineBuilder {
    common::disk_builder(dir, clock)
        .register::<Remind>()
        .register_with::<Busy>(JobOptions {
            max_snoozes: Some(3),
            ..Default::default()
        })
        .state(counts.clone())
}

/// One attempt at most: a pause that spent one would fail the job.
fn one_attempt() -> SubmitOptions {
    SubmitOptions {
        max_attempts: Some(1),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_sleeps_without_a_worker_and_runs_on_past_each_sleep_when_its_time_comes() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let counts = Arc::new(Counts::default());
    let engine = builder(tmp.path(), clock.clone(), &counts)
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let handle = engine
        .submit_with(Remind { to: "ada".into() }, one_attempt())
        .await
        .unwrap();
    let id = handle.id().to_string();
    let slept = |until: u64| move |e: &EngineEvent| matches!(e, EngineEvent::JobSleeping { until_ms, .. } if *until_ms == until);
    common::wait_event(&mut events, LIMIT, slept(T0_MS + 3_600_000)).await;
    // Asleep: scheduled, holding no worker and no claim.
    assert_eq!(engine.status(&id).await.unwrap(), JobState::Scheduled);
    assert_eq!(common::running(&engine, Remind::NAME).await, 0);
    assert_eq!(handle.outcome().await.unwrap(), None);

    // Not before its time.
    common::time_passes(&engine, &clock, HOUR / 2).await;
    assert_eq!(engine.status(&id).await.unwrap(), JobState::Scheduled);
    assert_eq!(counts.runs.load(Ordering::SeqCst), 1);

    // Past the first sleep, into the second (measured from when it began).
    common::time_passes(&engine, &clock, HOUR / 2 + Duration::from_secs(1)).await;
    common::wait_event(&mut events, LIMIT, slept(T0_MS + 5_401_000)).await;
    assert_eq!(counts.runs.load(Ordering::SeqCst), 2);

    common::time_passes(&engine, &clock, HOUR / 2).await;
    assert_eq!(
        within(handle.join()).await.unwrap().unwrap(),
        vec!["dear ada".to_string(), "sent to ada".to_string()]
    );
    // Three runs from the top; each memoized step once; the first sleep
    // answered at once on the third run.
    assert_eq!(counts.runs.load(Ordering::SeqCst), 3);
    assert_eq!(counts.drafted.load(Ordering::SeqCst), 1);
    assert_eq!(counts.sent.load(Ordering::SeqCst), 1);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_cancel_while_a_job_sleeps_cancels_it() {
    let tmp = tempfile::tempdir().unwrap();
    let counts = Arc::new(Counts::default());
    let engine = builder(tmp.path(), common::mock_clock(), &counts)
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let handle = engine.submit(Remind { to: "bo".into() }).await.unwrap();
    common::wait_event(&mut events, LIMIT, |e| {
        matches!(e, EngineEvent::JobSleeping { .. })
    })
    .await;
    handle.cancel().await.unwrap();
    let err = within(handle.join()).await.unwrap().unwrap_err();
    assert!(err.is_cancelled(), "{err:?}");
    assert_eq!(
        engine.status(handle.id()).await.unwrap(),
        JobState::Cancelled
    );
    assert_eq!(counts.runs.load(Ordering::SeqCst), 1);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_snooze_runs_the_job_again_later_without_spending_an_attempt() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let counts = Arc::new(Counts::default());
    let engine = builder(tmp.path(), clock.clone(), &counts)
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let handle = engine
        .submit_with(Busy { times: 2 }, one_attempt())
        .await
        .unwrap();
    for n in 1..=2u32 {
        common::wait_event(
            &mut events,
            LIMIT,
            |e| matches!(e, EngineEvent::JobSnoozed { snoozes, .. } if *snoozes == n),
        )
        .await;
        assert_eq!(
            engine.status(handle.id()).await.unwrap(),
            JobState::Scheduled
        );
        assert_eq!(handle.outcome().await.unwrap(), None);
        common::time_passes(&engine, &clock, HOUR).await;
    }
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 2);
    assert_eq!(counts.runs.load(Ordering::SeqCst), 3);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_job_that_snoozes_past_its_limit_fails_saying_so() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let counts = Arc::new(Counts::default());
    let engine = builder(tmp.path(), clock.clone(), &counts)
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    // Its type allows 3 snoozes; it wants 10.
    let handle = engine.submit(Busy { times: 10 }).await.unwrap();
    for n in 1..=3u32 {
        common::wait_event(
            &mut events,
            LIMIT,
            |e| matches!(e, EngineEvent::JobSnoozed { snoozes, .. } if *snoozes == n),
        )
        .await;
        common::time_passes(&engine, &clock, HOUR).await;
    }
    let err = within(handle.join()).await.unwrap().unwrap_err();
    assert_eq!(err.kind, gaffer::job::FailureKind::Permanent);
    assert!(
        err.message
            .starts_with("snoozed 3 times, the most a job of `busy` may"),
        "{}",
        err.message
    );
    assert_eq!(counts.runs.load(Ordering::SeqCst), 4);
    common::shut_down_cleanly(&engine).await;
}

/// The engine process of the kill test: submits a job that sleeps an hour
/// (real time) and one that snoozes an hour, writes their ids to `paused`
/// once both are paused, then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by sleeping_and_snoozed_jobs_survive_a_kill as a child process"]
async fn sleep_snooze_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_PAUSE_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .flush_interval(Duration::from_millis(1))
        .register::<Remind>()
        .register::<Busy>()
        .state(Arc::new(Counts::default()))
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let remind = engine
        .submit_with(Remind { to: "cy".into() }, one_attempt())
        .await
        .unwrap();
    let busy = engine
        .submit_with(Busy { times: 2 }, one_attempt())
        .await
        .unwrap();
    let (mut slept, mut snoozed) = (false, false);
    while !(slept && snoozed) {
        match events.recv().await.unwrap() {
            EngineEvent::JobSleeping { run_id, .. } if run_id == remind.id() => slept = true,
            EngineEvent::JobSnoozed { run_id, .. } if run_id == busy.id() => snoozed = true,
            _ => {}
        }
    }
    // Whole: the parent reads it, and kills this process, once it exists.
    common::write_whole(
        &dir.join("paused"),
        format!("{} {}", remind.id(), busy.id()),
    );
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_and_snoozed_jobs_survive_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child =
        common::spawn_test_child("sleep_snooze_engine_child", "GAFFER_PAUSE_DIR", tmp.path());
    let paused = tmp.path().join("paused");
    common::wait_for_child_file(tmp.path(), &paused, "the jobs' pauses").await;
    child.kill().unwrap();
    child.wait().unwrap();
    let ids = std::fs::read_to_string(&paused).unwrap();
    let (remind, busy) = ids.split_once(' ').unwrap();

    // The next engine's clock starts two hours on: the first sleep and the
    // first snooze are over when it opens.
    let clock = common::clock_ahead(2 * HOUR);
    let counts = Arc::new(Counts::default());
    let engine = builder(&tmp.path().join("store"), clock.clone(), &counts)
        .start()
        .await
        .unwrap();
    let remind = engine.handle::<Remind>(remind).unwrap();
    let busy = engine.handle::<Busy>(busy).unwrap();
    // Each ran again past its pause (one run each on this engine) and
    // paused once more: scheduled again.
    common::eventually("both jobs ran and paused again", LIMIT, async || {
        counts.runs.load(Ordering::SeqCst) == 2
            && engine.status(remind.id()).await.ok() == Some(JobState::Scheduled)
            && engine.status(busy.id()).await.ok() == Some(JobState::Scheduled)
    })
    .await;
    common::time_passes(&engine, &clock, HOUR).await;
    assert_eq!(
        within(remind.join()).await.unwrap().unwrap(),
        vec!["dear cy".to_string(), "sent to cy".to_string()]
    );
    assert_eq!(within(busy.join()).await.unwrap().unwrap(), 2);
    // The draft was memoized before the kill; this engine sent once.
    assert_eq!(counts.drafted.load(Ordering::SeqCst), 0);
    assert_eq!(counts.sent.load(Ordering::SeqCst), 1);
    engine.shutdown().await.unwrap();
}
