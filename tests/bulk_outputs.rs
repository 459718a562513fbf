//! What reaches a batch's sink, and a sink that misbehaves: an output JSON
//! cannot hold, an actor as the sink, an output blob that cannot be read back
//! (never reported as a success), and a sink whose write blocks its thread.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::ractor::{Actor, ActorProcessingErr, ActorRef};
use gaffer::testing::{FaultyStore, Ops};
use gaffer::{
    BulkCtx, Engine, Pipeline, bulk::ItemError, sink::ActorSink, sink::OutputRecord,
    sink::OutputSink,
};
use tokio::sync::mpsc;

use common::bulk::{Probe, UNLUCKY, counts, json, probe_engine};
use common::{CollectSink, LIMIT, Ping, eventually, shut_down_cleanly, within};

/// Outputs a map with non-string keys: MessagePack encodes it, JSON cannot.
struct Pairs;

impl Pipeline for Pairs {
    const NAME: &'static str = "pairs";
    type Input = u8;
    type Output = BTreeMap<(u8, u8), u8>;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u8>) -> Result<Self::Output, ItemError> {
        Ok(BTreeMap::from([((ctx.input, ctx.input), ctx.input)]))
    }
}

#[tokio::test(start_paused = true)]
async fn a_pipeline_output_that_fails_json_conversion_is_reported() {
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Pairs)
        .start()
        .await
        .unwrap();
    let sink = CollectSink::new();
    let batch = engine.batch::<Pairs>("pairs").unwrap().sink(sink.clone());

    let report = within(batch.run([3u8])).await.unwrap();

    assert_eq!(counts(&report), (1, 1, 0));
    assert_eq!(report.sink_errors, 1);
    let records = sink.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].key, "item-0");
    // Never written as succeeded without its output.
    assert_eq!(records[0].status, gaffer::sink::STATUS_OUTPUT_UNAVAILABLE);
    assert_eq!(records[0].output, None);
    let error = records[0].error.as_deref().unwrap_or_default();
    assert!(error.contains("JSON"), "{error}");
    assert_eq!(report.sink_error_keys, vec!["item-0".to_string()]);
    shut_down_cleanly(&engine).await;
}

/// Forwards every record it gets to a channel.
struct Forwarder;

impl Actor for Forwarder {
    type Msg = OutputRecord;
    type State = mpsc::UnboundedSender<OutputRecord>;
    type Arguments = mpsc::UnboundedSender<OutputRecord>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        tx: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        record: OutputRecord,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let _ = tx.send(record);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_actor_sink_forwards_each_record_to_an_actor() {
    let (engine, _shared, _rx, _clock) = probe_engine().await;
    let (tx, mut records) = mpsc::unbounded_channel();
    let (actor, handle) = Actor::spawn(None, Forwarder, tx).await.unwrap();
    let sink = Arc::new(ActorSink::new(actor.get_derived()));
    let batch = engine.batch::<Probe>("actor").unwrap().sink(sink);

    let report = within(batch.run([1u64, UNLUCKY])).await.unwrap();
    assert_eq!(counts(&report), (2, 1, 1));
    assert_eq!(report.sink_errors, 0);

    let mut got = HashMap::new();
    for _ in 0..2 {
        let r = within(records.recv()).await.unwrap();
        got.insert(r.key.clone(), r);
    }
    assert_eq!(got["item-0"].status, "succeeded");
    assert_eq!(got["item-0"].output, json(2));
    assert_eq!(got["item-1"].status, "failed");
    assert_eq!(got["item-1"].error.as_deref(), Some("unlucky"));

    actor.stop(None);
    handle.await.unwrap();
    shut_down_cleanly(&engine).await;
}

struct Big;

impl Pipeline for Big {
    const NAME: &'static str = "big";
    type Input = u32;
    type Output = String;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<String, ItemError> {
        // Over the KV cap: kept as a blob.
        Ok("x".repeat(2 << 20) + &ctx.input.to_string())
    }
}

#[tokio::test(start_paused = true)]
async fn an_item_whose_output_cannot_be_read_reaches_the_sink_as_an_error_never_as_a_success() {
    let (store, faults) = FaultyStore::wrap(common::shared_store());
    let engine = common::store_builder(store, common::mock_clock())
        .pipeline(Big)
        .start()
        .await
        .unwrap();
    // Reads of output blobs fail; writes pass.
    faults.only_prefix("gaffer-blobs/");
    faults.fail(Ops::GET);
    let sink = CollectSink::new();
    let report = within(
        engine
            .batch::<Big>("unreadable")
            .unwrap()
            .sink(sink.clone())
            .run([1u32]),
    )
    .await
    .unwrap();
    let records = sink.records();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert!(
        !(record.status == "succeeded" && record.output.is_none()),
        "written as succeeded without its output: {record:?}"
    );
    assert_eq!(
        record.status,
        gaffer::sink::STATUS_OUTPUT_UNAVAILABLE,
        "{record:?}"
    );
    let error = record.error.as_deref().unwrap_or_default();
    assert!(error.contains("could not be read"), "{record:?}");
    assert_eq!(report.sink_errors, 1, "{report:?}");
    assert_eq!(report.sink_error_keys, vec!["item-0".to_string()]);
    // The item did succeed: its marker stands, and a later run reads the
    // output again.
    assert_eq!(report.succeeded, 1);
    faults.heal();
    engine.shutdown().await.unwrap();
}

struct Quick;

impl Pipeline for Quick {
    const NAME: &'static str = "quick";
    type Input = u32;
    type Output = u32;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<u32, ItemError> {
        Ok(ctx.input)
    }
}

/// Its first write blocks (the thread, as a slow disk does) until released,
/// for at most 5 s.
struct Stuck {
    entered: AtomicBool,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
    timed_out: AtomicBool,
    written: AtomicUsize,
}

impl OutputSink for Stuck {
    fn write(&self, _record: &OutputRecord) -> gaffer::Result<()> {
        if !self.entered.swap(true, Ordering::SeqCst) {
            let rx = self.release.lock().unwrap();
            if rx.recv_timeout(Duration::from_secs(5)).is_err() {
                self.timed_out.store(true, Ordering::SeqCst);
            }
        }
        self.written.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_sink_blocked_in_a_write_does_not_stop_the_engine_from_running_jobs() {
    let engine = Engine::builder()
        .store(gaffer::Store::in_memory())
        .flush_interval(Duration::from_millis(1))
        .pipeline(Quick)
        .register::<Ping>()
        .start()
        .await
        .unwrap();
    let (release, rx) = std::sync::mpsc::channel();
    let sink = Arc::new(Stuck {
        entered: AtomicBool::new(false),
        release: Mutex::new(rx),
        timed_out: AtomicBool::new(false),
        written: AtomicUsize::new(0),
    });
    let batch = tokio::spawn({
        let (engine, sink) = (engine.clone(), sink.clone());
        async move {
            engine
                .batch::<Quick>("stuck")
                .unwrap()
                .sink(sink)
                .run(0..10u32)
                .await
        }
    });
    eventually("the sink is written", LIMIT, async || {
        sink.entered.load(Ordering::SeqCst)
    })
    .await;
    // While the sink blocks its thread, a job runs to its end.
    engine.submit(Ping).await.unwrap().await.unwrap();
    release.send(()).unwrap();
    let report = within(batch).await.unwrap().unwrap();
    assert!(
        !sink.timed_out.load(Ordering::SeqCst),
        "the job could not run until the blocked sink write gave up"
    );
    assert_eq!(report.succeeded, 10);
    assert_eq!(sink.written.load(Ordering::SeqCst), 10);
    engine.shutdown().await.unwrap();
}
