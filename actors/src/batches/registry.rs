//! BatchRegistry: the registry of running batches and the parent of their
//! coordinators. Owns the map batch id → coordinator and the replacement
//! coordinators waiting for a dead one to leave. Forwards item settlements to
//! the right coordinator.
//!
//! Which run of a batch is in progress is not its to decide: a run lives in
//! its driver and survives a restart of the registry, so the batch id is
//! claimed with the supervisor (`claims`), which outlives the registry, and
//! the run's watchers wait there too. The registry only holds the run's
//! coordinator of now.
//!
//! A run ends with `Release`, sent by its coordinator when it finishes (with
//! the caller's reply port, so the caller is answered only once the batch has
//! left the registry) or by its driver when the run failed or was dropped.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    Actor, ActorId, ActorProcessingErr, ActorRef, DerivedActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::batches::claims::{Attach, ClaimMessage};
use crate::batches::coordinator::{Coordinator, CoordinatorArguments, CoordinatorMessage};
use crate::batches::spec::{BatchOutcome, BatchProgress, BatchReply, BatchSpec};
use crate::engine::notify::ItemEnd;
use crate::error::{EngineError, Result};
use crate::layout::records::{BatchHead, ItemMarker};
use crate::services::Services;

/// The answer to a coordinator's start.
pub(crate) type StartReply = RpcReplyPort<Result<CoordinatorRef>>;

/// Messages of the batches registry.
#[derive(Debug)]
pub enum RegistryMessage {
    /// Start a coordinator for a run of this batch (its driver holds the
    /// batch's claim; `BatchRunning` if a coordinator of it runs). `replacing`
    /// names a coordinator of the same run that died: the new one starts as
    /// soon as the registry has seen it go.
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
    /// A run ended: its coordinator `coordinator` (if it is still the
    /// batch's) leaves the registry and is stopped, then `reply` (the run's
    /// caller, with how the run ended) and `done` are answered.
    Release {
        /// Batch.
        batch_id: String,
        /// The run's coordinator, if it has one.
        coordinator: Option<ActorId>,
        /// The run's caller and how the run ended.
        reply: Option<(BatchReply, Result<BatchOutcome>)>,
        /// Told once done.
        done: Option<RpcReplyPort<()>>,
    },
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
/// outside the tree (a run's driver, the sweeper's retention pass, the
/// supervisor), with the claims on batch ids (the supervisor's). It follows
/// the registry across restarts: the supervisor republishes the live actor,
/// and every call goes to the registry of now.
#[derive(Debug, Clone)]
pub struct RegistryRef {
    book: tokio::sync::watch::Receiver<ActorRef<RegistryMessage>>,
    claims: DerivedActorRef<ClaimMessage>,
}

/// Times a start is asked of a registry that died before it answered (each
/// time of its successor, once the supervisor published it).
const START_ATTEMPTS: u32 = 4;
/// Longest wait for the supervisor to publish a dead registry's successor.
const RESTART_WAIT: Duration = Duration::from_secs(5);

impl RegistryRef {
    pub(crate) fn new(
        book: tokio::sync::watch::Receiver<ActorRef<RegistryMessage>>,
        claims: DerivedActorRef<ClaimMessage>,
    ) -> Self {
        Self { book, claims }
    }

    /// The registry actor now.
    pub fn get(&self) -> ActorRef<RegistryMessage> {
        self.book.borrow().clone()
    }

    /// Where batch ids are claimed (the supervisor).
    pub(crate) fn claims(&self) -> &DerivedActorRef<ClaimMessage> {
        &self.claims
    }

    /// Start a coordinator for a run of `spec` (its driver holds the batch's
    /// claim); `replacing` names a dead coordinator of the same run (the new
    /// one starts once the registry saw it go). A registry that dies before
    /// it answers is asked again once its successor is published (the claim
    /// keeps the batch this run's meanwhile). `None` if none answered.
    pub(crate) async fn start(
        &self,
        spec: BatchSpec,
        replacing: Option<ActorId>,
    ) -> Option<Result<CoordinatorRef>> {
        for _ in 0..START_ATTEMPTS {
            let registry = self.get();
            let answer = registry
                .call(
                    |reply| RegistryMessage::Start {
                        spec: Box::new(spec.clone()),
                        replacing,
                        reply,
                    },
                    None,
                )
                .await;
            if let Ok(ractor::rpc::CallResult::Success(answer)) = answer {
                return Some(answer);
            }
            if !self.succeeded(registry.get_id()).await {
                return None;
            }
        }
        None
    }

    /// Wait until the supervisor published a successor of the registry
    /// `dead` (at once if it has): `false` if it did not within
    /// [`RESTART_WAIT`] (the engine is stopping).
    async fn succeeded(&self, dead: ActorId) -> bool {
        let mut book = self.book.clone();
        matches!(
            tokio::time::timeout(RESTART_WAIT, book.wait_for(|r| r.get_id() != dead)).await,
            Ok(Ok(_))
        )
    }

    /// End a run and wait until the registry has let it go (its coordinator,
    /// if still the batch's, is stopped). Returns at once if the registry is
    /// gone (a new one holds no coordinator of the run).
    pub(crate) async fn release(&self, batch_id: &str, coordinator: Option<ActorId>) {
        let _ = self
            .get()
            .call(
                |done| RegistryMessage::Release {
                    batch_id: batch_id.to_string(),
                    coordinator,
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
            reply: None,
            done: None,
        });
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

    /// Hand the coordinator a sink that takes over the run's records still
    /// to come: it answers `attach.reply` where the switch fell (a dead
    /// coordinator drops it: the run's driver hands the sink to the next).
    pub(crate) fn take_sink(&self, attach: Attach) {
        let _ = self.0.cast(CoordinatorMessage::TakeSink(attach));
    }

    /// The run's counters now (`None` if the coordinator is gone).
    pub(crate) async fn progress(&self) -> Option<BatchProgress> {
        ractor::call!(self.0, CoordinatorMessage::GetProgress).ok()
    }
}

/// The batches registry actor.
#[derive(Debug)]
pub(crate) struct BatchRegistry;

/// State of the registry.
#[derive(Debug)]
pub(crate) struct RegistryState {
    services: Arc<Services>,
    running: HashMap<String, CoordinatorRef>,
    by_actor: HashMap<ActorId, String>,
    /// The engine is shutting down.
    closed: bool,
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
                self.running.insert(id, coordinator.clone());
                let _ = reply.send(Ok(coordinator));
            }
            Err(e) => {
                let _ = reply.send(Err(EngineError::unavailable("batch coordinator", e)));
            }
        }
    }

    /// The run's coordinator `coordinator` leaves, if it is still the
    /// batch's (another run's is left alone: the release is stale).
    fn release(&mut self, batch_id: &str, coordinator: Option<ActorId>) {
        if let Some(c) = self.running.get(batch_id)
            && Some(c.get_id()) == coordinator
        {
            self.by_actor.remove(&c.get_id());
            c.0.stop(None);
            self.running.remove(batch_id);
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
            closed: false,
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
                        let work = async move { c.progress().await };
                        crate::task::spawn_reported(work, move |ended| {
                            let _ = reply.send(ended.ok().flatten());
                        });
                    }
                    None => {
                        let _ = reply.send(None);
                    }
                }
            }
            RegistryMessage::Release {
                batch_id,
                coordinator,
                reply,
                done,
            } => {
                state.release(&batch_id, coordinator);
                if let Some((reply, result)) = reply {
                    let _ = reply.send(result);
                }
                if let Some(done) = done {
                    let _ = done.send(());
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
