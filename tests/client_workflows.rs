//! Workflows from another process: a `Client` submits a workflow through
//! the store's inbox, the engine commits it in one transaction, and the
//! client reads its steps, waits for its end and reads each step's output;
//! the same key is the same workflow; what the engine cannot take is
//! refused with its reason, what cannot be an id before anything is sent.
//! Over a shard set, a workflow lives whole in the shard of its id, from a
//! `ShardedEngine` or a `ShardedClient`.

mod common;

use std::path::Path;
use std::time::Duration;

use gaffer::job::{FailureKind, JobState};
use gaffer::remote::{Client, Placement, ShardSet, ShardedClient, ShardedEngine};
use gaffer::workflow::{Workflow, workflow_id};
use gaffer::{Engine, Error, Job, JobContext};
use serde::{Deserialize, Serialize};

use common::within;

#[derive(Serialize, Deserialize)]
struct Square {
    x: u64,
}

impl Job for Square {
    const NAME: &'static str = "square";
    type Output = u64;
    type Error = Error;
    async fn run(&self, _: JobContext) -> Result<u64, Error> {
        Ok(self.x * self.x)
    }
}

/// The sum of its dependencies' outputs; fails (permanently) on `fail`.
#[derive(Serialize, Deserialize)]
struct Total {
    deps: Vec<String>,
    fail: bool,
}

impl Job for Total {
    const NAME: &'static str = "total";
    type Output = u64;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, Error> {
        if self.fail {
            return Err(Error::InvalidConfig("told to fail".into()));
        }
        let mut sum = 0;
        for d in &self.deps {
            sum += ctx.dep::<Square>(d).await?;
        }
        Ok(sum)
    }
    fn classify(&self, _: &Error) -> FailureKind {
        FailureKind::Permanent
    }
}

/// Registered by no engine here.
#[derive(Serialize, Deserialize)]
struct Nobody;

impl Job for Nobody {
    const NAME: &'static str = "nobody";
    type Output = ();
    type Error = Error;
    async fn run(&self, _: JobContext) -> Result<(), Error> {
        Ok(())
    }
}

async fn engine(dir: &Path) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Square>()
        .register::<Total>()
        .start()
        .await
        .expect("engine starts")
}

async fn client(dir: &Path) -> Client {
    Client::builder()
        .store(gaffer::Store::local_dir(dir))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .expect("client opens")
}

fn sum(key: &str, fail: bool) -> Workflow {
    Workflow::new("sum of squares")
        .key(key)
        .step("a", Square { x: 2 })
        .step("b", Square { x: 3 })
        .step_after(
            "total",
            Total {
                deps: vec!["a".into(), "b".into()],
                fail,
            },
            ["a", "b"],
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_submits_a_workflow_and_reads_its_end_and_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path()).await;
    let client = client(tmp.path()).await;

    let flow = client.submit_workflow(sum("k1", false)).await.unwrap();
    assert_eq!(flow.id(), workflow_id("k1"), "the id is known at once");
    let status = within(flow.join())
        .await
        .unwrap()
        .expect("every step succeeded");
    assert!(status.ended());
    assert_eq!(
        status
            .steps
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>()[2],
        "total",
        "dependencies first"
    );
    assert!(
        status
            .steps
            .iter()
            .all(|s| s.state == Some(JobState::Succeeded))
    );
    assert_eq!(flow.output::<Total>("total").await.unwrap(), Some(Ok(13)));
    assert_eq!(flow.output::<Square>("a").await.unwrap(), Some(Ok(4)));
    let result = flow.request().wait().await.unwrap();
    assert!(result.contains("submitted"), "{result}");
    // The engine sees the workflow the client made, under its id.
    let there = engine.workflow(flow.id()).status().await.unwrap();
    assert_eq!(there.steps.len(), 3);
    assert_eq!(client.workflow_status(flow.id()).await.unwrap(), there);

    // The same key again: the same workflow, not run again.
    let again = client.submit_workflow(sum("k1", false)).await.unwrap();
    assert_eq!(again.id(), flow.id());
    let result = within(again.request().wait()).await.unwrap();
    assert!(result.contains("submitted before"), "{result}");
    assert!(within(again.join()).await.unwrap().is_ok());

    // A step that fails: join names it; a retry through the store sets it
    // back (it fails again: its input says so).
    let failing = client.submit_workflow(sum("k2", true)).await.unwrap();
    let failed = within(failing.join()).await.unwrap().unwrap_err();
    assert_eq!(failed.step, "total");
    assert!(failed.error.message.contains("told to fail"), "{failed:?}");
    let retried = client.retry_workflow(failing.id()).await.unwrap();
    let result = within(retried.wait()).await.unwrap();
    assert!(result.contains("(1 steps set back)"), "{result}");

    // Refused by the engine, with its reason: a type it does not run.
    let refused = client
        .submit_workflow(Workflow::new("x").step("n", Nobody))
        .await
        .unwrap();
    match within(refused.join()).await {
        Err(Error::Refused { reason, .. }) => assert!(reason.contains("nobody"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(refused.status().await, Err(Error::Refused { .. })));
    // Refused before anything is sent: an id that cannot be one.
    let bad = client
        .submit_workflow(Workflow::new("x").id("a.b").step("a", Square { x: 1 }))
        .await;
    assert!(matches!(bad, Err(Error::InvalidWorkflow(_))), "{bad:?}");
    // Not known: a workflow id nothing was submitted under.
    assert!(matches!(
        client.workflow_status("nosuch").await,
        Err(Error::WorkflowNotFound(_))
    ));
    client.close().await;
    engine.shutdown().await.unwrap();
}

/// A workflow submitted while no engine runs waits in the store: its
/// status is `None`, and an engine started later takes and runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_sent_with_no_engine_running_runs_when_one_starts() {
    let tmp = tempfile::tempdir().unwrap();
    // The store exists (an engine opened it once).
    engine(tmp.path()).await.shutdown().await.unwrap();
    let client = client(tmp.path()).await;
    let flow = client.submit_workflow(sum("later", false)).await.unwrap();
    assert_eq!(flow.status().await.unwrap(), None, "not taken yet");
    assert!(
        flow.join_timeout(Duration::from_millis(200))
            .await
            .unwrap()
            .is_none(),
        "no engine: the bounded join gives up"
    );
    let engine = engine(tmp.path()).await;
    let status = within(flow.join()).await.unwrap().expect("it succeeded");
    assert_eq!(status.id, flow.id());
    assert_eq!(flow.output::<Total>("total").await.unwrap(), Some(Ok(13)));
    client.close().await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_shard_set_a_workflow_lives_in_the_shard_of_its_id() {
    let tmp = tempfile::tempdir().unwrap();
    let template = format!("file://{}/shard-{{shard}}", tmp.path().display());
    let set = || ShardSet::from_template(&template, 2).unwrap();
    for i in 0..2 {
        std::fs::create_dir_all(tmp.path().join(format!("shard-{i:02}"))).unwrap();
    }
    let engines = ShardedEngine::start(set(), &Placement::Listed(vec![0, 1]), |_, url| {
        Engine::builder()
            .store(gaffer::Store::url(url))
            .flush_interval(Duration::from_millis(1))
            .intake_poll(Duration::from_millis(20))
            .register::<Square>()
            .register::<Total>()
    })
    .await
    .unwrap();
    let clients = ShardedClient::open(set(), |_, url| {
        Client::builder()
            .store(gaffer::Store::url(url))
            .poll_interval(Duration::from_millis(20))
    })
    .await
    .unwrap();

    let mut shards_used = std::collections::HashSet::new();
    for n in 0..6 {
        let flow = clients
            .submit_workflow(sum(&format!("client-{n}"), false))
            .await
            .unwrap();
        within(flow.join()).await.unwrap().expect("it succeeded");
        let shard = set().shard_of(flow.id());
        shards_used.insert(shard);
        let there = engines
            .engine(shard)
            .unwrap()
            .workflow(flow.id())
            .status()
            .await
            .unwrap();
        assert!(there.ended(), "in the shard of its id");
        assert_eq!(clients.workflow_status(flow.id()).await.unwrap(), there);

        let handle = engines
            .submit_workflow(sum(&format!("engine-{n}"), false))
            .await
            .unwrap();
        let outputs = within(handle.join()).await.unwrap().expect("it succeeded");
        assert_eq!(outputs.get::<Total>("total").await.unwrap(), 13);
        let shard = set().shard_of(handle.id());
        assert!(
            engines
                .engine(shard)
                .unwrap()
                .workflow(handle.id())
                .status()
                .await
                .is_ok()
        );
        assert_eq!(
            engines
                .workflow(handle.id())
                .unwrap()
                .status()
                .await
                .unwrap()
                .steps
                .len(),
            3
        );
    }
    assert_eq!(
        shards_used.len(),
        2,
        "six keyed workflows over two shards use both"
    );
    clients.close().await;
    engines.shutdown().await;
}
