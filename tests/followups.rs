//! Follow-up jobs (`JobContext::then`): a follow-up exists if, and only if,
//! its parent succeeded, created in the transaction that records the
//! parent's success; a retry of the parent does not duplicate it; a crash
//! right after the parent's success does not lose it (a real process,
//! SIGKILLed, on a local-disk store).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gaffer::{Error, Job, JobContext, job::FailureKind};
use serde::{Deserialize, Serialize};

use common::Runs;

#[derive(Debug, Serialize, Deserialize)]
struct Notify {
    to: String,
}

impl Job for Notify {
    const NAME: &'static str = "notify";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(format!("told {}", self.to))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct OrderError(&'static str);

/// Stages two follow-ups, then: `fail` 0 succeeds, 1 fails once
/// (transient) then succeeds, 2 fails for good. Answers the follow-ups' ids.
#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u32,
    fail: u8,
}

impl Job for Order {
    const NAME: &'static str = "order";
    type Output = Vec<String>;
    type Error = OrderError;

    async fn run(&self, ctx: JobContext) -> Result<Vec<String>, OrderError> {
        let staged = |to: &str| {
            ctx.then(Notify {
                to: format!("{to}-{}", self.id),
            })
            .map_err(|_| OrderError("staging failed"))
        };
        let ids = vec![staged("customer")?, staged("warehouse")?];
        match (self.fail, ctx.attempt()) {
            (0, _) | (1, 2..) => Ok(ids),
            (1, _) => Err(OrderError("payment gateway busy")),
            _ => Err(OrderError("card declined")),
        }
    }

    fn classify(&self, e: &OrderError) -> FailureKind {
        if e.0 == "card declined" {
            FailureKind::Permanent
        } else {
            FailureKind::Transient
        }
    }

    fn idempotency_key(&self) -> Option<String> {
        Some(format!("order-{}", self.id))
    }
}

async fn engine(builder: gaffer::EngineBuilder, runs: Arc<Runs>) -> gaffer::Engine {
    builder
        .register::<Order>()
        .register::<Notify>()
        .state(runs)
        .start()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_runs_once_its_parent_succeeds_and_its_handle_is_reachable_from_the_parent() {
    let runs = Arc::new(Runs::default());
    let engine = engine(common::memory_builder(common::mock_clock()), runs.clone()).await;
    let parent = engine.submit(Order { id: 1, fail: 0 }).await.unwrap();
    let ids = common::within(parent.join()).await.unwrap().unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        parent.followups().await.unwrap(),
        Some(ids.clone()),
        "the parent's outcome names its follow-ups"
    );
    let told: Vec<String> = {
        let mut told = Vec::new();
        for id in &ids {
            let child = engine.handle::<Notify>(id).unwrap();
            told.push(common::within(child.join()).await.unwrap().unwrap());
        }
        told
    };
    assert_eq!(told, ["told customer-1", "told warehouse-1"]);
    assert_eq!(runs.get(), 2);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_that_fails_never_creates_its_follow_ups_and_a_retried_one_creates_them_once() {
    let runs = Arc::new(Runs::default());
    let engine = engine(common::memory_builder(common::mock_clock()), runs.clone()).await;

    // Fails for good: its staged follow-ups never exist.
    let declined = engine.submit(Order { id: 2, fail: 2 }).await.unwrap();
    let r = common::within(declined.join()).await.unwrap();
    assert!(
        matches!(&r, Err(e) if e.kind == FailureKind::Permanent),
        "{r:?}"
    );
    assert_eq!(declined.followups().await.unwrap(), Some(vec![]));
    for index in 0..2 {
        let id = gaffer::testing::layout::keys::followup_run_id(declined.id(), index);
        let status = engine.handle::<Notify>(&id).unwrap().status().await;
        assert!(matches!(status, Err(Error::JobNotFound(_))), "{status:?}");
    }

    // Fails once, then succeeds: both attempts staged the follow-ups, only
    // the second attempt's success created them, once.
    let retried = engine.submit(Order { id: 3, fail: 1 }).await.unwrap();
    let ids = common::within(retried.join()).await.unwrap().unwrap();
    for id in &ids {
        let child = engine.handle::<Notify>(id).unwrap();
        common::within(child.join()).await.unwrap().unwrap();
    }
    assert_eq!(runs.get(), 2, "two follow-ups, each run once");
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let totals = common::totals(queue.view(), &common::job_queue(Notify::NAME)).await;
    drop(queue);
    assert_eq!(totals.done, 2, "{totals:?}");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_follow_up_of_a_type_the_engine_does_not_have_is_refused_when_staged() {
    #[derive(Debug, Serialize, Deserialize)]
    struct Stranger;
    impl Job for Stranger {
        const NAME: &'static str = "stranger";
        type Output = ();
        type Error = gaffer::Error;
        async fn run(&self, _: JobContext) -> Result<(), gaffer::Error> {
            Ok(())
        }
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct Asks;
    impl Job for Asks {
        const NAME: &'static str = "asks";
        type Output = String;
        type Error = gaffer::Error;
        async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
            Ok(ctx.then(Stranger).unwrap_err().to_string())
        }
    }
    let engine = common::memory_builder(common::mock_clock())
        .register::<Asks>()
        .start()
        .await
        .unwrap();
    let said = common::within(engine.submit(Asks).await.unwrap().join())
        .await
        .unwrap()
        .unwrap();
    assert!(said.contains("stranger"), "{said}");
    engine.shutdown().await.unwrap();
}

/// The engine process of the crash test: the follow-ups' type is paused
/// (durably), so they wait in the store; it writes `parent-done` once the
/// parent succeeded, then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_follow_up_survives_a_kill_right_after_its_parents_success as a child process"]
async fn followups_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_FU_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let engine = engine(
        gaffer::Engine::builder()
            .store(gaffer::Store::local_dir(dir.join("store")))
            .flush_interval(Duration::from_millis(1)),
        Arc::default(),
    )
    .await;
    engine.pause(Notify::NAME).await.unwrap();
    let parent = engine.submit(Order { id: 9, fail: 0 }).await.unwrap();
    let ids = parent.join().await.unwrap().unwrap();
    // Whole: the parent reads it, and kills this process, once it exists.
    common::write_whole(&dir.join("parent-done"), ids.join("\n"));
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_survives_a_kill_right_after_its_parents_success() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = common::spawn_test_child("followups_engine_child", "GAFFER_FU_DIR", tmp.path());
    let done = tmp.path().join("parent-done");
    common::wait_for_child_file(tmp.path(), &done, "the parent's success").await;
    child.kill().unwrap();
    child.wait().unwrap();
    let ids: Vec<String> = std::fs::read_to_string(&done)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 2);

    let runs = Arc::new(Runs::default());
    let engine = engine(
        gaffer::Engine::builder()
            .store(gaffer::Store::local_dir(tmp.path().join("store")))
            .flush_interval(Duration::from_millis(1)),
        runs.clone(),
    )
    .await;
    let parent = engine
        .handle::<Order>(&gaffer::job::keyed_job_id("order-9"))
        .unwrap();
    assert_eq!(parent.followups().await.unwrap(), Some(ids.clone()));
    engine.resume(Notify::NAME).await.unwrap();
    for id in &ids {
        let child = engine.handle::<Notify>(id).unwrap();
        assert!(common::within(child.join()).await.unwrap().is_ok());
    }
    assert_eq!(runs.get(), 2, "each follow-up ran once");
    engine.shutdown().await.unwrap();
}
