//! gaffer's stored format: what a gaffer store *is*, shared by the engine
//! (`gaffer-actors`) and every reader of a store (the `gaffer` command, the
//! dashboard, a `Client` in another process).
//!
//! Every key, path and queue name ([`keys`]); the records and their
//! encoding ([`records`]); what a store's records say, read through any
//! `QueueView` with no actor and no writer ([`inspect`]); a store by URL
//! ([`store`]); the keyring every user value is sealed and opened with
//! ([`sealed`]); the request that creates a job ([`request`]) and the
//! intake's wire types ([`intake`]); a workflow's records, spec and status
//! ([`workflow`]); a job's tags and their index ([`tags`]); periodic
//! schedules ([`schedule`]); a batch's report
//! ([`report`]); and the error vocabulary ([`error`]).
//!
//! Nothing here names an actor. This crate is internal to gaffer and
//! carries **no semver promise**; depend on `gaffer`.

#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod error;
pub mod inspect;
pub mod intake;
pub mod keys;
pub mod live;
pub mod past;
pub mod records;
pub mod report;
pub mod request;
pub mod schedule;
pub mod sealed;
pub mod store;
pub mod tags;
#[cfg(feature = "testing")]
pub mod testing;
pub mod workflow;

pub use error::{EngineError, Result};

/// Shard `index` of a set of `count` stores, at `url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlace {
    /// The shard's index.
    pub index: usize,
    /// How many shards the set has.
    pub count: usize,
    /// The shard's store URL (for the error that names it).
    pub url: String,
    /// The name of the process that owns the shard in its placement (a
    /// placement member's id), written in the shard's owner record
    /// ([`keys::SHARD_OWNER_KEY`]) at each start; `None`: the engine names
    /// itself `{host}/{pid}`.
    pub owner: Option<String>,
}
