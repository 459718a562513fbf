//! The read side and the operator requests of a gaffer store, shared by the
//! `gaffer` command and the dashboard (`gaffer-web`).
//!
//! A [`Store`] is the store opened read-only through one taquba
//! `QueueReader` in `FollowLatest` mode (it never opens a writer, never
//! fences, and runs with read-only credentials) and its inbox sender. By
//! role:
//!
//! - [`store`]: opening, the layout and shard checks, the engine's queues;
//! - [`queries`]: stats (with each queue's oldest ready job), a job, dead
//!   letters, batches, periodic jobs, the writer's health, paused types;
//! - [`listing`]: the listing of jobs with its cursor;
//! - [`tagged`]: a tag's jobs, through the tag's index;
//! - [`tenants`]: the values of a type spread over partition queues (its
//!   top values, their oldest ready job, the paused ones);
//! - [`workflows`]: the listing of workflows and one workflow's graph;
//! - [`act`]: requests through the store's inbox and their fate;
//! - [`report`]: what each read answers (the command's `--json` documents);
//! - `unflushed` (private): the WAL past the last memtable flush, read raw
//!   ([`Reading::Flushed`]: `health` and `stats` of the command: the beat,
//!   the counters, the changes to the ready jobs).

#![warn(missing_docs, missing_debug_implementations)]

pub mod act;
pub mod error;
pub mod format;
pub mod listing;
pub mod queries;
pub mod report;
pub mod store;
pub mod tagged;
pub mod tenants;
mod unflushed;
pub mod workflows;

pub use error::OpsError;
pub use listing::{ListedState, StateFilter};
pub use store::{Reading, Store};
