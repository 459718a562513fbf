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
//! restart. Producers in other processes send through each shard's inbox
//! ([`ShardedClient`]). The shard count is fixed for the life of the data:
//! changing it moves every id's shard (see docs/shards.md).

use std::collections::BTreeMap;

use gaffer_actors::keys;

use crate::builder::EngineBuilder;
use crate::client::{Client, ClientBuilder, ClientHandle};
use crate::engine::Engine;
use crate::error::Result;
use crate::handle::JobHandle;
use crate::job::Job;
use crate::submit::{SubmitOptions, job_id_of, pin_job_id, submit_request};

/// What is wrong with a shard set, a placement, or a shard asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The shard set cannot be built as given.
    #[error("invalid shard set: {0}")]
    InvalidSet(String),
    /// The placement cannot be worked out (no hostname ordinal, an ordinal
    /// out of range …).
    #[error("invalid placement: {0}")]
    InvalidPlacement(String),
    /// The job or batch belongs to a shard this process does not own.
    #[error(
        "`{id}` belongs to shard {shard}, which this process does not own (it owns {owned:?}); \
         submit or read it through a ShardedClient, or on the process that owns the shard"
    )]
    NotOwned {
        /// The job or batch id.
        id: String,
        /// Its shard.
        shard: usize,
        /// The shards this process owns.
        owned: Vec<usize>,
    },
}

/// The stores of one workload, in shard order. The count is fixed at
/// deploy: every id's shard depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSet {
    urls: Vec<String>,
}

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
        Ok(Self { urls })
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

/// One engine per owned shard, each its own supervision tree: a shard
/// whose store is fenced stops alone while the others go on.
#[derive(Debug)]
pub struct ShardedEngine {
    set: ShardSet,
    engines: BTreeMap<usize, Engine>,
}

impl ShardedEngine {
    /// Start an engine on every shard of `set` that `placement` gives this
    /// process; `make(shard, url)` builds each (the same registrations on
    /// every shard: any job may land on any shard). The engines start one
    /// after another; if one fails, those started are shut down and the
    /// error returned.
    ///
    /// The first start on a store writes its shard marker (`index/count`);
    /// every later start checks it, and a store written as another shard or
    /// under another count fails with
    /// [`EngineError::ShardMismatch`](crate::EngineError::ShardMismatch)
    /// before any job runs: a set restarted with another count would route
    /// ids to stores that do not hold them.
    pub async fn start<F>(set: ShardSet, placement: &Placement, mut make: F) -> Result<Self>
    where
        F: FnMut(usize, &str) -> EngineBuilder,
    {
        let owned = placement.owned(&set)?;
        let mut engines = BTreeMap::new();
        for shard in owned {
            let url = &set.urls[shard];
            match make(shard, url)
                .in_shard(shard, set.len(), url)
                .start()
                .await
            {
                Ok(engine) => {
                    engines.insert(shard, engine);
                }
                Err(e) => {
                    for engine in engines.values() {
                        let _ = engine.shutdown().await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(Self { set, engines })
    }

    /// The shard set.
    pub fn set(&self) -> &ShardSet {
        &self.set
    }

    /// The shards this process owns.
    pub fn owned(&self) -> Vec<usize> {
        self.engines.keys().copied().collect()
    }

    /// The engine of `shard`, if this process owns it.
    pub fn engine(&self, shard: usize) -> Option<&Engine> {
        self.engines.get(&shard)
    }

    /// The engine of the shard of `id`, or `NotOwned`.
    pub fn engine_of(&self, id: &str) -> std::result::Result<&Engine, ShardError> {
        let shard = self.set.shard_of(id);
        self.engines
            .get(&shard)
            .ok_or_else(|| ShardError::NotOwned {
                id: id.to_string(),
                shard,
                owned: self.owned(),
            })
    }

    /// Submit a job to its shard's engine (`NotOwned` if another process
    /// owns that shard).
    pub async fn submit<J: Job>(&self, job: J) -> Result<JobHandle<J>> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options.
    pub async fn submit_with<J: Job>(&self, job: J, opts: SubmitOptions) -> Result<JobHandle<J>> {
        let mut req = submit_request(&job, opts)?;
        let id = pin_job_id(&mut req);
        let engine = self.engine_of(&id)?;
        let submitted = engine.jobs.submit(req).await?;
        Ok(JobHandle::submitted(submitted, engine.jobs.clone()))
    }

    /// The batch `id` of pipeline `P`, on its shard's engine (a batch
    /// lives in the shard of its id).
    pub fn batch<P: crate::Pipeline>(&self, id: &str) -> Result<crate::Batch<P>> {
        self.engine_of(id)?.batch(id)
    }

    /// A handle on the job `id`, on its shard's engine.
    pub fn handle<J: Job>(&self, id: &str) -> Result<JobHandle<J>> {
        self.engine_of(id)?.handle(id)
    }

    /// Shut every shard's engine down (all at once); answers each shard's
    /// result.
    pub async fn shutdown(&self) -> Vec<(usize, Result<crate::ShutdownReport>)> {
        let all = self
            .engines
            .iter()
            .map(|(shard, engine)| async move { (*shard, engine.shutdown().await) });
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
    /// each (`Client::builder().store_url(url)` and the engines' queue
    /// settings). Fails if a shard's store was never opened by an engine,
    /// or if its shard marker names another shard or another count
    /// ([`EngineError::ShardMismatch`](crate::EngineError::ShardMismatch)).
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
        let request_id = ulid::Ulid::new().to_string();
        let id = job_id_of(&req, &request_id);
        self.client_of(&id).send_submit(req, request_id).await
    }

    /// Wait for the job `id` to end, in its shard (see [`Client::join`]).
    pub async fn join<J: Job>(&self, id: &str) -> Result<Result<J::Output, crate::JobError>> {
        self.client_of(id).join::<J>(id).await
    }

    /// The state of the job `id`, in its shard (see [`Client::status`]).
    pub async fn status(&self, id: &str) -> Result<crate::JobState> {
        self.client_of(id).status(id).await
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
