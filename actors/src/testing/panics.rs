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

use std::sync::{Arc, Mutex};

/// Where a panic can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicPoint {
    /// A claimer, as it starts a claim (scope: the queue's name).
    Claim,
    /// A settlement task, before its commit (scope: the job's queue).
    Settlement,
    /// A workflow step's settlement, once its plan is given and before its
    /// commit (scope: the job's queue).
    StepPlanned,
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

/// Where the engine can be held (feature `testing`): it stops there until
/// the test releases it, so a test can act in a window that is otherwise
/// a few microseconds wide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldPoint {
    /// A settlement about to commit a job's wait for a signal (scope: the
    /// job's queue).
    BeforeWaitCommit,
    /// A settlement that committed a job's wait, before it reads the job's
    /// signals again (scope: the job's queue).
    AfterWaitCommit,
}

type HoldEntry = (HoldPoint, String, Arc<HoldInner>);

static HOLDS: Mutex<Vec<HoldEntry>> = Mutex::new(Vec::new());

#[derive(Debug, Default)]
struct HoldInner {
    reached: tokio::sync::Notify,
    released: tokio::sync::Notify,
    at: std::sync::atomic::AtomicBool,
}

/// A hold armed with [`hold_next`].
#[derive(Debug, Clone)]
pub struct Hold(Arc<HoldInner>);

impl Hold {
    /// Resolves once the engine stopped at the point.
    pub async fn reached(&self) {
        loop {
            let notified = self.0.reached.notified();
            if self.0.at.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// Let the engine go on.
    pub fn release(&self) {
        self.0.released.notify_one();
    }
}

/// The next time the engine reaches `point` for `scope`, it waits there
/// until the returned hold is released (once).
pub fn hold_next(point: HoldPoint, scope: &str) -> Hold {
    let inner = Arc::new(HoldInner::default());
    holds().push((point, scope.to_string(), inner.clone()));
    Hold(inner)
}

/// Called by the engine at `point`: waits there if a hold is armed.
pub(crate) async fn hold(point: HoldPoint, scope: &str) {
    let armed = {
        let mut list = holds();
        list.iter()
            .position(|(p, s, _)| *p == point && s == scope)
            .map(|i| list.remove(i).2)
    };
    if let Some(inner) = armed {
        let released = inner.released.notified();
        inner.at.store(true, std::sync::atomic::Ordering::SeqCst);
        inner.reached.notify_waiters();
        released.await;
    }
}

fn holds() -> std::sync::MutexGuard<'static, Vec<HoldEntry>> {
    HOLDS.lock().unwrap_or_else(|e| e.into_inner())
}
