//! Jobs longer than their lease: while the process that runs an attempt
//! lives, the engine keeps the attempt's lease, so a job that runs for
//! three leases starts once and succeeds (a plain job, a workflow step, a
//! batch item, the memoized prelude of a job that then waits for a
//! signal). A runaway attempt is bounded by its timeout (its type's or its
//! own), which cancels it and counts a failed attempt. A lease expires
//! only when its process died: a child killed while a long job runs has
//! the job run again once, on the next engine.
//!
//! The in-process tests run on paused tokio time with a `MockClock` for
//! the queue: three leases pass on the queue's clock, the reaper is run
//! after each tenth of a lease, and the job waits at a gate the test
//! opens, so nothing depends on how fast the machine is.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::bulk::ItemError;
use gaffer::taquba::MockClock;
use gaffer::workflow::Workflow;
use gaffer::{BulkCtx, Engine, EngineEvent, Error, Job, JobContext, Pipeline, SubmitOptions};
use serde::{Deserialize, Serialize};

use common::{Gate, LIMIT, within};

/// taquba's default lease, which the tests' queues keep.
const LEASE: Duration = Duration::from_secs(30);

/// What the test jobs saw.
struct Seen {
    /// Held until the test opens it.
    gate: Gate,
    /// Starts of an attempt.
    starts: AtomicUsize,
    /// Computations of a memoized step.
    computed: AtomicUsize,
    /// An attempt's cancel token fired (seen by a task the job spawned).
    cancelled: AtomicBool,
}

impl Seen {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            gate: Gate::closed(),
            starts: AtomicUsize::new(0),
            computed: AtomicUsize::new(0),
            cancelled: AtomicBool::new(false),
        })
    }

    fn starts(&self) -> usize {
        self.starts.load(Ordering::SeqCst)
    }
}

/// Counts its start, waits at the gate, answers its attempt number.
#[derive(Serialize, Deserialize)]
struct Long;

impl Job for Long {
    const NAME: &'static str = "long";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let seen = ctx.state::<Arc<Seen>>();
        seen.starts.fetch_add(1, Ordering::SeqCst);
        seen.gate.wait().await;
        Ok(ctx.attempt())
    }
}

/// A batch item that waits at the gate like [`Long`].
struct LongItems(Arc<Seen>);

impl Pipeline for LongItems {
    const NAME: &'static str = "long-items";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        self.0.starts.fetch_add(1, Ordering::SeqCst);
        self.0.gate.wait().await;
        Ok(ctx.input + 1)
    }
}

/// A long memoized step (waits at the gate), then a wait for `go`.
#[derive(Serialize, Deserialize)]
struct PreludeThenWait;

impl Job for PreludeThenWait {
    const NAME: &'static str = "prelude-then-wait";
    type Output = String;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<String, Error> {
        let seen = ctx.state::<Arc<Seen>>();
        seen.starts.fetch_add(1, Ordering::SeqCst);
        let prepared: String = ctx
            .memo()
            .memoized("prepare", || async {
                seen.computed.fetch_add(1, Ordering::SeqCst);
                seen.gate.wait().await;
                Ok::<_, Error>("prepared".to_string())
            })
            .await?;
        let go: String = ctx.wait_signal("go", Duration::from_secs(3600)).await?;
        Ok(format!("{prepared}, then {go}"))
    }
}

/// Its first attempt hangs (a task it spawns watches its cancel token);
/// every later one answers its attempt number at once.
#[derive(Serialize, Deserialize)]
struct HangsOnce;

impl Job for HangsOnce {
    const NAME: &'static str = "hangs-once";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let seen = ctx.state::<Arc<Seen>>().clone();
        seen.starts.fetch_add(1, Ordering::SeqCst);
        if ctx.attempt() > 1 {
            return Ok(ctx.attempt());
        }
        let token = ctx.cancel_token().clone();
        let watcher = seen.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            watcher.cancelled.store(true, Ordering::SeqCst);
        });
        std::future::pending().await
    }
}

fn builder(clock: Arc<MockClock>, seen: &Arc<Seen>) -> gaffer::EngineBuilder {
    common::memory_builder(clock)
        .register::<Long>()
        .register::<PreludeThenWait>()
        .pipeline(LongItems(seen.clone()))
        .state(seen.clone())
}

/// Three leases pass on the queue's clock while the job runs, a tenth of
/// a lease at a time, the reaper looking for expired leases after each:
/// a lease nobody renewed would be taken at the third step.
async fn three_leases_pass(engine: &Engine, clock: &MockClock) {
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    for _ in 0..30 {
        clock.advance(LEASE / 10);
        tokio::time::sleep(LEASE / 10).await;
        queue.reap_now().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_running_three_leases_starts_once_and_succeeds() {
    let (clock, seen) = (common::mock_clock(), Seen::new());
    let engine = builder(clock.clone(), &seen).start().await.unwrap();
    let handle = engine.submit(Long).await.unwrap();
    seen.gate.wait_entered(1, LIMIT).await;

    three_leases_pass(&engine, &clock).await;
    assert_eq!(seen.starts(), 1, "not started again while it ran");
    seen.gate.open();
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 1);
    assert_eq!(seen.starts(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_workflow_step_running_three_leases_starts_once_and_its_workflow_succeeds() {
    let (clock, seen) = (common::mock_clock(), Seen::new());
    let engine = builder(clock.clone(), &seen).start().await.unwrap();
    let flow = engine
        .submit_workflow(Workflow::new("long").step("slow", Long))
        .await
        .unwrap();
    seen.gate.wait_entered(1, LIMIT).await;

    three_leases_pass(&engine, &clock).await;
    seen.gate.open();
    let outputs = within(flow.join()).await.unwrap().unwrap();
    assert_eq!(outputs.get::<Long>("slow").await.unwrap(), 1);
    assert_eq!(seen.starts(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_batch_item_running_three_leases_starts_once_and_succeeds() {
    let (clock, seen) = (common::mock_clock(), Seen::new());
    let engine = builder(clock.clone(), &seen).start().await.unwrap();
    let batch = engine.batch::<LongItems>("long-batch").unwrap();
    let run = tokio::spawn(async move { batch.run([41u64]).await });
    seen.gate.wait_entered(1, LIMIT).await;

    three_leases_pass(&engine, &clock).await;
    seen.gate.open();
    let report = within(run).await.unwrap().unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 0), "{report:?}");
    assert_eq!(seen.starts(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_memoized_prelude_running_three_leases_runs_once_before_the_job_waits() {
    let (clock, seen) = (common::mock_clock(), Seen::new());
    let engine = builder(clock.clone(), &seen).start().await.unwrap();
    let handle = engine.submit(PreludeThenWait).await.unwrap();
    seen.gate.wait_entered(1, LIMIT).await;

    three_leases_pass(&engine, &clock).await;
    seen.gate.open();
    common::eventually("the job waits for `go`", LIMIT, async || {
        engine.status(handle.id()).await.ok() == Some(gaffer::job::JobState::Waiting)
    })
    .await;
    engine
        .signal(handle.id(), "go", &"go".to_string())
        .await
        .unwrap();
    assert_eq!(
        within(handle.join()).await.unwrap().unwrap(),
        "prepared, then go"
    );
    // One start before the wait, one after the signal (from the memo).
    assert_eq!(seen.starts(), 2);
    assert_eq!(seen.computed.load(Ordering::SeqCst), 1);
    engine.shutdown().await.unwrap();
}

/// Wait for the first `JobFailed` event, and answer its message.
async fn first_failure(events: &mut tokio::sync::broadcast::Receiver<EngineEvent>) -> String {
    let event = common::wait_event(events, LIMIT, |e| {
        matches!(e, EngineEvent::JobFailed { .. })
    })
    .await;
    let EngineEvent::JobFailed {
        message, retrying, ..
    } = event
    else {
        unreachable!("matched above")
    };
    assert!(retrying, "a timeout is a transient failure: {message}");
    message
}

#[tokio::test(start_paused = true)]
async fn an_attempt_past_its_types_timeout_is_cancelled_and_retried() {
    let (clock, seen) = (common::mock_clock(), Seen::new());
    let engine = common::memory_builder(clock)
        .register_with::<HangsOnce>(gaffer::JobOptions {
            timeout: Some(Duration::from_secs(5)),
            ..Default::default()
        })
        .state(seen.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let handle = engine.submit(HangsOnce).await.unwrap();

    let message = first_failure(&mut events).await;
    assert!(message.contains("timed out"), "{message}");
    assert!(message.contains("5s"), "names the timeout: {message}");
    // The second attempt answers.
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 2);
    assert_eq!(seen.starts(), 2);
    common::eventually("the first attempt's token fired", LIMIT, async || {
        seen.cancelled.load(Ordering::SeqCst)
    })
    .await;
    // The job was not cancelled: its timeout is the attempt's, not the job's.
    assert_eq!(
        engine.status(handle.id()).await.unwrap(),
        gaffer::job::JobState::Succeeded
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_jobs_own_timeout_beats_its_types() {
    let (clock, seen) = (common::mock_clock(), Seen::new());
    let engine = common::memory_builder(clock)
        .register_with::<HangsOnce>(gaffer::JobOptions {
            timeout: Some(Duration::from_secs(3600)),
            ..Default::default()
        })
        .state(seen.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let t0 = tokio::time::Instant::now();
    let opts = SubmitOptions {
        timeout: Some(Duration::from_secs(2)),
        ..Default::default()
    };
    let handle = engine.submit_with(HangsOnce, opts).await.unwrap();

    let message = first_failure(&mut events).await;
    assert!(message.contains("2s"), "the job's own timeout: {message}");
    assert!(
        t0.elapsed() < Duration::from_secs(3600),
        "cancelled at the job's timeout, not the type's"
    );
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 2);
    engine.shutdown().await.unwrap();
}

// ---- A killed process: the one case a lease is for. ----

/// The lease of the child's queue: short, so that a lease nobody renewed
/// would expire (and its reaper act) well within the time the parent
/// watches, and long enough that a live child's renewals (every third of
/// it) keep it through a stall of over a second on a loaded machine (at
/// 600 ms, a stall of 400 ms could let the child's own reaper take the
/// job).
const CHILD_LEASE: Duration = Duration::from_secs(2);

/// Appends a line to `{dir}/starts.log` per start, then runs until the
/// process dies, unless told to finish (`Finish` state).
#[derive(Serialize, Deserialize)]
struct Endless {
    dir: String,
}

struct Finish;

impl Job for Endless {
    const NAME: &'static str = "endless";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let path = std::path::Path::new(&self.dir).join("starts.log");
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(log, "start attempt {}", ctx.attempt()).unwrap();
        if ctx.try_state::<Finish>().is_none() {
            std::future::pending::<()>().await;
        }
        Ok(ctx.attempt())
    }
}

fn starts(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("starts.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn short_lease_options() -> gaffer::taquba::OpenOptions {
    gaffer::taquba::OpenOptions::default()
        .reaper_interval(Duration::from_millis(50))
        .default_queue_config(gaffer::taquba::QueueConfig::default().lease_duration(CHILD_LEASE))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_long_job_whose_process_is_killed_runs_again_once_on_the_next_engine as a child process"]
async fn long_jobs_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_LONG_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .open_options(short_lease_options())
        .flush_interval(Duration::from_millis(1))
        .register::<Endless>()
        .start()
        .await
        .unwrap();
    let id = engine
        .submit(Endless {
            dir: dir.to_string_lossy().into_owned(),
        })
        .await
        .unwrap()
        .id()
        .to_string();
    // Whole: the parent reads it once it exists.
    common::write_whole(&dir.join("submitted"), &id);
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_job_whose_process_is_killed_runs_again_once_on_the_next_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child =
        common::spawn_test_child("long_jobs_engine_child", "GAFFER_LONG_DIR", tmp.path());
    let submitted = tmp.path().join("submitted");
    common::wait_for_child_file(tmp.path(), &submitted, "the submit").await;
    common::wait_for_child_file(tmp.path(), &tmp.path().join("starts.log"), "the start").await;
    // Three leases, the child's reaper looking every 50 ms: a lease its
    // engine did not keep would have been taken and the job started again.
    tokio::time::sleep(CHILD_LEASE * 3).await;
    assert_eq!(
        starts(tmp.path()),
        1,
        "started once while its process lived: {}",
        common::child_logs(tmp.path(), 2000)
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let id = std::fs::read_to_string(&submitted).unwrap();

    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(tmp.path().join("store")))
        .open_options(short_lease_options())
        .flush_interval(Duration::from_millis(1))
        .register::<Endless>()
        .state(Finish)
        .start()
        .await
        .unwrap();
    let handle = engine.handle::<Endless>(&id).unwrap();
    // Its interrupted attempt was not spent: it runs again as attempt 1.
    assert_eq!(within(handle.join()).await.unwrap().unwrap(), 1);
    assert_eq!(
        starts(tmp.path()),
        2,
        "one start before the kill, one after"
    );
    engine.shutdown().await.unwrap();
}
