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
//! - [`front_door`]: the operations on jobs, types and workflows that the
//!   engine, a client and a shard set's engine and client offer under the
//!   same names, through one trait, [`FrontDoor`]: a service written
//!   against it runs on any of them;
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
mod builder;
pub mod bulk;
pub mod encryption;
mod engine;
mod error;
pub mod front_door;
pub mod job;
pub mod periodic;
pub mod protocol;
pub mod remote;
pub mod sink;
pub mod workflow;

pub use builder::{EngineBuilder, JobOptions};
pub use bulk::batch::Batch;
pub use bulk::pipeline::{BulkCtx, Pipeline};
pub use bulk::report::BulkReport;
pub use engine::Engine;
pub use error::{Error, Result};
pub use front_door::FrontDoor;
pub use gaffer_actors::exec::fair::{Concurrency, Fairness};
pub use gaffer_actors::exec::rate::RateLimit;
pub use gaffer_actors::layout::live::LiveStore;
pub use gaffer_actors::layout::store::Store;
pub use gaffer_actors::{EngineEvent, Settings};
pub use job::context::JobContext;
pub use job::handle::JobHandle;
pub use job::submit::{Debounce, SubmitOptions};
pub use job::typed::Job;

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
