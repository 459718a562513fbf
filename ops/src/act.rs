//! Operator requests through the store's inbox: what `gaffer submit | retry
//! | signal | cancel | pause | resume` and the dashboard's buttons send. Each writes
//! one request to the inbox (never as the store's writer); the engine takes
//! it at its next look and records its fate, read back by [`progress`].

use gaffer_layout::intake::{self, IntakeOp, RequestProgress};
use gaffer_layout::request::SubmitRequest;
use gaffer_layout::{inspect, keys};

use crate::error::OpsError;
use crate::store::Store;

/// The request that submits a job of `job_type` from its fields as JSON,
/// with an optional idempotency key and due time (epoch ms): the request,
/// its id (a fresh ULID) and the job's id.
pub fn submit_op_at(
    job_type: &str,
    json: &str,
    key: Option<&str>,
    run_at_ms: Option<u64>,
) -> Result<(IntakeOp, String, String), OpsError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| OpsError::BadInput(format!("--json: {e}")))?;
    // A JSON object encodes as the MessagePack map of named fields that a
    // job struct's encoding is.
    let payload = rmp_serde::to_vec_named(&value)
        .map_err(|e| OpsError::BadInput(format!("--json does not encode: {e}")))?;
    let request_id = ulid::Ulid::new().to_string();
    let run_id = match key {
        Some(k) => keys::keyed_run_id(k),
        None => request_id.clone(),
    };
    let op = IntakeOp::Submit(Box::new(SubmitRequest {
        run_id: Some(run_id.clone()),
        job_type: job_type.to_string(),
        payload,
        idempotency_key: key.map(str::to_string),
        run_at: run_at_ms.map(|ms| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)),
        ..SubmitRequest::default()
    }));
    Ok((op, request_id, run_id))
}

/// [`submit_op_at`] due now (`gaffer submit TYPE JSON [--key K]`).
pub fn submit_op(
    job_type: &str,
    json: &str,
    key: Option<&str>,
) -> Result<(IntakeOp, String, String), OpsError> {
    submit_op_at(job_type, json, key, None)
}

/// The request that sends the signal `name` to the job `run_id` with a
/// payload given as JSON (encoded as MessagePack, as the job decodes it):
/// what `gaffer signal ID NAME JSON` and the dashboard's form send.
pub fn signal_op(run_id: &str, name: &str, json: &str) -> Result<IntakeOp, OpsError> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| OpsError::BadInput(format!("the signal's payload is not JSON: {e}")))?;
    let payload = rmp_serde::to_vec_named(&value)
        .map_err(|e| OpsError::BadInput(format!("the signal's payload does not encode: {e}")))?;
    if name.is_empty() {
        return Err(OpsError::BadInput("name the signal".into()));
    }
    Ok(IntakeOp::Signal {
        run_id: run_id.to_string(),
        name: name.to_string(),
        payload,
    })
}

/// Write `op` to the store's inbox as `request_id` (a fresh ULID).
pub async fn send(store: &Store, op: &IntakeOp, request_id: &str) -> Result<(), OpsError> {
    intake::send_as(
        store.sender(),
        store.jobs_prefix(),
        request_id,
        op,
        store.keyring(),
    )
    .await?;
    Ok(())
}

/// What became of request `request_id`, as the reader's view sees it.
pub async fn progress(store: &Store, request_id: &str) -> Result<RequestProgress, OpsError> {
    Ok(intake::request_progress(store.view(), store.jobs_prefix(), request_id).await?)
}

/// A job's state in words (`queued`, `scheduled`, `waiting`, `running`,
/// `succeeded`, `failed`, `cancelled`), `None` when no record of it exists.
pub async fn job_state(store: &Store, run_id: &str) -> Result<Option<String>, OpsError> {
    Ok(inspect::job_state(store.view(), run_id)
        .await?
        .map(|state| format!("{state:?}").to_lowercase()))
}
