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
    Actor, ActorProcessingErr, ActorRef, DerivedActorRef, RpcReplyPort, SupervisionEvent,
};
use taquba::object_store::ObjectStore;
use taquba::{OpenOptions, Queue};
use tracing::{error, info, warn};

use crate::batch::{BatchFinished, BatchOutcome, BatchProgress, BatchSpec, BatchState};
use crate::batches::{Batches, BatchesMessage};
use crate::claimer::{Claimer, ClaimerArguments, ClaimerMessage};
use crate::coordinator::CoordinatorMessage;
use crate::error::{EngineError, Result};
use crate::handler::{DEFAULT_PIPELINE_CONCURRENCY, Kind, Registration};
use crate::keys;
use crate::pool::{HandlerPool, PoolArguments, PoolMessage, PoolStats};
use crate::records::OutcomeRecord;
use crate::services::{CancelResult, JobState, Services, SubmitRequest, Submitted};
use crate::settings::Settings;
use crate::settle::Notify;
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
    /// As `AwaitJob` for a job whose outcome record a submission was answered
    /// from ([`Submitted::recorded`]): answers with that record once it is
    /// durable, without reading it again.
    AwaitRecorded(
        String,
        Box<OutcomeRecord>,
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
    /// Start a coordinator for a run of a batch (used by the batch driver).
    StartBatch(
        Box<BatchSpec>,
        RpcReplyPort<Result<ActorRef<CoordinatorMessage>>>,
    ),
    /// Run a batch of encoded inputs (keys given) to completion.
    RunBatch(
        Box<BatchSpec>,
        Vec<(String, Vec<u8>)>,
        RpcReplyPort<Result<BatchOutcome>>,
    ),
    /// Run a batch like `RunBatch`, and tell this actor (a [`BatchFinished`]
    /// message) when it completes.
    RunBatchAndTell(
        Box<BatchSpec>,
        Vec<(String, Vec<u8>)>,
        DerivedActorRef<BatchFinished>,
    ),
    /// Resume a batch from its manifest to completion.
    ResumeBatch(Box<BatchSpec>, RpcReplyPort<Result<BatchOutcome>>),
    /// Release a batch's run registration (its driver failed before the run began).
    ReleaseBatch(String, RpcReplyPort<()>),
    /// Counters of a batch running in this process (`None` if not running).
    BatchProgress(String, RpcReplyPort<Option<BatchProgress>>),
    /// What a batch's records say.
    BatchStatus(String, RpcReplyPort<Result<BatchState>>),
    /// Remove everything a batch wrote (refused while it runs or has live items).
    ForgetBatch(String, RpcReplyPort<Result<bool>>),
    /// The engine's shared services (for handles built over this engine).
    GetServices(RpcReplyPort<Arc<Services>>),
    /// Counters of each job type's pool.
    GetPoolStats(RpcReplyPort<HashMap<String, PoolStats>>),
    /// Run one sweeper pass now and answer what it did.
    SweepNow(RpcReplyPort<SweepReport>),
    /// The outcome of a job if it has durably ended, without waiting.
    PeekOutcome(
        String,
        RpcReplyPort<std::result::Result<Option<OutcomeRecord>, WaitError>>,
    ),
    /// Kill one of the engine's actors, to test that it is restarted and that
    /// nothing is lost (feature `testing`). Answers whether it was found.
    #[cfg(feature = "testing")]
    KillChild(ChildKind, RpcReplyPort<bool>),
}

/// Which actor [`EngineMessage::KillChild`] kills.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildKind {
    /// The waiters.
    Waiters,
    /// The batches registry (its coordinators die with it).
    Batches,
    /// The jobs claimer.
    Claimer,
    /// The bulk claimer.
    BulkClaimer,
    /// The sweeper.
    Sweeper,
    /// The handler pool of this job type or pipeline.
    Pool(String),
    /// The coordinator of this running batch.
    Coordinator(String),
}

/// What a shutdown did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Whether the queue was closed (flushed) cleanly.
    pub queue_closed: bool,
    /// Jobs still running when the grace period ended: nacked, to run again
    /// after the next start.
    pub abandoned: usize,
    /// Problems met on the way (empty on a clean shutdown).
    pub problems: Vec<String>,
}

/// Where the supervisor gets its queue.
// Built once per engine: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
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
        queue: Box<Queue>,
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

/// Extra time a bounded shutdown gives settlements and the queue's close
/// beyond the grace period.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(2);

/// The supervisor actor.
#[derive(Debug)]
pub struct Supervisor;

#[derive(Debug, Clone)]
enum Child {
    Waiters,
    Batches,
    Claimer(Kind),
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
    batches: ActorRef<BatchesMessage>,
    claimer: ActorRef<ClaimerMessage>,
    bulk_claimer: ActorRef<ClaimerMessage>,
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
        QueueSource::Given { queue, store } => Ok((*queue, store)),
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

fn claimer_args(
    services: &Arc<Services>,
    notify: &Notify,
    registrations: &HashMap<String, Registration>,
    kind: Kind,
) -> ClaimerArguments {
    let settings = services.settings();
    let (queue_name, credits) = match kind {
        Kind::Job => (settings.queue_name.clone(), settings.max_concurrent_jobs),
        Kind::Pipeline => (
            settings.bulk_queue_name.clone(),
            registrations
                .values()
                .filter(|r| r.kind == Kind::Pipeline)
                .map(|r| r.concurrency.unwrap_or(DEFAULT_PIPELINE_CONCURRENCY))
                .sum::<usize>()
                .max(1),
        ),
    };
    ClaimerArguments {
        services: services.clone(),
        notify: notify.clone(),
        queue_name,
        credits,
    }
}

impl SupervisorState {
    fn notify(&self) -> Notify {
        Notify {
            waiters: self.waiters.clone(),
            batches: self.batches.clone(),
        }
    }

    fn engine_ref(&self) -> crate::EngineRef {
        crate::EngineRef::from_parts(self.me.clone(), self.services.clone())
    }

    async fn spawn_child(&mut self, child: Child) -> Result<(), ActorProcessingErr> {
        let cell = self.me.get_cell();
        let services = self.services.clone();
        let id = match &child {
            Child::Waiters => {
                let (a, _) = Actor::spawn_linked(None, Waiters, services, cell).await?;
                self.waiters = a.clone();
                a.get_id()
            }
            Child::Batches => {
                let (a, _) = Actor::spawn_linked(None, Batches, services, cell).await?;
                self.batches = a.clone();
                a.get_id()
            }
            Child::Claimer(kind) => {
                let args = claimer_args(&services, &self.notify(), &self.registrations, *kind);
                let (a, _) = Actor::spawn_linked(None, Claimer, args, cell).await?;
                match kind {
                    Kind::Job => self.claimer = a.clone(),
                    Kind::Pipeline => self.bulk_claimer = a.clone(),
                }
                a.get_id()
            }
            Child::Sweeper => {
                let args = SweeperArguments {
                    services,
                    notify: self.notify(),
                };
                let (a, _) = Actor::spawn_linked(None, Sweeper, args, cell).await?;
                self.sweeper = a.clone();
                a.get_id()
            }
            Child::Pool(job_type) => {
                let Some(reg) = self.registrations.get(job_type).cloned() else {
                    return Ok(());
                };
                let args = PoolArguments {
                    job_type: reg.job_type.clone(),
                    handler: reg.handler.clone(),
                    concurrency: reg.concurrency.unwrap_or(match reg.kind {
                        Kind::Job => services.settings().max_concurrent_jobs,
                        Kind::Pipeline => DEFAULT_PIPELINE_CONCURRENCY,
                    }),
                    services,
                    notify: self.notify(),
                    claimer: match reg.kind {
                        Kind::Job => self.claimer.clone(),
                        Kind::Pipeline => self.bulk_claimer.clone(),
                    },
                    engine: self.me.clone(),
                };
                let (a, _) = Actor::spawn_linked(None, HandlerPool, args, cell).await?;
                self.pools.insert(reg.job_type.clone(), a.clone());
                a.get_id()
            }
        };
        self.children.insert(id, child);
        Ok(())
    }

    fn route(&self) {
        for (kind, claimer) in [
            (Kind::Job, &self.claimer),
            (Kind::Pipeline, &self.bulk_claimer),
        ] {
            let routes: HashMap<String, ActorRef<PoolMessage>> = self
                .pools
                .iter()
                .filter(|(t, _)| self.registrations.get(*t).is_some_and(|r| r.kind == kind))
                .map(|(t, p)| (t.clone(), p.clone()))
                .collect();
            let _ = claimer.cast(ClaimerMessage::Route(routes));
        }
    }

    async fn restart(&mut self, child: Child) -> Result<(), ActorProcessingErr> {
        self.spawn_child(child.clone()).await?;
        match child {
            // Everyone holding the old reference is renewed.
            Child::Waiters | Child::Batches => {
                let notify = self.notify();
                for claimer in [&self.claimer, &self.bulk_claimer] {
                    let _ = claimer.cast(ClaimerMessage::SetNotify(notify.clone()));
                }
                for pool in self.pools.values() {
                    let _ = pool.cast(PoolMessage::SetNotify(notify.clone()));
                }
                let _ = self.sweeper.cast(SweeperMessage::SetNotify(notify));
            }
            Child::Claimer(kind) => {
                // Reconcile credits: the new claimer starts with the capacity
                // its pools do not hold now, and the pools send credits to it.
                let claimer = match kind {
                    Kind::Job => self.claimer.clone(),
                    Kind::Pipeline => self.bulk_claimer.clone(),
                };
                let capacity =
                    claimer_args(&self.services, &self.notify(), &self.registrations, kind).credits;
                let _ = ractor::call!(claimer, ClaimerMessage::SetCredits, 0);
                let mut held = 0;
                for (t, pool) in &self.pools {
                    if self.registrations.get(t).is_some_and(|r| r.kind == kind) {
                        held += ractor::call!(pool, PoolMessage::SetClaimer, claimer.clone())
                            .unwrap_or(0);
                    }
                }
                let _ = claimer.cast(ClaimerMessage::Credit(capacity.saturating_sub(held)));
                self.route();
            }
            Child::Pool(_) => self.route(),
            Child::Sweeper => {}
        }
        Ok(())
    }

    /// The store closed under us (fenced): stop everything, tell whoever
    /// waits, and exit. The queue cannot be closed cleanly any more.
    async fn store_closed(&mut self, myself: &ActorRef<EngineMessage>, reason: String) {
        error!(%reason, "the engine's store closed; stopping the engine");
        self.shutting_down = true;
        self.services.emit(crate::events::EngineEvent::StoreClosed {
            reason: reason.clone(),
        });
        let _ = self.waiters.cast(WaitersMessage::FailAll);
        self.children.clear();
        myself
            .get_cell()
            .stop_children_and_wait(Some(reason.clone()), Some(Duration::from_secs(10)))
            .await;
        if let Some(queue) = self.queue.take()
            && let Ok(queue) = Arc::try_unwrap(queue)
        {
            let _ = queue.close().await;
        }
        myself.stop(Some(reason));
    }

    async fn shutdown(&mut self, myself: &ActorRef<EngineMessage>) -> ShutdownReport {
        self.shutting_down = true;
        let mut report = ShutdownReport::default();
        // 1. Stop claiming.
        for claimer in [&self.claimer, &self.bulk_claimer] {
            if let Err(e) = ractor::call!(claimer, ClaimerMessage::Drain) {
                report.problems.push(format!("claimer drain: {e}"));
            }
        }
        // 2. Let running jobs finish and their settlements commit.
        // Drain every pool at once, so the grace period is one period.
        let grace = self.services.settings().shutdown_grace;
        // With a grace period the whole shutdown is bounded: settlements stuck
        // behind an unavailable store are given up on (their jobs stay claimed
        // in the store and run again after the next open).
        let deadline = grace.map(|g| tokio::time::Instant::now() + g + SHUTDOWN_SLACK);
        let drains: Vec<_> = self
            .pools
            .iter()
            .map(|(t, pool)| {
                let (t, pool) = (t.clone(), pool.clone());
                tokio::spawn(async move { (t, ractor::call!(pool, PoolMessage::Drain, grace)) })
            })
            .collect();
        for drain in drains {
            let finished = match deadline {
                Some(d) => match tokio::time::timeout_at(d, drain).await {
                    Ok(finished) => finished,
                    Err(_) => {
                        report.problems.push(
                            "a pool was still settling at the deadline (is the store unavailable?); \
                             its jobs run again after the next open"
                                .into(),
                        );
                        continue;
                    }
                },
                None => drain.await,
            };
            match finished {
                Ok((_, Ok(abandoned))) => report.abandoned += abandoned,
                Ok((t, Err(e))) => report.problems.push(format!("pool `{t}` drain: {e}")),
                Err(e) => report.problems.push(format!("pool drain task: {e}")),
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
            let unwrap_until = deadline
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(5))
                .max(tokio::time::Instant::now() + Duration::from_secs(1));
            loop {
                match Arc::try_unwrap(queue) {
                    Ok(q) => {
                        let closed = match deadline {
                            Some(_) => tokio::time::timeout(SHUTDOWN_SLACK, q.close()).await,
                            None => Ok(q.close().await),
                        };
                        match closed {
                            Ok(Ok(())) => report.queue_closed = true,
                            Ok(Err(e)) => report.problems.push(format!("queue close: {e}")),
                            Err(_) => report.problems.push(
                                "the queue did not close in time (is the store unavailable?)"
                                    .into(),
                            ),
                        }
                        break;
                    }
                    Err(q) if tokio::time::Instant::now() < unwrap_until => {
                        queue = q;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err(_) => {
                        report.problems.push(
                            "the queue was still in use at the deadline; dropped without close"
                                .into(),
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
        let (batches, _) =
            Actor::spawn_linked(None, Batches, services.clone(), cell.clone()).await?;
        let notify = Notify {
            waiters: waiters.clone(),
            batches: batches.clone(),
        };
        let mut children = HashMap::from([
            (waiters.get_id(), Child::Waiters),
            (batches.get_id(), Child::Batches),
        ]);
        let mut claimers = Vec::new();
        for kind in [Kind::Job, Kind::Pipeline] {
            let args = claimer_args(&services, &notify, &registrations, kind);
            let (claimer, _) = Actor::spawn_linked(None, Claimer, args, cell.clone()).await?;
            children.insert(claimer.get_id(), Child::Claimer(kind));
            claimers.push(claimer);
        }
        let sweeper_args = SweeperArguments {
            services: services.clone(),
            notify,
        };
        let (sweeper, _) = Actor::spawn_linked(None, Sweeper, sweeper_args, cell).await?;
        children.insert(sweeper.get_id(), Child::Sweeper);
        let bulk_claimer = claimers.pop().ok_or("claimer missing")?;
        let claimer = claimers.pop().ok_or("claimer missing")?;
        let mut state = SupervisorState {
            me: myself.clone(),
            queue: Some(queue),
            services,
            registrations,
            children,
            claimer,
            bulk_claimer,
            sweeper,
            waiters,
            batches,
            pools: HashMap::new(),
            shutting_down: false,
        };
        let types: Vec<String> = state.registrations.keys().cloned().collect();
        for t in types {
            state.spawn_child(Child::Pool(t)).await?;
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
                // Accepted even while shutting down, like a direct submission:
                // it is durable and runs after the next start.
                let services = state.services.clone();
                tokio::spawn(async move {
                    let _ = reply.send(services.submit(request).await);
                });
            }
            EngineMessage::AwaitJob(run_id, reply) => {
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    waiter: Waiter::Reply(reply),
                    recorded: None,
                });
            }
            EngineMessage::AwaitRecorded(run_id, record, reply) => {
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    waiter: Waiter::Reply(reply),
                    recorded: Some(record),
                });
            }
            EngineMessage::WatchJob(run_id, to) => {
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    waiter: Waiter::Notify(to),
                    recorded: None,
                });
            }
            EngineMessage::JobStatus(run_id, reply) => {
                // The same answer as `EngineRef::status` (durable outcomes only).
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let _ = reply.send(engine.status(&run_id).await);
                });
            }
            EngineMessage::CancelJob(run_id, reply) => {
                let services = state.services.clone();
                let waiters = state.waiters.clone();
                tokio::spawn(async move {
                    // A cancel may commit a record: announce it (see the waiters).
                    let _ = waiters.cast(WaitersMessage::Settling(run_id.clone()));
                    let result = services.cancel(&run_id).await;
                    match &result {
                        Ok((_, Some(record))) => {
                            let _ = waiters.cast(WaitersMessage::Settled {
                                run_id: run_id.clone(),
                                record: Box::new(record.clone()),
                            });
                        }
                        _ => {
                            let _ = waiters.cast(WaitersMessage::SettleAborted(run_id.clone()));
                        }
                    }
                    let result = result.map(|(result, _)| result);
                    let _ = reply.send(result);
                });
            }
            EngineMessage::Shutdown(reply) => {
                if state.shutting_down {
                    let _ = reply.send(ShutdownReport {
                        queue_closed: false,
                        abandoned: 0,
                        problems: vec!["already shut down".into()],
                    });
                    return Ok(());
                }
                let report = state.shutdown(&myself).await;
                let _ = reply.send(report);
                myself.stop(Some("shutdown".into()));
            }
            EngineMessage::StartBatch(spec, reply) => {
                if state.shutting_down {
                    let _ = reply.send(Err(EngineError::ShutDown));
                } else if !state
                    .registrations
                    .get(&spec.pipeline)
                    .is_some_and(|r| r.kind == Kind::Pipeline)
                {
                    let _ = reply.send(Err(EngineError::UnknownPipeline(spec.pipeline.clone())));
                } else {
                    let _ = state.batches.cast(BatchesMessage::Start(spec, reply));
                }
            }
            EngineMessage::RunBatch(spec, items, reply) => {
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let items = futures_util::stream::iter(items.into_iter().map(Ok));
                    let _ =
                        reply.send(crate::batch::drive_batch(&engine, *spec, Some(items)).await);
                });
            }
            EngineMessage::RunBatchAndTell(spec, items, to) => {
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let batch_id = spec.batch_id.clone();
                    let items = futures_util::stream::iter(items.into_iter().map(Ok));
                    let result = crate::batch::drive_batch(&engine, *spec, Some(items))
                        .await
                        .map_err(|e| e.to_string());
                    let _ = to.send_message(BatchFinished { batch_id, result });
                });
            }
            EngineMessage::ResumeBatch(spec, reply) => {
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let _ = reply.send(crate::batch::resume_batch(&engine, *spec).await);
                });
            }
            EngineMessage::ReleaseBatch(batch_id, reply) => {
                let _ = state.batches.cast(BatchesMessage::Release(batch_id, reply));
            }
            EngineMessage::BatchProgress(batch_id, reply) => {
                let _ = state
                    .batches
                    .cast(BatchesMessage::GetProgress(batch_id, reply));
            }
            EngineMessage::BatchStatus(batch_id, reply) => {
                let services = state.services.clone();
                tokio::spawn(async move {
                    let _ = reply.send(crate::batch::batch_state(&services, &batch_id).await);
                });
            }
            EngineMessage::ForgetBatch(batch_id, reply) => {
                let services = state.services.clone();
                let batches = state.batches.clone();
                tokio::spawn(async move {
                    let _ = reply.send(forget(&services, &batches, &batch_id).await);
                });
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
            #[cfg(feature = "testing")]
            EngineMessage::KillChild(kind, reply) => {
                let cell = match &kind {
                    ChildKind::Waiters => Some(state.waiters.get_cell()),
                    ChildKind::Batches => Some(state.batches.get_cell()),
                    ChildKind::Claimer => Some(state.claimer.get_cell()),
                    ChildKind::BulkClaimer => Some(state.bulk_claimer.get_cell()),
                    ChildKind::Sweeper => Some(state.sweeper.get_cell()),
                    ChildKind::Pool(t) => state.pools.get(t).map(|p| p.get_cell()),
                    ChildKind::Coordinator(id) => {
                        let _ = state.batches.cast(BatchesMessage::Kill(id.clone()));
                        let _ = reply.send(true);
                        return Ok(());
                    }
                };
                let found = cell.is_some();
                if let Some(cell) = cell {
                    cell.kill();
                }
                let _ = reply.send(found);
            }
            EngineMessage::PeekOutcome(run_id, reply) => {
                let _ = state.waiters.cast(WaitersMessage::Peek(run_id, reply));
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
        if why.starts_with(crate::claimer::STORE_CLOSED)
            && let Some(Child::Claimer(_)) = state.children.get(&who.get_id())
        {
            state.store_closed(&myself, why).await;
            return Ok(());
        }
        if let Some(child) = state.children.remove(&who.get_id()) {
            warn!(?child, reason = %why, "engine child exited; restarting it");
            let _ = &myself;
            state.restart(child).await?;
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

/// Forget a batch under its in-process lock (no run may start meanwhile).
pub(crate) async fn forget(
    services: &Services,
    batches: &ActorRef<BatchesMessage>,
    batch_id: &str,
) -> Result<bool> {
    crate::batch::check_batch_id(batch_id)?;
    let locked = ractor::call!(batches, BatchesMessage::Lock, batch_id.to_string())
        .map_err(|e| EngineError::ActorUnavailable(e.to_string()))?;
    if !locked {
        return Err(EngineError::BatchRunning(batch_id.to_string()));
    }
    let result = crate::batch::forget_batch_data(services, batch_id).await;
    let _ = batches.cast(BatchesMessage::Unlock(batch_id.to_string()));
    result
}
