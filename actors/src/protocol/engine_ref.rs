//! `EngineRef`: the clonable handle on a running engine (the supervisor's
//! `ActorRef` plus the shared services), with every operation as a
//! method; the typed API and services talk to the engine through it.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorRef, DerivedActorRef};

use crate::batches::registry::RegistryRef;
use crate::batches::spec::{BatchFinished, BatchOutcome, BatchSpec, SinkAttached, SinkTakeover};
pub(super) use crate::engine::shutdown::ShutdownReport;
use crate::engine::supervisor::Supervisor;
use crate::erased::{BoxFuture, JobEngine};
use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::exec::parking;
use crate::exec::pool::PoolStats;
use crate::jobs::submit::{CancelResult, JobState, SubmitRequest, Submitted};
use crate::jobs::waiters::{JobFinished, WaitError};
use crate::layout::keys;
use crate::layout::records::{OutcomeRecord, OutputRef};
use crate::maintenance::sweeper::SweepReport;
use crate::maintenance::ticks::PeriodicSpec;
use crate::services::Services;

use super::{EngineConfig, EngineMessage};

/// A clonable handle on a running engine: the supervisor's `ActorRef` plus the
/// engine's shared services.
#[derive(Debug, Clone)]
pub struct EngineRef {
    actor: ActorRef<EngineMessage>,
    services: Arc<Services>,
    registry: RegistryRef,
}

fn unavailable(e: impl std::fmt::Display) -> EngineError {
    EngineError::unavailable("supervisor", e)
}

/// Longest wait for the answer to adding or removing a periodic job (the
/// supervisor answers at once).
const PERIODIC_CALL_MS: u64 = 10_000;
/// Longest wait for a check of the periodic jobs (it reads and writes the
/// store).
const PERIODIC_CHECK_MS: u64 = 60_000;

/// A periodic call that was not answered: the engine stopped, or (a
/// timeout, a dropped reply) its actor did not answer in time.
fn periodic_call<T>(e: ractor::RactorErr<T>) -> EngineError {
    match e {
        ractor::RactorErr::Messaging(ractor::MessagingErr::SendErr(_)) => EngineError::ShutDown,
        other => EngineError::unavailable("periodic", other),
    }
}

/// Times a wait for a job asks the waiters, at most, while they restart.
const WAIT_ATTEMPTS: u32 = 20;
/// The pause before asking again grows by this much each time (2.1 s in all).
const WAIT_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);
/// A wait that lasted this long before it was dropped counts from 1 again.
const WAIT_RESET: std::time::Duration = std::time::Duration::from_secs(1);

impl EngineRef {
    /// Start an engine: open the queue, check the layout, spawn the tree.
    pub async fn start(config: EngineConfig) -> Result<Self> {
        let (actor, _) = Actor::spawn(None, Supervisor, config)
            .await
            .map_err(|e| match e {
                ractor::SpawnErr::StartupFailed(inner) => match inner.downcast::<EngineError>() {
                    Ok(engine) => *engine,
                    Err(other) => EngineError::Startup(other.to_string()),
                },
                other => EngineError::Startup(other.to_string()),
            })?;
        let services = ractor::call!(actor, EngineMessage::GetServices).map_err(unavailable)?;
        let registry = ractor::call!(actor, EngineMessage::GetRegistry).map_err(unavailable)?;
        Ok(Self {
            actor,
            services,
            registry,
        })
    }

    pub(crate) fn from_parts(
        actor: ActorRef<EngineMessage>,
        services: Arc<Services>,
        registry: RegistryRef,
    ) -> Self {
        Self {
            actor,
            services,
            registry,
        }
    }

    /// Run a batch (its items given as a stream) to completion.
    pub async fn run_batch<I>(&self, spec: BatchSpec, items: I) -> Result<BatchOutcome>
    where
        I: futures_util::Stream<Item = Result<(String, Vec<u8>)>> + Unpin,
    {
        crate::batches::driver::drive_batch(&self.services, &self.registry, spec, Some(items)).await
    }

    /// Resume a batch from its manifest to completion.
    pub async fn resume_batch(&self, spec: BatchSpec) -> Result<BatchOutcome> {
        crate::batches::driver::resume_batch(&self.services, &self.registry, spec).await
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
        // From inside a job, the wait parks the job's slot (see `parking`).
        let waited = match parking::wait(self.wait_for(run_id, recorded)).await {
            parking::Waited::Done(waited) => waited,
            parking::Waited::Drained => Err(WaitError::ShutDown),
            // The job that waited was cancelled: so is the job it awaited.
            parking::Waited::Cancelled => {
                if let Err(e) = self.cancel(run_id).await {
                    tracing::warn!(%run_id, error = %e, "cancelling the job a cancelled job awaited failed");
                }
                return Err(EngineError::WaiterCancelled(run_id.to_string()));
            }
        };
        waited.map_err(|e| match e {
            WaitError::NotFound(id) => EngineError::JobNotFound(id),
            WaitError::NotSubmittedThroughGaffer(id) => EngineError::NotSubmittedThroughGaffer(id),
            WaitError::ShutDown => EngineError::ShutDown,
            WaitError::Read(e) => e,
        })
    }

    /// Wait for a job to end. A waiters restart drops the reply port: the
    /// wait asks again (the records are never read here directly: only the
    /// waiters know whether a record read now is durable).
    pub(crate) async fn wait_for(
        &self,
        run_id: &str,
        recorded: Option<Box<OutcomeRecord>>,
    ) -> std::result::Result<OutcomeRecord, WaitError> {
        self.ask_waiters(run_id, |reply| match &recorded {
            None => EngineMessage::AwaitJob(run_id.to_string(), reply),
            Some(record) => EngineMessage::AwaitRecorded(run_id.to_string(), record.clone(), reply),
        })
        .await
        .and_then(|answer| answer)
    }

    /// Ask the waiters (through the supervisor) and get their answer. If they
    /// restart meanwhile the reply port is dropped: ask again, after a short
    /// growing pause, a bounded number of times.
    async fn ask_waiters<T: Send + 'static>(
        &self,
        run_id: &str,
        ask: impl Fn(ractor::RpcReplyPort<T>) -> EngineMessage,
    ) -> std::result::Result<T, WaitError> {
        let mut last = String::new();
        let mut attempt = 0;
        while attempt < WAIT_ATTEMPTS {
            let asked = tokio::time::Instant::now();
            match self.actor.call(&ask, None).await {
                Ok(ractor::rpc::CallResult::Success(answer)) => return Ok(answer),
                Ok(ractor::rpc::CallResult::Timeout) => last = "timed out".into(),
                Ok(ractor::rpc::CallResult::SenderError) => {
                    last = "the reply port was dropped".into()
                }
                Err(e) => last = e.to_string(),
            }
            if self.actor.get_status() != ractor::ActorStatus::Running {
                return Err(WaitError::ShutDown);
            }
            // A wait that was in place for a while before a restart dropped it
            // counts again from 1: only restarts in a row end a wait.
            attempt = if asked.elapsed() > WAIT_RESET {
                1
            } else {
                attempt + 1
            };
            tokio::time::sleep(WAIT_PAUSE * attempt).await;
        }
        Err(WaitError::Read(EngineError::unavailable(
            "waiters",
            format!("they kept restarting while `{run_id}` was asked for ({last})"),
        )))
    }

    /// Have `to` told (by a [`JobFinished`] message) when the job ends.
    pub fn watch_job(&self, run_id: &str, to: DerivedActorRef<JobFinished>) -> Result<()> {
        self.actor
            .cast(EngineMessage::WatchJob(run_id.to_string(), to))
            .map_err(|_| EngineError::ShutDown)
    }

    /// Have `to` told (by a [`BatchFinished`] message) when the run of this
    /// batch in progress here ends; a service restarted by its supervisor
    /// re-attaches to its batch with this. `to` gets `BatchNotRunning` if no
    /// run is in progress.
    pub fn watch_batch(&self, batch_id: &str, to: DerivedActorRef<BatchFinished>) -> Result<()> {
        crate::layout::keys::check_batch_id(batch_id)?;
        self.actor
            .cast(EngineMessage::WatchBatch(batch_id.to_string(), to))
            .map_err(|_| EngineError::ShutDown)
    }

    /// Have `to` told when the run of this batch in progress here ends (as
    /// [`watch_batch`](Self::watch_batch)), and give `sink` the run's item
    /// records still to come: how a restarted service that was the run's
    /// sink takes it over. Answers where the switch fell (see
    /// [`SinkAttached`]); `BatchNotRunning` if no run is in progress.
    pub async fn attach_batch(
        &self,
        batch_id: &str,
        sink: Arc<dyn crate::batches::spec::RecordSink>,
        to: DerivedActorRef<BatchFinished>,
    ) -> Result<SinkAttached> {
        crate::layout::keys::check_batch_id(batch_id)?;
        let takeover = SinkTakeover {
            batch_id: batch_id.to_string(),
            sink,
            to,
        };
        // Answered by a task that ends: the run's coordinator answers, or the
        // run is found ended, within a bounded number of handovers.
        ractor::call!(self.actor, EngineMessage::AttachBatch, Box::new(takeover))
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Resume a job type (or pipeline) paused by an operator or after
    /// crashing too often. Answers whether it was paused.
    pub async fn resume(&self, name: &str) -> Result<bool> {
        ractor::call!(self.actor, EngineMessage::ResumeJobType, name.to_string())
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Pause a job type (or pipeline) durably: nothing more of it is
    /// claimed, across restarts, until [`resume`](Self::resume);
    /// running jobs finish, nothing is failed. Answers whether it was
    /// running.
    pub async fn pause(&self, name: &str) -> Result<bool> {
        ractor::call!(self.actor, EngineMessage::PauseJobType, name.to_string())
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Pause one value of a job type's partitioning header durably (the
    /// header of its `fair_by`, `key_concurrency` or per-header rate
    /// limit): nothing more of that value's jobs is claimed, across
    /// restarts, until [`resume_value`](Self::resume_value), while the
    /// type's other values run; running jobs finish. Answers whether it
    /// was running. `NotPartitioned` for a type not spread by `header`.
    pub async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<bool> {
        self.value_paused(job_type, header, value, true).await
    }

    /// Resume a value paused by [`pause_value`](Self::pause_value).
    /// Answers whether it was paused.
    pub async fn resume_value(&self, job_type: &str, header: &str, value: &str) -> Result<bool> {
        self.value_paused(job_type, header, value, false).await
    }

    async fn value_paused(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
        pause: bool,
    ) -> Result<bool> {
        ractor::call!(self.actor, |reply| EngineMessage::PauseValue {
            job_type: job_type.to_string(),
            header: header.to_string(),
            value: value.to_string(),
            pause,
            reply,
        })
        .map_err(|_| EngineError::ShutDown)?
    }

    /// Run a failed or cancelled job again under its id (see
    /// [`Services::retry`](crate::services::Services::retry)).
    pub async fn retry(&self, run_id: &str) -> Result<()> {
        ractor::call!(self.actor, EngineMessage::RetryJob, run_id.to_string())
            .map_err(|_| EngineError::ShutDown)?
    }

    /// Retry the jobs of `job_type` that failed at or after `since_ms`
    /// (epoch ms; 0 for all). Answers how many were retried.
    pub async fn retry_failed(&self, job_type: &str, since_ms: u64) -> Result<usize> {
        ractor::call!(
            self.actor,
            EngineMessage::RetryFailed,
            job_type.to_string(),
            since_ms
        )
        .map_err(|_| EngineError::ShutDown)?
    }

    /// The outcome of a job if it has durably ended; `None` while it exists
    /// and has not ended (queued, running, or its ending commit not yet
    /// durable); `JobNotFound` if no record of it exists (never submitted, or
    /// its record passed retention), as `await_job` answers.
    pub async fn outcome(&self, run_id: &str) -> Result<Option<OutcomeRecord>> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        let peeked = self
            .ask_waiters(run_id, |reply| {
                EngineMessage::JobOutcome(run_id.to_string(), reply)
            })
            .await
            .and_then(|answer| answer);
        match peeked {
            Ok(record) => Ok(record),
            Err(WaitError::ShutDown) => Err(EngineError::ShutDown),
            Err(WaitError::NotFound(id)) => Err(EngineError::JobNotFound(id)),
            Err(WaitError::NotSubmittedThroughGaffer(id)) => {
                Err(EngineError::NotSubmittedThroughGaffer(id))
            }
            Err(WaitError::Read(e)) => Err(e),
        }
    }

    /// Where a job is now (durable; works after a restart). A job whose ending
    /// commit is not yet durable is still `Running`. `JobNotFound` if no
    /// record of it exists (never submitted, or its record passed retention).
    pub async fn status(&self, run_id: &str) -> Result<JobState> {
        let Some(state) = self.services.state(run_id).await? else {
            return Err(self.services.unknown(run_id).await);
        };
        if state.is_terminal() && self.outcome(run_id).await?.is_none() {
            return Ok(JobState::Running);
        }
        Ok(state)
    }

    /// Send the signal `name` with its encoded payload to the job `run_id`
    /// (see [`EngineMessage::SignalJob`]).
    pub async fn signal(
        &self,
        run_id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> Result<crate::jobs::signals::Signalled> {
        ractor::call!(
            self.actor,
            EngineMessage::SignalJob,
            run_id.to_string(),
            name.to_string(),
            payload
        )
        .map_err(|_| EngineError::ShutDown)?
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

    /// Run one sweeper pass (retention) now.
    pub async fn sweep_now(&self) -> Result<SweepReport> {
        ractor::call!(self.actor, EngineMessage::SweepNow).map_err(unavailable)
    }

    /// Schedule a periodic job (see [`EngineMessage::AddPeriodic`]).
    pub async fn add_periodic(&self, spec: PeriodicSpec) -> Result<()> {
        ractor::call_t!(
            self.actor,
            EngineMessage::AddPeriodic,
            PERIODIC_CALL_MS,
            Box::new(spec)
        )
        .map_err(periodic_call)?
    }

    /// Stop a periodic job on this engine; whether it was scheduled.
    pub async fn remove_periodic(&self, name: &str) -> Result<bool> {
        ractor::call_t!(
            self.actor,
            EngineMessage::RemovePeriodic,
            PERIODIC_CALL_MS,
            name.to_string()
        )
        .map_err(periodic_call)?
    }

    /// Check every periodic job now; answers how many ticks fired.
    pub async fn check_periodic(&self) -> Result<usize> {
        ractor::call_t!(self.actor, EngineMessage::CheckPeriodic, PERIODIC_CHECK_MS)
            .map_err(periodic_call)?
    }

    /// Every periodic job's record in the store, with when each is next
    /// due (also those of periodic jobs no longer scheduled).
    pub async fn periodic_jobs(&self) -> Result<Vec<crate::layout::inspect::PeriodicStatus>> {
        crate::layout::inspect::periodic_jobs(self.services.queue()?.view()).await
    }

    /// Subscribe to lifecycle events. The stream ends after the engine's
    /// last event ([`EngineEvent::ShutDown`] or [`EngineEvent::StoreClosed`]),
    /// even while clones of this handle are alive.
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

impl JobEngine for EngineRef {
    fn check_job_type(&self, job_type: &str) -> Result<()> {
        self.services.job_queue(job_type).map(|_| ())
    }

    fn now_ms(&self) -> u64 {
        self.services.clock().now_ms()
    }

    fn submit(&self, request: SubmitRequest) -> BoxFuture<Result<Submitted>> {
        let this = self.clone();
        Box::pin(async move { this.submit(request).await })
    }

    fn await_job(&self, run_id: String) -> BoxFuture<Result<OutcomeRecord>> {
        let this = self.clone();
        Box::pin(async move { this.await_job(&run_id).await })
    }

    fn await_recorded(
        &self,
        run_id: String,
        record: OutcomeRecord,
    ) -> BoxFuture<Result<OutcomeRecord>> {
        let this = self.clone();
        Box::pin(async move { this.await_recorded(&run_id, record).await })
    }

    fn outcome(&self, run_id: String) -> BoxFuture<Result<Option<OutcomeRecord>>> {
        let this = self.clone();
        Box::pin(async move { this.outcome(&run_id).await })
    }

    fn step_deps(&self, step: crate::layout::records::StepOf) -> BoxFuture<Result<Vec<String>>> {
        let services = self.services.clone();
        Box::pin(async move { services.step_deps(&step).await })
    }

    fn committed_outcomes(
        &self,
        run_ids: Vec<String>,
    ) -> BoxFuture<Result<Vec<Option<OutcomeRecord>>>> {
        let services = self.services.clone();
        Box::pin(async move { services.committed_outcomes(&run_ids).await })
    }

    fn status(&self, run_id: String) -> BoxFuture<Result<JobState>> {
        let this = self.clone();
        Box::pin(async move { this.status(&run_id).await })
    }

    fn cancel(&self, run_id: String) -> BoxFuture<Result<CancelResult>> {
        let this = self.clone();
        Box::pin(async move { this.cancel(&run_id).await })
    }

    fn output_bytes(&self, output: OutputRef) -> BoxFuture<Result<Vec<u8>>> {
        let services = self.services.clone();
        Box::pin(async move { services.output_bytes(&output).await })
    }

    fn kv_get(&self, key: Vec<u8>) -> BoxFuture<Result<Option<Vec<u8>>>> {
        let services = self.services.clone();
        Box::pin(async move { services.kv_get(&key).await })
    }
}
