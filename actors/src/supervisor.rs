//! Supervisor: the root of the engine's tree. Opens (or is given) the taquba
//! queue and owns it for the engine's life; spawns the waiters, the claimer,
//! one handler pool per job type and the sweeper; restarts a child that fails;
//! answers the engine's public protocol; runs the shutdown sequence and closes
//! the queue.
//!
//! Nothing slow runs inside its `handle` except the shutdown sequence (which is
//! the last thing it does): submissions, status reads and cancels run in short
//! tasks that answer the caller's reply port themselves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorProcessingErr, ActorRef, DerivedActorRef, RpcReplyPort, SupervisionEvent,
};
use taquba::object_store::ObjectStore;
use taquba::{OpenOptions, Queue};
use tracing::{info, warn};

use crate::claimer::{Claimer, ClaimerArguments, ClaimerMessage};
use crate::error::{EngineError, Result};
use crate::handler::Registration;
use crate::keys;
use crate::pool::{HandlerPool, PoolArguments, PoolMessage, PoolStats};
use crate::records::OutcomeRecord;
use crate::services::{CancelResult, JobState, Services, SubmitRequest, Submitted};
use crate::settings::Settings;
use crate::sweeper::{SweepReport, Sweeper, SweeperArguments, SweeperMessage};
use crate::waiters::{JobFinished, WaitError, Waiter, Waiters, WaitersMessage};

/// The engine's public protocol: what a service (or another actor) sends the
/// supervisor. Tuple variants with the reply port last, so `call!` works:
/// `call!(engine, EngineMessage::SubmitJob, request)`.
#[derive(Debug)]
pub enum EngineMessage {
    /// Submit a job; answers once the submission is durable.
    SubmitJob(SubmitRequest, RpcReplyPort<Result<Submitted>>),
    /// Wait for a job to end; answers with its outcome record.
    AwaitJob(
        String,
        RpcReplyPort<std::result::Result<OutcomeRecord, WaitError>>,
    ),
    /// Tell this actor (by a [`JobFinished`] message) when the job ends.
    WatchJob(String, DerivedActorRef<JobFinished>),
    /// Where a job is now.
    JobStatus(String, RpcReplyPort<Result<Option<JobState>>>),
    /// Cancel a job.
    CancelJob(String, RpcReplyPort<Result<CancelResult>>),
    /// Shut down gracefully: stop claiming, let running jobs finish and settle,
    /// close the queue. Answers when done.
    Shutdown(RpcReplyPort<ShutdownReport>),
    /// The engine's shared services (for handles built over this engine).
    GetServices(RpcReplyPort<Arc<Services>>),
    /// Counters of each job type's pool.
    GetPoolStats(RpcReplyPort<HashMap<String, PoolStats>>),
    /// Run one sweeper pass now and answer what it did.
    SweepNow(RpcReplyPort<SweepReport>),
}

/// What a shutdown did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Whether the queue was closed (flushed) cleanly.
    pub queue_closed: bool,
    /// Problems met on the way (empty on a clean shutdown).
    pub problems: Vec<String>,
}

/// Where the supervisor gets its queue.
pub enum QueueSource {
    /// Open the queue at `path` in `store`.
    Open {
        /// The object store.
        store: Arc<dyn ObjectStore>,
        /// The queue's path in the store.
        path: String,
        /// taquba open options (flush interval, clock, queue configs …).
        options: OpenOptions,
    },
    /// Use this already-open queue (the engine takes ownership and closes it).
    Given {
        /// The queue.
        queue: Queue,
        /// The object store for memo entries and large outputs.
        store: Arc<dyn ObjectStore>,
    },
}

impl std::fmt::Debug for QueueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open { path, .. } => f
                .debug_struct("Open")
                .field("path", path)
                .finish_non_exhaustive(),
            Self::Given { .. } => f.debug_struct("Given").finish_non_exhaustive(),
        }
    }
}

/// Everything the engine starts from.
#[derive(Debug)]
pub struct EngineConfig {
    /// The queue.
    pub source: QueueSource,
    /// Settings.
    pub settings: Settings,
    /// Job types.
    pub registrations: Vec<Registration>,
}

/// The supervisor actor.
#[derive(Debug)]
pub struct Supervisor;

#[derive(Debug)]
enum Child {
    Waiters,
    Claimer,
    Sweeper,
    Pool(String),
}

/// State of the supervisor.
pub struct SupervisorState {
    me: ActorRef<EngineMessage>,
    queue: Option<Arc<Queue>>,
    services: Arc<Services>,
    registrations: HashMap<String, Registration>,
    waiters: ActorRef<WaitersMessage>,
    claimer: ActorRef<ClaimerMessage>,
    sweeper: ActorRef<SweeperMessage>,
    pools: HashMap<String, ActorRef<PoolMessage>>,
    children: HashMap<ractor::ActorId, Child>,
    shutting_down: bool,
}

async fn open(source: QueueSource, settings: &Settings) -> Result<(Queue, Arc<dyn ObjectStore>)> {
    match source {
        QueueSource::Open {
            store,
            path,
            options,
        } => {
            if path.trim_matches('/') == settings.blob_prefix.trim_matches('/') {
                return Err(EngineError::InvalidConfig(format!(
                    "the queue path `{path}` and the blob prefix must differ"
                )));
            }
            let queue = Queue::open_with_options(store.clone(), &path, options).await?;
            Ok((queue, store))
        }
        QueueSource::Given { queue, store } => Ok((queue, store)),
    }
}

async fn check_layout(queue: &Queue) -> Result<()> {
    match queue.view().kv_get(keys::LAYOUT_KEY).await? {
        None => {
            queue
                .kv_put(keys::LAYOUT_KEY, keys::LAYOUT_VERSION.as_bytes())
                .await?;
            Ok(())
        }
        Some(found) if found.as_ref() == keys::LAYOUT_VERSION.as_bytes() => Ok(()),
        Some(found) => Err(EngineError::LayoutMismatch {
            found: String::from_utf8_lossy(&found).into_owned(),
            expected: keys::LAYOUT_VERSION.into(),
        }),
    }
}

impl std::fmt::Debug for SupervisorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisorState")
            .field("pools", &self.pools.keys().collect::<Vec<_>>())
            .field("shutting_down", &self.shutting_down)
            .finish_non_exhaustive()
    }
}

impl SupervisorState {
    async fn spawn_waiters(&mut self, cell: &ActorCell) -> Result<(), ActorProcessingErr> {
        let (waiters, _) =
            Actor::spawn_linked(None, Waiters, self.services.clone(), cell.clone()).await?;
        self.children.insert(waiters.get_id(), Child::Waiters);
        self.waiters = waiters;
        Ok(())
    }

    async fn spawn_claimer(&mut self, cell: &ActorCell) -> Result<(), ActorProcessingErr> {
        let args = ClaimerArguments {
            services: self.services.clone(),
            waiters: self.waiters.clone(),
        };
        let (claimer, _) = Actor::spawn_linked(None, Claimer, args, cell.clone()).await?;
        self.children.insert(claimer.get_id(), Child::Claimer);
        self.claimer = claimer;
        Ok(())
    }

    async fn spawn_sweeper(&mut self, cell: &ActorCell) -> Result<(), ActorProcessingErr> {
        let args = SweeperArguments {
            services: self.services.clone(),
            waiters: self.waiters.clone(),
        };
        let (sweeper, _) = Actor::spawn_linked(None, Sweeper, args, cell.clone()).await?;
        self.children.insert(sweeper.get_id(), Child::Sweeper);
        self.sweeper = sweeper;
        Ok(())
    }

    async fn spawn_pool(
        &mut self,
        cell: &ActorCell,
        job_type: &str,
    ) -> Result<(), ActorProcessingErr> {
        let Some(reg) = self.registrations.get(job_type).cloned() else {
            return Ok(());
        };
        let args = PoolArguments {
            job_type: reg.job_type.clone(),
            handler: reg.handler.clone(),
            concurrency: reg
                .concurrency
                .unwrap_or(self.services.settings().max_concurrent_jobs),
            services: self.services.clone(),
            waiters: self.waiters.clone(),
            claimer: self.claimer.clone(),
            engine: self.me.clone(),
        };
        let (pool, _) = Actor::spawn_linked(None, HandlerPool, args, cell.clone()).await?;
        self.children
            .insert(pool.get_id(), Child::Pool(reg.job_type.clone()));
        self.pools.insert(reg.job_type, pool);
        Ok(())
    }

    fn route(&self) {
        let _ = self.claimer.cast(ClaimerMessage::Route(self.pools.clone()));
    }

    async fn restart(
        &mut self,
        myself: &ActorRef<EngineMessage>,
        child: Child,
    ) -> Result<(), ActorProcessingErr> {
        let cell = myself.get_cell();
        match child {
            Child::Waiters => {
                self.spawn_waiters(&cell).await?;
                // Children that tell the waiters hold the old reference: renew them.
                self.stop_child_for_renewal(&[Child::Claimer, Child::Sweeper]);
            }
            Child::Claimer => {
                self.spawn_claimer(&cell).await?;
                // Pools hold the old claimer: restart them so credits flow to the
                // new one (their running jobs finish first: stop is graceful).
                let types: Vec<String> = self.pools.keys().cloned().collect();
                for t in types {
                    if let Some(pool) = self.pools.remove(&t) {
                        self.children.remove(&pool.get_id());
                        pool.stop(Some("claimer restarted".into()));
                    }
                    self.spawn_pool(&cell, &t).await?;
                }
                self.route();
            }
            Child::Sweeper => self.spawn_sweeper(&cell).await?,
            Child::Pool(t) => {
                self.spawn_pool(&cell, &t).await?;
                self.route();
            }
        }
        Ok(())
    }

    fn stop_child_for_renewal(&mut self, which: &[Child]) {
        for child in which {
            let actor = match child {
                Child::Claimer => self.claimer.get_cell(),
                Child::Sweeper => self.sweeper.get_cell(),
                _ => continue,
            };
            // Leaving it in `children` makes its exit restart it with fresh references.
            actor.stop(Some("renewing references".into()));
        }
    }

    async fn shutdown(&mut self, myself: &ActorRef<EngineMessage>) -> ShutdownReport {
        self.shutting_down = true;
        let mut report = ShutdownReport::default();
        // 1. Stop claiming.
        if let Err(e) = ractor::call!(self.claimer, ClaimerMessage::Drain) {
            report.problems.push(format!("claimer drain: {e}"));
        }
        // 2. Let running jobs finish and their settlements commit.
        for (t, pool) in &self.pools {
            if let Err(e) = ractor::call!(pool, PoolMessage::Drain) {
                report.problems.push(format!("pool `{t}` drain: {e}"));
            }
        }
        // 3. Fail callers still waiting, stop every child.
        let _ = self.waiters.cast(WaitersMessage::FailAll);
        self.children.clear();
        myself
            .get_cell()
            .stop_children_and_wait(Some("shutdown".into()), Some(Duration::from_secs(10)))
            .await;
        // 4. Close the queue once the last short-lived user of it lets go.
        if let Some(queue) = self.queue.take() {
            let mut queue = queue;
            let mut tries = 0;
            loop {
                match Arc::try_unwrap(queue) {
                    Ok(q) => {
                        match q.close().await {
                            Ok(()) => report.queue_closed = true,
                            Err(e) => report.problems.push(format!("queue close: {e}")),
                        }
                        break;
                    }
                    Err(q) if tries < 500 => {
                        queue = q;
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(_) => {
                        report.problems.push(
                            "the queue was still in use after 5 s; dropped without close".into(),
                        );
                        break;
                    }
                }
            }
        }
        info!(?report, "engine shut down");
        report
    }
}

impl Actor for Supervisor {
    type Msg = EngineMessage;
    type State = SupervisorState;
    type Arguments = EngineConfig;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        config: EngineConfig,
    ) -> Result<Self::State, ActorProcessingErr> {
        config.settings.validate()?;
        let mut registrations = HashMap::new();
        for reg in config.registrations {
            if registrations.contains_key(&reg.job_type) {
                return Err(EngineError::DuplicateJobType(reg.job_type).into());
            }
            registrations.insert(reg.job_type.clone(), reg);
        }
        let (queue, store) = open(config.source, &config.settings).await?;
        if let Err(e) = check_layout(&queue).await {
            let _ = queue.close().await;
            return Err(e.into());
        }
        let queue = Arc::new(queue);
        let clock = queue.clock();
        let services = Arc::new(Services::new(&queue, store, config.settings, clock));
        let cell = myself.get_cell();
        let (waiters, _) =
            Actor::spawn_linked(None, Waiters, services.clone(), cell.clone()).await?;
        let claimer_args = ClaimerArguments {
            services: services.clone(),
            waiters: waiters.clone(),
        };
        let (claimer, _) = Actor::spawn_linked(None, Claimer, claimer_args, cell.clone()).await?;
        let sweeper_args = SweeperArguments {
            services: services.clone(),
            waiters: waiters.clone(),
        };
        let (sweeper, _) = Actor::spawn_linked(None, Sweeper, sweeper_args, cell.clone()).await?;
        let mut state = SupervisorState {
            me: myself.clone(),
            queue: Some(queue),
            services,
            registrations,
            children: HashMap::from([
                (waiters.get_id(), Child::Waiters),
                (claimer.get_id(), Child::Claimer),
                (sweeper.get_id(), Child::Sweeper),
            ]),
            waiters,
            claimer,
            sweeper,
            pools: HashMap::new(),
            shutting_down: false,
        };
        let types: Vec<String> = state.registrations.keys().cloned().collect();
        for t in types {
            state.spawn_pool(&cell, &t).await?;
        }
        state.route();
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            EngineMessage::SubmitJob(request, reply) => {
                if state.shutting_down {
                    let _ = reply.send(Err(EngineError::ShutDown));
                    return Ok(());
                }
                let services = state.services.clone();
                tokio::spawn(async move {
                    let _ = reply.send(services.submit(request).await);
                });
            }
            EngineMessage::AwaitJob(run_id, reply) => {
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    waiter: Waiter::Reply(reply),
                });
            }
            EngineMessage::WatchJob(run_id, to) => {
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    waiter: Waiter::Notify(to),
                });
            }
            EngineMessage::JobStatus(run_id, reply) => {
                let services = state.services.clone();
                tokio::spawn(async move {
                    let _ = reply.send(services.state(&run_id).await);
                });
            }
            EngineMessage::CancelJob(run_id, reply) => {
                let services = state.services.clone();
                let waiters = state.waiters.clone();
                tokio::spawn(async move {
                    let result = services.cancel(&run_id).await.map(|(result, record)| {
                        if let Some(record) = record {
                            let _ = waiters.cast(WaitersMessage::Settled {
                                run_id: run_id.clone(),
                                record: Box::new(record),
                            });
                        }
                        result
                    });
                    let _ = reply.send(result);
                });
            }
            EngineMessage::Shutdown(reply) => {
                if state.shutting_down {
                    let _ = reply.send(ShutdownReport {
                        queue_closed: false,
                        problems: vec!["already shut down".into()],
                    });
                    return Ok(());
                }
                let report = state.shutdown(&myself).await;
                let _ = reply.send(report);
                myself.stop(Some("shutdown".into()));
            }
            EngineMessage::GetServices(reply) => {
                let _ = reply.send(state.services.clone());
            }
            EngineMessage::GetPoolStats(reply) => {
                let pools: Vec<(String, ActorRef<PoolMessage>)> = state
                    .pools
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                tokio::spawn(async move {
                    let mut stats = HashMap::new();
                    for (t, pool) in pools {
                        if let Ok(s) = ractor::call!(pool, PoolMessage::GetStats) {
                            stats.insert(t, s);
                        }
                    }
                    let _ = reply.send(stats);
                });
            }
            EngineMessage::SweepNow(reply) => {
                let _ = state.sweeper.cast(SweeperMessage::SweepNow(reply));
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
        let (who, why) = match event {
            SupervisionEvent::ActorFailed(who, err) => (who, err.to_string()),
            SupervisionEvent::ActorTerminated(who, _, reason) => (who, reason.unwrap_or_default()),
            _ => return Ok(()),
        };
        if state.shutting_down {
            return Ok(());
        }
        if let Some(child) = state.children.remove(&who.get_id()) {
            warn!(?child, reason = %why, "engine child exited; restarting it");
            state.restart(&myself, child).await?;
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        _state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        myself
            .get_cell()
            .stop_children_and_wait(Some("engine stopped".into()), Some(Duration::from_secs(10)))
            .await;
        Ok(())
    }
}
