//! BatchRegistry: the registry of running batches and the parent of their
//! coordinators. Owns the map batch id → coordinator, the runs in progress,
//! the batches locked for forgetting, the callers watching a run, and the
//! replacement coordinators waiting for a dead one to leave. Forwards item
//! settlements to the right coordinator.
//!
//! A run ends with `Release`, sent by its coordinator when it finishes (with
//! the caller's reply port, so the caller is answered only once the batch has
//! left the registry) or by its driver when the run failed or was dropped.
//! The registry then tells every watcher.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::batch::{BatchOutcome, BatchProgress, BatchReply, BatchSpec};
use crate::coordinator::{Coordinator, CoordinatorArguments, CoordinatorMessage};
use crate::error::{EngineError, Result};
use crate::records::{BatchHead, ItemMarker};
use crate::services::Services;
use crate::settle::ItemEnd;

/// A caller waiting for a run's end.
pub type WatchReply = RpcReplyPort<Result<BatchOutcome>>;
/// The answer to a coordinator's start.
pub type StartReply = RpcReplyPort<Result<CoordinatorRef>>;

/// Messages of the batches registry.
#[derive(Debug)]
pub enum RegistryMessage {
    /// Start a coordinator for a run of this batch (`BatchRunning` if one
    /// runs). `replacing` names a coordinator of the same run that died: the
    /// new one starts as soon as the registry has seen it go.
    Start {
        /// The run.
        spec: Box<BatchSpec>,
        /// The dead coordinator this one replaces.
        replacing: Option<ActorId>,
        /// Answered with the new coordinator.
        reply: StartReply,
    },
    /// An item settled: forward to its batch's coordinator, if running.
    ItemSettled(ItemEnd),
    /// Progress of a running batch (`None` if not running here).
    GetProgress(String, RpcReplyPort<Option<BatchProgress>>),
    /// Lock a batch that is not running, so no run starts while it is forgotten.
    Lock(String, RpcReplyPort<bool>),
    /// Release a lock.
    Unlock(String),
    /// A run ended with `result`: its coordinator `coordinator` (if it is
    /// still the batch's) leaves the registry and is stopped, every watcher
    /// is told, then `reply` (the run's caller) and `done` are answered.
    Release {
        /// Batch.
        batch_id: String,
        /// The run's coordinator, if it has one.
        coordinator: Option<ActorId>,
        /// How the run ended.
        result: Result<BatchOutcome>,
        /// The run's caller.
        reply: Option<BatchReply>,
        /// Told once done.
        done: Option<RpcReplyPort<()>>,
    },
    /// Answer `reply` when the run of this batch in progress ends
    /// (`BatchNotRunning` if none is).
    Watch(String, WatchReply),
    /// The engine is shutting down: start no more runs.
    Close,
    /// Kill the coordinator of a running batch (feature `testing`).
    #[cfg(feature = "testing")]
    Kill(String),
}

impl From<ItemEnd> for RegistryMessage {
    fn from(end: ItemEnd) -> Self {
        Self::ItemSettled(end)
    }
}

impl TryFrom<RegistryMessage> for ItemEnd {
    type Error = RegistryMessage;
    fn try_from(m: RegistryMessage) -> Result<Self, RegistryMessage> {
        match m {
            RegistryMessage::ItemSettled(end) => Ok(end),
            other => Err(other),
        }
    }
}

/// The typed handle of the batches registry, for those that reach it from
/// outside the tree (a run's driver, the sweeper's retention pass, a watch, the
/// supervisor). It follows the registry across restarts: the supervisor
/// republishes the live actor, and every call goes to the registry of now.
#[derive(Debug, Clone)]
pub struct RegistryRef(tokio::sync::watch::Receiver<ActorRef<RegistryMessage>>);

/// Attempts of a watch whose registry keeps dying before the run ends.
const WATCH_ATTEMPTS: u32 = 20;

impl RegistryRef {
    pub(crate) fn new(book: tokio::sync::watch::Receiver<ActorRef<RegistryMessage>>) -> Self {
        Self(book)
    }

    /// The registry actor now.
    pub fn get(&self) -> ActorRef<RegistryMessage> {
        self.0.borrow().clone()
    }

    /// Start a coordinator for a run of `spec`; `replacing` names a dead
    /// coordinator of the same run (the new one starts once the registry saw
    /// it go). `None` if the registry stopped before it answered.
    pub(crate) async fn start(
        &self,
        spec: BatchSpec,
        replacing: Option<ActorId>,
    ) -> Option<Result<CoordinatorRef>> {
        let answer = self
            .get()
            .call(
                |reply| RegistryMessage::Start {
                    spec: Box::new(spec),
                    replacing,
                    reply,
                },
                None,
            )
            .await
            .ok()?;
        answer.success_or(()).ok()
    }

    /// End a run with `result` and wait until the registry has let it go (its
    /// coordinator, if still the batch's, is stopped; the watchers are told).
    /// Returns at once if the registry is gone (a new one holds no run).
    pub(crate) async fn release(
        &self,
        batch_id: &str,
        coordinator: Option<ActorId>,
        result: Result<BatchOutcome>,
    ) {
        let _ = self
            .get()
            .call(
                |done| RegistryMessage::Release {
                    batch_id: batch_id.to_string(),
                    coordinator,
                    result,
                    reply: None,
                    done: Some(done),
                },
                None,
            )
            .await;
    }

    /// End a run whose caller dropped it (from a `Drop`: does not wait).
    pub(crate) fn abandon(&self, batch_id: &str, coordinator: ActorId) {
        let _ = self.get().cast(RegistryMessage::Release {
            batch_id: batch_id.to_string(),
            coordinator: Some(coordinator),
            result: Err(EngineError::BatchAbandoned(batch_id.to_string())),
            reply: None,
            done: None,
        });
    }

    /// Lock a batch that is not running, so that no run starts while it is
    /// forgotten: `false` if it runs (or is locked).
    pub(crate) async fn lock(&self, batch_id: &str) -> Result<bool> {
        ractor::call!(self.get(), RegistryMessage::Lock, batch_id.to_string())
            .map_err(|e| EngineError::unavailable("batches registry", e))
    }

    /// Release a lock taken with [`RegistryRef::lock`].
    pub(crate) fn unlock(&self, batch_id: &str) {
        let _ = self
            .get()
            .cast(RegistryMessage::Unlock(batch_id.to_string()));
    }

    /// Progress of a running batch (`None` if it is not running here).
    pub(crate) async fn progress(&self, batch_id: &str) -> Result<Option<BatchProgress>> {
        ractor::call!(
            self.get(),
            RegistryMessage::GetProgress,
            batch_id.to_string()
        )
        .map_err(|e| EngineError::unavailable("batches registry", e))
    }

    /// Wait for the end of the run of `batch_id` in progress. A registry that
    /// restarts drops the wait: it is asked again (the run goes on: its driver
    /// replaces the coordinator). Bounded: gives up after the registry died
    /// [`WATCH_ATTEMPTS`] times under the wait.
    pub(crate) async fn watch(&self, batch_id: &str) -> Result<BatchOutcome> {
        let mut last = String::new();
        for attempt in 0..WATCH_ATTEMPTS {
            match ractor::call!(self.get(), RegistryMessage::Watch, batch_id.to_string()) {
                Ok(result) => return result,
                Err(e) => {
                    last = e.to_string();
                    tokio::time::sleep(std::time::Duration::from_millis(10) * (attempt + 1)).await;
                }
            }
        }
        Err(EngineError::unavailable(
            "batches registry",
            format!("it kept restarting while the run of `{batch_id}` was watched ({last})"),
        ))
    }

    /// The engine is shutting down: the registry starts no more runs.
    pub(crate) fn close(&self) {
        let _ = self.get().cast(RegistryMessage::Close);
    }

    /// Kill the coordinator of a running batch (feature `testing`).
    #[cfg(feature = "testing")]
    pub(crate) fn kill_coordinator(&self, batch_id: &str) {
        let _ = self.get().cast(RegistryMessage::Kill(batch_id.to_string()));
    }
}

/// The typed handle of one run's coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorRef(pub(crate) ActorRef<CoordinatorMessage>);

impl CoordinatorRef {
    /// The coordinator's actor id.
    pub fn get_id(&self) -> ActorId {
        self.0.get_id()
    }

    /// Begin the run on its complete manifest; answers when every item
    /// settled. `Err` if the coordinator died before it answered.
    pub(crate) async fn begin(
        &self,
        head: BatchHead,
    ) -> std::result::Result<Result<BatchOutcome>, ractor::RactorErr<CoordinatorMessage>> {
        ractor::call!(self.0, CoordinatorMessage::Begin, Box::new(head))
    }

    /// An item of the run settled.
    pub(crate) fn item_settled(&self, key: String, job_id: String, marker: Box<ItemMarker>) {
        let _ = self.0.cast(CoordinatorMessage::ItemSettled {
            key,
            job_id,
            marker,
        });
    }

    /// The run's counters now (`None` if the coordinator is gone).
    pub(crate) async fn progress(&self) -> Option<BatchProgress> {
        ractor::call!(self.0, CoordinatorMessage::GetProgress).ok()
    }
}

/// The batches registry actor.
#[derive(Debug)]
pub struct BatchRegistry;

/// State of the registry.
#[derive(Debug)]
pub struct RegistryState {
    services: Arc<Services>,
    running: HashMap<String, CoordinatorRef>,
    by_actor: HashMap<ActorId, String>,
    /// Batches with a run in progress (its coordinator may be between a death
    /// and its replacement).
    runs: HashSet<String>,
    locked: HashSet<String>,
    /// The engine is shutting down.
    closed: bool,
    watchers: HashMap<String, Vec<WatchReply>>,
    /// Replacements waiting for the coordinator they replace to leave.
    replacing: HashMap<ActorId, (Box<BatchSpec>, StartReply)>,
}

impl RegistryState {
    async fn start(
        &mut self,
        myself: &ActorRef<RegistryMessage>,
        spec: Box<BatchSpec>,
        reply: StartReply,
    ) {
        let id = spec.batch_id.clone();
        let args = CoordinatorArguments {
            spec: *spec,
            services: self.services.clone(),
            batches: myself.clone(),
        };
        match Actor::spawn_linked(None, Coordinator, args, myself.get_cell()).await {
            Ok((coordinator, _)) => {
                self.by_actor.insert(coordinator.get_id(), id.clone());
                let coordinator = CoordinatorRef(coordinator);
                self.running.insert(id.clone(), coordinator.clone());
                self.runs.insert(id);
                let _ = reply.send(Ok(coordinator));
            }
            Err(e) => {
                let _ = reply.send(Err(EngineError::unavailable("batch coordinator", e)));
            }
        }
    }

    fn release(
        &mut self,
        batch_id: &str,
        coordinator: Option<ActorId>,
        result: Result<BatchOutcome>,
    ) {
        match self.running.get(batch_id) {
            Some(c) if Some(c.get_id()) == coordinator => {
                self.by_actor.remove(&c.get_id());
                c.0.stop(None);
                self.running.remove(batch_id);
            }
            // Another run's coordinator: this release is stale.
            Some(_) => return,
            None => {}
        }
        self.runs.remove(batch_id);
        for watcher in self.watchers.remove(batch_id).unwrap_or_default() {
            let _ = watcher.send(result.clone());
        }
    }
}

impl Actor for BatchRegistry {
    type Msg = RegistryMessage;
    type State = RegistryState;
    type Arguments = Arc<Services>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        services: Arc<Services>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(RegistryState {
            services,
            running: HashMap::new(),
            by_actor: HashMap::new(),
            runs: HashSet::new(),
            locked: HashSet::new(),
            closed: false,
            watchers: HashMap::new(),
            replacing: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RegistryMessage::Start {
                spec,
                replacing,
                reply,
            } => {
                let id = &spec.batch_id;
                if state.closed {
                    let _ = reply.send(Err(EngineError::ShutDown));
                    return Ok(());
                }
                match (state.running.get(id), replacing) {
                    // The coordinator it replaces has not left yet.
                    (Some(c), Some(dead)) if c.get_id() == dead => {
                        state.replacing.insert(dead, (spec, reply));
                    }
                    (Some(_), _) => {
                        let _ = reply.send(Err(EngineError::BatchRunning(id.clone())));
                    }
                    (None, None) if state.runs.contains(id) || state.locked.contains(id) => {
                        let _ = reply.send(Err(EngineError::BatchRunning(id.clone())));
                    }
                    (None, _) if state.locked.contains(id) => {
                        let _ = reply.send(Err(EngineError::BatchRunning(id.clone())));
                    }
                    (None, _) => state.start(&myself, spec, reply).await,
                }
            }
            RegistryMessage::ItemSettled(ItemEnd {
                batch_id,
                key,
                job_id,
                marker,
            }) => {
                if let Some(c) = state.running.get(&batch_id) {
                    c.item_settled(key, job_id, marker);
                }
            }
            RegistryMessage::GetProgress(batch_id, reply) => {
                match state.running.get(&batch_id).cloned() {
                    Some(c) => {
                        // Answer from a task: the coordinator may be busy enqueueing.
                        tokio::spawn(async move {
                            let _ = reply.send(c.progress().await);
                        });
                    }
                    None => {
                        let _ = reply.send(None);
                    }
                }
            }
            RegistryMessage::Lock(batch_id, reply) => {
                let ok = !state.running.contains_key(&batch_id)
                    && !state.runs.contains(&batch_id)
                    && state.locked.insert(batch_id);
                let _ = reply.send(ok);
            }
            RegistryMessage::Unlock(batch_id) => {
                state.locked.remove(&batch_id);
            }
            RegistryMessage::Release {
                batch_id,
                coordinator,
                result,
                reply,
                done,
            } => {
                state.release(&batch_id, coordinator, result.clone());
                if let Some(reply) = reply {
                    let _ = reply.send(result);
                }
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            RegistryMessage::Watch(batch_id, reply) => {
                if state.runs.contains(&batch_id) {
                    state.watchers.entry(batch_id).or_default().push(reply);
                } else {
                    let _ = reply.send(Err(EngineError::BatchNotRunning(batch_id)));
                }
            }
            RegistryMessage::Close => state.closed = true,
            #[cfg(feature = "testing")]
            RegistryMessage::Kill(batch_id) => {
                if let Some(c) = state.running.get(&batch_id) {
                    c.0.kill();
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorTerminated(who, ..) | SupervisionEvent::ActorFailed(who, _) =
            event
        {
            let dead = who.get_id();
            if let Some(id) = state.by_actor.remove(&dead) {
                // A coordinator that dies drops its caller's reply port: the
                // run's driver starts a replacement (the run stays in
                // progress), or ends the run.
                state.running.remove(&id);
            }
            if let Some((spec, reply)) = state.replacing.remove(&dead) {
                state.start(&myself, spec, reply).await;
            }
        }
        Ok(())
    }
}
