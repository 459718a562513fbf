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
mod kept;
mod operations;
mod placement;
#[cfg(feature = "etcd")]
mod placer;
mod set;
mod tags;
mod workflows;

pub use client::ShardedClient;
pub use engine::{ShardedEngine, ShardedEngineBuilder};
pub use placement::Placement;
#[cfg(feature = "etcd")]
pub use placer::EtcdPlacement;
pub use set::{MAX_SHARDS, ShardSet};

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
use kept::{Kept, KeptShards, keep, shard_events, shut_down_kept};

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
    /// Elastic placement gave the shard to this process and its engine
    /// runs here now.
    Gained {
        /// The shard.
        shard: usize,
        /// Why it came here.
        reason: MoveReason,
    },
    /// The shard left this process under elastic placement: its engine was
    /// shut down (drained first when the move was planned).
    Lost {
        /// The shard.
        shard: usize,
        /// Why it left.
        reason: MoveReason,
    },
}

/// Why a shard moved to or from a process under elastic placement
/// ([`ShardEvent::Gained`], [`ShardEvent::Lost`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MoveReason {
    /// Nobody held the shard and the assignment gives it to this process:
    /// the set's first start, or its last owner let it go (`previous`, as
    /// last seen: it drained and released it, or its lease ended).
    Free {
        /// The owner seen before, if any was.
        previous: Option<String>,
    },
    /// The assignment over the live members gives the shard to another
    /// member (one joined, or came back): drained, then released to it.
    Rebalanced {
        /// The member it goes to.
        to: String,
    },
    /// This process could not renew its lease (etcd unreachable) and
    /// stopped the shard before the lease could have expired.
    LeaseExpiring,
    /// etcd says this process's lease ended (it was paused or cut off past
    /// its TTL): the shard may be another's already.
    LeaseLost,
    /// Another member holds the shard's key (or nobody does, while this
    /// process ran it: its key was deleted under it).
    KeyLost {
        /// The member that holds it now, if any.
        by: Option<String>,
    },
    /// This process shut its shards down.
    ShutDown,
}

impl MoveReason {
    /// A short label (`free`, `rebalanced`, `lease_expiring`, `lease_lost`,
    /// `key_lost`, `shut_down`), as the moves metric carries it.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Free { .. } => "free",
            Self::Rebalanced { .. } => "rebalanced",
            Self::LeaseExpiring => "lease_expiring",
            Self::LeaseLost => "lease_lost",
            Self::KeyLost { .. } => "key_lost",
            Self::ShutDown => "shut_down",
        }
    }
}

impl std::fmt::Display for MoveReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Free { previous: None } => f.write_str("it was free"),
            Self::Free { previous: Some(p) } => write!(
                f,
                "it was free (its last owner, {p}, let it go or its lease ended)"
            ),
            Self::Rebalanced { to } => write!(f, "rebalanced to {to}"),
            Self::LeaseExpiring => f.write_str(
                "this process could not renew its lease and stopped the shard before the lease \
                 could expire",
            ),
            Self::LeaseLost => f.write_str("this process's lease ended"),
            Self::KeyLost { by: Some(m) } => write!(f, "{m} holds its key"),
            Self::KeyLost { by: None } => f.write_str("its key was deleted"),
            Self::ShutDown => f.write_str("shut down"),
        }
    }
}
