//! Lifecycle events a service (or a test) can subscribe to.
//!
//! Events go out on a `tokio::sync::broadcast` channel: cheap when nobody
//! listens, and a slow subscriber lags (and is told so) instead of slowing the
//! engine. Events are observations, never the source of truth: the durable
//! records are.
//!
//! The supervisor holds the channel's only lasting sender (the engine's
//! services hold it weakly, for the moment of a send). When the engine stops
//! it sends the last event ([`EngineEvent::ShutDown`] after a shutdown,
//! [`EngineEvent::StoreClosed`] after a fence) and drops the sender, so every
//! subscriber's stream ends (`RecvError::Closed`) even while handles on the
//! engine are still alive.

use crate::layout::records::FailureKind;

/// Something that happened in the engine.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EngineEvent {
    /// A delivery of a job started in a handler.
    JobStarted {
        /// Run id.
        run_id: String,
        /// Job type.
        job_type: String,
        /// 1-based attempt.
        attempt: u32,
    },
    /// A job succeeded and its outcome committed.
    JobSucceeded {
        /// Run id.
        run_id: String,
        /// Job type.
        job_type: String,
    },
    /// An attempt failed. `retrying` says whether another attempt follows.
    JobFailed {
        /// Run id.
        run_id: String,
        /// Job type.
        job_type: String,
        /// Classification.
        kind: FailureKind,
        /// Reason.
        message: String,
        /// Whether the job was re-queued for another attempt.
        retrying: bool,
    },
    /// A job's attempt ended waiting for a signal (`JobContext::wait_signal`):
    /// it runs again when the signal comes, or at the wait's deadline.
    JobWaiting {
        /// Run id.
        run_id: String,
        /// Job type.
        job_type: String,
        /// The signal it waits for.
        signal: String,
        /// The wait's deadline, epoch ms (queue clock).
        until_ms: u64,
    },
    /// A job's attempt ended in a durable sleep (`JobContext::sleep`): it
    /// runs again at the sleep's end, where the sleep answers at once.
    JobSleeping {
        /// Run id.
        run_id: String,
        /// Job type.
        job_type: String,
        /// When the sleep ends, epoch ms (queue clock).
        until_ms: u64,
    },
    /// A job snoozed (`JobContext::snooze`): it runs again from the top at
    /// `until_ms`, no attempt spent.
    JobSnoozed {
        /// Run id.
        run_id: String,
        /// Job type.
        job_type: String,
        /// How many times its run has snoozed, this one included.
        snoozes: u32,
        /// When it runs again, epoch ms (queue clock).
        until_ms: u64,
    },
    /// A job was cancelled.
    JobCancelled {
        /// Run id.
        run_id: String,
    },
    /// A handler worker crashed (panic or error) while running a job.
    HandlerCrashed {
        /// Job type of the pool.
        job_type: String,
        /// What the crash said.
        reason: String,
    },
    /// A crashed handler worker was started again.
    HandlerRestarted {
        /// Job type of the pool.
        job_type: String,
    },
    /// A job type (or pipeline) crashed past its restart limit and is paused:
    /// it claims nothing, its queued jobs stay queued (a job it held waiting
    /// is given back to the queue without spending an attempt), and every
    /// other type goes on. `Engine::resume` or a restart resumes it.
    JobTypePaused {
        /// Job type.
        job_type: String,
    },
    /// A paused job type was resumed.
    JobTypeResumed {
        /// Job type.
        job_type: String,
    },
    /// A batch run completed.
    BatchCompleted {
        /// Batch id.
        batch_id: String,
        /// Items succeeded.
        succeeded: u64,
        /// Items failed.
        failed: u64,
    },
    /// A tick of a periodic job fired: its job was enqueued (with the
    /// periodic record's new cursor, in one transaction).
    PeriodicFired {
        /// The periodic job's name.
        name: String,
        /// The tick's time, epoch ms (queue clock).
        tick_ms: u64,
        /// The tick's job id.
        run_id: String,
    },
    /// The store closed under the engine (another process opened it as its
    /// writer, which fences this one): the engine stopped. Nothing it settles
    /// afterwards commits; the other process re-runs what was in flight.
    /// The last event: the stream ends after it.
    StoreClosed {
        /// Why.
        reason: String,
    },
    /// Expired outcome records were removed.
    Swept {
        /// Records removed in this pass.
        removed: usize,
    },
    /// The engine shut down (a graceful shutdown finished; its report is the
    /// one `shutdown` returns). The last event: the stream ends after it.
    ShutDown {
        /// What the shutdown did.
        report: ShutdownReport,
    },
}

/// The sending side of the event channel.
pub type EventSender = tokio::sync::broadcast::Sender<EngineEvent>;

/// A weak sending side: sends only while the supervisor's sender lives.
pub type WeakEventSender = tokio::sync::broadcast::WeakSender<EngineEvent>;

/// Events buffered per subscriber before a slow one lags.
pub const EVENT_BUFFER: usize = 4096;

/// A new event channel.
pub fn channel() -> EventSender {
    tokio::sync::broadcast::channel(EVENT_BUFFER).0
}

/// What a shutdown did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Whether the queue was closed (flushed) cleanly.
    pub queue_closed: bool,
    /// Jobs still running when the grace period ended: given back to the
    /// queue (their attempt is not counted), to run again after the next
    /// start.
    pub abandoned: usize,
    /// Problems met on the way (empty on a clean shutdown).
    pub problems: Vec<String>,
}
