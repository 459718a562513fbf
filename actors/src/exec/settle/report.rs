//! What a settlement says once its commit is durable: the type's metrics,
//! the engine event, and the waiters (a job) or the batch's coordinator
//! (an item), through the address book.

use taquba::Claim;

use crate::engine::notify::{ItemEnd, JobEnd};
use crate::events::EngineEvent;
use crate::exec::settle::Settler;
use crate::exec::settle::commit::Told;
use crate::exec::settle::standing::Target;
use crate::layout::records::{ItemStatus, Outcome};
use crate::telemetry::{AttemptResult, ItemResult};

/// A run ended with `told`, durably: count it, emit it, tell who waits.
pub(crate) fn ended(
    ctx: Settler<'_>,
    target: &Target,
    job_type: String,
    claim: &Claim,
    told: Told,
    elapsed: std::time::Duration,
) {
    let metrics = ctx.metrics;
    let run_id = target.run_id().to_string();
    metrics.settlement(&job_type, elapsed.as_secs_f64());
    match &told {
        Told::Job(record) => {
            let result = match record.outcome {
                Outcome::Succeeded(_) => AttemptResult::Succeeded,
                Outcome::Failed { .. } => AttemptResult::Failed,
                Outcome::Cancelled => AttemptResult::Cancelled,
            };
            metrics.attempt_ended(&job_type, false, result);
        }
        Told::Item(marker) => {
            let (result, item) = match marker.status {
                ItemStatus::Succeeded => (AttemptResult::Succeeded, ItemResult::Succeeded),
                ItemStatus::Failed => (AttemptResult::Failed, ItemResult::Failed),
                ItemStatus::Cancelled => (AttemptResult::Cancelled, ItemResult::Cancelled),
            };
            metrics.attempt_ended(&job_type, true, result);
            metrics.item_ended(&job_type, item, &marker.cost);
        }
    }
    match (told, target) {
        (Told::Job(record), Target::Job { .. }) => {
            ctx.services.emit_with(|| match &record.outcome {
                Outcome::Succeeded(_) => EngineEvent::JobSucceeded {
                    run_id: run_id.clone(),
                    job_type,
                },
                Outcome::Cancelled => EngineEvent::JobCancelled {
                    run_id: run_id.clone(),
                },
                Outcome::Failed { kind, message } => EngineEvent::JobFailed {
                    run_id: run_id.clone(),
                    job_type,
                    kind: *kind,
                    message: message.clone(),
                    retrying: false,
                },
            });
            ctx.notify.job(JobEnd::Ended { run_id, record });
        }
        (Told::Item(marker), Target::Item { batch_id, key, .. }) => {
            ctx.notify.item(ItemEnd {
                batch_id: batch_id.clone(),
                key: key.clone(),
                job_id: claim.id.clone(),
                marker,
            });
        }
        _ => {}
    }
}
