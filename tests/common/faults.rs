//! Fixtures of the object-store fault tests (`store_faults_*.rs`, and the
//! memo write faults in `memo.rs`): jobs that count what ran, an engine over
//! a `FaultyStore`, an event log, and the checks those tests share.
//! `store_faults_recovery.rs` describes what the store layers do with a fault.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::ractor::ActorStatus;
use gaffer::taquba::MockClock;
use gaffer::taquba::object_store::ObjectStore;
use gaffer::taquba::object_store::memory::InMemory;
use gaffer::testing::{FaultControl, FaultyStore};
use gaffer::{Engine, EngineBuilder, EngineEvent, Job, JobContext};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;

use super::{Gate, Runs, within_for};

/// Upper bound (real time in these tests) for anything they wait on:
/// generous, as SlateDB backs off up to 1 s between retries.
pub const FAULT_LIMIT: Duration = Duration::from_secs(300);

/// How long an outage is kept up (real time) before the store heals: several
/// rounds of SlateDB's retry backoff (100 ms doubling to 1 s). It only gives
/// what must not happen during an outage (an answer, a report, a commit) the
/// time to happen: no test waits on it for something that must happen.
pub const OUTAGE: Duration = Duration::from_secs(3);

/// Jobs held in their handlers by the gate when an outage starts.
pub const SLOW: u32 = 8;

/// An unkeyed job.
#[derive(Serialize, Deserialize)]
pub struct Work(pub u32);

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Runs>().hit_of(format!("work-{}", self.0));
        Ok(self.0 * 2)
    }
}

/// A keyed job: one job per number, whoever submits it.
#[derive(Serialize, Deserialize)]
pub struct Keyed(pub u32);

impl Job for Keyed {
    const NAME: &'static str = "keyed";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Runs>().hit_of(format!("keyed-{}", self.0));
        Ok(self.0 * 3)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("keyed-{}", self.0))
    }
}

/// A job that runs until the gate opens, so the test can hold jobs in their
/// handlers and end them (and start their settlements) when it chooses.
#[derive(Serialize, Deserialize)]
pub struct Slow(pub u32);

impl Job for Slow {
    const NAME: &'static str = "slow";
    type Output = u32;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        ctx.state::<Gate>().wait().await;
        // Counted when the handler is done: a run that completed.
        ctx.state::<Runs>().hit_of(format!("slow-{}", self.0));
        Ok(self.0 * 7)
    }
}

/// Waits for the gate, then returns how many times its handler has run: the
/// output of a re-run differs from the output of the first run.
#[derive(Serialize, Deserialize)]
pub struct Stamp(pub u32);

impl Job for Stamp {
    const NAME: &'static str = "stamp";
    type Output = usize;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<usize, Self::Error> {
        ctx.state::<Gate>().wait().await;
        let name = format!("stamp-{}", self.0);
        let runs = ctx.state::<Runs>();
        runs.hit_of(name.clone());
        Ok(runs.of(&name))
    }
}

/// A job whose payload is over taquba's offload threshold (256 KiB): its
/// submission writes an object outside SlateDB.
#[derive(Serialize, Deserialize)]
pub struct Big(pub Vec<u8>);

impl Job for Big {
    const NAME: &'static str = "big";
    type Output = usize;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<usize, Self::Error> {
        Ok(self.0.len())
    }
}

/// A job that memoizes its one expensive step.
#[derive(Serialize, Deserialize)]
pub struct Memoed(pub u32);

impl Job for Memoed {
    const NAME: &'static str = "memoed";
    type Output = u32;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, Self::Error> {
        let runs = ctx.state::<Runs>().clone();
        runs.hit_of(format!("memoed-{}", self.0));
        let n = self.0;
        ctx.memo()
            .memoized("step", || async move {
                runs.hit_of(format!("memoed-step-{n}"));
                Ok::<_, gaffer::Error>(n * 5)
            })
            .await
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(1000)
    }
}

/// An engine on `store` running every job of this module, with `runs` and
/// `gate` as its state.
pub fn builder(
    store: Arc<dyn ObjectStore>,
    clock: Arc<MockClock>,
    runs: &Runs,
    gate: &Gate,
) -> EngineBuilder {
    super::store_builder(store, clock)
        .state(runs.clone())
        .state(gate.clone())
        .register::<Work>()
        .register::<Slow>()
        .register::<Stamp>()
        .register::<Keyed>()
        .register::<Big>()
        .register::<Memoed>()
}

/// `inner` behind a `FaultyStore`, and its control.
pub fn faulty(inner: &Arc<InMemory>) -> (Arc<dyn ObjectStore>, FaultControl) {
    FaultyStore::wrap(inner.clone())
}

/// Every event of one engine, kept as they arrive.
#[derive(Clone)]
pub struct EventLog {
    pub events: Arc<Mutex<Vec<EngineEvent>>>,
    lagged: Arc<AtomicUsize>,
    seen: tokio::sync::watch::Sender<usize>,
}

impl EventLog {
    pub fn follow(engine: &Engine) -> Self {
        Self::follow_from(engine.subscribe())
    }

    /// Follow from a subscription taken on the builder: no event of the
    /// engine's start is missed (a takeover engine runs jobs at once).
    pub fn follow_from(mut rx: tokio::sync::broadcast::Receiver<EngineEvent>) -> Self {
        let log = Self {
            events: Arc::default(),
            lagged: Arc::default(),
            seen: tokio::sync::watch::channel(0).0,
        };
        let l = log.clone();
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(event) => {
                        let mut events = l.events.lock().unwrap();
                        events.push(event);
                        l.seen.send_replace(events.len());
                    }
                    Err(RecvError::Lagged(n)) => {
                        l.lagged.fetch_add(n as usize, Ordering::SeqCst);
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        });
        log
    }

    /// Run ids of `JobSucceeded` events, in order (duplicates kept).
    pub fn succeeded(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                EngineEvent::JobSucceeded { run_id, .. } => Some(run_id.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn count(&self, pred: impl Fn(&EngineEvent) -> bool) -> usize {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| pred(e))
            .count()
    }

    pub fn store_closed(&self) -> Option<String> {
        self.events.lock().unwrap().iter().find_map(|e| match e {
            EngineEvent::StoreClosed { reason } => Some(reason.clone()),
            _ => None,
        })
    }

    /// Wait until `pred` holds for the events so far.
    pub async fn wait_until(&self, pred: impl Fn(&[EngineEvent]) -> bool) {
        let mut rx = self.seen.subscribe();
        within_for(FAULT_LIMIT, async {
            loop {
                if pred(&self.events.lock().unwrap()) {
                    return;
                }
                rx.changed().await.unwrap();
            }
        })
        .await
    }

    pub fn lagged(&self) -> usize {
        self.lagged.load(Ordering::SeqCst)
    }
}

/// `JobStarted` events of job type `job`.
pub fn started(events: &[EngineEvent], job: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, EngineEvent::JobStarted { job_type, .. } if job_type == job))
        .count()
}

/// `JobSucceeded` events.
pub fn successes(events: &[EngineEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, EngineEvent::JobSucceeded { .. }))
        .count()
}

/// The engine answers while the store is out: the supervisor runs and the
/// pools report.
pub async fn assert_engine_up(engine: &Engine) -> HashMap<String, gaffer::protocol::PoolStats> {
    assert_eq!(engine.actor().get_status(), ActorStatus::Running);
    tokio::time::timeout(Duration::from_secs(5), engine.pool_stats())
        .await
        .expect("pool stats did not answer during the outage")
        .expect("pool stats")
}

/// Wait (bounded) until `n` settlements of `job_type` are in flight, asking
/// the engine (it must answer throughout the outage).
pub async fn wait_settling(
    engine: &Engine,
    job_type: &str,
    n: usize,
) -> HashMap<String, gaffer::protocol::PoolStats> {
    let mut stats = HashMap::new();
    super::eventually("the settlements are in flight", FAULT_LIMIT, async || {
        stats = assert_engine_up(engine).await;
        stats[job_type].settling >= n
    })
    .await;
    stats
}

/// Durable check on a fresh engine over the raw store: every job reported
/// succeeded has its outcome record with the right value. Returns the number
/// of reported outcomes without a record (lost).
pub async fn lost_outcomes(engine: &Engine, reported: &HashMap<String, (String, u32)>) -> usize {
    let mut lost = 0;
    for (run_id, (kind, expected)) in reported {
        let found = match kind.as_str() {
            "work" => engine.handle::<Work>(run_id).unwrap().outcome().await,
            "keyed" => engine.handle::<Keyed>(run_id).unwrap().outcome().await,
            "slow" => engine.handle::<Slow>(run_id).unwrap().outcome().await,
            other => unreachable!("{other}"),
        }
        .unwrap();
        match found {
            Some(Ok(v)) => assert_eq!(v, *expected, "{run_id}"),
            Some(Err(e)) => panic!("{run_id} was reported succeeded but recorded {e:?}"),
            None => lost += 1,
        }
    }
    lost
}
