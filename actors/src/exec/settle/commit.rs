//! The commits of a settlement, each one queue transaction: the job put
//! back under its id (a retry or a release, [`requeue`]), the run ended
//! with its record or marker and what it staged ([`terminal`],
//! [`with_user`]), a stray job refused.

use taquba::{Claim, EnqueueOptions, EnqueueRequest, SettlementEffects};
use tracing::warn;

use crate::exec::attempts::Attempts;
use crate::exec::settle::decide::End;
use crate::exec::settle::standing::{Owner, Standing, Target};
use crate::exec::suspend::Pause;
use crate::layout::keys;
use crate::layout::records::{
    self, Cost, ItemMarker, ItemStatus, Outcome, OutcomeRecord, PastAttempt, RunRecord,
};
use crate::services::Services;

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

/// What a terminal commit tells, once durable.
pub(crate) enum Told {
    Job(Box<OutcomeRecord>),
    Item(Box<ItemMarker>),
}

/// The delivery a settlement ends: its claim, its attempt count, and the
/// claims of the job before it (read only for a job claimed before).
pub(crate) struct Delivery<'a> {
    pub(crate) claim: &'a Claim,
    /// The run's input hash (of its plain payload: the claim's may be
    /// sealed), from its run record.
    pub(crate) input_hash: Option<[u8; 32]>,
    pub(crate) attempts: &'a Attempts,
    pub(crate) history: Vec<PastAttempt>,
    /// The run ids of the follow-ups a success creates.
    pub(crate) followups: Vec<String>,
    /// The run's tags, from its run record (its outcome record keeps them).
    pub(crate) tags: Option<crate::layout::tags::Tags>,
}

/// The effects that end a target, and the notification to send once they commit.
pub(crate) fn terminal(
    services: &Services,
    target: &Target,
    job_type: &str,
    delivery: Delivery<'_>,
    end: End,
    cost: &Cost,
) -> crate::Result<(SettlementEffects, Told)> {
    let Delivery {
        claim,
        input_hash,
        attempts,
        history,
        followups,
        tags,
    } = delivery;
    match target {
        Target::Job { run_id } => {
            let record = OutcomeRecord {
                job_id: claim.id.clone(),
                job_type: job_type.to_string(),
                input_hash: match input_hash {
                    Some(hash) => hash,
                    None => keys::input_hash(job_type, &services.keyring().open(&claim.payload)?),
                },
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
                reason: None,
                tags,
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
                    records::encode(&marker.sealed(services.keyring())?)?,
                );
            Ok((fx, Told::Item(Box::new(marker))))
        }
    }
}

pub(crate) fn blob_path(services: &Services, target: &Target, claim: &Claim) -> String {
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

/// Why a job goes back on its queue.
#[derive(Debug)]
pub(crate) enum Back {
    /// A real failure with attempts left: after gaffer's backoff, the
    /// attempt spent.
    Retry,
    /// Given back on purpose: at once, no attempt spent.
    Release,
    /// Paused: to wait for a signal (scheduled at the wait's deadline and
    /// promoted by the signal), to sleep or snoozed (scheduled at its
    /// end); no attempt spent.
    Pause(crate::exec::suspend::Pause),
}

/// Put a claimed job back on its queue as the same queue job (same id, so
/// its run's record still names it), in the one transaction that
/// acknowledges its claim: after gaffer's backoff on its own count when the
/// attempt failed (`spent`), at once when it was given back. What gaffer
/// counted travels in the job's `gaffer.past` header; a job's earlier claims
/// (this one included: `how`, `error`) in its run record, rewritten in the
/// same transaction.
pub(crate) async fn requeue(
    services: &Services,
    queue: &taquba::Queue,
    claimed: &Claimed,
    owner: &Owner,
    back: Back,
    (how, error): (&str, &str),
) -> crate::Result<()> {
    let spent = matches!(back, Back::Retry);
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
        crate::exec::attempts::carried_after(attempts, spent).encode(),
    );
    let delay = if spent {
        crate::exec::attempts::backoff(queue.queue_config(&claim.queue), attempts.number)
    } else {
        std::time::Duration::ZERO
    };
    let at = |ms: u64| std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    let (run_at, waits) = match &back {
        // A wait is a scheduled job that a signal promotes (taquba's
        // `signal_wait`), or its deadline does; a sleep or a snooze is a
        // scheduled job its time promotes.
        Back::Pause(pause) => (
            Some(at(pause.until_ms().max(now))),
            matches!(pause, Pause::Signal(_)),
        ),
        _ => ((!delay.is_zero()).then(|| at(now) + delay), false),
    };
    let mut fx = SettlementEffects::default().enqueue(EnqueueRequest {
        queue: claim.queue.to_string(),
        // Written again under the engine's newest key.
        payload: services.keyring().renewed(claim.payload.clone())?,
        options: EnqueueOptions::default()
            .id_override(claim.id.clone())
            .headers(headers)
            .priority(claim.priority)
            .max_attempts(claim.max_attempts)
            .run_at(run_at)
            .signal_wait(waits),
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
        // A retry or a release keeps the deadline of the run's wait, so a
        // wait on the same signal after it keeps its timeout; every pause
        // keeps what the others wrote (a sleep done stays done).
        let mut run = RunRecord {
            past: past.split_off(skip),
            ..(**run).clone()
        };
        match back {
            Back::Pause(Pause::Signal(wait)) => run.wait = Some(wait),
            Back::Pause(Pause::Sleep(sleep)) => run.sleep = Some(sleep),
            Back::Pause(Pause::Snooze { .. }) => run.snoozes = run.snoozes.saturating_add(1),
            Back::Retry | Back::Release => {}
        }
        fx = fx.kv_put(
            keys::run_key(run_id),
            records::encode(&run.sealed(services.keyring())?)?,
        );
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
                Back::Release,
                ("released", &reason),
            )
            .await
        }
        _ => Ok(queue.nack(&claimed.claim, &reason).await?),
    }
}

/// Dead-letter a job gaffer does not run, with `reason`, touching no run's
/// records.
pub(crate) async fn refuse(queue: &taquba::Queue, claim: &Claim, reason: &str) {
    warn!(job_id = %claim.id, "{reason}");
    if let Err(e) = queue.dead_letter(claim, reason).await {
        warn!(job_id = %claim.id, error = %e, "dead-lettering a stray job failed; it is refused again at its next claim");
    }
}

/// The terminal effects plus what the attempt staged (success only): its KV
/// effects, and the creation of each follow-up job (its run record and
/// first queue job), so that a follow-up exists iff its parent succeeded.
pub(crate) fn with_user(
    services: &Services,
    mut fx: SettlementEffects,
    kv: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    followups: &[(String, crate::jobs::submit::SubmitRequest)],
) -> crate::Result<SettlementEffects> {
    for (key, value) in kv {
        match value {
            Some(v) => {
                fx.kv_writes.insert(key, services.keyring().seal_vec(v)?);
            }
            None => fx.kv_deletes.push(key),
        }
    }
    for (run_id, request) in followups {
        fx = services.creation_effects(fx, request, run_id)?;
    }
    Ok(fx)
}
