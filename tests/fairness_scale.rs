//! Tenants at scale (#37 §3): a fair type's pool forgets a value whose jobs
//! are all gone, lists only values with live jobs at its start, and finds a
//! forgotten value again when a job is submitted to it.
//!
//! Paused tokio time (the pool's forget window, a minute, passes in no real
//! time) and a mock queue clock (a job scheduled a minute ahead stays
//! scheduled while the window passes).

mod common;

use std::sync::Arc;
use std::time::Duration;

use gaffer::EngineBuilder;
use gaffer::taquba::MockClock;

use gaffer::{Engine, Fairness, Job, JobContext, JobOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Tick;

impl Job for Tick {
    const NAME: &'static str = "tick";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, _ctx: JobContext) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn fair() -> JobOptions {
    JobOptions {
        fair_by: Some(Fairness::header("tenant")),
        ..Default::default()
    }
}

fn tenant(name: &str) -> gaffer::SubmitOptions {
    let mut opts = gaffer::SubmitOptions::default();
    opts.headers.insert("tenant".into(), name.into());
    opts
}

/// The queues the pool of `tick` knows, and the values in its ring.
async fn known(engine: &Engine) -> (usize, usize) {
    let stats = engine.pool_stats().await.unwrap();
    let s = stats[Tick::NAME];
    (s.queues, s.ready_values)
}

/// The partition marks in the store (see `keys::partition_mark_key`).
async fn marks(engine: &Engine) -> usize {
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    queue
        .view()
        .kv_scan(
            b"gaffer/v1/parts/",
            ..,
            gaffer::taquba::KvOrder::Ascending,
            100_000,
        )
        .await
        .unwrap()
        .entries
        .len()
}

/// Run one job for each of `n` values and wait for them all.
async fn one_job_each(engine: &Engine, n: usize) {
    let mut handles = Vec::new();
    for i in 0..n {
        handles.push(
            engine
                .submit_with(Tick, tenant(&format!("t{i}")))
                .await
                .unwrap(),
        );
    }
    for h in handles {
        common::within(h.join()).await.unwrap().unwrap();
    }
}

/// Submit a job of tenant "later" due a minute from now (on the queue's
/// clock, which stands still while a forget window passes).
async fn later(engine: &Engine) -> gaffer::JobHandle<Tick> {
    engine
        .submit_with(
            Tick,
            gaffer::SubmitOptions {
                headers: tenant("later").headers,
                ..common::a_minute_later()
            },
        )
        .await
        .unwrap()
}

/// A fair engine on the store in `dir`.
async fn on_disk(
    dir: &std::path::Path,
    clock: &Arc<MockClock>,
    builder: fn(EngineBuilder) -> EngineBuilder,
) -> Engine {
    builder(common::disk_builder(dir, clock.clone()))
        .register_with::<Tick>(fair())
        .start()
        .await
        .unwrap()
}

/// Two forget windows: every value drained before it is looked at and
/// forgotten (the pool checks once the window has passed).
async fn two_windows() {
    tokio::time::sleep(Duration::from_secs(130)).await;
}

#[tokio::test(start_paused = true)]
async fn drained_values_are_forgotten_and_found_again_when_submitted_to() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock.clone())
        .register_with::<Tick>(fair())
        .start()
        .await
        .unwrap();
    one_job_each(&engine, 100).await;
    // Its own queue and a queue per value.
    assert_eq!(known(&engine).await.0, 101);
    assert_eq!(marks(&engine).await, 100);
    // A value with a job due a minute from now holds a live job.
    let later = later(&engine).await;
    two_windows().await;
    common::eventually(
        "the drained values forgotten",
        Duration::from_secs(600),
        async || known(&engine).await == (2, 0),
    )
    .await;
    // Forgotten values leave no mark; the one with a scheduled job keeps it.
    assert_eq!(marks(&engine).await, 1);
    // A forgotten value is found again by its next job.
    let again = engine.submit_with(Tick, tenant("t7")).await.unwrap();
    common::within(again.join()).await.unwrap().unwrap();
    // The kept value's job runs when it is due.
    common::a_minute_passes(&engine, &clock).await;
    common::within(later.join()).await.unwrap().unwrap();
    engine.shutdown().await.unwrap();
}

/// On real time (a store reopened after paused time would see its clock go
/// back), with a forget window of 200 ms.
#[tokio::test]
async fn a_restart_lists_only_the_values_with_live_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let engine = on_disk(dir.path(), &clock, |b| {
        b.forget_drained_after(Duration::from_millis(200))
    })
    .await;
    one_job_each(&engine, 50).await;
    let later_id = later(&engine).await.id().to_string();
    common::eventually(
        "the drained values forgotten",
        Duration::from_secs(60),
        async || known(&engine).await.0 == 2,
    )
    .await;
    engine.shutdown().await.unwrap();

    let engine = on_disk(dir.path(), &clock, |b| b).await;
    // The type's queue and the value with a scheduled job: the 50 values
    // that drained are not listed (the listing is the pool's first step,
    // so once the live value is known, the listing is done).
    common::eventually(
        "the live value listed",
        Duration::from_secs(60),
        async || known(&engine).await.0 >= 2,
    )
    .await;
    assert_eq!(known(&engine).await.0, 2);
    common::a_minute_passes(&engine, &clock).await;
    let later = engine.handle::<Tick>(&later_id).unwrap();
    common::within(later.join()).await.unwrap().unwrap();
    engine.shutdown().await.unwrap();
}

/// A store written before marks existed: its partition queues have none.
/// The first start lists taquba's queues once, marks every partition of
/// the type, and the drained ones are then forgotten as usual.
#[tokio::test(start_paused = true)]
async fn a_store_without_marks_is_listed_once_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let engine = on_disk(dir.path(), &clock, |b| b).await;
    one_job_each(&engine, 20).await;
    let later_id = later(&engine).await.id().to_string();
    // Take the marks away, as a store of an earlier version has them.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let page = queue
        .view()
        .kv_scan(
            b"gaffer/v1/parts",
            ..,
            gaffer::taquba::KvOrder::Ascending,
            1000,
        )
        .await
        .unwrap();
    assert!(page.entries.len() > 21, "the marks and the listed flag");
    for (k, _) in &page.entries {
        queue.kv_delete(k).await.unwrap();
    }
    drop(queue);
    engine.shutdown().await.unwrap();

    let engine = on_disk(dir.path(), &clock, |b| b).await;
    common::eventually(
        "every partition listed and marked",
        Duration::from_secs(60),
        async || known(&engine).await.0 == 22 && marks(&engine).await == 21,
    )
    .await;
    two_windows().await;
    common::eventually(
        "the drained values forgotten",
        Duration::from_secs(600),
        async || known(&engine).await.0 == 2 && marks(&engine).await == 1,
    )
    .await;
    common::a_minute_passes(&engine, &clock).await;
    let later = engine.handle::<Tick>(&later_id).unwrap();
    common::within(later.join()).await.unwrap().unwrap();
    engine.shutdown().await.unwrap();
}
