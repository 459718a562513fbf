//! gaffer's metrics, through the `metrics` facade (feature `metrics`; every
//! function here is a no-op without it, and the facade's calls are no-ops
//! until the host process installs a recorder). Labels are job types,
//! pipelines, results and actor names: never ids (bounded cardinality).
//! The table of every metric is docs/metrics.md.
//!
//! Trace context (feature `otel`): [`current_traceparent`] is the W3C
//! `traceparent` of the current span, taken at submit and stored with the
//! job; [`adopt_traceparent`] makes an attempt's span its child.

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
}

impl AttemptResult {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retried => "retried",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Released => "released",
        }
    }
}

/// An attempt of `job_type` ended (`item`: a batch item of that pipeline).
pub fn attempt_ended(job_type: &str, item: bool, result: AttemptResult) {
    #[cfg(feature = "metrics")]
    {
        let kind = if item { "item" } else { "job" };
        metrics::counter!("gaffer_attempts_total", "job_type" => job_type.to_string(), "kind" => kind, "result" => result.label())
            .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (job_type, item, result);
}

/// The user's `run` of an attempt took `seconds`.
pub fn run_duration(job_type: &str, seconds: f64) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("gaffer_job_run_seconds", "job_type" => job_type.to_string())
        .record(seconds);
    #[cfg(not(feature = "metrics"))]
    let _ = (job_type, seconds);
}

/// A job waited `seconds` from when it became runnable to its claim.
pub fn queue_wait(job_type: &str, seconds: f64) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("gaffer_job_queue_wait_seconds", "job_type" => job_type.to_string())
        .record(seconds);
    #[cfg(not(feature = "metrics"))]
    let _ = (job_type, seconds);
}

/// A settlement (the commit that ends or retries an attempt) took `seconds`.
pub fn settlement(job_type: &str, seconds: f64) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("gaffer_settlement_seconds", "job_type" => job_type.to_string())
        .record(seconds);
    #[cfg(not(feature = "metrics"))]
    let _ = (job_type, seconds);
}

/// Jobs of `job_type` running now: +1 when one starts, -1 when it ends.
pub fn running(job_type: &str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("gaffer_jobs_running", "job_type" => job_type.to_string()).increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = (job_type, delta);
}

/// Whether `job_type` is paused (1) or not (0).
pub fn paused(job_type: &str, paused: bool) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("gaffer_job_type_paused", "job_type" => job_type.to_string()).set(if paused {
        1.0
    } else {
        0.0
    });
    #[cfg(not(feature = "metrics"))]
    let _ = (job_type, paused);
}

/// A batch item of `pipeline` ended with `result` (`succeeded`, `failed`,
/// `cancelled`), having recorded `cost` (name → amount).
pub fn item_ended<'a>(
    pipeline: &str,
    result: &'static str,
    cost: impl IntoIterator<Item = (&'a String, &'a f64)>,
) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("gaffer_batch_items_total", "pipeline" => pipeline.to_string(), "result" => result)
            .increment(1);
        for (metric, amount) in cost {
            metrics::gauge!("gaffer_cost_total", "pipeline" => pipeline.to_string(), "metric" => metric.clone())
                .increment(*amount);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (pipeline, result, cost.into_iter().count());
}

/// A handler of `job_type` panicked (its attempt then counts as retried
/// or failed in `gaffer_attempts_total`).
pub fn handler_crashed(job_type: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("gaffer_handler_crashes_total", "job_type" => job_type.to_string())
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = job_type;
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
