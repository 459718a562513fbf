//! The commands that act: `submit`, `retry`, `signal`, `cancel`, `pause`,
//! `resume`.
//! Each writes one request to the store's inbox (never as the store's
//! writer) and, unless `--no-wait`, reads the store until the engine applied
//! or refused it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gaffer_actors::engine::intake::{self, IntakeOp, IntakeRequest, RequestProgress};
use gaffer_actors::layout::{inspect, keys};

use crate::error::CliError;
use crate::read::Store;
use crate::report::{self, RequestReport};

/// How often a waiting command reads the store.
const EVERY: Duration = Duration::from_millis(100);

/// The request of `gaffer submit TYPE --json J [--key K]`.
pub fn submit_op(
    job_type: &str,
    json: &str,
    key: Option<&str>,
) -> Result<(IntakeOp, String, String), CliError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| CliError::BadInput(format!("--json: {e}")))?;
    // A JSON object encodes as the MessagePack map of named fields that a
    // job struct's encoding is.
    let payload = rmp_serde::to_vec_named(&value)
        .map_err(|e| CliError::BadInput(format!("--json does not encode: {e}")))?;
    let request_id = ulid::Ulid::new().to_string();
    let run_id = match key {
        Some(k) => keys::keyed_run_id(k),
        None => request_id.clone(),
    };
    let op = IntakeOp::Submit(IntakeRequest {
        run_id: run_id.clone(),
        job_type: job_type.to_string(),
        payload,
        idempotency_key: key.map(str::to_string),
        headers: Default::default(),
        priority: None,
        max_attempts: None,
        run_at_ms: None,
        traceparent: None,
    });
    Ok((op, request_id, run_id))
}

/// The request of `gaffer signal ID NAME JSON`.
pub fn signal_op(run_id: &str, name: &str, json: &str) -> Result<IntakeOp, CliError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| CliError::BadInput(format!("the payload: {e}")))?;
    let payload = rmp_serde::to_vec_named(&value)
        .map_err(|e| CliError::BadInput(format!("the payload does not encode: {e}")))?;
    Ok(IntakeOp::Signal {
        run_id: run_id.to_string(),
        name: name.to_string(),
        payload,
    })
}

/// Send `op` (as `request_id`, a fresh ULID) and report what became of it.
/// Exit status: 0 applied (or sent, with `no_wait`), 1 refused, 3 not
/// applied within `wait`.
pub async fn send(
    store: &Store,
    op: IntakeOp,
    request_id: String,
    job: Option<String>,
    no_wait: bool,
    wait: Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    intake::send_as(store.sender(), store.jobs_prefix(), &request_id, &op).await?;
    let mut out = RequestReport {
        request: request_id.clone(),
        job: job.clone(),
        status: "sent",
        result: None,
        reason: None,
        job_state: None,
    };
    if no_wait {
        report::print(json, &out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + wait;
    let code = loop {
        match intake::request_progress(store.view(), store.jobs_prefix(), &request_id).await? {
            RequestProgress::Sent if Instant::now() < deadline => {
                tokio::time::sleep(EVERY).await;
                continue;
            }
            RequestProgress::Sent => break 3,
            RequestProgress::Refused(reason) => {
                out.status = "refused";
                out.reason = Some(reason);
                break 1;
            }
            RequestProgress::Applied(result) => {
                out.status = "applied";
                out.result = result;
                if let Some(run_id) = &job {
                    out.job_state = job_state(store, run_id).await?;
                }
                break 0;
            }
        }
    };
    report::print(json, &out)?;
    Ok(ExitCode::from(code))
}

async fn job_state(store: &Store, run_id: &str) -> Result<Option<String>, CliError> {
    Ok(inspect::job_state(store.view(), run_id)
        .await?
        .map(|state| format!("{state:?}").to_lowercase()))
}
