//! Batches: the registry of running batches and the parent of their
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
use crate::services::Services;
use crate::settle::ItemEnd;

/// A caller waiting for a run's end.
pub type WatchReply = RpcReplyPort<Result<BatchOutcome>>;
/// The answer to a coordinator's start.
pub type StartReply = RpcReplyPort<Result<ActorRef<CoordinatorMessage>>>;

/// Messages of the batches registry.
#[derive(Debug)]
pub enum BatchesMessage {
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

impl From<ItemEnd> for BatchesMessage {
    fn from(end: ItemEnd) -> Self {
        Self::ItemSettled(end)
    }
}

impl TryFrom<BatchesMessage> for ItemEnd {
    type Error = BatchesMessage;
    fn try_from(m: BatchesMessage) -> Result<Self, BatchesMessage> {
        match m {
            BatchesMessage::ItemSettled(end) => Ok(end),
            other => Err(other),
        }
    }
}

/// Where the batches registry is now (republished by the supervisor when it
/// restarts it): for those that reach it from outside the tree (a run's
/// driver, the sweeper's retention pass, a watch).
#[derive(Debug, Clone)]
pub struct Registry(tokio::sync::watch::Receiver<ActorRef<BatchesMessage>>);

impl Registry {
    pub(crate) fn new(book: tokio::sync::watch::Receiver<ActorRef<BatchesMessage>>) -> Self {
        Self(book)
    }

    /// The registry now.
    pub fn get(&self) -> ActorRef<BatchesMessage> {
        self.0.borrow().clone()
    }
}

/// The batches registry actor.
#[derive(Debug)]
pub struct Batches;

/// State of the registry.
#[derive(Debug)]
pub struct BatchesState {
    services: Arc<Services>,
    running: HashMap<String, ActorRef<CoordinatorMessage>>,
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

impl BatchesState {
    async fn start(
        &mut self,
        myself: &ActorRef<BatchesMessage>,
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
                self.running.insert(id.clone(), coordinator.clone());
                self.runs.insert(id);
                let _ = reply.send(Ok(coordinator));
            }
            Err(e) => {
                let _ = reply.send(Err(EngineError::ActorUnavailable(e.to_string())));
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
                c.stop(None);
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

impl Actor for Batches {
    type Msg = BatchesMessage;
    type State = BatchesState;
    type Arguments = Arc<Services>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        services: Arc<Services>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(BatchesState {
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
            BatchesMessage::Start {
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
            BatchesMessage::ItemSettled(ItemEnd {
                batch_id,
                key,
                job_id,
                marker,
            }) => {
                if let Some(c) = state.running.get(&batch_id) {
                    let _ = c.cast(CoordinatorMessage::ItemSettled {
                        key,
                        job_id,
                        marker,
                    });
                }
            }
            BatchesMessage::GetProgress(batch_id, reply) => {
                match state.running.get(&batch_id).cloned() {
                    Some(c) => {
                        // Answer from a task: the coordinator may be busy enqueueing.
                        tokio::spawn(async move {
                            let _ =
                                reply.send(ractor::call!(c, CoordinatorMessage::GetProgress).ok());
                        });
                    }
                    None => {
                        let _ = reply.send(None);
                    }
                }
            }
            BatchesMessage::Lock(batch_id, reply) => {
                let ok = !state.running.contains_key(&batch_id)
                    && !state.runs.contains(&batch_id)
                    && state.locked.insert(batch_id);
                let _ = reply.send(ok);
            }
            BatchesMessage::Unlock(batch_id) => {
                state.locked.remove(&batch_id);
            }
            BatchesMessage::Release {
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
            BatchesMessage::Watch(batch_id, reply) => {
                if state.runs.contains(&batch_id) {
                    state.watchers.entry(batch_id).or_default().push(reply);
                } else {
                    let _ = reply.send(Err(EngineError::BatchNotRunning(batch_id)));
                }
            }
            BatchesMessage::Close => state.closed = true,
            #[cfg(feature = "testing")]
            BatchesMessage::Kill(batch_id) => {
                if let Some(c) = state.running.get(&batch_id) {
                    c.kill();
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
