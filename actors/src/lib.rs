//! gaffer's engine: the actor tree, its messages and the durable layout.
//!
//! This crate is untyped: jobs are bytes in, bytes out. It is the internal
//! engine of the `gaffer` crate and carries **no semver promise**; depend on
//! `gaffer` instead. See ARCHITECTURE.md at the repository root for the tree,
//! the messages, the key layout and the invariants.

#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod batch;
pub mod batches;
pub mod claimer;
pub mod coordinator;
pub mod effects;
pub mod error;
pub mod events;
pub mod handler;
pub mod keys;
pub mod memo;
pub mod pool;
pub mod records;
pub mod services;
pub mod settings;
mod settle;
pub use settle::Notify;
pub mod supervisor;
pub mod sweeper;
#[cfg(feature = "testing")]
pub mod testing;
pub mod waiters;

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorRef, DerivedActorRef};

pub use batch::{BatchFinished, BatchOutcome, BatchProgress, BatchSpec, BatchState, RecordSink};
pub use error::{EngineError, Result};
pub use events::EngineEvent;
pub use handler::{BoxFuture, Delivery, ErasedHandler, ItemInfo, Kind, Registration, Verdict};
pub use pool::PoolStats;
pub use records::{Cost, ItemStatus};
pub use records::{FailureKind, Outcome, OutcomeRecord, OutputRef};
pub use services::{CancelResult, JobState, Services, SubmitRequest, Submitted};
pub use settings::{MemoWrites, Settings};
#[cfg(feature = "testing")]
pub use supervisor::ChildKind;
pub use supervisor::{EngineConfig, EngineMessage, QueueSource, ShutdownReport};
pub use sweeper::SweepReport;
pub use waiters::{JobFinished, WaitError};

/// A clonable handle on a running engine: the supervisor's `ActorRef` plus the
/// engine's shared services.
#[derive(Debug, Clone)]
pub struct EngineRef {
    actor: ActorRef<EngineMessage>,
    services: Arc<Services>,
}

fn unavailable(e: impl std::fmt::Display) -> EngineError {
    EngineError::ActorUnavailable(e.to_string())
}

impl EngineRef {
    /// Start an engine: open the queue, check the layout, spawn the tree.
    pub async fn start(config: EngineConfig) -> Result<Self> {
        let (actor, _) = Actor::spawn(None, supervisor::Supervisor, config)
            .await
            .map_err(|e| match e {
                ractor::SpawnErr::StartupFailed(inner) => match inner.downcast::<EngineError>() {
                    Ok(engine) => *engine,
                    Err(other) => EngineError::Startup(other.to_string()),
                },
                other => EngineError::Startup(other.to_string()),
            })?;
        let services = ractor::call!(actor, EngineMessage::GetServices).map_err(unavailable)?;
        Ok(Self { actor, services })
    }

    pub(crate) fn from_parts(actor: ActorRef<EngineMessage>, services: Arc<Services>) -> Self {
        Self { actor, services }
    }

    /// The supervisor's `ActorRef`: send it [`EngineMessage`]s.
    pub fn actor(&self) -> &ActorRef<EngineMessage> {
        &self.actor
    }

    /// The engine's shared services.
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// Submit a job (directly, without a hop through the supervisor).
    pub async fn submit(&self, request: SubmitRequest) -> Result<Submitted> {
        self.services.submit(request).await
    }

    /// Wait for a job to end and return its outcome record.
    pub async fn await_job(&self, run_id: &str) -> Result<OutcomeRecord> {
        self.await_outcome(run_id, None).await
    }

    /// The outcome of a job whose submission was answered from its outcome
    /// record (`Submitted::recorded`): that record once it is durable, without
    /// reading it again.
    pub async fn await_recorded(
        &self,
        run_id: &str,
        record: OutcomeRecord,
    ) -> Result<OutcomeRecord> {
        self.await_outcome(run_id, Some(Box::new(record))).await
    }

    async fn await_outcome(
        &self,
        run_id: &str,
        recorded: Option<Box<OutcomeRecord>>,
    ) -> Result<OutcomeRecord> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        let mut last = None;
        // A waiters restart drops its reply ports: ask again (a few times). The
        // records are never read here directly: only the waiters know whether a
        // record read now is durable.
        for _ in 0..3 {
            let asked = match &recorded {
                None => ractor::call!(self.actor, EngineMessage::AwaitJob, run_id.to_string()),
                Some(record) => ractor::call!(
                    self.actor,
                    EngineMessage::AwaitRecorded,
                    run_id.to_string(),
                    record.clone()
                ),
            };
            match asked {
                Ok(Ok(record)) => return Ok(record),
                Ok(Err(WaitError::NotFound(id))) => return Err(EngineError::JobNotFound(id)),
                Ok(Err(WaitError::ShutDown)) => return Err(EngineError::ShutDown),
                Ok(Err(WaitError::Read(e))) => return Err(EngineError::ActorUnavailable(e)),
                Err(e) => {
                    if self.actor.get_status() != ractor::ActorStatus::Running {
                        return Err(EngineError::ShutDown);
                    }
                    last = Some(e.to_string());
                }
            }
        }
        Err(EngineError::ActorUnavailable(last.unwrap_or_default()))
    }

    /// Have `to` told (by a [`JobFinished`] message) when the job ends.
    pub fn watch_job(&self, run_id: &str, to: DerivedActorRef<JobFinished>) -> Result<()> {
        self.actor
            .cast(EngineMessage::WatchJob(run_id.to_string(), to))
            .map_err(|_| EngineError::ShutDown)
    }

    /// The outcome of a job if it has durably ended; `None` while it runs (or
    /// while its ending commit is not yet durable), or if it is unknown.
    pub async fn peek_outcome(&self, run_id: &str) -> Result<Option<OutcomeRecord>> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        match ractor::call!(self.actor, EngineMessage::PeekOutcome, run_id.to_string()) {
            Ok(Ok(record)) => Ok(record),
            Ok(Err(WaitError::ShutDown)) | Err(_) => Err(EngineError::ShutDown),
            Ok(Err(WaitError::NotFound(id))) => Err(EngineError::JobNotFound(id)),
            Ok(Err(WaitError::Read(e))) => Err(EngineError::ActorUnavailable(e)),
        }
    }

    /// Where a job is now (durable; works after a restart). A job whose ending
    /// commit is not yet durable is still `Running`.
    pub async fn status(&self, run_id: &str) -> Result<Option<JobState>> {
        let state = self.services.state(run_id).await?;
        if state.is_some_and(JobState::is_terminal) && self.peek_outcome(run_id).await?.is_none() {
            return Ok(Some(JobState::Running));
        }
        Ok(state)
    }

    /// Cancel a job.
    pub async fn cancel(&self, run_id: &str) -> Result<CancelResult> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        ractor::call!(self.actor, EngineMessage::CancelJob, run_id.to_string())
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Counters of each job type's handler pool.
    pub async fn pool_stats(&self) -> Result<HashMap<String, PoolStats>> {
        ractor::call!(self.actor, EngineMessage::GetPoolStats).map_err(unavailable)
    }

    /// Run one sweeper pass (reconciliation and retention) now.
    pub async fn sweep_now(&self) -> Result<SweepReport> {
        ractor::call!(self.actor, EngineMessage::SweepNow).map_err(unavailable)
    }

    /// Subscribe to lifecycle events.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.services.subscribe()
    }

    /// Shut down gracefully and wait for the supervisor to exit.
    pub async fn shutdown(&self) -> Result<ShutdownReport> {
        let report = ractor::call!(self.actor, EngineMessage::Shutdown)
            .map_err(|_| EngineError::ShutDown)?;
        // Wait for the supervisor itself to be gone.
        let _ = self
            .actor
            .wait(Some(std::time::Duration::from_secs(30)))
            .await;
        Ok(report)
    }
}
