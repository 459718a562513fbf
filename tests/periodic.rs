//! Periodic jobs (issue #16 §1): one run per tick, across restarts, crashes
//! and a second engine on the store; missed ticks by policy; a long interval
//! that still fires when the engine restarts every 30 s; bad schedules as
//! typed errors; schedules added at run time, by method and by message.
//!
//! Ticks follow taquba's `MockClock`, which the tests move. The in-memory
//! tests run under paused tokio time (the engine's timer wakes it at least
//! every poll interval, so a moved clock is noticed); the local-disk tests
//! restart engines on a real directory. Nothing sleeps to wait: tests wait
//! for events, for runs to be counted, or call `Engine::check_periodic`,
//! which fires what is due and answers when it is durable.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::taquba::MockClock;
use gaffer::{
    Engine, EngineBuilder, EngineEvent, Error, Job, JobContext, job::JobState, periodic::Missed,
    periodic::PeriodicStatus, periodic::Schedule, periodic::ScheduleError, periodic::Tick,
};
use serde::{Deserialize, Serialize};

use common::{Gate, LIMIT, T0_MS, shut_down_cleanly, within};

const HOUR: Duration = Duration::from_secs(3600);
const HOUR_MS: u64 = 3_600_000;

/// What the periodic jobs' runs saw: each run's tick, in the order the runs
/// finished; the gate every run waits at first.
struct Log {
    ran: Mutex<Vec<u64>>,
    count: tokio::sync::watch::Sender<usize>,
    gate: Gate,
}

impl Log {
    fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Self {
            ran: Mutex::new(Vec::new()),
            count: tokio::sync::watch::channel(0).0,
            gate,
        })
    }

    fn ran(&self) -> Vec<u64> {
        self.ran.lock().unwrap().clone()
    }

    /// Wait until `n` runs finished; panics after [`LIMIT`].
    async fn wait_for(&self, n: usize) {
        let mut count = self.count.subscribe();
        within(count.wait_for(|c| *c >= n))
            .await
            .expect("the log lives while borrowed");
    }
}

/// A periodic job's run: waits at the log's gate, then logs its tick.
#[derive(Serialize, Deserialize)]
struct Beat {
    at_ms: u64,
}

impl Job for Beat {
    const NAME: &'static str = "beat";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        let log = ctx.state::<Arc<Log>>();
        log.gate.wait().await;
        let mut ran = log.ran.lock().unwrap();
        ran.push(self.at_ms);
        log.count.send_replace(ran.len());
        Ok(self.at_ms)
    }
}

fn beat(tick: &Tick) -> Beat {
    Beat { at_ms: tick.at_ms }
}

fn hourly(missed: Missed) -> Schedule {
    Schedule::every(HOUR).on_missed(missed)
}

/// An engine on `store` with [`Beat`] registered and scheduled hourly.
fn on_store(
    store: &Arc<gaffer::taquba::object_store::memory::InMemory>,
    clock: &Arc<MockClock>,
    log: &Arc<Log>,
    missed: Missed,
) -> EngineBuilder {
    common::shared_memory_builder(store.clone(), clock.clone())
        .register::<Beat>()
        .state(log.clone())
        .periodic("beat", hourly(missed), beat)
}

/// An engine on the directory `dir`, as [`on_store`].
fn on_disk(dir: &std::path::Path, clock: &Arc<MockClock>, log: &Arc<Log>) -> EngineBuilder {
    common::disk_builder(dir, clock.clone())
        .register::<Beat>()
        .state(log.clone())
        .periodic("beat", hourly(Missed::RunOnce), beat)
}

/// The store's record of the periodic job `name`.
async fn record(engine: &Engine, name: &str) -> PeriodicStatus {
    engine
        .periodic_jobs()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.record.name == name)
        .unwrap_or_else(|| panic!("no record of periodic job `{name}`"))
}

/// The id of the job of `name`'s tick at `at_ms`.
fn tick_id(name: &str, at_ms: u64) -> String {
    Tick::new(name, at_ms).job_id
}

/// Nothing of [`Beat`] is queued, scheduled or running.
async fn beats_idle(engine: &Engine) -> bool {
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    let t = common::totals(queue.view(), &common::job_queue(Beat::NAME)).await;
    t.pending == 0 && t.scheduled == 0 && t.claimed == 0
}

#[tokio::test(start_paused = true)]
async fn three_ticks_make_three_runs() {
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    let builder = on_store(&common::shared_store(), &clock, &log, Missed::RunOnce);
    let mut events = builder.subscribe();
    let engine = builder.start().await.unwrap();
    // The record is written at the first check, at the start: nothing due.
    assert_eq!(engine.check_periodic().await.unwrap(), 0);
    let rec = record(&engine, "beat").await;
    assert_eq!(rec.record.cursor_ms, T0_MS);
    assert_eq!(rec.next_due_ms, Some(T0_MS + HOUR_MS));

    for k in 1..=3u64 {
        clock.advance(HOUR);
        // The engine's own timer notices the clock moved and fires the tick.
        let fired = common::wait_event(&mut events, LIMIT, |e| {
            matches!(e, EngineEvent::PeriodicFired { .. })
        })
        .await;
        let tick = T0_MS + k * HOUR_MS;
        assert_eq!(
            fired,
            EngineEvent::PeriodicFired {
                name: "beat".into(),
                tick_ms: tick,
                run_id: tick_id("beat", tick),
            }
        );
        log.wait_for(k as usize).await;
    }
    assert_eq!(
        log.ran(),
        vec![T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS, T0_MS + 3 * HOUR_MS]
    );
    // Nothing more is due; each tick's job is its own, and succeeded.
    assert_eq!(engine.check_periodic().await.unwrap(), 0);
    for k in 1..=3 {
        let id = tick_id("beat", T0_MS + k * HOUR_MS);
        let handle = engine.handle::<Beat>(&id).unwrap();
        assert_eq!(within(handle).await.unwrap(), T0_MS + k * HOUR_MS);
        assert_eq!(engine.status(&id).await.unwrap(), JobState::Succeeded);
    }
    let rec = record(&engine, "beat").await;
    assert_eq!(rec.record.fired, 3);
    assert_eq!(rec.record.last_fired_ms, Some(T0_MS + 3 * HOUR_MS));
    assert_eq!(
        rec.record.last_run_id,
        Some(tick_id("beat", T0_MS + 3 * HOUR_MS))
    );
    assert_eq!(rec.next_due_ms, Some(T0_MS + 4 * HOUR_MS));
    assert_eq!(rec.schedule, "every 1h");
    shut_down_cleanly(&engine).await;
}

/// One tick runs, the engine stops, five ticks pass, the engine starts
/// again: the policy decides what runs for the five; then the next tick
/// runs as usual.
async fn five_missed_ticks(missed: Missed) -> Vec<u64> {
    let clock = common::mock_clock();
    let store = common::shared_store();
    let log = Log::new(Gate::opened());
    let first = on_store(&store, &clock, &log, missed)
        .start()
        .await
        .unwrap();
    first.check_periodic().await.unwrap();
    clock.advance(HOUR);
    first.check_periodic().await.unwrap();
    log.wait_for(1).await;
    shut_down_cleanly(&first).await;

    // Down for five ticks (and a bit).
    clock.advance(5 * HOUR + Duration::from_secs(60));
    let second = on_store(&store, &clock, &log, missed)
        .start()
        .await
        .unwrap();
    // Its first check (at its start, or this one) handles the missed ticks.
    second.check_periodic().await.unwrap();
    let expected_extra = match missed {
        Missed::Skip => 0,
        Missed::RunOnce => 1,
        Missed::CatchUp(n) => n as usize,
    };
    log.wait_for(1 + expected_extra).await;
    common::eventually("the missed ticks' jobs are done", LIMIT, async || {
        beats_idle(&second).await
    })
    .await;
    let rec = record(&second, "beat").await;
    assert_eq!(rec.record.fired, 1 + expected_extra as u64, "{missed}");
    // Every missed tick is handled, fired or not.
    assert_eq!(rec.record.cursor_ms, T0_MS + 6 * HOUR_MS, "{missed}");

    // The next tick runs whatever the policy.
    clock.advance(HOUR);
    second.check_periodic().await.unwrap();
    log.wait_for(2 + expected_extra).await;
    assert_eq!(
        record(&second, "beat").await.record.fired,
        2 + expected_extra as u64
    );
    shut_down_cleanly(&second).await;
    let mut ran = log.ran();
    ran.sort();
    ran
}

#[tokio::test(start_paused = true)]
async fn five_missed_ticks_with_run_once_make_one_run() {
    let h = |k: u64| T0_MS + k * HOUR_MS;
    assert_eq!(
        five_missed_ticks(Missed::RunOnce).await,
        vec![h(1), h(6), h(7)]
    );
}

#[tokio::test(start_paused = true)]
async fn five_missed_ticks_with_skip_make_none() {
    let h = |k: u64| T0_MS + k * HOUR_MS;
    assert_eq!(five_missed_ticks(Missed::Skip).await, vec![h(1), h(7)]);
}

#[tokio::test(start_paused = true)]
async fn five_missed_ticks_with_catch_up_3_make_three_runs() {
    let h = |k: u64| T0_MS + k * HOUR_MS;
    assert_eq!(
        five_missed_ticks(Missed::CatchUp(3)).await,
        vec![h(1), h(4), h(5), h(6), h(7)]
    );
}

/// River's periodic jobs never fire under frequent restarts (their next run
/// counts from the engine's start). Here the next tick counts from the
/// durable record: an engine restarted every 30 s of the clock still fires
/// the hourly tick at the hour, once.
#[tokio::test(start_paused = true)]
async fn an_engine_restarted_every_30_s_still_fires_the_hourly_tick_at_the_hour() {
    let clock = common::mock_clock();
    let store = common::shared_store();
    let log = Log::new(Gate::opened());
    let hour = T0_MS + HOUR_MS;
    let mut fired_in = None;
    let mut restarts = 0;
    while clock_ms(&clock) < hour + 60_000 {
        let engine = on_store(&store, &clock, &log, Missed::RunOnce)
            .start()
            .await
            .unwrap();
        engine.check_periodic().await.unwrap();
        let before = clock_ms(&clock);
        clock.advance(Duration::from_secs(30));
        engine.check_periodic().await.unwrap();
        let rec = record(&engine, "beat").await;
        if rec.record.fired > 0 && fired_in.is_none() {
            fired_in = Some((before, clock_ms(&clock)));
        }
        shut_down_cleanly(&engine).await;
        restarts += 1;
    }
    assert!(restarts > 120, "{restarts}");
    // It fired in the engine that was running when the hour came.
    let (from, to) = fired_in.expect("the hourly tick never fired");
    assert!(from < hour && hour <= to, "fired in ({from}, {to}]");
    // Its job ran (in that engine or a later one), once.
    let engine = on_store(&store, &clock, &log, Missed::RunOnce)
        .start()
        .await
        .unwrap();
    log.wait_for(1).await;
    common::eventually("the tick's job is done", LIMIT, async || {
        beats_idle(&engine).await
    })
    .await;
    assert_eq!(log.ran(), vec![hour]);
    assert_eq!(record(&engine, "beat").await.record.fired, 1);
    shut_down_cleanly(&engine).await;
}

fn clock_ms(clock: &MockClock) -> u64 {
    use gaffer::taquba::Clock;
    clock.now_ms()
}

/// An engine stopped while a tick's job runs (its grace over: the job is
/// given back) starts again on the same directory: the job runs to its
/// end, and the tick is not fired again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_tick_does_not_run_it_twice() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let log = Log::new(Gate::closed());
    let first = on_disk(dir.path(), &clock, &log)
        .shutdown_grace(Duration::ZERO)
        .start()
        .await
        .unwrap();
    first.check_periodic().await.unwrap();
    clock.advance(HOUR);
    // (The engine's own timer may fire the tick first: either way it is
    // durable once the check answers.)
    first.check_periodic().await.unwrap();
    assert_eq!(record(&first, "beat").await.record.fired, 1);
    // The tick's job is running (held at the gate) when the engine stops.
    log.gate.wait_entered(1, LIMIT).await;
    let report = first.shutdown().await.unwrap();
    assert_eq!(report.abandoned, 1, "{report:?}");
    assert!(log.ran().is_empty());

    log.gate.open();
    let second = on_disk(dir.path(), &clock, &log).start().await.unwrap();
    assert_eq!(second.check_periodic().await.unwrap(), 0);
    let id = tick_id("beat", T0_MS + HOUR_MS);
    let handle = second.handle::<Beat>(&id).unwrap();
    assert_eq!(within(handle).await.unwrap(), T0_MS + HOUR_MS);
    assert_eq!(log.ran(), vec![T0_MS + HOUR_MS]);
    assert_eq!(record(&second, "beat").await.record.fired, 1);
    shut_down_cleanly(&second).await;
}

/// An engine that fires a tick already fired (its record is stale: a
/// second engine, or a record lost in a crash) meets the tick's job by its
/// id: nothing runs again, and the record moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_fired_again_from_a_stale_record_is_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    let first = on_disk(dir.path(), &clock, &log).start().await.unwrap();
    first.check_periodic().await.unwrap();
    let key = gaffer::testing::layout::keys::periodic_key("beat");
    let queue = gaffer::testing::raw_queue(&first).unwrap();
    let stale = queue.view().kv_get(&key).await.unwrap().unwrap();
    drop(queue);
    clock.advance(HOUR);
    first.check_periodic().await.unwrap();
    log.wait_for(1).await;
    // The record goes back to before the tick, as an engine that did not
    // see the fire would have it.
    let queue = gaffer::testing::raw_queue(&first).unwrap();
    queue.kv_put(&key, &stale).await.unwrap();
    drop(queue);
    shut_down_cleanly(&first).await;

    let second = on_disk(dir.path(), &clock, &log).start().await.unwrap();
    assert_eq!(second.check_periodic().await.unwrap(), 0);
    let rec = record(&second, "beat").await;
    assert_eq!(rec.record.cursor_ms, T0_MS + HOUR_MS);
    assert_eq!(rec.record.last_fired_ms, Some(T0_MS + HOUR_MS));
    // Moved on as a tick that already ran: the stale record's count (0) is
    // not raised, as it is for a tick this engine fired.
    assert_eq!(rec.record.fired, 0);
    assert!(beats_idle(&second).await);
    assert_eq!(log.ran(), vec![T0_MS + HOUR_MS]);
    shut_down_cleanly(&second).await;
}

/// Two engines with the same periodic job on one directory: the second
/// fences the first (taquba has one writer per store), and the tick runs
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_on_one_store_fire_a_tick_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    let first = on_disk(dir.path(), &clock, &log).start().await.unwrap();
    first.check_periodic().await.unwrap();
    let mut events = first.subscribe();
    let second = on_disk(dir.path(), &clock, &log).start().await.unwrap();
    common::wait_event(&mut events, LIMIT, |e| {
        matches!(e, EngineEvent::StoreClosed { .. })
    })
    .await;
    clock.advance(HOUR);
    // The fenced engine cannot fire (nothing it writes commits).
    assert_eq!(first.check_periodic().await.unwrap_or(0), 0);
    second.check_periodic().await.unwrap();
    log.wait_for(1).await;
    assert_eq!(second.check_periodic().await.unwrap(), 0);
    assert_eq!(log.ran(), vec![T0_MS + HOUR_MS]);
    assert_eq!(record(&second, "beat").await.record.fired, 1);
    shut_down_cleanly(&second).await;
}

#[tokio::test(start_paused = true)]
async fn cron_schedules_fire_at_their_times_in_their_zone() {
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    // 09:30 in New York: 14:30 UTC in winter.
    let schedule = Schedule::cron("30 9 * * *")
        .unwrap()
        .time_zone("America/New_York")
        .unwrap();
    let engine = common::memory_builder(clock.clone())
        .register::<Beat>()
        .state(log.clone())
        .periodic("open", schedule, beat)
        .start()
        .await
        .unwrap();
    engine.check_periodic().await.unwrap();
    let first = T0_MS + 14 * HOUR_MS + HOUR_MS / 2;
    assert_eq!(record(&engine, "open").await.next_due_ms, Some(first));
    clock.advance(Duration::from_millis(first - T0_MS - 1));
    assert_eq!(engine.check_periodic().await.unwrap(), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(engine.check_periodic().await.unwrap(), 1);
    log.wait_for(1).await;
    assert_eq!(log.ran(), vec![first]);
    assert_eq!(
        record(&engine, "open").await.next_due_ms,
        Some(first + 24 * HOUR_MS)
    );
    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn bad_schedules_and_names_are_typed_errors() {
    // A cron expression that does not parse says what was wrong.
    let err = Schedule::cron("0 25 * * *").unwrap_err();
    assert!(
        matches!(&err, ScheduleError::InvalidCron { expr, .. } if expr == "0 25 * * *"),
        "{err}"
    );
    assert!(err.to_string().contains("0 25 * * *"), "{err}");
    let err: Error = Schedule::cron("0 * * * *")
        .unwrap()
        .time_zone("Nowhere/Atlantis")
        .unwrap_err()
        .into();
    assert!(err.to_string().contains("Nowhere/Atlantis"), "{err}");

    let start = |periodic: Vec<(&'static str, Schedule)>| {
        let mut builder = common::memory_builder(common::mock_clock()).register::<Beat>();
        for (name, schedule) in periodic {
            builder = builder.periodic(name, schedule, beat);
        }
        builder.start()
    };
    let too_short = start(vec![("b", Schedule::every(Duration::from_millis(500)))]).await;
    assert!(
        matches!(
            too_short,
            Err(Error::InvalidSchedule {
                ref name,
                source: ScheduleError::IntervalTooShort(_),
            }) if name == "b"
        ),
        "{too_short:?}"
    );
    let bad_name = start(vec![("a/b", hourly(Missed::RunOnce))]).await;
    assert!(
        matches!(
            bad_name,
            Err(Error::InvalidSchedule {
                source: ScheduleError::InvalidName(_),
                ..
            })
        ),
        "{bad_name:?}"
    );
    let no_catch_up = start(vec![("b", hourly(Missed::CatchUp(0)))]).await;
    assert!(
        matches!(
            no_catch_up,
            Err(Error::InvalidSchedule {
                source: ScheduleError::CatchUpOutOfRange(0),
                ..
            })
        ),
        "{no_catch_up:?}"
    );
    let twice = start(vec![
        ("b", hourly(Missed::RunOnce)),
        ("b", hourly(Missed::Skip)),
    ])
    .await;
    assert!(
        matches!(twice, Err(Error::DuplicatePeriodic(ref n)) if n == "b"),
        "{twice:?}"
    );
    // A job type the engine does not register.
    let unregistered = common::memory_builder(common::mock_clock())
        .periodic("b", hourly(Missed::RunOnce), beat)
        .start()
        .await;
    assert!(
        matches!(unregistered, Err(Error::UnknownJobType(ref t)) if t == "beat"),
        "{unregistered:?}"
    );
}

/// Periodic jobs added and removed while the engine runs: by method and by
/// the engine's message, as an actor-based service would.
#[tokio::test(start_paused = true)]
async fn periodic_jobs_are_added_and_removed_at_run_time() {
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    let engine = common::memory_builder(clock.clone())
        .register::<Beat>()
        .state(log.clone())
        .start()
        .await
        .unwrap();
    engine
        .add_periodic("by-method", hourly(Missed::RunOnce), beat)
        .await
        .unwrap();
    let spec =
        gaffer::periodic::periodic_spec("by-message", Schedule::cron("0 * * * *").unwrap(), beat);
    gaffer::ractor::call!(
        engine.actor(),
        gaffer::protocol::EngineMessage::AddPeriodic,
        Box::new(spec)
    )
    .unwrap()
    .unwrap();
    let again = engine
        .add_periodic("by-method", hourly(Missed::Skip), beat)
        .await;
    assert!(
        matches!(again, Err(Error::DuplicatePeriodic(_))),
        "{again:?}"
    );
    engine.check_periodic().await.unwrap();
    clock.advance(HOUR);
    assert_eq!(engine.check_periodic().await.unwrap(), 2);
    log.wait_for(2).await;

    assert!(engine.remove_periodic("by-message").await.unwrap());
    assert!(!engine.remove_periodic("by-message").await.unwrap());
    clock.advance(HOUR);
    assert_eq!(engine.check_periodic().await.unwrap(), 1);
    log.wait_for(3).await;
    let names: Vec<String> = engine
        .periodic_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.record.name)
        .collect();
    // A removed periodic job keeps its record.
    assert_eq!(names, ["by-message", "by-method"]);
    shut_down_cleanly(&engine).await;
}

/// A `make_job` that panics fails its check (typed), kills nothing, and the
/// tick fires at a later check.
#[tokio::test(start_paused = true)]
async fn a_panicking_make_job_fails_the_check_and_the_tick_fires_later() {
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    let panicked = Arc::new(AtomicBool::new(false));
    let once = panicked.clone();
    let engine = common::memory_builder(clock.clone())
        .register::<Beat>()
        .state(log.clone())
        .periodic("flaky", hourly(Missed::RunOnce), move |tick| {
            if !once.swap(true, Ordering::SeqCst) {
                panic!("not yet");
            }
            beat(tick)
        })
        .start()
        .await
        .unwrap();
    engine.check_periodic().await.unwrap();
    clock.advance(HOUR);
    let err = engine.check_periodic().await.unwrap_err();
    assert!(
        matches!(&err, Error::PeriodicMakeFailed { name, reason, .. }
            if name == "flaky" && reason.contains("not yet")),
        "{err}"
    );
    assert!(panicked.load(Ordering::SeqCst));
    assert_eq!(engine.check_periodic().await.unwrap(), 1);
    log.wait_for(1).await;
    assert_eq!(log.ran(), vec![T0_MS + HOUR_MS]);
    shut_down_cleanly(&engine).await;
}

/// The periodic actor killed: the supervisor starts it again with every
/// periodic job, it reads their records again, and the next tick fires
/// once.
#[tokio::test(start_paused = true)]
async fn a_killed_periodic_actor_is_restarted_and_fires_on_without_a_duplicate() {
    let clock = common::mock_clock();
    let log = Log::new(Gate::opened());
    let builder = on_store(&common::shared_store(), &clock, &log, Missed::RunOnce);
    let mut events = builder.subscribe();
    let engine = builder.start().await.unwrap();
    engine.check_periodic().await.unwrap();
    clock.advance(HOUR);
    engine.check_periodic().await.unwrap();
    log.wait_for(1).await;

    common::kill(&engine, gaffer::testing::ChildKind::Periodic).await;
    clock.advance(HOUR);
    let fired = common::wait_event(&mut events, LIMIT, |e| {
        matches!(e, EngineEvent::PeriodicFired { tick_ms, .. } if *tick_ms == T0_MS + 2 * HOUR_MS)
    })
    .await;
    assert!(matches!(fired, EngineEvent::PeriodicFired { .. }));
    log.wait_for(2).await;
    assert_eq!(engine.check_periodic().await.unwrap(), 0);
    assert_eq!(log.ran(), vec![T0_MS + HOUR_MS, T0_MS + 2 * HOUR_MS]);
    assert_eq!(record(&engine, "beat").await.record.fired, 2);
    shut_down_cleanly(&engine).await;
}
