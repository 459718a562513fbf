//! The state a batch leaves in the store, after taquba-workflow 0.11's bulk
//! reference suite: status from the item markers, forgetting a batch (and
//! when that is refused), the run registry freed as soon as a run returns,
//! retention, and a batch's items listed a page at a time with their
//! outcomes and typed outputs. (Invalid batch ids: `input_batches.rs`.)
//!
//! Every test but one runs under paused tokio time on the in-memory store
//! with a `MockClock`, and waits on run futures, pipeline start signals or
//! explicit calls, never on wall time.

mod common;

use std::time::Duration;

use gaffer::taquba::KvOrder;
use gaffer::{BulkCtx, Engine, Error, Pipeline, bulk::ItemError, bulk::ItemOutcome};

use common::bulk::{
    BLOCKING, Probe, UNLUCKY, counts, probe_engine, strings, wait_not_running, wait_started,
};
use common::{shut_down_cleanly, within};

/// Everything under `gaffer/v1/batches/{id}/` in KV (first 10 entries).
async fn batch_kv(engine: &Engine, id: &str) -> Vec<Vec<u8>> {
    let prefix = format!("gaffer/v1/batches/{id}/");
    gaffer::testing::raw_queue(engine)
        .unwrap()
        .view()
        .kv_scan(prefix.as_bytes(), .., KvOrder::Ascending, 10)
        .await
        .unwrap()
        .entries
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn status_reports_the_last_recorded_outcome_of_each_item() {
    let (engine, _shared, _rx, _clock) = probe_engine().await;
    let batch = engine.batch::<Probe>("st").unwrap();
    match batch.status().await {
        Err(Error::BatchNotFound(id)) => assert_eq!(id, "st"),
        other => panic!("expected BatchNotFound, got {other:?}"),
    }

    within(batch.run([1u64, UNLUCKY, 3])).await.unwrap();

    let status = batch.status().await.unwrap();
    assert_eq!(status.batch_id, "st");
    assert_eq!(
        (
            status.total,
            status.succeeded,
            status.failed,
            status.pending
        ),
        (3, 2, 1, 0)
    );
    assert_eq!(status.failed_keys, strings(&["item-1"]));
    // The marker keeps the cost of the attempt that settled the item, success
    // or final failure: 2 successes + 1 failure, one call each.
    assert_eq!(status.cost.get("calls"), 3.0);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn forget_removes_the_batch_state_and_a_later_run_starts_over() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    let batch = engine.batch::<Probe>("b").unwrap();
    // A neighbour whose id extends this one's must survive.
    let neighbour = engine.batch::<Probe>("b2").unwrap();
    within(batch.run([1u64, 2])).await.unwrap();
    within(neighbour.run([1u64])).await.unwrap();
    assert!(!batch_kv(&engine, "b").await.is_empty());

    within(batch.forget()).await.unwrap();

    match batch.status().await {
        Err(Error::BatchNotFound(id)) => assert_eq!(id, "b"),
        other => panic!("expected BatchNotFound, got {other:?}"),
    }
    let left = batch_kv(&engine, "b").await;
    assert!(
        left.is_empty(),
        "left behind: {:?}",
        left.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    assert_eq!(neighbour.status().await.unwrap().succeeded, 1);

    let report = within(batch.run([1u64, 2])).await.unwrap();
    assert_eq!(counts(&report), (2, 2, 0));
    assert_eq!(shared.runs(), 5);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn forget_is_refused_while_the_batch_runs_or_has_live_items() {
    let (engine, shared, mut rx, _clock) = probe_engine().await;
    let e = engine.clone();
    let run = tokio::spawn(async move {
        e.batch::<Probe>("live")
            .unwrap()
            .run([BLOCKING, BLOCKING + 1])
            .await
    });
    wait_started(&mut rx, 2).await;
    let batch = engine.batch::<Probe>("live").unwrap();

    match within(batch.forget()).await {
        Err(Error::BatchRunning(id)) => assert_eq!(id, "live"),
        other => panic!("expected BatchRunning, got {other:?}"),
    }

    run.abort();
    let _ = run.await;
    wait_not_running(&batch).await;
    match within(batch.forget()).await {
        Err(Error::BatchActive { batch_id, active }) => {
            assert_eq!((batch_id.as_str(), active), ("live", 2));
        }
        other => panic!("expected BatchActive, got {other:?}"),
    }
    // Refusals removed nothing.
    assert_eq!(batch.status().await.unwrap().pending, 2);

    shared.gate.open();
    let report = within(batch.resume()).await.unwrap();
    assert_eq!(counts(&report), (2, 2, 0));
    within(batch.forget()).await.unwrap();
    assert!(batch_kv(&engine, "live").await.is_empty());
    shut_down_cleanly(&engine).await;
}

/// A finished run leaves nothing behind that blocks the next call. Needs a
/// multi-threaded runtime: on the current-thread runtime of the other tests the
/// finished coordinator happens to be deregistered before the caller's next
/// message arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_can_run_again_resume_or_be_forgotten_as_soon_as_its_run_returns() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    for i in 0..50 {
        let batch = engine.batch::<Probe>(&format!("next-{i}")).unwrap();
        within(batch.run([1u64])).await.unwrap();
        within(batch.run([1u64]))
            .await
            .unwrap_or_else(|e| panic!("re-run #{i} right after a run: {e}"));
        within(batch.resume())
            .await
            .unwrap_or_else(|e| panic!("resume #{i} right after a run: {e}"));
        within(batch.forget())
            .await
            .unwrap_or_else(|e| panic!("forget #{i} right after a run: {e}"));
    }
    assert_eq!(shared.runs(), 50);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_batch_is_swept_on_the_retention_interval() {
    let (engine, _shared, _rx, clock) = probe_engine().await;
    let retention = Duration::from_secs(60);
    let old = engine.batch::<Probe>("old").unwrap().retention(retention);
    within(old.run([1u64, 2])).await.unwrap();
    clock.advance(Duration::from_secs(30));
    let young = engine.batch::<Probe>("young").unwrap().retention(retention);
    within(young.run([1u64, 2])).await.unwrap();

    // Inside both windows: nothing goes.
    clock.advance(Duration::from_secs(29));
    engine.sweep_now().await.unwrap();
    assert_eq!(old.status().await.unwrap().succeeded, 2);
    assert_eq!(young.status().await.unwrap().succeeded, 2);

    // Past the old batch's window, inside the young one's.
    clock.advance(Duration::from_secs(2));
    engine.sweep_now().await.unwrap();
    match old.status().await {
        Err(Error::BatchNotFound(id)) => assert_eq!(id, "old"),
        other => panic!("expected the old batch forgotten, got {other:?}"),
    }
    assert!(batch_kv(&engine, "old").await.is_empty());
    assert_eq!(young.status().await.unwrap().succeeded, 2);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_runs_again_is_kept_until_its_latest_run_expires() {
    let (engine, shared, _rx, clock) = probe_engine().await;
    let retention = Duration::from_secs(60);
    let batch = engine.batch::<Probe>("kept").unwrap().retention(retention);
    within(batch.run([1u64, 2])).await.unwrap();
    clock.advance(Duration::from_secs(50));
    within(batch.run([1u64, 2])).await.unwrap();

    // Past the first run's window, inside the second's.
    clock.advance(Duration::from_secs(20));
    engine.sweep_now().await.unwrap();
    assert_eq!(batch.status().await.unwrap().succeeded, 2);

    // Past the second run's window.
    clock.advance(Duration::from_secs(41));
    engine.sweep_now().await.unwrap();
    match batch.status().await {
        Err(Error::BatchNotFound(id)) => assert_eq!(id, "kept"),
        other => panic!("expected the batch forgotten, got {other:?}"),
    }
    assert_eq!(shared.runs(), 2);
    shut_down_cleanly(&engine).await;
}

// ---------------------------------------------------------------------------
// A batch's items, listed a page at a time with their typed outputs.

/// Doubles its input; fails multiples of 5; input 0 outputs a string over
/// the KV cap (kept as a blob).
struct Doubler;

impl Pipeline for Doubler {
    const NAME: &'static str = "doubler";
    type Input = u32;
    type Output = (u32, String);
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<(u32, String), ItemError> {
        ctx.record_cost("calls", 1.0);
        match ctx.input {
            0 => Ok((0, "x".repeat(1 << 20))),
            n if n % 5 == 0 => Err(ItemError::permanent(format!("{n} is a multiple of 5"))),
            n => Ok((n * 2, String::new())),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_batchs_items_are_listed_page_by_page_with_their_outcomes_and_outputs() {
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Doubler)
        .start()
        .await
        .unwrap();
    let batch = engine
        .batch::<Doubler>("listed")
        .unwrap()
        .key_fn(|n| format!("k{n:02}"));
    let report = batch.run(0..23).await.unwrap();
    assert_eq!((report.succeeded, report.failed), (19, 4));

    let mut listed = Vec::new();
    let mut pages = 0;
    let mut after: Option<String> = None;
    loop {
        let page = batch.items(after.as_deref(), 10).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 10);
        listed.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 3, "23 items in pages of 10");
    let keys: Vec<&str> = listed.iter().map(|i| i.key.as_str()).collect();
    let want: Vec<String> = (0..23).map(|n| format!("k{n:02}")).collect();
    assert_eq!(keys, want, "every item once, in key order");
    for (n, item) in listed.iter().enumerate() {
        let n = n as u32;
        let want = match n {
            0 => ItemOutcome::Succeeded((0, "x".repeat(1 << 20))),
            n if n % 5 == 0 => ItemOutcome::Failed(format!("{n} is a multiple of 5")),
            n => ItemOutcome::Succeeded((n * 2, String::new())),
        };
        assert_eq!(item.outcome, want, "item {}", item.key);
        assert_eq!(item.cost.get("calls"), 1.0, "item {}", item.key);
    }
    // Past the last key, an empty last page.
    let end = batch.items(Some("k22"), 10).await.unwrap();
    assert_eq!((end.items.len(), end.next), (0, None));
    // An unknown batch is a typed error.
    let unknown = engine
        .batch::<Doubler>("never-run")
        .unwrap()
        .items(None, 10)
        .await;
    assert!(
        matches!(
            unknown,
            Err(gaffer::Error::BatchNotFound(ref id)) if id == "never-run"
        ),
        "{unknown:?}"
    );
    engine.shutdown().await.unwrap();
}
