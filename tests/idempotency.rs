//! Idempotency keys: one key is one job, whatever races it and however it
//! ended.
//!
//! 1. After taquba-workflow 0.11's reference suite: unkeyed submissions are
//!    always new; a key collapses duplicates while the job is live and
//!    answers from its record once it ended (success or failure) until
//!    retention removes it; the same key with another payload is refused;
//!    payload keys; and a stray job that carries a run's id (or an unknown
//!    or invalid one) never runs, and neither replaces nor ends that run.
//! 2. The race: the reference had a window where a keyed job that had just
//!    finished ran again (its duplicate check was outside its lock); these
//!    tests prove gaffer has none.
//! 3. Finished jobs, failures and collisions: duplicates answer from the
//!    record, two types with one key string collide, reserved headers.
//! 4. A keyed job's id, computed from its key alone.
//! 5. A key answered from its record after a reopen of a local-disk store.
//!
//! Every test but the race and the reopen runs under paused tokio time on
//! the in-memory store with a `MockClock`, and waits for events or handles,
//! never for wall time. Keys across processes and stores are tested where
//! those are: `client.rs`, `client_kill.rs`, `s3.rs`, `shards.rs`,
//! `cluster.rs`.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::taquba::{EnqueueOptions, MockClock};
use gaffer::{
    Engine, EngineEvent, Error, Job, JobContext, JobHandle, SubmitOptions, job::FailureKind,
    job::JobState, job::payload_idempotency_key, protocol::SubmitRequest,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use common::jobs::{AlwaysFails, Factor, Probe, Scale, join, wait_started};
use common::{Gate, LIMIT, Runs, eventually, shut_down_cleanly, within};

// ---------------------------------------------------------------------------
// 1. The reference suite.

/// Lowercase hex SHA-256, computed here independently of the engine.
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Keyed job: counts its runs, waits for the probe's gate, returns `value * 2`.
#[derive(Serialize, Deserialize)]
struct Keyed {
    key: String,
    value: u64,
}

impl Keyed {
    fn new(key: &str, value: u64) -> Self {
        Self {
            key: key.into(),
            value,
        }
    }
}

impl Job for Keyed {
    const NAME: &'static str = "keyed";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        let probe = ctx.state::<Arc<Probe>>();
        probe.runs.fetch_add(1, Ordering::SeqCst);
        probe.gate.wait().await;
        Ok(self.value * 2)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// Keyed by its own payload.
#[derive(Serialize, Deserialize)]
struct ByPayload {
    a: u32,
    b: String,
}

impl Job for ByPayload {
    const NAME: &'static str = "by-payload";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u32, Self::Error> {
        Ok(self.a)
    }
    fn idempotency_key(&self) -> Option<String> {
        payload_idempotency_key(self).ok()
    }
}

#[tokio::test(start_paused = true)]
async fn submit_without_idempotency_key_is_always_newly_submitted() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Scale>()
        .state(Factor(1))
        .start()
        .await
        .unwrap();

    let a = engine.submit(Scale { x: 7 }).await.unwrap();
    let b = engine.submit(Scale { x: 7 }).await.unwrap();
    assert!(a.newly_submitted(), "{a:?}");
    assert!(b.newly_submitted(), "{b:?}");
    assert_ne!(a.id(), b.id());
    assert_eq!(join(&a).await, Ok(7));
    assert_eq!(join(&b).await, Ok(7));

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn idempotency_key_collapses_duplicate_submissions() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let first = engine.submit(Keyed::new("order-1", 5)).await.unwrap();
    let again = engine.submit(Keyed::new("order-1", 5)).await.unwrap();
    let other = engine.submit(Keyed::new("order-2", 5)).await.unwrap();

    let state = first.status().await.unwrap();
    assert!(
        matches!(state, JobState::Queued | JobState::Running),
        "the first job is still live: {state:?}"
    );
    assert!(first.newly_submitted());
    assert!(!again.newly_submitted(), "same key while live is not new");
    assert_eq!(again.id(), first.id());
    assert!(other.newly_submitted());
    assert_ne!(other.id(), first.id());

    probe.gate.open();
    assert_eq!(join(&first).await, Ok(10));
    assert_eq!(join(&other).await, Ok(10));
    assert_eq!(probe.runs(), 2, "one run per distinct key");

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_submission_joins_the_in_flight_job() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let first = engine.submit(Keyed::new("k", 21)).await.unwrap();
    wait_started(&mut events, first.id(), 1).await;
    let duplicate = engine.submit(Keyed::new("k", 21)).await.unwrap();
    assert!(!duplicate.newly_submitted());
    assert_eq!(duplicate.id(), first.id());
    assert_eq!(duplicate.status().await.unwrap(), JobState::Running);

    probe.gate.open();
    let (a, b) = tokio::join!(join(&first), join(&duplicate));
    assert_eq!(a, Ok(42));
    assert_eq!(b, Ok(42));
    assert_eq!(probe.runs(), 1, "the handler ran once for both submissions");

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn input_mismatch_on_same_key_different_payload() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let expected_id = sha256_hex(b"invoice-9");

    let first = engine.submit(Keyed::new("invoice-9", 1)).await.unwrap();
    assert_eq!(first.id(), expected_id, "a keyed id is hex sha256(key)");

    // While the job is live.
    match engine.submit(Keyed::new("invoice-9", 2)).await {
        Err(Error::InputMismatch(id)) => assert_eq!(id, expected_id),
        other => panic!("expected InputMismatch, got {other:?}"),
    }
    // After it ended (answered from the outcome record).
    probe.gate.open();
    assert_eq!(join(&first).await, Ok(2));
    match engine.submit(Keyed::new("invoice-9", 2)).await {
        Err(Error::InputMismatch(id)) => assert_eq!(id, expected_id),
        other => panic!("expected InputMismatch, got {other:?}"),
    }
    assert_eq!(probe.runs(), 1, "a mismatched submission never runs");

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn idempotency_key_short_circuits_to_cached_success_after_completion() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let first = engine.submit(Keyed::new("done-once", 8)).await.unwrap();
    assert_eq!(join(&first).await, Ok(16));
    assert_eq!(first.status().await.unwrap(), JobState::Succeeded);

    let again = engine.submit(Keyed::new("done-once", 8)).await.unwrap();
    assert!(!again.newly_submitted());
    assert_eq!(again.id(), first.id());
    assert_eq!(join(&again).await, Ok(16));
    assert_eq!(again.outcome().await.unwrap(), Some(Ok(16)));
    assert_eq!(probe.runs(), 1, "the cached outcome answered; no rerun");

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn idempotency_key_short_circuits_to_cached_failure_after_completion() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
        .register::<AlwaysFails>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let job = || AlwaysFails {
        key: Some("fails-once".into()),
        message: "nope".into(),
        permanent: true,
    };

    let first = engine.submit(job()).await.unwrap();
    let failure = join(&first).await.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Permanent);
    assert_eq!(failure.message, "nope");

    let again = engine.submit(job()).await.unwrap();
    assert!(!again.newly_submitted());
    assert_eq!(again.id(), first.id());
    assert_eq!(join(&again).await, Err(failure));
    assert_eq!(probe.runs(), 1, "the cached failure answered; no rerun");

    shut_down_cleanly(&engine).await;
}

/// An engine running `Keyed` (always open) whose outcome records are kept 60 s.
async fn keyed_with_retention() -> (Arc<MockClock>, Arc<Probe>, Engine) {
    let clock = common::mock_clock();
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock.clone())
        .register::<Keyed>()
        .state(probe.clone())
        .retention(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    (clock, probe, engine)
}

#[tokio::test(start_paused = true)]
async fn idempotent_resubmit_after_result_swept_reruns() {
    let (clock, probe, engine) = keyed_with_retention().await;

    let first = engine.submit(Keyed::new("swept", 3)).await.unwrap();
    assert_eq!(join(&first).await, Ok(6));
    assert!(
        !engine
            .submit(Keyed::new("swept", 3))
            .await
            .unwrap()
            .newly_submitted(),
        "before the sweep the record answers"
    );

    clock.advance(Duration::from_secs(61));
    engine.sweep_now().await.unwrap();
    assert!(
        matches!(first.status().await, Err(gaffer::Error::JobNotFound(_))),
        "the record was swept"
    );

    let again = engine.submit(Keyed::new("swept", 3)).await.unwrap();
    assert!(again.newly_submitted(), "the swept job is submitted anew");
    assert_eq!(again.id(), first.id());
    assert_eq!(join(&again).await, Ok(6));
    assert_eq!(probe.runs(), 2, "the handler ran again");

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_resubmission_answered_from_the_record_joins_from_it_without_reading_again() {
    let (clock, probe, engine) = keyed_with_retention().await;

    let first = engine.submit(Keyed::new("carried", 4)).await.unwrap();
    assert_eq!(join(&first).await, Ok(8));
    let again = engine.submit(Keyed::new("carried", 4)).await.unwrap();
    assert!(!again.newly_submitted(), "answered from the record");

    // Retention removes the record: a join that read it now would find no job.
    clock.advance(Duration::from_secs(61));
    engine.sweep_now().await.unwrap();
    assert!(
        matches!(again.status().await, Err(gaffer::Error::JobNotFound(_))),
        "the record was swept"
    );
    match first.join().await {
        Err(Error::JobNotFound(id)) => assert_eq!(id, first.id()),
        other => {
            panic!("a handle without the record reads it: expected JobNotFound, got {other:?}")
        }
    }
    assert_eq!(
        join(&again).await,
        Ok(8),
        "the record the submission read answers"
    );
    assert_eq!(join(&again.clone()).await, Ok(8), "and so does a clone");
    assert_eq!(probe.runs(), 1);

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn payload_idempotency_key_is_stable_and_distinguishes_payloads() {
    let job = ByPayload {
        a: 1,
        b: "x".into(),
    };
    let key = payload_idempotency_key(&job).unwrap();
    let (name, hex) = key.split_once(':').expect("NAME:hex");
    assert_eq!(name, ByPayload::NAME);
    assert_eq!(hex.len(), 64, "{key}");
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "lowercase hex: {key}"
    );
    assert_eq!(
        hex,
        sha256_hex(&rmp_serde::to_vec_named(&job).unwrap()),
        "sha256 of the MessagePack payload"
    );
    let same = ByPayload {
        a: 1,
        b: "x".into(),
    };
    assert_eq!(
        payload_idempotency_key(&same).unwrap(),
        key,
        "deterministic"
    );
    for different in [
        ByPayload {
            a: 2,
            b: "x".into(),
        },
        ByPayload {
            a: 1,
            b: "y".into(),
        },
    ] {
        assert_ne!(payload_idempotency_key(&different).unwrap(), key);
    }

    // Used as a job's key: equal payloads are one job, different ones are not.
    let engine = common::memory_builder(common::mock_clock())
        .register::<ByPayload>()
        .start()
        .await
        .unwrap();
    let a = engine.submit(job).await.unwrap();
    let b = engine.submit(same).await.unwrap();
    let c = engine
        .submit(ByPayload {
            a: 2,
            b: "x".into(),
        })
        .await
        .unwrap();
    assert_eq!(a.id(), sha256_hex(key.as_bytes()));
    assert!(a.newly_submitted());
    assert!(!b.newly_submitted());
    assert_eq!(b.id(), a.id());
    assert!(c.newly_submitted());
    assert_ne!(c.id(), a.id());
    assert_eq!(join(&a).await, Ok(1));
    assert_eq!(join(&c).await, Ok(2));

    shut_down_cleanly(&engine).await;
}

// ---------------------------------------------------------------------------
// A job runs, and its settlement ends a run, only when the run's record
// names its queue job.

/// Enqueue by hand a job that carries `run_header` as its `gaffer.run`,
/// with `payload`.
async fn enqueue_by_hand(engine: &Engine, run_header: &str, payload: Vec<u8>) -> String {
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    let headers = [
        ("gaffer.type".to_string(), "keyed".to_string()),
        ("gaffer.run".to_string(), run_header.to_string()),
    ]
    .into_iter()
    .collect();
    queue
        .enqueue_with(
            "jobs.keyed",
            payload,
            EnqueueOptions::default().headers(headers),
        )
        .await
        .unwrap()
}

/// Enqueue by hand a job that carries `run_id` but does not decode as a
/// `Keyed`.
async fn enqueue_impostor(engine: &Engine, run_id: &str) -> String {
    enqueue_by_hand(engine, run_id, b"\xc1 not a job".to_vec()).await
}

/// The impostor was dead-lettered as its own failure.
async fn impostor_settled(engine: &Engine) {
    eventually("the impostor is dead-lettered", LIMIT, async || {
        let queue = gaffer::testing::raw_queue(engine).unwrap();
        queue.view().stats("jobs.keyed").await.unwrap().dead == 1
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_stray_job_carrying_a_finished_runs_id_does_not_replace_its_outcome() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(Probe::new(Gate::opened()))
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Keyed::new("stray", 1)).await.unwrap();
    assert_eq!(within(handle.clone()).await.unwrap(), 2);
    enqueue_impostor(&engine, handle.id()).await;
    impostor_settled(&engine).await;
    let again = engine.submit(Keyed::new("stray", 1)).await.unwrap();
    assert!(!again.newly_submitted());
    assert_eq!(within(again).await.unwrap(), 2, "the success was replaced");
    engine.shutdown().await.unwrap();
}

/// A queue job put on a type's queue by hand, with a valid payload of the
/// type, carrying `run_header` as its `gaffer.run`.
async fn enqueue_runnable_impostor(engine: &Engine, run_header: &str) -> String {
    let payload = rmp_serde::to_vec_named(&Keyed::new("impostor", 7)).unwrap();
    enqueue_by_hand(engine, run_header, payload).await
}

#[tokio::test(start_paused = true)]
async fn a_hand_made_job_carrying_a_run_id_it_does_not_own_never_runs_user_code() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let finished = engine.submit(Keyed::new("owned", 1)).await.unwrap();
    assert_eq!(within(finished.clone()).await.unwrap(), 2);
    assert_eq!(probe.runs.load(Ordering::SeqCst), 1);
    // The id of a finished run, a path, and a well-formed id no run has.
    let unknown = gaffer::taquba::Queue::open(
        Arc::new(gaffer::taquba::object_store::memory::InMemory::new()),
        "scratch",
    )
    .await
    .unwrap();
    let unknown_id = unknown.next_job_id();
    unknown.close().await.unwrap();
    for header in [finished.id(), "../../etc/passwd", unknown_id.as_str()] {
        enqueue_runnable_impostor(&engine, header).await;
    }
    eventually("the three impostors are dead-lettered", LIMIT, async || {
        let queue = gaffer::testing::raw_queue(&engine).unwrap();
        queue.view().stats("jobs.keyed").await.unwrap().dead == 3
    })
    .await;
    assert_eq!(
        probe.runs.load(Ordering::SeqCst),
        1,
        "the user's code ran for a job gaffer did not submit"
    );
    // Each is dead-lettered with a reason saying why, and the finished run
    // keeps its outcome.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let dead = queue
        .view()
        .dead_jobs("jobs.keyed", None, 10)
        .await
        .unwrap();
    let reasons: Vec<String> = dead
        .iter()
        .map(|j| j.last_error.clone().unwrap_or_default())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("invalid run id")),
        "{reasons:?}"
    );
    assert_eq!(
        reasons
            .iter()
            .filter(|r| r.contains("is not that run's live job"))
            .count(),
        2,
        "{reasons:?}"
    );
    drop(queue);
    let again = engine.submit(Keyed::new("owned", 1)).await.unwrap();
    assert!(!again.newly_submitted());
    assert_eq!(within(again).await.unwrap(), 2);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_stray_job_carrying_a_live_runs_id_does_not_end_that_run() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(common::mock_clock())
        .register::<Keyed>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Keyed::new("stray", 2)).await.unwrap();
    eventually("the keyed job runs", LIMIT, async || {
        common::running(&engine, "keyed").await == 1
    })
    .await;
    enqueue_impostor(&engine, handle.id()).await;
    impostor_settled(&engine).await;
    // The live run still owns its id: a duplicate joins it, no second run starts.
    let again = engine.submit(Keyed::new("stray", 2)).await.unwrap();
    assert!(!again.newly_submitted(), "a second run of the id started");
    probe.gate.open();
    assert_eq!(within(handle).await.unwrap(), 4);
    assert_eq!(within(again).await.unwrap(), 4);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 2. The race: concurrent duplicates against the first run's completion.

/// The race's shared state: the run counter and how far the test released the
/// rounds (a round's job returns once `released >= round`).
#[derive(Debug)]
struct Race {
    runs: AtomicUsize,
    released: tokio::sync::watch::Sender<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Once {
    round: u32,
}

impl Once {
    fn expected(round: u32) -> u64 {
        u64::from(round) * 1_000 + 7
    }
}

impl Job for Once {
    const NAME: &'static str = "idem-once";
    type Output = u64;
    type Error = std::convert::Infallible;

    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        let race = ctx.state::<Arc<Race>>();
        race.runs.fetch_add(1, Ordering::SeqCst);
        let mut released = race.released.subscribe();
        let _ = released.wait_for(|r| *r >= self.round).await;
        Ok(Self::expected(self.round))
    }

    fn idempotency_key(&self) -> Option<String> {
        Some(format!("once-round-{}", self.round))
    }
}

/// `n` submissions of `job`, all let go at once; answers in spawn order.
async fn submit_concurrently(engine: &Engine, job: &Once, n: usize) -> Vec<JobHandle<Once>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n + 1));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let engine = engine.clone();
            let job = job.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                engine.submit(job).await
            })
        })
        .collect();
    barrier.wait().await;
    let mut handles = Vec::with_capacity(n);
    for task in tasks {
        handles.push(
            task.await
                .unwrap()
                .expect("a duplicate submission succeeds"),
        );
    }
    handles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_concurrent_duplicate_submits_racing_completion_run_the_job_once() {
    const ROUNDS: u32 = 30;
    const SUBMITS: usize = 50;
    const FIRST_WAVE: usize = 10;

    let race = Arc::new(Race {
        runs: AtomicUsize::new(0),
        released: tokio::sync::watch::channel(0).0,
    });
    // In-memory store, 1 ms flush, real time: the submissions truly race.
    let engine = common::memory_builder(common::mock_clock())
        .register::<Once>()
        .state(race.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    for round in 1..=ROUNDS {
        let job = Once { round };
        let handles = if round % 2 == 1 {
            // Odd rounds: the job returns as soon as it runs, so its claim, run
            // and settlement race all fifty submissions.
            race.released.send_replace(round);
            submit_concurrently(&engine, &job, SUBMITS).await
        } else {
            // Even rounds: a first wave creates the job and it starts; then the
            // job is let go at the same moment as a second, larger wave, whose
            // submissions race the settlement that ends it.
            let mut handles = submit_concurrently(&engine, &job, FIRST_WAVE).await;
            let id = handles[0].id().to_string();
            common::wait_event(
                &mut events,
                LIMIT,
                |e| matches!(e, EngineEvent::JobStarted { run_id, .. } if *run_id == id),
            )
            .await;
            let second = {
                let engine = engine.clone();
                let job = job.clone();
                tokio::spawn(async move {
                    submit_concurrently(&engine, &job, SUBMITS - FIRST_WAVE).await
                })
            };
            race.released.send_replace(round);
            handles.extend(second.await.unwrap());
            handles
        };

        assert_eq!(handles.len(), SUBMITS);
        let id = handles[0].id().to_string();
        assert!(
            handles.iter().all(|h| h.id() == id),
            "round {round}: every duplicate must answer with one id"
        );
        let created = handles.iter().filter(|h| h.newly_submitted()).count();
        assert_eq!(
            created, 1,
            "round {round}: exactly one submission creates the job"
        );
        for handle in &handles {
            let out = handle
                .join_timeout(LIMIT)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: the job never ended"));
            assert_eq!(out, Ok(Once::expected(round)), "round {round}");
        }
        assert_eq!(
            race.runs.load(Ordering::SeqCst),
            round as usize,
            "round {round}: the job must run exactly once"
        );
        // A late duplicate answers from the record and still does not run it.
        let late = engine.submit(job.clone()).await.unwrap();
        assert!(!late.newly_submitted(), "round {round}");
        assert_eq!(late.id(), id, "round {round}");
    }
    // No stray run showed up after the rounds either.
    assert_eq!(race.runs.load(Ordering::SeqCst), ROUNDS as usize);
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    assert_eq!(race.runs.load(Ordering::SeqCst), ROUNDS as usize);
}

// ---------------------------------------------------------------------------
// 3. Finished jobs, failures, collisions.

#[derive(Debug, thiserror::Error)]
#[error("refused: {0}")]
struct Refused(String);

/// Succeeds with its text upper-cased, or fails permanently.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Shout {
    key: String,
    text: String,
    fail: bool,
}

impl Job for Shout {
    const NAME: &'static str = "idem-shout";
    type Output = String;
    type Error = Refused;

    async fn run(&self, ctx: JobContext) -> Result<String, Refused> {
        ctx.state::<Arc<Runs>>().hit();
        if self.fail {
            Err(Refused(self.text.clone()))
        } else {
            Ok(self.text.to_uppercase())
        }
    }

    fn classify(&self, _error: &Refused) -> FailureKind {
        FailureKind::Permanent
    }

    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// Two job types whose payloads encode identically and whose keys collide.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Left {
    n: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Right {
    n: u32,
}

impl Job for Left {
    const NAME: &'static str = "idem-left";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(self.n)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("shared-{}", self.n))
    }
}

impl Job for Right {
    const NAME: &'static str = "idem-right";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(self.n + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("shared-{}", self.n))
    }
}

/// A keyed job type no engine here registers.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ghost {
    key: String,
}

impl Job for Ghost {
    const NAME: &'static str = "idem-ghost";
    type Output = ();
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<(), Self::Error> {
        unreachable!("every engine that registers it stops before it runs")
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// An engine on the in-memory store with [`Shout`], [`Left`] and [`Right`].
async fn engine(runs: &Arc<Runs>) -> Engine {
    common::memory_builder(common::mock_clock())
        .register::<Shout>()
        .register::<Left>()
        .register::<Right>()
        .state(runs.clone())
        .start()
        .await
        .unwrap()
}

async fn shut_down(engine: &Engine) {
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn duplicate_after_completion_answers_from_the_record_for_success_and_failure() {
    let runs = Arc::new(Runs::default());
    let engine = engine(&runs).await;
    let ok = Shout {
        key: "greet-ada".into(),
        text: "hello ada".into(),
        fail: false,
    };
    let bad = Shout {
        key: "greet-bob".into(),
        text: "no bob".into(),
        fail: true,
    };

    // Success.
    let first = engine.submit(ok.clone()).await.unwrap();
    assert!(first.newly_submitted());
    assert_eq!(first.join().await.unwrap(), Ok("HELLO ADA".to_string()));
    assert_eq!(runs.get(), 1);
    let again = engine.submit(ok.clone()).await.unwrap();
    assert!(!again.newly_submitted());
    assert_eq!(again.id(), first.id());
    assert_eq!(again.status().await.unwrap(), JobState::Succeeded);
    assert_eq!(
        again.outcome().await.unwrap(),
        Some(Ok("HELLO ADA".to_string()))
    );
    assert_eq!(again.clone().await.unwrap(), "HELLO ADA");

    // Permanent failure: the duplicate answers with the recorded failure.
    let failed = engine.submit(bad.clone()).await.unwrap();
    assert!(failed.newly_submitted());
    let err = failed.join().await.unwrap().expect_err("the job fails");
    assert_eq!(err.kind, FailureKind::Permanent);
    assert_eq!(err.message, "refused: no bob");
    assert_eq!(runs.get(), 2);
    let dup = engine.submit(bad.clone()).await.unwrap();
    assert!(!dup.newly_submitted(), "a failure record answers too");
    assert_eq!(dup.id(), failed.id());
    assert_eq!(dup.status().await.unwrap(), JobState::Failed);
    assert_eq!(dup.join().await.unwrap(), Err(err.clone()));
    assert_eq!(dup.outcome().await.unwrap(), Some(Err(err)));

    // Neither ran again.
    assert_eq!(runs.get(), 2);
    shut_down(&engine).await;
    assert_eq!(runs.get(), 2);
}

/// A submission reads the outcome record before its compare-and-commit only
/// while duplicates are frequent (an internal hint): the answers are the same
/// with and without that read, for a finished key, a mismatching payload and
/// a new key.
#[tokio::test(start_paused = true)]
async fn duplicates_answer_the_same_whether_or_not_the_outcome_is_read_first() {
    let runs = Arc::new(Runs::default());
    let engine = engine(&runs).await;
    let shout = |key: &str, text: &str| Shout {
        key: key.into(),
        text: text.into(),
        fail: false,
    };
    let check = |engine: Engine, key: String| async move {
        let dup = engine.submit(shout(&key, "same")).await.unwrap();
        assert!(!dup.newly_submitted(), "{key}");
        assert_eq!(dup.join().await.unwrap(), Ok("SAME".to_string()));
        let err = engine
            .submit(shout(&key, "other"))
            .await
            .expect_err("another payload under a finished key");
        assert!(matches!(&err, Error::InputMismatch(_)), "{err:?}");
    };
    let new = |engine: Engine, key: String| async move {
        let handle = engine.submit(shout(&key, "same")).await.unwrap();
        assert!(handle.newly_submitted(), "{key}");
        assert_eq!(handle.join().await.unwrap(), Ok("SAME".to_string()));
    };

    // A fresh engine expects new ids: no read before the compare.
    new(engine.clone(), "k-0".into()).await;
    check(engine.clone(), "k-0".into()).await;
    // Duplicates in a row: the read comes first.
    for _ in 0..8 {
        check(engine.clone(), "k-0".into()).await;
    }
    check(engine.clone(), "k-0".into()).await;
    new(engine.clone(), "k-1".into()).await;
    check(engine.clone(), "k-1".into()).await;
    // New ids again: the read is dropped.
    for i in 2..60 {
        new(engine.clone(), format!("k-{i}")).await;
    }
    check(engine.clone(), "k-1".into()).await;
    check(engine.clone(), "k-59".into()).await;
    assert_eq!(runs.get(), 60, "each key ran once");
    shut_down(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn concurrent_resubmissions_of_finished_jobs_answer_from_their_records_and_enqueue_nothing() {
    let runs = Arc::new(Runs::default());
    let engine = engine(&runs).await;
    // Successes and permanent failures.
    let jobs: Vec<Shout> = (0..24)
        .map(|i| Shout {
            key: format!("again-{i}"),
            text: format!("text {i}"),
            fail: i % 4 == 0,
        })
        .collect();
    for job in &jobs {
        let handle = engine.submit(job.clone()).await.unwrap();
        assert!(handle.newly_submitted());
        let _ = handle.join().await.unwrap();
    }
    assert_eq!(runs.get(), jobs.len());
    let view = || async {
        let queue = gaffer::testing::raw_queue(&engine).unwrap();
        let stats = common::totals(queue.view(), "jobs.").await;
        (
            stats.pending,
            stats.scheduled,
            stats.claimed,
            stats.done,
            stats.dead,
        )
    };
    let before = view().await;

    // All again at once: each answers from its outcome record.
    let tasks: Vec<_> = jobs
        .iter()
        .map(|job| {
            let (engine, job) = (engine.clone(), job.clone());
            tokio::spawn(async move { engine.submit(job).await })
        })
        .collect();
    for (job, task) in jobs.iter().zip(tasks) {
        let handle = task.await.unwrap().unwrap();
        assert!(!handle.newly_submitted(), "{}", job.key);
        match handle.join().await.unwrap() {
            Ok(text) => {
                assert!(!job.fail);
                assert_eq!(text, job.text.to_uppercase());
            }
            Err(err) => {
                assert!(job.fail, "{err:?}");
                assert_eq!(err.kind, FailureKind::Permanent);
                assert_eq!(err.message, format!("refused: {}", job.text));
            }
        }
    }
    // Another payload under a finished key (a success and a failure) is refused.
    for job in [&jobs[1], &jobs[4]] {
        let err = engine
            .submit(Shout {
                text: "something else".into(),
                ..job.clone()
            })
            .await
            .expect_err("another payload under a finished key");
        assert!(matches!(&err, Error::InputMismatch(_)), "{err:?}");
    }

    assert_eq!(view().await, before, "nothing was enqueued or settled");
    assert_eq!(runs.get(), jobs.len(), "nothing ran again");
    shut_down(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn two_job_types_with_the_same_key_string_collide_with_input_mismatch() {
    let runs = Arc::new(Runs::default());
    let engine = engine(&runs).await;
    // Same key string, same payload bytes, different type names.
    assert_eq!(
        Left { n: 1 }.idempotency_key(),
        Right { n: 1 }.idempotency_key()
    );

    // Against a finished job.
    let left = engine.submit(Left { n: 1 }).await.unwrap();
    assert_eq!(left.join().await.unwrap(), Ok(1));
    let err = engine
        .submit(Right { n: 1 })
        .await
        .expect_err("another type under the key must be refused");
    assert!(
        matches!(&err, Error::InputMismatch(id) if id == left.id()),
        "{err:?}"
    );

    // Against a live (scheduled) job.
    let clock_now = std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(common::T0_MS);
    let pending = engine
        .submit_with(
            Left { n: 2 },
            SubmitOptions {
                run_at: Some(clock_now + Duration::from_secs(3600)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(pending.status().await.unwrap(), JobState::Scheduled);
    let err = engine
        .submit(Right { n: 2 })
        .await
        .expect_err("another type under a live key must be refused");
    assert!(
        matches!(&err, Error::InputMismatch(id) if id == pending.id()),
        "{err:?}"
    );
    assert_eq!(pending.status().await.unwrap(), JobState::Scheduled);

    // Only the one Left run happened: Right never ran.
    assert_eq!(runs.get(), 1);
    shut_down(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_keyed_resubmission_after_an_unknown_type_failure_answers_from_its_record() {
    let runs = Arc::new(Runs::default());
    let store = common::shared_store();
    let clock = common::mock_clock();
    let ghost = Ghost {
        key: "haunt-1".into(),
    };
    // A version of the program that registers `Ghost` queues one for later
    // and stops.
    let old = common::shared_memory_builder(store.clone(), clock.clone())
        .register::<Ghost>()
        .start()
        .await
        .unwrap();
    let first = old
        .submit_with(ghost.clone(), common::a_minute_later())
        .await
        .unwrap();
    assert!(first.newly_submitted());
    shut_down(&old).await;

    // The next version does not register it: the job fails with its record.
    let new = common::shared_memory_builder(store.clone(), clock.clone())
        .register::<Shout>()
        .state(runs.clone())
        .start()
        .await
        .unwrap();
    common::a_minute_passes(&new, &clock).await;
    let err = new
        .handle::<Ghost>(first.id())
        .unwrap()
        .join()
        .await
        .unwrap()
        .expect_err("no handler can run it");
    assert_eq!(err.kind, FailureKind::Permanent, "{err:?}");
    assert!(
        err.message.contains("no handler registered"),
        "{}",
        err.message
    );
    shut_down(&new).await;

    // A version that registers it again: a keyed resubmission answers from
    // the failure record, without running.
    let again_engine = common::shared_memory_builder(store, clock)
        .register::<Ghost>()
        .start()
        .await
        .unwrap();
    let again = again_engine.submit(ghost.clone()).await.unwrap();
    assert!(!again.newly_submitted(), "answered from the failure record");
    assert_eq!(again.id(), first.id());
    assert_eq!(again.status().await.unwrap(), JobState::Failed);
    assert_eq!(again.join().await.unwrap(), Err(err.clone()));
    match again.clone().await {
        Err(gaffer::job::JoinError::Job(e)) => assert_eq!(e, err),
        other => panic!("expected the recorded failure, got {other:?}"),
    }
    assert_eq!(runs.get(), 0);
    shut_down(&again_engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_malformed_payload_records_a_permanent_failure() {
    let runs = Arc::new(Runs::default());
    let engine = engine(&runs).await;

    let submitted = gaffer::testing::services(&engine)
        .submit(SubmitRequest {
            job_type: Shout::NAME.to_string(),
            payload: b"not msgpack".to_vec(),
            idempotency_key: Some("malformed-1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(submitted.newly_submitted);
    let handle = engine.handle::<Shout>(&submitted.run_id).unwrap();
    let err = handle
        .join()
        .await
        .unwrap()
        .expect_err("a payload that does not decode cannot succeed");
    assert_eq!(err.kind, FailureKind::Permanent, "{err:?}");
    assert!(err.message.contains("invalid input"), "{}", err.message);
    assert_eq!(handle.status().await.unwrap(), JobState::Failed);
    assert_eq!(runs.get(), 0, "the handler never saw the payload");

    // The same malformed submission answers from the record.
    let again = gaffer::testing::services(&engine)
        .submit(SubmitRequest {
            job_type: Shout::NAME.to_string(),
            payload: b"not msgpack".to_vec(),
            idempotency_key: Some("malformed-1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!again.newly_submitted);
    assert_eq!(again.run_id, submitted.run_id);
    assert_eq!(runs.get(), 0);
    shut_down(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn reserved_headers_are_rejected_even_when_the_keyed_job_already_finished() {
    let runs = Arc::new(Runs::default());
    let engine = engine(&runs).await;
    let job = Shout {
        key: "greet-cy".into(),
        text: "hi cy".into(),
        fail: false,
    };
    assert_eq!(
        engine.submit(job.clone()).await.unwrap().await.unwrap(),
        "HI CY"
    );

    let headers = HashMap::from([("gaffer.x".to_string(), "sneaky".to_string())]);
    let err = engine
        .submit_with(
            job.clone(),
            SubmitOptions {
                headers: headers.clone(),
                ..Default::default()
            },
        )
        .await
        .expect_err("a reserved header is refused even for a finished key");
    assert!(
        matches!(&err, Error::ReservedHeader(h) if h == "gaffer.x"),
        "{err:?}"
    );
    // Through the untyped API as well.
    let err = gaffer::testing::services(&engine)
        .submit(SubmitRequest {
            headers,
            ..gaffer::protocol::submit_request(&job, SubmitOptions::default()).unwrap()
        })
        .await
        .expect_err("refused through the untyped API too");
    assert!(
        matches!(&err, Error::ReservedHeader(h) if h == "gaffer.x"),
        "{err:?}"
    );
    // Without the header the duplicate still answers from the record.
    let dup = engine.submit(job).await.unwrap();
    assert!(!dup.newly_submitted());
    assert_eq!(runs.get(), 1);
    shut_down(&engine).await;
}

// ---------------------------------------------------------------------------
// 4. A keyed job's id, from its key alone.

#[derive(Serialize, Deserialize)]
struct Greet {
    user: String,
}

impl Job for Greet {
    const NAME: &'static str = "greet";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<String, Self::Error> {
        Ok(format!("hello {}", self.user))
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("greet:{}", self.user))
    }
}

#[tokio::test(start_paused = true)]
async fn a_keyed_jobs_id_is_computed_from_its_key_as_the_engine_does() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Greet>()
        .start()
        .await
        .unwrap();
    // Computed before the job exists.
    let id = gaffer::job::keyed_job_id("greet:ada");
    let handle = engine.submit(Greet { user: "ada".into() }).await.unwrap();
    assert_eq!(handle.id(), id);
    assert_eq!(handle.await.unwrap(), "hello ada");
    // A handle from the key alone reads the same job.
    let by_key = engine.keyed_handle::<Greet>("greet:ada");
    assert_eq!(by_key.id(), id);
    assert_eq!(by_key.join().await.unwrap(), Ok("hello ada".to_string()));
    assert_ne!(gaffer::job::keyed_job_id("greet:bob"), id);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 5. Across a reopen of a local-disk store.

/// Doubles its value; optionally keyed; counts its runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Double {
    key: Option<String>,
    value: u64,
}

impl Job for Double {
    const NAME: &'static str = "durability-double";
    type Output = u64;
    type Error = std::convert::Infallible;

    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(self.value * 2)
    }

    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// An engine on `dir` with [`Double`] registered.
async fn start_double(dir: &Path, clock: &Arc<MockClock>, runs: &Arc<Runs>) -> Engine {
    common::disk_builder(dir, clock.clone())
        .register::<Double>()
        .state(runs.clone())
        .start()
        .await
        .expect("the engine starts on the directory")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_short_circuits_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let job = Double {
        key: Some("invoice-9".into()),
        value: 21,
    };

    let first = start_double(dir.path(), &clock, &runs).await;
    let done = first.submit(job.clone()).await.unwrap();
    assert!(done.newly_submitted());
    assert_eq!(done.clone().await.unwrap(), 42);
    assert_eq!(runs.get(), 1);
    let id = done.id().to_string();
    shut_down_cleanly(&first).await;

    let second = start_double(dir.path(), &clock, &runs).await;
    let again = second.submit(job.clone()).await.unwrap();
    assert!(!again.newly_submitted(), "answered from the outcome record");
    assert_eq!(again.id(), id);
    assert_eq!(again.outcome().await.unwrap(), Some(Ok(42)));
    assert_eq!(again.status().await.unwrap(), JobState::Succeeded);
    assert_eq!(again.clone().await.unwrap(), 42);
    // A different payload under the key is refused from the record too.
    let err = second
        .submit(Double {
            value: 22,
            ..job.clone()
        })
        .await
        .expect_err("another payload under a finished key must be refused");
    assert!(
        matches!(&err, Error::InputMismatch(run) if *run == id),
        "{err:?}"
    );
    // The handler did not run again: nothing is left to run under the key.
    assert_eq!(
        gaffer::testing::services(&second)
            .run_record_of(&id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(runs.get(), 1, "the finished job must not run again");
    shut_down_cleanly(&second).await;
}
