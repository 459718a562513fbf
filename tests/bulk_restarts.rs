//! A batch run across restarts of the engine's actors and of the service that
//! started it: one run of a batch id at a time whatever restarts (the
//! batches registry killed, a second run sent at that moment), and a
//! restarted service taking over the run's sink for the records still to
//! come (`Batch::attach`).
//!
//! Paused tokio time, the in-memory store, items held by a gate.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use gaffer::ractor::{self, Actor, ActorRef};
use gaffer::testing::ChildKind;
use gaffer::{BulkCtx, Engine, Error, Pipeline, bulk::ItemError, protocol::EngineMessage};

use common::{Gate, within};

/// Upper bound (tokio time) for a state polled with [`common::eventually`].
const WAIT: Duration = Duration::from_secs(5);

/// Items at or over 10 wait for the gate; every run of every item is counted.
struct Held {
    gate: Gate,
    runs: Arc<Vec<AtomicUsize>>,
}

impl Pipeline for Held {
    const NAME: &'static str = "held";
    type Input = u32;
    type Output = u32;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<u32, ItemError> {
        self.runs[ctx.input as usize].fetch_add(1, Ordering::SeqCst);
        if ctx.input >= 10 {
            self.gate.wait().await;
        }
        Ok(ctx.input * 2)
    }
}

fn counters(n: usize) -> Arc<Vec<AtomicUsize>> {
    Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect())
}

async fn held_engine(gate: Gate, runs: Arc<Vec<AtomicUsize>>) -> Engine {
    common::memory_builder(common::mock_clock())
        .pipeline_with(
            Held { gate, runs },
            gaffer::JobOptions {
                concurrency: Some(4),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap()
}

/// Forwards every message it gets to a channel.
struct Forward<M>(std::marker::PhantomData<fn() -> M>);

async fn forward<M: ractor::Message>() -> (ActorRef<M>, tokio::sync::mpsc::UnboundedReceiver<M>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (actor, _) = Actor::spawn(None, Forward(std::marker::PhantomData), tx)
        .await
        .unwrap();
    (actor, rx)
}

impl<M: ractor::Message> Actor for Forward<M> {
    type Msg = M;
    type State = tokio::sync::mpsc::UnboundedSender<M>;
    type Arguments = Self::State;
    async fn pre_start(
        &self,
        _myself: ActorRef<M>,
        tx: Self::State,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(tx)
    }
    async fn handle(
        &self,
        _myself: ActorRef<M>,
        message: M,
        tx: &mut Self::State,
    ) -> Result<(), ractor::ActorProcessingErr> {
        let _ = tx.send(message);
        Ok(())
    }
}

fn assert_each_ran_once(runs: &[AtomicUsize]) {
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.load(Ordering::SeqCst), 1, "item {i} ran {r:?} times");
    }
}

// ---------------------------------------------------------------------------
// One run of a batch id at a time, whatever restarts

#[tokio::test(start_paused = true)]
async fn a_second_run_sent_as_the_registry_restarts_is_refused_and_the_first_completes_exactly() {
    let gate = Gate::closed();
    let runs = counters(50);
    let engine = held_engine(gate.clone(), runs.clone()).await;
    let batch = engine.batch::<Held>("b").unwrap();
    let first = {
        let batch = engine.batch::<Held>("b").unwrap();
        tokio::spawn(async move { batch.run(0..50u32).await })
    };
    common::eventually("10 items succeed", WAIT, async || {
        batch.progress().await.is_some_and(|p| p.succeeded >= 10)
    })
    .await;
    // The registry dies (its coordinator with it) and, at that moment, a
    // second run of the batch and a watch of it arrive.
    common::kill(&engine, ChildKind::BatchRegistry).await;
    let (watcher, mut watched) = forward::<gaffer::protocol::BatchFinished>().await;
    engine.watch_batch("b", watcher.get_derived()).unwrap();
    let second = ractor::call!(
        engine.actor(),
        EngineMessage::RunBatch,
        Box::new(batch.spec()),
        batch.encode_items(0..50u32).unwrap()
    )
    .unwrap();
    assert!(
        matches!(&second, Err(Error::BatchRunning(id)) if id == "b"),
        "a second run of a running batch is refused: {second:?}"
    );
    gate.open();
    let report = within(first).await.unwrap().unwrap();
    assert_eq!(
        (report.total, report.succeeded, report.failed),
        (50, 50, 0),
        "{report:?}"
    );
    let told = within(watched.recv()).await.unwrap();
    let outcome = told.result.expect("the watch is told the run's outcome");
    assert_eq!((outcome.total, outcome.succeeded), (50, 50));
    assert_each_ran_once(&runs);
    let status = batch.status().await.unwrap();
    assert_eq!((status.succeeded, status.pending), (50, 0));
    watcher.stop(None);
    engine.shutdown().await.unwrap();
}

/// The id of the batches registry now.
async fn registry_id(engine: &Engine) -> ractor::ActorId {
    ractor::call!(engine.actor(), EngineMessage::GetRegistry)
        .unwrap()
        .get()
        .get_id()
}

#[tokio::test(start_paused = true)]
async fn a_second_run_sent_while_the_first_writes_its_manifest_across_a_registry_restart_is_refused()
 {
    let gate = Gate::closed();
    let runs = counters(50);
    let engine = held_engine(gate.clone(), runs.clone()).await;
    let batch = engine.batch::<Held>("b").unwrap();
    // The first run's inputs stall half way, so its driver is in the
    // manifest (registered, not begun) when the registry dies.
    let stall = Gate::closed();
    let first = {
        let batch = engine.batch::<Held>("b").unwrap();
        let stall = stall.clone();
        let inputs = futures_util::stream::iter(0..50u32).then(move |i| {
            let stall = stall.clone();
            async move {
                if i == 25 {
                    stall.wait().await;
                }
                i
            }
        });
        tokio::spawn(async move { batch.run_stream(inputs).await })
    };
    stall.wait_entered(1, WAIT).await;
    let killed = registry_id(&engine).await;
    common::kill(&engine, ChildKind::BatchRegistry).await;
    common::eventually("the registry is restarted", WAIT, async || {
        registry_id(&engine).await != killed
    })
    .await;
    // The first run is live (its driver holds it): a watch waits for it, and
    // a forget and a second run of the batch are refused.
    let (watcher, mut watched) = forward::<gaffer::protocol::BatchFinished>().await;
    match within(batch.forget()).await {
        Err(gaffer::Error::BatchRunning(id)) => assert_eq!(id, "b"),
        other => panic!("a forget of a running batch is refused, got {other:?}"),
    }
    engine.watch_batch("b", watcher.get_derived()).unwrap();
    let second = {
        let engine = engine.clone();
        let spec = batch.spec();
        let items = batch.encode_items(0..50u32).unwrap();
        tokio::spawn(async move {
            ractor::call!(
                engine.actor(),
                EngineMessage::RunBatch,
                Box::new(spec),
                items
            )
            .unwrap()
        })
    };
    let second = match tokio::time::timeout(WAIT, second).await {
        Ok(answer) => answer.unwrap(),
        Err(_) => panic!(
            "the second run was admitted instead of refused: it runs ({:?})",
            batch.progress().await
        ),
    };
    assert!(
        matches!(&second, Err(Error::BatchRunning(id)) if id == "b"),
        "a second run of a running batch is refused: {second:?}"
    );
    stall.open();
    gate.open();
    let report = within(first).await.unwrap().unwrap();
    assert_eq!(
        (report.total, report.succeeded, report.failed),
        (50, 50, 0),
        "{report:?}"
    );
    let told = within(watched.recv()).await.unwrap();
    let outcome = told.result.expect("the watch is told the run's outcome");
    assert_eq!((outcome.total, outcome.succeeded), (50, 50));
    assert_each_ran_once(&runs);
    watcher.stop(None);
    engine.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------
// A restarted service takes over the run's sink

/// What the services tell the test.
#[derive(Debug)]
enum Told {
    /// Incarnation `n` of the service started.
    Started(u32, ActorRef<ServiceMsg>),
    /// A record reached incarnation `n`.
    Record(u32, gaffer::sink::OutputRecord),
    /// Incarnation `n` took over the run's sink.
    Attached(u32, gaffer::protocol::SinkAttached),
    /// The run's end reached incarnation `n`.
    Finished(u32, gaffer::protocol::BatchFinished),
}

#[derive(Debug)]
enum ServiceMsg {
    Record(gaffer::sink::OutputRecord),
    Finished(gaffer::protocol::BatchFinished),
    Crash,
}

// With feature `cluster`, ractor has no blanket `Message` impl.
#[cfg(feature = "cluster")]
impl ractor::Message for ServiceMsg {}

impl From<gaffer::sink::OutputRecord> for ServiceMsg {
    fn from(r: gaffer::sink::OutputRecord) -> Self {
        Self::Record(r)
    }
}

impl TryFrom<ServiceMsg> for gaffer::sink::OutputRecord {
    type Error = ServiceMsg;
    fn try_from(m: ServiceMsg) -> Result<Self, ServiceMsg> {
        match m {
            ServiceMsg::Record(r) => Ok(r),
            other => Err(other),
        }
    }
}

impl From<gaffer::protocol::BatchFinished> for ServiceMsg {
    fn from(f: gaffer::protocol::BatchFinished) -> Self {
        Self::Finished(f)
    }
}

impl TryFrom<ServiceMsg> for gaffer::protocol::BatchFinished {
    type Error = ServiceMsg;
    fn try_from(m: ServiceMsg) -> Result<Self, ServiceMsg> {
        match m {
            ServiceMsg::Finished(f) => Ok(f),
            other => Err(other),
        }
    }
}

/// Items of the service's batch.
const ITEMS: u32 = 300;

/// A service that is its batch's sink (an `ActorSink` to itself): started,
/// it runs batch `s`; restarted, it waits for `hold`, then takes the run's
/// sink over.
struct Service;

#[derive(Clone)]
struct ServiceArgs {
    engine: Engine,
    incarnation: u32,
    hold: Gate,
    told: tokio::sync::mpsc::UnboundedSender<Told>,
}

impl Actor for Service {
    type Msg = ServiceMsg;
    type State = ServiceArgs;
    type Arguments = ServiceArgs;
    async fn pre_start(
        &self,
        myself: ActorRef<ServiceMsg>,
        args: ServiceArgs,
    ) -> Result<ServiceArgs, ractor::ActorProcessingErr> {
        let _ = args
            .told
            .send(Told::Started(args.incarnation, myself.clone()));
        let sink = Arc::new(gaffer::sink::ActorSink::new(myself.get_derived()));
        let batch = args.engine.batch::<Held>("s")?;
        if args.incarnation == 0 {
            let batch = batch.sink(sink);
            args.engine.actor().cast(EngineMessage::RunBatchAndTell(
                Box::new(batch.spec()),
                batch.encode_items(0..ITEMS)?,
                myself.get_derived(),
            ))?;
        } else {
            args.hold.wait().await;
            let attached = batch.attach(sink, myself.get_derived()).await?;
            let _ = args.told.send(Told::Attached(args.incarnation, attached));
        }
        Ok(args)
    }
    async fn handle(
        &self,
        _myself: ActorRef<ServiceMsg>,
        message: ServiceMsg,
        state: &mut ServiceArgs,
    ) -> Result<(), ractor::ActorProcessingErr> {
        match message {
            ServiceMsg::Record(r) => {
                let _ = state.told.send(Told::Record(state.incarnation, r));
            }
            ServiceMsg::Finished(f) => {
                let _ = state.told.send(Told::Finished(state.incarnation, f));
            }
            ServiceMsg::Crash => panic!("the service crashed"),
        }
        Ok(())
    }
}

/// Restarts its service when it fails, as the next incarnation.
struct ServiceBoss;

impl Actor for ServiceBoss {
    type Msg = ();
    type State = ServiceArgs;
    type Arguments = ServiceArgs;
    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        args: ServiceArgs,
    ) -> Result<ServiceArgs, ractor::ActorProcessingErr> {
        Actor::spawn_linked(None, Service, args.clone(), myself.get_cell()).await?;
        Ok(args)
    }
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        event: ractor::SupervisionEvent,
        args: &mut ServiceArgs,
    ) -> Result<(), ractor::ActorProcessingErr> {
        if let ractor::SupervisionEvent::ActorFailed(..) = event {
            args.incarnation += 1;
            Actor::spawn_linked(None, Service, args.clone(), myself.get_cell()).await?;
        }
        Ok(())
    }
}

/// The next thing a service told, within the limit.
async fn next(told: &mut tokio::sync::mpsc::UnboundedReceiver<Told>) -> Told {
    within(told.recv()).await.expect("a service is alive")
}

/// A 300-item run whose service (its sink) crashes after 100 records and is
/// restarted; `gap` items settle while no live service is its sink (the dead
/// actor's records are errors); then the restarted service takes the sink
/// over, gets the rest, and reads the first part from `Batch::items`. With
/// `kill`, the run's coordinator is killed 50 records after the switch: its
/// replacement gives every record to the new sink.
async fn a_restarted_service_takes_over_its_batch_sink(gap: usize, kill: bool) {
    let gate = Gate::closed();
    let runs = counters(ITEMS as usize);
    let engine = held_engine(gate.clone(), runs.clone()).await;
    let (tx, mut told) = tokio::sync::mpsc::unbounded_channel();
    let hold = if gap == 0 {
        Gate::opened()
    } else {
        Gate::closed()
    };
    let args = ServiceArgs {
        engine: engine.clone(),
        incarnation: 0,
        hold: hold.clone(),
        told: tx,
    };
    let (boss, _) = Actor::spawn(None, ServiceBoss, args).await.unwrap();
    let Told::Started(0, first) = next(&mut told).await else {
        panic!("the service starts");
    };
    // 100 items settle (10 free, 90 let through) and reach the service.
    gate.release(90);
    let mut before = std::collections::BTreeMap::new();
    while before.len() < 100 {
        match next(&mut told).await {
            Told::Record(0, r) => {
                assert!(before.insert(r.key.clone(), r).is_none(), "a record twice");
            }
            other => panic!("expected a record, got {other:?}"),
        }
    }
    first.cast(ServiceMsg::Crash).unwrap();
    let Told::Started(1, _) = next(&mut told).await else {
        panic!("the service is restarted");
    };
    let batch = engine.batch::<Held>("s").unwrap();
    if gap > 0 {
        // No live service is the sink: these records go to the dead actor.
        gate.release(gap);
        common::eventually("the gap's items are counted", WAIT, async || {
            batch
                .progress()
                .await
                .is_some_and(|p| p.succeeded >= 100 + gap as u64)
        })
        .await;
        hold.open();
    }
    let attached = match next(&mut told).await {
        Told::Attached(1, a) => a,
        other => panic!("expected the takeover's answer, got {other:?}"),
    };
    assert_eq!(
        attached.written,
        100 + gap as u64,
        "the switch fell after the items counted before it"
    );
    let mut after = std::collections::BTreeMap::new();
    let mut twice = 0;
    if kill {
        gate.release(50);
        while after.len() < 50 {
            match next(&mut told).await {
                Told::Record(1, r) => {
                    after.insert(r.key.clone(), r);
                }
                other => panic!("expected a record, got {other:?}"),
            }
        }
        common::kill(&engine, ChildKind::Coordinator("s".into())).await;
    }
    gate.open();
    let outcome = loop {
        match next(&mut told).await {
            Told::Record(1, r) => {
                if after.insert(r.key.clone(), r).is_some() {
                    twice += 1;
                }
            }
            Told::Finished(1, f) => break f.result.expect("the run succeeded"),
            other => panic!("expected a record or the end, got {other:?}"),
        }
    };
    if kill {
        // The replacement gave every record to the new sink: those of the
        // items counted before the switch for the first time, the 50 it had
        // got since again.
        assert_eq!(after.len(), 300, "every record reaches the new sink");
        assert_eq!(twice, 50, "the records the new sink had, again");
    } else {
        assert_eq!(twice, 0, "no record twice");
    }
    assert_eq!(
        (outcome.total, outcome.succeeded),
        (300, 300),
        "{outcome:?}"
    );
    // (The report is the last coordinator's: a replacement gave the gap's
    // records to the new sink too.)
    let lost = if kill { 0 } else { gap as u64 };
    assert_eq!(
        outcome.sink_errors, lost,
        "only the records given to the dead service are sink errors: {:?}",
        outcome.sink_error_keys
    );
    if kill {
        assert_each_ran_once(&runs);
        boss.stop(None);
        engine.shutdown().await.unwrap();
        return;
    }
    assert_eq!(
        after.len() as u64,
        300 - attached.written,
        "the new sink gets every record after the switch"
    );
    // The first part, from the item markers: the items the new sink did not
    // get are exactly those counted before the switch.
    let mut caught_up = std::collections::BTreeMap::new();
    let mut page_after: Option<String> = None;
    loop {
        let page = batch.items(page_after.as_deref(), 64).await.unwrap();
        for item in page.items {
            if !after.contains_key(&item.key) {
                caught_up.insert(item.key.clone(), item.outcome);
            }
        }
        match page.next {
            Some(next) => page_after = Some(next),
            None => break,
        }
    }
    assert_eq!(caught_up.len() as u64, attached.written);
    let lost: std::collections::BTreeSet<&String> = outcome.sink_error_keys.iter().collect();
    let expected: std::collections::BTreeSet<&String> = before.keys().chain(lost).collect();
    assert_eq!(
        caught_up.keys().collect::<std::collections::BTreeSet<_>>(),
        expected,
        "the catch-up holds what the old service got and what was lost in the gap"
    );
    // Every item, once, with its output: from the old sink or the catch-up,
    // or from the new sink.
    for i in 0..ITEMS {
        let key = format!("item-{i}");
        let output = match (caught_up.get(&key), after.get(&key)) {
            (Some(gaffer::bulk::ItemOutcome::Succeeded(v)), None) => Some(serde_json::json!(v)),
            (None, Some(r)) => {
                assert_eq!(r.status, "succeeded", "{r:?}");
                r.output.clone()
            }
            other => panic!("{key}: in exactly one part, got {other:?}"),
        };
        assert_eq!(output, Some(serde_json::json!(i * 2)), "{key}");
    }
    assert_each_ran_once(&runs);
    // The run ended: a takeover now is refused, typed.
    let (late, _late_rx) = forward::<gaffer::protocol::BatchFinished>().await;
    let sink = Arc::new(gaffer::sink::NullSink);
    match within(batch.attach(sink, late.get_derived())).await {
        Err(gaffer::Error::BatchNotRunning(id)) => assert_eq!(id, "s"),
        other => panic!("a takeover of a batch not running is refused, got {other:?}"),
    }
    late.stop(None);
    boss.stop(None);
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_restarted_service_takes_over_its_batch_sink_and_nothing_is_lost() {
    a_restarted_service_takes_over_its_batch_sink(0, false).await;
}

#[tokio::test(start_paused = true)]
async fn records_settled_while_no_service_is_the_sink_are_the_only_sink_errors_and_are_caught_up() {
    a_restarted_service_takes_over_its_batch_sink(20, false).await;
}

#[tokio::test(start_paused = true)]
async fn a_coordinator_replaced_after_a_takeover_gives_every_record_to_the_new_sink() {
    a_restarted_service_takes_over_its_batch_sink(20, true).await;
}
