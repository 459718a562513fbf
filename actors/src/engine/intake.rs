//! Intake: submissions from other processes, through the store.
//!
//! A [`Client`](../../gaffer/struct.Client.html) never opens the store as a
//! writer. It writes each submission as an entry of taquba's inbox (an object
//! beside the queue) for the engine's intake queue, `{queue_name}-intake`,
//! with its [`IntakeRequest`] as the payload and its request id as both the
//! entry id and the queue job id. The engine opens its queue with the inbox
//! on: taquba's writer applies each entry once (within the inbox's record
//! retention) as a plain enqueue on the intake queue.
//!
//! The intake actor drains that queue and submits each request through the
//! engine's own submit ([`Services::submit`]), so a client's job gets its run
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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::{Deserialize, Serialize};
use taquba::Claim;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::{EngineError, Result};
use crate::jobs::submit::SubmitRequest;
use crate::services::Services;

/// The intake queue of an engine whose jobs queue prefix is `queue_name`.
pub fn intake_queue(queue_name: &str) -> String {
    format!("{queue_name}-intake")
}

/// A request from another process: the payload of an intake job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum IntakeOp {
    /// Submit a job.
    Submit(IntakeRequest),
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
    SubmitWorkflow(crate::workflows::wire::IntakeWorkflow),
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
        crate::layout::records::encode(self)
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

/// A submission from another process (inside [`IntakeOp::Submit`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntakeRequest {
    /// The run id the job gets: a ULID the client made, or the keyed run id
    /// of `idempotency_key`.
    pub run_id: String,
    /// The job type.
    pub job_type: String,
    /// The encoded job.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// Idempotency key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Headers (none under `gaffer.`).
    #[serde(default)]
    pub headers: HashMap<String, String>,
    /// Priority.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Attempt limit.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Earliest time to run, epoch ms.
    #[serde(default)]
    pub run_at_ms: Option<u64>,
    /// The W3C `traceparent` of the client's span (feature `otel`).
    #[serde(default)]
    pub traceparent: Option<String>,
    /// Each attempt's timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl IntakeRequest {
    /// The submission it asks for.
    pub fn into_submit(self) -> SubmitRequest {
        SubmitRequest {
            job_type: self.job_type,
            payload: self.payload,
            run_id: self.idempotency_key.is_none().then_some(self.run_id),
            idempotency_key: self.idempotency_key,
            headers: self.headers,
            priority: self.priority,
            max_attempts: self.max_attempts,
            run_at: self
                .run_at_ms
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            traceparent: self.traceparent,
            timeout: self.timeout_ms.map(Duration::from_millis),
        }
    }
}

/// Requests claimed at once.
const INTAKE_BATCH: usize = 64;
/// Lease of a claimed request (a submit is one commit).
const INTAKE_LEASE: Duration = Duration::from_secs(30);

/// Arguments of the intake actor.
#[derive(Debug)]
pub struct IntakeArguments {
    /// Engine services.
    pub services: Arc<Services>,
    /// The engine, for the operations its actors carry out (cancel, pause,
    /// resume, retry).
    pub engine: crate::EngineRef,
}

/// The intake actor: owns the task that drains the intake queue.
#[derive(Debug)]
pub struct Intake;

/// Messages of the intake: its work runs in its task, which tells it only
/// if it ended early.
#[derive(Debug)]
pub enum IntakeMessage {
    /// The drain task ended without being stopped (it panicked): the
    /// intake fails, and the supervisor starts a new one.
    DrainEnded(String),
}

/// State of the intake actor.
#[derive(Debug)]
pub struct IntakeState {
    stop: CancellationToken,
    /// Stops the drain task when the state is dropped, also when the
    /// intake is killed (its `post_stop` does not run then).
    _stop_on_drop: tokio_util::sync::DropGuard,
    /// Told when the drain task has ended, however it ended.
    ended: Option<tokio::sync::oneshot::Receiver<()>>,
}

impl Actor for Intake {
    type Msg = IntakeMessage;
    type State = IntakeState;
    type Arguments = IntakeArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: IntakeArguments,
    ) -> std::result::Result<IntakeState, ActorProcessingErr> {
        let stop = CancellationToken::new();
        let (told, ended) = tokio::sync::oneshot::channel();
        let work = drain(args.services, args.engine, stop.clone());
        crate::task::spawn_reported(work, move |how| {
            let _ = told.send(());
            if let Err(e) = how {
                let _ = myself.cast(IntakeMessage::DrainEnded(e.to_string()));
            }
        });
        Ok(IntakeState {
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
            ended: Some(ended),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _state: &mut Self::State,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match message {
            IntakeMessage::DrainEnded(why) => {
                Err(format!("the intake's drain task ended early: {why}").into())
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut IntakeState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // The requests in hand finish (each is one submit and one ack); a
        // request not acked by then is claimed again after its lease.
        state.stop.cancel();
        if let Some(ended) = state.ended.take()
            && tokio::time::timeout(Duration::from_secs(5), ended)
                .await
                .is_err()
        {
            warn!(
                "the intake did not stop within 5 s; its requests in hand run again after their lease"
            );
        }
        Ok(())
    }
}

/// Claim requests and submit them until `stop`.
async fn drain(services: Arc<Services>, engine: crate::EngineRef, stop: CancellationToken) {
    let name = intake_queue(&services.settings().queue_name);
    let poll = services.settings().poll_interval;
    while !stop.is_cancelled() {
        let Ok(queue) = services.queue() else { return };
        match queue.claim_batch(&name, INTAKE_BATCH, INTAKE_LEASE).await {
            Ok(claims) if claims.is_empty() => {
                // Holds the queue at most one poll interval (a shutdown waits
                // for its last user before closing it).
                tokio::select! {
                    _ = queue.wait_for_jobs_on(&name, poll) => {}
                    _ = stop.cancelled() => return,
                }
            }
            Ok(claims) => {
                drop(queue);
                let runs = claims.into_iter().map(|c| take(&services, &engine, c));
                futures_util::future::join_all(runs).await;
            }
            Err(e) => {
                drop(queue);
                if let Some(reason) = crate::error::store_closed(&e) {
                    debug!(%reason, "the intake stops: the store closed");
                    return;
                }
                warn!(error = %e, "claiming client requests failed; retrying after the poll interval");
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = stop.cancelled() => return,
                }
            }
        }
    }
}

/// Why a request is refused for good, or `None` when it may be tried again.
fn refusal(e: &EngineError) -> Option<String> {
    match e {
        EngineError::Queue(_)
        | EngineError::Store(_)
        | EngineError::Contended { .. }
        | EngineError::ConcurrentWriter(_)
        | EngineError::ActorUnavailable { .. }
        | EngineError::ShutDown => None,
        other => Some(other.to_string()),
    }
}

/// Apply one request and settle it on the intake queue.
async fn take(services: &Services, engine: &crate::EngineRef, claim: Claim) {
    let Ok(queue) = services.queue() else { return };
    // A client with a keyring seals its request: one sealed under a key
    // this engine does not hold waits (put back on the intake queue, ten
    // intake polls later) for an engine that holds it; one that does not
    // open with a key it holds is refused.
    let payload = match services.keyring().open(&claim.payload) {
        Ok(payload) => payload,
        Err(e @ crate::layout::sealed::SealError::UnknownKey { .. }) => {
            warn!(request = %claim.id, error = %e, "a client request is sealed under a key this engine does not hold; it waits for an engine that holds it");
            if let Err(e) = wait_for_key(services, &queue, &claim).await {
                warn!(request = %claim.id, error = %e, "putting a client request back failed; it is taken again after its lease");
            }
            return;
        }
        Err(e) => {
            let reason = format!("the request does not open with this engine's keyring: {e}");
            warn!(request = %claim.id, %reason, "client request refused");
            if let Err(e) = answer(services, &queue, &claim, RequestFate::Refused(reason)).await {
                warn!(request = %claim.id, error = %e, "refusing a client request failed; it is taken again after its lease");
            }
            return;
        }
    };
    let op: IntakeOp = match crate::layout::records::from_msgpack(&payload) {
        Ok(op) => op,
        Err(e) => {
            let reason = format!("the request does not decode as a gaffer request: {e}");
            warn!(request = %claim.id, %reason, "client request refused");
            if let Err(e) = answer(services, &queue, &claim, RequestFate::Refused(reason)).await {
                warn!(request = %claim.id, error = %e, "refusing a client request failed; it is taken again after its lease");
            }
            return;
        }
    };
    // `Ok(Some(text))`: an operator request's result, recorded with the ack.
    let applied: Result<Option<String>> = match op {
        IntakeOp::Submit(request) => submit(services, &claim.id, request).await.map(|()| None),
        IntakeOp::Cancel { run_id } => engine.cancel(&run_id).await.map(|r| Some(format!("{r:?}"))),
        IntakeOp::Retry { run_id } => engine
            .retry(&run_id)
            .await
            .map(|()| Some(format!("retried `{run_id}`"))),
        IntakeOp::RetryFailed { job_type, since_ms } => engine
            .retry_failed(&job_type, since_ms)
            .await
            .map(|n| Some(format!("retried {n} failed `{job_type}` jobs"))),
        IntakeOp::Pause { job_type } => engine.pause(&job_type).await.map(|was| {
            Some(format!(
                "`{job_type}` paused{}",
                if was { "" } else { " (it was already)" }
            ))
        }),
        IntakeOp::Resume { job_type } => engine.resume(&job_type).await.map(|was| {
            Some(format!(
                "`{job_type}` resumed{}",
                if was { "" } else { " (it was not paused)" }
            ))
        }),
        IntakeOp::PauseValue {
            job_type,
            header,
            value,
        } => engine
            .pause_value(&job_type, &header, &value)
            .await
            .map(|was| {
                Some(format!(
                    "`{header}={value}` of `{job_type}` paused{}",
                    if was { "" } else { " (it was already)" }
                ))
            }),
        IntakeOp::ResumeValue {
            job_type,
            header,
            value,
        } => engine
            .resume_value(&job_type, &header, &value)
            .await
            .map(|was| {
                Some(format!(
                    "`{header}={value}` of `{job_type}` resumed{}",
                    if was { "" } else { " (it was not paused)" }
                ))
            }),
        IntakeOp::Signal {
            run_id,
            name,
            payload,
        } => services
            // Named by the request: applied twice (a crash before its
            // ack), it finds its own signal.
            .signal_from(&run_id, &name, payload, Some(&claim.id))
            .await
            .map(|s| Some(crate::jobs::signals::describe(s, &run_id, &name))),
        IntakeOp::CancelWorkflow { id } => services.cancel_workflow(&id).await.map(|n| {
            Some(format!(
                "workflow `{id}` cancelled ({n} steps cancelled or asked to stop)"
            ))
        }),
        IntakeOp::RetryWorkflow { id } => services
            .retry_workflow(&id)
            .await
            .map(|n| Some(format!("workflow `{id}` retried ({n} steps set back)"))),
        IntakeOp::Rekey => services
            .rekey_keeping(&queue.lease_handle(&claim))
            .await
            .map(|r| {
                Some(format!(
                    "rekeyed to `{}`: {} values looked at, {} written again, {} queued jobs still \
                 under an older key{}",
                    r.key_id,
                    r.scanned,
                    r.renewed,
                    r.queued_behind,
                    if r.retired.is_empty() {
                        String::new()
                    } else {
                        format!("; keys {} retired", r.retired.join(", "))
                    }
                ))
            }),
        IntakeOp::SubmitWorkflow(flow) => {
            services.submit_workflow(flow.into_spec()).await.map(|s| {
                Some(if s.newly_submitted {
                    format!("workflow `{}` submitted", s.id)
                } else {
                    format!("workflow `{}` submitted before (the same steps)", s.id)
                })
            })
        }
    };
    let settled = match applied {
        Ok(None) => queue.ack(&claim).await,
        Ok(Some(result)) => answer(services, &queue, &claim, RequestFate::Applied(result)).await,
        Err(e) => match refusal(&e) {
            Some(reason) => {
                warn!(request = %claim.id, %reason, "client request refused");
                answer(services, &queue, &claim, RequestFate::Refused(reason)).await
            }
            None => {
                warn!(request = %claim.id, error = %e, "applying a client request failed; it is tried again");
                queue.nack(&claim, &e.to_string()).await
            }
        },
    };
    if let Err(e) = settled {
        warn!(request = %claim.id, error = %e, "settling a client request failed; it is taken again after its lease");
    }
}

/// Acknowledge `claim` and record what it came to in the same
/// transaction, kept for its sender to read until `request_retention`
/// passes.
async fn answer(
    services: &Services,
    queue: &taquba::Queue,
    claim: &Claim,
    fate: RequestFate,
) -> std::result::Result<(), taquba::Error> {
    let fx = taquba::SettlementEffects::default()
        .kv_put(request_result_key(&claim.id), fate.encode())
        .expiry_entry(
            services.request_expiry(),
            services.clock().now_ms(),
            claim.id.as_bytes(),
        );
    queue.ack_with(claim, fx).await.map(|_| ())
}

/// Put a request sealed under a key this engine does not hold back on the
/// intake queue under its id, to be taken again after ten intake polls: a
/// fresh queue job each time, so waiting spends none of its attempts.
async fn wait_for_key(services: &Services, queue: &taquba::Queue, claim: &Claim) -> Result<()> {
    let at = std::time::UNIX_EPOCH
        + Duration::from_millis(services.clock().now_ms())
        + services.settings().intake_poll * 10;
    let fx = taquba::SettlementEffects::default().enqueue(taquba::EnqueueRequest {
        queue: claim.queue.to_string(),
        payload: claim.payload.clone(),
        options: taquba::EnqueueOptions::default()
            .id_override(claim.id.clone())
            .headers(claim.headers.clone())
            .priority(claim.priority)
            .max_attempts(claim.max_attempts)
            .run_at(Some(at)),
    });
    queue.ack_with(claim, fx).await?;
    Ok(())
}

/// Submit a client's job through the engine's own submit.
async fn submit(services: &Services, request_id: &str, request: IntakeRequest) -> Result<()> {
    let run_id = request.run_id.clone();
    if services
        .route(&request.job_type)
        .is_none_or(|route| route.kind != crate::erased::Kind::Job)
    {
        return Err(EngineError::UnknownJobType(request.job_type.clone()));
    }
    if request
        .idempotency_key
        .as_deref()
        .map(crate::layout::keys::keyed_run_id)
        .is_some_and(|id| id != run_id)
    {
        return Err(EngineError::InvalidConfig(format!(
            "request `{request_id}`: run id `{run_id}` is not the keyed run id of its idempotency key"
        )));
    }
    services.submit(request.into_submit()).await?;
    debug!(request = %request_id, %run_id, "client request submitted");
    Ok(())
}

/// Milliseconds since the epoch of `t` (0 before it).
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Send `op` to the intake of the engine whose jobs queue prefix is
/// `queue_name`, through `sender` (the store's inbox). Returns the request
/// id, once the request is durable in the store. Sealed under `keyring`'s
/// newest key (plain with an empty keyring).
pub async fn send(
    sender: &taquba::InboxSender,
    queue_name: &str,
    op: &IntakeOp,
    keyring: &crate::layout::sealed::Keyring,
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
    keyring: &crate::layout::sealed::Keyring,
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
