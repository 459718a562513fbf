//! The engine's timers: the sweeper (retention passes, the counters'
//! snapshot) and the periodic actor (periodic jobs' ticks), with what they
//! run at the bytes level: [`ticks`] (a periodic job's record and check),
//! [`schedule`] (cron and intervals, pure), `snapshot` (the counters for `gaffer stats`),
//! and [`rekey`] (every sealed value written again under the newest key).

pub(crate) mod periodic;
pub mod rekey;
pub use crate::layout::schedule;
pub(crate) mod snapshot;
pub(crate) mod sweeper;
pub(crate) mod ticks;
