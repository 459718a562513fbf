//! Attempts, as gaffer counts them.
//!
//! taquba counts claims: every claim of a job is an attempt, including one
//! whose process died under it, and a job out of attempts is dead-lettered by
//! the queue itself, without an outcome record. gaffer counts instead: it
//! gives the queue a limit out of reach ([`keys::QUEUE_ATTEMPTS`]), keeps the
//! job's real limit in a header ([`keys::HEADER_ATTEMPTS`]) when it is not
//! the queue's default, and reads the job's attempt history when it claims a
//! job that was claimed before:
//!
//! - an attempt that failed (a nack) or whose lease expired counts;
//! - an attempt interrupted by a process exit does not: the job did not fail,
//!   the process died. A job under which the process keeps dying is a poison
//!   pill: interruptions closer together than `interruption_window` count as
//!   one episode, and after `max_interruptions` episodes the job fails
//!   permanently instead of running again;
//! - a claim given back on purpose (released at the end of a shutdown grace
//!   period, or by a paused type) does not count either: its nack error starts
//!   with [`keys::RELEASED_PREFIX`].
//!
//! So every job ends through gaffer, with its record: on its last real
//! attempt a transient failure dead-letters it with its failure record, and a
//! job whose last attempt's lease expired is failed with its record when it is
//! next claimed.

use taquba::{AttemptOutcome, Claim, JobAttempt};

use crate::keys;
use crate::records::PastAttempt;
use crate::settings::Settings;

/// Where a claimed job stands, in gaffer's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// This attempt, 1-based (interruptions and releases not counted).
    pub number: u32,
    /// The job's attempt limit.
    pub limit: u32,
    /// Claims of the job ended by a process exit.
    pub interrupted: u32,
    /// Separate episodes of those interruptions (closer together than the
    /// interruption window count once).
    pub episodes: u32,
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

impl Attempts {
    /// A job claimed for the first time; `default_limit` is its queue's.
    pub fn first(claim: &Claim, default_limit: u32) -> Self {
        Self {
            number: 1,
            limit: limit_of(claim, default_limit),
            interrupted: 0,
            episodes: 0,
        }
    }

    /// Whether a transient failure of this attempt ends the job.
    pub fn is_last(&self) -> bool {
        self.number >= self.limit
    }

    pub(crate) fn fate(&self, settings: &Settings) -> Fate {
        if self.episodes >= settings.max_interruptions {
            return Fate::Poisoned(format!(
                "the process exited while this job ran, in {} separate episodes ({} \
                 interruptions): it may be what kills the process, so it is not run again \
                 (max_interruptions = {})",
                self.episodes, self.interrupted, settings.max_interruptions
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
pub fn limit_of(claim: &Claim, default_limit: u32) -> u32 {
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

/// Count the attempts of `claim` from its history (entries recorded before
/// this claim, in write order).
pub fn count(
    claim: &Claim,
    default_limit: u32,
    history: &[JobAttempt],
    window_ms: u64,
) -> Attempts {
    // An operator's revival restarts the count.
    let since = history
        .iter()
        .rposition(|a| a.outcome == AttemptOutcome::Requeued)
        .map_or(0, |i| i + 1);
    let mut real = 0u32;
    let mut interrupted = 0u32;
    let mut episodes = 0u32;
    let mut episode_start: Option<u64> = None;
    for entry in &history[since..] {
        match entry.outcome {
            AttemptOutcome::Interrupted => {
                interrupted += 1;
                if episode_start.is_none_or(|at| entry.recorded_at.saturating_sub(at) >= window_ms)
                {
                    episodes += 1;
                    episode_start = Some(entry.recorded_at);
                }
            }
            AttemptOutcome::Retried
                if entry
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with(keys::RELEASED_PREFIX)) => {}
            AttemptOutcome::Retried | AttemptOutcome::LeaseExpired => real += 1,
            // A terminal entry is not followed by a claim unless revived.
            AttemptOutcome::Completed | AttemptOutcome::DeadLettered | AttemptOutcome::Requeued => {
            }
        }
    }
    Attempts {
        number: real.saturating_add(1),
        limit: limit_of(claim, default_limit),
        interrupted,
        episodes,
    }
}

/// The attempts of a claimed job, and its earlier claims (which its
/// outcome record keeps): no read for a first claim; otherwise its history
/// is read. If that read fails the job runs as if on its last attempt (never
/// past its limit), so it is neither lost nor run beyond it.
pub(crate) async fn of(
    queue: &taquba::Queue,
    claim: &Claim,
    settings: &Settings,
) -> (Attempts, Vec<PastAttempt>) {
    let default_limit = queue.queue_config(&claim.queue).max_attempts;
    if claim.attempts <= 1 {
        return (Attempts::first(claim, default_limit), Vec::new());
    }
    let window_ms = u64::try_from(settings.interruption_window.as_millis()).unwrap_or(u64::MAX);
    match queue.view().attempt_history(&claim.id).await {
        Ok(history) => (
            count(claim, default_limit, &history, window_ms),
            PastAttempt::from_history(&history),
        ),
        Err(e) => {
            let limit = limit_of(claim, default_limit);
            tracing::warn!(job_id = %claim.id, error = %e, "reading the job's attempt history failed; running it as its last attempt");
            let attempts = Attempts {
                number: claim.attempts.min(limit).max(1),
                limit,
                interrupted: 0,
                episodes: 0,
            };
            (attempts, Vec::new())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn entry(outcome: AttemptOutcome, at: u64, error: Option<&str>) -> JobAttempt {
        JobAttempt {
            attempt: 0,
            claimed_at: None,
            recorded_at: at,
            outcome,
            error: error.map(str::to_string),
        }
    }

    /// A claimed job enqueued as gaffer does (queue limit out of reach), with
    /// `limit` in its header if given.
    async fn a_claim(limit: Option<&str>) -> (taquba::Queue, Claim) {
        let store = std::sync::Arc::new(taquba::object_store::memory::InMemory::new());
        let queue = taquba::Queue::open(store, "q").await.unwrap();
        let mut headers = std::collections::HashMap::new();
        if let Some(l) = limit {
            headers.insert(keys::HEADER_ATTEMPTS.to_string(), l.to_string());
        }
        queue
            .enqueue_with(
                "w",
                b"x".to_vec(),
                taquba::EnqueueOptions::default()
                    .headers(headers)
                    .max_attempts(keys::QUEUE_ATTEMPTS),
            )
            .await
            .unwrap();
        let claim = queue
            .claim("w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        (queue, claim)
    }

    #[tokio::test]
    async fn interruptions_and_releases_are_free_failures_and_expiries_count() {
        let (queue, claim) = a_claim(Some("3")).await;
        use AttemptOutcome::*;
        let history = [
            entry(Interrupted, 1_000, None),
            entry(Retried, 2_000, Some("boom")),
            entry(Retried, 3_000, Some("gaffer-released: grace over")),
            entry(Interrupted, 200_000, None),
            entry(LeaseExpired, 300_000, None),
        ];
        let a = count(&claim, 7, &history, 60_000);
        assert_eq!(
            a,
            Attempts {
                number: 3,
                limit: 3,
                interrupted: 2,
                episodes: 2
            }
        );
        assert!(a.is_last());
        assert_eq!(a.fate(&Settings::default()), Fate::Run);
        queue.close().await.unwrap();
    }

    #[tokio::test]
    async fn interruptions_within_a_window_are_one_episode_and_enough_episodes_poison() {
        let (queue, claim) = a_claim(None).await;
        use AttemptOutcome::*;
        // Fifty kills in a minute: one episode.
        let burst: Vec<_> = (0..50)
            .map(|i| entry(Interrupted, i * 1_000, None))
            .collect();
        let a = count(&claim, 7, &burst, 60_000);
        assert_eq!(
            (a.number, a.limit, a.interrupted, a.episodes),
            (1, 7, 50, 1)
        );
        assert_eq!(a.fate(&Settings::default()), Fate::Run);
        // Three episodes a minute or more apart: a poison pill.
        let spread: Vec<_> = (0..3)
            .map(|i| entry(Interrupted, i * 60_000, None))
            .collect();
        let a = count(&claim, 7, &spread, 60_000);
        assert_eq!(a.episodes, 3);
        assert!(
            matches!(a.fate(&Settings::default()), Fate::Poisoned(m) if m.contains("3 separate episodes"))
        );
        queue.close().await.unwrap();
    }

    #[tokio::test]
    async fn the_limit_is_the_header_then_the_queue_default_then_the_records() {
        let (queue, with_header) = a_claim(Some("5")).await;
        assert_eq!(limit_of(&with_header, 3), 5);
        let (queue2, default) = a_claim(None).await;
        assert_eq!(limit_of(&default, 3), 3, "a gaffer job without a header");
        // A job enqueued by other means keeps the limit taquba holds for it.
        queue2
            .enqueue_with(
                "v",
                b"y".to_vec(),
                taquba::EnqueueOptions::default().max_attempts(4),
            )
            .await
            .unwrap();
        let foreign = queue2
            .claim("v", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(limit_of(&foreign, 3), 4);
        queue.close().await.unwrap();
        queue2.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_revival_restarts_the_count_and_spent_attempts_exhaust() {
        let (queue, claim) = a_claim(Some("2")).await;
        use AttemptOutcome::*;
        let history = [
            entry(Retried, 1, Some("a")),
            entry(DeadLettered, 2, Some("b")),
            entry(Requeued, 3, None),
            entry(LeaseExpired, 4, None),
            entry(LeaseExpired, 5, None),
        ];
        let a = count(&claim, 7, &history, 60_000);
        assert_eq!((a.number, a.limit), (3, 2));
        assert!(matches!(a.fate(&Settings::default()), Fate::Exhausted(_)));
        queue.close().await.unwrap();
    }
}
