//! Each attempt runs in a `gaffer.job` span: an event a job logs inside
//! `run` carries the job's id and its attempt number, on the retry too.
//! (Its own test binary: it installs a global subscriber.)

mod common;

use std::sync::{Arc, Mutex};

use gaffer::{Job, JobContext};
use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// The fields of a `gaffer.job` span, as recorded.
#[derive(Debug, Default, Clone)]
struct JobFields {
    job_id: Option<String>,
    attempt: Option<u64>,
    job_type: Option<String>,
}

impl Visit for JobFields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "job_id" => self.job_id = Some(text.trim_matches('"').to_string()),
            "job_type" => self.job_type = Some(text.trim_matches('"').to_string()),
            _ => {}
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "job_id" => self.job_id = Some(value.to_string()),
            "job_type" => self.job_type = Some(value.to_string()),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "attempt" {
            self.attempt = Some(value);
        }
    }
}

/// The message of an event.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

/// An event's message and the `gaffer.job` span it was in.
type Seen = (String, Option<JobFields>);

/// Records each event's message with the `gaffer.job` span it is in.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == "gaffer.job" {
            let mut fields = JobFields::default();
            attrs.record(&mut fields);
            if let Some(span) = ctx.span(id) {
                span.extensions_mut().insert(fields);
            }
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<JobFields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut message = Message::default();
        event.record(&mut message);
        let job = ctx.event_scope(event).and_then(|scope| {
            scope
                .into_iter()
                .find_map(|span| span.extensions().get::<JobFields>().cloned())
        });
        self.0.lock().unwrap().push((message.0, job));
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Flaky;

impl Job for Flaky {
    const NAME: &'static str = "flaky";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u32, gaffer::Error> {
        tracing::info!("inside run");
        if ctx.attempt() == 1 {
            return Err(gaffer::Error::from(std::io::Error::other("first time")));
        }
        Ok(ctx.attempt())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_inside_run_is_in_the_attempts_span() {
    let capture = Capture::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(capture.clone()))
        .unwrap();
    let engine = common::memory_builder(common::mock_clock())
        .register::<Flaky>()
        .start()
        .await
        .unwrap();
    let handle = engine.submit(Flaky).await.unwrap();
    assert_eq!(common::within(handle.join()).await.unwrap().unwrap(), 2);
    let inside: Vec<JobFields> = capture
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == "inside run")
        .map(|(_, job)| job.clone().expect("the event is inside a gaffer.job span"))
        .collect();
    assert_eq!(inside.len(), 2, "{inside:?}");
    for (fields, attempt) in inside.iter().zip([1, 2]) {
        assert_eq!(fields.job_id.as_deref(), Some(handle.id()));
        assert_eq!(fields.job_type.as_deref(), Some("flaky"));
        assert_eq!(fields.attempt, Some(attempt));
    }
    engine.shutdown().await.unwrap();
}
