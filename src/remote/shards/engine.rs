//! `ShardedEngine`: one engine per owned shard, each kept by its keeper,
//! and its builder.

use super::*;

/// Configures and starts a [`ShardedEngine`]: the shard set, the
/// placement, and how each shard's keeper brings a stopped shard back.
#[derive(Debug, Clone)]
pub struct ShardedEngineBuilder {
    set: ShardSet,
    placement: Placement,
    supervision: Supervision,
    events: broadcast::Sender<ShardEvent>,
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

    /// The shards' events from the start on ([`ShardedEngine::subscribe`]
    /// gives them from its call on): under elastic placement, the first
    /// shards are gained while `start` returns, so subscribe here to see
    /// every one.
    pub fn subscribe(&self) -> broadcast::Receiver<ShardEvent> {
        self.events.subscribe()
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
    ///
    /// Under elastic placement ([`Placement::Etcd`](super::Placement)),
    /// `start` joins etcd (failing with
    /// [`ShardError::Coordinator`](super::ShardError::Coordinator) if it
    /// cannot) and returns: the shards come as the process takes them,
    /// each with a [`ShardEvent::Gained`] ([`subscribe`](Self::subscribe)
    /// before `start` to see them all).
    pub async fn start<F>(self, make: F) -> Result<ShardedEngine>
    where
        F: Fn(usize, &str) -> EngineBuilder + Send + Sync + 'static,
    {
        self.supervision.validate()?;
        let make: Arc<MakeFn> = Arc::new(make);
        #[cfg(feature = "etcd")]
        if let Placement::Etcd(etcd) = &self.placement {
            let (placer, shards, member) =
                super::placer::start(&self.set, etcd, make, self.supervision, self.events.clone())
                    .await?;
            return Ok(ShardedEngine {
                set: self.set,
                shards,
                _fixed: None,
                events: self.events.downgrade(),
                placer: Some(placer),
                member: Some(member),
            });
        }
        let owned = self.placement.owned(&self.set)?;
        let count = self.set.len();
        let mut opened = Vec::new();
        for shard in owned {
            match keeper::open(&*make, shard, count, &self.set.urls[shard], None).await {
                Ok(o) => opened.push((shard, o)),
                Err(e) => {
                    for (_, o) in &opened {
                        let _ = o.engine.shutdown().await;
                    }
                    return Err(e);
                }
            }
        }
        let events = self.events;
        let mut shards = BTreeMap::new();
        let mut left = opened.into_iter();
        while let Some((shard, o)) = left.next() {
            let kept = keep(
                shard,
                &self.set,
                make.clone(),
                self.supervision.clone(),
                events.clone(),
                o,
                None,
            )
            .await;
            match kept {
                Ok(kept) => {
                    shards.insert(shard, kept);
                }
                Err(e) => {
                    // Everything started so far is shut down.
                    for (_, o) in left {
                        let _ = o.engine.shutdown().await;
                    }
                    let started = ShardedEngine::fixed(self.set, shards, &events);
                    started.shutdown().await;
                    return Err(e);
                }
            }
        }
        Ok(ShardedEngine::fixed(self.set, shards, &events))
    }
}

/// One engine per owned shard, each its own supervision tree: a shard
/// whose store is fenced stops alone while the others go on, and its
/// keeper brings it back once it is this process's to take again (see
/// [`ShardedEngineBuilder`] and docs/guide/shards.md, *Shards that come back*).
pub struct ShardedEngine {
    set: ShardSet,
    /// The shards kept now: fixed at the start, or published by the placer
    /// as they move.
    shards: watch::Receiver<KeptShards>,
    /// A fixed placement's map (its sender, kept for the receiver).
    _fixed: Option<watch::Sender<KeptShards>>,
    /// Weak: the keepers (and the placer) hold the senders, so the stream
    /// ends when they have all stopped.
    events: broadcast::WeakSender<ShardEvent>,
    /// Elastic placement's actor, which takes, drains and releases shards.
    #[cfg(feature = "etcd")]
    placer: Option<ActorRef<super::placer::PlacerMessage>>,
    /// This process's member name under elastic placement.
    member: Option<String>,
}

impl std::fmt::Debug for ShardedEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedEngine")
            .field("set", &self.set)
            .field("shards", &*self.shards.borrow())
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

impl ShardedEngine {
    fn fixed(
        set: ShardSet,
        shards: BTreeMap<usize, Kept>,
        events: &broadcast::Sender<ShardEvent>,
    ) -> Self {
        let (fixed, shards) = watch::channel(Arc::new(shards));
        Self {
            set,
            shards,
            _fixed: Some(fixed),
            events: events.downgrade(),
            #[cfg(feature = "etcd")]
            placer: None,
            member: None,
        }
    }

    fn kept(&self) -> KeptShards {
        self.shards.borrow().clone()
    }

    /// This process's member name under elastic placement
    /// ([`Placement::Etcd`](super::Placement)); `None` under a fixed one.
    pub fn member(&self) -> Option<&str> {
        self.member.as_deref()
    }

    /// Configure a sharded engine over `set`, owning the shards `placement`
    /// gives this process.
    pub fn builder(set: ShardSet, placement: Placement) -> ShardedEngineBuilder {
        ShardedEngineBuilder {
            set,
            placement,
            supervision: Supervision::default(),
            events: shard_events(),
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

    /// The shards this process owns now (up or not). Under elastic
    /// placement the answer changes as shards move ([`subscribe`](Self::subscribe)
    /// says when).
    pub fn owned(&self) -> Vec<usize> {
        self.kept().keys().copied().collect()
    }

    /// The running engine of `shard`: `None` if this process does not own
    /// it or it is down. A shard that comes back has a new engine: take it
    /// again (handles and subscriptions of the old one end with it).
    pub fn engine(&self, shard: usize) -> Option<Engine> {
        self.kept().get(&shard)?.slot.borrow().engine.clone()
    }

    /// How `shard` stands here (`None` if this process does not own it).
    pub fn shard_status(&self, shard: usize) -> Option<ShardStatus> {
        Some(self.kept().get(&shard)?.slot.borrow().status.clone())
    }

    /// The shards' events from now on: down, held by another writer,
    /// back, stopped; under elastic placement also gained and lost, with
    /// the reason. The stream ends once every shard's keeper (and the
    /// placer) has stopped (after [`shutdown`](Self::shutdown)).
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
        let shards = self.kept();
        let Some(kept) = shards.get(&shard) else {
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
        crate::job::submit::refuse_debounce(&req, "a shard set")?;
        let id = pin_job_id(&mut req, fresh)?;
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
    pub(crate) fn keepers(&self) -> Vec<(usize, ActorRef<KeeperMessage>)> {
        self.kept()
            .iter()
            .map(|(s, k)| (*s, k.keeper.clone()))
            .collect()
    }

    /// Shut every shard's engine down (all at once) and stop keeping them;
    /// answers each shard's result (`ShardError::Down` for a shard that was
    /// down, `ShutDown` for one already shut down).
    pub async fn shutdown(&self) -> Vec<(usize, Result<crate::protocol::ShutdownReport>)> {
        #[cfg(feature = "etcd")]
        if let Some(placer) = &self.placer {
            // The placer always answers: its closing task reports, also when
            // it panics; a placer gone drops the port, and what it last
            // published is shut down here.
            if let Ok(ractor::rpc::CallResult::Success(all)) = placer
                .call(super::placer::PlacerMessage::Shutdown, None)
                .await
            {
                return all;
            }
        }
        shut_down_kept(&self.kept()).await
    }
}
