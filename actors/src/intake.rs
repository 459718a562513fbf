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
//! header, `InputMismatch` …) is dead-lettered on the intake queue with the
//! reason: the client reads it as its request's status, operators in
//! `gaffer dead`. A store error nacks the request: it is tried again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::{Deserialize, Serialize};
use taquba::Claim;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::{EngineError, Result};
use crate::jobs::SubmitRequest;
use crate::services::Services;

/// The intake queue of an engine whose jobs queue prefix is `queue_name`.
pub fn intake_queue(queue_name: &str) -> String {
    format!("{queue_name}-intake")
}

/// A submission from another process: the payload of an intake job.
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
}

impl IntakeRequest {
    /// Encode (MessagePack, named fields).
    pub fn encode(&self) -> Result<Vec<u8>> {
        crate::records::encode(self)
    }

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
}

/// The intake actor: owns the task that drains the intake queue.
#[derive(Debug)]
pub struct Intake;

/// State of the intake actor.
#[derive(Debug)]
pub struct IntakeState {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Actor for Intake {
    type Msg = ();
    type State = IntakeState;
    type Arguments = IntakeArguments;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: IntakeArguments,
    ) -> std::result::Result<IntakeState, ActorProcessingErr> {
        let stop = CancellationToken::new();
        let task = tokio::spawn(drain(args.services, stop.clone()));
        Ok(IntakeState {
            stop,
            task: Some(task),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut IntakeState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        // The requests in hand finish (each is one submit and one ack); a
        // request not acked by then is claimed again after its lease.
        state.stop.cancel();
        if let Some(task) = state.task.take()
            && tokio::time::timeout(Duration::from_secs(5), task)
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
async fn drain(services: Arc<Services>, stop: CancellationToken) {
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
                let runs = claims.into_iter().map(|c| take(&services, c));
                futures_util::future::join_all(runs).await;
            }
            Err(e) => {
                drop(queue);
                if let Some(reason) = crate::pool::store_closed(&e) {
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

/// Submit one request and settle it on the intake queue.
async fn take(services: &Services, claim: Claim) {
    let Ok(queue) = services.queue() else { return };
    let request: IntakeRequest = match rmp_serde::from_slice(&claim.payload) {
        Ok(r) => r,
        Err(e) => {
            let reason = format!("the request does not decode as a gaffer submission: {e}");
            if let Err(e) = queue.dead_letter(&claim, &reason).await {
                warn!(request = %claim.id, error = %e, "refusing a client request failed");
            }
            return;
        }
    };
    let run_id = request.run_id.clone();
    let checked = if services.route(&request.job_type).is_none() {
        Err(EngineError::UnknownJobType(request.job_type.clone()))
    } else if request
        .idempotency_key
        .as_deref()
        .map(crate::keys::keyed_run_id)
        .is_some_and(|id| id != run_id)
    {
        Err(EngineError::InvalidConfig(format!(
            "request `{}`: run id `{run_id}` is not the keyed run id of its idempotency key",
            claim.id
        )))
    } else {
        Ok(request.into_submit())
    };
    let submitted = match checked {
        Ok(req) => services.submit(req).await.map(|_| ()),
        Err(e) => Err(e),
    };
    let settled = match submitted {
        Ok(()) => {
            debug!(request = %claim.id, %run_id, "client request submitted");
            queue.ack(&claim).await
        }
        Err(e) => match refusal(&e) {
            Some(reason) => {
                warn!(request = %claim.id, %run_id, %reason, "client request refused");
                queue.dead_letter(&claim, &reason).await
            }
            None => {
                warn!(request = %claim.id, %run_id, error = %e, "submitting a client request failed; it is tried again");
                queue.nack(&claim, &e.to_string()).await
            }
        },
    };
    if let Err(e) = settled {
        warn!(request = %claim.id, error = %e, "settling a client request failed; it is taken again after its lease");
    }
}

/// Milliseconds since the epoch of `t` (0 before it).
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
