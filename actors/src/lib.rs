//! gaffer's engine: the actor tree, its messages and the durable layout.
//!
//! This crate is untyped: jobs are bytes in, bytes out. It is the internal
//! engine of the `gaffer` crate and carries **no semver promise**; depend on
//! `gaffer` instead. See ARCHITECTURE.md at the repository root for the tree,
//! the messages, the key layout and the invariants.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]
// The folders' docs name their files, most of them private to the crate:
// its readers are gaffer's maintainers (`cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

pub mod batches;
pub mod engine;
pub mod erased;
pub use gaffer_layout::error;
pub mod events;
pub mod exec;
pub mod jobs;
pub use gaffer_layout as layout;
pub mod maintenance;
pub(crate) mod protocol;
pub(crate) mod services;
pub(crate) mod settings;
pub mod task;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod workflows;

pub use batches::spec::{
    BatchFinished, BatchOutcome, BatchProgress, BatchSpec, ItemRecord, RecordSink, SinkAttached,
    SinkError, SinkTakeover,
};
pub use engine::notify::Notify;
pub use erased::{BoxFuture, Delivery, ErasedHandler, ItemInfo, Kind, Registration, Verdict};
pub use error::{EngineError, Result, ScheduleError, ShardError};
pub use events::EngineEvent;
pub use exec::attempts::Attempts;
pub use exec::pool::PoolStats;
pub use jobs::signals::Signalled;
pub use jobs::submit::{CancelResult, JobState, SubmitRequest, Submitted};
pub use jobs::waiters::{JobFinished, WaitError};
pub use layout::inspect::{BatchState, PeriodicStatus};
pub use layout::records::{Cost, ItemStatus, PeriodicRecord};
pub use layout::records::{FailureKind, Outcome, OutcomeRecord, OutputRef};
pub use maintenance::schedule::{Missed, Schedule, ScheduleSpec};
pub use maintenance::sweeper::SweepReport;
pub use maintenance::ticks::{MakeTick, PeriodicSpec, Tick};
#[cfg(feature = "testing")]
pub use protocol::ChildKind;
pub use protocol::{
    EngineConfig, EngineMessage, EngineRef, QueueSource, ShardPlace, ShutdownReport,
};
pub use services::{Route, Services, SharedQueue};
pub use settings::{MemoWrites, Settings};

/// With ractor's `cluster` feature (this crate's `cluster`), ractor has no
/// blanket `Message` impl: each type an actor receives names it. These
/// never leave the process (none is serializable).
macro_rules! local_messages {
    ($($t:ty),* $(,)?) => {
        $(
            #[cfg(feature = "cluster")]
            impl ractor::Message for $t {}
        )*
    };
}

local_messages!(
    batches::coordinator::CoordinatorMessage,
    batches::spec::BatchFinished,
    batches::claims::ClaimMessage,
    workflows::GateMessage,
    exec::parking::SlotWait,
    batches::registry::RegistryMessage,
    engine::notify::JobEnd,
    engine::notify::ItemEnd,
    exec::worker::WorkerMessage,
    protocol::EngineMessage,
    maintenance::periodic::PeriodicMessage,
    exec::pool::PoolMessage,
    exec::pool::StoreClosed,
    exec::claimer::ClaimerMessage,
    exec::claimer::Claimed,
    jobs::waiters::JobFinished,
    jobs::waiters::WaitersMessage,
    maintenance::sweeper::SweeperMessage,
    engine::intake::IntakeMessage,
);
