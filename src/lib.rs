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
//! # Map
//!
//! The root holds what every user names: the [`Engine`] and its
//! [`EngineBuilder`] (with the [`Store`] it runs on), a [`Job`] and its
//! [`JobContext`], [`JobHandle`] and [`SubmitOptions`], a [`Pipeline`] with
//! its [`BulkCtx`], [`Batch`] and [`BulkReport`], [`Settings`] and
//! [`JobOptions`], [`RateLimit`], [`Fairness`] and [`Concurrency`] (tenants
//! inside a type), [`EngineEvent`], [`Error`] and
//! [`Result`]. The rest lives in modules named for what they are for:
//!
//! - [`job`]: how a job ends and is read back (`JobError`, `JobState`,
//!   `FailureKind`), memo and effects, ids of keyed jobs;
//! - [`bulk`]: a batch's items, progress, status and cost;
//! - [`sink`]: where a batch's outputs go (JSONL, an actor, your own);
//! - [`periodic`]: schedules and periodic jobs;
//! - [`workflow`]: graphs of jobs whose outputs flow to the jobs that
//!   need them;
//! - [`encryption`]: the keyring that seals values at rest;
//! - [`remote`]: the engine from other processes (`Client`), and shards
//!   (`ShardedEngine`, `ShardedClient`, the cluster);
//! - [`protocol`]: the engine's actor messages, for services that talk to it
//!   by `call!`/`cast!`;
//! - `testing` (feature `testing`): test helpers.
//!
//! This crate is the typed API; `gaffer-actors` is the untyped engine
//! (actors, messages, durable layout) and carries no semver promise. See
//! ARCHITECTURE.md.

#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

mod adapters;
mod batch;
mod builder;
mod client;
#[cfg(feature = "cluster")]
mod cluster;
mod context;
mod engine;
mod error;
mod handle;
mod items;
mod jobs;
mod pipeline;
mod report;
mod shards;
mod state;
mod submit;

pub use batch::Batch;
pub use builder::{EngineBuilder, JobOptions};
pub use context::JobContext;
pub use engine::Engine;
pub use error::{Error, Result};
pub use gaffer_actors::exec::fair::{Concurrency, Fairness};
pub use gaffer_actors::exec::rate::RateLimit;
pub use gaffer_actors::layout::store::Store;
pub use gaffer_actors::{EngineEvent, Settings};
pub use handle::JobHandle;
pub use jobs::Job;
pub use pipeline::{BulkCtx, Pipeline};
pub use report::BulkReport;
pub use submit::SubmitOptions;

/// How a job ends and is read back, what it keeps across attempts (memo)
/// and stages for its success (effects), and the ids of keyed jobs.
pub mod job {
    pub use crate::context::Memo;
    pub use crate::error::{JobError, JoinError};
    pub use crate::jobs::{Job, keyed_job_id, payload_idempotency_key};
    pub use gaffer_actors::erased::CompletedBatch;
    pub use gaffer_actors::exec::effects::{Effects, MAX_EFFECT_VALUE};
    pub use gaffer_actors::{CancelResult, FailureKind, JobState, MemoWrites, Signalled};
}

/// A batch's items (a page at a time, outputs typed), its progress and
/// status, and the cost its items record.
pub mod bulk {
    pub use crate::items::{BatchItem, ItemOutcome, ItemPage};
    pub use crate::pipeline::ItemError;
    pub use crate::report::{BatchStatus, BulkReport, ProgressSnapshot};
    pub use gaffer_actors::batches::report::CostReport;
}

pub mod sink;

pub mod periodic;
pub mod workflow;

/// Values encrypted at rest (docs/encryption.md): the [`Keyring`](encryption::Keyring)
/// given to [`EngineBuilder::encryption`], `ClientBuilder::encryption`, the
/// `gaffer` command (`--key-file`) and the dashboard; what it seals and
/// what stays readable.
pub mod encryption {
    pub use gaffer_actors::layout::sealed::{
        KEY_FILE_ENV, KEYS_ENV, Keyring, KeyringError, SealError,
    };
    pub use gaffer_actors::maintenance::rekey::RekeyReport;
}

/// The engine from other processes: a [`Client`](remote::Client) submits
/// and reads through the store (no writer, no fencing); a shard set splits
/// one workload over several stores ([`ShardedEngine`](remote::ShardedEngine),
/// [`ShardedClient`](remote::ShardedClient); with feature `cluster`, the
/// engines of a `ractor_cluster`).
pub mod remote {
    pub use crate::client::{
        Client, ClientBuilder, ClientHandle, ClientWorkflow, Request, RequestState,
    };
    #[cfg(feature = "cluster")]
    pub use crate::cluster::{BatchCounts, ClusterRouter, Gateway, GatewayMessage, shard_group};
    pub use crate::shards::{
        MAX_SHARDS, Placement, ShardError, ShardEvent, ShardSet, ShardStatus, ShardedClient,
        ShardedEngine, ShardedEngineBuilder,
    };
    /// `ractor_cluster` (feature `cluster`): its node server and connect,
    /// for joining a ractor cluster.
    #[cfg(feature = "cluster")]
    pub use ractor_cluster;
}

/// The engine's protocol, for a ractor service that talks to it by message
/// (`call!`/`cast!` on [`Engine::actor`]): the messages, what they carry and
/// what they answer, and the bytes-level batch sink.
pub mod protocol {
    pub use crate::submit::submit_request;
    pub use gaffer_actors::{
        BatchFinished, BatchOutcome, BatchSpec, EngineMessage, ItemRecord, JobFinished, Outcome,
        OutcomeRecord, OutputRef, PoolStats, RecordSink, ShutdownReport, SinkAttached, SinkError,
        SinkTakeover, SubmitRequest, Submitted, SweepReport, WaitError,
    };
}

/// The guides (docs/guide/ in the repository), one module per topic.
pub mod guide;

/// Test helpers (feature `testing`): a fault-injecting object store, panics
/// injected into the engine's own work, and the engine's insides a test
/// reaches for.
#[cfg(feature = "testing")]
pub mod testing;

/// The actor framework, for services that talk to the engine by message.
pub use ractor;
/// The durable queue gaffer runs on, and its object-store crate.
pub use taquba;
