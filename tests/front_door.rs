//! One front door: a service written once against `gaffer::FrontDoor`
//! (submit, join, outcome, status, a tag's jobs, cancel, retry, signal,
//! pause and resume a type, and submit, read, join, cancel and retry a
//! workflow) runs unchanged, from a tokio task of its own, on an `Engine`,
//! a `Client`, a `ShardedEngine` and a `ShardedClient`, over local
//! directories.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use gaffer::front_door::{Answer, FrontDoor, JobRef, WorkflowRef};
use gaffer::job::{CancelResult, JobState, Signalled};
use gaffer::remote::{Client, Placement, ShardSet, ShardedClient, ShardedEngine};
use gaffer::workflow::Workflow;
use gaffer::{Engine, EngineBuilder, Job, JobContext};
use serde::{Deserialize, Serialize};

/// Upper bound on the whole service, on any front door.
const LIMIT: Duration = Duration::from_secs(60);

/// How long a paused type's queued job is watched not to run.
const PAUSED_FOR: Duration = Duration::from_millis(300);

/// `2n`.
#[derive(Debug, Serialize, Deserialize)]
struct Double {
    n: u64,
}

impl Job for Double {
    const NAME: &'static str = "double";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        Ok(self.n * 2)
    }
}

/// Its type is the one the service pauses: `n + 100`.
#[derive(Debug, Serialize, Deserialize)]
struct Later {
    n: u64,
}

impl Job for Later {
    const NAME: &'static str = "later";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        Ok(self.n + 100)
    }
}

/// Waits for the signal `go` (a number) and answers it plus one.
#[derive(Debug, Serialize, Deserialize)]
struct Gate;

impl Job for Gate {
    const NAME: &'static str = "gate";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        let n: u64 = ctx.wait_signal("go", Duration::from_secs(3600)).await?;
        Ok(n + 1)
    }
}

/// The job ids whose first run failed.
static FAILED_ONCE: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Mutex::default);

/// Fails (permanently) on its first run, then answers `7`.
#[derive(Debug, Serialize, Deserialize)]
struct Flaky;

#[derive(Debug, thiserror::Error)]
#[error("the first run of {0} fails")]
struct FirstRun(String);

impl Job for Flaky {
    const NAME: &'static str = "flaky";
    type Output = u64;
    type Error = FirstRun;

    async fn run(&self, ctx: JobContext) -> Result<u64, FirstRun> {
        if FAILED_ONCE.lock().unwrap().insert(ctx.id().to_string()) {
            return Err(FirstRun(ctx.id().to_string()));
        }
        Ok(7)
    }

    fn classify(&self, _error: &FirstRun) -> gaffer::job::FailureKind {
        gaffer::job::FailureKind::Permanent
    }
}

/// The sum of steps `a` and `b` (two `Double`s) of its workflow.
#[derive(Debug, Serialize, Deserialize)]
struct Total;

impl Job for Total {
    const NAME: &'static str = "total";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        Ok(ctx.dep::<Double>("a").await? + ctx.dep::<Double>("b").await?)
    }
}

/// Poll `f`'s `status(id)` until it is `want` (not found counts as not
/// yet: a client reads a job once its engine took the request).
async fn until_state<F: FrontDoor>(f: &F, id: &str, want: JobState) {
    loop {
        match f.status(id).await {
            Ok(state) if state == want => return,
            Ok(state) => assert!(
                !state.is_terminal(),
                "`{id}` ended {state:?} while awaited {want:?}"
            ),
            Err(gaffer::Error::JobNotFound(_)) => {}
            Err(e) => panic!("status of `{id}`: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Poll `f`'s `workflow_status(workflow)` until its step `step` is in
/// state `want` (not found counts as not yet, as for a job).
async fn until_step<F: FrontDoor>(f: &F, workflow: &str, step: &str, want: JobState) {
    loop {
        match f.workflow_status(workflow).await {
            Ok(status) => {
                let state = status.steps.iter().find(|s| s.name == step).unwrap().state;
                if state == Some(want) {
                    return;
                }
                assert!(
                    !state.is_some_and(JobState::is_terminal),
                    "step `{step}` ended {state:?} while awaited {want:?}"
                );
            }
            Err(gaffer::Error::WorkflowNotFound(_)) => {}
            Err(e) => panic!("status of workflow `{workflow}`: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What the service checks of an operation's answer: applied here with
/// what it answered, or sent as `requests` requests (one per shard for an
/// operation on a type over a client's shard set), which it waits for.
async fn applied<T: std::fmt::Debug>(answer: Answer<T>, requests: usize) -> Option<T> {
    answer.wait().await.expect("the operation is applied");
    match answer {
        Answer::Applied(value) => Some(value),
        Answer::Sent(sent) => {
            assert_eq!(sent.len(), requests, "requests sent");
            None
        }
    }
}

/// Say which part of the service runs, on which front door (shown when a
/// test fails).
fn note<F>(part: &str) {
    eprintln!("{}: {part}", std::any::type_name::<F>());
}

/// The service: every operation of the front door, written once.
/// `shards` is the number of stores it reaches (a type's operations from
/// a shard set's client send one request to each).
async fn service<F: FrontDoor>(f: &F, shards: usize) {
    note::<F>("Submit");
    // Submit, join (the handle's and by id), outcome, status.
    let h = f.submit(Double { n: 21 }).await.unwrap();
    assert_eq!(h.join().await.unwrap(), Ok(42));
    assert_eq!(f.join::<Double>(h.id()).await.unwrap(), Ok(42));
    assert_eq!(f.outcome::<Double>(h.id()).await.unwrap(), Some(Ok(42)));
    assert_eq!(h.outcome().await.unwrap(), Some(Ok(42)));
    assert_eq!(f.status(h.id()).await.unwrap(), JobState::Succeeded);
    assert!(matches!(
        f.status("no-such-job").await,
        Err(gaffer::Error::JobNotFound(_))
    ));

    note::<F>("Tags");
    // A tag's jobs, over every shard, a page at a time.
    let mut tagged = HashSet::new();
    for n in 0..5 {
        let opts = gaffer::SubmitOptions::default().tags(["order:42"]);
        let h = f.submit_with(Double { n }, opts).await.unwrap();
        assert_eq!(h.join().await.unwrap(), Ok(n * 2));
        tagged.insert(h.id().to_string());
    }
    loop {
        let (mut listed, mut before) = (Vec::new(), None::<String>);
        loop {
            let page = f
                .jobs_by_tag("order:42", before.as_deref(), 2)
                .await
                .unwrap();
            listed.extend(page.jobs.into_iter().map(|j| (j.id, j.state)));
            match page.next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        let ids: HashSet<String> = listed.iter().map(|(id, _)| id.clone()).collect();
        if ids == tagged {
            assert_eq!(listed.len(), tagged.len(), "each job once: {listed:?}");
            assert!(listed.iter().all(|(_, s)| *s == JobState::Succeeded));
            break;
        }
        // A client reads the store as its reader last saw it.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    note::<F>("Signal");
    // Signal: a job waiting for `go` runs again with its payload.
    let gate = f.submit(Gate).await.unwrap();
    until_state(f, gate.id(), JobState::Waiting).await;
    assert_eq!(f.outcome::<Gate>(gate.id()).await.unwrap(), None);
    let answer = f.signal(gate.id(), "go", &41u64).await.unwrap();
    if let Some(signalled) = applied(answer, 1).await {
        assert!(
            matches!(signalled, Signalled::Delivered | Signalled::Held),
            "{signalled:?}"
        );
    }
    assert_eq!(gate.join().await.unwrap(), Ok(42));

    note::<F>("Cancel");
    // Cancel: a waiting job is cancelled, and reads so.
    let held = f.submit(Gate).await.unwrap();
    until_state(f, held.id(), JobState::Waiting).await;
    let answer = f.cancel(held.id()).await.unwrap();
    if let Some(cancelled) = applied(answer, 1).await {
        assert_eq!(cancelled, CancelResult::Cancelled);
    }
    let ended = held.join().await.unwrap().unwrap_err();
    assert!(ended.is_cancelled(), "{ended}");
    assert_eq!(f.status(held.id()).await.unwrap(), JobState::Cancelled);

    note::<F>("Retry");
    // Retry: a failed job runs again under its id.
    let flaky = f.submit(Flaky).await.unwrap();
    let failed = flaky.join().await.unwrap().unwrap_err();
    assert!(!failed.is_cancelled(), "{failed}");
    assert!(failed.message.contains("first run"), "{failed}");
    assert_eq!(f.status(flaky.id()).await.unwrap(), JobState::Failed);
    applied(f.retry(flaky.id()).await.unwrap(), 1).await;
    assert_eq!(f.join::<Flaky>(flaky.id()).await.unwrap(), Ok(7));
    assert_eq!(f.status(flaky.id()).await.unwrap(), JobState::Succeeded);

    note::<F>("Retry every failed");
    // Retry every failed job of a type: the one failed since, here.
    let again = f.submit(Flaky).await.unwrap();
    assert!(again.join().await.unwrap().is_err());
    let answer = f.retry_failed(Flaky::NAME, None).await.unwrap();
    if let Some(retried) = applied(answer, shards).await {
        assert_eq!(retried, 1);
    }
    assert_eq!(f.join::<Flaky>(again.id()).await.unwrap(), Ok(7));

    note::<F>("Pause and resume");
    // Pause and resume a type: its job waits queued until resumed.
    let answer = f.pause(Later::NAME).await.unwrap();
    if let Some(was_running) = applied(answer, shards).await {
        assert!(was_running);
    }
    let later = f.submit(Later { n: 5 }).await.unwrap();
    until_state(f, later.id(), JobState::Queued).await;
    tokio::time::sleep(PAUSED_FOR).await;
    assert_eq!(f.status(later.id()).await.unwrap(), JobState::Queued);
    assert_eq!(later.outcome().await.unwrap(), None);
    let answer = f.resume(Later::NAME).await.unwrap();
    if let Some(was_paused) = applied(answer, shards).await {
        assert!(was_paused);
    }
    assert_eq!(later.join().await.unwrap(), Ok(105));

    note::<F>("A workflow");
    // A workflow: submitted, joined (its handle and by id), read.
    let flow = f
        .submit_workflow(
            Workflow::new("sum")
                .step("a", Double { n: 1 })
                .step("b", Double { n: 2 })
                .step_after("total", Total, ["a", "b"]),
        )
        .await
        .unwrap();
    let status = flow.join().await.unwrap().expect("every step succeeded");
    assert_eq!(status.id, flow.id());
    let states: Vec<_> = status
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.state))
        .collect();
    assert_eq!(
        states,
        [
            ("a", Some(JobState::Succeeded)),
            ("b", Some(JobState::Succeeded)),
            ("total", Some(JobState::Succeeded)),
        ]
    );
    assert_eq!(flow.output::<Double>("a").await.unwrap(), Some(Ok(2)));
    assert_eq!(flow.output::<Total>("total").await.unwrap(), Some(Ok(6)));
    assert_eq!(f.workflow_status(flow.id()).await.unwrap(), status);
    assert_eq!(f.join_workflow(flow.id()).await.unwrap(), Ok(status));
    assert!(matches!(
        f.workflow_status("no-such-workflow").await,
        Err(gaffer::Error::WorkflowNotFound(_))
    ));

    note::<F>("Retry a workflow");
    // Retry a workflow: its failed step and the step it cancelled run again.
    let flow = f
        .submit_workflow(Workflow::new("flaky").step("first", Flaky).step_after(
            "then",
            Double { n: 4 },
            ["first"],
        ))
        .await
        .unwrap();
    let failed = flow.join().await.unwrap().unwrap_err();
    assert_eq!(failed.step, "first");
    assert!(!failed.error.is_cancelled(), "{failed}");
    assert_eq!(
        flow.output::<Double>("then")
            .await
            .unwrap()
            .map(|r| r.is_err()),
        Some(true)
    );
    let answer = f.retry_workflow(flow.id()).await.unwrap();
    if let Some(set_back) = applied(answer, 1).await {
        assert_eq!(set_back, 2);
    }
    let status = f.join_workflow(flow.id()).await.unwrap().expect("retried");
    assert!(status.ended());
    assert_eq!(flow.output::<Flaky>("first").await.unwrap(), Some(Ok(7)));
    assert_eq!(flow.output::<Double>("then").await.unwrap(), Some(Ok(8)));

    note::<F>("Cancel a workflow");
    // Cancel a workflow: its waiting step and the step after it.
    let flow = f
        .submit_workflow(Workflow::new("held").step("gate", Gate).step_after(
            "after",
            Double { n: 1 },
            ["gate"],
        ))
        .await
        .unwrap();
    // A step's state is read through its workflow: over a shard set its
    // job is in the shard of the workflow's id, not of its own.
    until_step(f, flow.id(), "gate", JobState::Waiting).await;
    let answer = f.cancel_workflow(flow.id()).await.unwrap();
    if let Some(cancelled) = applied(answer, 1).await {
        assert_eq!(cancelled, 2);
    }
    let failed = f.join_workflow(flow.id()).await.unwrap().unwrap_err();
    assert_eq!(failed.step, "gate");
    assert!(failed.error.is_cancelled(), "{failed}");
    let states: Vec<_> = (f.workflow_status(flow.id()).await.unwrap().steps)
        .into_iter()
        .map(|s| (s.name, s.state))
        .collect();
    assert_eq!(
        states,
        [
            ("gate".to_string(), Some(JobState::Cancelled)),
            ("after".to_string(), Some(JobState::Cancelled)),
        ]
    );
}

/// Run [`service`] on `door` from a tokio task of its own (its futures
/// are `Send`), within [`LIMIT`].
async fn serve<F: FrontDoor + 'static>(door: Arc<F>, shards: usize) {
    let task = tokio::spawn(async move { service(&*door, shards).await });
    tokio::time::timeout(LIMIT, task)
        .await
        .expect("the service finished in time")
        .expect("the service passed");
}

fn builder() -> EngineBuilder {
    Engine::builder()
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .intake_poll(Duration::from_millis(20))
        .register::<Double>()
        .register::<Later>()
        .register::<Gate>()
        .register::<Flaky>()
        .register::<Total>()
}

async fn engine(dir: &Path) -> Engine {
    builder()
        .store(gaffer::Store::local_dir(dir))
        .start()
        .await
        .expect("the engine starts")
}

/// Two shards, `shard-00` and `shard-01` under `root`.
fn shard_set(root: &Path) -> ShardSet {
    for i in 0..2 {
        std::fs::create_dir_all(root.join(format!("shard-{i:02}"))).unwrap();
    }
    ShardSet::from_template(&format!("file://{}/shard-{{shard}}", root.display()), 2).unwrap()
}

async fn sharded_engine(root: &Path) -> ShardedEngine {
    ShardedEngine::start(shard_set(root), &Placement::Listed(vec![0, 1]), |_, url| {
        builder().store(gaffer::Store::url(url))
    })
    .await
    .expect("the shards start")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_an_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let door = Arc::new(engine(tmp.path()).await);
    serve(door.clone(), 1).await;
    door.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_a_client() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let client = Client::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .expect("the client opens");
    serve(Arc::new(client.clone()), 1).await;
    client.close().await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_a_sharded_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let door = Arc::new(sharded_engine(tmp.path()).await);
    serve(door.clone(), 2).await;
    for (shard, shut) in door.shutdown().await {
        shut.unwrap_or_else(|e| panic!("shard {shard}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_a_sharded_client() {
    let tmp = tempfile::tempdir().unwrap();
    let engines = sharded_engine(tmp.path()).await;
    let clients = ShardedClient::open(shard_set(tmp.path()), |_, url| {
        Client::builder()
            .store(gaffer::Store::url(url))
            .poll_interval(Duration::from_millis(20))
    })
    .await
    .expect("the clients open");
    let door = Arc::new(clients);
    serve(door.clone(), 2).await;
    Arc::into_inner(door)
        .expect("the service let go")
        .close()
        .await;
    for (shard, shut) in engines.shutdown().await {
        shut.unwrap_or_else(|e| panic!("shard {shard}: {e}"));
    }
}
