//! The supervisor's children: which there are, how each is spawned (and
//! respawned after a failure, its new address published), and the stop of
//! the whole tree when the store closes under the engine.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::error;

use super::SupervisorState;
use crate::batches::registry::{BatchRegistry, RegistryRef};
use crate::engine::intake::{Intake, IntakeArguments};
use crate::engine::notify::Notify;
use crate::engine::shutdown::SHUTDOWN_SLACK;
use crate::erased::{DEFAULT_PIPELINE_CONCURRENCY, Kind, Unregistered};
use crate::exec::pool::{HandlerPool, PoolArguments, PoolRef};
use crate::jobs::waiters::{Waiters, WaitersArguments, WaitersRef};
use crate::maintenance::periodic::{Periodic, PeriodicArguments, PeriodicRef};
use crate::maintenance::sweeper::{Sweeper, SweeperArguments, SweeperRef};
#[cfg(feature = "testing")]
use crate::protocol::ChildKind;
use crate::protocol::EngineMessage;

/// A child of the supervisor, by role.
#[derive(Debug, Clone)]
pub(super) enum Child {
    Waiters,
    BatchRegistry,
    Sweeper,
    /// Takes submissions from other processes (with `client_intake`).
    Intake,
    /// Fires periodic jobs' ticks.
    Periodic,
    /// The pool of a registered job type or pipeline.
    Pool(String),
    /// The pool of a queue under the engine's prefixes whose type is not
    /// registered (its jobs fail: "no handler registered").
    Stray(String),
}

impl Child {
    /// The child's role, as the `actor` label of a restart.
    pub(super) fn role(&self) -> &'static str {
        match self {
            Child::Waiters => "waiters",
            Child::BatchRegistry => "batch_registry",
            Child::Sweeper => "sweeper",
            Child::Intake => "intake",
            Child::Periodic => "periodic",
            Child::Pool(_) => "pool",
            Child::Stray(_) => "stray_pool",
        }
    }
}

impl SupervisorState {
    pub(super) fn notify(&self) -> Notify {
        Notify::new(self.book.subscribe())
    }

    pub(super) fn registry(&self) -> RegistryRef {
        RegistryRef::new(self.registry.subscribe(), self.me.get_derived())
    }

    pub(super) fn engine_ref(&self) -> crate::EngineRef {
        crate::EngineRef::from_parts(self.me.clone(), self.services.clone(), self.registry())
    }

    fn pool_args(
        &self,
        name: &str,
        queue: String,
        handler: Arc<dyn crate::ErasedHandler>,
        concurrency: usize,
        rate: Option<crate::exec::rate::RateLimit>,
        timeout: Option<std::time::Duration>,
    ) -> PoolArguments {
        PoolArguments {
            job_type: name.to_string(),
            queue,
            handler,
            concurrency,
            services: self.services.clone(),
            notify: self.notify(),
            jobs: Arc::new(self.engine_ref()),
            paused: self.paused.contains(name),
            paused_values: self
                .paused_values
                .get(name)
                .map(|v| v.iter().cloned().collect())
                .unwrap_or_default(),
            rate,
            fair: None,
            timeout,
            max_snoozes: self.services.settings().max_snoozes,
            closed: self.me.get_derived(),
        }
    }

    pub(super) async fn spawn_child(
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
                self.waiters = WaitersRef(a.clone());
                self.book.send_modify(|book| book.jobs = a.get_derived());
                a.get_id()
            }
            Child::BatchRegistry => {
                let (a, _) = Actor::spawn_linked(None, BatchRegistry, services, cell).await?;
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
                self.sweeper = SweeperRef(a.clone());
                a.get_id()
            }
            Child::Intake => {
                let args = IntakeArguments {
                    services,
                    engine: self.engine_ref(),
                };
                let (a, _) = Actor::spawn_linked(None, Intake, args, cell).await?;
                a.get_id()
            }
            Child::Periodic => {
                let args = PeriodicArguments {
                    services,
                    schedules: self.periodic.values().cloned().collect(),
                    started_ms: self.started_ms,
                };
                let (a, _) = Actor::spawn_linked(None, Periodic, args, cell).await?;
                self.periodic_actor = Some(PeriodicRef(a.clone()));
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
                // Fairness, or a limit per key (which implies fairness with
                // equal weights).
                let fair = (reg.fair_by.is_some() || reg.key_concurrency.is_some()).then(|| {
                    crate::exec::fair::FairConfig::new(
                        &route.queue,
                        reg.fair_by.as_ref(),
                        reg.key_concurrency.as_ref(),
                    )
                });
                let args = PoolArguments {
                    fair,
                    max_snoozes: reg
                        .max_snoozes
                        .unwrap_or(self.services.settings().max_snoozes),
                    ..self.pool_args(
                        name,
                        route.queue,
                        reg.handler.clone(),
                        concurrency,
                        reg.rate,
                        reg.timeout,
                    )
                };
                let (a, _) = Actor::spawn_linked(None, HandlerPool, args, cell).await?;
                self.pools.insert(name.clone(), PoolRef(a.clone()));
                a.get_id()
            }
            Child::Stray(queue) => {
                let args =
                    self.pool_args(queue, queue.clone(), Arc::new(Unregistered), 1, None, None);
                let (a, _) = Actor::spawn_linked(None, HandlerPool, args, cell).await?;
                self.pools.insert(queue.clone(), PoolRef(a.clone()));
                a.get_id()
            }
        };
        self.children.insert(id, child);
        Ok(())
    }

    /// The store closed under us (fenced): stop everything, tell whoever
    /// waits, and exit. The queue cannot be closed cleanly any more.
    pub(super) async fn store_closed(&mut self, myself: &ActorRef<EngineMessage>, reason: String) {
        error!(%reason, "the engine's store closed; stopping the engine");
        self.shutting_down = true;
        self.debounce.stop_timers();
        self.services.emit(crate::events::EngineEvent::StoreClosed {
            reason: reason.clone(),
        });
        // The last event: subscribers' streams end.
        self.events = None;
        self.waiters.fail_all();
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

    /// Kill one child (feature `testing`): whether it was found.
    #[cfg(feature = "testing")]
    pub(super) fn kill_child(&self, kind: &ChildKind) -> bool {
        let cell = match kind {
            ChildKind::Waiters => Some(self.waiters.get_cell()),
            ChildKind::BatchRegistry => Some(self.registry().get().get_cell()),
            ChildKind::Sweeper => Some(self.sweeper.get_cell()),
            ChildKind::Pool(t) => self.pools.get(t).map(|p| p.get_cell()),
            ChildKind::Periodic => self.periodic_actor.as_ref().map(|p| p.get_cell()),
            ChildKind::Coordinator(id) => {
                self.registry().kill_coordinator(id);
                return true;
            }
        };
        let found = cell.is_some();
        if let Some(cell) = cell {
            cell.kill();
        }
        found
    }
}
