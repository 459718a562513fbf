//! Running jobs: a handler pool per job type or pipeline owns its queue's
//! capacity; its claimer claims what the pool has room for; its workers run
//! the user's code; a settlement commits each verdict as one queue
//! transition with its records and effects.
//!
//! Policies sit in files of their own, each pure or nearly so: how attempts
//! are counted ([`attempts`]), when a crashed worker comes back
//! (`restarts`), how fast a type may start jobs ([`rate`]), a running
//! job's slot parked while it waits for another job (`parking`), and what
//! a job stages for its settlement ([`memo`], [`effects`]).

pub(crate) mod attempts;
pub(crate) mod claimer;
pub mod effects;
pub mod fair;
pub(crate) mod marks;
pub mod memo;
pub(crate) mod parking;
pub(crate) mod pool;
pub mod rate;
pub(crate) mod restarts;
pub(crate) mod settle;
pub mod suspend;
pub(crate) mod worker;
