//! # gaffer
//!
//! An embedded, actor-based engine for durable background work.
//!
//! A service embeds gaffer, registers typed [`Job`]s and submits them; gaffer
//! runs them on a supervision tree of `ractor` actors over the `taquba`
//! durable queue, whose state lives in an object store (a local directory by
//! default). Crash the process at any moment and start it again: pending jobs
//! run, and recorded outcomes answer duplicates.
//!
//! ```no_run
//! use gaffer::{Engine, Job, JobContext, Store};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Add { a: i64, b: i64 }
//!
//! impl Job for Add {
//!     const NAME: &'static str = "add";
//!     type Output = i64;
//!     type Error = std::convert::Infallible;
//!     async fn run(&self, _ctx: JobContext) -> Result<i64, Self::Error> {
//!         Ok(self.a + self.b)
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder()
//!     .store(Store::local_dir("gaffer-data"))
//!     .register::<Add>()
//!     .start()
//!     .await?;
//! let sum = engine.submit(Add { a: 2, b: 3 }).await?.await?;
//! assert_eq!(sum, 5);
//! engine.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Layout: this crate is the typed API; `gaffer-actors` is the untyped engine
//! (actors, messages, durable layout). See ARCHITECTURE.md.

#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

mod adapters;
mod batch;
mod builder;
mod client;
#[cfg(feature = "cluster")]
mod cluster;
mod context;
mod cost;
mod engine;
mod error;
mod handle;
mod items;
mod job;
mod periodic;
mod pipeline;
mod report;
mod shards;
mod sink;
mod state;
mod submit;

pub use batch::Batch;
pub use builder::EngineBuilder;
pub use client::{Client, ClientBuilder, ClientHandle, Request, RequestState};
#[cfg(feature = "cluster")]
pub use cluster::{BatchCounts, ClusterRouter, Gateway, GatewayMessage, shard_group};
pub use context::{JobContext, Memo};
pub use cost::CostReport;
pub use engine::Engine;
pub use error::{Error, JobError, JoinError, Result};
pub use gaffer_actors::layout::store::Store;
/// Periodic jobs: when they tick, what happens to missed ticks, a tick as
/// `make_job` sees it, and what the store records of each.
pub use gaffer_actors::{
    Missed, PeriodicRecord, PeriodicSpec, PeriodicStatus, Schedule, ScheduleError, ScheduleSpec,
    Tick,
};
pub use handle::JobHandle;
pub use items::{BatchItem, ItemOutcome, ItemPage};
pub use job::{Job, keyed_job_id, payload_idempotency_key};
pub use periodic::periodic_spec;
pub use pipeline::{BulkCtx, ItemError, Pipeline};
/// `ractor_cluster` (feature `cluster`): its node server and connect, for
/// joining a ractor cluster.
#[cfg(feature = "cluster")]
pub use ractor_cluster;
pub use report::{BatchStatus, BulkReport, ProgressSnapshot};
pub use shards::{
    MAX_SHARDS, Placement, ShardError, ShardEvent, ShardSet, ShardStatus, ShardedClient,
    ShardedEngine, ShardedEngineBuilder,
};
pub use sink::{
    ActorSink, JsonlSink, NullSink, OutputRecord, OutputSink, STATUS_CANCELLED, STATUS_FAILED,
    STATUS_OUTPUT_UNAVAILABLE, STATUS_SUCCEEDED, read_jsonl,
};
pub use submit::{SubmitOptions, submit_request};

pub use gaffer_actors::erased::CompletedBatch;
pub use gaffer_actors::exec::effects::Effects;
pub use gaffer_actors::exec::rate::RateLimit;
/// Test helpers (feature `testing`): a fault-injecting object store.
#[cfg(feature = "testing")]
pub use gaffer_actors::testing;
/// The engine's protocol, for services that talk to it by message
/// (`EngineMessage`, `EngineRef`) and what those messages carry and answer.
pub use gaffer_actors::{
    BatchFinished, BatchOutcome, BatchSpec, CancelResult, EngineMessage, EngineRef, JobFinished,
    JobState, Outcome, OutcomeRecord, OutputRef, PoolStats, ShutdownReport, SinkAttached,
    SinkTakeover, SubmitRequest, Submitted, SweepReport, WaitError,
};
/// Settings, events and the engine's errors.
pub use gaffer_actors::{EngineError, EngineEvent, FailureKind, MemoWrites, Settings};
/// A bytes-level batch sink ([`BatchSpec::sink`]) and what it is given.
pub use gaffer_actors::{ItemRecord, RecordSink, SinkError};
/// The actor framework, for services that talk to the engine by message.
pub use ractor;
/// The durable queue gaffer runs on, and its object-store crate.
pub use taquba;
