//! Shards: one workload spread over several stores, each with one engine
//! as its writer.
//!
//! A taquba store has one writer, so one engine commits what one process
//! can. A [`ShardSet`] is a fixed list of stores (prefixes of one bucket,
//! `s3://bucket/app/shard-{shard}`), and every job belongs to exactly one:
//! the shard of its id, `SHA-256(id) mod n`. A keyed job's id is derived
//! from its key, so a key's duplicates always meet in one store and keep
//! its exactly-once outcome; an unkeyed job gets a fresh ULID, picked
//! before the shard; a batch lives in the shard of its id. So a job's shard
//! is known from its id alone: a join, a status read or a cancel needs no
//! directory.
//!
//! Placement is not gaffer's job: an orchestrator tells each process which
//! shards it owns ([`Placement`]: a list, or `shard % replicas == ordinal`
//! from a StatefulSet pod's hostname). A process runs one engine per owned
//! shard ([`ShardedEngine`]), each its own supervision tree, so a shard
//! whose store is fenced (another process opened it as its writer) stops
//! alone. Moving a shard is restarting the processes concerned: the new
//! owner opens the store, which fences the old one, and runs what the old
//! one left (pending jobs, expired leases, half-done batches) as after any
//! restart. Each owned shard has a keeper (`keeper`) that brings a stopped
//! shard back in the same process once its store says the shard is this
//! process's again: its engine crashed, or the writer that fenced it is
//! gone; never from a live writer. Producers in other processes send
//! through each shard's inbox ([`ShardedClient`]). The shard count is
//! fixed for the life of the data: changing it moves every id's shard (see
//! docs/guide/shards.md).

mod client;
mod engine;
mod keeper;
mod operations;
mod set;
mod tags;
mod workflows;

pub use client::ShardedClient;
pub use engine::{ShardedEngine, ShardedEngineBuilder};
pub use set::{MAX_SHARDS, Placement, ShardSet};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::layout::keys;
use ractor::{Actor, ActorRef};
use tokio::sync::{broadcast, watch};

#[cfg(feature = "cluster")]
pub(crate) use keeper::KeeperMessage;
#[cfg(not(feature = "cluster"))]
use keeper::KeeperMessage;
use keeper::{Keeper, KeeperArgs, MakeFn, Slot, Supervision};

use crate::builder::EngineBuilder;
use crate::engine::Engine;
use crate::error::Result;
use crate::job::handle::JobHandle;
use crate::job::submit::{SubmitOptions, job_id_of, pin_job_id, submit_request};
use crate::job::typed::Job;
use crate::remote::client::{Client, ClientBuilder, ClientHandle};

pub use gaffer_actors::ShardError;

/// How a shard stands on this process ([`ShardedEngine::shard_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardStatus {
    /// Its engine runs here.
    Up,
    /// Its engine stopped (fenced, its store closed, or its tree stopped);
    /// its keeper reopens it once the shard is this process's to take again
    /// (see docs/guide/shards.md, *Shards that come back*).
    Down {
        /// Why it stopped.
        reason: String,
        /// The writer epoch of another writer that holds the store and was
        /// alive at the last look: the keeper waits until it is gone.
        held_by: Option<u64>,
    },
    /// No longer kept: shut down, or a reopen failed in a way another try
    /// cannot mend (a shard marker or layout mismatch, a bad setting).
    Stopped {
        /// Why.
        reason: String,
    },
}

impl ShardStatus {
    fn reason(&self) -> String {
        match self {
            Self::Up => "it is up".into(),
            Self::Down {
                reason,
                held_by: Some(epoch),
            } => format!("{reason}; another writer (epoch {epoch}) holds its store"),
            Self::Down { reason, .. } => reason.clone(),
            Self::Stopped { reason } => format!("no longer kept: {reason}"),
        }
    }
}

/// What happens to the shards of a [`ShardedEngine`]
/// ([`ShardedEngine::subscribe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardEvent {
    /// The shard's engine stopped under this process: its store was fenced
    /// by another writer or closed, or its tree stopped. Its jobs do not run
    /// here until it is [`Back`](Self::Back).
    Down {
        /// The shard.
        shard: usize,
        /// Why.
        reason: String,
    },
    /// Another writer opened the shard's store after this process's engine
    /// and is alive: this process waits, looking at the store every probe
    /// interval, and reopens the shard only once that writer is gone.
    Held {
        /// The shard.
        shard: usize,
        /// The other writer's epoch (the store's count of writer opens).
        writer_epoch: u64,
    },
    /// Reopening the shard failed; its keeper looks again after `retry_in`.
    ReopenFailed {
        /// The shard.
        shard: usize,
        /// What failed.
        error: String,
        /// When the next look is.
        retry_in: Duration,
    },
    /// A new engine runs the shard again, in this process.
    Back {
        /// The shard.
        shard: usize,
        /// How long it was down.
        down_for: Duration,
    },
    /// The shard is no longer kept (its engine was shut down, or a reopen
    /// failed in a way another try cannot mend: the reason names it).
    Stopped {
        /// The shard.
        shard: usize,
        /// Why.
        reason: String,
    },
}
