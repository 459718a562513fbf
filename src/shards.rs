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
//! docs/shards.md).

mod keeper;
mod workflows;

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
use crate::client::{Client, ClientBuilder, ClientHandle};
use crate::engine::Engine;
use crate::error::Result;
use crate::handle::JobHandle;
use crate::jobs::Job;
use crate::submit::{SubmitOptions, job_id_of, pin_job_id, submit_request};

pub use gaffer_actors::ShardError;

/// The stores of one workload, in shard order. The count is fixed at
/// deploy: every id's shard depends on it.
///
/// A job goes to the shard of its id. A type routed by a header
/// ([`route_by_header`](Self::route_by_header)) has each of its unkeyed
/// jobs that carry the header placed on the shard of the header's value
/// instead, by picking its id there: its id still names its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSet {
    urls: Vec<String>,
    /// Job types routed by a header's value: type → header.
    routes: BTreeMap<String, String>,
}

/// Fresh ids drawn per shard of the set, at most, looking for one of a
/// value's shard: `count × 64` draws fail to find one with probability
/// about `e^-64`.
const ID_DRAWS_PER_SHARD: usize = 64;

/// Largest shard count accepted.
pub const MAX_SHARDS: usize = keys::MAX_SHARDS;

impl ShardSet {
    /// `count` shards named by `template`, whose `{shard}` is replaced by
    /// the shard's index, two digits at least (`s3://bucket/app/shard-{shard}`
    /// gives `…/shard-00` to `…/shard-05` for 6).
    pub fn from_template(template: &str, count: usize) -> std::result::Result<Self, ShardError> {
        if !template.contains("{shard}") {
            return Err(ShardError::InvalidSet(format!(
                "the template `{template}` has no `{{shard}}` to replace with each shard's index"
            )));
        }
        Self::from_urls(
            (0..count)
                .map(|i| keys::shard_url(template, i, count))
                .collect(),
        )
    }

    /// The shards' store URLs, in shard order (1 to [`MAX_SHARDS`],
    /// distinct).
    pub fn from_urls(urls: Vec<String>) -> std::result::Result<Self, ShardError> {
        if urls.is_empty() || urls.len() > MAX_SHARDS {
            return Err(ShardError::InvalidSet(format!(
                "{} shards: a set has 1 to {MAX_SHARDS}",
                urls.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for u in &urls {
            if !seen.insert(u.trim_end_matches('/')) {
                return Err(ShardError::InvalidSet(format!(
                    "`{u}` is listed twice: two shards would share a store"
                )));
            }
        }
        Ok(Self {
            urls,
            routes: BTreeMap::new(),
        })
    }

    /// Route the jobs of `job_type` by the value of their header `header`:
    /// every unkeyed job of the type that carries the header goes to the
    /// shard of its value ([`shard_of_value`](Self::shard_of_value)), so
    /// all jobs of one value (one tenant) meet in one store and a limit per
    /// value (`Concurrency::per_header` on the same header) holds over the
    /// whole set. The job's id is a fresh ULID picked among those of that
    /// shard, so its id still names its shard: joins, reads and cancels
    /// find it as any job's.
    ///
    /// A job of the type without the header goes to the shard of its id,
    /// as before. A keyed job with the header is refused
    /// ([`ShardError::Unroutable`]): its id is its key's, which fixes its
    /// shard by itself. Every process that submits to the set must route
    /// alike (build its `ShardSet` the same way): one that does not places
    /// jobs by id, where they are still found, but a value's limit then
    /// holds per shard only. A second call for the same type replaces the
    /// first. An empty header or one starting `gaffer.` is refused.
    pub fn route_by_header(
        mut self,
        job_type: &str,
        header: &str,
    ) -> std::result::Result<Self, ShardError> {
        if header.is_empty() || header.starts_with(keys::RESERVED_HEADER_PREFIX) {
            return Err(ShardError::InvalidSet(format!(
                "`{job_type}` cannot route by the header `{header}`: it is empty or reserved \
                 (`{}…`)",
                keys::RESERVED_HEADER_PREFIX
            )));
        }
        self.routes.insert(job_type.to_string(), header.to_string());
        Ok(self)
    }

    /// The header the jobs of `job_type` are routed by, if the set routes
    /// the type by one.
    pub fn route_of(&self, job_type: &str) -> Option<&str> {
        self.routes.get(job_type).map(String::as_str)
    }

    /// The shard of every routed job whose header holds `value`: the
    /// shard of `gaffer.route`, NUL, `value` as [`shard_of`](Self::shard_of)
    /// computes it. The same for every routed type and header, so one
    /// tenant's jobs of every routed type share a store.
    pub fn shard_of_value(&self, value: &str) -> usize {
        self.shard_of(&format!("gaffer.route\0{value}"))
    }

    /// The fresh id for a job submitted as `req` when it has no idempotency
    /// key (a keyed job's id is its key's): a ULID, of the shard of its
    /// header's value when its type is routed and it carries the header.
    pub(crate) fn fresh_id(
        &self,
        req: &gaffer_actors::SubmitRequest,
    ) -> std::result::Result<String, ShardError> {
        let Some((header, value)) = self
            .routes
            .get(&req.job_type)
            .and_then(|h| Some((h, req.headers.get(h)?)))
        else {
            return Ok(ulid::Ulid::new().to_string());
        };
        let unroutable = |reason: String| ShardError::Unroutable {
            job_type: req.job_type.clone(),
            header: header.clone(),
            reason,
        };
        if req.idempotency_key.is_some() {
            return Err(unroutable(
                "it has an idempotency key, whose id fixes its shard by itself (submit it \
                 without the key or without the header, or do not route the type)"
                    .into(),
            ));
        }
        let shard = self.shard_of_value(value);
        (0..self.len() * ID_DRAWS_PER_SHARD)
            .map(|_| ulid::Ulid::new().to_string())
            .find(|id| self.shard_of(id) == shard)
            .ok_or_else(|| {
                unroutable(format!(
                    "no fresh id of shard {shard} turned up in {} draws",
                    self.len() * ID_DRAWS_PER_SHARD
                ))
            })
    }

    /// How many shards.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Never: a set has at least one shard.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// The store URL of `shard` (`None` past the end).
    pub fn url(&self, shard: usize) -> Option<&str> {
        self.urls.get(shard).map(String::as_str)
    }

    /// The shards' store URLs, in shard order.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The shard of the job or batch `id`: `SHA-256(id)`'s first 8 bytes,
    /// big-endian, mod the count.
    pub fn shard_of(&self, id: &str) -> usize {
        keys::shard_of(id, self.urls.len())
    }

    /// The shard of the job submitted with idempotency key `key`.
    pub fn shard_of_key(&self, key: &str) -> usize {
        self.shard_of(&keys::keyed_run_id(key))
    }
}

/// Which shards a process owns, as its orchestrator says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// These shards.
    Listed(Vec<usize>),
    /// Every shard `s` with `s % replicas == ordinal` (a StatefulSet's pod
    /// `ordinal` of `replicas`).
    Ordinal {
        /// This replica, 0-based.
        ordinal: usize,
        /// Replicas in all.
        replicas: usize,
    },
}

impl Placement {
    /// `Ordinal` from a StatefulSet pod's hostname (`HOSTNAME`, as
    /// Kubernetes sets it: `{statefulset}-{ordinal}`).
    pub fn from_hostname(replicas: usize) -> std::result::Result<Self, ShardError> {
        let host = std::env::var("HOSTNAME").map_err(|_| {
            ShardError::InvalidPlacement(
                "HOSTNAME is not set: a StatefulSet pod has it; elsewhere list the shards".into(),
            )
        })?;
        Self::from_pod_name(&host, replicas)
    }

    /// `Ordinal` from a pod name `{statefulset}-{ordinal}`.
    pub fn from_pod_name(name: &str, replicas: usize) -> std::result::Result<Self, ShardError> {
        let ordinal = name
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<usize>().ok())
            .ok_or_else(|| {
                ShardError::InvalidPlacement(format!(
                    "`{name}` does not end in `-{{ordinal}}` as a StatefulSet pod's name does"
                ))
            })?;
        if replicas == 0 || ordinal >= replicas {
            return Err(ShardError::InvalidPlacement(format!(
                "ordinal {ordinal} of {replicas} replicas: the ordinal must be below the \
                 replica count (set it to the StatefulSet's `replicas`)"
            )));
        }
        Ok(Self::Ordinal { ordinal, replicas })
    }

    /// The shards of `set` this process owns, ascending.
    pub fn owned(&self, set: &ShardSet) -> std::result::Result<Vec<usize>, ShardError> {
        let owned: Vec<usize> = match self {
            Self::Listed(shards) => {
                if let Some(bad) = shards.iter().find(|s| **s >= set.len()) {
                    return Err(ShardError::InvalidPlacement(format!(
                        "shard {bad} is listed, but the set has {} (0 to {})",
                        set.len(),
                        set.len() - 1
                    )));
                }
                let mut s = shards.clone();
                s.sort_unstable();
                s.dedup();
                s
            }
            Self::Ordinal { ordinal, replicas } => {
                if *replicas == 0 || ordinal >= replicas {
                    return Err(ShardError::InvalidPlacement(format!(
                        "ordinal {ordinal} of {replicas} replicas"
                    )));
                }
                (0..set.len())
                    .filter(|s| s % replicas == *ordinal)
                    .collect()
            }
        };
        Ok(owned)
    }
}

/// How a shard stands on this process ([`ShardedEngine::shard_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardStatus {
    /// Its engine runs here.
    Up,
    /// Its engine stopped (fenced, its store closed, or its tree stopped);
    /// its keeper reopens it once the shard is this process's to take again
    /// (see docs/shards.md, *Shards that come back*).
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

/// Shard events buffered per subscriber before a slow one lags.
const SHARD_EVENTS: usize = 256;

/// Configures and starts a [`ShardedEngine`]: the shard set, the
/// placement, and how each shard's keeper brings a stopped shard back.
#[derive(Debug, Clone)]
pub struct ShardedEngineBuilder {
    set: ShardSet,
    placement: Placement,
    supervision: Supervision,
}

impl ShardedEngineBuilder {
    /// A stopped shard is first looked at (and reopened, if it is still
    /// this process's) after `base`, doubling with each stop or failed
    /// reopen in a row up to `max`; an engine that stayed up a minute
    /// starts the count again. Default 1 s to 60 s.
    pub fn reopen_backoff(mut self, base: Duration, max: Duration) -> Self {
        self.supervision.backoff_base = base;
        self.supervision.backoff_max = max;
        self
    }

    /// How often the store of a shard another writer holds is looked at
    /// (a reader's manifest poll: on S3, a few GETs each). Default 2 s.
    pub fn probe_interval(mut self, every: Duration) -> Self {
        self.supervision.probe_interval = every;
        self
    }

    /// How many of its beat intervals the writer that holds a shard's store
    /// may go without a new beat (plus two probe intervals, for the
    /// reader's lag) before it counts as gone and the shard is retaken. The
    /// interval is the writer's own, from its beat record (gaffer's engines
    /// beat every 5 s unless their `OpenOptions::liveness_heartbeat` says
    /// otherwise). At least 1; default 3.
    pub fn stale_beats(mut self, beats: u32) -> Self {
        self.supervision.stale_beats = beats;
        self
    }

    /// Start an engine on every shard the placement gives this process;
    /// `make(shard, url)` builds each (the same registrations on every
    /// shard: any job may land on any shard), at the start and again at
    /// each reopen. The engines start one after another; if one fails,
    /// those started are shut down and the error returned.
    ///
    /// The first start on a store writes its shard marker (`index/count`);
    /// every later start checks it, and a store written as another shard or
    /// under another count fails with
    /// [`EngineError::ShardMismatch`](crate::Error::ShardMismatch)
    /// before any job runs: a set restarted with another count would route
    /// ids to stores that do not hold them.
    ///
    /// A start takes its shards: opening a store fences whichever process
    /// wrote it. Only a reopen waits for the other writer to be gone.
    pub async fn start<F>(self, make: F) -> Result<ShardedEngine>
    where
        F: Fn(usize, &str) -> EngineBuilder + Send + Sync + 'static,
    {
        self.supervision.validate()?;
        let owned = self.placement.owned(&self.set)?;
        let make: Arc<MakeFn> = Arc::new(make);
        let count = self.set.len();
        let mut opened = Vec::new();
        for shard in owned {
            match keeper::open(&*make, shard, count, &self.set.urls[shard]).await {
                Ok(o) => opened.push((shard, o)),
                Err(e) => {
                    for (_, o) in &opened {
                        let _ = o.engine.shutdown().await;
                    }
                    return Err(e);
                }
            }
        }
        let (events, _) = broadcast::channel(SHARD_EVENTS);
        let mut shards = BTreeMap::new();
        let mut left = opened.into_iter();
        while let Some((shard, o)) = left.next() {
            let engine = o.engine.clone();
            let (slot, slot_rx) = watch::channel(Slot {
                engine: Some(engine.clone()),
                status: ShardStatus::Up,
            });
            let args = KeeperArgs {
                shard,
                count,
                url: self.set.urls[shard].clone(),
                make: make.clone(),
                supervision: self.supervision.clone(),
                events: events.clone(),
                slot,
                opened: o,
            };
            match Actor::spawn(None, Keeper, args).await {
                Ok((keeper, _)) => {
                    shards.insert(
                        shard,
                        Kept {
                            keeper,
                            slot: slot_rx,
                        },
                    );
                }
                Err(e) => {
                    // Everything started so far is shut down.
                    let _ = engine.shutdown().await;
                    for (_, o) in left {
                        let _ = o.engine.shutdown().await;
                    }
                    let started = ShardedEngine {
                        set: self.set,
                        shards,
                        events: events.downgrade(),
                    };
                    started.shutdown().await;
                    return Err(crate::Error::ActorUnavailable {
                        actor: "shard keeper",
                        reason: format!("shard {shard}'s keeper did not start: {e}"),
                    });
                }
            }
        }
        Ok(ShardedEngine {
            set: self.set,
            shards,
            events: events.downgrade(),
        })
    }
}

/// An owned shard: its keeper, and what the keeper publishes.
#[derive(Debug)]
struct Kept {
    keeper: ActorRef<KeeperMessage>,
    slot: watch::Receiver<Slot>,
}

/// One engine per owned shard, each its own supervision tree: a shard
/// whose store is fenced stops alone while the others go on, and its
/// keeper brings it back once it is this process's to take again (see
/// [`ShardedEngineBuilder`] and docs/shards.md, *Shards that come back*).
pub struct ShardedEngine {
    set: ShardSet,
    shards: BTreeMap<usize, Kept>,
    /// Weak: the keepers hold the senders, so the stream ends when they
    /// have all stopped.
    events: broadcast::WeakSender<ShardEvent>,
}

impl std::fmt::Debug for ShardedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedEngine")
            .field("set", &self.set)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

impl ShardedEngine {
    /// Configure a sharded engine over `set`, owning the shards `placement`
    /// gives this process.
    pub fn builder(set: ShardSet, placement: Placement) -> ShardedEngineBuilder {
        ShardedEngineBuilder {
            set,
            placement,
            supervision: Supervision::default(),
        }
    }

    /// [`ShardedEngineBuilder::start`] with the default supervision.
    pub async fn start<F>(set: ShardSet, placement: &Placement, make: F) -> Result<Self>
    where
        F: Fn(usize, &str) -> EngineBuilder + Send + Sync + 'static,
    {
        Self::builder(set, placement.clone()).start(make).await
    }

    /// The shard set.
    pub fn set(&self) -> &ShardSet {
        &self.set
    }

    /// The shards this process owns (up or not).
    pub fn owned(&self) -> Vec<usize> {
        self.shards.keys().copied().collect()
    }

    /// The running engine of `shard`: `None` if this process does not own
    /// it or it is down. A shard that comes back has a new engine: take it
    /// again (handles and subscriptions of the old one end with it).
    pub fn engine(&self, shard: usize) -> Option<Engine> {
        self.shards.get(&shard)?.slot.borrow().engine.clone()
    }

    /// How `shard` stands here (`None` if this process does not own it).
    pub fn shard_status(&self, shard: usize) -> Option<ShardStatus> {
        Some(self.shards.get(&shard)?.slot.borrow().status.clone())
    }

    /// The shards' events from now on: down, held by another writer,
    /// back, stopped. The stream ends once every shard's keeper has
    /// stopped (after [`shutdown`](Self::shutdown)).
    pub fn subscribe(&self) -> broadcast::Receiver<ShardEvent> {
        match self.events.upgrade() {
            Some(events) => events.subscribe(),
            // Every keeper stopped: an ended stream.
            None => broadcast::channel(1).1,
        }
    }

    /// The running engine of the shard of `id`: `NotOwned` if another
    /// process owns that shard, `Down` while it is down here.
    pub fn engine_of(&self, id: &str) -> std::result::Result<Engine, ShardError> {
        let shard = self.set.shard_of(id);
        let Some(kept) = self.shards.get(&shard) else {
            return Err(ShardError::NotOwned {
                id: id.to_string(),
                shard,
                owned: self.owned(),
            });
        };
        let slot = kept.slot.borrow();
        slot.engine.clone().ok_or_else(|| ShardError::Down {
            shard,
            reason: slot.status.reason(),
        })
    }

    /// Submit a job to its shard's engine (`NotOwned` if another process
    /// owns that shard, `Down` at once while it is down here).
    pub async fn submit<J: Job>(&self, job: J) -> Result<JobHandle<J>> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options.
    pub async fn submit_with<J: Job>(&self, job: J, opts: SubmitOptions) -> Result<JobHandle<J>> {
        let mut req = submit_request(&job, opts)?;
        let fresh = self.set.fresh_id(&req)?;
        let id = pin_job_id(&mut req, fresh);
        let engine = self.engine_of(&id)?;
        let submitted = engine.jobs.submit(req).await?;
        Ok(JobHandle::submitted(submitted, engine.jobs.clone()))
    }

    /// The batch `id` of pipeline `P`, on its shard's engine (a batch
    /// lives in the shard of its id).
    pub fn batch<P: crate::Pipeline>(&self, id: &str) -> Result<crate::Batch<P>> {
        self.engine_of(id)?.batch(id)
    }

    /// A handle on the job `id`, on its shard's running engine.
    pub fn handle<J: Job>(&self, id: &str) -> Result<JobHandle<J>> {
        self.engine_of(id)?.handle(id)
    }

    /// The keepers, for `serve_cluster`.
    #[cfg(feature = "cluster")]
    pub(crate) fn keepers(&self) -> impl Iterator<Item = (usize, &ActorRef<KeeperMessage>)> {
        self.shards.iter().map(|(s, k)| (*s, &k.keeper))
    }

    /// Shut every shard's engine down (all at once) and stop keeping them;
    /// answers each shard's result (`ShardError::Down` for a shard that was
    /// down, `ShutDown` for one already shut down).
    pub async fn shutdown(&self) -> Vec<(usize, Result<crate::protocol::ShutdownReport>)> {
        let all = self.shards.iter().map(|(shard, kept)| async move {
            // The keeper always answers: its shutdown task reports, also
            // when it panics; a keeper gone drops the port.
            let answer = kept.keeper.call(KeeperMessage::Shutdown, None).await;
            let result = match answer {
                Ok(ractor::rpc::CallResult::Success(result)) => result,
                // A keeper that died (a bug) leaves the engine it last
                // published: shut that down here.
                _ => {
                    let engine = kept.slot.borrow().engine.clone();
                    match engine {
                        Some(engine) => engine.shutdown().await,
                        None => Err(crate::Error::ShutDown),
                    }
                }
            };
            (*shard, result)
        });
        futures_util::future::join_all(all).await
    }
}

/// A [`Client`] per shard: submits each job to its shard's inbox and reads
/// each job in its shard, from a process that owns none.
#[derive(Debug)]
pub struct ShardedClient {
    set: ShardSet,
    clients: Vec<Client>,
}

impl ShardedClient {
    /// Open a client on every shard of `set`; `make(shard, url)` configures
    /// each (`Client::builder().store(Store::url(url))` and the engines' queue
    /// settings). Fails if a shard's store was never opened by an engine,
    /// or if its shard marker names another shard or another count
    /// ([`EngineError::ShardMismatch`](crate::Error::ShardMismatch)).
    pub async fn open<F>(set: ShardSet, mut make: F) -> Result<Self>
    where
        F: FnMut(usize, &str) -> ClientBuilder,
    {
        let mut clients = Vec::with_capacity(set.len());
        for (shard, url) in set.urls.iter().enumerate() {
            let place = gaffer_actors::ShardPlace {
                index: shard,
                count: set.len(),
                url: url.clone(),
            };
            let error = match make(shard, url).open().await {
                Ok(client) => match client.check_shard(&place).await {
                    Ok(()) => {
                        clients.push(client);
                        continue;
                    }
                    Err(e) => {
                        client.close().await;
                        e
                    }
                },
                Err(e) => e,
            };
            // The shards opened so far are closed, not left to their drop.
            for c in clients {
                c.close().await;
            }
            return Err(error);
        }
        Ok(Self { set, clients })
    }

    /// The shard set.
    pub fn set(&self) -> &ShardSet {
        &self.set
    }

    /// The client of `shard`.
    pub fn client(&self, shard: usize) -> Option<&Client> {
        self.clients.get(shard)
    }

    /// The client of the shard of `id`.
    pub fn client_of(&self, id: &str) -> &Client {
        &self.clients[self.set.shard_of(id)]
    }

    /// Submit a job through its shard's inbox.
    pub async fn submit<J: Job>(&self, job: J) -> Result<ClientHandle<J>> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options.
    pub async fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> Result<ClientHandle<J>> {
        let req = submit_request(&job, opts)?;
        // An unkeyed job's id is its request's: fresh, and of its value's
        // shard when its type is routed by a header.
        let request_id = self.set.fresh_id(&req)?;
        let id = job_id_of(&req, &request_id);
        self.client_of(&id).send_submit(req, request_id).await
    }

    /// Wait for the job `id` to end, in its shard (see [`Client::join`]).
    pub async fn join<J: Job>(&self, id: &str) -> Result<Result<J::Output, crate::job::JobError>> {
        self.client_of(id).join::<J>(id).await
    }

    /// The state of the job `id`, in its shard (see [`Client::status`]).
    pub async fn status(&self, id: &str) -> Result<crate::job::JobState> {
        self.client_of(id).status(id).await
    }

    /// The job's result if it has ended, without waiting, in its shard
    /// (see [`Client::outcome`]).
    pub async fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> Result<Option<Result<J::Output, crate::job::JobError>>> {
        self.client_of(id).outcome::<J>(id).await
    }

    /// Close every client.
    pub async fn close(self) {
        for c in self.clients {
            c.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gaffer_actors::SubmitRequest;

    #[test]
    fn a_template_names_each_shard_and_ids_spread_over_all() {
        let set = ShardSet::from_template("s3://b/app/shard-{shard}", 6).unwrap();
        assert_eq!(set.url(0), Some("s3://b/app/shard-00"));
        assert_eq!(set.url(5), Some("s3://b/app/shard-05"));
        assert_eq!(
            ShardSet::from_template("file:///d/{shard}", 120)
                .unwrap()
                .url(7),
            Some("file:///d/007")
        );
        let mut counts = [0usize; 6];
        for i in 0..6000 {
            counts[set.shard_of(&format!("job-{i}"))] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
        // A key's shard is its id's.
        assert_eq!(
            set.shard_of_key("order-7"),
            set.shard_of(&keys::keyed_run_id("order-7"))
        );
        assert!(ShardSet::from_template("s3://b/app", 3).is_err());
        assert!(ShardSet::from_urls(vec![]).is_err());
        assert!(ShardSet::from_urls(vec!["s3://b/a".into(), "s3://b/a/".into()]).is_err());
    }

    fn request(job_type: &str, tenant: Option<&str>, key: Option<&str>) -> SubmitRequest {
        let mut req = SubmitRequest {
            job_type: job_type.into(),
            ..Default::default()
        };
        if let Some(t) = tenant {
            req.headers.insert("tenant".into(), t.into());
        }
        req.idempotency_key = key.map(str::to_string);
        req
    }

    #[test]
    fn a_routed_types_fresh_ids_belong_to_the_shard_of_its_headers_value() {
        let set = ShardSet::from_template("s3://b/app/shard-{shard}", 6)
            .unwrap()
            .route_by_header("report", "tenant")
            .unwrap();
        assert_eq!(set.route_of("report"), Some("tenant"));
        assert_eq!(set.route_of("other"), None);
        // Values spread over the shards; each value's jobs meet in one.
        let mut seen = std::collections::HashSet::new();
        for v in 0..60 {
            let value = format!("tenant-{v}");
            let shard = set.shard_of_value(&value);
            seen.insert(shard);
            for _ in 0..5 {
                let id = set
                    .fresh_id(&request("report", Some(&value), None))
                    .unwrap();
                assert_eq!(set.shard_of(&id), shard, "{value}: {id}");
                assert!(ulid::Ulid::from_string(&id).is_ok(), "{id}");
            }
        }
        assert_eq!(seen.len(), 6, "{seen:?}");
        // Without the header, or of another type: a plain fresh ULID.
        let ids: std::collections::HashSet<usize> = (0..200)
            .map(|_| set.shard_of(&set.fresh_id(&request("report", None, None)).unwrap()))
            .collect();
        assert_eq!(ids.len(), 6);
        assert!(
            set.fresh_id(&request("other", Some("a"), Some("k")))
                .is_ok()
        );
        // A keyed job with the header cannot be placed by it.
        assert!(matches!(
            set.fresh_id(&request("report", Some("a"), Some("k"))),
            Err(ShardError::Unroutable { .. })
        ));
        // Reserved or empty headers are refused.
        let plain = ShardSet::from_template("s3://b/{shard}", 2).unwrap();
        assert!(plain.clone().route_by_header("report", "").is_err());
        assert!(plain.route_by_header("report", "gaffer.type").is_err());
    }

    #[test]
    fn placement_by_list_or_by_pod_ordinal() {
        let set = ShardSet::from_template("file:///d/{shard}", 6).unwrap();
        assert_eq!(
            Placement::Listed(vec![4, 1, 4]).owned(&set).unwrap(),
            vec![1, 4]
        );
        assert!(Placement::Listed(vec![6]).owned(&set).is_err());
        let p = Placement::from_pod_name("gaffer-1", 3).unwrap();
        assert_eq!(p.owned(&set).unwrap(), vec![1, 4]);
        assert!(Placement::from_pod_name("gaffer-3", 3).is_err());
        assert!(Placement::from_pod_name("gaffer", 3).is_err());
        // Every shard has exactly one owner among the replicas.
        let mut all: Vec<usize> = (0..3)
            .flat_map(|o| {
                Placement::Ordinal {
                    ordinal: o,
                    replicas: 3,
                }
                .owned(&set)
                .unwrap()
            })
            .collect();
        all.sort();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
    }
}
