//! Graceful shutdown: running jobs finish and settle, the queue closes (the
//! moment its last user lets go), later work is refused with a typed error,
//! and the store keeps everything. The event stream ends with the engine,
//! whoever still holds it: after the last event of a shutdown, a start
//! that failed, or the `StoreClosed` of a fenced engine.

mod common;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use gaffer::ractor::ActorStatus;
use gaffer::taquba::MockClock;
use gaffer::taquba::object_store::memory::InMemory;
use gaffer::{
    EngineEvent, Error, Job, JobContext, SubmitOptions, job::JobState, protocol::EngineMessage,
    protocol::OutcomeRecord, protocol::WaitError,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{mpsc, oneshot};

use common::{Gate, LIMIT, Ping, within};

/// Where held jobs report that they started (engine state).
type Started = mpsc::UnboundedSender<u64>;

/// A builder on `store` whose [`Held`] jobs wait at `gate`; the receiver hears
/// of each held job as it starts.
fn held_builder(
    store: Arc<InMemory>,
    clock: Arc<MockClock>,
    gate: &Gate,
) -> (gaffer::EngineBuilder, mpsc::UnboundedReceiver<u64>) {
    let (started, rx) = mpsc::unbounded_channel();
    let builder = common::store_builder(store, clock)
        .register::<Held>()
        .state(gate.clone())
        .state::<Started>(started);
    (builder, rx)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Held(u64);

impl Job for Held {
    const NAME: &'static str = "held";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        let _ = ctx.state::<Started>().send(self.0);
        ctx.state::<Gate>().wait().await;
        Ok(self.0 * 10)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Square(u64);

impl Job for Square {
    const NAME: &'static str = "square";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 * self.0)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("square:{}", self.0))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("refused: {0}")]
struct Refused(u64);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Refuse(u64);

impl Job for Refuse {
    const NAME: &'static str = "refuse";
    type Output = ();
    type Error = Refused;
    async fn run(&self, _ctx: JobContext) -> Result<(), Refused> {
        Err(Refused(self.0))
    }
    fn classify(&self, _e: &Refused) -> gaffer::job::FailureKind {
        gaffer::job::FailureKind::Permanent
    }
}

/// Register a waiter for `id` with the supervisor *now* (the message is in its
/// mailbox when this returns), answered when the job ends.
fn await_by_port(
    engine: &gaffer::Engine,
    id: &str,
) -> oneshot::Receiver<Result<OutcomeRecord, WaitError>> {
    let (tx, rx) = oneshot::channel();
    engine
        .actor()
        .cast(EngineMessage::AwaitJob(id.to_string(), tx.into()))
        .expect("the engine actor is running");
    rx
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_lets_running_jobs_finish_and_settle() {
    let store = common::shared_store();
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let (builder, mut started) = held_builder(store.clone(), clock.clone(), &gate);
    let engine = builder.start().await.unwrap();

    const N: u64 = 3;
    let mut handles = Vec::new();
    for n in 1..=N {
        handles.push(engine.submit(Held(n)).await.unwrap());
    }
    let mut running = Vec::new();
    for _ in 0..N {
        running.push(
            tokio::time::timeout(LIMIT, started.recv())
                .await
                .expect("every held job starts")
                .unwrap(),
        );
    }
    running.sort_unstable();
    assert_eq!(running, (1..=N).collect::<Vec<_>>());
    let stats = engine.pool_stats().await.unwrap();
    assert_eq!(stats["held"].running, N as usize, "{stats:?}");

    // Waiters registered before the shutdown starts.
    let ports: Vec<_> = handles
        .iter()
        .map(|h| await_by_port(&engine, h.id()))
        .collect();
    // Typed joins started before the shutdown (on this current-thread runtime a
    // yield lets each spawned join send its AwaitJob before we go on).
    let joins: Vec<_> = handles
        .iter()
        .map(|h| {
            let h = h.clone();
            tokio::spawn(async move { h.join().await })
        })
        .collect();
    tokio::task::yield_now().await;

    let shutting_down = tokio::spawn({
        let engine = engine.clone();
        async move { engine.shutdown().await }
    });
    // Plenty of (virtual) time for a shutdown that does not wait to finish.
    // (Only what must not happen is checked after this sleep: a shorter one
    // could let a defect through, never fail a correct engine.)
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !shutting_down.is_finished(),
        "shutdown returned while jobs were still running"
    );
    for h in &handles {
        assert_eq!(
            engine.status(h.id()).await.unwrap(),
            JobState::Running,
            "job {} during the drain",
            h.id()
        );
    }

    // Release the jobs: the shutdown completes cleanly.
    gate.release(N as usize);
    let report = tokio::time::timeout(LIMIT, shutting_down)
        .await
        .expect("shutdown finishes once the jobs are released")
        .unwrap()
        .expect("shutdown succeeds");
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");

    // Waiters registered before shutdown got the outcomes.
    for (h, port) in handles.iter().zip(ports) {
        let record = port
            .await
            .expect("the waiter was answered")
            .expect("the job ended before the engine stopped");
        let n = record_input(&handles, h.id());
        assert_eq!(
            engine.decode_outcome::<Held>(&record).await.unwrap(),
            Ok(n * 10)
        );
    }
    for (h, join) in handles.iter().zip(joins) {
        let n = record_input(&handles, h.id());
        let joined = join.await.unwrap();
        assert!(
            matches!(joined, Ok(Ok(v)) if v == n * 10),
            "typed join of job {n} started before shutdown: {joined:?}"
        );
    }

    // The outcomes are durable: a new engine on the same store sees them.
    let (builder, _started2) = held_builder(store, clock, &Gate::closed());
    let reopened = builder.start().await.unwrap();
    for h in &handles {
        let n = record_input(&handles, h.id());
        let again = reopened.handle::<Held>(h.id()).unwrap();
        assert_eq!(again.outcome().await.unwrap(), Some(Ok(n * 10)));
        assert_eq!(again.status().await.unwrap(), JobState::Succeeded);
    }
    assert!(reopened.shutdown().await.unwrap().queue_closed);
}

fn shut<T>(r: &Result<T, Error>) -> bool {
    matches!(r, Err(Error::ShutDown))
}

fn record_input(handles: &[gaffer::JobHandle<Held>], id: &str) -> u64 {
    handles.iter().position(|h| h.id() == id).unwrap() as u64 + 1
}

#[tokio::test(start_paused = true)]
async fn submissions_after_shutdown_fail_with_shut_down() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Square>()
        .start()
        .await
        .unwrap();
    let done = engine.submit(Square(3)).await.unwrap();
    assert_eq!(done.clone().await.unwrap(), 9);
    assert!(engine.shutdown().await.unwrap().queue_closed);

    let r = engine.submit(Square(4)).await;
    assert!(shut(&r), "{r:?}");
    let r = engine
        .submit_with(
            Square(5),
            SubmitOptions {
                run_at: Some(UNIX_EPOCH + Duration::from_millis(common::T0_MS + 1000)),
                ..Default::default()
            },
        )
        .await;
    assert!(shut(&r), "{r:?}");
    // A clone shares the same (stopped) engine.
    let r = engine.clone().submit(Square(6)).await;
    assert!(shut(&r), "{r:?}");
    // A duplicate of a finished job is refused too (the store is closed).
    let r = engine.submit(Square(3)).await;
    assert!(shut(&r), "{r:?}");
    // Other operations say the same.
    let r = engine.cancel(done.id()).await;
    assert!(shut(&r), "{r:?}");
    let r = engine.status(done.id()).await;
    assert!(shut(&r), "{r:?}");
    let r = done.join().await;
    assert!(matches!(r, Err(Error::ShutDown)), "{r:?}");
}

#[tokio::test(start_paused = true)]
async fn shutdown_twice_is_harmless() {
    let store = common::shared_store();
    let clock = common::mock_clock();
    let engine = common::store_builder(store.clone(), clock.clone())
        .register::<Square>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Square(7)).await.unwrap();
    assert_eq!(h.clone().await.unwrap(), 49);

    let first = engine.shutdown().await.unwrap();
    assert!(first.queue_closed, "{first:?}");
    assert!(first.problems.is_empty(), "{first:?}");

    // Again, sequentially: a typed answer at once, no panic, no hang.
    let second = tokio::time::timeout(LIMIT, engine.shutdown())
        .await
        .expect("a second shutdown answers");
    assert!(matches!(second, Err(Error::ShutDown)), "{second:?}");

    // Nothing was damaged: a new engine on the store answers the job.
    let reopened = common::store_builder(store.clone(), clock.clone())
        .register::<Square>()
        .start()
        .await
        .unwrap();
    assert_eq!(
        reopened.handle::<Square>(h.id()).unwrap().await.unwrap(),
        49
    );

    // Two shutdowns at once: one does the work, the other is told it is done.
    let (a, b) = tokio::join!(reopened.shutdown(), reopened.shutdown());
    let (clean, other) = match (&a, &b) {
        (Ok(r), other) if r.queue_closed => (r, other),
        (other, Ok(r)) if r.queue_closed => (r, other),
        _ => panic!("neither concurrent shutdown closed the queue: {a:?} / {b:?}"),
    };
    assert!(clean.problems.is_empty(), "{clean:?}");
    assert!(
        matches!(other, Err(Error::ShutDown)) || matches!(other, Ok(r) if !r.queue_closed),
        "{other:?}"
    );

    // And the store opens once more.
    let third = common::store_builder(store, clock)
        .register::<Square>()
        .start()
        .await
        .unwrap();
    assert_eq!(third.status(h.id()).await.unwrap(), JobState::Succeeded);
    assert!(third.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn a_second_engine_opened_on_the_same_in_memory_store_after_shutdown_sees_the_records() {
    let store = common::shared_store();
    let clock = common::mock_clock();
    let first = common::store_builder(store.clone(), clock.clone())
        .register::<Square>()
        .register::<Refuse>()
        .start()
        .await
        .unwrap();
    let ok = first.submit(Square(12)).await.unwrap();
    let failed = first.submit(Refuse(1)).await.unwrap();
    assert_eq!(ok.clone().await.unwrap(), 144);
    let failure = failed.join().await.unwrap().unwrap_err();
    assert_eq!(failure.kind, gaffer::job::FailureKind::Permanent);
    assert_eq!(failure.message, "refused: 1");
    // One not due yet: it must survive the shutdown, queued.
    let in_an_hour = UNIX_EPOCH + Duration::from_millis(common::T0_MS) + Duration::from_secs(3600);
    let later = first
        .submit_with(
            Square(5),
            SubmitOptions {
                run_at: Some(in_an_hour),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(first.shutdown().await.unwrap().queue_closed);

    let second = common::store_builder(store, clock.clone())
        .register::<Square>()
        .register::<Refuse>()
        .start()
        .await
        .unwrap();
    // Finished jobs answer from their records.
    let ok2 = second.handle::<Square>(ok.id()).unwrap();
    assert_eq!(ok2.status().await.unwrap(), JobState::Succeeded);
    assert_eq!(ok2.outcome().await.unwrap(), Some(Ok(144)));
    assert_eq!(ok2.await.unwrap(), 144);
    let failed2 = second.handle::<Refuse>(failed.id()).unwrap();
    assert_eq!(failed2.status().await.unwrap(), JobState::Failed);
    assert_eq!(failed2.join().await.unwrap(), Err(failure));
    // A keyed duplicate is answered from the record, not run again.
    let dup = second.submit(Square(12)).await.unwrap();
    assert_eq!(dup.id(), ok.id());
    assert!(!dup.newly_submitted());
    assert_eq!(dup.await.unwrap(), 144);
    // The scheduled job is still there, and runs when due.
    let later2 = second.handle::<Square>(later.id()).unwrap();
    assert_eq!(later2.status().await.unwrap(), JobState::Scheduled);
    clock.advance(Duration::from_secs(3601));
    assert_eq!(
        tokio::time::timeout(LIMIT, later2.join())
            .await
            .expect("the scheduled job runs once due")
            .unwrap(),
        Ok(25)
    );
    assert!(second.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn a_submission_racing_the_shutdown_is_refused_or_kept() {
    let store = common::shared_store();
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let (builder, mut started) = held_builder(store.clone(), clock.clone(), &gate);
    let engine = builder.start().await.unwrap();
    let running = engine.submit(Held(1)).await.unwrap();
    tokio::time::timeout(LIMIT, started.recv())
        .await
        .expect("the held job starts")
        .unwrap();

    let shutting_down = tokio::spawn({
        let engine = engine.clone();
        async move { engine.shutdown().await }
    });
    // The shutdown is under way (it cannot end while the job is held): a
    // submission now races it. Either outcome below is accepted, so how far
    // the shutdown got in this (virtual) second decides nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!shutting_down.is_finished());

    // Submitted while the engine drains: either refused with a typed error,
    // or accepted durably (then it runs after the next start).
    let racing = engine.submit(Held(2)).await;
    gate.release(1);
    let report = tokio::time::timeout(LIMIT, shutting_down)
        .await
        .expect("shutdown finishes")
        .unwrap()
        .unwrap();
    assert!(report.queue_closed, "{report:?}");

    let gate2 = Gate::closed();
    gate2.release(10);
    let (builder, _started2) = held_builder(store, clock, &gate2);
    let reopened = builder.start().await.unwrap();
    assert_eq!(
        reopened
            .handle::<Held>(running.id())
            .unwrap()
            .await
            .unwrap(),
        10
    );
    match racing {
        Err(Error::ShutDown) => {}
        Ok(h) => {
            let again = reopened.handle::<Held>(h.id()).unwrap();
            let result = tokio::time::timeout(LIMIT, again.join())
                .await
                .expect("an accepted submission runs after the restart");
            assert_eq!(
                result.unwrap(),
                Ok(20),
                "accepted during shutdown, then lost"
            );
        }
        Err(e) => panic!("expected Ok or ShutDown, got {e:?}"),
    }
    assert!(reopened.shutdown().await.unwrap().queue_closed);
}

#[tokio::test(start_paused = true)]
async fn shutdown_closes_the_queue_the_moment_its_last_user_lets_go() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Ping>()
        .start()
        .await
        .unwrap();
    let held = gaffer::testing::raw_queue(&engine).unwrap();
    let shutdown = tokio::spawn({
        let engine = engine.clone();
        async move {
            let report = engine.shutdown().await.unwrap();
            (report, tokio::time::Instant::now())
        }
    });
    // The shutdown has stopped every child: all it waits for now is the
    // queue's last user.
    common::eventually("the engine's actors are stopped", LIMIT, async || {
        engine
            .actor()
            .get_children()
            .iter()
            .all(|child| child.get_status() == ActorStatus::Stopped)
    })
    .await;
    let released = tokio::time::Instant::now();
    drop(held);
    let (report, done) = within(shutdown).await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    assert!(
        done.duration_since(released) < Duration::from_millis(1),
        "the queue closed {:?} after its last user let go",
        done.duration_since(released)
    );
}

/// Answers with an output too large for a record: it is kept as a blob,
/// which retention deletes.
#[derive(Serialize, Deserialize)]
struct Large;

impl Job for Large {
    const NAME: &'static str = "large";
    type Output = Vec<u8>;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<Vec<u8>, Self::Error> {
        Ok(vec![7; 400 * 1024])
    }
}

#[tokio::test(start_paused = true)]
async fn a_retention_pass_that_outlasts_the_release_wait_does_not_keep_the_queue_from_closing() {
    use gaffer::testing::Op;
    let inner = common::shared_store();
    let (store, faults) = common::faults::faulty(&inner);
    let clock = common::mock_clock();
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::object_store(store))
        .open_options(common::test_options(clock.clone()))
        .poll_interval(Duration::from_millis(20))
        .retention(Duration::from_secs(60))
        .register::<Large>()
        .start()
        .await
        .unwrap();
    let out = within(engine.submit(Large).await.unwrap()).await.unwrap();
    assert_eq!(out.len(), 400 * 1024);
    // The pass that removes its record deletes its output blob first, and
    // that delete takes a minute (a store that has become very slow).
    faults.reset_stats();
    faults.set_op_latency(Op::Delete, Duration::from_secs(60));
    clock.advance(Duration::from_secs(61));
    let sweep = tokio::spawn({
        let engine = engine.clone();
        async move { engine.sweep_now().await }
    });
    common::eventually("the pass is deleting the blob", LIMIT, async || {
        faults.stats().of(Op::Delete).0 > 0
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!sweep.is_finished(), "the pass did not stall");
    // The shutdown ends the pass and closes the queue (it waited 5 s for
    // the pass to let go of it, then dropped the queue unclosed).
    let report = within(engine.shutdown()).await.unwrap();
    assert!(report.queue_closed, "{report:?}");
    assert!(report.problems.is_empty(), "{report:?}");
}

// ---------------------------------------------------------------------------
// The event stream ends when the engine stops, whoever still holds it.

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
