//! The bytes-level request to create a job: what a submission, a follow-up
//! (`Effects::then`) and a batch's completion job (`BatchSpec::on_complete`)
//! are made of.

use std::collections::HashMap;
use std::time::SystemTime;

/// A job to submit, as bytes.
#[derive(Debug, Clone, Default)]
pub struct SubmitRequest {
    /// Job type name; routes the job to its handler.
    pub job_type: String,
    /// The encoded job.
    pub payload: Vec<u8>,
    /// Idempotency key: submissions with one key are one job.
    pub idempotency_key: Option<String>,
    /// The run id of an unkeyed job, chosen by its submitter (a client in
    /// another process, which must know the id before the engine sees the
    /// request): submissions with one run id are one job, as with a key.
    /// `None` (the usual case) makes a fresh one. Ignored with a key.
    pub run_id: Option<String>,
    /// Headers stored on the job (no `gaffer.` prefix).
    pub headers: HashMap<String, String>,
    /// Priority (lower is claimed first); `None` = queue default.
    pub priority: Option<u32>,
    /// Attempt limit; `None` = queue default.
    pub max_attempts: Option<u32>,
    /// Earliest time to run; `None` = now.
    pub run_at: Option<SystemTime>,
    /// Each attempt's timeout (beats its type's `JobOptions::timeout`);
    /// `None` = its type's.
    pub timeout: Option<std::time::Duration>,
    /// The W3C `traceparent` of the submitter's span, which each attempt's
    /// span becomes a child of (feature `otel`). `None` = the span current
    /// at [`Services::submit`](crate::services::Services::submit), if it has an OpenTelemetry context. Set by a
    /// submitter in another process (the client), whose span is not here.
    pub traceparent: Option<String>,
}
