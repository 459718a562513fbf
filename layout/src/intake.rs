//! Intake: submissions from other processes, through the store.
//!
//! A [`Client`](../../gaffer/struct.Client.html) never opens the store as a
//! writer. It writes each submission as an entry of taquba's inbox (an object
//! beside the queue) for the engine's intake queue, `{queue_name}-intake`,
//! with its [`SubmitRequest`] as the payload and its request id as both the
//! entry id and the queue job id. The engine opens its queue with the inbox
//! on: taquba's writer applies each entry once (within the inbox's record
//! retention) as a plain enqueue on the intake queue.
//!
//! The intake actor drains that queue and submits each request through the
//! engine's own submit (`Services::submit` in gaffer-actors), so a client's job gets its run
//! record, its keyed compare-and-commit and its reserved-header check exactly
//! like an in-process one. The request carries its run id, chosen by the
//! client (a fresh ULID, or the keyed run id of its idempotency key): a
//! request applied twice (a crash between the submit and the intake's ack)
//! meets its own run and is answered as a duplicate, never run twice.
//!
//! A request the engine cannot take (undecodable, unknown job type, reserved
//! header, `InputMismatch` …) is answered, not dead-lettered: the intake's
//! ack commits, in the same transaction, the request's record
//! (`gaffer/v1/requests/{id}`, see [`RequestFate`]) with the reason, which
//! the client reads as its request's status. The intake queue is the
//! engine's own: nothing of a refusal shows as user work (dead letters,
//! counts). Stores written by an older engine keep their refused requests
//! as dead letters of the intake queue, and [`request_progress`] reads
//! those as refused too. A store error nacks the request: it is tried
//! again.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::request::SubmitRequest;

/// The intake queue of an engine whose jobs queue prefix is `queue_name`.
pub fn intake_queue(queue_name: &str) -> String {
    format!("{queue_name}-intake")
}

/// A request from another process: the payload of an intake job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntakeOp {
    /// Submit a job.
    Submit(Box<SubmitRequest>),
    /// Cancel a job.
    Cancel {
        /// Its id.
        run_id: String,
    },
    /// Run a failed or cancelled job again.
    Retry {
        /// Its id.
        run_id: String,
    },
    /// Retry the jobs of a type that failed at or after a time.
    RetryFailed {
        /// The job type.
        job_type: String,
        /// Epoch ms; 0 for all.
        since_ms: u64,
    },
    /// Pause a job type durably.
    Pause {
        /// The job type.
        job_type: String,
    },
    /// Resume a paused job type.
    Resume {
        /// The job type.
        job_type: String,
    },
    /// Send a signal to a job.
    Signal {
        /// The job's id.
        run_id: String,
        /// The signal's name.
        name: String,
        /// Its encoded payload.
        payload: Vec<u8>,
    },
    /// Cancel a workflow (every step not ended).
    CancelWorkflow {
        /// The workflow's id.
        id: String,
    },
    /// Run a workflow's failed and cancelled steps again.
    RetryWorkflow {
        /// The workflow's id.
        id: String,
    },
    /// Submit a workflow (every step or none, in one transaction).
    SubmitWorkflow(crate::workflow::wire::IntakeWorkflow),
    /// Write every value of the store under the engine's newest key
    /// (`Services::rekey`).
    Rekey,
    /// Pause one value of a job type's partitioning header durably
    /// (`EngineRef::pause_value`).
    PauseValue {
        /// The job type.
        job_type: String,
        /// The header its jobs are spread by.
        header: String,
        /// The value.
        value: String,
    },
    /// Resume a paused value (`EngineRef::resume_value`).
    ResumeValue {
        /// The job type.
        job_type: String,
        /// The header its jobs are spread by.
        header: String,
        /// The value.
        value: String,
    },
}

impl IntakeOp {
    /// Encode (MessagePack, named fields).
    pub fn encode(&self) -> Result<Vec<u8>> {
        crate::records::encode(self)
    }
}

/// `gaffer/v1/requests/{request_id}`: what a request came to, written
/// with the intake's ack: an applied operator request's result (not an
/// applied submission's: its job's records say that), or any refused
/// request's reason (see [`RequestFate`]). Removed by the retention pass
/// once `request_retention` has passed.
pub fn request_result_key(request_id: &str) -> Vec<u8> {
    format!("gaffer/v1/requests/{request_id}").into_bytes()
}

/// The first byte of a refused request's record: 0xFF never occurs in
/// UTF-8, so no applied request's result (its text, as every engine has
/// written it) starts with it.
const REFUSED_MARK: u8 = 0xFF;

/// A request's record at [`request_result_key`], as stored: an applied
/// operator request's result as its UTF-8 text (how every engine wrote
/// it), or a refusal as the byte 0xFF then the reason in UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestFate {
    /// Applied, with this result.
    Applied(String),
    /// Refused, for this reason.
    Refused(String),
}

impl RequestFate {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Applied(result) => result.clone().into_bytes(),
            Self::Refused(reason) => {
                let mut v = Vec::with_capacity(reason.len() + 1);
                v.push(REFUSED_MARK);
                v.extend_from_slice(reason.as_bytes());
                v
            }
        }
    }

    /// A record read back (any bytes: what is not UTF-8 is shown lossily).
    pub fn decode(bytes: &[u8]) -> Self {
        match bytes.split_first() {
            Some((&REFUSED_MARK, reason)) => {
                Self::Refused(String::from_utf8_lossy(reason).into_owned())
            }
            _ => Self::Applied(String::from_utf8_lossy(bytes).into_owned()),
        }
    }
}

pub use crate::request::epoch_ms;

/// Send `op` to the intake of the engine whose jobs queue prefix is
/// `queue_name`, through `sender` (the store's inbox). Returns the request
/// id, once the request is durable in the store. Sealed under `keyring`'s
/// newest key (plain with an empty keyring).
pub async fn send(
    sender: &taquba::InboxSender,
    queue_name: &str,
    op: &IntakeOp,
    keyring: &crate::sealed::Keyring,
) -> Result<String> {
    let request_id = ulid::Ulid::new().to_string();
    send_as(sender, queue_name, &request_id, op, keyring).await?;
    Ok(request_id)
}

/// [`send`] under a request id the caller made (a ULID).
pub async fn send_as(
    sender: &taquba::InboxSender,
    queue_name: &str,
    request_id: &str,
    op: &IntakeOp,
    keyring: &crate::sealed::Keyring,
) -> Result<()> {
    let entry = taquba::EnqueueEntry {
        // Sealed whole under the sender's keyring: the intake opens it.
        payload: keyring.seal_vec(op.encode()?)?,
        options: taquba::EnqueueOptions::default().id_override(request_id.to_string()),
    };
    sender
        .send_with_id(&intake_queue(queue_name), request_id, entry)
        .await?;
    Ok(())
}

/// What became of a request, as a reader of the store sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestProgress {
    /// In the inbox or the intake queue: not applied yet.
    Sent,
    /// Refused, for this reason.
    Refused(String),
    /// Applied; an operator request's result, when it had one.
    Applied(Option<String>),
}

/// Where the request `request_id` to the intake of `queue_name` stands.
pub async fn request_progress(
    view: &taquba::QueueView,
    queue_name: &str,
    request_id: &str,
) -> Result<RequestProgress> {
    use taquba::{InboxOutcome, JobStatus};
    let intake = intake_queue(queue_name);
    // The inbox record first, the intake job second. A following reader
    // moves forward between two reads, so the job read sees a state at
    // least as new as the record's: a record that says "applied" with no
    // job after it means the job was taken. Read the other way round, a
    // job read before the entry was applied (none yet) and a record read
    // after it (applied) made a request still waiting in the intake queue
    // read as taken, and its job as missing.
    let record = view
        .inbox_record(&intake, request_id)
        .await?
        .map(|r| r.outcome);
    let job = view
        .job_record(request_id)
        .await?
        .filter(|job| job.queue.as_str() == intake);
    match job.map(|j| (j.status, j.last_error)) {
        // Refused by an older engine, which dead-lettered refusals on the
        // intake queue with the reason.
        Some((JobStatus::Dead, error)) => {
            return Ok(RequestProgress::Refused(
                error.unwrap_or_else(|| "refused by the engine".into()),
            ));
        }
        Some((JobStatus::Done, _)) => {}
        Some(_) => return Ok(RequestProgress::Sent),
        // In the inbox still, rejected by it, or taken and its intake job
        // record since removed.
        None => match record {
            None => return Ok(RequestProgress::Sent),
            Some(InboxOutcome::Rejected(why)) => {
                return Ok(RequestProgress::Refused(format!(
                    "the engine's inbox rejected the request: {why}"
                )));
            }
            Some(_) => {}
        },
    }
    // The record commits with the ack: taken means it is there (until
    // its retention passed).
    Ok(
        match view
            .kv_get(&request_result_key(request_id))
            .await?
            .map(|b| RequestFate::decode(&b))
        {
            Some(RequestFate::Refused(reason)) => RequestProgress::Refused(reason),
            Some(RequestFate::Applied(result)) => RequestProgress::Applied(Some(result)),
            None => RequestProgress::Applied(None),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_record_reads_back_as_written_and_old_results_read_as_applied() {
        for fate in [
            RequestFate::Applied("`a` paused".into()),
            RequestFate::Applied(String::new()),
            RequestFate::Refused("no job type `x` is registered".into()),
            RequestFate::Refused(String::new()),
        ] {
            assert_eq!(RequestFate::decode(&fate.encode()), fate);
        }
        // What every engine wrote for an applied request: its text.
        assert_eq!(
            RequestFate::decode(b"retried 3 failed `a` jobs"),
            RequestFate::Applied("retried 3 failed `a` jobs".into())
        );
        // Any bytes decode to something.
        assert_eq!(
            RequestFate::decode(&[0xFF, 0xC0]),
            RequestFate::Refused("\u{FFFD}".into())
        );
    }
}
