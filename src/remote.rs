//! The engine from other processes: a [`Client`] submits and reads through
//! the store (no writer, no fencing); a shard set splits one workload over
//! several stores ([`ShardedEngine`], [`ShardedClient`]; with feature
//! `cluster`, the engines of a `ractor_cluster`).
//!
//! The files: `client.rs` (+ `client/`), `shards.rs` (+ `shards/`),
//! `cluster.rs` (feature `cluster`).

pub(crate) mod client;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod shards;

pub use client::{Client, ClientBuilder, ClientHandle, ClientWorkflow, Request, RequestState};
#[cfg(feature = "cluster")]
pub use cluster::{BatchCounts, ClusterRouter, Gateway, GatewayMessage, shard_group};
/// `ractor_cluster` (feature `cluster`): its node server and connect,
/// for joining a ractor cluster.
#[cfg(feature = "cluster")]
pub use ractor_cluster;
#[cfg(feature = "etcd")]
pub use shards::EtcdPlacement;
pub use shards::{
    MAX_SHARDS, MoveReason, Placement, ShardError, ShardEvent, ShardSet, ShardStatus,
    ShardedClient, ShardedEngine, ShardedEngineBuilder,
};
