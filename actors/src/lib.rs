//! gaffer's engine: the actor tree, its messages and the durable layout.
//!
//! This crate is untyped: jobs are bytes in, bytes out. It is the internal
//! engine of the `gaffer` crate and carries **no semver promise**; depend on
//! `gaffer` instead. See ARCHITECTURE.md at the repository root for the tree,
//! the messages, the key layout and the invariants.

#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod attempts;
pub mod batch;
pub mod claims;
pub mod coordinator;
pub mod driver;
pub mod effects;
pub mod erased;
pub mod error;
pub mod events;
pub mod inspect;
pub mod intake;
pub mod jobs;
pub mod keys;
mod lookups;
pub mod manifest;
pub mod memo;
mod operate;
mod parking;
pub mod periodic;
pub mod pool;
pub mod protocol;
pub mod rate;
pub mod records;
pub mod registry;
pub mod request;
mod restarts;
pub mod schedule;
pub mod services;
pub mod settings;
mod settle;
mod shutdown;
mod sink_writer;
mod snapshot;
pub use settle::Notify;
mod startup;
pub mod status;
pub mod store_url;
pub mod supervisor;
pub mod sweeper;
pub mod task;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod ticks;
pub mod waiters;
pub mod worker;

pub use attempts::Attempts;
pub use batch::{
    BatchFinished, BatchOutcome, BatchProgress, BatchSpec, BatchState, ItemRecord, RecordSink,
    SinkAttached, SinkError, SinkTakeover,
};
pub use erased::{BoxFuture, Delivery, ErasedHandler, ItemInfo, Kind, Registration, Verdict};
pub use error::{EngineError, Result, ScheduleError};
pub use events::EngineEvent;
pub use inspect::PeriodicStatus;
pub use jobs::{CancelResult, JobState, SubmitRequest, Submitted};
pub use pool::PoolStats;
#[cfg(feature = "testing")]
pub use protocol::ChildKind;
pub use protocol::{
    EngineConfig, EngineMessage, EngineRef, QueueSource, ShardPlace, ShutdownReport,
};
pub use records::{Cost, ItemStatus, PeriodicRecord};
pub use records::{FailureKind, Outcome, OutcomeRecord, OutputRef};
pub use schedule::{Missed, Schedule, ScheduleSpec};
pub use services::{Route, Services, SharedQueue};
pub use settings::{MemoWrites, Settings};
pub use sweeper::SweepReport;
pub use ticks::{MakeTick, PeriodicSpec, Tick};
pub use waiters::{JobFinished, WaitError};

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
    coordinator::CoordinatorMessage,
    batch::BatchFinished,
    claims::ClaimMessage,
    parking::SlotWait,
    registry::RegistryMessage,
    settle::JobEnd,
    settle::ItemEnd,
    worker::WorkerMessage,
    protocol::EngineMessage,
    periodic::PeriodicMessage,
    pool::PoolMessage,
    waiters::JobFinished,
    waiters::WaitersMessage,
    sweeper::SweeperMessage,
    intake::IntakeMessage,
);
