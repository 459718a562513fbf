//! The names a run is made of: stores, flush settings, engines, workloads
//! and the workload groups a child runs.

use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    Local,
    /// A local directory whose writes are fsynced (object_store's
    /// `LocalFileSystem::with_fsync(true)`, given to gaffer as an object
    /// store, at the flush of a local directory, 2 ms, unless told), for
    /// durability across power loss (gaffer and the raw queue only).
    LocalFsync,
    Memory,
    /// An S3 API: the URL in `SBS_S3_URL` (e.g. `s3://gaffer/sbs`), a fresh
    /// prefix under it per child, configured by the `AWS_*` variables
    /// (gaffer and the raw queue only).
    S3,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushKind {
    Default,
    #[value(name = "1ms")]
    #[serde(rename = "1ms")]
    OneMs,
}

impl FlushKind {
    pub fn interval(self) -> Option<Duration> {
        match self {
            FlushKind::Default => None,
            FlushKind::OneMs => Some(Duration::from_millis(1)),
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            FlushKind::Default => "default",
            FlushKind::OneMs => "1ms",
        }
    }
}

impl StoreKind {
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Local => "local",
            StoreKind::LocalFsync => "local-fsync",
            StoreKind::Memory => "memory",
            StoreKind::S3 => "s3",
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    Gaffer,
    Reference,
    Raw,
    /// apalis 1.0 on apalis-sqlite 1.0.
    Apalis,
    /// apalis 1.0 on apalis-postgres 1.0 (a Postgres server, `SBS_PG_URL`).
    #[value(name = "apalis-postgres")]
    ApalisPostgres,
    /// apalis 1.0 on apalis-redis 1.0 (a Redis server, `SBS_REDIS_URL`).
    #[value(name = "apalis-redis")]
    ApalisRedis,
    /// graphile_worker 0.14 (Rust, a Postgres server, `SBS_PG_URL`).
    Graphile,
    /// graphile_worker 0.14 with its `LocalQueue` (`LocalQueueConfig`'s
    /// defaults): batch fetches, its throughput setting.
    #[value(name = "graphile-local-queue")]
    GraphileLocalQueue,
    /// effectum 0.7 (embedded SQLite); its child is its own binary
    /// (`effectum-child/`).
    Effectum,
}

impl Engine {
    pub fn label(self) -> &'static str {
        match self {
            Engine::Gaffer => "gaffer",
            Engine::Reference => "reference",
            Engine::Raw => "raw",
            Engine::Apalis => "apalis",
            Engine::ApalisPostgres => "apalis-postgres",
            Engine::ApalisRedis => "apalis-redis",
            Engine::Graphile => "graphile",
            Engine::GraphileLocalQueue => "graphile-local-queue",
            Engine::Effectum => "effectum",
        }
    }
    /// A peer of `side-by-side peers` (not gaffer's own engines).
    pub fn is_peer(self) -> bool {
        !matches!(self, Engine::Gaffer | Engine::Reference | Engine::Raw)
    }
    /// A peer that runs against a server the harness's `servers.sh` starts.
    pub fn needs_server(self) -> bool {
        matches!(
            self,
            Engine::ApalisPostgres
                | Engine::ApalisRedis
                | Engine::Graphile
                | Engine::GraphileLocalQueue
        )
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Workload {
    JobsKeyed,
    JobsResubmit,
    JobsPlain,
    BulkItems,
    BulkRerun,
    RawQueue,
}

impl Workload {
    pub fn label(self) -> &'static str {
        match self {
            Workload::JobsKeyed => "jobs_keyed",
            Workload::JobsResubmit => "jobs_resubmit",
            Workload::JobsPlain => "jobs_plain",
            Workload::BulkItems => "bulk_items",
            Workload::BulkRerun => "bulk_rerun",
            Workload::RawQueue => "raw_queue",
        }
    }
    pub fn group(self) -> Group {
        match self {
            Workload::JobsKeyed | Workload::JobsResubmit => Group::JobsKeyed,
            Workload::JobsPlain => Group::JobsPlain,
            Workload::BulkItems | Workload::BulkRerun => Group::Bulk,
            Workload::RawQueue => Group::Raw,
        }
    }
    pub fn uses_conc(self) -> bool {
        matches!(
            self,
            Workload::BulkItems | Workload::BulkRerun | Workload::RawQueue
        )
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    JobsKeyed,
    JobsPlain,
    Bulk,
    Raw,
}

impl Group {
    pub fn label(self) -> &'static str {
        match self {
            Group::JobsKeyed => "jobs-keyed",
            Group::JobsPlain => "jobs-plain",
            Group::Bulk => "bulk",
            Group::Raw => "raw",
        }
    }
    pub fn phases(self) -> &'static [Workload] {
        match self {
            Group::JobsKeyed => &[Workload::JobsKeyed, Workload::JobsResubmit],
            Group::JobsPlain => &[Workload::JobsPlain],
            Group::Bulk => &[Workload::BulkItems, Workload::BulkRerun],
            Group::Raw => &[Workload::RawQueue],
        }
    }
}
