//! Settlement: turn a delivery's verdict into the one queue transition that
//! ends (or retries) it, with the outcome record and the staged effects in the
//! same transaction.
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

use crate::effects::StagedEffects;
use crate::events::EngineEvent;
use crate::handler::Verdict;
use crate::keys;
use crate::records::{FailureKind, Outcome, OutcomeRecord, OutputRef};
use crate::services::Services;
use crate::waiters::WaitersMessage;

/// Largest output kept inline in the outcome record; larger ones go to a blob.
pub const INLINE_OUTPUT_MAX: usize = taquba::MAX_KV_VALUE_SIZE - 16 * 1024;

/// The run id and job type a claimed job carries in its headers (the job id
/// and `"?"` when the headers are missing: such a job was not written by gaffer).
pub(crate) fn identity(claim: &Claim) -> (String, String) {
    let run_id = claim
        .headers
        .get(keys::HEADER_RUN)
        .filter(|r| keys::is_valid_id(r))
        .cloned()
        .unwrap_or_else(|| claim.id.clone());
    let job_type = claim
        .headers
        .get(keys::HEADER_TYPE)
        .cloned()
        .unwrap_or_default();
    (run_id, job_type)
}

/// Settle `claim` with `verdict`. Returns the outcome record when this
/// settlement ended the run (and tells the waiters).
pub(crate) async fn settle(
    services: &Arc<Services>,
    waiters: &ActorRef<WaitersMessage>,
    claim: Claim,
    verdict: Verdict,
    effects: StagedEffects,
) -> Option<OutcomeRecord> {
    let (run_id, job_type) = identity(&claim);
    let queue = match services.queue() {
        Ok(q) => q,
        Err(_) => {
            warn!(%run_id, "engine shut down before settlement; the job is redelivered on the next open");
            return None;
        }
    };
    let mut record = OutcomeRecord {
        job_id: claim.id.clone(),
        job_type: job_type.clone(),
        input_hash: keys::input_hash(&job_type, &claim.payload),
        attempts: claim.attempts,
        finished_at_ms: services.clock().now_ms(),
        outcome: Outcome::Cancelled,
    };
    let cancelled = claim.cancel_token().is_cancelled();
    let result = match verdict {
        _ if cancelled => {
            let fx = services.terminal_effects(&run_id, &record);
            queue
                .dead_letter_with(&claim, "cancelled", fx)
                .await
                .map(|_| true)
        }
        Verdict::Succeeded(output) => {
            let output = if output.len() > INLINE_OUTPUT_MAX {
                let path =
                    keys::output_blob_path(&services.settings().blob_prefix, &run_id, &claim.id);
                if let Err(e) = services
                    .store()
                    .put(&Path::from(path.as_str()), PutPayload::from(output))
                    .await
                {
                    // The job stays claimed; its lease expires and it runs again.
                    warn!(%run_id, error = %e, "writing a large output failed; the job will be retried");
                    return None;
                }
                OutputRef::Blob(path)
            } else {
                OutputRef::Inline(output)
            };
            record.outcome = Outcome::Succeeded(output);
            let mut fx = services.terminal_effects(&run_id, &record);
            apply_user_effects(&mut fx, effects);
            queue.ack_with(&claim, fx).await.map(|_| true)
        }
        Verdict::Failed { kind, message } => {
            record.outcome = Outcome::Failed {
                kind,
                message: message.clone(),
            };
            let fx = services.terminal_effects(&run_id, &record);
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
            if let Ok(ended) = &ended {
                services.emit(EngineEvent::JobFailed {
                    run_id: run_id.clone(),
                    job_type: job_type.clone(),
                    kind,
                    message,
                    retrying: !ended,
                });
            }
            ended
        }
    };
    match result {
        Ok(true) => {
            debug!(%run_id, %job_type, "run ended");
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
            let _ = waiters.cast(WaitersMessage::Settled {
                run_id,
                record: Box::new(record.clone()),
            });
            Some(record)
        }
        Ok(false) => None,
        Err(taquba::Error::ClaimLost) => {
            // Another delivery owns the job now (our lease expired): its
            // settlement, not ours, records the outcome.
            warn!(%run_id, "settlement refused: the claim was lost (lease expired); the newer delivery decides");
            None
        }
        Err(e) => {
            warn!(%run_id, error = %e, "settlement failed; the job stays claimed until its lease expires, then retries");
            None
        }
    }
}

fn apply_user_effects(fx: &mut SettlementEffects, staged: StagedEffects) {
    for (key, value) in staged {
        match value {
            Some(v) => {
                fx.kv_writes.insert(key, v);
            }
            None => fx.kv_deletes.push(key),
        }
    }
}
