//! The engine's root: the supervisor that owns the queue and every other
//! actor, what happens at its start (the queue opened, the layout checked,
//! the routes built) and at its end (the shutdown sequence), and the intake
//! of requests other processes leave in the store.
//!
//! Start at [`supervisor`]: its module doc names the children and who talks
//! to whom.

pub mod intake;
pub(crate) mod notify;
pub(crate) mod shutdown;
pub(crate) mod startup;
pub(crate) mod supervisor;
