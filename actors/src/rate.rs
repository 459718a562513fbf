//! Rate limits per job type: attempts begin at `starts` per `period` at
//! most, with bursts of at most `burst` (default `starts`): in any window of
//! length `t`, at most `burst + t × starts / period` begin (the usual
//! token-bucket / GCRA meaning, as governor's). The type's pool owns its
//! limiter (a token bucket on tokio's clock, so paused test time drives
//! it): it claims no more jobs than it has tokens, so a throttled type's
//! backlog waits in the queue, holding no claim and no worker slot, and
//! other types (their own pools, their own queues) are not slowed.
//!
//! Why not `governor`: its limiters answer "may one more start now" and
//! cannot give back a token a claim did not use (the pool reserves as many
//! tokens as jobs it asks the queue for, and gets fewer when the queue runs
//! short); its state is lock-free shared state for many threads, which an
//! actor's own state does not need; and its clocks do not follow tokio's
//! paused time. The bucket is a few lines of arithmetic.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{EngineError, Result};

/// A rate limit: attempts of a job type begin at `starts` per `period` at
/// most, with bursts of at most [`burst`](Self::burst) (default `starts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    starts: u32,
    period: Duration,
    burst: u32,
}

impl RateLimit {
    /// At most `starts` per `period` (`InvalidConfig` if either is zero).
    pub fn new(starts: u32, period: Duration) -> Result<Self> {
        if starts == 0 || period.is_zero() {
            return Err(EngineError::InvalidConfig(format!(
                "a rate limit needs at least 1 start per non-zero period (got {starts} per {period:?})"
            )));
        }
        Ok(Self {
            starts,
            period,
            burst: starts,
        })
    }

    /// At most `burst` starts at once (default: `starts`, a period's
    /// worth); 1 spaces every start by `period / starts`. Clamped to
    /// `1..=starts`.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst.clamp(1, self.starts);
        self
    }

    /// At most `starts` per second.
    pub fn per_second(starts: u32) -> Result<Self> {
        Self::new(starts, Duration::from_secs(1))
    }

    /// At most `starts` per minute.
    pub fn per_minute(starts: u32) -> Result<Self> {
        Self::new(starts, Duration::from_secs(60))
    }

    /// Starts allowed per period.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Starts allowed at once.
    pub fn max_burst(&self) -> u32 {
        self.burst
    }
}

/// A token bucket of `burst` tokens refilled at `starts / period`, in
/// integer time (GCRA: a theoretical arrival time `tat`, each start moves
/// it one interval on, and a start is allowed while `tat` is at most
/// `burst - 1` intervals ahead of now). It starts full.
#[derive(Debug)]
pub(crate) struct Bucket {
    interval: Duration,
    tolerance: Duration,
    tat: Instant,
}

impl Bucket {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let interval = limit.period / limit.starts;
        Self {
            interval,
            tolerance: interval * (limit.burst - 1),
            tat: Instant::now(),
        }
    }

    /// Take up to `want` tokens; answers how many were taken.
    pub(crate) fn take(&mut self, want: usize) -> usize {
        let now = Instant::now();
        let mut taken = 0;
        while taken < want {
            let t = self.tat.max(now);
            if t - now > self.tolerance {
                break;
            }
            self.tat = t + self.interval;
            taken += 1;
        }
        taken
    }

    /// Give back `n` tokens taken but not used.
    pub(crate) fn give_back(&mut self, n: usize) {
        let back = self.interval * u32::try_from(n).unwrap_or(u32::MAX);
        self.tat = self.tat.checked_sub(back).unwrap_or(self.tat);
    }

    /// How long until a token is there.
    pub(crate) fn until_next(&self) -> Duration {
        let now = Instant::now();
        (self.tat.max(now) - now).saturating_sub(self.tolerance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_needs_starts_and_a_period() {
        assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
        assert!(RateLimit::new(1, Duration::ZERO).is_err());
        assert_eq!(
            RateLimit::per_minute(3).unwrap().period(),
            Duration::from_secs(60)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_starts_full_refills_at_the_rate_and_takes_back_what_was_not_used() {
        let mut b = Bucket::new(RateLimit::per_second(2).unwrap());
        assert_eq!(b.take(5), 2);
        assert_eq!(b.take(1), 0);
        assert_eq!(b.until_next(), Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(499)).await;
        assert_eq!(b.take(1), 0);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(b.take(3), 1);
        b.give_back(1);
        assert_eq!(b.take(3), 1);
        // Never more than a period's worth.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(b.take(10), 2);

        let mut spaced = Bucket::new(RateLimit::per_second(2).unwrap().burst(1));
        assert_eq!(spaced.take(2), 1);
        assert_eq!(spaced.until_next(), Duration::from_millis(500));
    }
}
