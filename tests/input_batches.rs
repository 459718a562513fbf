//! Bad input to the batch API gets a clear typed error before anything runs,
//! and awkward input that is valid round-trips: invalid batch ids, awkward,
//! bad and oversized item keys, an unknown pipeline, reserved batch headers,
//! items that do not decode. (The jobs API's side is in `input_jobs.rs`.)

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use gaffer::protocol::{ItemRecord, RecordSink};
use gaffer::ractor;
use gaffer::testing::layout::records::ItemStatus;
use gaffer::{
    BulkCtx, Error, Job, Pipeline, bulk::ItemError, protocol::BatchSpec, protocol::EngineMessage,
};

use common::bulk::{Probe, Stage, counts, probe_engine, stage, strings};
use common::{bad_ids, shut_down_cleanly, within};

/// Outputs its item key; counts its runs.
struct Echo {
    runs: Arc<AtomicUsize>,
}

impl Pipeline for Echo {
    const NAME: &'static str = "echo";
    type Input = String;
    type Output = String;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<String>) -> Result<String, ItemError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(ctx.key.clone())
    }
}

async fn echo_engine(runs: Arc<AtomicUsize>) -> gaffer::Engine {
    common::memory_builder(common::mock_clock())
        .pipeline_with(
            Echo { runs },
            gaffer::JobOptions {
                concurrency: Some(4),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_invalid_batch_id_is_rejected() {
    let (engine, shared, _rx, _clock) = probe_engine().await;
    for bad in bad_ids() {
        match engine.batch::<Probe>(&bad) {
            Err(Error::InvalidBatchId(id)) => assert_eq!(id, bad),
            Err(other) => panic!("{bad:?}: expected InvalidBatchId, got {other:?}"),
            Ok(b) => panic!("{bad:?}: accepted as {b:?}"),
        }
    }
    let longest = "y".repeat(128);
    for good in ["ok-1", longest.as_str()] {
        let report = within(engine.batch::<Probe>(good).unwrap().run([1u64]))
            .await
            .unwrap();
        assert_eq!(report.succeeded, 1, "{good}");
    }
    let fresh = engine.new_batch::<Probe>();
    assert!(engine.batch::<Probe>(fresh.id()).is_ok());
    assert_eq!(within(fresh.run([1u64])).await.unwrap().succeeded, 1);
    assert_eq!(shared.runs(), 3);
    // Bad item keys: see
    // `awkward_item_keys_round_trip_and_bad_ones_are_refused_before_anything_runs`.

    shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn awkward_item_keys_round_trip_and_bad_ones_are_refused_before_anything_runs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = echo_engine(runs.clone()).await;
    // Keys are stored raw in KV keys, never in object paths: these are fine.
    let awkward = vec![
        "a/b".to_string(),
        "..".to_string(),
        "../../etc/passwd".to_string(),
        "with space".to_string(),
        "ünïcødé ✓".to_string(),
        "x".repeat(1024),
    ];
    let report = engine
        .batch::<Echo>("awkward")
        .unwrap()
        .key_fn(|s: &String| s.clone())
        .run(awkward.clone())
        .await
        .unwrap();
    assert_eq!((report.total, report.succeeded), (6, 6), "{report:?}");
    let status = engine
        .batch::<Echo>("awkward")
        .unwrap()
        .status()
        .await
        .unwrap();
    assert_eq!(status.succeeded, 6);

    // Empty, NUL and over-long (one byte over the 1024 allowed, and 1 MiB)
    // keys are refused with a typed error.
    let before = runs.load(Ordering::SeqCst);
    for (i, bad) in [
        "".to_string(),
        "a\0b".to_string(),
        "k".repeat(1025),
        "k".repeat(1 << 20),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("bad-{i}");
        let err = engine
            .batch::<Echo>(&id)
            .unwrap()
            .key_fn(move |_: &String| bad.clone())
            .run(vec!["input".to_string()])
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidItemKey { .. }), "{err}");
        let status = engine.batch::<Echo>(&id).unwrap().status().await.unwrap();
        assert_eq!((status.succeeded, status.failed, status.pending), (0, 0, 0));
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before,
        "no item of a refused batch ran"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_unknown_pipeline_is_a_typed_error() {
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Echo {
            runs: Arc::new(AtomicUsize::new(0)),
        })
        .register::<common::Ping>()
        .start()
        .await
        .unwrap();
    let spec = BatchSpec {
        batch_id: "b".into(),
        pipeline: "no-such-pipeline".into(),
        headers: Default::default(),
        sink: None,
        retention: None,
        window: 100,
        max_rate: None,
        parent: tracing::Span::none(),
        on_complete: None,
    };
    let answer = ractor::call!(
        engine.actor(),
        EngineMessage::RunBatch,
        Box::new(spec),
        vec![("k".into(), vec![1])]
    )
    .unwrap();
    assert!(matches!(answer, Err(Error::UnknownPipeline(p)) if p == "no-such-pipeline"));
    // A job type is not a pipeline either.
    let spec = BatchSpec {
        batch_id: "b".into(),
        pipeline: common::Ping::NAME.into(),
        headers: Default::default(),
        sink: None,
        retention: None,
        window: 100,
        max_rate: None,
        parent: tracing::Span::none(),
        on_complete: None,
    };
    let answer = ractor::call!(
        engine.actor(),
        EngineMessage::RunBatch,
        Box::new(spec),
        vec![]
    )
    .unwrap();
    assert!(
        matches!(answer, Err(Error::UnknownPipeline(_))),
        "{answer:?}"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn reserved_batch_headers_are_refused() {
    let engine = echo_engine(Arc::new(AtomicUsize::new(0))).await;
    let headers = [("gaffer.batch".to_string(), "x".to_string())]
        .into_iter()
        .collect();
    let err = engine
        .batch::<Echo>("h")
        .unwrap()
        .headers(headers)
        .run(vec!["a".to_string()])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ReservedHeader(_)), "{err}");
    engine.shutdown().await.unwrap();
}

/// Collects raw records (the engine's sink seam).
#[derive(Default)]
struct RawSink(Mutex<Vec<(String, ItemStatus, Option<String>)>>);

impl RecordSink for RawSink {
    fn write(&self, key: &str, record: ItemRecord<'_>) -> Result<(), gaffer::protocol::SinkError> {
        let (status, error) = match record {
            ItemRecord::Succeeded { .. } => (ItemStatus::Succeeded, None),
            ItemRecord::Failed { error } => (ItemStatus::Failed, Some(error.to_string())),
            ItemRecord::Cancelled => (ItemStatus::Cancelled, None),
            ItemRecord::OutputUnavailable { error } => {
                (ItemStatus::Succeeded, Some(error.to_string()))
            }
        };
        self.0
            .lock()
            .unwrap()
            .push((key.to_string(), status, error));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn undecodable_input_is_permanent() {
    let (s, gate, _rx) = stage();
    gate.open();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(s)
        .start()
        .await
        .unwrap();
    let sink = Arc::new(RawSink::default());
    let spec = BatchSpec {
        batch_id: "junk".into(),
        pipeline: Stage::NAME.into(),
        headers: HashMap::new(),
        sink: Some(sink.clone()),
        retention: None,
        window: 10_000,
        max_rate: None,
        parent: tracing::Span::none(),
        on_complete: None,
    };

    let outcome = within(async {
        ractor::call!(
            engine.actor(),
            gaffer::protocol::EngineMessage::RunBatch,
            Box::new(spec),
            vec![("k".into(), b"junk".to_vec())]
        )
    })
    .await
    .unwrap()
    .unwrap();

    assert_eq!(
        (outcome.total, outcome.succeeded, outcome.failed),
        (1, 0, 1)
    );
    assert_eq!(outcome.failed_keys, strings(&["k"]));
    let records = sink.0.lock().unwrap().clone();
    assert_eq!(records.len(), 1);
    let (key, status, error) = &records[0];
    assert_eq!((key.as_str(), *status), ("k", ItemStatus::Failed));
    let error = error.as_deref().unwrap_or_default();
    assert!(error.contains("invalid input"), "{error}");
    // Failed at once (permanent): no effects, no retry; a resume fails it again.
    let again = within(engine.batch::<Stage>("junk").unwrap().resume())
        .await
        .unwrap();
    assert_eq!(counts(&again), (1, 0, 1));
    shut_down_cleanly(&engine).await;
}

/// A batch input whose encoding fails for the value 0.
#[derive(Debug, Clone, serde::Deserialize)]
struct Picky(u32);

impl serde::Serialize for Picky {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 == 0 {
            return Err(serde::ser::Error::custom("zero is refused"));
        }
        s.serialize_u32(self.0)
    }
}

struct TakesPicky;

impl Pipeline for TakesPicky {
    const NAME: &'static str = "takes-picky";
    type Input = Picky;
    type Output = u32;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<Picky>) -> Result<u32, ItemError> {
        Ok(ctx.input.0)
    }
}

#[tokio::test(start_paused = true)]
async fn an_input_that_fails_to_encode_is_a_typed_error_naming_it() {
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(TakesPicky)
        .start()
        .await
        .unwrap();
    let run =
        within(
            engine
                .batch::<TakesPicky>("picky")
                .unwrap()
                .run([Picky(3), Picky(0), Picky(5)]),
        )
        .await;
    match &run {
        Err(
            e @ Error::InputEncoding {
                pipeline,
                index,
                reason,
            },
        ) => {
            assert_eq!(pipeline, "takes-picky");
            assert_eq!(*index, 1, "the second input failed");
            assert!(reason.to_string().contains("zero is refused"), "{reason}");
            // The encoder's error is the typed cause.
            let source = std::error::Error::source(e).expect("a source");
            assert!(source.to_string().contains("zero is refused"), "{source}");
        }
        other => panic!("expected InputEncoding, got {other:?}"),
    }
    shut_down_cleanly(&engine).await;
}

/// A sink that takes every record and fails to flush.
struct FailsToFlush;

impl gaffer::sink::OutputSink for FailsToFlush {
    fn write(&self, _record: &gaffer::sink::OutputRecord) -> gaffer::Result<()> {
        Ok(())
    }
    fn flush(&self) -> gaffer::Result<()> {
        Err(Error::from(std::io::Error::other("disk full")))
    }
}

#[tokio::test(start_paused = true)]
async fn a_sink_that_fails_to_flush_fails_the_run_with_sink_failed() {
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = echo_engine(runs.clone()).await;
    let batch = engine
        .batch::<Echo>("flush-fails")
        .unwrap()
        .sink(Arc::new(FailsToFlush));
    let run = within(batch.run(strings(&["a", "b", "c"]))).await;
    match run {
        Err(Error::SinkFailed { batch_id, reason }) => {
            assert_eq!(batch_id, "flush-fails");
            assert!(reason.contains("disk full"), "{reason}");
        }
        other => panic!("expected SinkFailed, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3, "every item ran first");
    // The items' outcomes are recorded: a second run (a working sink) runs none again.
    let again = within(
        engine
            .batch::<Echo>("flush-fails")
            .unwrap()
            .run(strings(&["a", "b", "c"])),
    )
    .await
    .unwrap();
    assert_eq!(again.succeeded, 3);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "recorded items are not run again"
    );
    shut_down_cleanly(&engine).await;
}
