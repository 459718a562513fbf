//! The public API as a new user meets it (issue #11's friction list): the
//! builder's settings compose, the event stream ends at shutdown, a keyed
//! job's id is computable, a batch's items can be listed, "unknown" means
//! one thing on every read path, and a message that did not come through
//! gaffer says so.

mod common;

use std::sync::Arc;
use std::time::Duration;

use gaffer::ractor::call;
use gaffer::taquba::EnqueueOptions;
use gaffer::{
    BulkCtx, Engine, EngineEvent, Error, Job, JobContext, Pipeline, Settings, bulk::ItemError,
    bulk::ItemOutcome, job::JobState, job::MemoWrites, protocol::EngineMessage, protocol::Outcome,
    protocol::OutcomeRecord, protocol::OutputRef, protocol::WaitError,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use common::{Gate, Runs};

/// Upper bound (virtual time) for anything a test waits on.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Serialize, Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

impl Job for Add {
    const NAME: &'static str = "add";
    type Output = i64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<i64, Self::Error> {
        Ok(self.a + self.b)
    }
}

// ---------------------------------------------------------------------------
// 1. Builder settings compose in any order; every setting has its setter.

/// Settings with every field off its default (the literal names every field,
/// so a new setting fails to compile here until it gets a setter below).
fn every_setting_changed() -> Settings {
    Settings {
        queue_name: "q-jobs".into(),
        bulk_queue_name: "q-bulk".into(),
        batch_window: 7,
        max_concurrent_jobs: 3,
        poll_interval: Duration::from_millis(30),
        retention: Some(Duration::from_secs(90)),
        blob_prefix: "blobs-elsewhere".into(),
        settlement_window: 5,
        restart_backoff_base: Duration::from_millis(2),
        restart_backoff_max: Duration::from_millis(40),
        shutdown_grace: Some(Duration::from_secs(4)),
        max_restarts: 11,
        restart_window: Duration::from_secs(12),
        max_interruptions: 6,
        interruption_window: Duration::from_secs(13),
        interruption_memory: Duration::from_secs(14),
        memo_writes: MemoWrites::Immediate,
        client_intake: false,
        intake_poll: Duration::from_millis(300),
        request_retention: Duration::from_secs(15),
    }
}

#[tokio::test(start_paused = true)]
async fn every_builder_setter_reaches_the_engines_settings() {
    let want = every_setting_changed();
    let default = Settings::default();
    // Each field differs from its default, so a setter that did nothing shows.
    for (field, same) in [
        ("queue_name", want.queue_name == default.queue_name),
        (
            "bulk_queue_name",
            want.bulk_queue_name == default.bulk_queue_name,
        ),
        ("batch_window", want.batch_window == default.batch_window),
        (
            "max_concurrent_jobs",
            want.max_concurrent_jobs == default.max_concurrent_jobs,
        ),
        ("poll_interval", want.poll_interval == default.poll_interval),
        ("retention", want.retention == default.retention),
        ("blob_prefix", want.blob_prefix == default.blob_prefix),
        (
            "settlement_window",
            want.settlement_window == default.settlement_window,
        ),
        (
            "restart_backoff_base",
            want.restart_backoff_base == default.restart_backoff_base,
        ),
        (
            "restart_backoff_max",
            want.restart_backoff_max == default.restart_backoff_max,
        ),
        (
            "shutdown_grace",
            want.shutdown_grace == default.shutdown_grace,
        ),
        ("max_restarts", want.max_restarts == default.max_restarts),
        (
            "restart_window",
            want.restart_window == default.restart_window,
        ),
        (
            "max_interruptions",
            want.max_interruptions == default.max_interruptions,
        ),
        (
            "interruption_window",
            want.interruption_window == default.interruption_window,
        ),
        (
            "interruption_memory",
            want.interruption_memory == default.interruption_memory,
        ),
        ("memo_writes", want.memo_writes == default.memo_writes),
        ("client_intake", want.client_intake == default.client_intake),
        ("intake_poll", want.intake_poll == default.intake_poll),
        (
            "request_retention",
            want.request_retention == default.request_retention,
        ),
    ] {
        assert!(!same, "the test value of `{field}` is its default");
    }

    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::in_memory())
        .open_options(common::test_options(common::mock_clock()))
        .queue_name(want.queue_name.clone())
        .bulk_queue_name(want.bulk_queue_name.clone())
        .batch_window(want.batch_window)
        .max_concurrent_jobs(want.max_concurrent_jobs)
        .poll_interval(want.poll_interval)
        .retention(Duration::from_secs(90))
        .blob_prefix(want.blob_prefix.clone())
        .settlement_window(want.settlement_window)
        .restart_backoff_base(want.restart_backoff_base)
        .restart_backoff_max(want.restart_backoff_max)
        .shutdown_grace(Duration::from_secs(4))
        .max_restarts(want.max_restarts)
        .restart_window(want.restart_window)
        .max_interruptions(want.max_interruptions)
        .interruption_window(want.interruption_window)
        .interruption_memory(want.interruption_memory)
        .memo_writes(want.memo_writes)
        .client_intake(want.client_intake)
        .intake_poll(want.intake_poll)
        .request_retention(want.request_retention)
        .register::<Add>()
        .start()
        .await
        .unwrap();
    assert_eq!(engine.settings(), &want);
    // The settings are in force: the job type's queue has the new prefix.
    let handle = engine.submit(Add { a: 1, b: 1 }).await.unwrap();
    assert_eq!(handle.await.unwrap(), 2);
    let queues = gaffer::testing::raw_queue(&engine)
        .unwrap()
        .view()
        .list_queues()
        .await
        .unwrap();
    assert!(queues.iter().any(|q| q == "q-jobs.add"), "{queues:?}");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn settings_replace_what_was_set_before_and_a_setter_after_changes_its_one_field() {
    let base = Settings {
        max_concurrent_jobs: 4,
        batch_window: 99,
        ..Settings::default()
    };
    let retention = Duration::from_secs(42);
    // The last call wins: `settings` replaces the setters called before it…
    let before = gaffer::Engine::builder()
        .retention(retention)
        .max_restarts(7)
        .settings(base.clone())
        .effective_settings();
    assert_eq!(before, base);
    // …and a setter called after it changes its one field.
    let after = gaffer::Engine::builder()
        .settings(base.clone())
        .retention(retention)
        .max_restarts(7)
        .effective_settings();
    assert_eq!(
        after,
        Settings {
            retention: Some(retention),
            max_restarts: 7,
            ..base
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_started_engine_runs_with_the_last_call_of_each_setting() {
    let engine = common::memory_builder(common::mock_clock())
        .settings(Settings {
            max_concurrent_jobs: 2,
            ..Settings::default()
        })
        .retention(Duration::from_secs(42))
        .register::<Add>()
        .start()
        .await
        .unwrap();
    let settings = engine.settings().clone();
    assert_eq!(settings.retention, Some(Duration::from_secs(42)));
    assert_eq!(settings.max_concurrent_jobs, 2);
    // memory_builder's poll interval (a setter before `settings`) was
    // replaced by the settings' own.
    assert_eq!(settings.poll_interval, Settings::default().poll_interval);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 2. The event stream ends when the engine stops, whoever still holds it.

/// Receive the events left on `rx` until its stream ends; panics if it does
/// not end within `limit`.
async fn drain_until_closed(
    rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    limit: Duration,
) -> Vec<EngineEvent> {
    let mut seen = Vec::new();
    tokio::time::timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(event) => seen.push(event),
                Err(RecvError::Lagged(n)) => panic!("lagged by {n} events"),
                Err(RecvError::Closed) => return,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the event stream did not end; saw {seen:#?}"));
    seen
}

#[tokio::test(start_paused = true)]
async fn subscribers_see_a_last_shutdown_event_and_then_the_end_while_engine_clones_live() {
    let builder = common::memory_builder(common::mock_clock()).register::<Add>();
    let mut from_start = builder.subscribe();
    let engine = builder.start().await.unwrap();
    let mut later = engine.subscribe();
    let clone = engine.clone();
    assert_eq!(
        engine
            .submit(Add { a: 2, b: 3 })
            .await
            .unwrap()
            .await
            .unwrap(),
        5
    );

    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    for rx in [&mut from_start, &mut later] {
        let seen = drain_until_closed(rx, LIMIT).await;
        assert!(
            seen.iter()
                .any(|e| matches!(e, EngineEvent::JobSucceeded { .. })),
            "{seen:#?}"
        );
        assert_eq!(
            seen.last(),
            Some(&EngineEvent::ShutDown {
                report: report.clone()
            }),
            "the last event is the shutdown with its report"
        );
    }
    // A subscription taken after the stop is already ended.
    let mut after = clone.subscribe();
    assert_eq!(after.recv().await, Err(RecvError::Closed));
    drop(clone);
}

#[tokio::test(start_paused = true)]
async fn a_builders_subscription_ends_when_the_start_fails() {
    // Zero workers: refused at start.
    let builder = common::memory_builder(common::mock_clock()).max_concurrent_jobs(0);
    let mut rx = builder.subscribe();
    assert!(builder.register::<Add>().start().await.is_err());
    assert_eq!(rx.recv().await, Err(RecvError::Closed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_engines_stream_ends_after_its_store_closed_event() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let first = common::disk_builder(dir.path(), clock.clone())
        .register::<Add>()
        .start()
        .await
        .unwrap();
    let mut events = first.subscribe();
    let second = common::disk_builder(dir.path(), clock)
        .register::<Add>()
        .start()
        .await
        .unwrap();
    let seen = drain_until_closed(&mut events, Duration::from_secs(30)).await;
    assert!(
        matches!(seen.last(), Some(EngineEvent::StoreClosed { .. })),
        "{seen:#?}"
    );
    // `first` is alive (not dropped) and its stream ended anyway.
    assert_eq!(first.subscribe().recv().await, Err(RecvError::Closed));
    second.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 3. A keyed job's id, from its key alone.

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
// 4. A batch's items, listed a page at a time with their typed outputs.

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

// ---------------------------------------------------------------------------
// 5. One meaning on every read path: `Ok(None)` = exists, not ended;
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
    clock.advance(Duration::from_secs(61));
    let swept = engine.sweep_now().await.unwrap();
    assert!(swept.expired >= 1, "{swept:?}");
    every_read_says_not_found(&engine, handle.id()).await;
    every_read_says_not_found(&engine, "never-submitted").await;
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// 6. A message put on a job type's queue directly, not through gaffer, is
//    not run and every read of it says so.

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
