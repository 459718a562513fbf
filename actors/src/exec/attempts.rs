//! Attempts, as gaffer counts them.
//!
//! taquba counts claims: every claim of a job is an attempt, including one
//! whose process died under it, and a job out of attempts is dead-lettered by
//! the queue itself, without an outcome record. gaffer counts instead: it
//! gives the queue a limit out of reach ([`keys::QUEUE_ATTEMPTS`]), keeps the
//! job's real limit in a header ([`keys::HEADER_ATTEMPTS`]) when it is not
//! the queue's default, and reads the job's attempt history when it claims a
//! job that the queue claimed before:
//!
//! - an attempt that failed or whose lease expired counts;
//! - an attempt interrupted by a process exit does not: the job did not fail,
//!   the process died. A job under which the process keeps dying is a poison
//!   pill: interruptions closer together than `interruption_window` count as
//!   one episode, an episode is forgotten `interruption_memory` after it
//!   began, and a job claimed with `max_interruptions` episodes remembered
//!   fails permanently instead of running again;
//! - a claim given back on purpose (released at the end of a shutdown grace
//!   period, or by a paused type) does not count either.
//!
//! A real failure with attempts left, and a claim given back, put the job
//! back on its queue **under the same id** in the transaction that
//! acknowledges the claim (`settle::requeue`), after gaffer's own backoff
//! (`backoff`, on this count): taquba's nack would wait a backoff on its
//! own claim count, which interruptions and releases raise. The queue
//! forgets an acknowledged job's history, so what was counted travels in the
//! new job's [`keys::HEADER_PAST`] header (`Carried`), and a job's earlier
//! claims in its run record.
//!
//! So every job ends through gaffer, with its record: on its last real
//! attempt a transient failure dead-letters it with its failure record, and a
//! job whose last attempt's lease expired is failed with its record when it is
//! next claimed.

use taquba::{AttemptOutcome, Claim, JobAttempt};

use crate::layout::keys;
use crate::layout::records::PastAttempt;
use crate::settings::Settings;

/// Where a claimed job stands, in gaffer's count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempts {
    /// This attempt, 1-based (interruptions and releases not counted).
    pub number: u32,
    /// The job's attempt limit.
    pub limit: u32,
    /// Claims of the job ended by a process exit.
    pub interrupted: u32,
    /// Separate episodes of those interruptions still remembered (closer
    /// together than the interruption window count once; older than the
    /// interruption memory, forgotten).
    pub episodes: u32,
    /// When each remembered episode began (epoch ms, queue clock), oldest
    /// first: what a job put back on its queue carries (`gaffer.past`).
    pub(crate) episode_starts: Vec<u64>,
}

/// What to do with a claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Run it.
    Run,
    /// The process died under it too often: fail it permanently.
    Poisoned(String),
    /// Its last attempt ended without a settlement: fail it (attempts spent).
    Exhausted(String),
}

pub(crate) use crate::layout::past::{CARRIED_EPISODES, Carried};

/// What a job put back after the attempt `attempts` carries: `spent`
/// when that attempt counts (a real failure), not when it was given back.
pub(crate) fn carried_after(attempts: &Attempts, spent: bool) -> Carried {
    let skip = attempts
        .episode_starts
        .len()
        .saturating_sub(CARRIED_EPISODES);
    Carried {
        tried: attempts
            .number
            .saturating_sub(1)
            .saturating_add(u32::from(spent)),
        interrupted: attempts.interrupted,
        episodes: attempts.episode_starts[skip..].to_vec(),
    }
}

impl Attempts {
    /// A job claimed for the first time; `default_limit` is its queue's.
    pub fn first(claim: &Claim, default_limit: u32) -> Self {
        Self {
            number: 1,
            limit: limit_of(claim, default_limit),
            interrupted: 0,
            episodes: 0,
            episode_starts: Vec::new(),
        }
    }

    /// Whether a transient failure of this attempt ends the job.
    pub fn is_last(&self) -> bool {
        self.number >= self.limit
    }

    pub(crate) fn fate(&self, settings: &Settings) -> Fate {
        if self.episodes >= settings.max_interruptions {
            return Fate::Poisoned(format!(
                "the process exited while this job ran, in {} separate episodes within {:?} \
                 ({} interruptions in all): it may be what kills the process, so it is not run \
                 again (max_interruptions = {})",
                self.episodes,
                settings.interruption_memory,
                self.interrupted,
                settings.max_interruptions
            ));
        }
        if self.number > self.limit {
            return Fate::Exhausted(format!(
                "attempts exhausted: attempt {} of {} ended without a settlement (its lease \
                 expired)",
                self.limit, self.limit
            ));
        }
        Fate::Run
    }
}

/// The attempt limit of a job: its header's; or, for a job gaffer enqueued
/// without one, its queue's default (`default_limit`); or, for a job enqueued
/// by other means, the limit taquba keeps for it.
pub(crate) fn limit_of(claim: &Claim, default_limit: u32) -> u32 {
    match claim
        .headers
        .get(keys::HEADER_ATTEMPTS)
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|n| *n > 0)
    {
        Some(limit) => limit,
        None if claim.max_attempts == keys::QUEUE_ATTEMPTS => default_limit.max(1),
        None => claim.max_attempts,
    }
}

/// How interruptions are grouped and remembered (from the settings).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Episodes {
    /// Interruptions closer together than this are one episode.
    pub(crate) window_ms: u64,
    /// An episode is forgotten this long after it began.
    pub(crate) memory_ms: u64,
}

impl Episodes {
    pub(crate) fn of(settings: &Settings) -> Self {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Self {
            window_ms: ms(settings.interruption_window),
            memory_ms: ms(settings.interruption_memory),
        }
    }
}

/// Count the attempts of `claim` at `now_ms`: what its earlier queue jobs
/// counted (`carried`), then its own history (entries recorded before this
/// claim, in write order).
pub(crate) fn count(
    claim: &Claim,
    default_limit: u32,
    carried: &Carried,
    history: &[JobAttempt],
    episodes: Episodes,
    now_ms: u64,
) -> Attempts {
    // An operator's revival of this queue job restarts the count.
    let since = history
        .iter()
        .rposition(|a| a.outcome == AttemptOutcome::Requeued)
        .map(|i| i + 1);
    let fresh = Carried::default();
    let carried = if since.is_some() { &fresh } else { carried };
    let mut real = carried.tried;
    let mut interrupted = carried.interrupted;
    let mut starts = carried.episodes.clone();
    for entry in &history[since.unwrap_or(0)..] {
        match entry.outcome {
            AttemptOutcome::Interrupted => {
                interrupted = interrupted.saturating_add(1);
                if starts
                    .last()
                    .is_none_or(|at| entry.recorded_at.saturating_sub(*at) >= episodes.window_ms)
                {
                    starts.push(entry.recorded_at);
                }
            }
            AttemptOutcome::Retried
                if entry
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with(keys::RELEASED_PREFIX)) => {}
            AttemptOutcome::Retried | AttemptOutcome::LeaseExpired => real = real.saturating_add(1),
            // A terminal entry is not followed by a claim unless revived.
            AttemptOutcome::Completed | AttemptOutcome::DeadLettered | AttemptOutcome::Requeued => {
            }
        }
    }
    // Episodes older than the memory are forgotten.
    starts.retain(|at| now_ms.saturating_sub(*at) < episodes.memory_ms);
    Attempts {
        number: real.saturating_add(1),
        limit: limit_of(claim, default_limit),
        interrupted,
        episodes: u32::try_from(starts.len()).unwrap_or(u32::MAX),
        episode_starts: starts,
    }
}

/// The attempts of a claimed job, and the earlier claims of this queue job
/// (which its outcome record keeps): its history is read only when the
/// queue claimed it before (`claim.attempts > 1`); what earlier queue jobs
/// of its run counted comes with it ([`keys::HEADER_PAST`]). If the read
/// fails the job runs as if on its last attempt (never past its limit), so
/// it is neither lost nor run beyond it.
pub(crate) async fn of(
    queue: &taquba::Queue,
    claim: &Claim,
    settings: &Settings,
) -> (Attempts, Vec<PastAttempt>) {
    let default_limit = queue.queue_config(&claim.queue).max_attempts;
    let carried = Carried::of(claim);
    let now_ms = queue.clock().now_ms();
    let episodes = Episodes::of(settings);
    if claim.attempts <= 1 {
        let attempts = count(claim, default_limit, &carried, &[], episodes, now_ms);
        return (attempts, Vec::new());
    }
    match queue.view().attempt_history(&claim.id).await {
        Ok(history) => (
            count(claim, default_limit, &carried, &history, episodes, now_ms),
            PastAttempt::from_history(&history),
        ),
        Err(e) => {
            let limit = limit_of(claim, default_limit);
            tracing::warn!(job_id = %claim.id, error = %e, "reading the job's attempt history failed; running it as its last attempt");
            let attempts = Attempts {
                number: carried
                    .tried
                    .saturating_add(claim.attempts)
                    .min(limit)
                    .max(1),
                limit,
                interrupted: carried.interrupted,
                episodes: 0,
                episode_starts: Vec::new(),
            };
            (attempts, Vec::new())
        }
    }
}

/// The delay before attempt `number + 1` after attempt `number` failed:
/// the queue's backoff (`retry_backoff_base · 2^(number − 1)`, capped at
/// `retry_backoff_max`), on gaffer's count, so interruptions and releases
/// (which the queue counts as claims) never lengthen it.
pub(crate) fn backoff(config: &taquba::QueueConfig, number: u32) -> std::time::Duration {
    if config.retry_backoff_base.is_zero() {
        return std::time::Duration::ZERO;
    }
    let doublings = number.saturating_sub(1).min(31);
    config
        .retry_backoff_base
        .saturating_mul(1u32 << doublings)
        .min(config.retry_backoff_max)
}

#[cfg(test)]
mod tests;
