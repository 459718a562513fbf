//! Jobs that submit other jobs: a handler fans out children without waiting
//! for them, parents await the children they submitted (at a concurrency
//! lower than the number of parents), a job type awaits children of its own
//! type (with fewer workers than waits, one after the other or several at
//! once: a waiting job parks its slot), a shutdown during such a wait
//! gives the parent back without spending its attempt, and a parent
//! cancelled during it cancels the children it awaits.
//!
//! Every test runs under paused tokio time on the in-memory store with a
//! `MockClock`, and waits for handles or engine counters, never for wall time.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gaffer::{Engine, Job, JobContext, job::JobState};
use serde::{Deserialize, Serialize};

use common::jobs::{Fail, Probe, join};
use common::{Gate, LIMIT, eventually, shut_down_cleanly, within};

/// Submits `n` [`FannedOut`] jobs and returns their ids without waiting for them.
#[derive(Serialize, Deserialize)]
struct FanOut {
    n: u32,
}

impl Job for FanOut {
    const NAME: &'static str = "fan-out";
    type Output = Vec<String>;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<Vec<String>, Fail> {
        let mut ids = Vec::new();
        for i in 0..self.n {
            ids.push(ctx.submit(FannedOut { i }).await?.id().to_string());
        }
        Ok(ids)
    }
}

/// Waits for the gate, counts itself, returns its index.
#[derive(Serialize, Deserialize)]
struct FannedOut {
    i: u32,
}

impl Job for FannedOut {
    const NAME: &'static str = "fanned-out";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let probe = ctx.state::<Arc<Probe>>();
        probe.gate.wait().await;
        probe.runs.fetch_add(1, Ordering::SeqCst);
        Ok(self.i)
    }
}

#[tokio::test(start_paused = true)]
async fn fan_out_from_handler_runs_children() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(common::mock_clock())
        .register::<FanOut>()
        .register::<FannedOut>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let parent = engine.submit(FanOut { n: 3 }).await.unwrap();
    // The parent ends while its children are still held at the gate.
    let ids = join(&parent).await.unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(probe.runs(), 0, "no child finished before the parent");
    for id in &ids {
        let state = engine.status(id).await.unwrap();
        assert!(
            matches!(state, JobState::Queued | JobState::Running),
            "child {id} is live: {state:?}"
        );
    }

    probe.gate.open();
    for (i, id) in ids.iter().enumerate() {
        let child = engine.handle::<FannedOut>(id).unwrap();
        assert_eq!(join(&child).await, Ok(i as u32));
    }
    assert_eq!(probe.runs(), 3);

    shut_down_cleanly(&engine).await;
}

/// Runs until the gate opens.
#[derive(Serialize, Deserialize)]
struct Gated(u32);

impl Job for Gated {
    const NAME: &'static str = "gated";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Gate>().wait().await;
        Ok(self.0)
    }
}

#[derive(Serialize, Deserialize)]
struct Child(u32);

impl Job for Child {
    const NAME: &'static str = "child";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u32, Self::Error> {
        Ok(self.0)
    }
}

#[derive(Serialize, Deserialize)]
struct Parent(u32);

impl Job for Parent {
    const NAME: &'static str = "parent";
    type Output = u32;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<u32, Fail> {
        // Every parent is queued before any submits its children.
        if let Some(gate) = ctx.try_state::<Gate>() {
            gate.wait().await;
        }
        let mut handles = Vec::new();
        for i in 0..3 {
            handles.push(
                ctx.submit(Child(self.0 * 10 + i))
                    .await
                    .map_err(|e| Fail::Msg(e.to_string()))?,
            );
        }
        let mut sum = 0;
        for h in handles {
            sum += h.await.map_err(|e| Fail::Msg(e.to_string()))?;
        }
        Ok(sum)
    }
}

/// Awaits two children of its own type down to depth 0: one after the other,
/// or both at once (`together`).
#[derive(Serialize, Deserialize)]
struct Tree {
    depth: u32,
    together: bool,
}

impl Job for Tree {
    const NAME: &'static str = "tree";
    type Output = u32;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<u32, Fail> {
        let failed = |e: &dyn std::fmt::Display| Fail::Msg(e.to_string());
        if self.depth == 0 {
            return Ok(1);
        }
        let child = || Tree {
            depth: self.depth - 1,
            together: self.together,
        };
        let a = ctx.submit(child()).await.map_err(|e| failed(&e))?;
        let b = ctx.submit(child()).await.map_err(|e| failed(&e))?;
        let (a, b) = if self.together {
            tokio::join!(a.join(), b.join())
        } else {
            (a.join().await, b.join().await)
        };
        let a = a.map_err(|e| failed(&e))?.map_err(|e| failed(&e))?;
        let b = b.map_err(|e| failed(&e))?.map_err(|e| failed(&e))?;
        Ok(a + b)
    }
}

#[tokio::test(start_paused = true)]
async fn parents_awaiting_their_children_complete_at_a_concurrency_of_four_and_shutdown_returns() {
    let gate = Gate::closed();
    let engine = common::memory_builder(common::mock_clock())
        .max_concurrent_jobs(4)
        .state(gate.clone())
        .register::<Parent>()
        .register::<Child>()
        .start()
        .await
        .unwrap();
    let mut parents = Vec::new();
    for p in 0..20 {
        parents.push(engine.submit(Parent(p)).await.unwrap());
    }
    gate.open();
    for (p, h) in parents.into_iter().enumerate() {
        let p = p as u32;
        assert_eq!(within(h).await.unwrap(), 3 * p * 10 + 3);
    }
    within(engine.shutdown()).await.unwrap();
}

/// Run a `Tree` of `depth` on an engine with `workers` tree workers; the
/// engine and the tree's leaf count.
async fn grow(workers: usize, depth: u32, together: bool) -> (Engine, u32) {
    let engine = common::memory_builder(common::mock_clock())
        .register_with::<Tree>(gaffer::JobOptions {
            concurrency: Some(workers),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let root = engine.submit(Tree { depth, together }).await.unwrap();
    let leaves = within(root).await.unwrap();
    (engine, leaves)
}

#[tokio::test(start_paused = true)]
async fn a_job_type_awaiting_children_of_its_own_type_completes_with_two_workers() {
    let (engine, leaves) = grow(2, 4, false).await;
    assert_eq!(leaves, 16);
    within(engine.shutdown()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_job_awaiting_two_children_of_its_own_type_at_once_completes_with_one_worker() {
    let (engine, leaves) = grow(1, 3, true).await;
    assert_eq!(leaves, 8);
    // Back to one worker once nothing waits.
    eventually("the extra workers retire", LIMIT, async || {
        let stats = engine.pool_stats().await.unwrap();
        stats["tree"].workers == 1 && stats["tree"].parked == 0
    })
    .await;
    within(engine.shutdown()).await.unwrap();
}

/// Awaits a `Gated` child; one attempt only.
#[derive(Serialize, Deserialize)]
struct Waits(u32);

impl Job for Waits {
    const NAME: &'static str = "waits";
    type Output = u32;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<u32, Fail> {
        let child = ctx
            .submit(Gated(self.0))
            .await
            .map_err(|e| Fail::Msg(e.to_string()))?;
        child.await.map_err(|e| Fail::Msg(e.to_string()))
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(1)
    }
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_during_a_wait_for_a_child_gives_the_parent_back_without_spending_its_attempt() {
    let store = common::shared_store();
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let engine = common::shared_memory_builder(store.clone(), clock.clone())
        .shutdown_grace(Duration::from_secs(1))
        .state(gate.clone())
        .register::<Waits>()
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let parent = engine.submit(Waits(9)).await.unwrap();
    eventually(
        "the parent waits for its running child",
        LIMIT,
        async || {
            let stats = engine.pool_stats().await.unwrap();
            stats["waits"].parked == 1 && stats["gated"].running == 1
        },
    )
    .await;
    let report = within(engine.shutdown()).await.unwrap();
    assert!(report.queue_closed, "{report:?}");

    // The next start: the parent has its one attempt still, and completes.
    gate.open();
    let engine = common::shared_memory_builder(store, clock)
        .state(gate.clone())
        .register::<Waits>()
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let value = within(engine.handle::<Waits>(parent.id()).unwrap().join())
        .await
        .unwrap();
    assert_eq!(value, Ok(9), "the shutdown spent the parent's only attempt");
    engine.shutdown().await.unwrap();
}

/// The children an [`AwaitTwo`] submitted.
#[derive(Default)]
struct Kids(std::sync::Mutex<Vec<String>>);

/// Submits two [`FannedOut`] children and awaits both.
#[derive(Serialize, Deserialize)]
struct AwaitTwo;

impl Job for AwaitTwo {
    const NAME: &'static str = "await-two";
    type Output = u32;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, gaffer::Error> {
        let a = ctx.submit(FannedOut { i: 1 }).await?;
        let b = ctx.submit(FannedOut { i: 2 }).await?;
        let kids = ctx.state::<Arc<Kids>>();
        kids.0
            .lock()
            .unwrap()
            .extend([a.id().to_string(), b.id().to_string()]);
        let (a, b) = tokio::join!(a.join(), b.join());
        Ok(a?.unwrap_or(0) + b?.unwrap_or(0))
    }
}

/// A parent cancelled while it awaits its children stops waiting, and the
/// children it awaited are cancelled with it: the queued one at once, the
/// running one asked to stop.
#[tokio::test(start_paused = true)]
async fn cancelling_a_parent_that_awaits_its_children_cancels_them() {
    let probe = Probe::new(Gate::closed());
    let kids = Arc::new(Kids::default());
    let engine = common::memory_builder(common::mock_clock())
        .register::<AwaitTwo>()
        .register_with::<FannedOut>(gaffer::JobOptions {
            concurrency: Some(1),
            ..Default::default()
        })
        .state(probe.clone())
        .state(kids.clone())
        .start()
        .await
        .unwrap();
    let parent = engine.submit(AwaitTwo).await.unwrap();
    eventually("the parent awaits its children", LIMIT, async || {
        kids.0.lock().unwrap().len() == 2
    })
    .await;
    let ids = kids.0.lock().unwrap().clone();
    eventually("the first child runs", LIMIT, async || {
        engine.status(&ids[0]).await.ok() == Some(JobState::Running)
    })
    .await;
    assert_eq!(
        parent.cancel().await.unwrap(),
        gaffer::job::CancelResult::Requested
    );
    let ended = within(parent.join()).await.unwrap();
    assert!(ended.unwrap_err().is_cancelled());
    // The queued child was removed; the running one ends cancelled once it
    // returns (it waits at the gate).
    assert_eq!(engine.status(&ids[1]).await.unwrap(), JobState::Cancelled);
    probe.gate.open();
    eventually("the running child ends", LIMIT, async || {
        engine.status(&ids[0]).await.ok() == Some(JobState::Cancelled)
    })
    .await;
    assert_eq!(probe.runs(), 1, "the queued child never ran");
    shut_down_cleanly(&engine).await;
}
