//! The hostile-input catalogue of ARCHITECTURE.md, the classes not covered
//! by tests/bad_input.rs and tests/bulk.rs: awkward and oversized item keys,
//! unknown pipelines, a batch whose items cannot decode, large memo values,
//! and one store opened by two engines of one process.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{
    BatchSpec, BulkCtx, EngineError, EngineEvent, EngineMessage, Error, ItemError, Job, JobContext,
    Pipeline,
};
use serde::{Deserialize, Serialize};

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

#[derive(Serialize, Deserialize)]
struct BigMemo(usize);

impl Job for BigMemo {
    const NAME: &'static str = "big-memo";
    type Output = usize;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<usize, Error> {
        let n = self.0;
        let v: Vec<u8> = ctx
            .memo()
            .memoized("big", || async move { Ok::<_, Error>(vec![7u8; n]) })
            .await?;
        Ok(v.len())
    }
}

async fn echo_engine(runs: Arc<AtomicUsize>) -> gaffer::Engine {
    common::memory_builder(common::mock_clock())
        .pipeline_with_concurrency(Echo { runs }, 4)
        .register::<BigMemo>()
        .start()
        .await
        .unwrap()
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

    // Empty, NUL and over-long (1 MiB) keys are refused with a typed error.
    let before = runs.load(Ordering::SeqCst);
    for (i, bad) in ["".to_string(), "a\0b".to_string(), "k".repeat(1 << 20)]
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
        assert!(
            matches!(err, Error::Engine(EngineError::InvalidItemKey { .. })),
            "{err}"
        );
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
async fn invalid_batch_ids_and_unknown_pipelines_are_typed_errors() {
    let engine = echo_engine(Arc::new(AtomicUsize::new(0))).await;
    for bad in ["", "a/b", "..", "a\0b", &"x".repeat(129), "ünï"] {
        let err = engine.batch::<Echo>(bad).unwrap_err();
        assert!(
            matches!(err, Error::Engine(EngineError::InvalidBatchId(_))),
            "{bad:?}: {err}"
        );
    }
    let spec = BatchSpec {
        batch_id: "b".into(),
        pipeline: "no-such-pipeline".into(),
        headers: Default::default(),
        sink: None,
        retention: None,
        window: 100,
    };
    let answer = ractor::call!(
        engine.actor(),
        EngineMessage::RunBatch,
        Box::new(spec),
        vec![("k".into(), vec![1])]
    )
    .unwrap();
    assert!(matches!(answer, Err(EngineError::UnknownPipeline(p)) if p == "no-such-pipeline"));
    // A job type is not a pipeline either.
    let spec = BatchSpec {
        batch_id: "b".into(),
        pipeline: "big-memo".into(),
        headers: Default::default(),
        sink: None,
        retention: None,
        window: 100,
    };
    let answer = ractor::call!(
        engine.actor(),
        EngineMessage::RunBatch,
        Box::new(spec),
        vec![]
    )
    .unwrap();
    assert!(
        matches!(answer, Err(EngineError::UnknownPipeline(_))),
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
    assert!(
        matches!(err, Error::Engine(EngineError::ReservedHeader(_))),
        "{err}"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_memo_value_over_the_kv_cap_round_trips_through_the_object_store() {
    let engine = echo_engine(Arc::new(AtomicUsize::new(0))).await;
    let n = 2 << 20;
    assert_eq!(engine.submit(BigMemo(n)).await.unwrap().await.unwrap(), n);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_engine_on_the_same_store_in_one_process_fences_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let runs = Arc::new(AtomicUsize::new(0));
    let first = common::disk_builder(dir.path(), clock.clone())
        .pipeline(Echo { runs: runs.clone() })
        .start()
        .await
        .unwrap();
    let mut events = first.subscribe();
    let second = common::disk_builder(dir.path(), clock)
        .pipeline(Echo { runs })
        .start()
        .await
        .unwrap();
    common::wait_event(&mut events, Duration::from_secs(30), |e| {
        matches!(e, EngineEvent::StoreClosed { .. })
    })
    .await;
    // The first engine refuses work; the second serves it.
    assert!(
        first
            .batch::<Echo>("b")
            .unwrap()
            .run(vec!["a".to_string()])
            .await
            .is_err()
    );
    let report = second
        .batch::<Echo>("b")
        .unwrap()
        .run(vec!["a".to_string()])
        .await
        .unwrap();
    assert_eq!(report.succeeded, 1);
    second.shutdown().await.unwrap();
}
