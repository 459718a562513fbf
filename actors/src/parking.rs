//! Parking: a job that waits for another job from inside its `run` gives its
//! worker slot back while it waits.
//!
//! A handler worker runs each delivery inside a task-local scope that names
//! its pool and slot. A wait for a job's end (`EngineRef::await_job`, and so
//! every `JobHandle::join`) made within that scope tells the pool the slot is
//! parked; the pool then runs one more job of the type meanwhile (it starts an
//! extra worker), and retires a worker once the wait is over and a slot is
//! free. So a parent awaiting its children never holds the capacity the
//! children need, whatever their type and the concurrency. A wait made from a
//! task the job spawned is outside the scope and does not park.
//!
//! When the engine shuts down, a parked wait ends with `ShutDown` (the job can
//! return an error and run again after the next start) instead of waiting for
//! children that are no longer claimed.

use std::future::Future;

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;

use crate::pool::{PoolMessage, SlotId};

tokio::task_local! {
    static PARKING: Parking;
}

/// The slot a delivery runs in.
#[derive(Debug, Clone)]
pub(crate) struct Parking {
    pub(crate) pool: ActorRef<PoolMessage>,
    pub(crate) slot: SlotId,
    /// Cancelled when the pool starts draining.
    pub(crate) draining: CancellationToken,
}

/// Run `f` (a delivery) in `parking`'s slot.
pub(crate) async fn scope<F: Future>(parking: Parking, f: F) -> F::Output {
    PARKING.scope(parking, f).await
}

/// Unparks the slot when the wait ends, however it ends.
struct Unpark(Parking);

impl Drop for Unpark {
    fn drop(&mut self) {
        let _ = self.0.pool.cast(PoolMessage::Unpark(self.0.slot));
    }
}

/// Await `wait` (a wait for a job's end). Inside a delivery its slot is
/// parked for the wait, and the wait ends with `None` when the pool starts
/// draining; outside one it is awaited as it is.
pub(crate) async fn wait<F: Future>(wait: F) -> Option<F::Output> {
    let Ok(parking) = PARKING.try_with(Parking::clone) else {
        return Some(wait.await);
    };
    if parking.draining.is_cancelled() {
        return None;
    }
    let _ = parking.pool.cast(PoolMessage::Park(parking.slot));
    let _unpark = Unpark(parking.clone());
    tokio::select! {
        out = wait => Some(out),
        _ = parking.draining.cancelled() => None,
    }
}
