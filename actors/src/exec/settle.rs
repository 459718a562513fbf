//! Settlement: turn a delivery's verdict into the one queue transition that
//! ends (or retries) it, with the outcome record (jobs) or item marker (bulk
//! items) and the staged effects in the same transaction.
//!
//! Runs in a short task owned by the handler pool, so a handler slot takes its
//! next job while this commit waits for the queue's flush; concurrent
//! settlements share one flush.
//!
//! A settlement ends only the run it owns, and user code runs only for the
//! run a claim owns: when a job is claimed, [`standing`] reads whether the
//! run's record (a job's run record, an item's active record) names this
//! queue job. A queue job carrying another run's id, an invalid one, or none
//! (enqueued by hand, or a stale duplicate) is dead-lettered at once as its
//! own failure, never run, without touching any run's records. taquba's
//! settlement transactions take no compare, so the check is a read; it is
//! exact from the claim to the settlement because nothing changes whether a
//! run's record names a claimed job while the claim is held: the record is
//! created with the job's enqueue (a new id), removed only by the job's own
//! terminal settlement (a lost claim fails its commit with `ClaimLost`), and
//! rewritten only by the job's own retry (same id); a cancel of a claimed
//! job only requests it.
//!
//! A retry (a real failure with attempts left) and a claim given back put
//! the job back on its queue under the same id (`commit::requeue`): one
//! transaction acknowledges the claim and enqueues it again, after gaffer's
//! own backoff.
//!
//! Files: `standing` (what a claim is, read at the claim), `decide` (what
//! the settlement does: pure), `commit` (the transactions), `report` (what
//! is said once a commit is durable).

use std::time::Instant;

use taquba::object_store::ObjectStoreExt;
use taquba::object_store::PutPayload;
use taquba::object_store::path::Path;
use tracing::{debug, warn};

use crate::engine::notify::{JobEnd, Notify};
use crate::events::EngineEvent;
use crate::exec::effects::StagedEffects;
use crate::exec::suspend::Pause;
use crate::layout::records::{Cost, ItemStatus, Outcome, OutputRef};
use crate::services::Services;
use crate::telemetry::{AttemptResult, TypeMetrics};

mod commit;
mod decide;
mod report;
mod standing;

use commit::{Back, Delivery, Told};
pub(crate) use commit::{Claimed, give_back};
pub(crate) use decide::Ending;
use decide::{Decision, End, decide};
pub(crate) use standing::{Owner, Standing, Target, attempt_span, standing};

/// Largest output kept inline in a record; larger ones go to a blob.
pub(crate) const INLINE_OUTPUT_MAX: usize = taquba::MAX_KV_VALUE_SIZE - 16 * 1024;

/// What a settlement works with: the engine's services, who it tells, and
/// the type's metrics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settler<'a> {
    pub(crate) services: &'a Services,
    pub(crate) notify: &'a Notify,
    pub(crate) metrics: &'a TypeMetrics,
}

/// One delivery to settle: the claim, how it ended, and what its attempt
/// staged (effects and follow-ups, applied with a success) and cost.
#[derive(Debug)]
pub(crate) struct Settlement {
    pub(crate) claimed: Claimed,
    pub(crate) ending: Ending,
    pub(crate) effects: StagedEffects,
    pub(crate) cost: Cost,
}

/// Settle a claimed job. Returns whether this settlement ended the run (and,
/// if so, told the waiters or the batch's coordinator).
pub(crate) async fn settle(ctx: Settler<'_>, settlement: Settlement) -> bool {
    let started = Instant::now();
    let services = ctx.services;
    let Settlement {
        claimed,
        ending,
        effects,
        cost,
    } = settlement;
    let Ok(queue) = services.queue() else {
        warn!(job_id = %claimed.claim.id, "engine shut down before settlement; the job is redelivered on the next open");
        return false;
    };
    let cancelled = claimed.claim.cancel_token().is_cancelled();
    let last = claimed.attempts.is_last();
    match decide(ending, &claimed.standing, cancelled, last) {
        Decision::Release(reason) => {
            let (job_type, item) = match &claimed.standing {
                Standing::Owner(o) => (o.job_type.clone(), !matches!(o.target, Target::Job { .. })),
                _ => (String::new(), false),
            };
            let job_id = claimed.claim.id.clone();
            match give_back(services, claimed, &reason).await {
                Ok(()) => {
                    ctx.metrics
                        .attempt_ended(&job_type, item, AttemptResult::Released);
                    ctx.metrics
                        .settlement(&job_type, started.elapsed().as_secs_f64());
                }
                Err(e) => {
                    warn!(%job_id, error = %e, "releasing the job failed; it runs again once its lease expires");
                }
            }
            false
        }
        Decision::ReadAgain(why) => {
            // Not known to be its run's job: given back, and read again at
            // its next claim.
            if let Err(e) = give_back(services, claimed, &why).await {
                warn!(error = %e, "giving the job back failed; it runs again once its lease expires");
            }
            false
        }
        Decision::Refuse(reason) => {
            commit::refuse(&queue, &claimed.claim, &reason).await;
            false
        }
        Decision::Retry {
            owner,
            kind,
            message,
        } => {
            retry(ctx, &queue, &claimed, owner, kind, message, started).await;
            false
        }
        Decision::Pause { owner, pause } => {
            pause_run(ctx, &queue, &claimed, owner, pause, started).await;
            false
        }
        Decision::End { owner, end } => {
            end_run(ctx, &queue, &claimed, owner, end, (effects, cost), started).await
        }
    }
}

/// Put the job back for a retry. It is announced before the commit: once
/// it commits, the next attempt may run (and end) before this task resumes,
/// and a job's events must arrive in attempt order.
async fn retry(
    ctx: Settler<'_>,
    queue: &taquba::Queue,
    claimed: &Claimed,
    owner: &Owner,
    kind: crate::layout::records::FailureKind,
    message: String,
    started: Instant,
) {
    let run_id = owner.target.run_id();
    let is_job = matches!(owner.target, Target::Job { .. });
    if is_job {
        ctx.services.emit(EngineEvent::JobFailed {
            run_id: run_id.to_string(),
            job_type: owner.job_type.clone(),
            kind,
            message: message.clone(),
            retrying: true,
        });
    }
    let how = ("failed", message.as_str());
    match commit::requeue(ctx.services, queue, claimed, owner, Back::Retry, how).await {
        Ok(()) => {
            ctx.metrics
                .attempt_ended(&owner.job_type, !is_job, AttemptResult::Retried);
            ctx.metrics
                .settlement(&owner.job_type, started.elapsed().as_secs_f64());
            // A cancel that came while the retry committed asked the queue
            // job this settlement ended: ask its successor.
            if is_job
                && claimed.claim.cancel_token().is_cancelled()
                && let Err(e) = ctx.services.cancel(run_id).await
            {
                warn!(%run_id, error = %e, "cancelling the retried job failed");
            }
        }
        Err(e) => {
            warn!(%run_id, error = %e, "settlement failed; the job stays claimed until its lease expires, then retries");
        }
    }
}

/// Put the job back paused, no attempt spent: to wait for its signal
/// (taquba's `signal_wait`, at the wait's deadline), to sleep or snoozed
/// (a scheduled job, at its end). A signal sent while the job ran found it
/// not waiting yet and stayed in the job's signals (`jobs::signals`); so
/// once a wait is durable the job's signals are read again, and one that
/// came meanwhile is delivered now. A crash between the two is covered at
/// the next start (`engine::startup::deliver_held_signals`).
async fn pause_run(
    ctx: Settler<'_>,
    queue: &taquba::Queue,
    claimed: &Claimed,
    owner: &Owner,
    pause: Pause,
    started: Instant,
) {
    let run_id = owner.target.run_id();
    let until_ms = pause.until_ms();
    let how = (pause.how(), "");
    let event = match &pause {
        Pause::Signal(wait) => EngineEvent::JobWaiting {
            run_id: run_id.to_string(),
            job_type: owner.job_type.clone(),
            signal: wait.name.clone(),
            until_ms,
        },
        Pause::Sleep(_) => EngineEvent::JobSleeping {
            run_id: run_id.to_string(),
            job_type: owner.job_type.clone(),
            until_ms,
        },
        Pause::Snooze { .. } => EngineEvent::JobSnoozed {
            run_id: run_id.to_string(),
            job_type: owner.job_type.clone(),
            snoozes: owner
                .run
                .as_ref()
                .map_or(0, |r| r.snoozes)
                .saturating_add(1),
            until_ms,
        },
    };
    let signal = match &pause {
        Pause::Signal(wait) => Some(wait.name.clone()),
        _ => None,
    };
    #[cfg(feature = "testing")]
    crate::testing::panics::hold(
        crate::testing::panics::HoldPoint::BeforeWaitCommit,
        &claimed.claim.queue,
    )
    .await;
    if let Err(e) =
        commit::requeue(ctx.services, queue, claimed, owner, Back::Pause(pause), how).await
    {
        warn!(%run_id, error = %e, "putting the job back paused failed; it runs again when its lease expires");
        return;
    }
    ctx.metrics
        .attempt_ended(&owner.job_type, false, AttemptResult::Waited);
    ctx.metrics
        .settlement(&owner.job_type, started.elapsed().as_secs_f64());
    ctx.services.emit(event);
    #[cfg(feature = "testing")]
    crate::testing::panics::hold(
        crate::testing::panics::HoldPoint::AfterWaitCommit,
        &claimed.claim.queue,
    )
    .await;
    let Some(name) = signal else {
        return;
    };
    match queue
        .view()
        .kv_get(&crate::layout::keys::signal_key(run_id, &name))
        .await
    {
        Ok(Some(_)) => {
            if let Err(e) = queue.signal(&claimed.claim.id, Vec::new()).await {
                warn!(%run_id, error = %e, "delivering a signal that came during the wait's commit failed; it is delivered at the next start, or the wait times out");
            }
        }
        Ok(None) => {}
        Err(e) => {
            warn!(%run_id, error = %e, "reading the job's signals after its wait failed; one that came meanwhile is delivered at the next start")
        }
    }
}

/// End the run with `end`: its record or marker, with what the attempt
/// staged when it succeeded, in the transaction that acks or dead-letters
/// the job; then say so. A failure leaves the job claimed, to run again
/// when its lease expires.
async fn end_run(
    ctx: Settler<'_>,
    queue: &taquba::Queue,
    claimed: &Claimed,
    owner: &Owner,
    end: End,
    (effects, cost): (StagedEffects, Cost),
    started: Instant,
) -> bool {
    let services = ctx.services;
    let claim = &claimed.claim;
    let target = &owner.target;
    let run_id = target.run_id().to_string();
    let is_job = matches!(target, Target::Job { .. });
    let end = match end {
        End::Succeeded(OutputRef::Inline(output)) if output.len() > INLINE_OUTPUT_MAX => {
            let path = commit::blob_path(services, target, claim);
            if let Err(e) = services
                .store()
                .put(&Path::from(path.as_str()), PutPayload::from(output))
                .await
            {
                warn!(%run_id, error = %e, "writing a large output failed; the job will be retried");
                return false;
            }
            End::Succeeded(OutputRef::Blob(path))
        }
        other => other,
    };
    // The queue forgets a job's claims when it is acknowledged: a job that
    // was claimed before keeps them (read when it was claimed) in its
    // outcome record.
    let StagedEffects { kv, followups } = effects;
    let delivery = Delivery {
        claim,
        input_hash: owner.run.as_ref().map(|run| run.input_hash),
        attempts: &claimed.attempts,
        history: claimed.history.clone(),
        followups: followups.iter().map(|(id, _)| id.clone()).collect(),
        tags: owner.run.as_ref().and_then(|run| run.tags.clone()),
    };
    let succeeded = matches!(end, End::Succeeded(_));
    let parts = commit::terminal(services, target, &owner.job_type, delivery, end, &cost).and_then(
        |(fx, told)| {
            let fx = if succeeded {
                commit::with_user(services, fx, kv, &followups)?
            } else {
                fx
            };
            Ok((fx, told))
        },
    );
    // A run that waited for a signal keeps its signals until it ends: they
    // go with it.
    let held = match (&owner.run, target) {
        (Some(run), Target::Job { run_id }) if run.wait.is_some() => {
            match services.signal_keys(run_id).await {
                Ok(keys) => keys,
                Err(e) => {
                    warn!(%run_id, error = %e, "reading the job's signals failed; the job stays claimed until its lease expires, then retries");
                    return false;
                }
            }
        }
        _ => Vec::new(),
    };
    let parts = parts.map(|(mut fx, told)| {
        fx.kv_deletes.extend(held);
        (fx, told)
    });
    let (fx, told) = match parts {
        Ok(parts) => parts,
        Err(e) => {
            warn!(%run_id, error = %e, "preparing the settlement failed (a record that does not encode, or a follow-up of a type this engine does not have); the job stays claimed until its lease expires, then retries");
            return false;
        }
    };
    // A workflow step's end decides the steps that need it, in this
    // transaction (see `workflows::gates`).
    let (fx, plan) = match (owner.run.as_ref().and_then(|r| r.step.as_ref()), &told) {
        (Some(step), Told::Job(record)) => {
            match with_step_plan(services, fx, step, &record.outcome).await {
                Ok((fx, plan)) => (fx, plan),
                Err(e) => {
                    warn!(%run_id, error = %e, "planning the workflow step's end failed; the job stays claimed until its lease expires, then retries");
                    return false;
                }
            }
        }
        _ => (fx, None),
    };
    #[cfg(feature = "testing")]
    if plan.is_some() {
        crate::testing::panics::check(
            crate::testing::panics::PanicPoint::StepPlanned,
            &claim.queue,
        );
    }
    // Announce the commit before it starts: until it is durable, a record
    // read from the store must not answer for this run (see the waiters).
    if is_job {
        ctx.notify.job(JobEnd::Settling(run_id.clone()));
    }
    // The queue keeps a failure's message with the dead job: sealed, as
    // the record's is.
    let sealed = |message: &str| match services.keyring().seal_text(message) {
        Ok(sealed) => sealed,
        Err(e) => format!("failed (its message could not be sealed: {e})"),
    };
    let result = match &told {
        Told::Job(record) => match &record.outcome {
            Outcome::Succeeded(_) => queue.ack_with(claim, fx).await,
            Outcome::Failed { message, .. } => {
                queue.dead_letter_with(claim, &sealed(message), fx).await
            }
            Outcome::Cancelled => queue.dead_letter_with(claim, "cancelled", fx).await,
        },
        Told::Item(marker) => match marker.status {
            ItemStatus::Succeeded => queue.ack_with(claim, fx).await,
            ItemStatus::Failed => {
                let message = marker.error.as_deref().unwrap_or("failed");
                queue.dead_letter_with(claim, &sealed(message), fx).await
            }
            ItemStatus::Cancelled => queue.dead_letter_with(claim, "cancelled", fx).await,
        },
    };
    if let Err(e) = result {
        if is_job {
            ctx.notify.job(JobEnd::Aborted(run_id.clone()));
        }
        match e {
            // Another delivery owns the job now (our lease expired): its
            // settlement, not ours, records the outcome.
            taquba::Error::ClaimLost => {
                warn!(%run_id, "settlement refused: the claim was lost (lease expired); the newer delivery decides")
            }
            e => {
                warn!(%run_id, error = %e, "settlement failed; the job stays claimed until its lease expires, then retries")
            }
        }
        return false;
    }
    if let Some(plan) = plan {
        plan.guard.committed();
    }
    debug!(%run_id, job_type = %owner.job_type, "run ended");
    report::ended(
        ctx,
        target,
        owner.job_type.clone(),
        claim,
        told,
        started.elapsed(),
    );
    true
}

/// `fx` plus what the end of workflow step `step` with `outcome` decides,
/// and the plan to report once the transaction ends. A step whose
/// workflow's records are gone (removed by hand) ends as a plain job.
pub(crate) async fn with_step_plan(
    services: &Services,
    fx: taquba::SettlementEffects,
    step: &crate::layout::records::StepOf,
    outcome: &Outcome,
) -> crate::Result<(
    taquba::SettlementEffects,
    Option<crate::workflows::gates::Plan>,
)> {
    use crate::workflows::layout::StepEnd;
    use crate::workflows::settle::{begin, with_plan};
    let end = StepEnd::of(outcome);
    let plan = match begin(services, step, end).await {
        Ok(plan) => plan,
        Err(crate::EngineError::WorkflowNotFound(id)) => {
            warn!(workflow = %id, step = %step.step, "the step's workflow has no record: the step ends as a plain job");
            return Ok((fx, None));
        }
        Err(e) => return Err(e),
    };
    let fx = with_plan(services, fx, step, end, &plan).await?;
    Ok((fx, Some(plan)))
}
