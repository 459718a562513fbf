//! Trace context (feature `otel`): the span that submits a job is the
//! parent of each of its attempts' `gaffer.job` spans, across an engine
//! restart, across retries, and for a job a client submits through the
//! store. Spans go to OpenTelemetry's in-memory exporter through
//! `tracing-opentelemetry`. (Its own test binary: it installs a global
//! subscriber.)

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use gaffer::{Job, JobContext, remote::Client};
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// The exporter every test of this binary reads (one global subscriber).
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("gaffer-tests"));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("no other global subscriber in this binary");
        exporter
    })
}

/// The trace and span id of the current span.
fn current_ids() -> (TraceId, SpanId) {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    (sc.trace_id(), sc.span_id())
}

/// The value of a span's attribute `key`, as text.
fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// The exported `gaffer.job` spans of the job `job_id`, once one of
/// attempt `last` is among them. (A claim given back without running, as
/// by a pool that learns its type is paused, has a span too.)
async fn job_spans(job_id: &str, last: u32) -> Vec<SpanData> {
    let mut spans = Vec::new();
    common::eventually(
        "the attempts' spans are exported",
        Duration::from_secs(10),
        async || {
            spans = exporter()
                .get_finished_spans()
                .expect("the in-memory exporter answers")
                .into_iter()
                .filter(|s| {
                    s.name == "gaffer.job" && attribute(s, "job_id").as_deref() == Some(job_id)
                })
                .collect();
            let last = last.to_string();
            spans
                .iter()
                .any(|s| attribute(s, "attempt") == Some(last.clone()))
        },
    )
    .await;
    spans
}

/// The exported span named `name` in trace `trace`.
fn span_named(trace: TraceId, name: &str) -> SpanData {
    exporter()
        .get_finished_spans()
        .expect("the in-memory exporter answers")
        .into_iter()
        .find(|s| s.name == name && s.span_context.trace_id() == trace)
        .unwrap_or_else(|| panic!("no exported `{name}` span in trace {trace}"))
}

#[derive(Debug, Serialize, Deserialize)]
struct Flaky {
    n: u32,
}

impl Job for Flaky {
    const NAME: &'static str = "otel-flaky";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u32, gaffer::Error> {
        if ctx.attempt() == 1 {
            return Err(gaffer::Error::from(std::io::Error::other("first time")));
        }
        Ok(self.n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_attempts_are_children_of_the_span_that_submitted_it_across_a_restart() {
    exporter();
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();

    // Submitted inside a request's span, on an engine where the type is
    // paused (durably): it cannot run before the restart.
    let first = common::disk_builder(tmp.path(), clock.clone())
        .register::<Flaky>()
        .start()
        .await
        .unwrap();
    first.pause(Flaky::NAME).await.unwrap();
    let request = tracing::info_span!("http.request");
    let (trace, id) = {
        let _in = request.enter();
        let ids = current_ids();
        let handle = first.submit(Flaky { n: 7 }).await.unwrap();
        (ids.0, handle.id().to_string())
    };
    drop(request);
    assert_ne!(
        trace,
        TraceId::INVALID,
        "the test's layer gives spans a trace"
    );
    first.shutdown().await.unwrap();

    let second = common::disk_builder(tmp.path(), clock)
        .register::<Flaky>()
        .start()
        .await
        .unwrap();
    second.resume(Flaky::NAME).await.unwrap();
    let handle = second.handle::<Flaky>(&id).unwrap();
    assert_eq!(common::within(handle.join()).await.unwrap().unwrap(), 7);

    // Two attempts (the first failed), each a child of the submit's span,
    // which is a child of the request's: one trace.
    let attempts = job_spans(&id, 2).await;
    assert!(attempts.len() >= 2, "{attempts:?}");
    let submit = span_named(trace, "gaffer.submit");
    let http = span_named(trace, "http.request");
    assert_eq!(submit.parent_span_id, http.span_context.span_id());
    for attempt in &attempts {
        assert_eq!(attempt.span_context.trace_id(), trace);
        assert_eq!(attempt.parent_span_id, submit.span_context.span_id());
    }
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_a_client_submits_is_in_the_clients_trace() {
    exporter();
    let tmp = tempfile::tempdir().unwrap();
    let engine = common::disk_builder(tmp.path(), common::mock_clock())
        .intake_poll(Duration::from_millis(20))
        .register::<Flaky>()
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .unwrap();

    let request = tracing::info_span!("client.request");
    let (trace, span_id, handle) = {
        let _in = request.enter();
        let (trace, span_id) = current_ids();
        (trace, span_id, client.submit(Flaky { n: 3 }).await.unwrap())
    };
    drop(request);
    assert_eq!(common::within(handle.join()).await.unwrap().unwrap(), 3);

    let attempts = job_spans(handle.id(), 2).await;
    assert!(attempts.len() >= 2, "{attempts:?}");
    for attempt in &attempts {
        assert_eq!(attempt.span_context.trace_id(), trace);
        assert_eq!(attempt.parent_span_id, span_id);
    }
    engine.shutdown().await.unwrap();
}

#[derive(Debug)]
struct Upper;

impl gaffer::Pipeline for Upper {
    const NAME: &'static str = "otel-upper";
    type Input = String;
    type Output = String;
    type Error = gaffer::bulk::ItemError;
    async fn run(&self, ctx: &gaffer::BulkCtx<String>) -> Result<String, gaffer::bulk::ItemError> {
        Ok(ctx.input.to_uppercase())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_run_is_a_span_in_the_callers_trace_with_its_progress_as_events() {
    exporter();
    let engine = common::memory_builder(common::mock_clock())
        .pipeline(Upper)
        .start()
        .await
        .unwrap();
    let request = tracing::info_span!("batch.request");
    let (trace, span_id, report) = {
        let _in = request.enter();
        let (trace, span_id) = current_ids();
        let inputs: Vec<String> = (0..20).map(|i| format!("item-{i}")).collect();
        let batch = engine.batch::<Upper>("otel-batch").unwrap();
        (
            trace,
            span_id,
            common::within(batch.run(inputs)).await.unwrap(),
        )
    };
    drop(request);
    assert_eq!(report.succeeded, 20);

    let mut run = None;
    common::eventually(
        "the batch's span is exported",
        Duration::from_secs(10),
        async || {
            run = exporter()
                .get_finished_spans()
                .expect("the in-memory exporter answers")
                .into_iter()
                .find(|s| s.name == "gaffer.batch" && s.span_context.trace_id() == trace);
            run.is_some()
        },
    )
    .await;
    let run = run.unwrap();
    assert_eq!(run.parent_span_id, span_id);
    assert_eq!(attribute(&run, "batch_id").as_deref(), Some("otel-batch"));
    assert_eq!(attribute(&run, "pipeline").as_deref(), Some("otel-upper"));
    assert_eq!(attribute(&run, "total").as_deref(), Some("20"));
    let events: Vec<&str> = run.events.iter().map(|e| e.name.as_ref()).collect();
    assert_eq!(events.first(), Some(&"batch run started"), "{events:?}");
    assert_eq!(events.last(), Some(&"batch run completed"), "{events:?}");
    // A progress event per tenth of the items: 10 of 20.
    let progress = events.iter().filter(|e| **e == "batch progress").count();
    assert_eq!(progress, 10, "{events:?}");

    // Each item's attempt span names its batch and key, and its job id is
    // the item's run id, derived from them (an item carries no run id).
    let mut items = Vec::new();
    common::eventually(
        "the items' spans are exported",
        Duration::from_secs(10),
        async || {
            items = exporter()
                .get_finished_spans()
                .expect("the in-memory exporter answers")
                .into_iter()
                .filter(|s| {
                    s.name == "gaffer.job"
                        && attribute(s, "batch_id").as_deref() == Some("otel-batch")
                })
                .collect();
            items.len() >= 20
        },
    )
    .await;
    assert_eq!(items.len(), 20);
    for item in &items {
        let key = attribute(item, "item_key").expect("an item's span has its key");
        let digest = <sha2::Sha256 as sha2::Digest>::digest(format!("otel-batch/{key}"));
        let run_id: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(attribute(item, "job_id"), Some(run_id), "item {key}");
        assert_eq!(attribute(item, "job_type").as_deref(), Some("otel-upper"));
        assert_eq!(attribute(item, "attempt").as_deref(), Some("1"));
    }
    engine.shutdown().await.unwrap();
}
