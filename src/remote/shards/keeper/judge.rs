//! The ownership decision of a down shard's keeper, pure: what a look at
//! the store saw, and whether the keeper reopens the shard, waits, or gives
//! up ([`judge`]), with the supervision settings it decides by.

use std::time::Duration;

use gaffer_actors::EngineError;
use tokio::time::Instant;

use crate::error::Result;

/// How a shard's keeper supervises it (set on
/// [`ShardedEngineBuilder`](super::ShardedEngineBuilder)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Supervision {
    /// First delay before a stopped shard is looked at (and reopened, if
    /// it is still this process's); doubles with each stop or failed
    /// reopen in a row.
    pub(crate) backoff_base: Duration,
    /// Longest such delay.
    pub(crate) backoff_max: Duration,
    /// How often a held shard's store is looked at (and the reader's
    /// manifest poll).
    pub(crate) probe_interval: Duration,
    /// Beat intervals without a new beat after which the writer that holds
    /// the store counts as gone.
    pub(crate) stale_beats: u32,
    /// An engine that stayed up this long starts the count of stops in a
    /// row again.
    pub(crate) reset_after: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            probe_interval: Duration::from_secs(2),
            stale_beats: 3,
            reset_after: Duration::from_secs(60),
        }
    }
}

impl Supervision {
    /// The delay before the look after the `n`th stop or failure in a row
    /// (1-based): `base·2^(n−1)`, capped.
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        let doubled = self
            .backoff_base
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)));
        doubled.min(self.backoff_max)
    }

    /// How long a writer beating every `interval` (`None`: one without a
    /// beat of its own, judged by gaffer's default beat) may be silent
    /// before it counts as gone: `stale_beats` intervals, plus two probe
    /// intervals for the reader's lag.
    pub(crate) fn window(&self, interval: Option<Duration>) -> Duration {
        let beat = interval.unwrap_or(crate::builder::LIVENESS_HEARTBEAT);
        beat.saturating_mul(self.stale_beats)
            .saturating_add(self.probe_interval.saturating_mul(2))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(EngineError::InvalidConfig(what.to_string()));
        if self.backoff_base.is_zero() || self.backoff_max < self.backoff_base {
            return bad("a shard's reopen backoff needs 0 < base <= max");
        }
        if self.probe_interval.is_zero() {
            return bad("a shard's probe interval must be above zero");
        }
        if self.stale_beats == 0 {
            return bad("a writer counts as gone after at least 1 missed beat");
        }
        Ok(())
    }
}

/// The latest liveness beat in the store, as a look saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Beat {
    pub(crate) counter: u64,
    pub(crate) writer_epoch: u64,
    pub(crate) interval: Duration,
    pub(crate) closed: bool,
}

/// What one look at a down shard's store saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sight {
    /// The manifest's writer epoch: the last writer to open the store.
    pub(crate) writer_epoch: u64,
    /// The latest beat (of whichever writer wrote it).
    pub(crate) beat: Option<Beat>,
    /// The store's durable sequence number (advances with every commit).
    pub(crate) durable_seq: u64,
}

/// The last sign of life of the writer that holds the store, and since
/// when the keeper has seen nothing newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    epoch: u64,
    /// Its beat counter, or the durable sequence for a writer without beats.
    mark: u64,
    since: Instant,
}

/// What the keeper of a down shard does after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No writer opened the store after this process's engine: reopen.
    Ours,
    /// The writer that took the store closed it cleanly: reopen.
    Released { epoch: u64 },
    /// The writer that took the store showed no sign of life for `silent`:
    /// it is gone; reopen.
    Stale { epoch: u64, silent: Duration },
    /// The writer that took the store is alive (or not yet silent long
    /// enough): wait and look again.
    Held { epoch: u64 },
}

/// The ownership decision. `ours` is the writer epoch this process's last
/// engine opened the store at (`None` if it could not be read: then only
/// the store's liveness decides, which is slower after a crash but never
/// fences a live writer); `last` what the previous look remembered.
/// Answers the verdict and what to remember for the next look.
pub(crate) fn judge(
    ours: Option<u64>,
    sight: &Sight,
    last: Option<Seen>,
    now: Instant,
    supervision: &Supervision,
) -> (Verdict, Option<Seen>) {
    if let Some(ours) = ours
        && sight.writer_epoch <= ours
    {
        return (Verdict::Ours, None);
    }
    let epoch = sight.writer_epoch;
    // The holder's own beat; an older epoch's beat says nothing of it.
    let beat = sight.beat.filter(|b| b.writer_epoch == epoch);
    if beat.is_some_and(|b| b.closed) {
        return (Verdict::Released { epoch }, None);
    }
    let mark = beat.map_or(sight.durable_seq, |b| b.counter);
    let seen = match last {
        Some(s) if s.epoch == epoch && s.mark == mark => s,
        _ => Seen {
            epoch,
            mark,
            since: now,
        },
    };
    let silent = now.saturating_duration_since(seen.since);
    if silent >= supervision.window(beat.map(|b| b.interval)) {
        (Verdict::Stale { epoch, silent }, None)
    } else {
        (Verdict::Held { epoch }, Some(seen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sup() -> Supervision {
        Supervision {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            probe_interval: Duration::from_millis(50),
            stale_beats: 3,
            reset_after: Duration::from_secs(60),
        }
    }

    fn beat(counter: u64, writer_epoch: u64, closed: bool) -> Option<Beat> {
        Some(Beat {
            counter,
            writer_epoch,
            interval: Duration::from_millis(200),
            closed,
        })
    }

    fn sight(writer_epoch: u64, beat: Option<Beat>, durable_seq: u64) -> Sight {
        Sight {
            writer_epoch,
            beat,
            durable_seq,
        }
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_and_the_window_counts_beats_and_lag() {
        let s = sup();
        let ms = Duration::from_millis;
        assert_eq!(s.backoff(1), ms(100));
        assert_eq!(s.backoff(2), ms(200));
        assert_eq!(s.backoff(4), ms(800));
        assert_eq!(s.backoff(5), ms(1000));
        assert_eq!(s.backoff(200), ms(1000));
        // 3 beats of 200 ms, plus two probes of 50 ms.
        assert_eq!(s.window(Some(ms(200))), ms(700));
        // A writer without a beat is judged by gaffer's default beat.
        assert_eq!(
            s.window(None),
            crate::builder::LIVENESS_HEARTBEAT * 3 + ms(100)
        );
        assert!(s.validate().is_ok());
        assert!(
            Supervision {
                stale_beats: 0,
                ..sup()
            }
            .validate()
            .is_err()
        );
        assert!(
            Supervision {
                backoff_max: ms(10),
                ..sup()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn a_store_no_one_opened_since_is_retaken_at_once() {
        let now = Instant::now();
        // The epoch is still ours: the engine crashed (its own beat, or
        // none, or a later one of ours: all the same).
        for b in [None, beat(7, 4, false), beat(7, 4, true)] {
            let (v, seen) = judge(Some(4), &sight(4, b, 10), None, now, &sup());
            assert_eq!(v, Verdict::Ours);
            assert_eq!(seen, None);
        }
    }

    #[test]
    fn a_live_writer_is_never_retaken_from_and_a_silent_one_is() {
        let s = sup();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Epoch 5 opened the store after ours (4): a fence. Its beats go on.
        let mut last = None;
        for i in 0..50 {
            let now = t0 + ms(100) * i;
            let (v, seen) = judge(
                Some(4),
                &sight(5, beat(i.into(), 5, false), 0),
                last,
                now,
                &s,
            );
            assert_eq!(v, Verdict::Held { epoch: 5 }, "look {i}");
            last = seen;
        }
        // Its beats stop at counter 49: held until the window (700 ms) has
        // passed since it was first seen, then stale.
        let stop = t0 + ms(100) * 49;
        let (v, seen) = judge(
            Some(4),
            &sight(5, beat(49, 5, false), 0),
            last,
            stop + ms(699),
            &s,
        );
        assert_eq!(v, Verdict::Held { epoch: 5 });
        let (v, _) = judge(
            Some(4),
            &sight(5, beat(49, 5, false), 0),
            seen,
            stop + ms(700),
            &s,
        );
        assert_eq!(
            v,
            Verdict::Stale {
                epoch: 5,
                silent: ms(700)
            }
        );
    }

    #[test]
    fn a_closing_beat_releases_the_store_at_once() {
        let now = Instant::now();
        let (v, _) = judge(Some(4), &sight(5, beat(9, 5, true), 0), None, now, &sup());
        assert_eq!(v, Verdict::Released { epoch: 5 });
        // An older writer's closing beat says nothing of the one that holds
        // the store now.
        let (v, _) = judge(Some(4), &sight(6, beat(9, 5, true), 0), None, now, &sup());
        assert_eq!(v, Verdict::Held { epoch: 6 });
    }

    #[test]
    fn a_writer_without_beats_is_judged_by_its_commits_and_the_default_window() {
        let s = sup();
        let t0 = Instant::now();
        let window = s.window(None);
        // Epoch 6 has written no beat (the latest is epoch 5's): its
        // commits (the durable sequence) are its sign of life.
        let (v, seen) = judge(Some(4), &sight(6, beat(3, 5, false), 100), None, t0, &s);
        assert_eq!(v, Verdict::Held { epoch: 6 });
        let (v, seen) = judge(
            Some(4),
            &sight(6, beat(3, 5, false), 101),
            seen,
            t0 + window,
            &s,
        );
        assert_eq!(v, Verdict::Held { epoch: 6 }, "a commit is a sign of life");
        let later = t0 + window * 2;
        let (v, _) = judge(Some(4), &sight(6, beat(3, 5, false), 101), seen, later, &s);
        assert_eq!(
            v,
            Verdict::Stale {
                epoch: 6,
                silent: window
            }
        );
    }

    #[test]
    fn a_new_holder_starts_its_own_window() {
        let s = sup();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (_, seen) = judge(Some(4), &sight(5, beat(1, 5, false), 0), None, t0, &s);
        // Epoch 5 went silent, then epoch 6 took the store: the silence of
        // 5 does not count for 6.
        let (v, _) = judge(
            Some(4),
            &sight(6, beat(1, 6, false), 0),
            seen,
            t0 + ms(5000),
            &s,
        );
        assert_eq!(v, Verdict::Held { epoch: 6 });
    }

    #[test]
    fn without_our_epoch_only_liveness_decides() {
        let s = sup();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Our own last beat (epoch 4, unknown to us) stopped with our crash:
        // stale after the window, never at once.
        let (v, seen) = judge(None, &sight(4, beat(8, 4, false), 0), None, t0, &s);
        assert_eq!(v, Verdict::Held { epoch: 4 });
        let (v, _) = judge(
            None,
            &sight(4, beat(8, 4, false), 0),
            seen,
            t0 + ms(700),
            &s,
        );
        assert!(matches!(v, Verdict::Stale { epoch: 4, .. }), "{v:?}");
    }
}
