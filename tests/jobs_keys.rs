//! Acceptance tests of the jobs runner, after taquba-workflow 0.11's reference
//! suite: idempotency keys. Unkeyed submissions are always new; a key
//! collapses duplicates while the job is live and answers from its record
//! once it ended (success or failure) until retention removes it; the same
//! key with another payload is refused; payload keys; and a stray job that
//! carries a run's id (or an unknown or invalid one) never runs, and neither
//! replaces nor ends that run.
//!
//! Every test runs under paused tokio time on the in-memory store with a
//! `MockClock`, and waits for events or handles, never for wall time.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gaffer::taquba::{EnqueueOptions, MockClock};
use gaffer::{
    Engine, Error, Job, JobContext, job::FailureKind, job::JobState, job::payload_idempotency_key,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use common::jobs::{AlwaysFails, Factor, Probe, Scale, join, wait_started};
use common::{Gate, LIMIT, eventually, shut_down_cleanly, within};

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
