//! Settlement: turn a delivery's verdict into the one queue transition that
//! ends (or retries) it, with the outcome record (jobs) or item marker (bulk
//! items) and the staged effects in the same transaction.
//!
//! Runs in a short task owned by the handler pool (or the claimer, for
//! deliveries no handler can take), so a handler slot takes its next job while
//! this commit waits for the queue's flush; concurrent settlements share one
//! flush.

use std::sync::Arc;

use ractor::ActorRef;
use taquba::object_store::ObjectStoreExt;
use taquba::object_store::PutPayload;
use taquba::object_store::path::Path;
use taquba::{Claim, NackOutcome, SettlementEffects};
use tracing::{debug, warn};

use crate::batches::BatchesMessage;
use crate::effects::StagedEffects;
use crate::events::EngineEvent;
use crate::handler::Verdict;
use crate::keys;
use crate::records::{
    self, Cost, FailureKind, ItemMarker, ItemStatus, Outcome, OutcomeRecord, OutputRef,
};
use crate::services::Services;
use crate::waiters::WaitersMessage;

/// Largest output kept inline in a record; larger ones go to a blob.
pub const INLINE_OUTPUT_MAX: usize = taquba::MAX_KV_VALUE_SIZE - 16 * 1024;

/// Who settlements tell: the waiters (jobs) and the batches registry (items).
#[derive(Debug, Clone)]
pub struct Notify {
    pub(crate) waiters: ActorRef<WaitersMessage>,
    pub(crate) batches: ActorRef<BatchesMessage>,
}

/// What a claimed job is, from its headers.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A job: the run id handles answer to.
    Job { run_id: String },
    /// A bulk item.
    Item {
        batch_id: String,
        key: String,
        run_id: String,
    },
}

impl Target {
    pub(crate) fn run_id(&self) -> &str {
        match self {
            Self::Job { run_id } | Self::Item { run_id, .. } => run_id,
        }
    }
}

/// The target and type name a claimed job carries in its headers (a job
/// without gaffer's headers is a job under its own id with no type).
pub(crate) fn identify(claim: &Claim) -> (Target, String) {
    let h = &claim.headers;
    let run_id = h
        .get(keys::HEADER_RUN)
        .filter(|r| keys::is_valid_id(r))
        .cloned()
        .unwrap_or_else(|| claim.id.clone());
    let job_type = h.get(keys::HEADER_TYPE).cloned().unwrap_or_default();
    let target = match (h.get(keys::HEADER_BATCH), h.get(keys::HEADER_KEY)) {
        (Some(batch_id), Some(key)) if keys::is_valid_id(batch_id) => Target::Item {
            batch_id: batch_id.clone(),
            key: key.clone(),
            run_id,
        },
        _ => Target::Job { run_id },
    };
    (target, job_type)
}

/// How the run ended, before it is written as a record or marker.
enum End {
    Succeeded(OutputRef),
    Failed { kind: FailureKind, message: String },
    Cancelled,
}

/// The effects that end a target, and the notification to send once they commit.
fn terminal(
    services: &Services,
    target: &Target,
    job_type: &str,
    claim: &Claim,
    end: &End,
    cost: &Cost,
) -> (SettlementEffects, Told) {
    match target {
        Target::Job { run_id } => {
            let record = OutcomeRecord {
                job_id: claim.id.clone(),
                job_type: job_type.to_string(),
                input_hash: keys::input_hash(job_type, &claim.payload),
                attempts: claim.attempts,
                finished_at_ms: services.clock().now_ms(),
                outcome: match end {
                    End::Succeeded(out) => Outcome::Succeeded(out.clone()),
                    End::Failed { kind, message } => Outcome::Failed {
                        kind: *kind,
                        message: message.clone(),
                    },
                    End::Cancelled => Outcome::Cancelled,
                },
            };
            (
                services.terminal_effects(run_id, &record),
                Told::Job(Box::new(record)),
            )
        }
        Target::Item { batch_id, key, .. } => {
            let (status, error, output) = match end {
                End::Succeeded(out) => (ItemStatus::Succeeded, None, Some(out.clone())),
                End::Failed { message, .. } => (ItemStatus::Failed, Some(message.clone()), None),
                End::Cancelled => (ItemStatus::Cancelled, None, None),
            };
            let marker = ItemMarker {
                status,
                error,
                cost: cost.clone(),
                output,
                job_id: claim.id.clone(),
            };
            let fx = SettlementEffects::default()
                .kv_delete(keys::item_active_key(batch_id, key))
                .kv_put(
                    keys::item_marker_key(batch_id, key),
                    records::encode(&marker),
                );
            (fx, Told::Item(Box::new(marker)))
        }
    }
}

enum Told {
    Job(Box<OutcomeRecord>),
    Item(Box<ItemMarker>),
}

fn blob_path(services: &Services, target: &Target, claim: &Claim) -> String {
    let blob = &services.settings().blob_prefix;
    match target {
        Target::Job { run_id } => keys::output_blob_path(blob, run_id, &claim.id),
        Target::Item {
            batch_id, run_id, ..
        } => {
            format!(
                "{}outputs/{run_id}/{}",
                keys::batch_blob_dir(blob, batch_id),
                claim.id
            )
        }
    }
}

/// Settle `claim` with `verdict`. Returns whether this settlement ended the run
/// (and, if so, told the waiters or the batch's coordinator).
pub(crate) async fn settle(
    services: &Arc<Services>,
    notify: &Notify,
    claim: Claim,
    verdict: Verdict,
    effects: StagedEffects,
    cost: Cost,
) -> bool {
    let (target, job_type) = identify(&claim);
    let run_id = target.run_id().to_string();
    let Ok(queue) = services.queue() else {
        warn!(%run_id, "engine shut down before settlement; the job is redelivered on the next open");
        return false;
    };
    let cancelled = claim.cancel_token().is_cancelled();
    // Announce the commit before it starts: until it is durable, a record read
    // from the store must not answer for this run (see the waiters).
    let is_job = matches!(target, Target::Job { .. });
    if is_job {
        let _ = notify
            .waiters
            .cast(WaitersMessage::Settling(run_id.clone()));
    }
    let (result, told) = match verdict {
        _ if cancelled => {
            let (fx, told) = terminal(services, &target, &job_type, &claim, &End::Cancelled, &cost);
            (
                queue
                    .dead_letter_with(&claim, "cancelled", fx)
                    .await
                    .map(|_| true),
                told,
            )
        }
        Verdict::Succeeded(output) => {
            let output = if output.len() > INLINE_OUTPUT_MAX {
                let path = blob_path(services, &target, &claim);
                if let Err(e) = services
                    .store()
                    .put(&Path::from(path.as_str()), PutPayload::from(output))
                    .await
                {
                    // The job stays claimed; its lease expires and it runs again.
                    warn!(%run_id, error = %e, "writing a large output failed; the job will be retried");
                    if is_job {
                        let _ = notify
                            .waiters
                            .cast(WaitersMessage::SettleAborted(run_id.clone()));
                    }
                    return false;
                }
                OutputRef::Blob(path)
            } else {
                OutputRef::Inline(output)
            };
            let (mut fx, told) = terminal(
                services,
                &target,
                &job_type,
                &claim,
                &End::Succeeded(output),
                &cost,
            );
            for (key, value) in effects {
                match value {
                    Some(v) => {
                        fx.kv_writes.insert(key, v);
                    }
                    None => fx.kv_deletes.push(key),
                }
            }
            (queue.ack_with(&claim, fx).await.map(|_| true), told)
        }
        Verdict::Failed { kind, message } => {
            let end = End::Failed {
                kind,
                message: message.clone(),
            };
            let (fx, told) = terminal(services, &target, &job_type, &claim, &end, &cost);
            let retries = kind == FailureKind::Transient && !claim.is_last_attempt();
            let event = |retrying| EngineEvent::JobFailed {
                run_id: run_id.clone(),
                job_type: job_type.clone(),
                kind,
                message: message.clone(),
                retrying,
            };
            // A retry is announced before the nack: once the nack commits, the
            // next attempt may run (and end) before this task resumes, and a
            // job's events must arrive in attempt order.
            if retries && matches!(target, Target::Job { .. }) {
                services.emit(event(true));
            }
            let ended = match kind {
                FailureKind::Permanent => queue
                    .dead_letter_with(&claim, &message, fx)
                    .await
                    .map(|_| true),
                FailureKind::Transient => queue
                    .nack_with(&claim, &message, fx)
                    .await
                    .map(|o| matches!(o, NackOutcome::DeadLettered(_))),
            };
            if let (Ok(true), Target::Job { .. }) = (&ended, &target) {
                services.emit(event(false));
            }
            (ended, told)
        }
    };
    if is_job && !matches!(result, Ok(true)) {
        let _ = notify
            .waiters
            .cast(WaitersMessage::SettleAborted(run_id.clone()));
    }
    match result {
        Ok(true) => {
            debug!(%run_id, %job_type, "run ended");
            match (told, target) {
                (Told::Job(record), Target::Job { .. }) => {
                    match &record.outcome {
                        Outcome::Succeeded(_) => services.emit(EngineEvent::JobSucceeded {
                            run_id: run_id.clone(),
                            job_type,
                        }),
                        Outcome::Cancelled => services.emit(EngineEvent::JobCancelled {
                            run_id: run_id.clone(),
                        }),
                        Outcome::Failed { .. } => {}
                    }
                    let _ = notify
                        .waiters
                        .cast(WaitersMessage::Settled { run_id, record });
                }
                (Told::Item(marker), Target::Item { batch_id, key, .. }) => {
                    let _ = notify.batches.cast(BatchesMessage::ItemSettled {
                        batch_id,
                        key,
                        job_id: claim.id.clone(),
                        marker,
                    });
                }
                _ => {}
            }
            true
        }
        Ok(false) => false,
        Err(taquba::Error::ClaimLost) => {
            // Another delivery owns the job now (our lease expired): its
            // settlement, not ours, records the outcome.
            warn!(%run_id, "settlement refused: the claim was lost (lease expired); the newer delivery decides");
            false
        }
        Err(e) => {
            warn!(%run_id, error = %e, "settlement failed; the job stays claimed until its lease expires, then retries");
            false
        }
    }
}
