//! The memory budget ([`Settings::memory_budget`]): a batch's feeding paced
//! by the process's resident memory, as RocksDB's write stalls pace writers.
//!
//! Each coordinator owns a [`Pacer`] and asks it, before every enqueue, how
//! many items it may enqueue now. The pacer reads the signal itself, at most
//! every [`SAMPLE_EVERY`]: the process's resident set size, from
//! `/proc/self/status` ([`resident_bytes`]). taquba 0.16 keeps its SlateDB
//! `Db` private and sends SlateDB's gauges (unflushed bytes, memtable size)
//! only to a process-wide `metrics` recorder, which a library must not
//! install; what the store costs in memory (memtables waiting for their
//! flush, the block and meta caches) is all in the resident set, and the
//! budget is stated in it (ARCHITECTURE.md, *The memory budget*).
//!
//! The law, pure and tested below: under [`EASE`] of the budget the run is
//! not paced, and the pacer measures the rate it feeds at (its reference).
//! From there the run is fed at a rate the pacer adjusts every
//! [`DECIDE_EVERY`] by what the resident set did since its last decision,
//! additive increase and multiplicative decrease as in TCP's congestion
//! control, around a mark under the budget ([`MARK`] of it): the resident
//! set grows in steps (a memtable, a run of cached blocks) that land after
//! the feed that caused them, so the law holds the mark and leaves the rest
//! of the budget to those steps. Under the mark, growth fast enough to
//! reach it within [`HORIZON`] cuts the rate by a quarter, otherwise it
//! rises by a twentieth of the reference; at or over the mark, growth of
//! more than [`SLACK`] halves it, and only a level that held still for
//! [`HOLD`] decisions in a row lets it rise again (a rate that rose on the
//! first flat second ratcheted the resident set up one step at a time,
//! benches/README.md). The resident set seldom falls (the allocator keeps
//! what SlateDB frees after a memtable flush, and reuses it), so a budget
//! on its level alone would hold a run at its slowest for good once over;
//! on its growth the run feeds as fast as the freed memory is reused. The
//! rate never falls under [`FLOOR`] of the reference (nor under
//! [`MIN_RATE`]) and never rises above the reference: a run over its budget
//! whose store never frees memory still feeds, slowly, so every wait ends
//! (each at most [`MAX_WAIT`]). Without a budget, or where the signal
//! cannot be read (not Linux), the pacer says [`Room::Any`] and reads
//! nothing.
//!
//! [`Settings::memory_budget`]: crate::settings::Settings::memory_budget

use std::time::Duration;

use tokio::time::Instant;

/// How often the signal is read, at most.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// The share of the budget at which pacing starts.
pub(crate) const EASE: f64 = 0.75;
/// The lowest paced rate, as a share of the reference.
pub(crate) const FLOOR: f64 = 0.10;
/// How often the paced rate is adjusted.
pub(crate) const DECIDE_EVERY: Duration = Duration::from_secs(1);
/// Under the budget, growth that would reach it within this long slows the
/// run.
pub(crate) const HORIZON: Duration = Duration::from_secs(30);
/// Growth over the budget up to this much (per decision) counts as none.
pub(crate) const SLACK: u64 = 1 << 20;
/// The share of the budget the law holds the resident set at; the rest is
/// room for the steps it grows by after a feed.
pub(crate) const MARK: f64 = 0.875;
/// Decisions in a row with the level still that let a rate at or over the
/// mark rise.
pub(crate) const HOLD: u32 = 2;
/// The share of the reference the rate rises by per decision.
const STEP: f64 = 0.05;
/// The lowest paced rate, items per second.
pub(crate) const MIN_RATE: f64 = 20.0;
/// The reference rate when the run was paced before it could measure one
/// (the process was already over [`EASE`] of its budget when it began).
pub(crate) const DEFAULT_REFERENCE: f64 = 2_000.0;
/// The longest a paced feed waits before it looks again.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(250);
/// Tokens a paced run may hold, in seconds of its rate.
const BURST_SECS: f64 = 0.1;
/// The free rate is measured over windows of at least this long.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// How much a run may enqueue now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Room {
    /// Not paced: as much as the window allows.
    Any,
    /// At most this many items now (at least 1).
    Items(usize),
    /// Nothing now: look again after this long (at most [`MAX_WAIT`]).
    Wait(Duration),
}

/// One run's pace under the budget: the last reading of the signal, the
/// reference rate, and a token bucket while paced. Owned by the run's
/// coordinator; nothing else reads or changes it.
#[derive(Debug)]
pub(crate) struct Pacer {
    /// The budget in bytes (`None`: off).
    limit: Option<u64>,
    /// The last reading and when it was taken.
    level: Option<u64>,
    sampled: Option<Instant>,
    /// Items per second fed while not paced (an average of 1 s windows).
    reference: Option<f64>,
    /// The paced rate (`None`: not paced), and the reading and time of its
    /// last decision.
    paced: Option<f64>,
    decided: Option<(Instant, u64)>,
    /// Decisions in a row, at or over the mark, with the level still.
    still: u32,
    /// The current window of that measurement: its start and the count then.
    measuring: Option<(Instant, u64)>,
    /// Tokens (items) and when they were last added, while paced.
    tokens: f64,
    refilled: Option<Instant>,
    /// Feeds that had to wait, and items enqueued while paced.
    waits: u64,
    over: bool,
}

impl Pacer {
    /// A pacer for a budget of `limit` bytes of resident memory (`None`: off).
    pub(crate) fn new(limit: Option<u64>) -> Self {
        Self {
            limit: limit.filter(|l| *l > 0),
            level: None,
            sampled: None,
            reference: None,
            paced: None,
            decided: None,
            still: 0,
            measuring: None,
            tokens: 0.0,
            refilled: None,
            waits: 0,
            over: false,
        }
    }

    /// Whether a budget is set.
    pub(crate) fn enabled(&self) -> bool {
        self.limit.is_some()
    }

    /// Feeds that waited for the budget so far.
    pub(crate) fn waits(&self) -> u64 {
        self.waits
    }

    /// Whether a new reading of the signal is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.enabled()
            && self
                .sampled
                .is_none_or(|at| now.saturating_duration_since(at) >= SAMPLE_EVERY)
    }

    /// Record a reading of the signal (`None`: it could not be read, so the
    /// run is not paced), and adjust the paced rate.
    pub(crate) fn observe(&mut self, now: Instant, level: Option<u64>) {
        self.sampled = Some(now);
        self.level = level;
        let (Some(limit), Some(level)) = (self.limit, level) else {
            self.paced = None;
            self.decided = None;
            self.still = 0;
            return;
        };
        if (level as f64) < limit as f64 * EASE {
            self.paced = None;
            self.decided = None;
            self.still = 0;
            return;
        }
        let reference = self.reference();
        let Some((at, then)) = self.decided else {
            // Entering the paced zone: from the rate the run fed at.
            self.paced = Some(reference);
            self.decided = Some((now, level));
            return;
        };
        let dt = now.saturating_duration_since(at);
        if dt < DECIDE_EVERY {
            return;
        }
        let grew = level.saturating_sub(then);
        let rate = self.paced.unwrap_or(reference);
        let floor = (reference * FLOOR).max(MIN_RATE);
        let slower = |share: f64| (rate * share).max(floor);
        let faster = (rate + reference * STEP).min(reference);
        let mark = (limit as f64 * MARK) as u64;
        self.paced = Some(if level >= mark {
            if grew > SLACK {
                self.still = 0;
                slower(0.5)
            } else {
                self.still += 1;
                if self.still >= HOLD { faster } else { rate }
            }
        } else {
            self.still = 0;
            let per_sec = grew as f64 / dt.as_secs_f64();
            if per_sec * HORIZON.as_secs_f64() > (mark - level) as f64 {
                slower(0.75)
            } else {
                faster
            }
        });
        self.decided = Some((now, level));
    }

    /// The reference rate: measured, or the default.
    fn reference(&self) -> f64 {
        self.reference.unwrap_or(DEFAULT_REFERENCE).max(MIN_RATE)
    }

    /// The paced rate, items per second (`None`: not paced).
    pub(crate) fn rate(&self) -> Option<f64> {
        self.limit?;
        self.paced.map(|r| r.max(MIN_RATE))
    }

    /// How much the run may enqueue at `now`, having enqueued `enqueued`
    /// items so far. Reads no signal (see [`due`](Self::due),
    /// [`observe`](Self::observe)).
    pub(crate) fn room(&mut self, now: Instant, enqueued: u64) -> Room {
        let Some(rate) = self.rate() else {
            self.measure(now, enqueued);
            self.refilled = None;
            return Room::Any;
        };
        // Paced: the free rate's window ends here.
        self.measuring = None;
        let cap = (rate * BURST_SECS).max(1.0);
        match self.refilled {
            None => self.tokens = cap,
            Some(at) => {
                let dt = now.saturating_duration_since(at).as_secs_f64();
                self.tokens = (self.tokens + rate * dt).min(cap);
            }
        }
        self.refilled = Some(now);
        if self.limit.zip(self.level).is_some_and(|(l, v)| v >= l) && !self.over {
            self.over = true;
            tracing::warn!(
                resident_bytes = self.level,
                budget_bytes = self.limit,
                rate,
                "over the memory budget: the batch is fed more slowly while memory grows"
            );
        } else if self.level.zip(self.limit).is_some_and(|(v, l)| v < l) {
            self.over = false;
        }
        if self.tokens >= 1.0 {
            return Room::Items(self.tokens as usize);
        }
        self.waits += 1;
        // Wait for a few items' worth (fewer, smaller transactions than one
        // at a time), never longer than `MAX_WAIT`.
        let want = cap.min(16.0); // cap is at least 1
        let secs = (want - self.tokens) / rate;
        Room::Wait(Duration::from_secs_f64(secs).clamp(Duration::from_millis(1), MAX_WAIT))
    }

    /// `items` were enqueued on the room given.
    pub(crate) fn took(&mut self, items: u64) {
        if self.refilled.is_some() {
            self.tokens = (self.tokens - items as f64).max(0.0);
        }
    }

    /// The free rate, measured over windows of at least `MEASURE_EVERY`.
    fn measure(&mut self, now: Instant, enqueued: u64) {
        if !self.enabled() {
            return;
        }
        let Some((start, count)) = self.measuring else {
            self.measuring = Some((now, enqueued));
            return;
        };
        let dt = now.saturating_duration_since(start);
        if dt < MEASURE_EVERY {
            return;
        }
        let sample = enqueued.saturating_sub(count) as f64 / dt.as_secs_f64();
        self.measuring = Some((now, enqueued));
        if sample <= 0.0 {
            return;
        }
        self.reference = Some(match self.reference {
            Some(r) => 0.5 * r + 0.5 * sample,
            None => sample,
        });
    }
}

/// The process's resident set size in bytes (`VmRSS` of
/// `/proc/self/status`), `None` where there is no such file.
pub(crate) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Feed `pacer` for `secs` at the level `level`, as a coordinator whose
    /// window is always open would: the items it was given.
    fn feed_for(pacer: &mut Pacer, start: Instant, secs: u64, level: u64, fed: &mut u64) -> u64 {
        feed_with(pacer, start, secs, |_| level, fed)
    }

    #[test]
    fn off_never_paces_and_reads_nothing() {
        let mut pacer = Pacer::new(None);
        let now = Instant::now();
        assert!(!pacer.due(now));
        pacer.observe(now, Some(u64::MAX));
        assert_eq!(pacer.room(now, 0), Room::Any);
        assert_eq!(Pacer::new(Some(0)).room(now, 0), Room::Any);
    }

    #[test]
    fn unreadable_signal_does_not_pace() {
        let mut pacer = Pacer::new(Some(MIB));
        let now = Instant::now();
        pacer.observe(now, None);
        assert_eq!(pacer.room(now, 0), Room::Any);
    }

    #[test]
    fn below_ease_is_free_and_measures_the_reference() {
        let mut pacer = Pacer::new(Some(1000 * MIB));
        let start = Instant::now();
        let mut fed = 0;
        // 1 000 items per 100 ms: 10 000 items/s.
        feed_for(&mut pacer, start, 5, 500 * MIB, &mut fed);
        assert_eq!(pacer.waits(), 0);
        let reference = pacer.reference.expect("measured");
        assert!((reference - 10_000.0).abs() < 1.0, "{reference}");
    }

    /// Like [`feed_for`], with the level given by the time since `start`.
    fn feed_with(
        pacer: &mut Pacer,
        start: Instant,
        secs: u64,
        level: impl Fn(Duration) -> u64,
        fed: &mut u64,
    ) -> u64 {
        let before = *fed;
        let mut now = start;
        let end = start + Duration::from_secs(secs);
        while now < end {
            if pacer.due(now) {
                pacer.observe(now, Some(level(now - start)));
            }
            match pacer.room(now, *fed) {
                Room::Any => {
                    *fed += 1_000;
                    now += ms(100);
                }
                Room::Items(n) => {
                    *fed += n as u64;
                    pacer.took(n as u64);
                    now += ms(1);
                }
                Room::Wait(d) => {
                    assert!(d <= MAX_WAIT && d > Duration::ZERO, "{d:?}");
                    now += d;
                }
            }
        }
        *fed - before
    }

    #[test]
    fn growth_toward_the_budget_slows_and_a_flat_level_recovers_then_releases() {
        let mut pacer = Pacer::new(Some(1000 * MIB));
        let start = Instant::now();
        let mut fed = 0;
        // 10 000 items/s measured while free.
        feed_for(&mut pacer, start, 3, 100 * MIB, &mut fed);
        // Past EASE and growing 10 MiB/s with 75 MiB left to the mark
        // (875 MiB): 7.5 s from it, under the 30 s horizon: the rate is cut
        // by a quarter every second, then halved once over the mark, to the
        // floor (a tenth) within 10 s.
        let t = start + Duration::from_secs(3);
        let slowed = feed_with(
            &mut pacer,
            t,
            10,
            |d| 800 * MIB + d.as_secs() * 10 * MIB,
            &mut fed,
        );
        // Free, 10 s would have taken 100 000; cut every second, about
        // 30 000.
        assert!((20_000..45_000).contains(&slowed), "{slowed}");
        assert_eq!(pacer.rate(), Some(1_000.0), "at the floor");
        // Flat, over the mark: after two still decisions it rises a
        // twentieth of the reference a second, back to the reference within
        // 21 s and no higher.
        let t = t + Duration::from_secs(10);
        let got = feed_for(&mut pacer, t, 30, 900 * MIB, &mut fed);
        assert_eq!(pacer.rate(), Some(10_000.0));
        assert!(got > 150_000, "{got}");
        // Back under EASE: free again.
        let t = t + Duration::from_secs(30);
        pacer.observe(t, Some(700 * MIB));
        assert_eq!(pacer.room(t, fed), Room::Any);
    }

    #[test]
    fn over_the_budget_growth_halves_and_a_flat_level_does_not_hold_the_run_down() {
        let mut pacer = Pacer::new(Some(1000 * MIB));
        let start = Instant::now();
        let mut fed = 0;
        feed_for(&mut pacer, start, 3, 100 * MIB, &mut fed);
        let t = start + Duration::from_secs(3);
        // Over the budget and growing 2 MiB a second: halved each second,
        // down to the floor and no lower.
        feed_with(
            &mut pacer,
            t,
            10,
            |d| 1100 * MIB + d.as_secs() * 2 * MIB,
            &mut fed,
        );
        assert_eq!(pacer.rate(), Some(1_000.0));
        // Over the budget and flat (the allocator reusing what the store
        // freed): the rate comes back.
        let t = t + Duration::from_secs(10);
        feed_for(&mut pacer, t, 30, 1130 * MIB, &mut fed);
        assert_eq!(pacer.rate(), Some(10_000.0));
    }

    #[test]
    fn over_the_mark_one_still_second_does_not_raise_the_rate() {
        let mut pacer = Pacer::new(Some(1000 * MIB));
        let start = Instant::now();
        let mut fed = 0;
        feed_for(&mut pacer, start, 3, 100 * MIB, &mut fed);
        // Over the mark (875 MiB) and growing in steps: 8 MiB, then a
        // second still, then 8 MiB again, as memtables land.
        let t = start + Duration::from_secs(3);
        pacer.observe(t, Some(900 * MIB));
        let entered = pacer.rate().expect("paced");
        pacer.observe(t + Duration::from_secs(1), Some(908 * MIB));
        let halved = pacer.rate().expect("paced");
        assert_eq!(halved, entered / 2.0);
        pacer.observe(t + Duration::from_secs(2), Some(908 * MIB));
        assert_eq!(pacer.rate(), Some(halved), "one still second holds it");
        pacer.observe(t + Duration::from_secs(3), Some(908 * MIB));
        let risen = pacer.rate().expect("paced");
        assert!(risen > halved, "two still seconds raise it");
        pacer.observe(t + Duration::from_secs(4), Some(916 * MIB));
        assert_eq!(pacer.rate(), Some(risen / 2.0), "a step halves it again");
        pacer.observe(t + Duration::from_secs(5), Some(916 * MIB));
        assert_eq!(pacer.rate(), Some(risen / 2.0), "and the count starts over");
    }

    #[test]
    fn over_budget_and_growing_for_good_still_feeds_and_every_wait_ends() {
        // Over the budget from the first reading: no reference was
        // measured, the default one applies.
        let mut pacer = Pacer::new(Some(MIB));
        let start = Instant::now();
        let mut fed = 0;
        // Growing 4 MiB a second for good: halved to the floor (a tenth of
        // the default reference) within 4 s, and fed at it from then on.
        let got = feed_with(
            &mut pacer,
            start,
            5,
            |d| 64 * MIB + d.as_secs() * 4 * MIB,
            &mut fed,
        );
        assert!(got > 0);
        let floor = DEFAULT_REFERENCE * FLOOR;
        assert_eq!(pacer.rate(), Some(floor));
        let t = start + Duration::from_secs(5);
        let got = feed_with(
            &mut pacer,
            t,
            20,
            |d| 84 * MIB + d.as_secs() * 4 * MIB,
            &mut fed,
        );
        assert!(
            (got as f64) >= floor * 20.0 * 0.95 && (got as f64) <= floor * 20.0 * 1.05 + 16.0,
            "{got}"
        );
    }

    #[test]
    fn vm_rss_is_parsed_in_bytes() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t    1024 kB\nThreads:\t3\n";
        assert_eq!(parse_vm_rss(status), Some(1024 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
    }
}
