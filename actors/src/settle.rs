//! Settlement: turn a delivery's verdict into the one queue transition that
//! ends (or retries) it, with the outcome record (jobs) or item marker (bulk
//! items) and the staged effects in the same transaction.
//!
//! Runs in a short task owned by the handler pool, so a handler slot takes its
//! next job while this commit waits for the queue's flush; concurrent
//! settlements share one flush.
//!
//! A settlement ends only the run it owns: before a terminal commit it checks
//! that the run's record (a job's run record, an item's active record) names
//! this queue job. A queue job carrying another run's id (enqueued by hand, or
//! a stale duplicate) is dead-lettered as its own failure without touching
//! that run's records. taquba's settlement transactions take no compare, so
//! the check is a read before the commit; it is exact because nothing changes
//! whether a run's record names a claimed job while the claim is held: the
//! record is created with the job's enqueue (a new id), removed only by the
//! job's own terminal settlement (this one: a lost claim fails its commit with
//! `ClaimLost`), and a cancel of a claimed job only requests it.

use ractor::DerivedActorRef;
use taquba::object_store::ObjectStoreExt;
use taquba::object_store::PutPayload;
use taquba::object_store::path::Path;
use taquba::{Claim, SettlementEffects};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::attempts::Attempts;
use crate::effects::StagedEffects;
use crate::erased::Verdict;
use crate::events::EngineEvent;
use crate::keys;
use crate::records::{
    self, Cost, FailureKind, ItemMarker, ItemStatus, Outcome, OutcomeRecord, OutputRef,
    PastAttempt, RunRecord,
};
use crate::services::Services;
use crate::telemetry::{AttemptResult, ItemResult, TypeMetrics};

/// Largest output kept inline in a record; larger ones go to a blob.
pub const INLINE_OUTPUT_MAX: usize = taquba::MAX_KV_VALUE_SIZE - 16 * 1024;

/// What a job's terminal commit tells the waiters.
#[derive(Debug)]
pub enum JobEnd {
    /// A terminal commit of this run is starting: until it is durable (an
    /// `Ended` or `Aborted` follows), a record read from the store may not be
    /// durable yet.
    Settling(String),
    /// The run ended with this record; the commit is durable.
    Ended {
        /// Run id.
        run_id: String,
        /// Its outcome record.
        record: Box<OutcomeRecord>,
    },
    /// The terminal commit announced by `Settling` did not happen.
    Aborted(String),
}

/// What a batch item's terminal commit tells the batches registry.
#[derive(Debug)]
pub struct ItemEnd {
    /// Batch.
    pub batch_id: String,
    /// Item key.
    pub key: String,
    /// Job id of the delivery that settled it.
    pub job_id: String,
    /// Its marker.
    pub marker: Box<ItemMarker>,
}

/// Where settlements report: a view of the waiters (jobs) and of the batches
/// registry (items) that accepts only these reports.
#[derive(Debug, Clone)]
pub(crate) struct Reports {
    pub(crate) jobs: DerivedActorRef<JobEnd>,
    pub(crate) items: DerivedActorRef<ItemEnd>,
}

/// Who settlements tell, looked up when a report is sent. The supervisor
/// publishes new addresses when it restarts the waiters or the registry, so
/// a settlement that began before a restart tells the new actor when it ends
/// (an address book, not engine state: see ARCHITECTURE.md, "Shared state").
#[derive(Debug, Clone)]
pub struct Notify(watch::Receiver<Reports>);

impl Notify {
    pub(crate) fn new(book: watch::Receiver<Reports>) -> Self {
        Self(book)
    }

    /// Tell the current waiters.
    pub(crate) fn job(&self, end: JobEnd) {
        let _ = self.0.borrow().jobs.send_message(end);
    }

    /// Tell the current batches registry.
    pub(crate) fn item(&self, end: ItemEnd) {
        let _ = self.0.borrow().items.send_message(end);
    }
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
/// An item carries no `gaffer.run` header (items enqueued before it was
/// dropped do): its run id follows from its batch and key.
pub(crate) fn identify(claim: &Claim) -> (Target, String) {
    let h = &claim.headers;
    let run_id = h
        .get(keys::HEADER_RUN)
        .filter(|r| keys::is_valid_id(r))
        .cloned();
    let job_type = h.get(keys::HEADER_TYPE).cloned().unwrap_or_default();
    let target = match (h.get(keys::HEADER_BATCH), h.get(keys::HEADER_KEY)) {
        (Some(batch_id), Some(key)) if keys::is_valid_id(batch_id) => Target::Item {
            run_id: run_id.unwrap_or_else(|| keys::item_run_id(batch_id, key)),
            batch_id: batch_id.clone(),
            key: key.clone(),
        },
        _ => Target::Job {
            run_id: run_id.unwrap_or_else(|| claim.id.clone()),
        },
    };
    (target, job_type)
}

/// The `gaffer.job` span of one attempt: an info span (spans print
/// nothing by themselves; a user's `info!` inside `run` carries its
/// fields), with the job type, the job's id (its run id), the attempt and
/// its limit, the queue, and a bulk item's batch id and key.
///
/// Its fields are the same as [`identify`]'s answer, but borrowed from the
/// claim's headers: nothing is copied, and an item's run id (a hash of its
/// batch and key) is computed only when a subscriber wants the span (the
/// macro evaluates its fields only then).
pub(crate) fn attempt_span(claim: &Claim, attempts: &Attempts) -> tracing::Span {
    let h = &claim.headers;
    let job_type = h.get(keys::HEADER_TYPE).map_or("", String::as_str);
    let run_header = h.get(keys::HEADER_RUN).filter(|r| keys::is_valid_id(r));
    // Every field given at creation (none recorded later): a formatting
    // subscriber formats a span's fields once, and again at each record.
    let span = match (h.get(keys::HEADER_BATCH), h.get(keys::HEADER_KEY)) {
        (Some(batch_id), Some(key)) if keys::is_valid_id(batch_id) => tracing::info_span!(
            "gaffer.job",
            job_type = %job_type,
            job_id = %ItemRunId { header: run_header, batch_id, key, derived: Default::default() },
            attempt = attempts.number,
            max_attempts = attempts.limit,
            queue = %claim.queue,
            batch_id = %batch_id,
            item_key = %key,
        ),
        _ => tracing::info_span!(
            "gaffer.job",
            job_type = %job_type,
            job_id = %run_header.unwrap_or(&claim.id),
            attempt = attempts.number,
            max_attempts = attempts.limit,
            queue = %claim.queue,
        ),
    };
    if let Some(traceparent) = h.get(keys::HEADER_TRACEPARENT) {
        crate::telemetry::adopt_traceparent(&span, traceparent);
    }
    span
}

/// An item's run id as [`identify`] finds it: its `gaffer.run` header (items
/// enqueued before it was dropped), or else derived from its batch and key
/// when first formatted (once, however many layers format the span).
struct ItemRunId<'a> {
    header: Option<&'a String>,
    batch_id: &'a str,
    key: &'a str,
    derived: std::cell::OnceCell<String>,
}

impl std::fmt::Display for ItemRunId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.header {
            Some(run_id) => f.write_str(run_id),
            None => f.write_str(
                self.derived
                    .get_or_init(|| keys::item_run_id(self.batch_id, self.key)),
            ),
        }
    }
}

/// Whether a claimed job came through gaffer: a job carries its run id, an
/// item its batch and key.
pub(crate) fn submitted_through_gaffer(claim: &Claim) -> bool {
    let h = &claim.headers;
    h.contains_key(keys::HEADER_RUN)
        || (h.contains_key(keys::HEADER_BATCH) && h.contains_key(keys::HEADER_KEY))
}

/// How a delivery ends.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The handler's verdict (or the engine's, for a job it did not run).
    Verdict(Verdict),
    /// Give the claim back without spending an attempt (shutdown grace over,
    /// paused type): the job runs again later.
    Release(String),
}

/// How the run ended, before it is written as a record or marker.
enum End {
    Succeeded(OutputRef),
    Failed { kind: FailureKind, message: String },
    Cancelled,
}

impl End {
    fn reason(&self) -> &str {
        match self {
            Self::Succeeded(_) => "succeeded",
            Self::Failed { message, .. } => message,
            Self::Cancelled => "cancelled",
        }
    }
}

enum Told {
    Job(Box<OutcomeRecord>),
    Item(Box<ItemMarker>),
}

/// The delivery a settlement ends: its claim, its attempt count, and the
/// claims of the job before it (read only for a job claimed before).
struct Delivery<'a> {
    claim: &'a Claim,
    attempts: &'a Attempts,
    history: Vec<PastAttempt>,
    /// The run ids of the follow-ups a success creates.
    followups: Vec<String>,
}

/// The effects that end a target, and the notification to send once they commit.
fn terminal(
    services: &Services,
    target: &Target,
    job_type: &str,
    delivery: Delivery<'_>,
    end: End,
    cost: &Cost,
) -> crate::Result<(SettlementEffects, Told)> {
    let Delivery {
        claim,
        attempts,
        history,
        followups,
    } = delivery;
    match target {
        Target::Job { run_id } => {
            let record = OutcomeRecord {
                job_id: claim.id.clone(),
                job_type: job_type.to_string(),
                input_hash: keys::input_hash(job_type, &claim.payload),
                // A job failed without running (attempts spent) used its limit.
                attempts: attempts.number.min(attempts.limit),
                finished_at_ms: services.clock().now_ms(),
                followups: match end {
                    End::Succeeded(_) => followups,
                    _ => Vec::new(),
                },
                outcome: match end {
                    End::Succeeded(out) => Outcome::Succeeded(out),
                    End::Failed { kind, message } => Outcome::Failed { kind, message },
                    End::Cancelled => Outcome::Cancelled,
                },
                history,
            };
            Ok((
                services.terminal_effects(run_id, &record)?,
                Told::Job(Box::new(record)),
            ))
        }
        Target::Item { batch_id, key, .. } => {
            let (status, error, output) = match end {
                End::Succeeded(out) => (ItemStatus::Succeeded, None, Some(out)),
                End::Failed { message, .. } => (ItemStatus::Failed, Some(message), None),
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
                    records::encode(&marker)?,
                );
            Ok((fx, Told::Item(Box::new(marker))))
        }
    }
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

/// Whether the run `target` names this queue job: its run record (a job) or
/// its active record (an item) holds `claim`'s id.
async fn owns(queue: &taquba::Queue, target: &Target, claim: &Claim) -> crate::Result<bool> {
    Ok(match target {
        Target::Job { run_id } => {
            let key = keys::run_key(run_id);
            match queue.view().kv_get(&key).await? {
                Some(raw) => records::decode::<RunRecord>(&key, &raw)?.job_id == claim.id,
                None => false,
            }
        }
        Target::Item { batch_id, key, .. } => queue
            .view()
            .kv_get(&keys::item_active_key(batch_id, key))
            .await?
            .is_some_and(|job| job.as_ref() == claim.id.as_bytes()),
    })
}

/// Settle `claim`. Returns whether this settlement ended the run (and, if so,
/// told the waiters or the batch's coordinator).
pub(crate) async fn settle(
    services: &Services,
    notify: &Notify,
    metrics: &TypeMetrics,
    (claim, attempts, history): (Claim, Attempts, Vec<PastAttempt>),
    ending: Ending,
    effects: StagedEffects,
    cost: Cost,
) -> bool {
    let started = std::time::Instant::now();
    let (target, job_type) = identify(&claim);
    let run_id = target.run_id().to_string();
    let Ok(queue) = services.queue() else {
        warn!(%run_id, "engine shut down before settlement; the job is redelivered on the next open");
        return false;
    };
    let is_job = matches!(target, Target::Job { .. });
    let verdict = match ending {
        Ending::Release(reason) => {
            let reason = format!("{}{reason}", keys::RELEASED_PREFIX);
            if let Err(e) = queue.nack(&claim, &reason).await {
                warn!(%run_id, error = %e, "releasing the job failed; it runs again once its lease expires");
            } else {
                metrics.attempt_ended(&job_type, !is_job, AttemptResult::Released);
                metrics.settlement(&job_type, started.elapsed().as_secs_f64());
            }
            return false;
        }
        Ending::Verdict(v) => v,
    };
    let end = match verdict {
        _ if claim.cancel_token().is_cancelled() => End::Cancelled,
        Verdict::Succeeded(output) => End::Succeeded(OutputRef::Inline(output)),
        Verdict::Failed { kind, message }
            if kind == FailureKind::Permanent || attempts.is_last() =>
        {
            End::Failed { kind, message }
        }
        Verdict::Failed { kind, message } => {
            // A retry. It is announced before the nack: once the nack commits,
            // the next attempt may run (and end) before this task resumes, and
            // a job's events must arrive in attempt order.
            if is_job {
                services.emit(EngineEvent::JobFailed {
                    run_id: run_id.clone(),
                    job_type: job_type.clone(),
                    kind,
                    message: message.clone(),
                    retrying: true,
                });
            }
            // A failure message that reads like a release is not one.
            let message = if message.starts_with(keys::RELEASED_PREFIX) {
                format!("error: {message}")
            } else {
                message
            };
            if let Err(e) = queue.nack(&claim, &message).await {
                warn!(%run_id, error = %e, "settlement failed; the job stays claimed until its lease expires, then retries");
            } else {
                metrics.attempt_ended(&job_type, !is_job, AttemptResult::Retried);
                metrics.settlement(&job_type, started.elapsed().as_secs_f64());
            }
            return false;
        }
    };

    // A terminal transition: only for the run this job owns.
    match owns(&queue, &target, &claim).await {
        Ok(true) => {}
        Ok(false) => {
            let reason = if submitted_through_gaffer(&claim) {
                format!(
                    "queue job `{}` carries run id `{run_id}` but is not that run's live job \
                     (enqueued by hand, or a stale duplicate); ended without touching the run's \
                     records ({})",
                    claim.id,
                    end.reason()
                )
            } else {
                crate::EngineError::NotSubmittedThroughGaffer(claim.id.clone()).to_string()
            };
            warn!(%run_id, job_id = %claim.id, "{reason}");
            if let Err(e) = queue.dead_letter(&claim, &reason).await {
                warn!(%run_id, error = %e, "dead-lettering a stray job failed");
            }
            return false;
        }
        Err(e) => {
            warn!(%run_id, error = %e, "reading the run's record failed; the job stays claimed until its lease expires, then retries");
            return false;
        }
    }

    let end = match end {
        End::Succeeded(OutputRef::Inline(output)) if output.len() > INLINE_OUTPUT_MAX => {
            let path = blob_path(services, &target, &claim);
            if let Err(e) = services
                .store()
                .put(&Path::from(path.as_str()), PutPayload::from(output))
                .await
            {
                // The job stays claimed; its lease expires and it runs again.
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
        claim: &claim,
        attempts: &attempts,
        history,
        followups: followups.iter().map(|(id, _)| id.clone()).collect(),
    };
    let succeeded = matches!(end, End::Succeeded(_));
    let parts =
        terminal(services, &target, &job_type, delivery, end, &cost).and_then(|(fx, told)| {
            let fx = if succeeded {
                with_user(services, fx, kv, &followups)?
            } else {
                fx
            };
            Ok((fx, told))
        });
    let (fx, told) = match parts {
        Ok(parts) => parts,
        Err(e) => {
            warn!(%run_id, error = %e, "preparing the settlement failed (a record that does not encode, or a follow-up of a type this engine does not have); the job stays claimed until its lease expires, then retries");
            return false;
        }
    };
    // Announce the commit before it starts: until it is durable, a record read
    // from the store must not answer for this run (see the waiters).
    if is_job {
        notify.job(JobEnd::Settling(run_id.clone()));
    }
    let result = match &told {
        Told::Job(record) => match &record.outcome {
            Outcome::Succeeded(_) => queue.ack_with(&claim, fx).await,
            Outcome::Failed { message, .. } => queue.dead_letter_with(&claim, message, fx).await,
            Outcome::Cancelled => queue.dead_letter_with(&claim, "cancelled", fx).await,
        },
        Told::Item(marker) => match marker.status {
            ItemStatus::Succeeded => queue.ack_with(&claim, fx).await,
            ItemStatus::Failed => {
                let message = marker.error.as_deref().unwrap_or("failed");
                queue.dead_letter_with(&claim, message, fx).await
            }
            ItemStatus::Cancelled => queue.dead_letter_with(&claim, "cancelled", fx).await,
        },
    };
    if let Err(e) = result {
        if is_job {
            notify.job(JobEnd::Aborted(run_id.clone()));
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
    debug!(%run_id, %job_type, "run ended");
    metrics.settlement(&job_type, started.elapsed().as_secs_f64());
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
            services.emit(match &record.outcome {
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
            notify.job(JobEnd::Ended { run_id, record });
        }
        (Told::Item(marker), Target::Item { batch_id, key, .. }) => {
            notify.item(ItemEnd {
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

/// The terminal effects plus what the attempt staged (success only): its KV
/// effects, and the creation of each follow-up job (its run record and
/// first queue job), so that a follow-up exists iff its parent succeeded.
fn with_user(
    services: &Services,
    mut fx: SettlementEffects,
    kv: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    followups: &[(String, crate::jobs::SubmitRequest)],
) -> crate::Result<SettlementEffects> {
    for (key, value) in kv {
        match value {
            Some(v) => {
                fx.kv_writes.insert(key, v);
            }
            None => fx.kv_deletes.push(key),
        }
    }
    for (run_id, request) in followups {
        fx = services.creation_effects(fx, request, run_id)?;
    }
    Ok(fx)
}
