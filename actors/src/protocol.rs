//! The engine's protocol and handle: the messages a service (or another
//! actor) sends the supervisor (`EngineMessage`), what a shutdown reports,
//! what the engine starts from, and `EngineRef`, the clonable handle the typed
//! API and services use.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{DerivedActorRef, RpcReplyPort};

use crate::batches::claims::ClaimMessage;
use crate::batches::registry::RegistryRef;
use crate::batches::spec::{
    BatchFinished, BatchOutcome, BatchProgress, BatchSpec, SinkAttached, SinkTakeover,
};
pub use crate::engine::shutdown::ShutdownReport;
pub use crate::engine::startup::QueueSource;
use crate::erased::Registration;
use crate::error::Result;
use crate::exec::pool::{PoolStats, StoreClosed};
use crate::jobs::submit::{CancelResult, JobState, SubmitRequest, Submitted};
use crate::jobs::waiters::{JobFinished, PeekReply, WaitReply};
use crate::layout::records::OutcomeRecord;
use crate::maintenance::sweeper::SweepReport;
use crate::maintenance::ticks::PeriodicSpec;
use crate::services::Services;
use crate::settings::Settings;

/// The engine's public protocol: what a service (or another actor) sends the
/// supervisor. Tuple variants with the reply port last, so `call!` works:
/// `call!(engine, EngineMessage::SubmitJob, request)`.
#[derive(Debug)]
pub enum EngineMessage {
    /// Submit a job; answers once the submission is durable.
    SubmitJob(SubmitRequest, RpcReplyPort<Result<Submitted>>),
    /// Wait for a job to end; answers with its outcome record. If the
    /// waiters actor restarts meanwhile the reply port is dropped: ask again
    /// (`EngineRef::await_job` does).
    AwaitJob(String, WaitReply),
    /// As `AwaitJob` for a job whose outcome record a submission was answered
    /// from ([`Submitted::recorded`]): answers with that record once it is
    /// durable, without reading it again.
    AwaitRecorded(String, Box<OutcomeRecord>, WaitReply),
    /// Tell this actor (by a [`JobFinished`] message) when the job ends. The
    /// watch survives restarts of the engine's actors.
    WatchJob(String, DerivedActorRef<JobFinished>),
    /// Where a job is now (`JobNotFound` if no record of it exists).
    JobStatus(String, RpcReplyPort<Result<JobState>>),
    /// Send the signal `name` (with its encoded payload) to the job
    /// `run_id`: it runs again if it waits for it, or finds it at its wait
    /// (`JobContext::wait_signal`).
    SignalJob(
        String,
        String,
        Vec<u8>,
        RpcReplyPort<Result<crate::jobs::signals::Signalled>>,
    ),
    /// Cancel a job.
    CancelJob(String, RpcReplyPort<Result<CancelResult>>),
    /// Shut down gracefully: stop claiming, let running jobs finish and settle,
    /// close the queue. Answers when done.
    Shutdown(RpcReplyPort<ShutdownReport>),
    /// Run a batch of encoded inputs (keys given) to completion.
    RunBatch(
        Box<BatchSpec>,
        Vec<(String, Vec<u8>)>,
        RpcReplyPort<Result<BatchOutcome>>,
    ),
    /// Run a batch like `RunBatch`, and tell this actor (a [`BatchFinished`]
    /// message) when it completes (or why it could not run: a typed error,
    /// e.g. `BatchRunning` if it already runs; then use `WatchBatch`).
    RunBatchAndTell(
        Box<BatchSpec>,
        Vec<(String, Vec<u8>)>,
        DerivedActorRef<BatchFinished>,
    ),
    /// Tell this actor (a [`BatchFinished`] message) when the run of this
    /// batch in progress here ends: how a restarted service re-attaches to the
    /// batch it started (`BatchNotRunning` if no run is in progress).
    WatchBatch(String, DerivedActorRef<BatchFinished>),
    /// As `WatchBatch`, and the takeover's sink gets the run's item records
    /// still to come: how a restarted service that was the run's sink takes
    /// it over. Answered where the switch fell ([`SinkAttached`]: the items
    /// counted before, whose records went to the sink before and are read
    /// from the batch's item markers), or `BatchNotRunning`.
    AttachBatch(Box<SinkTakeover>, RpcReplyPort<Result<SinkAttached>>),
    /// A batch run's driver (or a forget) claims its batch id, or releases
    /// it: engine-internal, sent through `RegistryRef`.
    BatchClaim(ClaimMessage),
    /// A workflow step's settlement (or a cancel) asks which steps its end
    /// decides, or reports its transaction's end: engine-internal, sent
    /// through the services' `DerivedActorRef<GateMessage>`.
    Gate(crate::workflows::GateMessage),
    /// A debounced submission, a debounce timer come due, or the end of a
    /// batch of a key's operations: engine-internal, sent through the
    /// services' `DerivedActorRef<DebounceMessage>`.
    Debounce(crate::jobs::debounce::DebounceMessage),
    /// A pool found the store closed under it (fenced by another writer,
    /// or closed): engine-internal, sent through the pool's
    /// `DerivedActorRef<StoreClosed>`. The engine stops.
    StoreClosed(StoreClosed),
    /// Resume a batch from its manifest to completion.
    ResumeBatch(Box<BatchSpec>, RpcReplyPort<Result<BatchOutcome>>),
    /// Counters of a batch running in this process (`None` if not running).
    BatchProgress(String, RpcReplyPort<Option<BatchProgress>>),
    /// What a batch's records say.
    BatchStatus(
        String,
        RpcReplyPort<Result<crate::layout::inspect::BatchState>>,
    ),
    /// Remove everything a batch wrote (refused while it runs or has live items).
    ForgetBatch(String, RpcReplyPort<Result<bool>>),
    /// Resume a job type (or pipeline) paused after too many crashes;
    /// answers whether it was paused.
    ResumeJobType(String, RpcReplyPort<Result<bool>>),
    /// Pause a job type durably (claims nothing until resumed, across
    /// restarts); answers whether it was running.
    PauseJobType(String, RpcReplyPort<Result<bool>>),
    /// Pause (`pause: true`) or resume one value of a job type's
    /// partitioning header durably; answers whether it changed.
    PauseValue {
        /// The job type.
        job_type: String,
        /// The header its jobs are spread by.
        header: String,
        /// The value.
        value: String,
        /// Pause, or resume.
        pause: bool,
        /// Whether it changed.
        reply: RpcReplyPort<Result<bool>>,
    },
    /// Run a failed or cancelled job again under its id.
    RetryJob(String, RpcReplyPort<Result<()>>),
    /// Retry the jobs of a type that failed at or after a time (epoch ms);
    /// answers how many.
    RetryFailed(String, u64, RpcReplyPort<Result<usize>>),
    /// The engine's shared services (for handles built over this engine).
    GetServices(RpcReplyPort<Arc<Services>>),
    /// Where the batches registry is (for handles built over this engine).
    GetRegistry(RpcReplyPort<RegistryRef>),
    /// Counters of each job type's pool.
    GetPoolStats(RpcReplyPort<HashMap<String, PoolStats>>),
    /// Run one sweeper pass now and answer what it did.
    SweepNow(RpcReplyPort<SweepReport>),
    /// The outcome of a job if it has durably ended, without waiting.
    JobOutcome(String, PeekReply),
    /// Schedule a periodic job at run time (as `EngineBuilder::periodic`
    /// does at start): its job type must be registered and its name free.
    /// Answers once it is scheduled; its record is written at its first
    /// check, at once.
    AddPeriodic(Box<PeriodicSpec>, RpcReplyPort<Result<()>>),
    /// Stop a periodic job on this engine (its record stays, so scheduling
    /// it again goes on from its last tick); answers whether it was
    /// scheduled.
    RemovePeriodic(String, RpcReplyPort<Result<bool>>),
    /// Check every periodic job now, rather than at its timer, and answer
    /// how many ticks fired.
    CheckPeriodic(RpcReplyPort<Result<usize>>),
    /// Kill one of the engine's actors, to test that it is restarted and that
    /// nothing is lost (feature `testing`). Answers whether it was found.
    #[cfg(feature = "testing")]
    KillChild(ChildKind, RpcReplyPort<bool>),
}

impl From<ClaimMessage> for EngineMessage {
    fn from(m: ClaimMessage) -> Self {
        Self::BatchClaim(m)
    }
}

impl TryFrom<EngineMessage> for ClaimMessage {
    type Error = EngineMessage;
    fn try_from(m: EngineMessage) -> std::result::Result<Self, EngineMessage> {
        match m {
            EngineMessage::BatchClaim(m) => Ok(m),
            other => Err(other),
        }
    }
}

impl From<crate::workflows::GateMessage> for EngineMessage {
    fn from(m: crate::workflows::GateMessage) -> Self {
        Self::Gate(m)
    }
}

impl TryFrom<EngineMessage> for crate::workflows::GateMessage {
    type Error = EngineMessage;
    fn try_from(m: EngineMessage) -> std::result::Result<Self, EngineMessage> {
        match m {
            EngineMessage::Gate(m) => Ok(m),
            other => Err(other),
        }
    }
}

impl From<crate::jobs::debounce::DebounceMessage> for EngineMessage {
    fn from(m: crate::jobs::debounce::DebounceMessage) -> Self {
        Self::Debounce(m)
    }
}

impl TryFrom<EngineMessage> for crate::jobs::debounce::DebounceMessage {
    type Error = EngineMessage;
    fn try_from(m: EngineMessage) -> std::result::Result<Self, EngineMessage> {
        match m {
            EngineMessage::Debounce(m) => Ok(m),
            other => Err(other),
        }
    }
}

impl From<StoreClosed> for EngineMessage {
    fn from(m: StoreClosed) -> Self {
        Self::StoreClosed(m)
    }
}

impl TryFrom<EngineMessage> for StoreClosed {
    type Error = EngineMessage;
    fn try_from(m: EngineMessage) -> std::result::Result<Self, EngineMessage> {
        match m {
            EngineMessage::StoreClosed(m) => Ok(m),
            other => Err(other),
        }
    }
}

/// Which actor [`EngineMessage::KillChild`] kills.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildKind {
    /// The waiters.
    Waiters,
    /// The batches registry (its coordinators die with it).
    BatchRegistry,
    /// The sweeper.
    Sweeper,
    /// The handler pool of this job type or pipeline.
    Pool(String),
    /// The coordinator of this running batch.
    Coordinator(String),
    /// The periodic actor (fires periodic jobs' ticks).
    Periodic,
}

/// Everything the engine starts from.
#[derive(Debug)]
pub struct EngineConfig {
    /// The queue.
    pub source: QueueSource,
    /// Settings.
    pub settings: Settings,
    /// Job types.
    pub registrations: Vec<Registration>,
    /// The event channel (subscribers taken before the start see every
    /// event); `None` makes a new one. The engine keeps this sender and
    /// drops it after its last event, which ends the subscribers' streams;
    /// a clone kept elsewhere keeps them open.
    pub events: Option<crate::events::EventSender>,
    /// Periodic jobs (each one's job type among the registrations).
    pub periodic: Vec<PeriodicSpec>,
    /// The engine's place in a shard set (`gaffer::ShardedEngine` sets it):
    /// checked against the store's shard marker at start, and written
    /// there by the first start.
    pub shard: Option<ShardPlace>,
}

pub use crate::layout::ShardPlace;

mod engine_ref;
pub use engine_ref::EngineRef;
