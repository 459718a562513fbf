//! The intake actor: drains the intake queue (what clients in other
//! processes wrote to the store's inbox) through the engine's own submit.
//! The wire types and the client side are `gaffer_layout::intake`
//! (re-exported here).

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use taquba::Claim;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::{EngineError, Result};
use crate::jobs::request::SubmitRequest;
use crate::services::Services;

pub use crate::layout::intake::*;

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
        IntakeOp::Submit(request) => submit(services, &claim.id, *request).await,
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
/// Apply a client's submission. A debounced one answers its burst's run id,
/// recorded as the request's result (its client learns the id from it).
async fn submit(
    services: &Services,
    request_id: &str,
    mut request: SubmitRequest,
) -> Result<Option<String>> {
    // A request from another process names its job's id: its submitter
    // answers with it before the engine sees the request.
    let Some(run_id) = request.run_id.clone() else {
        return Err(EngineError::InvalidConfig(format!(
            "request `{request_id}` names no run id: a request through the inbox carries the id its sender answered with"
        )));
    };
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
    if request.idempotency_key.is_some() {
        // Keyed: the id is the key's (checked above).
        request.run_id = None;
    }
    if request.debounce.is_some() {
        let submitted = services.submit(request).await?;
        debug!(request = %request_id, run_id = %submitted.run_id, "client request debounced");
        return Ok(Some(submitted.run_id));
    }
    services.submit(request).await?;
    debug!(request = %request_id, %run_id, "client request submitted");
    Ok(None)
}
