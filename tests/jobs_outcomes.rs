//! Acceptance tests of the jobs runner, after taquba-workflow 0.11's reference
//! suite: what a job comes to. Success with a typed output and application
//! state, memo and effects across a retry, permanent and transient failures
//! (dead letters, with their records), an unregistered type, a join after the
//! end, the attempt and headers a job sees, and cancellation. And what
//! every read path answers: a live job has not ended, a job past retention
//! is as unknown as one never submitted, and a message put on a job type's
//! queue directly is never run and reads as not submitted through gaffer.
//!
//! Every test runs under paused tokio time on the in-memory store with a
//! `MockClock`, and waits for events or handles, never for wall time.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gaffer::ractor::call;
use gaffer::taquba::EnqueueOptions;
use gaffer::{
    Engine, EngineEvent, Error, Job, JobContext, SubmitOptions, job::CancelResult,
    job::FailureKind, job::JobState, job::JoinError, protocol::EngineMessage, protocol::Outcome,
    protocol::OutcomeRecord, protocol::OutputRef, protocol::WaitError,
};
use serde::{Deserialize, Serialize};

use common::jobs::{AlwaysFails, Factor, Fail, Probe, Scale, at_ms, join, wait_started};
use common::{Gate, LIMIT, Runs, shut_down_cleanly};

async fn wait_succeeded(rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>, id: &str) {
    common::wait_event(
        rx,
        LIMIT,
        |ev| matches!(ev, EngineEvent::JobSucceeded { run_id, .. } if run_id == id),
    )
    .await;
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

#[tokio::test(start_paused = true)]
async fn submit_run_and_join_success() {
    let engine = common::memory_builder(common::mock_clock())
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

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_uses_its_memo_and_effects_across_a_retry() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
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
    let services = gaffer::testing::services(&engine);
    // The queue forgets an acknowledged job's claims; its outcome record
    // keeps the failed one.
    let record = services.outcome(handle.id()).await.unwrap().unwrap();
    assert_eq!(record.attempts, 2);
    assert_eq!(record.history.len(), 1, "{:?}", record.history);
    assert_eq!(record.history[0].how, "failed");
    assert_eq!(record.history[0].claim, 1);
    assert!(record.history[0].error.is_some());
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

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn permanent_failure_is_dead_lettered_with_recorded_outcome() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
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
    let record = gaffer::testing::services(&engine)
        .outcome(handle.id())
        .await
        .unwrap()
        .expect("outcome record");
    assert_eq!(record.attempts, 1);

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn transient_failure_exhausts_retries_and_dead_letters() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
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
    let record = gaffer::testing::services(&engine)
        .outcome(handle.id())
        .await
        .unwrap()
        .expect("outcome record");
    assert_eq!(record.attempts, 2);

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn submitting_an_unregistered_job_type_is_refused_at_once() {
    let engine = common::memory_builder(common::mock_clock())
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
        matches!(&refused, gaffer::Error::UnknownJobType(t) if t == "unregistered"),
        "{refused:?}"
    );
    // Nothing was enqueued anywhere.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    for name in queue.view().list_queues().await.unwrap() {
        assert_eq!(
            queue.view().stats(&name).await.unwrap().pending,
            0,
            "{name}"
        );
    }
    drop(queue);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn await_after_the_run_terminated_reads_the_outcome_record() {
    let engine = common::memory_builder(common::mock_clock())
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

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_job_sees_its_attempt_and_the_headers_it_was_submitted_with() {
    let engine = common::memory_builder(common::mock_clock())
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

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_submission_with_a_reserved_header_is_rejected() {
    let engine = common::memory_builder(common::mock_clock())
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
        Err(Error::ReservedHeader(h)) => assert_eq!(h, "gaffer.type"),
        other => panic!("expected ReservedHeader, got {other:?}"),
    }
    // Nothing was enqueued.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let stats = common::totals(queue.view(), "").await;
    drop(queue);
    assert_eq!(
        stats.pending + stats.scheduled + stats.claimed,
        0,
        "{stats:?}"
    );

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_queued_job_removes_it_and_records_it_cancelled() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
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

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_running_job_fires_its_token_and_records_it_cancelled() {
    let probe = Probe::new(Gate::opened());
    let engine = common::memory_builder(common::mock_clock())
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

    shut_down_cleanly(&engine).await;
}

// ---------------------------------------------------------------------------
// One meaning on every read path: `Ok(None)` = exists, not ended;
//    `JobNotFound` = no record (never submitted, or past retention).

/// Waits at the engine's gate, then returns its input.
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

/// Whether `r` is the typed layer's `JobNotFound` for `id`.
fn is_not_found<T>(r: &gaffer::Result<T>, id: &str) -> bool {
    matches!(r, Err(gaffer::Error::JobNotFound(got)) if got == id)
}

/// Every read path on `id` answers "no record of this job".
async fn every_read_says_not_found(engine: &Engine, id: &str) {
    let handle = engine.handle::<Gated>(id).unwrap();
    let fetched = handle.outcome().await;
    assert!(is_not_found(&fetched, id), "outcome: {fetched:?}");
    let status = handle.status().await;
    assert!(is_not_found(&status, id), "status: {status:?}");
    let joined = handle.join().await;
    assert!(is_not_found(&joined, id), "join: {joined:?}");
    let cancelled = handle.cancel().await;
    assert!(is_not_found(&cancelled, id), "cancel: {cancelled:?}");
    let status = engine.status(id).await;
    assert!(is_not_found(&status, id), "Engine::status: {status:?}");
    // The error says both ways a job can be unknown.
    let message = fetched.unwrap_err().to_string();
    assert!(
        message.contains("never submitted") && message.contains("retention"),
        "{message}"
    );
    // By message, the same answers.
    let peek = call!(engine.actor(), EngineMessage::JobOutcome, id.to_string()).unwrap();
    assert!(
        matches!(&peek, Err(WaitError::NotFound(got)) if got == id),
        "{peek:?}"
    );
    let waited = call!(engine.actor(), EngineMessage::AwaitJob, id.to_string()).unwrap();
    assert!(
        matches!(&waited, Err(WaitError::NotFound(got)) if got == id),
        "{waited:?}"
    );
    let status = call!(engine.actor(), EngineMessage::JobStatus, id.to_string()).unwrap();
    assert!(
        matches!(&status, Err(Error::JobNotFound(got)) if got == id),
        "JobStatus: {status:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_live_job_reads_as_not_ended_and_a_job_past_retention_as_unknown_on_every_path() {
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let engine = common::memory_builder(clock.clone())
        .retention(Duration::from_secs(60))
        .state(gate.clone())
        .register::<Gated>()
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Gated(7)).await.unwrap();
    gate.wait_entered(1, LIMIT).await;

    // It exists and has not ended: `Ok(None)`, never `JobNotFound`.
    assert_eq!(handle.outcome().await.unwrap(), None);
    assert_eq!(handle.status().await.unwrap(), JobState::Running);
    assert_eq!(
        handle.join_timeout(Duration::from_secs(1)).await.unwrap(),
        None
    );
    let peek = call!(
        engine.actor(),
        EngineMessage::JobOutcome,
        handle.id().into()
    )
    .unwrap();
    assert!(matches!(peek, Ok(None)), "{peek:?}");

    gate.open();
    assert_eq!(handle.join().await.unwrap(), Ok(7));
    assert_eq!(handle.outcome().await.unwrap(), Some(Ok(7)));
    assert_eq!(handle.status().await.unwrap(), JobState::Succeeded);

    // Past retention the record is gone: every path says the job is unknown,
    // exactly as for an id never submitted.
    // The pass asked for removes it, or a pass of the sweeper's own timer
    // that read the moved clock first (the one asked for starts after it
    // ends): what counts is that it is gone, not which pass took it.
    clock.advance(Duration::from_secs(61));
    engine.sweep_now().await.unwrap();
    every_read_says_not_found(&engine, handle.id()).await;
    every_read_says_not_found(&engine, "never-submitted").await;
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// A message put on a job type's queue directly, not through gaffer, is
// not run and every read of it says so.

/// Counts its runs (in the engine's `Runs`) and returns its input.
#[derive(Serialize, Deserialize)]
struct Counted(u32);

impl Job for Counted {
    const NAME: &'static str = "counted";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(self.0)
    }
}

/// Put a valid `Counted` straight on its queue, without gaffer's headers and
/// run record; `run_at` keeps it queued until then.
async fn enqueue_raw(engine: &Engine, run_at: Option<std::time::SystemTime>) -> String {
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    let payload = rmp_serde::to_vec_named(&Counted(5)).unwrap();
    queue
        .enqueue_with(
            &common::job_queue("counted"),
            payload,
            EnqueueOptions::default().run_at(run_at),
        )
        .await
        .unwrap()
}

/// Whether `r` is the typed layer's `NotSubmittedThroughGaffer` for `id`.
fn is_not_through_gaffer<T>(r: &gaffer::Result<T>, id: &str) -> bool {
    matches!(r, Err(gaffer::Error::NotSubmittedThroughGaffer(got)) if got == id)
}

/// Every read of `id` says it is a queue job not submitted through gaffer.
async fn every_read_says_not_through_gaffer(engine: &Engine, id: &str) {
    let handle = engine.handle::<Counted>(id).unwrap();
    let joined = tokio::time::timeout(LIMIT, handle.join())
        .await
        .expect("join answers at once");
    assert!(is_not_through_gaffer(&joined, id), "join: {joined:?}");
    let fetched = handle.outcome().await;
    assert!(is_not_through_gaffer(&fetched, id), "outcome: {fetched:?}");
    let status = handle.status().await;
    assert!(is_not_through_gaffer(&status, id), "status: {status:?}");
    let cancelled = handle.cancel().await;
    assert!(
        is_not_through_gaffer(&cancelled, id),
        "cancel: {cancelled:?}"
    );
    let waited = call!(engine.actor(), EngineMessage::AwaitJob, id.to_string()).unwrap();
    assert!(
        matches!(&waited, Err(WaitError::NotSubmittedThroughGaffer(got)) if got == id),
        "{waited:?}"
    );
    let message = joined.unwrap_err().to_string();
    assert!(
        message.contains("not submitted through gaffer"),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_raw_queued_message_is_never_run_and_every_read_says_it_did_not_come_through_gaffer() {
    let clock = common::mock_clock();
    let runs = Arc::new(Runs::default());
    let engine = common::memory_builder(clock.clone())
        .state(runs.clone())
        .register::<Counted>()
        .start()
        .await
        .unwrap();
    // Still in the queue (scheduled a minute ahead): not "unknown", and no
    // wait for an outcome that will never be recorded.
    let later = common::a_minute_later().run_at;
    let scheduled = enqueue_raw(&engine, later).await;
    every_read_says_not_through_gaffer(&engine, &scheduled).await;

    // Claimed: dead-lettered saying why, without running the job's code.
    let claimed = enqueue_raw(&engine, None).await;
    let queue_name = common::job_queue("counted");
    common::eventually("the raw message is dead-lettered", LIMIT, async || {
        let queue = gaffer::testing::raw_queue(&engine).unwrap();
        queue.view().stats(&queue_name).await.unwrap().dead == 1
    })
    .await;
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let record = queue.view().job_record(&claimed).await.unwrap().unwrap();
    drop(queue);
    let last_error = record.last_error.unwrap_or_default();
    assert!(
        last_error.contains("not submitted through gaffer"),
        "{last_error}"
    );
    assert_eq!(runs.get(), 0, "the raw message's job code ran");
    every_read_says_not_through_gaffer(&engine, &claimed).await;

    // A gaffer job of the same type runs as ever.
    assert_eq!(engine.submit(Counted(3)).await.unwrap().await.unwrap(), 3);
    assert_eq!(runs.get(), 1);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_record_without_a_job_type_decodes_as_not_submitted_through_gaffer_not_as_a_wrong_type() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Counted>()
        .start()
        .await
        .unwrap();
    // What an engine before the ownership check recorded for a raw message.
    let record = OutcomeRecord {
        job_id: "01JRAWRAWRAWRAWRAWRAWRAWRA".into(),
        job_type: String::new(),
        input_hash: [0; 32],
        attempts: 1,
        finished_at_ms: common::T0_MS,
        outcome: Outcome::Succeeded(OutputRef::Inline(rmp_serde::to_vec(&5u32).unwrap())),
        history: Vec::new(),
        followups: Vec::new(),
        reason: None,
        tags: None,
    };
    let decoded = engine.decode_outcome::<Counted>(&record).await;
    assert!(
        is_not_through_gaffer(&decoded, "01JRAWRAWRAWRAWRAWRAWRAWRA"),
        "{decoded:?}"
    );
    // A record of another type is still a wrong type.
    let other = OutcomeRecord {
        job_type: "add".into(),
        ..record
    };
    let decoded = engine.decode_outcome::<Counted>(&other).await;
    assert!(
        matches!(&decoded, Err(gaffer::Error::WrongJobType { actual, .. }) if actual == "add"),
        "{decoded:?}"
    );
    engine.shutdown().await.unwrap();
}
