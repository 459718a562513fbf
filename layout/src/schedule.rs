//! When a periodic job runs: a [`Schedule`] (a cron expression in a time
//! zone, or a fixed interval) with its policy for ticks missed while no
//! engine ran ([`Missed`]), and the arithmetic of ticks: the next one after a
//! time, and which are due between the last one handled and now.
//!
//! Pure: no clock, no store. Times are epoch milliseconds on the queue's
//! clock. The durable form of a schedule ([`ScheduleSpec`]) is kept in its
//! periodic record, so a reader (the `gaffer` command) can tell when it is
//! next due without the engine.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};

use crate::error::{MAX_CATCH_UP, ScheduleError};

/// The durable form of a schedule: what the expression or the interval is,
/// as given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScheduleSpec {
    /// Every `interval_ms`, at whole multiples of it since the Unix epoch.
    Every {
        /// The interval, in milliseconds.
        interval_ms: u64,
    },
    /// A cron expression (five fields, or six with seconds first) in a time
    /// zone (`None`: UTC).
    Cron {
        /// The expression as given.
        expr: String,
        /// An IANA time zone name.
        time_zone: Option<String>,
    },
}

/// What to do with ticks that came due while no engine ran (the engine was
/// down, or its host slept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Missed {
    /// Drop them: only ticks that come due while the engine runs fire.
    Skip,
    /// Run once for all of them: the latest missed tick fires (the default).
    #[default]
    RunOnce,
    /// Run the latest `n` of them, one run each, oldest first (1 to 1000).
    CatchUp(u32),
}

impl fmt::Display for Missed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missed::Skip => f.write_str("skip"),
            Missed::RunOnce => f.write_str("run-once"),
            Missed::CatchUp(n) => write!(f, "catch-up({n})"),
        }
    }
}

/// When a periodic job runs, and what happens to ticks missed while no
/// engine ran.
///
/// ```
/// use std::time::Duration;
/// use gaffer_layout::schedule::{Missed, Schedule};
///
/// // At the top of every hour, UTC.
/// let hourly = Schedule::cron("0 * * * *").unwrap();
/// // At 06:30:15 every weekday, Paris time; after an outage, run the last 3 missed days.
/// let mornings = Schedule::cron("15 30 6 * * Mon-Fri").unwrap()
///     .time_zone("Europe/Paris").unwrap()
///     .on_missed(Missed::CatchUp(3));
/// // Every 10 minutes (at :00, :10, … UTC); drop the ticks missed while down.
/// let often = Schedule::every(Duration::from_secs(600)).on_missed(Missed::Skip);
/// # let _ = (hourly, mornings, often);
/// ```
#[derive(Clone)]
pub struct Schedule {
    spec: ScheduleSpec,
    missed: Missed,
    how: How,
}

#[derive(Clone)]
enum How {
    Every(u64),
    Cron(Arc<Cron>, Tz),
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("spec", &self.spec)
            .field("missed", &self.missed)
            .finish()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(&self.spec, f)
    }
}

/// `every 1h`, `cron "0 * * * *"`, `cron "0 9 * * *" Europe/Paris`.
fn describe(spec: &ScheduleSpec, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match spec {
        ScheduleSpec::Every { interval_ms } => write!(f, "every {}", interval(*interval_ms)),
        ScheduleSpec::Cron { expr, time_zone } => {
            write!(f, "cron \"{expr}\"")?;
            if let Some(tz) = time_zone {
                write!(f, " {tz}")?;
            }
            Ok(())
        }
    }
}

impl fmt::Display for ScheduleSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        describe(self, f)
    }
}

/// An interval in its largest whole units: `90s` → `1m30s`, `3600000` → `1h`.
fn interval(ms: u64) -> String {
    let mut out = String::new();
    let mut rest = ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    if rest > 0 || out.is_empty() {
        out.push_str(&format!("{rest}ms"));
    }
    out
}

/// The ticks a check finds due, and where the record's cursor goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The ticks to fire, oldest first (each one run).
    pub fire: Vec<u64>,
    /// Every tick at or before this is handled (fired or dropped) once the
    /// ticks in `fire` have fired.
    pub cursor: u64,
}

impl Schedule {
    /// Every `interval`, at whole multiples of it since the Unix epoch (so
    /// `every(1 h)` ticks at the top of each hour UTC, on every engine and
    /// after any restart). At least a second; counted in whole milliseconds.
    /// Checked when the periodic job is scheduled.
    pub fn every(interval: Duration) -> Self {
        let ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        Self {
            spec: ScheduleSpec::Every { interval_ms: ms },
            missed: Missed::default(),
            how: How::Every(ms),
        }
    }

    /// A cron expression, in UTC until [`time_zone`](Self::time_zone):
    /// five fields (`minute hour day-of-month month day-of-week`) or six
    /// with seconds first; names (`Mon`, `Jan`), ranges, steps, lists, `L`,
    /// `W`, `#` and the `@hourly`-style aliases (croner's syntax).
    pub fn cron(expr: &str) -> Result<Self, ScheduleError> {
        let cron = parse_cron(expr)?;
        Ok(Self {
            spec: ScheduleSpec::Cron {
                expr: expr.to_string(),
                time_zone: None,
            },
            missed: Missed::default(),
            how: How::Cron(Arc::new(cron), Tz::UTC),
        })
    }

    /// Evaluate the cron expression in this IANA time zone (`Europe/Paris`,
    /// `America/New_York`, `UTC`): wall-clock times follow its daylight
    /// saving changes (a time skipped by a change runs at the first instant
    /// after it, a time repeated by one runs once). An interval schedule
    /// takes no time zone.
    pub fn time_zone(mut self, name: &str) -> Result<Self, ScheduleError> {
        let tz: Tz = name
            .parse()
            .map_err(|_| ScheduleError::UnknownTimeZone(name.to_string()))?;
        match (&mut self.spec, &mut self.how) {
            (ScheduleSpec::Cron { time_zone, .. }, How::Cron(_, zone)) => {
                *time_zone = Some(name.to_string());
                *zone = tz;
                Ok(self)
            }
            _ => Err(ScheduleError::TimeZoneOnInterval),
        }
    }

    /// What to do with ticks missed while no engine ran. Default
    /// [`Missed::RunOnce`].
    pub fn on_missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// The policy for missed ticks.
    pub fn missed(&self) -> Missed {
        self.missed
    }

    /// The durable form.
    pub fn spec(&self) -> &ScheduleSpec {
        &self.spec
    }

    /// The schedule a durable form describes.
    pub fn from_spec(spec: &ScheduleSpec, missed: Missed) -> Result<Self, ScheduleError> {
        let schedule = match spec {
            ScheduleSpec::Every { interval_ms } => {
                Self::every(Duration::from_millis(*interval_ms)).on_missed(missed)
            }
            ScheduleSpec::Cron { expr, time_zone } => {
                let schedule = Self::cron(expr)?.on_missed(missed);
                match time_zone {
                    Some(tz) => schedule.time_zone(tz)?,
                    None => schedule,
                }
            }
        };
        schedule.check()?;
        Ok(schedule)
    }

    /// Whether the schedule can run: an interval of at least a second, a
    /// catch-up of 1 to 1000 ticks.
    pub fn check(&self) -> Result<(), ScheduleError> {
        if let How::Every(ms) = self.how
            && ms < 1000
        {
            return Err(ScheduleError::IntervalTooShort(Duration::from_millis(ms)));
        }
        if let Missed::CatchUp(n) = self.missed
            && !(1..=MAX_CATCH_UP).contains(&n)
        {
            return Err(ScheduleError::CatchUpOutOfRange(n));
        }
        Ok(())
    }

    /// The first tick after `ms` (strictly); `None` if there is none (a cron
    /// expression whose last match is past, or an interval of zero).
    pub fn next_after(&self, ms: u64) -> Option<u64> {
        match &self.how {
            How::Every(0) => None,
            How::Every(iv) => (ms / iv).checked_add(1)?.checked_mul(*iv),
            How::Cron(cron, tz) => {
                let from = at(tz, whole_second(ms))?;
                let next = cron.find_next_occurrence(&from, false).ok()?;
                u64::try_from(next.timestamp_millis()).ok()
            }
        }
    }

    /// The latest tick at or before `ms`, if any.
    pub fn latest_at_or_before(&self, ms: u64) -> Option<u64> {
        match &self.how {
            How::Every(0) => None,
            How::Every(iv) => Some(ms / iv * iv),
            How::Cron(cron, tz) => {
                let from = at(tz, whole_second(ms))?;
                let prev = cron.find_previous_occurrence(&from, true).ok()?;
                u64::try_from(prev.timestamp_millis()).ok()
            }
        }
    }

    /// The tick before the tick `tick` (strictly earlier), if any.
    fn previous(&self, tick: u64) -> Option<u64> {
        match &self.how {
            How::Every(0) => None,
            How::Every(iv) => tick.checked_sub(1).map(|t| t / iv * iv),
            How::Cron(cron, tz) => {
                let from = at(tz, tick)?;
                let prev = cron.find_previous_occurrence(&from, false).ok()?;
                u64::try_from(prev.timestamp_millis()).ok()
            }
        }
    }

    /// Which ticks are due at `now`, when every tick at or before `cursor`
    /// has been handled and this engine started at `started`: ticks in
    /// `(cursor, now]` are due; those at or before `started` came due while
    /// no engine ran (missed), and the policy decides which of them fire. A
    /// tick that came due while the engine ran fires; if several did (the
    /// engine fell behind: its host slept), they are treated as missed ones.
    pub fn due(&self, cursor: u64, now: u64, started: u64) -> Due {
        let nothing = Due {
            fire: Vec::new(),
            cursor,
        };
        let Some(latest) = self.latest_at_or_before(now) else {
            return nothing;
        };
        if latest <= cursor {
            return nothing;
        }
        let want = match self.missed {
            Missed::Skip if latest <= started => 0,
            Missed::Skip | Missed::RunOnce => 1,
            Missed::CatchUp(n) => n.clamp(1, MAX_CATCH_UP) as usize,
        };
        let mut fire = Vec::with_capacity(want);
        let mut tick = Some(latest);
        while let Some(t) = tick {
            if fire.len() == want || t <= cursor {
                break;
            }
            fire.push(t);
            tick = self.previous(t);
        }
        fire.reverse();
        Due {
            fire,
            cursor: latest,
        }
    }
}

fn parse_cron(expr: &str) -> Result<Cron, ScheduleError> {
    let cron = CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(expr)
        .map_err(|e| ScheduleError::InvalidCron {
            expr: expr.to_string(),
            reason: e.to_string(),
        })?;
    // A pattern that parses but never matches (the 30th of February) is
    // refused now rather than never firing. Checked from 2000-01-01, with
    // the search's own limit.
    let from = Utc.timestamp_millis_opt(946_684_800_000).single();
    if let Some(from) = from
        && cron.find_next_occurrence(&from, false).is_err()
    {
        return Err(ScheduleError::NeverMatches(expr.to_string()));
    }
    Ok(cron)
}

fn whole_second(ms: u64) -> u64 {
    ms / 1000 * 1000
}

fn at(tz: &Tz, ms: u64) -> Option<DateTime<Tz>> {
    tz.timestamp_millis_opt(i64::try_from(ms).ok()?).single()
}

#[cfg(test)]
mod tests;
