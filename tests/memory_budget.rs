//! The memory budget (`EngineBuilder::memory_budget`, issue #30 §1): a
//! batch's feeding is paced by the process's resident memory. A test
//! process is always over a budget of 1 MiB from its first reading, before
//! its run could measure a free rate, so with it a batch is fed at most at
//! the pacer's default reference (2 000 items a second: less if the
//! process's memory grows meanwhile, never under a tenth of it), and must
//! still run every item exactly once; without a budget the same batch is
//! not paced. The bounds checked are those the pacer guarantees whatever
//! the process's memory does: no faster than the reference, no slower than
//! the floor (on paused time), so a loaded machine cannot fail them; the
//! law itself is tested in `batches::budget`.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::bulk::{Probe, UNLUCKY, probe};
use common::{shut_down_cleanly, within};
use gaffer::{BulkReport, Error};

/// The smallest budget the settings take: any test process is over it.
const TINY: u64 = 1 << 20;
/// The pacer's default reference rate: a paced run with no measured
/// reference is fed no faster (`DEFAULT_REFERENCE` in `batches::budget`).
const CEILING_PER_SEC: u64 = 2_000;
/// Its floor, a tenth of that (`FLOOR`).
const FLOOR_PER_SEC: u64 = 200;
/// Tokens a paced run starts with: a tenth of a second of its rate.
const BURST: u64 = CEILING_PER_SEC / 10;

fn counts(r: &BulkReport) -> (u64, u64, u64) {
    (r.total, r.succeeded, r.failed)
}

/// Run `n` items (none unlucky, none blocking) on `builder`: when each
/// started (since the run began), the report, and the probe's runs/keys.
async fn run_items(
    builder: gaffer::EngineBuilder,
    n: u64,
) -> (Vec<Duration>, BulkReport, usize, HashSet<String>) {
    let (p, shared, mut rx) = probe();
    // Inputs from `BLOCKING` on wait for the gate: none waits here.
    shared.gate.open();
    let engine = builder.pipeline(p).start().await.unwrap();
    let batch = engine.batch::<Probe>("budgeted").unwrap();
    let inputs: Vec<u64> = (100..100 + n).collect();
    assert!(!inputs.contains(&UNLUCKY));
    let began = tokio::time::Instant::now();
    let run = tokio::spawn(async move { batch.run(inputs).await });
    let mut starts = Vec::new();
    for _ in 0..n {
        within(rx.recv()).await.expect("probe dropped");
        starts.push(began.elapsed());
    }
    let report = within(run).await.unwrap().unwrap();
    let keys: HashSet<String> = shared.keys().into_iter().collect();
    let runs = shared.runs();
    shut_down_cleanly(&engine).await;
    (starts, report, runs, keys)
}

/// Item i (0-based) may start once i + 1 items were allowed: at most the
/// burst plus the ceiling rate times the time since the run began.
fn assert_no_faster_than_the_ceiling(starts: &[Duration]) {
    for (i, at) in starts.iter().enumerate() {
        let allowed_before = (i as u64 + 1).saturating_sub(BURST + 1);
        let earliest = Duration::from_micros(allowed_before * 1_000_000 / CEILING_PER_SEC);
        // 1 ms for the rounding of the waits.
        assert!(
            *at + Duration::from_millis(1) >= earliest,
            "item {i} started at {at:?}, before {earliest:?}: the budget did not pace the feeding"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn over_the_budget_a_batch_is_paced_and_every_item_runs_once() {
    let n = 2_000;
    let builder = common::memory_builder(common::mock_clock()).memory_budget(Some(TINY));
    let (starts, report, runs, keys) = run_items(builder, n).await;
    assert_eq!(counts(&report), (n, n, 0));
    assert_eq!(runs, n as usize, "an item ran twice");
    assert_eq!(keys.len(), n as usize);
    assert_no_faster_than_the_ceiling(&starts);
    // Paced, and never stalled: at the floor the last item would start
    // at (n - burst) / 200 s.
    let last = *starts.last().unwrap();
    let floor_time = Duration::from_millis((n - BURST) * 1000 / FLOOR_PER_SEC);
    assert!(
        last <= floor_time + Duration::from_secs(1),
        "the last item started at {last:?}, later than the floor's pace allows ({floor_time:?})"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_the_same_batch_is_not_paced() {
    let n = 2_000;
    let builder = common::memory_builder(common::mock_clock()).memory_budget(None);
    let (starts, report, runs, keys) = run_items(builder, n).await;
    assert_eq!(counts(&report), (n, n, 0));
    assert_eq!(runs, n as usize);
    assert_eq!(keys.len(), n as usize);
    // Paced, its last item could not start before (n - burst) / 2 000 s.
    let last = *starts.last().unwrap();
    let paced = Duration::from_millis((n - BURST) * 1000 / CEILING_PER_SEC);
    assert!(
        last < paced / 2,
        "the last item started at {last:?}: paced without a budget (paced: {paced:?} at least)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_local_disk_a_tiny_budget_slows_feeding_and_every_item_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1_000;
    let builder = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .flush_interval(Duration::from_millis(1))
        .memory_budget(Some(TINY));
    let (starts, report, runs, keys) = run_items(builder, n).await;
    assert_eq!(counts(&report), (n, n, 0));
    assert_eq!(runs, n as usize, "an item ran twice");
    assert_eq!(keys.len(), n as usize);
    assert_no_faster_than_the_ceiling(&starts);
}

#[tokio::test]
async fn a_budget_under_1_mib_is_refused() {
    let started = common::memory_builder(common::mock_clock())
        .memory_budget(Some(1000))
        .start()
        .await;
    match started {
        Err(Error::InvalidConfig(m)) => assert!(m.contains("memory_budget"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a 1000-byte budget was accepted"),
    }
}
