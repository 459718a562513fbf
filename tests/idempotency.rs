//! Idempotency keys: one key is one job, whatever races it and however it
//! ended. The reference had a window where a keyed job that had just finished
//! ran again (its duplicate check was outside its lock); these tests prove
//! gaffer has none.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{
    Engine, EngineEvent, Error, Job, JobContext, JobHandle, SubmitOptions, job::FailureKind,
    job::JobState, protocol::SubmitRequest,
};
use serde::{Deserialize, Serialize};

use common::Runs;

/// Limit of anything a test waits on.
const LIMIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// The race: concurrent duplicates against the first run's completion.

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
// Finished jobs, failures, collisions.

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

/// An engine on the in-memory store with every job type of this file but
/// [`Ghost`] (and [`Once`], which has its own engine).
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
