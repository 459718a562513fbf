//! Memo semantics (the reference's memo tests, through a job's context), and
//! when memo entries reach the store, also when writing them fails.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use gaffer::testing::{Op, Ops};
use gaffer::{
    BulkCtx, EngineEvent, Error, Job, JobContext, Pipeline, bulk::CostReport, bulk::ItemError,
    job::FailureKind, job::Memo,
};
use serde::{Deserialize, Serialize};

use common::faults::{EventLog, FAULT_LIMIT, Memoed, assert_engine_up, builder, faulty};
use common::{Gate, Runs, within_for};

#[derive(Default)]
struct Calls(AtomicUsize);

/// Runs one memo scenario, named by `self.0`, and returns what it saw.
#[derive(Serialize, Deserialize)]
struct Scenario(String);

impl Job for Scenario {
    const NAME: &'static str = "scenario";
    type Output = Vec<String>;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<Vec<String>, Error> {
        let calls = ctx.state::<Arc<Calls>>().clone();
        let memo = ctx.memo();
        let count = |calls: Arc<Calls>| async move {
            calls.0.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Error>(7)
        };
        let mut seen = Vec::new();
        match self.0.as_str() {
            "once" => {
                for _ in 0..3 {
                    let v: u32 = memo.memoized("k", || count(calls.clone())).await?;
                    seen.push(v.to_string());
                }
                // The stored value is MessagePack of the result.
                let raw = memo.get("k").await?.unwrap();
                seen.push(format!("{:?}", rmp_serde::from_slice::<u32>(&raw).unwrap()));
            }
            "failed-compute" => {
                let r: Result<u32, Error> = memo
                    .memoized("k", || async {
                        Err(Error::from(std::io::Error::other("nope")))
                    })
                    .await;
                seen.push(format!("err={}", r.is_err()));
                seen.push(format!("stored={}", memo.get("k").await?.is_some()));
            }
            "undecodable" => {
                memo.put("k", b"\xc1 not msgpack".to_vec()).await?;
                let v: u32 = memo.memoized("k", || count(calls.clone())).await?;
                seen.push(v.to_string());
                let raw = memo.get("k").await?.unwrap();
                seen.push(format!(
                    "overwritten={}",
                    rmp_serde::from_slice::<u32>(&raw).is_ok()
                ));
            }
            "content" => {
                let input = ("a", 1u8);
                let key = Memo::content_key(&input)?;
                seen.push(key.clone());
                let v: u32 = memo
                    .memoized_by_content(&input, || count(calls.clone()))
                    .await?;
                seen.push(v.to_string());
                seen.push(format!(
                    "under-content-key={}",
                    memo.get(&key).await?.is_some()
                ));
                seen.push(Memo::content_key(&("a", 2u8))?);
            }
            "awkward-keys" => {
                for key in ["", "a/b", "with space", "ünï", &"x".repeat(10_000)] {
                    memo.put(key, key.as_bytes().to_vec()).await?;
                    seen.push(format!(
                        "{}",
                        memo.get(key).await?.as_deref() == Some(key.as_bytes())
                    ));
                }
            }
            other => seen.push(format!("unknown scenario {other}")),
        }
        Ok(seen)
    }
}

async fn run(name: &str) -> (Vec<String>, usize) {
    let calls = Arc::new(Calls::default());
    let engine = common::memory_builder(common::mock_clock())
        .state(calls.clone())
        .register::<Scenario>()
        .start()
        .await
        .unwrap();
    let seen = engine
        .submit(Scenario(name.into()))
        .await
        .unwrap()
        .await
        .unwrap();
    engine.shutdown().await.unwrap();
    (seen, calls.0.load(Ordering::SeqCst))
}

#[tokio::test(start_paused = true)]
async fn memoized_runs_the_computation_once_and_stores_msgpack() {
    let (seen, calls) = run("once").await;
    assert_eq!(seen, ["7", "7", "7", "7"]);
    assert_eq!(calls, 1);
}

#[tokio::test(start_paused = true)]
async fn memoized_stores_nothing_for_a_failed_computation() {
    let (seen, _) = run("failed-compute").await;
    assert_eq!(seen, ["err=true", "stored=false"]);
}

#[tokio::test(start_paused = true)]
async fn a_memo_entry_that_fails_to_decode_is_recomputed_and_overwritten() {
    let (seen, calls) = run("undecodable").await;
    assert_eq!(seen, ["7", "overwritten=true"]);
    assert_eq!(calls, 1);
}

#[tokio::test(start_paused = true)]
async fn memoized_by_content_stores_under_the_content_key_which_distinguishes_inputs() {
    let (seen, calls) = run("content").await;
    assert!(
        seen[0].starts_with("content:") && seen[0].len() == "content:".len() + 64,
        "{seen:?}"
    );
    assert_eq!(&seen[1..3], ["7", "under-content-key=true"]);
    assert_ne!(seen[0], seen[3], "different inputs, different keys");
    assert_eq!(calls, 1);
}

#[tokio::test(start_paused = true)]
async fn awkward_memo_keys_round_trip() {
    let (seen, _) = run("awkward-keys").await;
    assert_eq!(seen, ["true"; 5]);
}

/// memoized_by_content_with_cached_cost: the closure runs once; its cost is
/// recorded both when computed and when answered from the memo.
struct Priced {
    calls: Arc<Calls>,
}

impl Pipeline for Priced {
    const NAME: &'static str = "priced";
    type Input = u32;
    type Output = u32;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<u32, ItemError> {
        let calls = self.calls.clone();
        let v: u32 = ctx
            .memoized_by_content_with_cached_cost(&ctx.input, || async move {
                calls.0.fetch_add(1, Ordering::SeqCst);
                let mut cost = CostReport::new();
                cost.record("tokens", 42.0);
                Ok::<_, Error>((7u32, cost))
            })
            .await
            .map_err(ItemError::from)?;
        ctx.record_cost("calls", 1.0);
        if ctx.attempt() == 1 {
            return Err(ItemError::transient("retry me"));
        }
        Ok(v)
    }
}

#[tokio::test(start_paused = true)]
async fn memoized_by_content_with_cached_cost_records_cost_on_compute_and_memo_hit() {
    let calls = Arc::new(Calls::default());
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Priced {
            calls: calls.clone(),
        })
        .start()
        .await
        .unwrap();
    let report = engine
        .batch::<Priced>("p")
        .unwrap()
        .run([1u32])
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1);
    assert_eq!(
        calls.0.load(Ordering::SeqCst),
        1,
        "computed once across the retry"
    );
    // The settling attempt (a memo hit) still carries the cached cost.
    assert_eq!(report.cost.get("tokens"), 42.0);
    assert_eq!(report.cost.get("calls"), 1.0);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// When entries reach the store (`MemoWrites`)
// ---------------------------------------------------------------------------

/// Memoizes two steps, then ends its first attempt as told.
#[derive(Serialize, Deserialize)]
struct TwoSteps {
    first_attempt: FirstAttempt,
}

#[derive(Serialize, Deserialize, Clone, Copy)]
enum FirstAttempt {
    Succeeds,
    Fails,
    Panics,
}

impl Job for TwoSteps {
    const NAME: &'static str = "two-steps";
    type Output = u32;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, Error> {
        let calls = ctx.state::<Arc<Calls>>().clone();
        let memo = ctx.memo();
        let step = |n: u32| {
            let calls = calls.clone();
            async move {
                calls.0.fetch_add(1, Ordering::SeqCst);
                Ok::<u32, Error>(n)
            }
        };
        let a: u32 = memo.memoized("a", || step(1)).await?;
        let b: u32 = memo.memoized("b", || step(2)).await?;
        // Within the attempt, its own entries are visible before any write.
        assert_eq!(
            memo.get("a").await?,
            Some(rmp_serde::to_vec_named(&1u32).unwrap())
        );
        if ctx.attempt() == 1 {
            match self.first_attempt {
                FirstAttempt::Succeeds => {}
                FirstAttempt::Fails => return Err(Error::from(std::io::Error::other("glitch"))),
                FirstAttempt::Panics => panic!("first attempt panics on purpose"),
            }
        }
        Ok(a + b)
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(3)
    }
}

/// Runs one `TwoSteps` job to its end; returns (steps computed, memo objects
/// in the store afterwards, attempts).
async fn two_steps(
    first_attempt: FirstAttempt,
    writes: gaffer::job::MemoWrites,
) -> (usize, usize, u32) {
    two_steps_on(first_attempt, writes, false).await
}

/// [`two_steps`]; with `memo_puts_fail`, every object write under the memo
/// prefix fails.
async fn two_steps_on(
    first_attempt: FirstAttempt,
    writes: gaffer::job::MemoWrites,
    memo_puts_fail: bool,
) -> (usize, usize, u32) {
    use futures_util::StreamExt;
    use gaffer::taquba::object_store::{ObjectStore, path::Path};
    use gaffer::testing::{FaultyStore, Ops};

    let store = common::shared_store();
    let (faulty, faults) = FaultyStore::wrap(store.clone());
    if memo_puts_fail {
        faults.only_prefix("gaffer-blobs/v1/memo/");
        faults.fail(Ops::PUT);
    }
    let calls = Arc::new(Calls::default());
    let engine = common::store_builder(faulty, common::mock_clock())
        .memo_writes(writes)
        .state(calls.clone())
        .register::<TwoSteps>()
        .start()
        .await
        .unwrap();
    let handle = engine.submit(TwoSteps { first_attempt }).await.unwrap();
    assert_eq!(handle.join().await.unwrap(), Ok(3));
    let attempts = gaffer::testing::services(&engine)
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap()
        .attempts;
    engine.shutdown().await.unwrap();
    let objects = store
        .list(Some(&Path::from("gaffer-blobs/v1/memo")))
        .count()
        .await;
    (calls.0.load(Ordering::SeqCst), objects, attempts)
}

#[tokio::test(start_paused = true)]
async fn by_default_a_successful_attempt_writes_no_memo_object() {
    let (computed, objects, attempts) =
        two_steps(FirstAttempt::Succeeds, gaffer::job::MemoWrites::OnFailure).await;
    assert_eq!((computed, attempts), (2, 1));
    assert_eq!(objects, 0, "a successful attempt's entries are not written");
}

#[tokio::test(start_paused = true)]
async fn with_immediate_writes_every_entry_is_an_object_as_soon_as_it_is_put() {
    let (computed, objects, attempts) =
        two_steps(FirstAttempt::Succeeds, gaffer::job::MemoWrites::Immediate).await;
    assert_eq!((computed, attempts), (2, 1));
    assert_eq!(objects, 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempts_entries_are_written_and_its_retry_reuses_them() {
    let (computed, objects, attempts) =
        two_steps(FirstAttempt::Fails, gaffer::job::MemoWrites::OnFailure).await;
    assert_eq!(attempts, 2);
    assert_eq!(computed, 2, "each step computed once across the retry");
    assert_eq!(objects, 2, "written when the first attempt failed");
}

#[tokio::test(start_paused = true)]
async fn a_panicking_attempts_entries_are_written_and_its_retry_reuses_them() {
    let (computed, objects, attempts) =
        two_steps(FirstAttempt::Panics, gaffer::job::MemoWrites::OnFailure).await;
    assert_eq!(attempts, 2);
    assert_eq!(computed, 2, "each step computed once across the panic");
    assert_eq!(objects, 2, "the pool wrote the crashed attempt's entries");
}

#[tokio::test(start_paused = true)]
async fn when_a_failed_attempts_entries_cannot_be_written_the_retry_computes_them_again() {
    let (computed, objects, attempts) = two_steps_on(
        FirstAttempt::Fails,
        gaffer::job::MemoWrites::OnFailure,
        true,
    )
    .await;
    assert_eq!(attempts, 2, "the write failure does not cost an attempt");
    assert_eq!(computed, 4, "both steps computed again by the retry");
    assert_eq!(objects, 0);
}

/// Faults on the memo's object writes (store outside SlateDB, not retried):
/// with immediate writes, a failed write fails the attempt transiently; once
/// the faults stop, the job succeeds, with one record. On the fault tests'
/// engine (`common::faults`): one engine, so paused time is fine.
#[tokio::test(start_paused = true)]
async fn a_fault_on_memo_writes_fails_attempts_transiently_and_the_job_succeeds_once_it_stops() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    // Immediate memo writes: each `put` writes its object (by default a
    // successful attempt writes none; a failing write of a failed attempt's
    // entries is covered above).
    let engine = builder(store, clock, &runs, &Gate::opened())
        .memo_writes(gaffer::job::MemoWrites::Immediate)
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);
    faults.only_prefix("gaffer-blobs/");

    // The next three memo writes fail: three attempts fail, the fourth succeeds.
    faults.fail_next(Ops::PUT, 3);
    let handle = engine.submit(Memoed(1)).await.unwrap();
    assert_eq!(
        within_for(FAULT_LIMIT, handle.join())
            .await
            .unwrap()
            .unwrap(),
        5
    );
    let record = gaffer::testing::services(&engine)
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.attempts, 4, "{record:?}");
    let retries: Vec<(FailureKind, String, bool)> = log
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            EngineEvent::JobFailed {
                run_id,
                kind,
                message,
                retrying,
                ..
            } if run_id == handle.id() => Some((*kind, message.clone(), *retrying)),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 3, "{retries:?}");
    for (kind, message, retrying) in &retries {
        assert_eq!(*kind, FailureKind::Transient);
        assert!(*retrying);
        assert!(message.contains("injected fault"), "{message}");
        assert!(message.contains("gaffer-blobs/"), "{message}");
    }
    assert_eq!(runs.of("memoed-1"), 4);
    // The step ran again on each attempt: its memo entry was never written.
    assert_eq!(runs.of("memoed-step-1"), 4);
    assert_eq!(faults.stats().of(Op::Put).1, 3);

    // A fault that lasts until the test stops it: attempts keep failing
    // (the queue itself is untouched), then the job succeeds.
    faults.fail(Ops::PUT);
    let handle = engine.submit(Memoed(2)).await.unwrap();
    let id = handle.id().to_string();
    log.wait_until(|e| {
        e.iter()
            .filter(|e| matches!(e, EngineEvent::JobFailed { run_id, retrying: true, .. } if *run_id == id))
            .count()
            >= 2
    })
    .await;
    assert_engine_up(&engine).await;
    faults.heal();
    assert_eq!(
        within_for(FAULT_LIMIT, handle.join())
            .await
            .unwrap()
            .unwrap(),
        10
    );
    let attempts = gaffer::testing::services(&engine)
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap()
        .attempts;
    let failed = log.count(
        |e| matches!(e, EngineEvent::JobFailed { run_id, retrying: true, .. } if *run_id == id),
    );
    assert_eq!(attempts as usize, failed + 1);
    assert_eq!(runs.of("memoed-2"), attempts as usize);
    assert_eq!(log.store_closed(), None);
    engine.shutdown().await.unwrap();

    eprintln!(
        "store_faults[memo faults]: {}; attempts: 4 with a 3-fault countdown, {attempts} \
         with a fault held for {failed} attempts; outcomes lost 0, duplicated 0",
        faults.stats(),
    );
}

// ---------------------------------------------------------------------------
// Lookups a first delivery does not make
// ---------------------------------------------------------------------------

/// Three memoized phases; fails for good while `fail` is set.
struct Phases {
    computes: Arc<AtomicUsize>,
    fail: Arc<std::sync::atomic::AtomicBool>,
}

impl Pipeline for Phases {
    const NAME: &'static str = "phases";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        let mut x = ctx.input;
        for phase in ["a", "b", "c"] {
            x = ctx
                .memo()
                .memoized(phase, || async {
                    self.computes.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Error>(x + 1)
                })
                .await
                .map_err(ItemError::from)?;
        }
        if self.fail.load(Ordering::SeqCst) {
            return Err(ItemError::permanent("not this time"));
        }
        Ok(x)
    }
}

/// A batch whose store fails every read of a memo entry (any GET under the
/// blob prefix): a read would fail the item's lookup.
async fn phases_engine(
    fail: bool,
) -> (
    gaffer::Engine,
    gaffer::testing::FaultControl,
    Arc<AtomicUsize>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let (store, faults) = gaffer::testing::FaultyStore::wrap(common::shared_store());
    faults.only_prefix("gaffer-blobs/");
    faults.fail(Ops::GET);
    let computes = Arc::new(AtomicUsize::new(0));
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(fail));
    let engine = common::store_builder(store, common::mock_clock())
        .pipeline(Phases {
            computes: computes.clone(),
            fail: fail.clone(),
        })
        .start()
        .await
        .unwrap();
    (engine, faults, computes, fail)
}

#[tokio::test(start_paused = true)]
async fn a_first_delivery_looks_for_no_memo_entry_in_the_store() {
    let (engine, faults, computes, _) = phases_engine(false).await;
    let report = within_for(
        FAULT_LIMIT,
        engine.batch::<Phases>("first").unwrap().run(0..20u64),
    )
    .await
    .unwrap();
    assert_eq!((report.succeeded, report.failed), (20, 0));
    assert_eq!(computes.load(Ordering::SeqCst), 60);
    assert_eq!(
        faults.injected(),
        0,
        "no memo entry was looked up in the store: {}",
        faults.stats()
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_rerun_of_a_failed_item_finds_the_entries_its_failed_run_left() {
    let (engine, faults, computes, fail) = phases_engine(true).await;
    let report = within_for(
        FAULT_LIMIT,
        engine.batch::<Phases>("again").unwrap().run([5u64]),
    )
    .await
    .unwrap();
    assert_eq!((report.succeeded, report.failed), (0, 1));
    assert_eq!(computes.load(Ordering::SeqCst), 3);
    // Reads of the entries now work; the re-run must look them up.
    faults.heal();
    fail.store(false, Ordering::SeqCst);
    let report = within_for(
        FAULT_LIMIT,
        engine.batch::<Phases>("again").unwrap().run([5u64]),
    )
    .await
    .unwrap();
    assert_eq!((report.succeeded, report.failed), (1, 0));
    assert_eq!(
        computes.load(Ordering::SeqCst),
        3,
        "the re-run found every phase its failed run left"
    );
    engine.shutdown().await.unwrap();
}
