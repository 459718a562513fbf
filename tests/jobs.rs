//! Acceptance tests of the jobs runner, after taquba-workflow 0.11's reference
//! suite: submission, idempotency, outcomes, retries, leases, retention,
//! scheduling, fan-out, headers and cancellation.
//!
//! Every test runs under paused tokio time on the in-memory store with a
//! `MockClock` for leases, schedules and retention, and waits for events or
//! handles, never for wall time.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gaffer::taquba::MockClock;
use gaffer::{
    CancelResult, Engine, EngineError, EngineEvent, Error, FailureKind, Job, JobContext, JobError,
    JobHandle, JobState, JoinError, SubmitOptions, payload_idempotency_key,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use common::Gate;

// ---------------------------------------------------------------------------
// Shared test plumbing
// ---------------------------------------------------------------------------

/// Upper bound (virtual time) for anything a test waits on.
const LIMIT: Duration = Duration::from_secs(60);

/// Per-engine probe: counts handler runs and memo computations, and holds the
/// gate blocking jobs wait on.
struct Probe {
    runs: AtomicUsize,
    computes: AtomicUsize,
    gate: Gate,
}

impl Probe {
    fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Self {
            runs: AtomicUsize::new(0),
            computes: AtomicUsize::new(0),
            gate,
        })
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn computes(&self) -> usize {
        self.computes.load(Ordering::SeqCst)
    }
}

/// The error of the test jobs.
#[derive(Debug, thiserror::Error)]
enum Fail {
    #[error("{0}")]
    Msg(String),
    #[error(transparent)]
    Gaffer(#[from] Error),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

fn clock() -> Arc<MockClock> {
    common::mock_clock()
}

/// `UNIX_EPOCH + ms`.
fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Lowercase hex SHA-256, computed here independently of the engine.
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Join with a bound, so a job that never ends fails the test instead of
/// hanging it. Infrastructure errors fail the test too.
async fn join<J: Job>(handle: &JobHandle<J>) -> Result<J::Output, JobError> {
    handle
        .join_timeout(LIMIT)
        .await
        .unwrap_or_else(|e| panic!("joining {handle:?} failed: {e}"))
        .unwrap_or_else(|| panic!("{handle:?} did not end within {LIMIT:?}"))
}

async fn wait_started(rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>, id: &str, n: u32) {
    common::wait_event(rx, LIMIT, |ev| {
        matches!(ev, EngineEvent::JobStarted { run_id, attempt, .. } if run_id == id && *attempt == n)
    })
    .await;
}

async fn wait_succeeded(rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>, id: &str) {
    common::wait_event(
        rx,
        LIMIT,
        |ev| matches!(ev, EngineEvent::JobSucceeded { run_id, .. } if run_id == id),
    )
    .await;
}

async fn shutdown(engine: Engine) {
    let report = engine.shutdown().await.expect("shutdown");
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
}

// ---------------------------------------------------------------------------
// Job types
// ---------------------------------------------------------------------------

/// Application state of [`Scale`].
struct Factor(i64);

/// Multiplies its input by the registered [`Factor`].
#[derive(Serialize, Deserialize)]
struct Scale {
    x: i64,
}

impl Job for Scale {
    const NAME: &'static str = "scale";
    type Output = i64;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<i64, Self::Error> {
        Ok(self.x * ctx.state::<Factor>().0)
    }
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

/// Always fails with `message`, permanently or transiently; counts its runs.
/// Keyed when `key` is set.
#[derive(Serialize, Deserialize)]
struct AlwaysFails {
    key: Option<String>,
    message: String,
    permanent: bool,
}

impl Job for AlwaysFails {
    const NAME: &'static str = "always-fails";
    type Output = ();
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<(), Fail> {
        ctx.state::<Arc<Probe>>()
            .runs
            .fetch_add(1, Ordering::SeqCst);
        Err(Fail::Msg(self.message.clone()))
    }
    fn classify(&self, _error: &Fail) -> FailureKind {
        if self.permanent {
            FailureKind::Permanent
        } else {
            FailureKind::Transient
        }
    }
    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// Memoizes an expensive value, stages an effect per attempt and fails its
/// first attempt transiently.
#[derive(Serialize, Deserialize)]
struct MemoThenFlaky;

impl Job for MemoThenFlaky {
    const NAME: &'static str = "memo-then-flaky";
    type Output = u64;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<u64, Fail> {
        let probe = ctx.state::<Arc<Probe>>();
        probe.runs.fetch_add(1, Ordering::SeqCst);
        let value: u64 = ctx
            .memo()
            .memoized("expensive", || async {
                probe.computes.fetch_add(1, Ordering::SeqCst);
                Ok::<u64, Fail>(42)
            })
            .await?;
        ctx.effects().put(
            format!("fx/attempt-{}", ctx.attempt()),
            value.to_string().into_bytes(),
        )?;
        if ctx.attempt() == 1 {
            return Err(Fail::Msg("transient glitch".into()));
        }
        Ok(value)
    }
}

/// Reads a committed KV value through its context.
#[derive(Serialize, Deserialize)]
struct ReadKv {
    key: String,
}

impl Job for ReadKv {
    const NAME: &'static str = "read-kv";
    type Output = Option<Vec<u8>>;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<Option<Vec<u8>>, Fail> {
        Ok(ctx.kv_get(self.key.as_bytes()).await?)
    }
}

/// Channel a job reports on (used where the test must act while it runs).
struct Reports(tokio::sync::mpsc::UnboundedSender<Result<(), String>>);

/// Extends its lease to ten minutes, reports, waits for the gate and returns
/// the attempt it ran as.
#[derive(Serialize, Deserialize)]
struct LongLease;

impl Job for LongLease {
    const NAME: &'static str = "long-lease";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let extended = ctx
            .lease()
            .ensure_at_least(Duration::from_secs(600))
            .map_err(|e| e.to_string());
        let _ = ctx.state::<Reports>().0.send(extended);
        ctx.state::<Arc<Probe>>().gate.wait().await;
        Ok(ctx.attempt())
    }
}

/// Registered nowhere.
#[derive(Serialize, Deserialize)]
struct Unregistered {
    key: String,
}

impl Job for Unregistered {
    const NAME: &'static str = "unregistered";
    type Output = u8;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u8, Self::Error> {
        Ok(1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// Submits `n` [`Child`] jobs and returns their ids without waiting for them.
#[derive(Serialize, Deserialize)]
struct Parent {
    n: u32,
}

impl Job for Parent {
    const NAME: &'static str = "parent";
    type Output = Vec<String>;
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<Vec<String>, Fail> {
        let mut ids = Vec::new();
        for i in 0..self.n {
            ids.push(ctx.submit(Child { i }).await?.id().to_string());
        }
        Ok(ids)
    }
}

/// Waits for the gate, counts itself, returns its index.
#[derive(Serialize, Deserialize)]
struct Child {
    i: u32,
}

impl Job for Child {
    const NAME: &'static str = "child";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let probe = ctx.state::<Arc<Probe>>();
        probe.gate.wait().await;
        probe.runs.fetch_add(1, Ordering::SeqCst);
        Ok(self.i)
    }
}

/// What a job saw of its delivery.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Seen {
    attempt: u32,
    max_attempts: u32,
    headers: HashMap<String, String>,
}

/// Returns its attempt, attempt limit and headers.
#[derive(Serialize, Deserialize)]
struct ShowDelivery;

impl Job for ShowDelivery {
    const NAME: &'static str = "show-delivery";
    type Output = Seen;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<Seen, Self::Error> {
        Ok(Seen {
            attempt: ctx.attempt(),
            max_attempts: ctx.max_attempts(),
            headers: ctx.headers().clone(),
        })
    }
}

/// Counts its runs, then waits until it is cancelled and returns normally.
#[derive(Serialize, Deserialize)]
struct UntilCancelled;

impl Job for UntilCancelled {
    const NAME: &'static str = "until-cancelled";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<String, Self::Error> {
        ctx.state::<Arc<Probe>>()
            .runs
            .fetch_add(1, Ordering::SeqCst);
        ctx.cancel_token().cancelled().await;
        Ok("stopped after the cancel".into())
    }
}

/// First attempt hangs on the gate (a lost-lease zombie); later attempts
/// return at once. Returns the attempt it ran as.
#[derive(Serialize, Deserialize)]
struct StuckFirst;

impl Job for StuckFirst {
    const NAME: &'static str = "stuck-first";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        if ctx.attempt() == 1 {
            ctx.state::<Arc<Probe>>().gate.wait().await;
        }
        Ok(ctx.attempt())
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

// ---------------------------------------------------------------------------
// 1. Unkeyed submissions
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn submit_without_idempotency_key_is_always_newly_submitted() {
    let engine = common::memory_builder(clock())
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

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 2. Success, typed output, application state
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn submit_run_and_join_success() {
    let engine = common::memory_builder(clock())
        .register::<Scale>()
        .state(Factor(10))
        .start()
        .await
        .unwrap();

    let handle = engine.submit(Scale { x: 4 }).await.unwrap();
    // join(): the typed output, computed with the registered state.
    assert_eq!(join(&handle).await, Ok(40));
    // .await on the handle: the same output.
    assert_eq!(handle.clone().await.unwrap(), 40);
    assert_eq!(handle.status().await.unwrap(), JobState::Succeeded);

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 3. Memo and effects across a retry
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_handler_uses_its_memo_and_effects_across_a_retry() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
        .register::<MemoThenFlaky>()
        .register::<ReadKv>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let handle = engine.submit(MemoThenFlaky).await.unwrap();
    assert_eq!(join(&handle).await.unwrap(), 42);
    assert_eq!(probe.runs(), 2, "one failed attempt, one successful");
    assert_eq!(probe.computes(), 1, "the memoized value was computed once");

    // The failing attempt's effect was dropped; the succeeding one's committed.
    let services = engine.engine_ref().services();
    assert_eq!(services.kv_get(b"fx/attempt-1").await.unwrap(), None);
    assert_eq!(
        services.kv_get(b"fx/attempt-2").await.unwrap(),
        Some(b"42".to_vec())
    );
    // A later job reads the same through its context.
    let read = |key: &str| {
        engine.submit(ReadKv {
            key: key.to_string(),
        })
    };
    assert_eq!(join(&read("fx/attempt-1").await.unwrap()).await, Ok(None));
    assert_eq!(
        join(&read("fx/attempt-2").await.unwrap()).await,
        Ok(Some(b"42".to_vec()))
    );

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 4. Lease extension
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_handler_extends_its_lease_through_the_context() {
    let clock = clock();
    let probe = Probe::new(Gate::closed());
    let (tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let engine = common::memory_builder(clock.clone())
        .register::<LongLease>()
        .state(probe.clone())
        .state(Reports(tx))
        .start()
        .await
        .unwrap();

    let handle = engine.submit(LongLease).await.unwrap();
    let extended = tokio::time::timeout(LIMIT, reports.recv())
        .await
        .expect("the job did not start")
        .expect("report channel closed");
    assert_eq!(extended, Ok(()), "ensure_at_least failed");

    // An unkeyed job's id is its queue job id. The default lease would end at
    // T0 + 30 s; the extended one ends at least 600 s from now.
    let queue = engine.engine_ref().services().queue().unwrap();
    let expiry = queue
        .lease_expiry(&common::job_queue(LongLease::NAME), handle.id())
        .expect("the running job has a lease");
    assert!(
        expiry >= common::T0_MS + 600_000,
        "lease ends at T0 + {} ms, not at least T0 + 600 s",
        expiry - common::T0_MS
    );

    // Past the default lease, a reap does not take the job away: it finishes
    // as its first attempt.
    clock.advance(Duration::from_secs(60));
    queue.reap_now().await.unwrap();
    drop(queue);
    assert_eq!(handle.status().await.unwrap(), JobState::Running);
    probe.gate.open();
    assert_eq!(join(&handle).await, Ok(1), "the job was redelivered");

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 5. Permanent failure
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn permanent_failure_is_dead_lettered_with_recorded_outcome() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
        .register::<AlwaysFails>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let handle = engine
        .submit(AlwaysFails {
            key: None,
            message: "boom".into(),
            permanent: true,
        })
        .await
        .unwrap();
    match handle.clone().await {
        Err(JoinError::Job(e)) => {
            assert_eq!(e.kind, FailureKind::Permanent, "{e:?}");
            assert_eq!(e.message, "boom");
            assert!(!e.is_cancelled());
        }
        other => panic!("expected a job failure, got {other:?}"),
    }
    assert_eq!(probe.runs(), 1, "a permanent failure is not retried");
    assert_eq!(handle.status().await.unwrap(), JobState::Failed);
    let record = engine
        .engine_ref()
        .services()
        .outcome(handle.id())
        .await
        .unwrap()
        .expect("outcome record");
    assert_eq!(record.attempts, 1);

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 6–8. Idempotency keys on live jobs
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn idempotency_key_collapses_duplicate_submissions() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(clock())
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

    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_submission_joins_the_in_flight_job() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(clock())
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

    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn input_mismatch_on_same_key_different_payload() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(clock())
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
        Err(Error::Engine(EngineError::InputMismatch(id))) => assert_eq!(id, expected_id),
        other => panic!("expected InputMismatch, got {other:?}"),
    }
    // After it ended (answered from the outcome record).
    probe.gate.open();
    assert_eq!(join(&first).await, Ok(2));
    match engine.submit(Keyed::new("invoice-9", 2)).await {
        Err(Error::Engine(EngineError::InputMismatch(id))) => assert_eq!(id, expected_id),
        other => panic!("expected InputMismatch, got {other:?}"),
    }
    assert_eq!(probe.runs(), 1, "a mismatched submission never runs");

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 10–11. Idempotency keys on ended jobs
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn idempotency_key_short_circuits_to_cached_success_after_completion() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
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
    assert_eq!(again.fetch_result().await.unwrap(), Some(Ok(16)));
    assert_eq!(probe.runs(), 1, "the cached outcome answered; no rerun");

    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn idempotency_key_short_circuits_to_cached_failure_after_completion() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
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

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 13–14. Retention
// ---------------------------------------------------------------------------

/// An engine running `Keyed` (always open) whose outcome records are kept 60 s.
async fn keyed_with_retention() -> (Arc<MockClock>, Arc<Probe>, Engine) {
    let clock = clock();
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
    engine.engine_ref().sweep_now().await.unwrap();
    assert!(
        matches!(
            first.status().await,
            Err(Error::Engine(EngineError::JobNotFound(_)))
        ),
        "the record was swept"
    );

    let again = engine.submit(Keyed::new("swept", 3)).await.unwrap();
    assert!(again.newly_submitted(), "the swept job is submitted anew");
    assert_eq!(again.id(), first.id());
    assert_eq!(join(&again).await, Ok(6));
    assert_eq!(probe.runs(), 2, "the handler ran again");

    shutdown(engine).await;
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
    engine.engine_ref().sweep_now().await.unwrap();
    assert!(
        matches!(
            again.status().await,
            Err(Error::Engine(EngineError::JobNotFound(_)))
        ),
        "the record was swept"
    );
    match first.join().await {
        Err(Error::Engine(EngineError::JobNotFound(id))) => assert_eq!(id, first.id()),
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

    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn retention_removes_the_outcome_record() {
    let clock = clock();
    let engine = common::memory_builder(clock.clone())
        .register::<Scale>()
        .state(Factor(3))
        .retention(Duration::from_secs(60))
        .start()
        .await
        .unwrap();

    let handle = engine.submit(Scale { x: 5 }).await.unwrap();
    assert_eq!(join(&handle).await, Ok(15));

    // Within the retention window the record stays.
    clock.advance(Duration::from_secs(30));
    engine.engine_ref().sweep_now().await.unwrap();
    assert_eq!(handle.fetch_result().await.unwrap(), Some(Ok(15)));
    assert_eq!(handle.status().await.unwrap(), JobState::Succeeded);

    // Past it, a sweep removes it.
    clock.advance(Duration::from_secs(31));
    engine.engine_ref().sweep_now().await.unwrap();
    assert!(matches!(
        handle.fetch_result().await,
        Err(Error::Engine(EngineError::JobNotFound(_)))
    ));
    assert!(matches!(
        handle.status().await,
        Err(Error::Engine(EngineError::JobNotFound(_)))
    ));
    match handle.join().await {
        Err(Error::Engine(EngineError::JobNotFound(id))) => assert_eq!(id, handle.id()),
        other => panic!("expected JobNotFound, got {other:?}"),
    }

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 15–16. Dead letters
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn submitting_an_unregistered_job_type_is_refused_at_once() {
    let engine = common::memory_builder(clock())
        .register::<Scale>()
        .state(Factor(1))
        .start()
        .await
        .unwrap();
    let refused = engine
        .submit(Unregistered {
            key: "orphan".into(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, gaffer::Error::Engine(gaffer::EngineError::UnknownJobType(t)) if t == "unregistered"),
        "{refused:?}"
    );
    // Nothing was enqueued anywhere.
    let queue = engine.engine_ref().services().queue().unwrap();
    for name in queue.view().list_queues().await.unwrap() {
        assert_eq!(
            queue.view().stats(&name).await.unwrap().pending,
            0,
            "{name}"
        );
    }
    drop(queue);
    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn transient_failure_exhausts_retries_and_dead_letters() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
        .register::<AlwaysFails>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let handle = engine
        .submit_with(
            AlwaysFails {
                key: None,
                message: "flaky".into(),
                permanent: false,
            },
            SubmitOptions {
                max_attempts: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let failure = join(&handle).await.unwrap_err();
    assert_eq!(failure.kind, FailureKind::Transient, "{failure:?}");
    assert_eq!(failure.message, "flaky");
    assert_eq!(probe.runs(), 2, "exactly max_attempts runs");
    assert_eq!(handle.status().await.unwrap(), JobState::Failed);
    let record = engine
        .engine_ref()
        .services()
        .outcome(handle.id())
        .await
        .unwrap()
        .expect("outcome record");
    assert_eq!(record.attempts, 2);

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 17. Awaiting a finished job
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn await_after_the_run_terminated_reads_the_outcome_record() {
    let engine = common::memory_builder(clock())
        .register::<Scale>()
        .state(Factor(2))
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let handle = engine.submit(Scale { x: 21 }).await.unwrap();
    wait_succeeded(&mut events, handle.id()).await;
    assert_eq!(handle.status().await.unwrap(), JobState::Succeeded);
    let output = tokio::time::timeout(LIMIT, handle.clone())
        .await
        .expect("awaiting a finished job hung");
    assert_eq!(output.unwrap(), 42);
    // A handle rebuilt from the id reads the same record.
    let rebuilt = engine.handle::<Scale>(handle.id()).unwrap();
    assert_eq!(join(&rebuilt).await, Ok(42));

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 18. Payload idempotency keys
// ---------------------------------------------------------------------------

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
    let engine = common::memory_builder(clock())
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

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 19. Fan-out
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn fan_out_from_handler_runs_children() {
    let probe = Probe::new(Gate::closed());
    let engine = common::memory_builder(clock())
        .register::<Parent>()
        .register::<Child>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let parent = engine.submit(Parent { n: 3 }).await.unwrap();
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
        let child = engine.handle::<Child>(id).unwrap();
        assert_eq!(join(&child).await, Ok(i as u32));
    }
    assert_eq!(probe.runs(), 3);

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 20. Scheduling
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn scheduled_job_runs_when_clock_passes_run_at() {
    let clock = clock();
    let engine = common::memory_builder(clock.clone())
        .register::<Scale>()
        .state(Factor(3))
        .start()
        .await
        .unwrap();

    let handle = engine
        .submit_with(
            Scale { x: 3 },
            SubmitOptions {
                run_at: Some(at_ms(common::T0_MS + 60_000)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(handle.status().await.unwrap(), JobState::Scheduled);
    // Scheduler ticks (tokio time) pass, the queue clock does not: it waits.
    assert_eq!(
        handle.join_timeout(Duration::from_secs(5)).await.unwrap(),
        None,
        "the job ran before its run_at"
    );
    assert_eq!(handle.status().await.unwrap(), JobState::Scheduled);

    clock.advance(Duration::from_secs(61));
    assert_eq!(join(&handle).await, Ok(9));

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// 21. Lease expiry
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn lease_expiry_triggers_reaper_requeue() {
    let clock = clock();
    let store = Arc::new(gaffer::taquba::object_store::memory::InMemory::new());
    let probe = Probe::new(Gate::closed());
    let engine = common::shared_memory_builder(store.clone(), clock.clone())
        .register::<StuckFirst>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let handle = engine.submit(StuckFirst).await.unwrap();
    wait_started(&mut events, handle.id(), 1).await;

    // The first attempt hangs past its 30 s lease; the reaper requeues it.
    clock.advance(Duration::from_secs(31));
    engine
        .engine_ref()
        .services()
        .queue()
        .unwrap()
        .reap_now()
        .await
        .unwrap();
    wait_started(&mut events, handle.id(), 2).await;
    assert_eq!(join(&handle).await, Ok(2), "attempt 2's result");

    // The zombie first attempt returns late; its settlement must not override.
    probe.gate.open();
    shutdown(engine).await; // drains: the zombie has returned and settled
    let engine = common::shared_memory_builder(store, clock)
        .register::<StuckFirst>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let reopened = engine.handle::<StuckFirst>(handle.id()).unwrap();
    assert_eq!(reopened.fetch_result().await.unwrap(), Some(Ok(2)));
    assert_eq!(reopened.status().await.unwrap(), JobState::Succeeded);

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// Delivery details: attempt and headers
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_job_sees_its_attempt_and_the_headers_it_was_submitted_with() {
    let engine = common::memory_builder(clock())
        .register::<ShowDelivery>()
        .start()
        .await
        .unwrap();
    let headers = HashMap::from([
        ("tenant".to_string(), "acme".to_string()),
        ("trace-id".to_string(), "abc123".to_string()),
    ]);

    let handle = engine
        .submit_with(
            ShowDelivery,
            SubmitOptions {
                headers: headers.clone(),
                max_attempts: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        join(&handle).await,
        Ok(Seen {
            attempt: 1,
            max_attempts: 4,
            // Exactly the submitted headers: the engine's own are not shown.
            headers,
        })
    );

    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_submission_with_a_reserved_header_is_rejected() {
    let engine = common::memory_builder(clock())
        .register::<ShowDelivery>()
        .start()
        .await
        .unwrap();

    let result = engine
        .submit_with(
            ShowDelivery,
            SubmitOptions {
                headers: HashMap::from([("gaffer.type".to_string(), "other".to_string())]),
                ..Default::default()
            },
        )
        .await;
    match result {
        Err(Error::Engine(EngineError::ReservedHeader(h))) => assert_eq!(h, "gaffer.type"),
        other => panic!("expected ReservedHeader, got {other:?}"),
    }
    // Nothing was enqueued.
    let queue = engine.engine_ref().services().queue().unwrap();
    let stats = common::totals(queue.view(), "").await;
    drop(queue);
    assert_eq!(
        stats.pending + stats.scheduled + stats.claimed,
        0,
        "{stats:?}"
    );

    shutdown(engine).await;
}

// ---------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn cancelling_a_queued_job_removes_it_and_records_it_cancelled() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
        .register::<UntilCancelled>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();

    let handle = engine
        .submit_with(
            UntilCancelled,
            SubmitOptions {
                run_at: Some(at_ms(common::T0_MS + 3_600_000)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(handle.status().await.unwrap(), JobState::Scheduled);

    assert_eq!(
        engine.cancel(handle.id()).await.unwrap(),
        CancelResult::Cancelled
    );
    let failure = join(&handle).await.unwrap_err();
    assert!(failure.is_cancelled(), "{failure:?}");
    assert_eq!(handle.status().await.unwrap(), JobState::Cancelled);
    assert_eq!(probe.runs(), 0, "a cancelled queued job never runs");
    assert_eq!(
        engine.cancel(handle.id()).await.unwrap(),
        CancelResult::AlreadyFinished(JobState::Cancelled)
    );

    shutdown(engine).await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_running_job_fires_its_token_and_records_it_cancelled() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(clock())
        .register::<UntilCancelled>()
        .state(probe.clone())
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let handle = engine.submit(UntilCancelled).await.unwrap();
    wait_started(&mut events, handle.id(), 1).await;
    assert_eq!(handle.status().await.unwrap(), JobState::Running);

    assert_eq!(
        engine.cancel(handle.id()).await.unwrap(),
        CancelResult::Requested
    );
    // The job returned normally after its token fired; it is recorded cancelled.
    let failure = join(&handle).await.unwrap_err();
    assert!(failure.is_cancelled(), "{failure:?}");
    assert_eq!(handle.status().await.unwrap(), JobState::Cancelled);
    assert_eq!(probe.runs(), 1);

    shutdown(engine).await;
}
