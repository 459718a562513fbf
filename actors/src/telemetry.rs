//! gaffer's metrics, through the `metrics` facade (feature `metrics`; every
//! function here is a no-op without it, and the facade's calls are no-ops
//! until the host process installs a recorder). A job type's metrics are
//! held as handles by its pool (`TypeMetrics`), registered at their first
//! update, so the recorder must be installed before the engine starts.
//! Labels are job types, pipelines, results and actor names: never ids
//! (bounded cardinality). The table of every metric is docs/guide/telemetry.md.
//!
//! Trace context (feature `otel`): [`current_traceparent`] is the W3C
//! `traceparent` of the current span, taken at submit and stored with the
//! job; [`adopt_traceparent`] makes an attempt's span its child.

#[cfg(feature = "metrics")]
use std::sync::{Arc, OnceLock};

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Histogram};

/// How an attempt ended (the `result` label of `gaffer_attempts_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// It succeeded.
    Succeeded,
    /// It failed and will be tried again.
    Retried,
    /// It failed for good.
    Failed,
    /// It was cancelled.
    Cancelled,
    /// It was given back without counting (shutdown grace, paused type).
    Released,
    /// It ended waiting for a signal (not counted: the job runs again when
    /// the signal or its timeout comes).
    Waited,
}

impl AttemptResult {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Waited => "waited",
            Self::Released => "released",
        }
    }
}

/// How a batch item ended (the `result` label of `gaffer_batch_items_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemResult {
    Succeeded,
    Failed,
    Cancelled,
}

impl ItemResult {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// The metrics of one job type (or pipeline), made by its pool and cloned
/// to its workers, its claim task and its settlement tasks.
///
/// Each metric is registered with the recorder at its first update and its
/// handle kept: later updates are an atomic operation on the handle, with no
/// key built (no label `String`) and no lookup in the recorder's registry.
/// Registered at first use, not at the pool's start, so a series appears
/// only once it has a value, as with the facade's macros. A handle taken
/// before a recorder is installed stays a no-op: the host installs its
/// recorder before it starts the engine (docs/guide/telemetry.md).
///
/// Updates for a job type other than the pool's own (a stray pool's claims
/// name theirs in their headers) go through the facade per update, as
/// before. Without feature `metrics` this is an empty value and every
/// method a no-op.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypeMetrics {
    #[cfg(feature = "metrics")]
    handles: Arc<Handles>,
}

/// The handles of one type, each registered at its first update.
#[cfg(feature = "metrics")]
#[derive(Default)]
struct Handles {
    job_type: String,
    /// This pool's place among the samples of its type ([`SAMPLES`]).
    place: Place,
    /// `gaffer_attempts_total`, by kind (job, item) and result.
    attempts: [[OnceLock<Counter>; 6]; 2],
    run: OnceLock<Histogram>,
    queue_wait: OnceLock<Histogram>,
    settlement: OnceLock<Histogram>,
    running: OnceLock<Gauge>,
    paused: OnceLock<Gauge>,
    ready: OnceLock<Gauge>,
    oldest_ready: OnceLock<Gauge>,
    crashes: OnceLock<Counter>,
    /// `gaffer_batch_items_total`, by result.
    items: [OnceLock<Counter>; 3],
}

/// The latest sample of every pool alive in the process, by job type then
/// pool: `(ready, oldest ready age in seconds)`. A process that runs
/// several engines (a `ShardedEngine`: one per owned shard) has a pool of
/// each type in each, and one `gaffer_jobs_ready` and one
/// `gaffer_oldest_ready_seconds` series per type: they are the sum of the
/// pools' ready jobs and the oldest of their ages, not the pool that
/// sampled last. A pool's sample leaves with the pool (its engine shut
/// down, or fenced when its shard moved to another process, whose own
/// series then count those jobs).
#[cfg(feature = "metrics")]
static SAMPLES: std::sync::Mutex<std::collections::BTreeMap<String, PoolSamples>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// The last sample of each live pool of one type, by pool: `(ready, oldest
/// ready age in seconds)`.
#[cfg(feature = "metrics")]
type PoolSamples = std::collections::BTreeMap<u64, (i64, f64)>;

/// The next pool's number in [`SAMPLES`].
#[cfg(feature = "metrics")]
static NEXT_POOL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A pool's place among the samples of its type in [`SAMPLES`]; dropped
/// with the pool's metrics, it takes the pool's sample out. `pool` 0: the
/// metrics were made without [`TypeMetrics::new`] and sample nothing.
#[cfg(feature = "metrics")]
#[derive(Default)]
struct Place {
    job_type: String,
    pool: u64,
}

#[cfg(feature = "metrics")]
impl Place {
    /// Record this pool's sample (`None`: the pool is gone) and, when the
    /// samples of the type changed, `set` its gauges to the sum of the
    /// ready jobs of every pool of the type alive and the oldest of their
    /// ages (under the lock: two pools' sets land in the order of their
    /// sums).
    fn record(&self, sample: Option<(i64, f64)>, set: impl FnOnce(i64, f64)) {
        let mut samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
        let of_type = samples.entry(self.job_type.clone()).or_default();
        let changed = match sample {
            Some(s) => {
                of_type.insert(self.pool, s);
                true
            }
            None => of_type.remove(&self.pool).is_some(),
        };
        let ready: i64 = of_type.values().map(|s| s.0).sum();
        let oldest = of_type.values().map(|s| s.1).fold(0.0, f64::max);
        if of_type.is_empty() {
            samples.remove(&self.job_type);
        }
        if changed {
            set(ready, oldest);
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Place {
    fn drop(&mut self) {
        if self.pool != 0 {
            self.record(None, |ready, oldest| {
                metrics::gauge!("gaffer_jobs_ready", "job_type" => self.job_type.clone())
                    .set(ready as f64);
                metrics::gauge!("gaffer_oldest_ready_seconds", "job_type" => self.job_type.clone())
                    .set(oldest);
            });
        }
    }
}

#[cfg(feature = "metrics")]
impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles")
            .field("job_type", &self.job_type)
            .finish_non_exhaustive()
    }
}

/// Update the handle in `cell` (registered by `make` on first use), or,
/// with no cell (another type's update), a handle registered for this one.
#[cfg(feature = "metrics")]
fn update<T>(cell: Option<&OnceLock<T>>, make: impl FnOnce() -> T, apply: impl FnOnce(&T)) {
    match cell {
        Some(cell) => apply(cell.get_or_init(make)),
        None => apply(&make()),
    }
}

/// `gaffer_jobs_running` for one running job, and the start of its run:
/// counted down when dropped (the run returned, or its handler panicked);
/// [`Running::ended`] also records the run's duration.
#[derive(Debug)]
pub(crate) struct Running {
    #[cfg(feature = "metrics")]
    gauge: Gauge,
    #[cfg(feature = "metrics")]
    metrics: TypeMetrics,
    /// The job's type, when it is not the pool's.
    #[cfg(feature = "metrics")]
    foreign: Option<String>,
    #[cfg(feature = "metrics")]
    started: std::time::Instant,
}

impl Running {
    /// The run returned: record its duration in `gaffer_job_run_seconds`.
    pub(crate) fn ended(self) {
        #[cfg(feature = "metrics")]
        {
            let seconds = self.started.elapsed().as_secs_f64();
            let h = &*self.metrics.handles;
            match &self.foreign {
                None => h
                    .run
                    .get_or_init(|| run_histogram(&h.job_type))
                    .record(seconds),
                Some(job_type) => run_histogram(job_type).record(seconds),
            }
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Running {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

impl TypeMetrics {
    /// The metrics of `job_type` (nothing is registered yet).
    pub(crate) fn new(job_type: &str) -> Self {
        #[cfg(feature = "metrics")]
        return Self {
            handles: Arc::new(Handles {
                job_type: job_type.to_string(),
                place: Place {
                    job_type: job_type.to_string(),
                    pool: NEXT_POOL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                },
                ..Handles::default()
            }),
        };
        #[cfg(not(feature = "metrics"))]
        {
            let _ = job_type;
            Self {}
        }
    }

    /// The held handles, when `job_type` is this pool's type.
    #[cfg(feature = "metrics")]
    fn own(&self, job_type: &str) -> Option<&Handles> {
        (self.handles.job_type == job_type).then_some(&*self.handles)
    }

    /// An attempt of `job_type` ended (`item`: a batch item of that
    /// pipeline).
    pub(crate) fn attempt_ended(&self, job_type: &str, item: bool, result: AttemptResult) {
        #[cfg(feature = "metrics")]
        update(
            self.own(job_type)
                .map(|h| &h.attempts[usize::from(item)][result as usize]),
            || {
                let kind = if item { "item" } else { "job" };
                metrics::counter!("gaffer_attempts_total", "job_type" => job_type.to_string(), "kind" => kind, "result" => result.label())
            },
            |c| c.increment(1),
        );
        #[cfg(not(feature = "metrics"))]
        let _ = (job_type, item, result);
    }

    /// A job of `job_type` starts its run: `gaffer_jobs_running` goes up
    /// until the returned guard is dropped.
    pub(crate) fn running(&self, job_type: &str) -> Running {
        #[cfg(feature = "metrics")]
        {
            let (gauge, foreign) = match self.own(job_type) {
                Some(h) => (
                    h.running.get_or_init(|| running_gauge(job_type)).clone(),
                    None,
                ),
                None => (running_gauge(job_type), Some(job_type.to_string())),
            };
            gauge.increment(1.0);
            Running {
                gauge,
                metrics: self.clone(),
                foreign,
                started: std::time::Instant::now(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = job_type;
            Running {}
        }
    }

    /// A job of this type waited `seconds` from when it became runnable to
    /// its claim.
    pub(crate) fn queue_wait(&self, seconds: f64) {
        #[cfg(feature = "metrics")]
        {
            let h = &*self.handles;
            h.queue_wait
                .get_or_init(|| metrics::histogram!("gaffer_job_queue_wait_seconds", "job_type" => h.job_type.clone()))
                .record(seconds);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = seconds;
    }

    /// A settlement of `job_type` (the commit that ends or retries an
    /// attempt) took `seconds`.
    pub(crate) fn settlement(&self, job_type: &str, seconds: f64) {
        #[cfg(feature = "metrics")]
        update(
            self.own(job_type).map(|h| &h.settlement),
            || metrics::histogram!("gaffer_settlement_seconds", "job_type" => job_type.to_string()),
            |h| h.record(seconds),
        );
        #[cfg(not(feature = "metrics"))]
        let _ = (job_type, seconds);
    }

    /// Whether this type is paused (1) or not (0).
    pub(crate) fn paused(&self, paused: bool) {
        #[cfg(feature = "metrics")]
        {
            let h = &*self.handles;
            h.paused
                .get_or_init(
                    || metrics::gauge!("gaffer_job_type_paused", "job_type" => h.job_type.clone()),
                )
                .set(if paused { 1.0 } else { 0.0 });
        }
        #[cfg(not(feature = "metrics"))]
        let _ = paused;
    }

    /// Whether the feature `metrics` is on (a pool samples its ready jobs
    /// only then).
    pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

    /// A sample of the type's ready jobs over its queues (every value's):
    /// `gaffer_jobs_ready` and `gaffer_oldest_ready_seconds` (0 with none
    /// ready), over every pool of the type in the process ([`SAMPLES`]).
    /// `gaffer_jobs_running` exists from then on too, at 0 for a type that
    /// has run nothing: an autoscaler's query adds ready and running, and
    /// a sum with a missing series has no value.
    pub(crate) fn ready(&self, ready: i64, oldest_seconds: f64) {
        #[cfg(feature = "metrics")]
        {
            let h = &*self.handles;
            h.running
                .get_or_init(|| running_gauge(&h.job_type))
                .increment(0.0);
            h.place.record(Some((ready, oldest_seconds)), |ready, oldest| {
                h.ready
                    .get_or_init(
                        || metrics::gauge!("gaffer_jobs_ready", "job_type" => h.job_type.clone()),
                    )
                    .set(ready as f64);
                h.oldest_ready
                    .get_or_init(|| metrics::gauge!("gaffer_oldest_ready_seconds", "job_type" => h.job_type.clone()))
                    .set(oldest);
            });
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (ready, oldest_seconds);
    }

    /// A handler of this type panicked (its attempt then counts as retried
    /// or failed in `gaffer_attempts_total`).
    pub(crate) fn handler_crashed(&self) {
        #[cfg(feature = "metrics")]
        {
            let h = &*self.handles;
            h.crashes
                .get_or_init(|| metrics::counter!("gaffer_handler_crashes_total", "job_type" => h.job_type.clone()))
                .increment(1);
        }
    }

    /// A batch item of `pipeline` ended with `result`, having recorded
    /// `cost` (name → amount; user-chosen names, so `gaffer_cost_total`
    /// goes through the facade per update).
    pub(crate) fn item_ended<'a>(
        &self,
        pipeline: &str,
        result: ItemResult,
        cost: impl IntoIterator<Item = (&'a String, &'a f64)>,
    ) {
        #[cfg(feature = "metrics")]
        {
            update(
                self.own(pipeline).map(|h| &h.items[result as usize]),
                || metrics::counter!("gaffer_batch_items_total", "pipeline" => pipeline.to_string(), "result" => result.label()),
                |c| c.increment(1),
            );
            for (metric, amount) in cost {
                metrics::gauge!("gaffer_cost_total", "pipeline" => pipeline.to_string(), "metric" => metric.clone())
                    .increment(*amount);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (pipeline, result, cost.into_iter().count());
    }
}

#[cfg(feature = "metrics")]
fn running_gauge(job_type: &str) -> Gauge {
    metrics::gauge!("gaffer_jobs_running", "job_type" => job_type.to_string())
}

#[cfg(feature = "metrics")]
fn run_histogram(job_type: &str) -> Histogram {
    metrics::histogram!("gaffer_job_run_seconds", "job_type" => job_type.to_string())
}

/// One of the engine's actors (`actor`: its role) was restarted after a
/// failure.
pub fn restarted(actor: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("gaffer_actor_restarts_total", "actor" => actor).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = actor;
}

/// The W3C `traceparent` of the current span's OpenTelemetry context, when
/// it has a valid one (feature `otel`, with a `tracing-opentelemetry` layer
/// installed); `None` otherwise.
pub fn current_traceparent() -> Option<String> {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::propagation::TextMapPropagator;
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let cx = tracing::Span::current().context();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = std::collections::HashMap::new();
        opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .inject_context(&cx, &mut carrier);
        carrier.remove("traceparent")
    }
    #[cfg(not(feature = "otel"))]
    None
}

/// Make `span` a child of the remote span `traceparent` (feature `otel`; a
/// malformed value is ignored: the span starts its own trace).
pub fn adopt_traceparent(span: &tracing::Span, traceparent: &str) {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::propagation::TextMapPropagator;
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let carrier =
            std::collections::HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
        let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        if cx.span().span_context().is_valid() {
            // Fails only when no OpenTelemetry layer is installed: nothing
            // would record the parent anyway.
            let _ = span.set_parent(cx);
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, traceparent);
}
