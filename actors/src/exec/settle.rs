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
//! the job back on its queue under the same id ([`requeue`]): one
//! transaction acknowledges the claim and enqueues it again, after gaffer's
//! own backoff.

use ractor::DerivedActorRef;
use taquba::object_store::ObjectStoreExt;
use taquba::object_store::PutPayload;
use taquba::object_store::path::Path;
use taquba::{Claim, EnqueueOptions, EnqueueRequest, SettlementEffects};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::erased::Verdict;
use crate::events::EngineEvent;
use crate::exec::attempts::{Attempts, Carried};
use crate::exec::effects::StagedEffects;
use crate::layout::keys;
use crate::layout::records::{
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

/// The target and type name a claimed job carries in its headers, or why it
/// carries none gaffer could run: a job carries its run id, an item its
/// batch and key (its run id follows from them; items enqueued before the
/// header was dropped carry `gaffer.run` too). A header that is not a valid
/// id is an error, never replaced by the queue job's id.
pub(crate) fn identify(claim: &Claim) -> std::result::Result<(Target, String), String> {
    let h = &claim.headers;
    let run_id = match h.get(keys::HEADER_RUN) {
        Some(r) if keys::is_valid_id(r) => Some(r.clone()),
        Some(r) => {
            return Err(format!(
                "queue job `{}` carries an invalid run id `{}`; not run",
                claim.id,
                r.escape_debug()
            ));
        }
        None => None,
    };
    let job_type = h.get(keys::HEADER_TYPE).cloned().unwrap_or_default();
    let target = match (h.get(keys::HEADER_BATCH), h.get(keys::HEADER_KEY)) {
        (Some(batch_id), Some(_)) if !keys::is_valid_id(batch_id) => {
            return Err(format!(
                "queue job `{}` carries an invalid batch id `{}`; not run",
                claim.id,
                batch_id.escape_debug()
            ));
        }
        (Some(batch_id), Some(key)) => Target::Item {
            run_id: run_id.unwrap_or_else(|| keys::item_run_id(batch_id, key)),
            batch_id: batch_id.clone(),
            key: key.clone(),
        },
        _ => match run_id {
            Some(run_id) => Target::Job { run_id },
            None => {
                return Err(
                    crate::EngineError::NotSubmittedThroughGaffer(claim.id.clone()).to_string(),
                );
            }
        },
    };
    Ok((target, job_type))
}

/// What a claimed job is to gaffer, read when it is claimed.
#[derive(Debug)]
pub(crate) enum Standing {
    /// The live job of its run: run it.
    Owner(Owner),
    /// Not a job gaffer runs (no run id, an invalid one, or a run whose
    /// record names another queue job or is gone): dead-lettered at once with
    /// this reason, touching no run's records, the user's code never run.
    Stray(String),
    /// The read failed (the store): give the claim back, to be claimed again.
    Unread(String),
}

/// The run a claimed job owns.
#[derive(Debug)]
pub(crate) struct Owner {
    pub(crate) target: Target,
    pub(crate) job_type: String,
    /// A job's run record, as read at the claim (an item has none).
    pub(crate) run: Option<Box<RunRecord>>,
}

/// Whether `claim` is the live job of the run it names: its run record (a
/// job) or its active record (an item) holds the claim's id. One read.
pub(crate) async fn standing(queue: &taquba::Queue, claim: &Claim) -> Standing {
    let (target, job_type) = match identify(claim) {
        Ok(found) => found,
        Err(reason) => return Standing::Stray(reason),
    };
    let stray = |target: &Target| {
        Standing::Stray(format!(
            "queue job `{}` carries run id `{}` but is not that run's live job (enqueued by \
             hand, or a stale duplicate); not run, and the run's records are untouched",
            claim.id,
            target.run_id()
        ))
    };
    match &target {
        Target::Job { run_id } => {
            let key = keys::run_key(run_id);
            match queue.view().kv_get(&key).await {
                Ok(Some(raw)) => match records::decode::<RunRecord>(&key, &raw) {
                    Ok(run) if run.job_id == claim.id => Standing::Owner(Owner {
                        target,
                        job_type,
                        run: Some(Box::new(run)),
                    }),
                    Ok(_) => stray(&target),
                    Err(e) => Standing::Stray(format!(
                        "queue job `{}`: its run's record does not decode ({e}); not run",
                        claim.id
                    )),
                },
                Ok(None) => stray(&target),
                Err(e) => Standing::Unread(e.to_string()),
            }
        }
        Target::Item { batch_id, key, .. } => {
            match queue
                .view()
                .kv_get(&keys::item_active_key(batch_id, key))
                .await
            {
                Ok(Some(job)) if job.as_ref() == claim.id.as_bytes() => Standing::Owner(Owner {
                    target,
                    job_type,
                    run: None,
                }),
                Ok(_) => stray(&target),
                Err(e) => Standing::Unread(e.to_string()),
            }
        }
    }
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

/// How a delivery ends.
#[derive(Debug)]
pub(crate) enum Ending {
    /// The handler's verdict (or the engine's, for a job it did not run).
    Verdict(Verdict),
    /// Give the claim back without spending an attempt (shutdown grace over,
    /// paused type): the job runs again later.
    Release(String),
    /// A job gaffer does not run ([`Standing::Stray`]): dead-letter it with
    /// this reason, touching no run's records.
    Refuse(String),
}

/// How the run ended, before it is written as a record or marker.
enum End {
    Succeeded(OutputRef),
    Failed { kind: FailureKind, message: String },
    Cancelled,
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

/// A claimed job on its way to its settlement: its claim, gaffer's count of
/// its attempts, the run's earlier claims (for its outcome record), and what
/// it is to gaffer (read at the claim).
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) claim: Claim,
    pub(crate) attempts: Attempts,
    pub(crate) history: Vec<PastAttempt>,
    pub(crate) standing: Standing,
}

/// Past claims a run record keeps at most (the newest), and the longest
/// error kept with each: a run that keeps failing cannot grow its record
/// past the KV cap.
const PAST_KEPT: usize = 64;
const PAST_ERROR_MAX: usize = 2048;

/// Put a claimed job back on its queue as the same queue job (same id, so
/// its run's record still names it), in the one transaction that
/// acknowledges its claim: after gaffer's backoff on its own count when the
/// attempt failed (`spent`), at once when it was given back. What gaffer
/// counted travels in the job's `gaffer.past` header; a job's earlier claims
/// (this one included: `how`, `error`) in its run record, rewritten in the
/// same transaction.
async fn requeue(
    services: &Services,
    queue: &taquba::Queue,
    claimed: &Claimed,
    owner: &Owner,
    spent: bool,
    (how, error): (&str, &str),
) -> crate::Result<()> {
    let Claimed {
        claim,
        attempts,
        history,
        ..
    } = claimed;
    let now = services.clock().now_ms();
    let mut headers = claim.headers.clone();
    headers.insert(
        keys::HEADER_PAST.into(),
        Carried::after(attempts, spent).encode(),
    );
    let delay = if spent {
        crate::exec::attempts::backoff(queue.queue_config(&claim.queue), attempts.number)
    } else {
        std::time::Duration::ZERO
    };
    let run_at = (!delay.is_zero())
        .then(|| std::time::UNIX_EPOCH + std::time::Duration::from_millis(now) + delay);
    let mut fx = SettlementEffects::default().enqueue(EnqueueRequest {
        queue: claim.queue.to_string(),
        payload: claim.payload.clone(),
        options: EnqueueOptions::default()
            .id_override(claim.id.clone())
            .headers(headers)
            .priority(claim.priority)
            .max_attempts(claim.max_attempts)
            .run_at(run_at),
    });
    if let (Target::Job { run_id }, Some(run)) = (&owner.target, &owner.run) {
        let mut error = error.to_string();
        if error.len() > PAST_ERROR_MAX {
            let mut cut = PAST_ERROR_MAX;
            while !error.is_char_boundary(cut) {
                cut -= 1;
            }
            error.truncate(cut);
            error.push('…');
        }
        let mut past = history.clone();
        past.push(PastAttempt {
            claim: past.last().map_or(0, |a| a.claim).saturating_add(1),
            claimed_at_ms: claim.claimed_at,
            ended_at_ms: now,
            how: how.to_string(),
            error: (!error.is_empty()).then_some(error),
        });
        let skip = past.len().saturating_sub(PAST_KEPT);
        let run = RunRecord {
            past: past.split_off(skip),
            ..(**run).clone()
        };
        fx = fx.kv_put(keys::run_key(run_id), records::encode(&run)?);
    }
    queue.ack_with(claim, fx).await?;
    Ok(())
}

/// Give a claimed job back without spending an attempt (`why`: logged and
/// kept in its history): the same queue job again at once for the run it
/// owns; any other claim as the queue gives claims back.
pub(crate) async fn give_back(
    services: &Services,
    claimed: Claimed,
    why: &str,
) -> crate::Result<()> {
    let queue = services.queue()?;
    let reason = format!("{}{why}", keys::RELEASED_PREFIX);
    match &claimed.standing {
        Standing::Owner(owner) => {
            requeue(
                services,
                &queue,
                &claimed,
                owner,
                false,
                ("released", &reason),
            )
            .await
        }
        _ => Ok(queue.nack(&claimed.claim, &reason).await?),
    }
}

/// Settle a claimed job. Returns whether this settlement ended the run (and,
/// if so, told the waiters or the batch's coordinator).
pub(crate) async fn settle(
    services: &Services,
    notify: &Notify,
    metrics: &TypeMetrics,
    claimed: Claimed,
    ending: Ending,
    effects: StagedEffects,
    cost: Cost,
) -> bool {
    let started = std::time::Instant::now();
    let Ok(queue) = services.queue() else {
        warn!(job_id = %claimed.claim.id, "engine shut down before settlement; the job is redelivered on the next open");
        return false;
    };
    let verdict = match ending {
        Ending::Verdict(v) => v,
        Ending::Release(reason) => {
            let (job_type, item) = match &claimed.standing {
                Standing::Owner(o) => (o.job_type.clone(), !matches!(o.target, Target::Job { .. })),
                _ => (String::new(), false),
            };
            let job_id = claimed.claim.id.clone();
            match give_back(services, claimed, &reason).await {
                Ok(()) => {
                    metrics.attempt_ended(&job_type, item, AttemptResult::Released);
                    metrics.settlement(&job_type, started.elapsed().as_secs_f64());
                }
                Err(e) => {
                    warn!(%job_id, error = %e, "releasing the job failed; it runs again once its lease expires");
                }
            }
            return false;
        }
        Ending::Refuse(reason) => {
            refuse(&queue, &claimed.claim, &reason).await;
            return false;
        }
    };
    let owner = match &claimed.standing {
        Standing::Owner(owner) => owner,
        Standing::Stray(reason) => {
            refuse(&queue, &claimed.claim, reason).await;
            return false;
        }
        Standing::Unread(error) => {
            // Not known to be its run's job: given back, and read again at
            // its next claim.
            let why = format!("reading its run's record failed: {error}");
            if let Err(e) = give_back(services, claimed, &why).await {
                warn!(error = %e, "giving the job back failed; it runs again once its lease expires");
            }
            return false;
        }
    };
    let Claimed {
        claim,
        attempts,
        history,
        ..
    } = &claimed;
    let target = &owner.target;
    let job_type = owner.job_type.clone();
    let run_id = target.run_id().to_string();
    let is_job = matches!(target, Target::Job { .. });
    let end = match verdict {
        _ if claim.cancel_token().is_cancelled() => End::Cancelled,
        Verdict::Succeeded(output) => End::Succeeded(OutputRef::Inline(output)),
        Verdict::Failed { kind, message }
            if kind == FailureKind::Permanent || attempts.is_last() =>
        {
            End::Failed { kind, message }
        }
        Verdict::Failed { kind, message } => {
            // A retry. It is announced before the commit: once it commits,
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
            match requeue(
                services,
                &queue,
                &claimed,
                owner,
                true,
                ("failed", &message),
            )
            .await
            {
                Ok(()) => {
                    metrics.attempt_ended(&job_type, !is_job, AttemptResult::Retried);
                    metrics.settlement(&job_type, started.elapsed().as_secs_f64());
                    // A cancel that came while the retry committed asked the
                    // queue job this settlement ended: ask its successor.
                    if is_job
                        && claim.cancel_token().is_cancelled()
                        && let Err(e) = services.cancel(&run_id).await
                    {
                        warn!(%run_id, error = %e, "cancelling the retried job failed");
                    }
                }
                Err(e) => {
                    warn!(%run_id, error = %e, "settlement failed; the job stays claimed until its lease expires, then retries");
                }
            }
            return false;
        }
    };

    let end = match end {
        End::Succeeded(OutputRef::Inline(output)) if output.len() > INLINE_OUTPUT_MAX => {
            let path = blob_path(services, target, claim);
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
        claim,
        attempts,
        history: history.clone(),
        followups: followups.iter().map(|(id, _)| id.clone()).collect(),
    };
    let succeeded = matches!(end, End::Succeeded(_));
    let parts =
        terminal(services, target, &job_type, delivery, end, &cost).and_then(|(fx, told)| {
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
            Outcome::Succeeded(_) => queue.ack_with(claim, fx).await,
            Outcome::Failed { message, .. } => queue.dead_letter_with(claim, message, fx).await,
            Outcome::Cancelled => queue.dead_letter_with(claim, "cancelled", fx).await,
        },
        Told::Item(marker) => match marker.status {
            ItemStatus::Succeeded => queue.ack_with(claim, fx).await,
            ItemStatus::Failed => {
                let message = marker.error.as_deref().unwrap_or("failed");
                queue.dead_letter_with(claim, message, fx).await
            }
            ItemStatus::Cancelled => queue.dead_letter_with(claim, "cancelled", fx).await,
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
                batch_id: batch_id.clone(),
                key: key.clone(),
                job_id: claim.id.clone(),
                marker,
            });
        }
        _ => {}
    }
    true
}

/// Dead-letter a job gaffer does not run, with `reason`, touching no run's
/// records.
async fn refuse(queue: &taquba::Queue, claim: &Claim, reason: &str) {
    warn!(job_id = %claim.id, "{reason}");
    if let Err(e) = queue.dead_letter(claim, reason).await {
        warn!(job_id = %claim.id, error = %e, "dead-lettering a stray job failed; it is refused again at its next claim");
    }
}

/// The terminal effects plus what the attempt staged (success only): its KV
/// effects, and the creation of each follow-up job (its run record and
/// first queue job), so that a follow-up exists iff its parent succeeded.
fn with_user(
    services: &Services,
    mut fx: SettlementEffects,
    kv: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    followups: &[(String, crate::jobs::submit::SubmitRequest)],
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
