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
use tracing::warn;

mod children;
mod requests;

use children::Child;

use crate::batches::registry::{BatchRegistry, RegistryMessage, RegistryRef};
use crate::engine::notify::Reports;
use crate::engine::startup::{
    check_encryption, check_layout, check_shard, open, routes, stray_queues,
};
use crate::erased::Registration;
use crate::error::{EngineError, Result};
use crate::exec::pool::PoolRef;
use crate::jobs::waiters::{Waiters, WaitersArguments, WaitersRef};
use crate::maintenance::sweeper::{Sweeper, SweeperArguments, SweeperRef};
use crate::protocol::{EngineConfig, EngineMessage};
use crate::services::{Services, SharedQueue};

/// The supervisor actor.
#[derive(Debug)]
pub(crate) struct Supervisor;

/// State of the supervisor.
pub(crate) struct SupervisorState {
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
    registry: watch::Sender<ActorRef<RegistryMessage>>,
    waiters: WaitersRef,
    sweeper: SweeperRef,
    /// The claims on batch ids: the run (or forget) of each in progress, and
    /// a run's watchers. Here because they must outlive the registry.
    claims: crate::batches::claims::Claims,
    /// The gates of workflows: which settlement decides a waiting step.
    /// Here because what is in flight must outlive every other actor.
    gates: crate::workflows::Gates,
    /// The debounce lines: each key's operations, one batch at a time.
    /// Here because a batch in flight must outlive every other actor.
    debounce: crate::jobs::debounce::Debouncer,
    /// Pools by job type or pipeline name (stray pools by queue name).
    pools: HashMap<String, PoolRef>,
    /// The periodic jobs scheduled on this engine (handed to the periodic
    /// actor whenever it is spawned), and the actor.
    periodic: std::collections::BTreeMap<String, crate::maintenance::ticks::PeriodicSpec>,
    periodic_actor: Option<crate::maintenance::periodic::PeriodicRef>,
    /// When the engine started (queue clock, epoch ms): periodic ticks due
    /// before it were missed.
    started_ms: u64,
    /// Job types an operator paused (durable under `gaffer/v1/paused/`):
    /// their pools start paused, also after a restart of the pool.
    paused: std::collections::HashSet<String>,
    /// Per job type, the partition queues of the values an operator paused
    /// (durable under `gaffer/v1/paused-values/`): its pool starts with
    /// them held, also after a restart of the pool.
    paused_values: HashMap<String, std::collections::HashSet<String>>,
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

/// The periodic jobs of a start, checked: valid names and schedules, unique
/// names, each one's job type a registered job type.
fn check_periodic(
    specs: Vec<crate::maintenance::ticks::PeriodicSpec>,
    routes: &HashMap<String, crate::services::Route>,
) -> Result<std::collections::BTreeMap<String, crate::maintenance::ticks::PeriodicSpec>> {
    let mut periodic = std::collections::BTreeMap::new();
    for spec in specs {
        requests::check_periodic_spec(&spec, routes)?;
        if periodic.contains_key(&spec.name) {
            return Err(EngineError::DuplicatePeriodic(spec.name));
        }
        periodic.insert(spec.name.clone(), spec);
    }
    Ok(periodic)
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
        let periodic = check_periodic(config.periodic, &routes)?;
        let (queue, store) = open(config.source, &config.settings).await?;
        let checked = match (check_layout(&queue).await, &config.shard) {
            (Ok(()), Some(place)) => check_shard(&queue, place).await,
            (checked, _) => checked,
        };
        let checked = match checked {
            Ok(()) => check_encryption(&queue, &config.settings.encryption).await,
            Err(e) => Err(e),
        };
        let strays = match checked {
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
        let started_ms = clock.now_ms();
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
        services.set_gates(myself.get_derived());
        services.set_debounce(myself.get_derived());
        let cell = myself.get_cell();
        let waiters_args = WaitersArguments {
            services: services.clone(),
            restarted: false,
        };
        let (waiters, _) = Actor::spawn_linked(None, Waiters, waiters_args, cell.clone()).await?;
        let (batches, _) =
            Actor::spawn_linked(None, BatchRegistry, services.clone(), cell.clone()).await?;
        let (book, _) = watch::channel(Reports {
            jobs: waiters.get_derived(),
            items: batches.get_derived(),
        });
        let (registry, _) = watch::channel(batches.clone());
        let sweeper_args = SweeperArguments {
            services: services.clone(),
            registry: RegistryRef::new(registry.subscribe(), myself.get_derived()),
        };
        let (sweeper, _) = Actor::spawn_linked(None, Sweeper, sweeper_args, cell).await?;
        let children = HashMap::from([
            (waiters.get_id(), Child::Waiters),
            (batches.get_id(), Child::BatchRegistry),
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
            sweeper: SweeperRef(sweeper),
            claims: Default::default(),
            gates: Default::default(),
            debounce: Default::default(),
            waiters: WaitersRef(waiters),
            pools: HashMap::new(),
            periodic,
            periodic_actor: None,
            started_ms,
            paused: Default::default(),
            paused_values: Default::default(),
            shutting_down: false,
            events: Some(events),
        };
        state.paused = state.services.paused_types().await?.into_iter().collect();
        state.load_paused_values().await?;
        // Signals a crash left between a wait's commit and its delivery.
        let (delivered, removed) = state.services.deliver_held_signals().await?;
        if delivered + removed > 0 {
            tracing::info!(
                delivered,
                removed,
                "signals held over from before the start"
            );
        }
        let names: Vec<String> = state.registrations.keys().cloned().collect();
        for name in names {
            state.spawn_child(Child::Pool(name), false).await?;
        }
        if state.services.settings().client_intake {
            state.spawn_child(Child::Intake, false).await?;
        }
        state.spawn_child(Child::Periodic, false).await?;
        let me = myself.get_derived();
        state.debounce.start(&me, &state.services);
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
            EngineMessage::SubmitJob(request, reply) => state.submit(request, reply),
            EngineMessage::AwaitJob(run_id, reply) => state.waiters.await_run(run_id, None, reply),
            EngineMessage::AwaitRecorded(run_id, record, reply) => {
                state.waiters.await_run(run_id, Some(record), reply)
            }
            EngineMessage::WatchJob(run_id, to) => state.watch_job(run_id, to),
            EngineMessage::JobStatus(run_id, reply) => state.status(run_id, reply),
            EngineMessage::JobOutcome(run_id, reply) => state.waiters.peek(run_id, reply),
            EngineMessage::CancelJob(run_id, reply) => state.cancel(run_id, reply),
            EngineMessage::SignalJob(run_id, name, payload, reply) => {
                state.signal(run_id, name, payload, reply)
            }
            EngineMessage::Shutdown(reply) => state.shutdown(&myself, reply),
            EngineMessage::RunBatch(spec, items, reply) => state.run_batch(*spec, items, reply),
            EngineMessage::RunBatchAndTell(spec, items, to) => {
                state.run_batch_and_tell(*spec, items, to)
            }
            EngineMessage::WatchBatch(batch_id, to) => state.claims.watch(batch_id, to),
            EngineMessage::AttachBatch(takeover, reply) => state.claims.attach(*takeover, reply),
            EngineMessage::BatchClaim(claim) => state.claims.handle(claim),
            EngineMessage::Gate(message) => {
                let me = myself.get_derived();
                state.gates.handle(message, &me, &state.services)
            }
            EngineMessage::Debounce(message) => {
                let me = myself.get_derived();
                let notify = state.notify();
                state
                    .debounce
                    .handle(message, &me, &state.services, &notify)
            }
            EngineMessage::ResumeBatch(spec, reply) => state.resume_batch(*spec, reply),
            EngineMessage::BatchProgress(batch_id, reply) => state.batch_progress(batch_id, reply),
            EngineMessage::BatchStatus(batch_id, reply) => state.batch_status(batch_id, reply),
            EngineMessage::ForgetBatch(batch_id, reply) => state.forget_batch(batch_id, reply),
            EngineMessage::ResumeJobType(name, reply) => state.resume_job_type(name, reply),
            EngineMessage::PauseJobType(name, reply) => state.pause_job_type(name, reply),
            EngineMessage::PauseValue {
                job_type,
                header,
                value,
                pause,
                reply,
            } => state.pause_value(job_type, header, value, pause, reply),
            EngineMessage::RetryJob(run_id, reply) => state.retry(run_id, reply),
            EngineMessage::RetryFailed(job_type, since_ms, reply) => {
                state.retry_failed(job_type, since_ms, reply)
            }
            EngineMessage::GetServices(reply) => {
                let _ = reply.send(state.services.clone());
            }
            EngineMessage::GetRegistry(reply) => {
                let _ = reply.send(state.registry());
            }
            EngineMessage::GetPoolStats(reply) => state.pool_stats(reply),
            EngineMessage::SweepNow(reply) => state.sweeper.sweep_now(reply),
            EngineMessage::AddPeriodic(spec, reply) => {
                let _ = reply.send(state.add_periodic(*spec));
            }
            EngineMessage::RemovePeriodic(name, reply) => {
                let _ = reply.send(Ok(state.remove_periodic(&name)));
            }
            EngineMessage::CheckPeriodic(reply) => state.check_periodic(reply),
            EngineMessage::StoreClosed(closed) => {
                if !state.shutting_down {
                    state.store_closed(&myself, closed.reason).await;
                }
            }
            #[cfg(feature = "testing")]
            EngineMessage::KillChild(kind, reply) => {
                let _ = reply.send(state.kill_child(&kind));
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
            crate::telemetry::restarted(child.role());
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
