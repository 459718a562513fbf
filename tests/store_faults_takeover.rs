//! A crash in the middle of an object-store outage, with `FaultyStore`
//! (feature `testing`) around a shared `InMemory`: the engine's writes fail
//! for good, and another engine takes the store over (its open fences the
//! first). No outcome the first engine reported is lost or duplicated, the
//! fenced engine commits nothing once its store is back, and a join that
//! starts while a settlement waits for the WAL is not answered from the
//! record SlateDB already holds in memory (taquba's reads include data not
//! yet durable) but once the commit is durable.
//!
//! Why a put outage stalls commits, and why these tests run in real time:
//! see `store_faults_recovery.rs`. As there, no assertion depends on how long
//! a sleep lasts: [`OUTAGE`] only gives what must not happen the time to.

mod common;

use std::collections::{HashMap, HashSet};

use gaffer::EngineEvent;
use gaffer::testing::Ops;

use common::faults::{
    EventLog, FAULT_LIMIT, Keyed, OUTAGE, SLOW, Slow, Stamp, Work, builder, faulty, lost_outcomes,
    started, successes, wait_settling,
};
use common::{Gate, Runs, within_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_an_outage_loses_and_duplicates_no_reported_outcome() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let first = builder(store, clock.clone(), &runs, &gate)
        .start()
        .await
        .unwrap();
    let log1 = EventLog::follow(&first);

    let mut jobs = Vec::new(); // (run id, name, expected)
    for n in 0..SLOW {
        let h = first.submit(Slow(n)).await.unwrap();
        jobs.push((h.id().to_string(), format!("slow-{n}"), n * 7));
    }
    for n in 0..60 {
        let h = first.submit(Work(n)).await.unwrap();
        jobs.push((h.id().to_string(), format!("work-{n}"), n * 2));
    }
    for n in 0..20 {
        let h = first.submit(Keyed(n)).await.unwrap();
        jobs.push((h.id().to_string(), format!("keyed-{n}"), n * 3));
    }
    log1.wait_until(|e| successes(e) >= 10 && started(e, "slow") >= SLOW as usize)
        .await;
    // Writes fail from now on, for this engine for good: it "crashes" in the
    // middle of the outage. Reads still work.
    faults.fail(Ops::WRITES);
    // The held jobs finish their handlers; their settlements cannot commit.
    gate.open();
    wait_settling(&first, "slow", SLOW as usize).await;

    // Another engine takes the store over (its open fences the first and
    // re-queues the jobs the first had claimed).
    let second = builder(inner.clone(), clock.clone(), &runs, &gate);
    let log2 = EventLog::follow_from(second.subscribe());
    let second = second.start().await.unwrap();
    let mut reported = HashMap::new();
    for (run_id, name, expected) in &jobs {
        let v = if name.starts_with("work") {
            within_for(FAULT_LIMIT, second.handle::<Work>(run_id).unwrap().join())
                .await
                .unwrap()
                .unwrap()
        } else if name.starts_with("slow") {
            within_for(FAULT_LIMIT, second.handle::<Slow>(run_id).unwrap().join())
                .await
                .unwrap()
                .unwrap()
        } else {
            within_for(FAULT_LIMIT, second.handle::<Keyed>(run_id).unwrap().join())
                .await
                .unwrap()
                .unwrap()
        };
        assert_eq!(v, *expected, "{name}");
        let kind = name.split('-').next().unwrap().to_string();
        reported.insert(run_id.clone(), (kind, *expected));
    }

    // The first engine notices the fence (SlateDB's manifest poll reads, and
    // reads work) and stops.
    log1.wait_until(|e| {
        e.iter()
            .any(|e| matches!(e, EngineEvent::StoreClosed { .. }))
    })
    .await;
    let reason = log1.store_closed().unwrap();
    eprintln!("first engine: StoreClosed: {reason}");
    // Everything the first engine reported, before and during the takeover.
    let reported_by_first: HashSet<String> = log1.succeeded().into_iter().collect();

    // Its store comes back: nothing it still had in flight may commit. (Kept
    // up for as long as an outage, to give a stalled settlement the time to
    // go through wrongly.)
    faults.heal();
    tokio::time::sleep(OUTAGE).await;
    let late: HashSet<String> = log1.succeeded().into_iter().collect();
    assert_eq!(
        late, reported_by_first,
        "the fenced engine reported a success after its store came back"
    );

    // Every job has exactly one reported success across both engines, and
    // each job the first engine reported ran exactly once.
    let mut all = log1.succeeded();
    all.extend(log2.succeeded());
    let mut per_job: HashMap<String, usize> = HashMap::new();
    for id in &all {
        *per_job.entry(id.clone()).or_default() += 1;
    }
    let duplicated = per_job.values().filter(|n| **n > 1).count();
    let missing = jobs
        .iter()
        .filter(|(id, _, _)| !per_job.contains_key(id))
        .count();
    assert_eq!(duplicated, 0, "{per_job:?}");
    assert_eq!(missing, 0);
    let mut interrupted = 0;
    for (run_id, name, _) in &jobs {
        let n = runs.of(name);
        if reported_by_first.contains(run_id) {
            assert_eq!(
                n, 1,
                "{name} was reported by the first engine and ran again"
            );
        } else {
            assert!((1..=2).contains(&n), "{name} ran {n} times");
            interrupted += usize::from(n == 2);
        }
        // A held job finished its handler on the first engine, whose
        // settlement never committed: the takeover ran it again (at least
        // once), and recorded it once.
        if name.starts_with("slow") {
            assert_eq!(n, 2, "{name}");
        }
    }
    // And the records agree.
    let lost = lost_outcomes(&second, &reported).await;
    assert_eq!(lost, 0);
    let report = second.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    let _ = first.shutdown().await;

    eprintln!(
        "store_faults[crash mid-outage]: store totals of the first engine: {}; \
         jobs {} ({} reported by the first engine before it was fenced, {} finished by the \
         takeover engine, {interrupted} of them re-run after an interrupted attempt); \
         lost outcomes {lost}; duplicated outcomes {duplicated}; first engine: {reason}",
        faults.stats(),
        jobs.len(),
        reported_by_first.len(),
        log2.succeeded().len(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_during_an_outage_is_not_answered_before_the_outcome_is_durable() {
    let inner = common::shared_store();
    let (store, faults) = faulty(&inner);
    let clock = common::mock_clock();
    let runs = Runs::default();
    let gate = Gate::closed();
    let first = builder(store, clock.clone(), &runs, &gate)
        .start()
        .await
        .unwrap();
    let log1 = EventLog::follow(&first);
    let handle = first.submit(Stamp(5)).await.unwrap();
    log1.wait_until(|e| started(e, "stamp") >= 1).await;
    faults.fail(Ops::WRITES);
    gate.open();
    // The handler returned; its settlement waits for a WAL write that fails.
    let stats = wait_settling(&first, "stamp", 1).await;
    assert_eq!(stats["stamp"].settling, 1, "{stats:?}");
    assert_eq!(log1.succeeded().len(), 0);

    // A caller asks now. Nothing is durable, so it must wait (or be told the
    // job is still running): it is given as long as an outage to answer
    // wrongly.
    let answered = tokio::time::timeout(OUTAGE, handle.join()).await;
    let fetched = handle.outcome().await.unwrap();
    let status = handle.status().await.unwrap();
    let seen = gaffer::testing::services(&first)
        .outcome(handle.id())
        .await
        .unwrap();

    // The process dies in the outage: another engine takes the store over.
    let second = builder(inner.clone(), clock, &runs, &gate)
        .start()
        .await
        .unwrap();
    let durable_value = within_for(
        FAULT_LIMIT,
        second.handle::<Stamp>(handle.id()).unwrap().join(),
    )
    .await
    .unwrap()
    .unwrap();
    let durable = gaffer::testing::services(&second)
        .outcome(handle.id())
        .await
        .unwrap()
        .unwrap();
    let handler_runs = runs.of("stamp-5");
    eprintln!(
        "store_faults[join during outage]: the first engine answered join = {answered:?}, \
         outcome = {fetched:?}, status = {status:?} from record {seen:?}; the durable \
         record after the takeover: value {durable_value}, attempts {}, finished_at_ms {}; \
         handler runs {handler_runs}",
        durable.attempts, durable.finished_at_ms,
    );
    // The first engine was fenced by the takeover; once its store is back its
    // stalled settlement fails and it can stop.
    log1.wait_until(|e| {
        e.iter()
            .any(|e| matches!(e, EngineEvent::StoreClosed { .. }))
    })
    .await;
    faults.heal();
    second.shutdown().await.unwrap();
    let _ = within_for(FAULT_LIMIT, first.shutdown()).await;

    if let Ok(Ok(Ok(told))) = &answered {
        assert_eq!(
            *told, durable_value,
            "the caller was told the job's output is {told}, the durable record says \
             {durable_value}: the told outcome was lost"
        );
    }
    assert!(
        answered.is_err(),
        "a join answered {answered:?} during the outage, before the outcome was durable \
         (the handler ran {handler_runs} times)"
    );
    assert_eq!(fetched, None, "outcome answered a non-durable outcome");
    assert_ne!(status, gaffer::job::JobState::Succeeded);
}
