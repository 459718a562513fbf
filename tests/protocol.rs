//! The engine's actor protocol: a service (or a plain `ractor` actor) talks to
//! the supervisor by `EngineMessage`s and learns of outcomes by message.

mod common;

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use gaffer::ractor::{self, Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use gaffer::{
    Engine, EngineEvent, Error, Job, JobContext, SubmitOptions, job::CancelResult,
    job::FailureKind, job::JobState, protocol::EngineMessage, protocol::JobFinished,
};
use serde::{Deserialize, Serialize};

use common::LIMIT;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Double(u64);

impl Job for Double {
    const NAME: &'static str = "double";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 * 2)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("flaky failure on attempt {0}")]
struct Flake(u32);

/// Fails (transiently) on its first attempt, succeeds on the next.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct FlakyOnce(u64);

impl Job for FlakyOnce {
    const NAME: &'static str = "flaky-once";
    type Output = u64;
    type Error = Flake;
    async fn run(&self, ctx: JobContext) -> Result<u64, Flake> {
        if ctx.attempt() == 1 {
            Err(Flake(ctx.attempt()))
        } else {
            Ok(self.0 + 1)
        }
    }
}

/// Always fails transiently; two attempts.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AlwaysFails;

impl Job for AlwaysFails {
    const NAME: &'static str = "always-fails";
    type Output = ();
    type Error = Flake;
    async fn run(&self, ctx: JobContext) -> Result<(), Flake> {
        Err(Flake(ctx.attempt()))
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(2)
    }
}

// ---------------------------------------------------------------------------
// A plain ractor actor that submits jobs and learns their outcomes by message.

#[derive(Debug)]
enum CollectorMsg {
    /// Submit these jobs, answer with `(input, output)` once all have ended.
    Start(Vec<u64>, RpcReplyPort<Vec<(u64, u64)>>),
    /// A watched job ended (boxed: it carries the outcome record).
    Finished(Box<JobFinished>),
}

// With feature `cluster`, ractor has no blanket `Message` impl.
#[cfg(feature = "cluster")]
impl ractor::Message for CollectorMsg {}

impl From<JobFinished> for CollectorMsg {
    fn from(f: JobFinished) -> Self {
        Self::Finished(Box::new(f))
    }
}

impl TryFrom<CollectorMsg> for JobFinished {
    type Error = CollectorMsg;
    fn try_from(m: CollectorMsg) -> Result<Self, CollectorMsg> {
        match m {
            CollectorMsg::Finished(f) => Ok(*f),
            other => Err(other),
        }
    }
}

struct Collector;

struct CollectorState {
    engine: Engine,
    /// run id → input, of jobs not yet finished.
    pending: HashMap<String, u64>,
    results: Vec<(u64, u64)>,
    reply: Option<RpcReplyPort<Vec<(u64, u64)>>>,
}

impl Actor for Collector {
    type Msg = CollectorMsg;
    type State = CollectorState;
    type Arguments = Engine;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        engine: Engine,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(CollectorState {
            engine,
            pending: HashMap::new(),
            results: Vec::new(),
            reply: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CollectorMsg::Start(inputs, reply) => {
                state.reply = Some(reply);
                let engine_actor = state.engine.actor().clone();
                let mut ids = Vec::new();
                for n in inputs {
                    let request =
                        gaffer::protocol::submit_request(&Double(n), SubmitOptions::default())?;
                    let submitted = ractor::call!(engine_actor, EngineMessage::SubmitJob, request)
                        .map_err(|e| format!("SubmitJob call failed: {e}"))??;
                    assert!(submitted.newly_submitted);
                    state.pending.insert(submitted.run_id.clone(), n);
                    ids.push(submitted.run_id);
                }
                for id in ids {
                    engine_actor
                        .cast(EngineMessage::WatchJob(id, myself.get_derived()))
                        .map_err(|e| format!("WatchJob cast failed: {e}"))?;
                }
            }
            CollectorMsg::Finished(finished) => {
                let JobFinished { run_id, result } = *finished;
                let input = state.pending.remove(&run_id).ok_or_else(|| {
                    format!("told of a job not watched (or told twice): {run_id}")
                })?;
                let record = result.map_err(|e| format!("job {run_id} has no outcome: {e}"))?;
                let output = state
                    .engine
                    .decode_outcome::<Double>(&record)
                    .await?
                    .map_err(|e| format!("job {run_id} failed: {e}"))?;
                state.results.push((input, output));
                if state.pending.is_empty()
                    && let Some(reply) = state.reply.take()
                {
                    let mut results = std::mem::take(&mut state.results);
                    results.sort_unstable();
                    let _ = reply.send(results);
                }
            }
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_plain_ractor_actor_submits_jobs_and_receives_their_outcomes_by_message() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Double>()
        .start()
        .await
        .unwrap();
    let (collector, collector_task) = Actor::spawn(None, Collector, engine.clone()).await.unwrap();

    let inputs: Vec<u64> = (1..=8).collect();
    let results = tokio::time::timeout(LIMIT, async {
        ractor::call!(collector, CollectorMsg::Start, inputs.clone())
    })
    .await
    .expect("the collector did not report in time")
    .expect("the collector failed (see its error above)");

    let expected: Vec<(u64, u64)> = inputs.iter().map(|n| (*n, n * 2)).collect();
    assert_eq!(results, expected);

    collector.stop(None);
    collector_task.await.unwrap();
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn call_macro_awaits_a_job_and_reads_its_status() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Double>()
        .start()
        .await
        .unwrap();
    let request = gaffer::protocol::submit_request(&Double(21), SubmitOptions::default()).unwrap();
    let submitted = ractor::call!(engine.actor(), EngineMessage::SubmitJob, request)
        .expect("engine actor answers")
        .expect("submission accepted");
    let id = submitted.run_id;

    let answer = tokio::time::timeout(LIMIT, async {
        ractor::call!(engine.actor(), EngineMessage::AwaitJob, id.clone())
    })
    .await
    .expect("AwaitJob answered in time");
    let record = match answer {
        Ok(Ok(record)) => record,
        other => panic!("expected Ok(Ok(record)), got {other:?}"),
    };
    assert_eq!(record.job_type, Double::NAME);
    assert_eq!(record.attempts, 1);
    assert!(
        matches!(record.outcome, gaffer::protocol::Outcome::Succeeded(_)),
        "{record:?}"
    );
    assert_eq!(
        engine.decode_outcome::<Double>(&record).await.unwrap(),
        Ok(42)
    );

    let status = ractor::call!(engine.actor(), EngineMessage::JobStatus, id.clone());
    assert!(matches!(status, Ok(Ok(JobState::Succeeded))), "{status:?}");
    // A well-formed id nobody submitted has no status.
    let unknown = ractor::call!(
        engine.actor(),
        EngineMessage::JobStatus,
        "never-submitted".to_string()
    );
    assert!(
        matches!(unknown, Ok(Err(Error::JobNotFound(_)))),
        "{unknown:?}"
    );

    // AwaitJob on a finished job answers again, from the durable record.
    let again = ractor::call!(engine.actor(), EngineMessage::AwaitJob, id.clone());
    assert!(matches!(&again, Ok(Ok(r)) if *r == record), "{again:?}");

    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn cancel_job_message_cancels_a_scheduled_job() {
    let clock = common::mock_clock();
    let engine = common::memory_builder(clock.clone())
        .register::<Double>()
        .start()
        .await
        .unwrap();
    let in_an_hour = UNIX_EPOCH + Duration::from_millis(common::T0_MS) + Duration::from_secs(3600);
    let request = gaffer::protocol::submit_request(
        &Double(5),
        SubmitOptions {
            run_at: Some(in_an_hour),
            ..Default::default()
        },
    )
    .unwrap();
    let id = ractor::call!(engine.actor(), EngineMessage::SubmitJob, request)
        .unwrap()
        .unwrap()
        .run_id;
    let status = ractor::call!(engine.actor(), EngineMessage::JobStatus, id.clone());
    assert!(matches!(status, Ok(Ok(JobState::Scheduled))), "{status:?}");

    let mut events = engine.subscribe();
    let cancelled = ractor::call!(engine.actor(), EngineMessage::CancelJob, id.clone());
    assert!(
        matches!(cancelled, Ok(Ok(CancelResult::Cancelled))),
        "{cancelled:?}"
    );
    common::wait_event(
        &mut events,
        LIMIT,
        |e| matches!(e, EngineEvent::JobCancelled { run_id } if *run_id == id),
    )
    .await;

    let record = match ractor::call!(engine.actor(), EngineMessage::AwaitJob, id.clone()) {
        Ok(Ok(record)) => record,
        other => panic!("expected Ok(Ok(record)), got {other:?}"),
    };
    assert_eq!(record.outcome, gaffer::protocol::Outcome::Cancelled);
    let typed = engine.decode_outcome::<Double>(&record).await.unwrap();
    assert!(
        matches!(&typed, Err(e) if e.is_cancelled()),
        "expected a cancelled JobError, got {typed:?}"
    );

    let status = ractor::call!(engine.actor(), EngineMessage::JobStatus, id.clone());
    assert!(matches!(status, Ok(Ok(JobState::Cancelled))), "{status:?}");
    let again = ractor::call!(engine.actor(), EngineMessage::CancelJob, id.clone());
    assert!(
        matches!(
            again,
            Ok(Ok(CancelResult::AlreadyFinished(JobState::Cancelled)))
        ),
        "{again:?}"
    );

    // Its time comes and goes: it stays cancelled, and the engine keeps serving.
    clock.advance(Duration::from_secs(2 * 3600));
    let other = engine.submit(Double(1)).await.unwrap();
    assert_eq!(other.await.unwrap(), 2);
    assert_eq!(engine.status(&id).await.unwrap(), JobState::Cancelled);

    assert!(engine.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn shutdown_message_stops_the_engine_and_later_submissions_fail() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Double>()
        .start()
        .await
        .unwrap();
    // It serves before.
    let before = engine.submit(Double(3)).await.unwrap();
    assert_eq!(before.clone().await.unwrap(), 6);

    let report = tokio::time::timeout(LIMIT, async {
        ractor::call!(engine.actor(), EngineMessage::Shutdown)
    })
    .await
    .expect("Shutdown answered in time")
    .expect("the engine actor answers Shutdown");
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");

    // The supervisor exits after answering.
    engine
        .actor()
        .wait(Some(Duration::from_secs(30)))
        .await
        .expect("the supervisor stops after Shutdown");
    assert_eq!(engine.actor().get_status(), ractor::ActorStatus::Stopped);

    // By message: the actor is gone.
    let request = gaffer::protocol::submit_request(&Double(4), SubmitOptions::default()).unwrap();
    let by_message = ractor::call!(engine.actor(), EngineMessage::SubmitJob, request);
    assert!(
        matches!(by_message, Err(_) | Ok(Err(Error::ShutDown))),
        "{by_message:?}"
    );
    // Through the typed API: a typed error.
    let typed = engine.submit(Double(4)).await;
    assert!(matches!(typed, Err(Error::ShutDown)), "{typed:?}");
}

#[tokio::test(start_paused = true)]
async fn lifecycle_events_are_published() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Double>()
        .register::<FlakyOnce>()
        .register::<AlwaysFails>()
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();

    let ok = engine.submit(Double(1)).await.unwrap();
    let flaky = engine.submit(FlakyOnce(10)).await.unwrap();
    let doomed = engine.submit(AlwaysFails).await.unwrap();
    let (ok_id, flaky_id, doomed_id) = (
        ok.id().to_string(),
        flaky.id().to_string(),
        doomed.id().to_string(),
    );

    // Every event each job is going to publish (the failure event of an attempt
    // and the next attempt's start come from different tasks, so the order
    // across them is not fixed: wait for all of them, then check).
    let has = |evs: &[EngineEvent], id: &str, want: &dyn Fn(&EngineEvent) -> bool| {
        evs.iter().any(|e| run_of(e) == Some(id) && want(e))
    };
    let seen = common::collect_events_until(&mut events, LIMIT, |evs| {
        has(evs, &ok_id, &|e| {
            matches!(e, EngineEvent::JobSucceeded { .. })
        }) && has(evs, &flaky_id, &|e| {
            matches!(e, EngineEvent::JobSucceeded { .. })
        }) && has(evs, &flaky_id, &|e| {
            matches!(e, EngineEvent::JobFailed { .. })
        }) && has(evs, &doomed_id, &|e| {
            matches!(
                e,
                EngineEvent::JobFailed {
                    retrying: false,
                    ..
                }
            )
        }) && has(evs, &doomed_id, &|e| {
            matches!(e, EngineEvent::JobFailed { retrying: true, .. })
        })
    })
    .await;
    let of = |id: &str| -> Vec<EngineEvent> {
        seen.iter()
            .filter(|e| run_of(e) == Some(id))
            .cloned()
            .collect()
    };

    // A job that succeeds: started once, then succeeded.
    assert_eq!(
        of(&ok_id),
        vec![
            EngineEvent::JobStarted {
                run_id: ok_id.clone(),
                job_type: "double".into(),
                attempt: 1
            },
            EngineEvent::JobSucceeded {
                run_id: ok_id.clone(),
                job_type: "double".into()
            },
        ]
    );

    // A job that fails once: both attempts started, one retrying failure, one
    // success (the failure event and the retry's start come from different
    // tasks, so only the success is required to be last).
    let flaky_events = of(&flaky_id);
    for attempt in [1, 2] {
        assert!(
            flaky_events.contains(&EngineEvent::JobStarted {
                run_id: flaky_id.clone(),
                job_type: "flaky-once".into(),
                attempt
            }),
            "attempt {attempt} not started: {flaky_events:#?}"
        );
    }
    let failures: Vec<_> = flaky_events
        .iter()
        .filter(|e| matches!(e, EngineEvent::JobFailed { .. }))
        .collect();
    assert_eq!(
        failures,
        vec![&EngineEvent::JobFailed {
            run_id: flaky_id.clone(),
            job_type: "flaky-once".into(),
            kind: FailureKind::Transient,
            message: "flaky failure on attempt 1".into(),
            retrying: true,
        }],
        "{flaky_events:#?}"
    );
    // Causal order within an attempt: started before its outcome.
    let pos = |want: &EngineEvent| flaky_events.iter().position(|e| e == want);
    let started = |attempt| EngineEvent::JobStarted {
        run_id: flaky_id.clone(),
        job_type: "flaky-once".into(),
        attempt,
    };
    let succeeded = EngineEvent::JobSucceeded {
        run_id: flaky_id.clone(),
        job_type: "flaky-once".into(),
    };
    assert!(pos(&started(1)) < pos(failures[0]), "{flaky_events:#?}");
    assert!(pos(&started(2)) < pos(&succeeded), "{flaky_events:#?}");
    assert_eq!(
        flaky_events
            .iter()
            .filter(|e| matches!(e, EngineEvent::JobSucceeded { .. }))
            .count(),
        1,
        "{flaky_events:#?}"
    );
    assert_eq!(flaky.await.unwrap(), 11);

    // A job that always fails: a retrying failure, then a final one; never a success.
    let doomed_events = of(&doomed_id);
    let doomed_failures: Vec<(bool, String)> = doomed_events
        .iter()
        .filter_map(|e| match e {
            EngineEvent::JobFailed {
                retrying,
                message,
                kind: FailureKind::Transient,
                ..
            } => Some((*retrying, message.clone())),
            _ => None,
        })
        .collect();
    let mut sorted = doomed_failures.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![
            (false, "flaky failure on attempt 2".to_string()),
            (true, "flaky failure on attempt 1".to_string()),
        ],
        "{doomed_events:#?}"
    );
    assert!(
        !doomed_events
            .iter()
            .any(|e| matches!(e, EngineEvent::JobSucceeded { .. })),
        "{doomed_events:#?}"
    );
    let doomed_result = doomed.join().await.unwrap();
    assert!(
        matches!(&doomed_result, Err(e) if e.kind == FailureKind::Transient && !e.is_cancelled()),
        "{doomed_result:?}"
    );

    assert_eq!(ok.await.unwrap(), 2);
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

/// A subscriber following one job must see its attempts' failures in order:
/// `retrying: true` before the final `retrying: false`.
#[tokio::test(start_paused = true)]
async fn failure_events_of_a_job_arrive_in_attempt_order() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<AlwaysFails>()
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(engine.submit(AlwaysFails).await.unwrap().id().to_string());
    }
    let seen = common::collect_events_until(&mut events, LIMIT, |evs| {
        evs.iter()
            .filter(|e| matches!(e, EngineEvent::JobFailed { .. }))
            .count()
            == 2 * ids.len()
    })
    .await;
    for id in &ids {
        let retrying: Vec<bool> = seen
            .iter()
            .filter_map(|e| match e {
                EngineEvent::JobFailed {
                    run_id, retrying, ..
                } if run_id == id => Some(*retrying),
                _ => None,
            })
            .collect();
        assert_eq!(
            retrying,
            vec![true, false],
            "job {id}: the final failure was published before the retrying one"
        );
    }
    assert!(engine.shutdown().await.unwrap().queue_closed);
}

fn run_of(e: &EngineEvent) -> Option<&str> {
    match e {
        EngineEvent::JobStarted { run_id, .. }
        | EngineEvent::JobSucceeded { run_id, .. }
        | EngineEvent::JobFailed { run_id, .. }
        | EngineEvent::JobCancelled { run_id } => Some(run_id),
        _ => None,
    }
}
