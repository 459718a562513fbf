//! Parking: a job that waits for another job from inside its `run` gives its
//! worker slot back while it waits.
//!
//! A handler worker runs each delivery inside a task-local scope that names
//! its pool and slot. A wait for a job's end (`EngineRef::await_job`, and so
//! every `JobHandle::join`) made within that scope tells the pool the slot is
//! parked; the pool then runs one more job of the type meanwhile (it starts an
//! extra worker), and retires a worker once the wait is over and a slot is
//! free. So a parent awaiting its children never holds the capacity the
//! children need, whatever their type and the concurrency. Several waits at
//! once (`join_all`) park the slot once: it is unparked when the last ends. A
//! wait made from a task the job spawned is outside the scope and does not
//! park.
//!
//! While parked, the job's lease is kept alive by its pool, as for every job
//! it holds (`exec::pool::leases`): a parent may wait longer than its lease
//! for its children. When the engine shuts down, a parked wait
//! ends with `ShutDown` and the pool gives the job back to the queue without
//! spending an attempt, whatever the job then returns (it runs again after
//! the next start).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ractor::DerivedActorRef;
use tokio_util::sync::CancellationToken;

/// A worker slot of a pool.
pub(crate) type SlotId = u64;

/// What a wait tells its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotWait {
    /// The job in this slot waits for another job: run one more meanwhile.
    Park(SlotId),
    /// Its wait is over.
    Unpark(SlotId),
}

tokio::task_local! {
    static PARKING: Parking;
}

/// The slot a delivery runs in.
#[derive(Debug, Clone)]
pub(crate) struct Parking {
    pub(crate) pool: DerivedActorRef<SlotWait>,
    pub(crate) slot: SlotId,
    /// Cancelled when the pool starts draining.
    pub(crate) draining: CancellationToken,
    /// The delivery's cancel token: a job cancelled while it waits for
    /// another stops waiting (and the other is cancelled with it).
    pub(crate) cancelled: CancellationToken,
    /// Shared by the delivery's waits (attempt-local, like its effects).
    pub(crate) state: Arc<ParkState>,
}

/// What the waits of one delivery share.
#[derive(Debug, Default)]
pub(crate) struct ParkState {
    /// Waits in progress.
    waits: AtomicUsize,
    /// A wait was cut short by the pool's drain.
    cut: AtomicBool,
}

impl ParkState {
    /// Whether a wait of this delivery was cut short by a shutdown: its end
    /// is then not the job's own doing.
    pub(crate) fn cut_by_shutdown(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

/// Run `f` (a delivery) in `parking`'s slot.
pub(crate) async fn scope<F: Future>(parking: Parking, f: F) -> F::Output {
    PARKING.scope(parking, f).await
}

/// Ends one wait: the last one unparks the slot, however it ends.
struct EndWait(Parking);

impl Drop for EndWait {
    fn drop(&mut self) {
        if self.0.state.waits.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _ = self.0.pool.send_message(SlotWait::Unpark(self.0.slot));
        }
    }
}

/// How a wait for a job's end ended.
#[derive(Debug)]
pub(crate) enum Waited<T> {
    /// The job ended.
    Done(T),
    /// The pool started draining (a shutdown).
    Drained,
    /// The waiting job was cancelled.
    Cancelled,
}

/// Await `wait` (a wait for a job's end). Inside a delivery its slot is
/// parked for the wait, and the wait ends when the
/// pool starts draining or the waiting job is cancelled; outside one it is
/// awaited as it is.
pub(crate) async fn wait<F: Future>(wait: F) -> Waited<F::Output> {
    let Ok(parking) = PARKING.try_with(Parking::clone) else {
        return Waited::Done(wait.await);
    };
    if parking.draining.is_cancelled() {
        parking.state.cut.store(true, Ordering::SeqCst);
        return Waited::Drained;
    }
    if parking.cancelled.is_cancelled() {
        return Waited::Cancelled;
    }
    if parking.state.waits.fetch_add(1, Ordering::SeqCst) == 0 {
        let _ = parking.pool.send_message(SlotWait::Park(parking.slot));
    }
    let _end = EndWait(parking.clone());
    tokio::select! {
        out = wait => Waited::Done(out),
        _ = parking.draining.cancelled() => {
            parking.state.cut.store(true, Ordering::SeqCst);
            Waited::Drained
        }
        _ = parking.cancelled.cancelled() => Waited::Cancelled,
    }
}
