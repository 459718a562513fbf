//! Batches: the registry of running batches and the parent of their
//! coordinators. Owns the map batch id → coordinator and the set of batches
//! locked for forgetting; forwards item settlements to the right coordinator.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::batch::{BatchProgress, BatchSpec};
use crate::coordinator::{Coordinator, CoordinatorArguments, CoordinatorMessage};
use crate::error::{EngineError, Result};
use crate::records::ItemMarker;
use crate::services::Services;

/// Messages of the batches registry.
#[derive(Debug)]
pub enum BatchesMessage {
    /// Start a coordinator for a run of this batch (`BatchRunning` if one runs).
    Start(
        Box<BatchSpec>,
        RpcReplyPort<Result<ActorRef<CoordinatorMessage>>>,
    ),
    /// An item settled: forward to its batch's coordinator, if running.
    ItemSettled {
        /// Batch.
        batch_id: String,
        /// Item key.
        key: String,
        /// Job id of the settling delivery.
        job_id: String,
        /// Its marker.
        marker: Box<ItemMarker>,
    },
    /// Progress of a running batch (`None` if not running here).
    GetProgress(String, RpcReplyPort<Option<BatchProgress>>),
    /// Lock a batch that is not running, so no run starts while it is forgotten.
    Lock(String, RpcReplyPort<bool>),
    /// Forget the running entry of a batch (its coordinator finished, or its
    /// driver failed) and stop that coordinator; answers once done.
    Release(String, RpcReplyPort<()>),
    /// Kill the coordinator of a running batch (feature `testing`).
    #[cfg(feature = "testing")]
    Kill(String),
    /// Release a lock.
    Unlock(String),
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
    locked: HashSet<String>,
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
            locked: HashSet::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            BatchesMessage::Start(spec, reply) => {
                let id = spec.batch_id.clone();
                if state.running.contains_key(&id) || state.locked.contains(&id) {
                    let _ = reply.send(Err(EngineError::BatchRunning(id)));
                    return Ok(());
                }
                let args = CoordinatorArguments {
                    spec: *spec,
                    services: state.services.clone(),
                    batches: myself.clone(),
                };
                match Actor::spawn_linked(None, Coordinator, args, myself.get_cell()).await {
                    Ok((coordinator, _)) => {
                        state.by_actor.insert(coordinator.get_id(), id.clone());
                        state.running.insert(id, coordinator.clone());
                        let _ = reply.send(Ok(coordinator));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(EngineError::ActorUnavailable(e.to_string())));
                    }
                }
            }
            BatchesMessage::ItemSettled {
                batch_id,
                key,
                job_id,
                marker,
            } => {
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
                let ok = !state.running.contains_key(&batch_id) && state.locked.insert(batch_id);
                let _ = reply.send(ok);
            }
            BatchesMessage::Release(batch_id, reply) => {
                if let Some(c) = state.running.remove(&batch_id) {
                    state.by_actor.remove(&c.get_id());
                    c.stop(None);
                }
                let _ = reply.send(());
            }
            #[cfg(feature = "testing")]
            BatchesMessage::Kill(batch_id) => {
                if let Some(c) = state.running.get(&batch_id) {
                    c.kill();
                }
            }
            BatchesMessage::Unlock(batch_id) => {
                state.locked.remove(&batch_id);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorTerminated(who, ..) | SupervisionEvent::ActorFailed(who, _) =
            event
            && let Some(id) = state.by_actor.remove(&who.get_id())
        {
            // A failed coordinator drops its caller's reply port: the caller sees
            // an error and `resume` continues the batch from its records.
            state.running.remove(&id);
        }
        Ok(())
    }
}
