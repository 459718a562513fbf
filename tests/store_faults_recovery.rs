//! Object-store faults the engine rides out, with `FaultyStore` (feature
//! `testing`) around a shared `InMemory`: a put outage under load (jobs, and a
//! batch), latency on every operation, and a shutdown during an outage. A
//! crash in the middle of an outage (another engine takes the store over) is
//! in `store_faults_takeover.rs`; faults on memo writes are in `memo.rs`.
//!
//! What the store layers do with a fault decides what is tested:
//!
//! - The queue's commits (submissions, claims, settlements, batch feeds) are
//!   SlateDB WAL and manifest writes. SlateDB 0.17 wraps the store in its
//!   `RetryingObjectStore`, which retries a `Generic` error with backoff
//!   (100 ms .. 1 s) **without limit** (taquba leaves
//!   `object_store_max_retries` at `None`). So a put outage *stalls* every
//!   commit until the store recovers: nothing fails, nothing closes, and no
//!   `StoreClosed` is emitted; callers wait (a submit or a join stays pending).
//! - Objects written outside SlateDB are not retried: gaffer's memo entries
//!   and large outputs, and taquba's offloaded payloads (over 256 KiB) fail at
//!   once with the injected error (an immediate memo write fails the attempt
//!   with a transient error; a large submission returns the error).
//!
//! The tests check: during an outage the engine stays up and reports nothing
//! as done that is not durable; after it every job and batch item completes
//! exactly once, with its record; latency slows but does not stop a batch; a
//! shutdown with a grace period returns during an outage.
//!
//! The outage tests run in real time: SlateDB stamps L0 SSTs from a clock
//! that starts at the wall clock and runs on tokio's clock, and refuses (at
//! the next manifest update) an L0 older than one already published, so under
//! paused time a second engine opened after virtual time ran ahead of the
//! wall clock fails with "invalid clock tick, must be monotonic" (a test
//! artifact). The queue clock is a `MockClock`, so leases never expire.
//!
//! No assertion depends on how long a sleep lasts: the tests wait for the
//! states they check (events, pool counters, the waiters' count, the fault
//! counters). The one sleep, [`OUTAGE`], keeps the store out for a while so
//! that what must not happen during an outage has the time to happen; a
//! shorter one could only let a defect through, never fail a correct engine.
//! The timeouts are bounds on what must happen (a shutdown returning, the
//! engine answering), generous for a loaded machine.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::protocol::{Outcome, OutputRef};
use gaffer::taquba::object_store::memory::InMemory;
use gaffer::taquba::{MockClock, Queue};
use gaffer::testing::Ops;
use gaffer::{BulkCtx, Pipeline, bulk::ItemError};

use common::faults::{
    Big, EventLog, FAULT_LIMIT, Keyed, OUTAGE, SLOW, Slow, Work, assert_engine_up, builder, faulty,
    lost_outcomes, started, successes, wait_settling,
};
use common::{CollectSink, Gate, Runs, within_for};

/// Doubles its input; counts runs per input. Inputs from [`HELD`] on wait for
/// the gate first.
struct Double {
    runs: Arc<Vec<AtomicUsize>>,
    gate: Gate,
}

/// The first input a [`Double`] holds until its gate opens.
const HELD: u64 = 100;

impl Pipeline for Double {
    const NAME: &'static str = "double";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        if ctx.input >= HELD {
            self.gate.wait().await;
        }
        self.runs[ctx.input as usize].fetch_add(1, Ordering::SeqCst);
        Ok(ctx.input * 2)
    }
}

fn item_runs(n: usize) -> Arc<Vec<AtomicUsize>> {
    Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect())
}

const ITEMS: usize = 200;

/// The runs among `expected` (run id, output) that `store` does not hold as
/// succeeded with that output. Read by a plain queue (not an engine: nothing
/// runs, settles or is re-queued), which opens as the store's writer: give it
/// a copy of a store an engine still uses.
async fn not_durably_succeeded<'a>(
    store: Arc<InMemory>,
    clock: Arc<MockClock>,
    expected: impl IntoIterator<Item = (&'a String, u32)>,
) -> Vec<String> {
    let queue = Queue::open_with_options(store, "queue", common::test_options(clock))
        .await
        .unwrap();
    let mut missing = Vec::new();
    for (run_id, output) in expected {
        let key = gaffer::testing::layout::keys::outcome_key(run_id);
        let record = queue.view().kv_get(&key).await.unwrap().map(|bytes| {
            gaffer::testing::layout::records::decode::<gaffer::protocol::OutcomeRecord>(
                &key, &bytes,
            )
            .unwrap()
        });
        let recorded = match record.map(|r| r.outcome) {
            Some(Outcome::Succeeded(OutputRef::Inline(bytes))) => {
                rmp_serde::from_slice::<u32>(&bytes).ok()
            }
            _ => None,
        };
        if recorded != Some(output) {
            missing.push(run_id.clone());
        }
    }
    queue.close().await.unwrap();
    missing
}

/// Wait until the store has failed more operations than `before`: the
/// engine's stalled writes were tried during the outage (and SlateDB retries
/// them).
async fn wait_faulted(faults: &gaffer::testing::FaultControl, before: u64) {
    common::eventually("a write hits the outage", FAULT_LIMIT, async || {
        faults.injected() > before
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_outage_stalls_commits_without_false_successes_and_afterwards_every_job_runs_exactly_once()
 {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let engine = builder(store, clock.clone(), &runs, &gate)
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);

    // Load: 8 jobs held in their handlers by the gate, 100 unkeyed and 20
    // keyed jobs. The outage starts while they run.
    let mut slow = Vec::new();
    for n in 0..SLOW {
        slow.push((n, engine.submit(Slow(n)).await.unwrap()));
    }
    let mut work = Vec::new();
    for n in 0..100 {
        work.push((n, engine.submit(Work(n)).await.unwrap()));
    }
    let mut keyed = Vec::new();
    for n in 0..20 {
        keyed.push((n, engine.submit(Keyed(n)).await.unwrap()));
    }
    // The output each job submitted so far must come to, by run id.
    let mut expected = HashMap::new();
    for (n, h) in &slow {
        expected.insert(h.id().to_string(), n * 7);
    }
    for (n, h) in &work {
        expected.insert(h.id().to_string(), n * 2);
    }
    for (n, h) in &keyed {
        expected.insert(h.id().to_string(), n * 3);
    }
    log.wait_until(|e| successes(e) >= 10 && started(e, "slow") >= SLOW as usize)
        .await;
    // Callers wait on the held jobs. Their waiters register while the jobs
    // still run (the gate is closed, so no settlement can have started), and
    // are told by the settlement once it commits, durably. (A join that
    // starts during the outage waits for durability too: see
    // `a_join_during_an_outage_is_not_answered_before_the_outcome_is_durable`.)
    let mut pending_joins: Vec<_> = slow
        .iter()
        .map(|(_, h)| {
            let h = h.clone();
            tokio::spawn(async move { h.join().await })
        })
        .collect();
    common::eventually("the joins wait on the held jobs", FAULT_LIMIT, async || {
        common::waiting_runs(&engine).await == SLOW as usize
    })
    .await;
    faults.fail(Ops::PUT | Ops::MULTIPART);
    // The held jobs end now: their handlers are done, their settlements
    // cannot commit.
    gate.open();
    wait_settling(&engine, "slow", SLOW as usize).await;
    let faults_at_start = faults.injected();

    // During the outage: submissions stall (they are not refused, and not
    // acknowledged).
    let mut stalled_work = Vec::new();
    for n in 100..130 {
        let e = engine.clone();
        stalled_work.push((n, tokio::spawn(async move { e.submit(Work(n)).await })));
    }
    let mut stalled_keyed = Vec::new();
    for n in 20..30 {
        let e = engine.clone();
        stalled_keyed.push((n, tokio::spawn(async move { e.submit(Keyed(n)).await })));
    }

    // A submission whose payload goes to an object outside SlateDB fails at
    // once, and its error says what failed.
    let big = tokio::time::timeout(
        Duration::from_secs(5),
        engine.submit(Big(vec![7; 300 * 1024])),
    )
    .await
    .expect("a large submission during the outage did not answer");
    let big_err = big.expect_err("a large submission during a put outage must fail");
    eprintln!("large submission during the outage: {big_err}");
    assert!(big_err.to_string().contains("injected fault"), "{big_err}");
    assert!(!big_err.is_permanent(), "{big_err}");

    // The stalled writes are tried, and fail (SlateDB retries them). Then the
    // outage lasts a while (see `OUTAGE`): every check below is of something
    // that must not happen while no write can commit.
    wait_faulted(&faults, faults_at_start).await;
    tokio::time::sleep(OUTAGE).await;
    let stats = assert_engine_up(&engine).await;
    eprintln!("pool stats during the outage: {stats:?}");
    for (n, task) in &stalled_work {
        assert!(
            !task.is_finished(),
            "submission of work-{n} answered during the outage"
        );
    }
    for (n, task) in &stalled_keyed {
        assert!(
            !task.is_finished(),
            "submission of keyed-{n} answered during the outage"
        );
    }
    for join in pending_joins.iter_mut() {
        if join.is_finished() {
            let answer = join.await;
            panic!("a join answered during the outage: {answer:?}");
        }
    }
    // The held jobs ran and wait on their settlements.
    assert_eq!(stats["slow"].settling, SLOW as usize, "{stats:?}");
    for n in 0..SLOW {
        assert_eq!(runs.of(&format!("slow-{n}")), 1);
    }
    // No false success: the held jobs' settlements began after the outage,
    // so none of them can be reported; and every job reported so far (some
    // settled before the outage, some may have been durable just as it
    // began) has its record in the store as it stands: a copy of it, read
    // without an engine, holds each one. (Nothing can be written to the
    // store meanwhile: every put fails.)
    let reported_in_outage = log.succeeded();
    for (n, h) in &slow {
        assert!(
            !reported_in_outage.iter().any(|id| id == h.id()),
            "slow-{n} was reported succeeded while no write could commit"
        );
    }
    let not_durable = not_durably_succeeded(
        Arc::new(inner.fork()),
        clock.clone(),
        reported_in_outage.iter().map(|id| {
            let output = expected.get(id).copied();
            (
                id,
                output.unwrap_or_else(|| panic!("{id}, submitted in the outage, was reported")),
            )
        }),
    )
    .await;
    assert!(
        not_durable.is_empty(),
        "reported succeeded during the outage, not durable: {not_durable:?}"
    );
    assert_eq!(log.store_closed(), None);
    let during = faults.stats();

    // The store recovers: everything stalled goes through.
    faults.heal();
    for (n, task) in stalled_work {
        work.push((n, within_for(FAULT_LIMIT, task).await.unwrap().unwrap()));
    }
    for (n, task) in stalled_keyed {
        keyed.push((n, within_for(FAULT_LIMIT, task).await.unwrap().unwrap()));
    }
    for join in pending_joins {
        within_for(FAULT_LIMIT, join)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    let mut reported = HashMap::new();
    for (n, handle) in &slow {
        assert_eq!(
            within_for(FAULT_LIMIT, handle.join())
                .await
                .unwrap()
                .unwrap(),
            n * 7
        );
        reported.insert(handle.id().to_string(), ("slow".to_string(), n * 7));
    }
    for (n, handle) in &work {
        assert_eq!(
            within_for(FAULT_LIMIT, handle.join())
                .await
                .unwrap()
                .unwrap(),
            n * 2
        );
        reported.insert(handle.id().to_string(), ("work".to_string(), n * 2));
    }
    for (n, handle) in &keyed {
        assert_eq!(
            within_for(FAULT_LIMIT, handle.join())
                .await
                .unwrap()
                .unwrap(),
            n * 3
        );
        reported.insert(handle.id().to_string(), ("keyed".to_string(), n * 3));
    }
    // A keyed resubmission is answered from the record, not run again.
    for n in 0..30 {
        let again = engine.submit(Keyed(n)).await.unwrap();
        assert!(!again.newly_submitted());
        assert_eq!(
            within_for(FAULT_LIMIT, again.join())
                .await
                .unwrap()
                .unwrap(),
            n * 3
        );
    }
    // The large job goes through once the store is back.
    let big = engine.submit(Big(vec![7; 300 * 1024])).await.unwrap();
    assert_eq!(within_for(FAULT_LIMIT, big).await.unwrap(), 300 * 1024);

    for n in 0..130 {
        assert_eq!(runs.of(&format!("work-{n}")), 1, "work-{n}");
    }
    for n in 0..30 {
        assert_eq!(runs.of(&format!("keyed-{n}")), 1, "keyed-{n}");
    }
    for n in 0..SLOW {
        assert_eq!(runs.of(&format!("slow-{n}")), 1, "slow-{n}");
    }
    let succeeded = log.succeeded();
    let distinct: HashSet<_> = succeeded.iter().collect();
    let duplicated = succeeded.len() - distinct.len();
    assert_eq!(duplicated, 0, "a job was reported succeeded twice");
    assert_eq!(distinct.len(), SLOW as usize + 130 + 30 + 1);
    assert_eq!(log.store_closed(), None);
    assert_eq!(log.lagged(), 0);
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");

    // Another engine on the raw store finds every reported outcome.
    let engine = builder(inner.clone(), clock, &runs, &gate)
        .start()
        .await
        .unwrap();
    let lost = lost_outcomes(&engine, &reported).await;
    assert_eq!(lost, 0);
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let jobs = common::totals(queue.view(), "jobs.").await;
    assert_eq!((jobs.pending, jobs.claimed), (0, 0), "{jobs:?}");
    drop(queue);
    assert!(runs.repeated().is_empty(), "{:?}", runs.repeated());
    engine.shutdown().await.unwrap();

    eprintln!(
        "store_faults[jobs outage]: {} faults injected during a {}s put outage \
         ({during}); store totals: {}; jobs completed {} ({SLOW} held in handlers at the \
         outage, 130 work, 30 keyed, 1 big); reported by the end of the outage {} (each \
         durable); lost outcomes {lost}; duplicated outcomes {duplicated}; handler re-runs {}",
        during.injected,
        OUTAGE.as_secs(),
        faults.stats(),
        distinct.len(),
        reported_in_outage.len(),
        runs.repeated().len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_interrupted_by_a_put_outage_completes_every_item_exactly_once() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let per_item = item_runs(ITEMS);
    let gate = Gate::closed();
    let engine = builder(store, clock.clone(), &runs, &Gate::opened())
        .pipeline(Double {
            runs: per_item.clone(),
            gate: gate.clone(),
        })
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);
    let sink = CollectSink::new();
    let batch = engine.batch::<Double>("outage").unwrap().sink(sink.clone());
    let run = {
        let engine = engine.clone();
        let sink = sink.clone();
        tokio::spawn(async move {
            engine
                .batch::<Double>("outage")
                .unwrap()
                .sink(sink)
                .run(0..ITEMS as u64)
                .await
        })
    };

    // The items below HELD settle; the others wait in their handlers until
    // the outage has started, then end with settlements that cannot commit.
    // So exactly the HELD items are reported settled, now and until the
    // store heals.
    sink.wait_for(HELD as usize, FAULT_LIMIT).await;
    faults.fail(Ops::PUT | Ops::MULTIPART);
    gate.open();
    let settled_before = sink.len();
    assert_eq!(settled_before, HELD as usize);
    // The held items ran and wait on their settlements, whose writes fail.
    wait_settling(&engine, "double", ITEMS - HELD as usize).await;
    wait_faulted(&faults, 0).await;
    // The outage lasts a while (see `OUTAGE`): the checks below are of what
    // must not happen while no write can commit.
    tokio::time::sleep(OUTAGE).await;
    let stats = assert_engine_up(&engine).await;
    assert_eq!(
        sink.len(),
        settled_before,
        "items were reported settled while no write could commit"
    );
    assert!(!run.is_finished());
    assert_eq!(stats["double"].settling, ITEMS - HELD as usize, "{stats:?}");
    let progress = batch.progress().await.expect("the run is active");
    assert_eq!(progress.completed, HELD, "{progress:?}");
    let during = faults.stats();
    assert!(during.injected > 0, "{during}");

    faults.heal();
    let report = within_for(FAULT_LIMIT, run).await.unwrap().unwrap();
    assert_eq!(
        (
            report.total,
            report.succeeded,
            report.failed,
            report.cancelled
        ),
        (ITEMS as u64, ITEMS as u64, 0, 0),
        "{report:?}"
    );
    let status = batch.status().await.unwrap();
    assert_eq!(
        (
            status.total,
            status.succeeded,
            status.failed,
            status.pending
        ),
        (ITEMS as u64, ITEMS as u64, 0, 0),
        "{status:?}"
    );
    let records = sink.records();
    let keys: HashSet<_> = records.iter().map(|r| r.key.clone()).collect();
    let duplicated = records.len() - keys.len();
    assert_eq!(duplicated, 0, "an item was streamed twice");
    assert_eq!(keys.len(), ITEMS);
    assert!(records.iter().all(|r| r.status == "succeeded"));
    let reruns: Vec<_> = (0..ITEMS)
        .filter(|&i| per_item[i].load(Ordering::SeqCst) != 1)
        .collect();
    assert!(reruns.is_empty(), "items not run exactly once: {reruns:?}");
    assert_eq!(log.store_closed(), None);
    engine.shutdown().await.unwrap();

    // The records survive: a fresh engine on the raw store reads them.
    let engine = builder(inner.clone(), clock, &runs, &Gate::opened())
        .pipeline(Double {
            runs: per_item.clone(),
            gate: gate.clone(),
        })
        .start()
        .await
        .unwrap();
    let status = engine
        .batch::<Double>("outage")
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(
        (status.succeeded, status.pending),
        (ITEMS as u64, 0),
        "{status:?}"
    );
    engine.shutdown().await.unwrap();

    eprintln!(
        "store_faults[batch outage]: {} faults injected during a {}s put outage; \
         store totals: {}; items completed {} of {ITEMS} ({} settled before the outage, the rest held in handlers into it); \
         lost items 0; duplicated items {duplicated}; item re-runs {}",
        during.injected,
        OUTAGE.as_secs(),
        faults.stats(),
        status.succeeded,
        settled_before,
        reruns.len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_5ms_of_latency_on_every_store_operation_a_batch_and_jobs_still_complete() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    faults.set_latency(Duration::from_millis(5));
    let clock = common::mock_clock();
    let runs = Runs::default();
    let per_item = item_runs(ITEMS);
    let started = std::time::Instant::now();
    let engine = builder(store, clock, &runs, &Gate::opened())
        .pipeline(Double {
            runs: per_item.clone(),
            gate: Gate::opened(),
        })
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Double>("slow").unwrap().sink(sink.clone());
    let jobs: Vec<_> = futures_util::future::join_all((0..20).map(|n| engine.submit(Work(n))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let report = tokio::time::timeout(Duration::from_secs(120), batch.run(0..ITEMS as u64))
        .await
        .expect("the batch did not complete in 120 s of real time")
        .unwrap();
    assert_eq!(
        (report.succeeded, report.failed),
        (ITEMS as u64, 0),
        "{report:?}"
    );
    for (n, h) in jobs.into_iter().enumerate() {
        let v = tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v, n as u32 * 2);
    }
    assert_eq!(sink.len(), ITEMS);
    let reruns = (0..ITEMS)
        .filter(|&i| per_item[i].load(Ordering::SeqCst) != 1)
        .count();
    assert_eq!(reruns, 0);
    assert_eq!(faults.injected(), 0);
    engine.shutdown().await.unwrap();
    eprintln!(
        "store_faults[latency 5 ms]: {ITEMS} items and 20 jobs completed in {:?} \
         (batch run {:?}); {}; item re-runs {reruns}",
        started.elapsed(),
        report.elapsed,
        faults.stats(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_grace_period_returns_during_a_put_outage() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let engine = builder(store, clock.clone(), &runs, &gate)
        .shutdown_grace(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let log = EventLog::follow(&engine);
    let handle = engine.submit(Slow(1)).await.unwrap();
    log.wait_until(|e| started(e, "slow") >= 1).await;
    faults.fail(Ops::PUT | Ops::MULTIPART);
    gate.open();
    assert_eq!(wait_settling(&engine, "slow", 1).await["slow"].settling, 1);

    let mut shutdown = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.shutdown().await })
    };
    // A bound, not a wait: the shutdown must return within its 1 s grace
    // period and some slack, while the store is still out.
    let bounded = tokio::time::timeout(Duration::from_secs(10), &mut shutdown).await;
    // Let it end either way, then check the job is not lost.
    faults.heal();
    let returned = bounded.is_ok();
    let report = match bounded {
        Ok(report) => report.unwrap(),
        Err(_) => within_for(FAULT_LIMIT, shutdown).await.unwrap(),
    };
    eprintln!(
        "store_faults[shutdown in outage]: returned within grace + 9 s: {}; report after \
         the store recovered: {report:?}",
        returned
    );
    let engine = builder(inner.clone(), clock, &runs, &gate)
        .start()
        .await
        .unwrap();
    let value = within_for(
        FAULT_LIMIT,
        engine.handle::<Slow>(handle.id()).unwrap().join(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(value, 7);
    engine.shutdown().await.unwrap();
    assert!(
        returned,
        "shutdown with a 1 s grace period did not return in 10 s of a put outage"
    );
}
