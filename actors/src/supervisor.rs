//! Supervisor: the root of the engine's tree. Opens (or is given) the taquba
//! queue and owns it for the engine's life; spawns the waiters, the batches
//! registry, the sweeper and one handler pool per job type or pipeline (and
//! one per queue of an unregistered type found in the store); restarts a
//! child that fails; answers the engine's public protocol; runs the shutdown
//! sequence and closes the queue.
//!
//! It owns the address book of settlements: when it restarts the waiters or
//! the batches registry it publishes the new address, which every settlement
//! task reads when it reports.
//!
//! Nothing slow runs inside its `handle`: submissions, status reads, cancels,
//! watches and the shutdown sequence run in tasks that answer the caller
//! themselves.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use taquba::Queue;
use tokio::sync::watch;
use tracing::{error, warn};

use crate::batch::{BatchFinished, BatchOutcome};
use crate::batches::Registry;
use crate::batches::{Batches, BatchesMessage};
use crate::error::{EngineError, Result};
use crate::handler::Unregistered;
use crate::handler::{DEFAULT_PIPELINE_CONCURRENCY, Kind, Registration};
use crate::pool::{HandlerPool, PoolArguments, PoolMessage};
#[cfg(feature = "testing")]
use crate::protocol::ChildKind;
use crate::protocol::{EngineConfig, EngineMessage, ShutdownReport};
use crate::services::{Services, SharedQueue};
use crate::settle::{JobEnd, Notify, Reports};
use crate::shutdown::{Closing, SHUTDOWN_SLACK, shut_down};
use crate::startup::{check_layout, open, routes, stray_queues};
use crate::sweeper::{Sweeper, SweeperArguments, SweeperMessage};
use crate::waiters::{JobFinished, Waiters, WaitersArguments, WaitersMessage};

/// The supervisor actor.
#[derive(Debug)]
pub struct Supervisor;

#[derive(Debug, Clone)]
enum Child {
    Waiters,
    Batches,
    Sweeper,
    /// The pool of a registered job type or pipeline.
    Pool(String),
    /// The pool of a queue under the engine's prefixes whose type is not
    /// registered (its jobs fail: "no handler registered").
    Stray(String),
}

/// State of the supervisor.
pub struct SupervisorState {
    me: ActorRef<EngineMessage>,
    queue: Option<Arc<SharedQueue>>,
    /// The queue comes back here once its last reference drops.
    queue_back: Option<tokio::sync::oneshot::Receiver<Queue>>,
    services: Arc<Services>,
    registrations: HashMap<String, Registration>,
    /// Queues of unregistered types found at start.
    strays: Vec<String>,
    /// The address book of settlements (waiters, batches), and the batches
    /// registry's own address.
    book: watch::Sender<Reports>,
    registry: watch::Sender<ActorRef<BatchesMessage>>,
    waiters: ActorRef<WaitersMessage>,
    batches: ActorRef<BatchesMessage>,
    sweeper: ActorRef<SweeperMessage>,
    /// Pools by job type or pipeline name (stray pools by queue name).
    pools: HashMap<String, ActorRef<PoolMessage>>,
    children: HashMap<ractor::ActorId, Child>,
    shutting_down: bool,
    /// The event channel's one lasting sender (the services hold it weakly):
    /// dropped, after the last event, when the engine stops, which ends
    /// every subscriber's stream.
    events: Option<crate::events::EventSender>,
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
    fn notify(&self) -> Notify {
        Notify::new(self.book.subscribe())
    }

    fn registry(&self) -> Registry {
        Registry::new(self.registry.subscribe())
    }

    fn engine_ref(&self) -> crate::EngineRef {
        crate::EngineRef::from_parts(self.me.clone(), self.services.clone(), self.registry())
    }

    fn pool_args(
        &self,
        name: &str,
        queue: String,
        handler: Arc<dyn crate::ErasedHandler>,
        concurrency: usize,
    ) -> PoolArguments {
        PoolArguments {
            job_type: name.to_string(),
            queue,
            handler,
            concurrency,
            services: self.services.clone(),
            notify: self.notify(),
            jobs: Arc::new(self.engine_ref()),
        }
    }

    async fn spawn_child(
        &mut self,
        child: Child,
        restarted: bool,
    ) -> Result<(), ActorProcessingErr> {
        let cell = self.me.get_cell();
        let services = self.services.clone();
        let id = match &child {
            Child::Waiters => {
                let args = WaitersArguments {
                    services,
                    restarted,
                };
                let (a, _) = Actor::spawn_linked(None, Waiters, args, cell).await?;
                self.waiters = a.clone();
                self.book.send_modify(|book| book.jobs = a.get_derived());
                a.get_id()
            }
            Child::Batches => {
                let (a, _) = Actor::spawn_linked(None, Batches, services, cell).await?;
                self.batches = a.clone();
                self.book.send_modify(|book| book.items = a.get_derived());
                self.registry.send_replace(a.clone());
                a.get_id()
            }
            Child::Sweeper => {
                let args = SweeperArguments {
                    services,
                    registry: self.registry(),
                };
                let (a, _) = Actor::spawn_linked(None, Sweeper, args, cell).await?;
                self.sweeper = a.clone();
                a.get_id()
            }
            Child::Pool(name) => {
                let (Some(reg), Some(route)) = (
                    self.registrations.get(name).cloned(),
                    self.services.route(name).cloned(),
                ) else {
                    return Ok(());
                };
                let concurrency = reg.concurrency.unwrap_or(match reg.kind {
                    Kind::Job => services.settings().max_concurrent_jobs,
                    Kind::Pipeline => DEFAULT_PIPELINE_CONCURRENCY,
                });
                let args = self.pool_args(name, route.queue, reg.handler.clone(), concurrency);
                let (a, _) = Actor::spawn_linked(None, HandlerPool, args, cell).await?;
                self.pools.insert(name.clone(), a.clone());
                a.get_id()
            }
            Child::Stray(queue) => {
                let args = self.pool_args(queue, queue.clone(), Arc::new(Unregistered), 1);
                let (a, _) = Actor::spawn_linked(None, HandlerPool, args, cell).await?;
                self.pools.insert(queue.clone(), a.clone());
                a.get_id()
            }
        };
        self.children.insert(id, child);
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
        // The last event: subscribers' streams end.
        self.events = None;
        let _ = self.waiters.cast(WaitersMessage::FailAll);
        self.children.clear();
        myself
            .get_cell()
            .stop_children_and_wait(Some(reason.clone()), Some(Duration::from_secs(10)))
            .await;
        // Close what can be closed (its background tasks stop); the close
        // itself fails on a fenced store, which is expected.
        self.queue = None;
        if let Some(back) = self.queue_back.take()
            && let Ok(Ok(queue)) = tokio::time::timeout(SHUTDOWN_SLACK, back).await
        {
            let _ = tokio::time::timeout(SHUTDOWN_SLACK, queue.close()).await;
        }
        myself.stop(Some(reason));
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
        let routes = routes(&config.settings, &registrations)?;
        let (queue, store) = open(config.source, &config.settings).await?;
        let strays = match check_layout(&queue).await {
            Ok(()) => stray_queues(&queue, &config.settings, &routes).await,
            Err(e) => Err(e),
        };
        let strays = match strays {
            Ok(strays) => strays,
            Err(e) => {
                let _ = queue.close().await;
                return Err(e.into());
            }
        };
        let clock = queue.clock();
        let (queue, queue_back) = SharedQueue::new(queue);
        let events = config.events.unwrap_or_else(crate::events::channel);
        let services = Arc::new(Services::new(
            &queue,
            store,
            config.settings,
            clock,
            routes,
            events.clone(),
        ));
        let cell = myself.get_cell();
        let waiters_args = WaitersArguments {
            services: services.clone(),
            restarted: false,
        };
        let (waiters, _) = Actor::spawn_linked(None, Waiters, waiters_args, cell.clone()).await?;
        let (batches, _) =
            Actor::spawn_linked(None, Batches, services.clone(), cell.clone()).await?;
        let (book, _) = watch::channel(Reports {
            jobs: waiters.get_derived(),
            items: batches.get_derived(),
        });
        let (registry, _) = watch::channel(batches.clone());
        let sweeper_args = SweeperArguments {
            services: services.clone(),
            registry: Registry::new(registry.subscribe()),
        };
        let (sweeper, _) = Actor::spawn_linked(None, Sweeper, sweeper_args, cell).await?;
        let children = HashMap::from([
            (waiters.get_id(), Child::Waiters),
            (batches.get_id(), Child::Batches),
            (sweeper.get_id(), Child::Sweeper),
        ]);
        let mut state = SupervisorState {
            me: myself.clone(),
            queue: Some(queue),
            queue_back: Some(queue_back),
            services,
            registrations,
            strays,
            book,
            registry,
            children,
            sweeper,
            waiters,
            batches,
            pools: HashMap::new(),
            shutting_down: false,
            events: Some(events),
        };
        let names: Vec<String> = state.registrations.keys().cloned().collect();
        for name in names {
            state.spawn_child(Child::Pool(name), false).await?;
        }
        for queue in state.strays.clone() {
            warn!(%queue, "a queue of an unregistered job type or pipeline holds jobs; they fail as unregistered");
            state.spawn_child(Child::Stray(queue), false).await?;
        }
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
                // A dead waiters actor drops the reply port: the caller asks again.
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    reply,
                    recorded: None,
                });
            }
            EngineMessage::AwaitRecorded(run_id, record, reply) => {
                let _ = state.waiters.cast(WaitersMessage::Await {
                    run_id,
                    reply,
                    recorded: Some(record),
                });
            }
            EngineMessage::WatchJob(run_id, to) => {
                // A watch is a wait in a task: it asks the waiters again if
                // they restart, so it is never lost.
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let result = engine.wait_for(&run_id, None).await;
                    let _ = to.send_message(JobFinished { run_id, result });
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
                let notify = state.notify();
                tokio::spawn(async move {
                    // A cancel may commit a record: announce it (see the waiters).
                    notify.job(JobEnd::Settling(run_id.clone()));
                    let result = services.cancel(&run_id).await;
                    match &result {
                        Ok((_, Some(record))) => notify.job(JobEnd::Ended {
                            run_id: run_id.clone(),
                            record: Box::new(record.clone()),
                        }),
                        _ => notify.job(JobEnd::Aborted(run_id.clone())),
                    }
                    let _ = reply.send(result.map(|(result, _)| result));
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
                state.shutting_down = true;
                // No batch run starts any more.
                let _ = state.batches.cast(BatchesMessage::Close);
                let closing = Closing {
                    cell: myself.get_cell(),
                    pools: state
                        .pools
                        .iter()
                        .map(|(t, p)| (t.clone(), p.clone()))
                        .collect(),
                    waiters: state.waiters.clone(),
                    queue: state.queue.take(),
                    queue_back: state.queue_back.take(),
                    grace: state.services.settings().shutdown_grace,
                };
                state.children.clear();
                let events = state.events.take();
                let me = myself.clone();
                tokio::spawn(async move {
                    let report = shut_down(closing).await;
                    // The last event; dropping the sender then ends every
                    // subscriber's stream, before the caller is answered.
                    if let Some(events) = events {
                        let _ = events.send(crate::events::EngineEvent::ShutDown {
                            report: report.clone(),
                        });
                    }
                    let _ = reply.send(report);
                    me.stop(Some("shutdown".into()));
                });
            }
            EngineMessage::RunBatch(spec, items, reply) => {
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let items = futures_util::stream::iter(items.into_iter().map(Ok));
                    let _ = reply.send(engine.run_batch(*spec, items).await);
                });
            }
            EngineMessage::RunBatchAndTell(spec, items, to) => {
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let batch_id = spec.batch_id.clone();
                    let items = futures_util::stream::iter(items.into_iter().map(Ok));
                    let result = engine.run_batch(*spec, items).await;
                    let _ = to.send_message(BatchFinished { batch_id, result });
                });
            }
            EngineMessage::WatchBatch(batch_id, to) => {
                let registry = state.registry();
                tokio::spawn(async move {
                    let result = watch_batch(&registry, &batch_id).await;
                    let _ = to.send_message(BatchFinished { batch_id, result });
                });
            }
            EngineMessage::ResumeBatch(spec, reply) => {
                let engine = state.engine_ref();
                tokio::spawn(async move {
                    let _ = reply.send(engine.resume_batch(*spec).await);
                });
            }
            EngineMessage::BatchProgress(batch_id, reply) => {
                let _ = state
                    .batches
                    .cast(BatchesMessage::GetProgress(batch_id, reply));
            }
            EngineMessage::BatchStatus(batch_id, reply) => {
                let services = state.services.clone();
                tokio::spawn(async move {
                    let _ = reply.send(crate::status::batch_state(&services, &batch_id).await);
                });
            }
            EngineMessage::ForgetBatch(batch_id, reply) => {
                let services = state.services.clone();
                let batches = state.batches.clone();
                tokio::spawn(async move {
                    let _ = reply.send(crate::driver::forget(&services, &batches, &batch_id).await);
                });
            }
            EngineMessage::ResumeJobType(name, reply) => match state.pools.get(&name).cloned() {
                Some(pool) if state.registrations.contains_key(&name) => {
                    tokio::spawn(async move {
                        let resumed = ractor::call!(pool, PoolMessage::Resume)
                            .map_err(|e| EngineError::ActorUnavailable(e.to_string()));
                        let _ = reply.send(resumed);
                    });
                }
                _ => {
                    let _ = reply.send(Err(EngineError::UnknownJobType(name)));
                }
            },
            EngineMessage::GetServices(reply) => {
                let _ = reply.send(state.services.clone());
            }
            EngineMessage::GetRegistry(reply) => {
                let _ = reply.send(state.registry());
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
        if why.starts_with(crate::pool::STORE_CLOSED)
            && let Some(Child::Pool(_) | Child::Stray(_)) = state.children.get(&who.get_id())
        {
            state.store_closed(&myself, why).await;
            return Ok(());
        }
        if let Some(child) = state.children.remove(&who.get_id()) {
            warn!(?child, reason = %why, "engine child exited; restarting it");
            state.spawn_child(child, true).await?;
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

/// Attempts of a watch whose registry keeps dying before the run ends.
const WATCH_ATTEMPTS: u32 = 20;

/// Wait for the end of the run of `batch_id` in progress. A registry that
/// restarts drops the wait: it is asked again (the run goes on: its driver
/// replaces the coordinator).
async fn watch_batch(registry: &Registry, batch_id: &str) -> Result<BatchOutcome> {
    let mut last = String::new();
    for attempt in 0..WATCH_ATTEMPTS {
        match ractor::call!(registry.get(), BatchesMessage::Watch, batch_id.to_string()) {
            Ok(result) => return result,
            Err(e) => {
                last = e.to_string();
                tokio::time::sleep(Duration::from_millis(10) * (attempt + 1)).await;
            }
        }
    }
    Err(EngineError::ActorUnavailable(format!(
        "the batches registry kept restarting while the run of `{batch_id}` was watched: {last}"
    )))
}
