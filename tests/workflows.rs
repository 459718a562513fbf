//! Workflows: graphs of jobs submitted in one call; a step starts when the
//! steps it needs succeeded and reads their outputs; a failure cancels what
//! needs it (down to a cleanup step); cancel, retry, status and join of
//! the whole; and a kill -9 in the middle loses nothing and runs no step
//! early.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::job::{FailureKind, JobState};
use gaffer::workflow::Workflow;
use gaffer::{Error, Job, JobContext};
use serde::{Deserialize, Serialize};

use common::{LIMIT, within};

/// What the steps saw.
#[derive(Default)]
struct Seen {
    /// Runs of every step.
    runs: AtomicUsize,
    /// Runs of the fan-in step.
    sums: AtomicUsize,
    /// Whether `Leaf` 0 fails (permanently).
    fail: AtomicBool,
}

/// A leaf: answers ten times its number.
#[derive(Serialize, Deserialize)]
struct Leaf {
    n: u64,
}

impl Job for Leaf {
    const NAME: &'static str = "leaf";
    type Output = u64;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, Error> {
        let seen = ctx.try_state::<Arc<Seen>>();
        if let Some(seen) = seen {
            seen.runs.fetch_add(1, Ordering::SeqCst);
            if self.n == 0 && seen.fail.load(Ordering::SeqCst) {
                return Err(Error::InvalidConfig("leaf 0 fails".into()));
            }
        }
        if let Some(log) = ctx.try_state::<SideLog>() {
            log.line(&format!("start {}", ctx.workflow_step().unwrap().1));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(self.n * 10)
    }
    fn classify(&self, _: &Error) -> FailureKind {
        FailureKind::Permanent
    }
}

/// The fan-in: the sum of its leaves' outputs, read by name.
#[derive(Serialize, Deserialize)]
struct Sum {
    leaves: u64,
}

impl Job for Sum {
    const NAME: &'static str = "sum";
    type Output = u64;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, Error> {
        if let Some(seen) = ctx.try_state::<Arc<Seen>>() {
            seen.runs.fetch_add(1, Ordering::SeqCst);
            seen.sums.fetch_add(1, Ordering::SeqCst);
        }
        if let Some(log) = ctx.try_state::<SideLog>() {
            log.line("start sum");
        }
        // Half read at once, half one by one.
        let names: Vec<String> = (0..self.leaves).map(|n| format!("leaf-{n}")).collect();
        let (first, rest) = names.split_at(names.len() / 2);
        let mut total: u64 = ctx.deps::<Leaf, _>(first).await?.iter().sum();
        for name in rest {
            total += ctx.dep::<Leaf>(name).await?;
        }
        Ok(total)
    }
    // A dependency without an output would be a bug: fail for good so the
    // test sees it.
    fn classify(&self, _: &Error) -> FailureKind {
        FailureKind::Permanent
    }
}

/// A cleanup step: says which of its dependencies succeeded.
#[derive(Serialize, Deserialize)]
struct Report;

impl Job for Report {
    const NAME: &'static str = "report";
    type Output = String;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<String, Error> {
        if let Some(log) = ctx.try_state::<SideLog>() {
            log.line("start report");
        }
        Ok(match ctx.dep::<Sum>("sum").await {
            Ok(total) => format!("sum {total}"),
            Err(Error::NoDependencyOutput { reason, .. }) => format!("no sum: {reason}"),
            Err(e) => return Err(e),
        })
    }
}

/// A line-per-event log file, appended and synced (it outlives a kill).
#[derive(Clone)]
struct SideLog(Arc<std::sync::Mutex<std::fs::File>>);

impl SideLog {
    fn open(path: &std::path::Path) -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        Self(Arc::new(std::sync::Mutex::new(file)))
    }

    fn line(&self, line: &str) {
        let mut f = self.0.lock().unwrap();
        writeln!(f, "{line}").unwrap();
        f.sync_data().unwrap();
    }
}

/// `leaves` leaves, their sum, and a report that runs regardless.
fn fan(leaves: u64) -> Workflow {
    let mut flow = Workflow::new("fan");
    for n in 0..leaves {
        flow = flow.step(&format!("leaf-{n}"), Leaf { n });
    }
    flow.step_after(
        "sum",
        Sum { leaves },
        (0..leaves).map(|n| format!("leaf-{n}")),
    )
    .cleanup_after("report", Report, ["sum"])
}

fn builder(seen: &Arc<Seen>) -> gaffer::EngineBuilder {
    common::memory_builder(common::mock_clock())
        .register::<Leaf>()
        .register::<Sum>()
        .register::<Report>()
        .state(seen.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_and_fan_in_passes_outputs_along_and_runs_the_fan_in_once() {
    let seen = Arc::new(Seen::default());
    let engine = builder(&seen).start().await.unwrap();
    let handle = engine.submit_workflow(fan(50)).await.unwrap();
    assert!(handle.newly_submitted());
    let outputs = within(handle.join()).await.unwrap().unwrap();
    let expected: u64 = (0..50).map(|n| n * 10).sum();
    assert_eq!(outputs.get::<Sum>("sum").await.unwrap(), expected);
    assert_eq!(
        outputs.get::<Report>("report").await.unwrap(),
        format!("sum {expected}")
    );
    assert_eq!(seen.sums.load(Ordering::SeqCst), 1);
    assert_eq!(seen.runs.load(Ordering::SeqCst), 51);
    let status = handle.status().await.unwrap();
    assert!(status.ended());
    assert_eq!(status.steps.len(), 52);
    // Dependencies first.
    assert_eq!(status.steps[50].name, "sum");
    assert_eq!(status.steps[51].name, "report");
    assert!(
        status
            .steps
            .iter()
            .all(|s| s.state == Some(JobState::Succeeded))
    );
    // A step's id is a job id: its handle answers too.
    let sum = engine.handle::<Sum>(&status.steps[50].run_id).unwrap();
    assert_eq!(sum.join().await.unwrap().unwrap(), expected);
    assert_eq!(engine.workflows(None, 10).await.unwrap().len(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_cancels_the_steps_that_need_it_and_a_cleanup_step_still_runs() {
    let seen = Arc::new(Seen::default());
    seen.fail.store(true, Ordering::SeqCst);
    let engine = builder(&seen).start().await.unwrap();
    let handle = engine.submit_workflow(fan(3)).await.unwrap();
    let failed = within(handle.join()).await.unwrap().unwrap_err();
    assert_eq!(failed.step, "leaf-0");
    assert!(!failed.error.is_cancelled());
    let status = handle.status().await.unwrap();
    let state = |name: &str| status.steps.iter().find(|s| s.name == name).unwrap().state;
    assert_eq!(state("leaf-0"), Some(JobState::Failed));
    assert_eq!(state("leaf-1"), Some(JobState::Succeeded));
    assert_eq!(state("sum"), Some(JobState::Cancelled));
    assert_eq!(state("report"), Some(JobState::Succeeded));
    // The sum never ran; the report says why it had no sum.
    assert_eq!(seen.sums.load(Ordering::SeqCst), 0);
    let report = engine
        .join::<Report>(
            &status
                .steps
                .iter()
                .find(|s| s.name == "report")
                .unwrap()
                .run_id,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(
        report.contains("no sum") && report.contains("step `leaf-0` it needs failed"),
        "{report}"
    );
    // Retry: the failed leaf runs again and the graph resumes from it.
    seen.fail.store(false, Ordering::SeqCst);
    // The failed leaf, the cancelled sum, and the report that ran after
    // them: a cleanup step runs again, so it reports the final outcome.
    assert_eq!(handle.retry().await.unwrap(), 3);
    let outputs = within(handle.join()).await.unwrap().unwrap();
    assert_eq!(outputs.get::<Sum>("sum").await.unwrap(), 30);
    assert_eq!(seen.sums.load(Ordering::SeqCst), 1);
    assert_eq!(
        outputs.get::<Report>("report").await.unwrap(),
        "sum 30",
        "the report after the retry sees the sum"
    );
    // A single step of a workflow is retried with its workflow.
    let leaf = &status.steps[0].run_id;
    assert!(matches!(
        engine.retry(leaf).await,
        Err(Error::NotRetryable { .. })
    ));
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_is_submitted_once_by_key_and_a_bad_one_is_refused_with_the_reason() {
    let seen = Arc::new(Seen::default());
    let engine = builder(&seen).start().await.unwrap();
    let first = engine.submit_workflow(fan(2).key("k")).await.unwrap();
    let again = engine.submit_workflow(fan(2).key("k")).await.unwrap();
    assert_eq!(first.id(), again.id());
    assert_eq!(first.id(), gaffer::workflow::workflow_id("k"));
    assert!(!again.newly_submitted());
    assert!(matches!(
        engine.submit_workflow(fan(3).key("k")).await,
        Err(Error::WorkflowMismatch(_))
    ));
    let bad = [
        (Workflow::new("empty"), "no steps"),
        (
            Workflow::new("twice")
                .step("a", Leaf { n: 1 })
                .step("a", Leaf { n: 2 }),
            "named twice",
        ),
        (
            Workflow::new("missing").step_after("a", Leaf { n: 1 }, ["nope"]),
            "does not have",
        ),
        (
            Workflow::new("cycle")
                .step_after("a", Leaf { n: 1 }, ["b"])
                .step_after("b", Leaf { n: 2 }, ["a"]),
            "cycle",
        ),
        (
            Workflow::new("name").step("a/b", Leaf { n: 1 }),
            "step name",
        ),
        (
            Workflow::new("id").id("not an id").step("a", Leaf { n: 1 }),
            "id",
        ),
    ];
    for (flow, why) in bad {
        match engine.submit_workflow(flow).await {
            Err(Error::InvalidWorkflow(reason)) => assert!(reason.contains(why), "{reason}"),
            other => panic!("{why}: {other:?}"),
        }
    }
    assert_eq!(
        within(first.join()).await.unwrap().unwrap().steps().count(),
        4
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_ended_workflows_records_are_removed_after_the_retention_and_a_running_ones_are_kept() {
    let clock = common::mock_clock();
    let seen = Arc::new(Seen::default());
    let engine = common::memory_builder(clock.clone())
        .register::<Leaf>()
        .register::<Sum>()
        .register::<Report>()
        .register::<Hold>()
        .state(seen.clone())
        .retention(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let done = engine.submit_workflow(fan(2)).await.unwrap();
    within(done.join()).await.unwrap().unwrap();
    let ended_at = done.status().await.unwrap().record.ended_at_ms;
    assert!(ended_at.is_some());
    let live = engine
        .submit_workflow(Workflow::new("live").step("wait", Hold))
        .await
        .unwrap();
    assert_eq!(engine.workflows(None, 10).await.unwrap().len(), 2);
    clock.advance(Duration::from_secs(61));
    engine.sweep_now().await.unwrap();
    assert!(matches!(
        done.status().await,
        Err(Error::WorkflowNotFound(_))
    ));
    let left = engine.workflows(None, 10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, live.id());
    assert_eq!(live.status().await.unwrap().record.ended_at_ms, None);
    engine.shutdown().await.unwrap();
}

/// A settlement that dies between its plan and its commit leaves no step
/// busy: the workflow is read again, the step settles on its next delivery
/// and releases the next one, once.
#[tokio::test]
async fn a_settlement_that_dies_after_its_plan_releases_nothing_and_its_retry_does_once() {
    use gaffer::testing::panics::{self, PanicPoint};
    let clock = common::mock_clock();
    let seen = Arc::new(Seen::default());
    let engine = common::memory_builder(clock.clone())
        .queue_name("wf-planned")
        .register::<Leaf>()
        .register::<Sum>()
        .register::<Report>()
        .state(seen.clone())
        .start()
        .await
        .unwrap();
    let queue = format!("wf-planned.{}", Leaf::NAME);
    panics::panic_next(PanicPoint::StepPlanned, &queue);
    let flow = Workflow::new("two")
        .step("leaf-0", Leaf { n: 1 })
        .step_after("sum", Sum { leaves: 1 }, ["leaf-0"]);
    let handle = engine.submit_workflow(flow).await.unwrap();
    common::eventually("the planned settlement died", LIMIT, async || {
        !panics::is_armed(PanicPoint::StepPlanned, &queue)
    })
    .await;
    let status = handle.status().await.unwrap();
    assert_eq!(status.steps[1].state, None, "nothing released");
    // The leaf's claim was never settled: it runs again once its lease
    // expires, and its settlement plans again from the store.
    clock.advance(Duration::from_secs(31));
    let raw = gaffer::testing::raw_queue(&engine).unwrap();
    raw.reap_now().await.unwrap();
    drop(raw);
    let outputs = within(handle.join()).await.unwrap().unwrap();
    assert_eq!(outputs.get::<Sum>("sum").await.unwrap(), 10);
    assert_eq!(seen.sums.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.runs.load(Ordering::SeqCst),
        3,
        "the leaf twice, the sum once"
    );
    engine.shutdown().await.unwrap();
}

/// Waits for a signal: a step that stays running until the test says.
#[derive(Serialize, Deserialize)]
struct Hold;

impl Job for Hold {
    const NAME: &'static str = "hold";
    type Output = u64;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, Error> {
        ctx.wait_signal::<u64>("go", Duration::from_secs(3600))
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_workflow_cancels_every_step_not_ended_and_a_retry_resumes_it() {
    let seen = Arc::new(Seen::default());
    let engine = builder(&seen).register::<Hold>().start().await.unwrap();
    let flow = Workflow::new("held")
        .step("wait", Hold)
        .step_after("leaf-0", Leaf { n: 4 }, ["wait"])
        .step_after("sum", Sum { leaves: 1 }, ["leaf-0"]);
    let handle = engine.submit_workflow(flow).await.unwrap();
    let wait_id = gaffer::workflow::step_id(handle.id(), "wait");
    common::eventually("the first step waits", LIMIT, async || {
        engine.status(&wait_id).await.ok() == Some(JobState::Waiting)
    })
    .await;
    let status = handle.status().await.unwrap();
    assert_eq!(status.steps[1].state, None, "held until `wait` succeeds");
    assert_eq!(handle.cancel().await.unwrap(), 3);
    let failed = within(handle.join()).await.unwrap().unwrap_err();
    assert!(failed.error.is_cancelled());
    assert_eq!(failed.step, "wait");
    let status = handle.status().await.unwrap();
    assert!(
        status
            .steps
            .iter()
            .all(|s| s.state == Some(JobState::Cancelled)),
        "{status:?}"
    );
    assert!(status.record.cancelled);
    // Retried, it runs from the top: the signal lets it through.
    assert_eq!(handle.retry().await.unwrap(), 3);
    common::eventually("the first step waits again", LIMIT, async || {
        engine.status(&wait_id).await.ok() == Some(JobState::Waiting)
    })
    .await;
    engine.signal(&wait_id, "go", &7u64).await.unwrap();
    let outputs = within(handle.join()).await.unwrap().unwrap();
    assert_eq!(outputs.get::<Sum>("sum").await.unwrap(), 40);
    engine.shutdown().await.unwrap();
}

/// The engine process of the kill test: submits the keyed workflow (again
/// after each restart: the same one) and runs it until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_workflow_killed_again_and_again_completes_with_no_step_early_or_lost as a child process"]
async fn workflows_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_WF_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    // One leaf at a time: the 120 leaves take 2.4 s of one life at least,
    // so the sum cannot start in the first life unless the test's kill
    // (due 40 ms after the submission) comes over 2 s late.
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .register_with::<Leaf>(gaffer::JobOptions {
            concurrency: Some(1),
            ..Default::default()
        })
        .register::<Sum>()
        .register::<Report>()
        .state(SideLog::open(&dir.join("side.txt")))
        .start()
        .await
        .unwrap();
    SideLog::open(&dir.join("side.txt")).line("up");
    engine
        .submit_workflow(fan(KILL_LEAVES).key("killed"))
        .await
        .unwrap();
    std::fs::write(dir.join("submitted"), b"").unwrap();
    std::future::pending::<()>().await;
}

const KILL_LEAVES: u64 = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_killed_again_and_again_completes_with_no_step_early_or_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let side = tmp.path().join("side.txt");
    for round in 0..5u64 {
        let submitted = tmp.path().join("submitted");
        let _ = std::fs::remove_file(&submitted);
        let mut child =
            common::spawn_test_child("workflows_engine_child", "GAFFER_WF_DIR", tmp.path());
        common::wait_for_child_file(tmp.path(), &submitted, "the submission").await;
        // Killed at a different point of the run each round.
        tokio::time::sleep(Duration::from_millis(40 + round * 70)).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(tmp.path().join("store")))
        .register::<Leaf>()
        .register::<Sum>()
        .register::<Report>()
        .state(SideLog::open(&side))
        .start()
        .await
        .unwrap();
    let handle = engine.workflow(&gaffer::workflow::workflow_id("killed"));
    let outputs = within(handle.join()).await.unwrap().unwrap();
    let expected: u64 = (0..KILL_LEAVES).map(|n| n * 10).sum();
    // The sum read every leaf's output: none ran before its leaves
    // succeeded (a missing output fails it for good).
    assert_eq!(outputs.get::<Sum>("sum").await.unwrap(), expected);
    assert_eq!(
        outputs.get::<Report>("report").await.unwrap(),
        format!("sum {expected}")
    );
    let log = std::fs::read_to_string(&side).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    // Every leaf ran; the sum's starts all come after every leaf's first
    // start, and the report's after the sum's.
    let first = |what: &str| lines.iter().position(|l| *l == what);
    let last_leaf_first_start = (0..KILL_LEAVES)
        .map(|n| first(&format!("start leaf-{n}")).unwrap_or_else(|| panic!("leaf {n} never ran")))
        .max()
        .unwrap();
    let sum_first = first("start sum").expect("the sum ran");
    assert!(sum_first > last_leaf_first_start, "{log}");
    // The kills fell in the middle: the leaves ran across several lives.
    let lives_before_sum = lines[..sum_first].iter().filter(|l| **l == "up").count();
    assert!(lives_before_sum >= 2, "{log}");
    assert!(first("start report").unwrap() > sum_first);
    let status = handle.status().await.unwrap();
    assert!(
        status
            .steps
            .iter()
            .all(|s| s.state == Some(JobState::Succeeded))
    );
    engine.shutdown().await.unwrap();
}
