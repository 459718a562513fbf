//! Panics injected into the engine's own work (feature `testing`), to show
//! that no panic in a task or a child actor leaves its owner waiting: a
//! test arms a point for a scope (a queue name, or the engine's
//! `queue_name` for engine-wide work) and the next time the engine runs
//! that point there, it panics once.
//!
//! ```
//! use gaffer_actors::testing::panics::{self, PanicPoint};
//! panics::panic_next(PanicPoint::Claim, "jobs.thumbnail");
//! # panics::disarm(PanicPoint::Claim, "jobs.thumbnail");
//! ```
//!
//! The points armed are process-wide test scaffolding (a `std` mutex over a
//! short list), not engine state; without the `testing` feature none of
//! this is compiled and the engine has no check at all.

use std::sync::Mutex;

/// Where a panic can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicPoint {
    /// A claimer, as it starts a claim (scope: the queue's name).
    Claim,
    /// A settlement task, before its commit (scope: the job's queue).
    Settlement,
    /// A retention pass of the sweeper (scope: the engine's queue name).
    SweepPass,
    /// A check of the periodic jobs (scope: the engine's queue name).
    PeriodicCheck,
    /// A request task of the supervisor (scope: the engine's queue name).
    Request,
}

static ARMED: Mutex<Vec<(PanicPoint, String)>> = Mutex::new(Vec::new());

/// The next time `point` runs for `scope`, it panics (once).
pub fn panic_next(point: PanicPoint, scope: &str) {
    armed().push((point, scope.to_string()));
}

/// Forget an armed panic that has not fired; answers whether one was armed.
pub fn disarm(point: PanicPoint, scope: &str) -> bool {
    let mut list = armed();
    let before = list.len();
    list.retain(|(p, s)| !(*p == point && s == scope));
    list.len() != before
}

/// Whether a panic is still armed at `point` for `scope`.
pub fn is_armed(point: PanicPoint, scope: &str) -> bool {
    armed().iter().any(|(p, s)| *p == point && s == scope)
}

/// Called by the engine at `point`: panics if it is armed for `scope`.
pub(crate) fn check(point: PanicPoint, scope: &str) {
    let fire = {
        let mut list = armed();
        match list.iter().position(|(p, s)| *p == point && s == scope) {
            Some(i) => {
                list.remove(i);
                true
            }
            None => false,
        }
    };
    if fire {
        panic!("injected panic at {point:?} for {scope}");
    }
}

fn armed() -> std::sync::MutexGuard<'static, Vec<(PanicPoint, String)>> {
    // A panic never happens while the lock is held, so it is never
    // poisoned; if it were, the list is still usable.
    ARMED.lock().unwrap_or_else(|e| e.into_inner())
}
