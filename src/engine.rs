//! `Engine`: a running engine, as a service uses it: submit jobs, handles,
//! cancel, status, events, batches, shutdown.

use std::sync::Arc;

use ractor::ActorRef;

use gaffer_actors::erased::JobEngine;
use gaffer_actors::{
    CancelResult, EngineError, EngineEvent, EngineMessage, EngineRef, JobState, OutcomeRecord,
    ShutdownReport,
};

use crate::bulk::batch::Batch;
use crate::bulk::pipeline::Pipeline;
use crate::error::{JobError, Result};
use crate::job::handle::{JobHandle, decode_outcome};
use crate::job::submit::{SubmitOptions, submit_typed};
use crate::job::typed::Job;

/// Encode a signal's payload, as every front door's `signal` does.
pub(crate) fn signal_payload<S: serde::Serialize + ?Sized>(
    name: &str,
    payload: &S,
) -> Result<Vec<u8>> {
    rmp_serde::to_vec_named(payload).map_err(|e| EngineError::encode(format!("signal `{name}`"), e))
}

/// A running engine. Cheap to clone; every clone talks to the same actor tree.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: EngineRef,
    /// The same engine, as jobs and handles see it.
    pub(crate) jobs: Arc<dyn JobEngine>,
    /// Where its store is: its name and the queue's path in it.
    pub(crate) place: Arc<(String, String)>,
}

impl Engine {
    /// The engine's store, read through the engine's own (writer's) view,
    /// for a dashboard mounted in this process
    /// (`gaffer_web::WebConfig::live`): it opens no reader, so it decodes
    /// none of the WAL the engine writes, and it shows every commit at
    /// once. `ShutDown` once the engine stopped; reads through one taken
    /// before fail after the shutdown.
    ///
    /// ```
    /// # async fn demo() -> gaffer::Result<()> {
    /// let engine = gaffer::Engine::builder()
    ///     .store(gaffer::Store::in_memory())
    ///     .start()
    ///     .await?;
    /// let live = engine.live_store()?;
    /// assert_eq!(live.name(), "memory");
    /// # engine.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn live_store(&self) -> Result<crate::LiveStore> {
        let (view, store) = self.inner.services().live_view()?;
        let settings = self.inner.services().settings();
        Ok(crate::LiveStore::new(
            self.place.0.clone(),
            view,
            store,
            self.place.1.clone(),
            settings.queue_name.clone(),
            settings.bulk_queue_name.clone(),
        ))
    }

    /// Submit a job.
    pub async fn submit<J: Job>(&self, job: J) -> Result<JobHandle<J>> {
        submit_typed(&self.jobs, job, SubmitOptions::default()).await
    }

    /// Submit a job with options.
    pub async fn submit_with<J: Job>(&self, job: J, opts: SubmitOptions) -> Result<JobHandle<J>> {
        submit_typed(&self.jobs, job, opts).await
    }

    /// A handle on the job with this id (from [`JobHandle::id`]), for example
    /// after a restart. Checks the id's form, not that the job exists: `join`
    /// reports an unknown job.
    pub fn handle<J: Job>(&self, id: &str) -> Result<JobHandle<J>> {
        if !gaffer_actors::layout::keys::is_valid_id(id) {
            return Err(EngineError::InvalidJobId(id.to_string()));
        }
        Ok(JobHandle::new(id.to_string(), false, self.jobs.clone()))
    }

    /// A handle on the job submitted with idempotency key `key`, without
    /// submitting anything: its id is [`keyed_job_id`](crate::job::keyed_job_id)`(key)`.
    /// As with [`handle`](Self::handle), the job need not exist: `join`
    /// reports an unknown job.
    pub fn keyed_handle<J: Job>(&self, key: &str) -> JobHandle<J> {
        JobHandle::new(crate::job::keyed_job_id(key), false, self.jobs.clone())
    }

    /// The batch `id` of pipeline `P` (1-128 characters of `[A-Za-z0-9_-]`).
    pub fn batch<P: Pipeline>(&self, id: &str) -> Result<Batch<P>> {
        gaffer_actors::layout::keys::check_batch_id(id)?;
        Ok(Batch::new(self.inner.clone(), id.to_string()))
    }

    /// A new batch of pipeline `P` with a fresh ULID id.
    pub fn new_batch<P: Pipeline>(&self) -> Batch<P> {
        Batch::new(self.inner.clone(), ulid::Ulid::new().to_string())
    }

    /// Submit a workflow: every step and the jobs of the steps that need
    /// none, in one transaction (all or nothing). A second submission with
    /// the same id or key answers with the same workflow
    /// (`newly_submitted` false), or `Error::WorkflowMismatch` if its steps
    /// differ; `Error::InvalidWorkflow` names what is wrong with one that
    /// cannot be submitted (a cycle, a step named twice, a missing
    /// dependency, a job too large to hold).
    pub async fn submit_workflow(
        &self,
        workflow: crate::workflow::Workflow,
    ) -> Result<crate::workflow::WorkflowHandle> {
        let spec = workflow.into_spec()?;
        let submitted = self.inner.services().submit_workflow(spec).await?;
        Ok(crate::workflow::WorkflowHandle::new(
            submitted.id,
            submitted.newly_submitted,
            self.inner.clone(),
        ))
    }

    /// A handle on the workflow `id` (from [`WorkflowHandle::id`](crate::workflow::WorkflowHandle::id)),
    /// for example after a restart. Its operations report an unknown id.
    pub fn workflow(&self, id: &str) -> crate::workflow::WorkflowHandle {
        crate::workflow::WorkflowHandle::new(id.to_string(), false, self.inner.clone())
    }

    /// The workflow `id` and each step's state (as
    /// [`workflow`](Self::workflow)`(id).status()`, and
    /// [`Client::workflow_status`](crate::remote::Client::workflow_status)).
    /// `Error::WorkflowNotFound` if no such workflow exists.
    pub async fn workflow_status(&self, id: &str) -> Result<crate::workflow::WorkflowStatus> {
        self.workflow(id).status().await
    }

    /// Wait until every step of the workflow `id` ended: its status when
    /// every step succeeded, else the first step that failed (or, failing
    /// none, was cancelled), as a client's
    /// [`join_workflow`](crate::remote::Client::join_workflow) answers.
    /// [`workflow`](Self::workflow)`(id).join()` answers the outputs
    /// instead. `Error::WorkflowNotFound` if no such workflow exists.
    pub async fn join_workflow(
        &self,
        id: &str,
    ) -> Result<std::result::Result<crate::workflow::WorkflowStatus, crate::workflow::StepFailed>>
    {
        self.workflow(id).join_status().await
    }

    /// Cancel the workflow `id` (as [`workflow`](Self::workflow)`(id).cancel()`):
    /// answers how many steps it cancelled or asked to stop.
    pub async fn cancel_workflow(&self, id: &str) -> Result<usize> {
        self.workflow(id).cancel().await
    }

    /// Run the workflow `id`'s failed and cancelled steps again (as
    /// [`workflow`](Self::workflow)`(id).retry()`): answers how many steps
    /// were set back.
    pub async fn retry_workflow(&self, id: &str) -> Result<usize> {
        self.workflow(id).retry().await
    }

    /// Up to `limit` workflows (id and record) after the id `after`, in id
    /// order.
    pub async fn workflows(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, crate::workflow::WorkflowRecord)>> {
        self.inner.services().workflows(after, limit).await
    }

    /// The jobs submitted with the tag `tag`
    /// ([`SubmitOptions::tags`](crate::SubmitOptions::tags)), in any state,
    /// newest first: up to `limit` (1 to 1000) created before `before` (a
    /// previous page's [`TaggedJobs::next`](crate::job::TaggedJobs::next);
    /// from the newest with `None`). Reads the tag's index and each listed
    /// job by id, never the other jobs. A job leaves the listing when its
    /// outcome record passes retention. `Error::InvalidTag` for a tag no
    /// job can have.
    pub async fn jobs_by_tag(
        &self,
        tag: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<crate::job::TaggedJobs> {
        self.inner.services().jobs_by_tag(tag, before, limit).await
    }

    /// Send the signal `name` with `payload` to the job `id`: a job waiting
    /// for it ([`JobContext::wait_signal`](crate::JobContext::wait_signal))
    /// runs again now; a job that has not reached its wait yet finds it
    /// there at once. Refused with `Error::JobNotFound`, `Error::JobEnded`
    /// or `Error::WaitingForAnotherSignal`.
    pub async fn signal<S: serde::Serialize>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> Result<crate::job::Signalled> {
        let bytes = signal_payload(name, payload)?;
        self.inner.signal(id, name, bytes).await
    }

    /// Cancel the job with this id.
    pub async fn cancel(&self, id: &str) -> Result<CancelResult> {
        self.inner.cancel(id).await
    }

    /// Where the job with this id is now. `Err(`[`Error::JobNotFound`](crate::Error::JobNotFound)`)`
    /// if no record of it exists: never submitted, or its record passed
    /// retention (see [`JobHandle::outcome`]).
    pub async fn status(&self, id: &str) -> Result<JobState> {
        self.inner.status(id).await
    }

    /// The job's result if it has ended, without waiting: `None` while it
    /// runs or waits (as [`JobHandle::outcome`]).
    pub async fn outcome<J: Job>(&self, id: &str) -> Result<Option<Result<J::Output, JobError>>> {
        self.handle::<J>(id)?.outcome().await
    }

    /// Wait for the job to end and answer its result (as
    /// [`JobHandle::join`]).
    pub async fn join<J: Job>(&self, id: &str) -> Result<Result<J::Output, JobError>> {
        self.handle::<J>(id)?.join().await
    }

    /// Decode an outcome record (from [`EngineMessage::AwaitJob`] or a
    /// [`JobFinished`](gaffer_actors::JobFinished) message) as job `J`'s result.
    pub async fn decode_outcome<J: Job>(
        &self,
        record: &OutcomeRecord,
    ) -> Result<Result<J::Output, JobError>> {
        decode_outcome::<J>(self.jobs.as_ref(), record).await
    }

    /// Lifecycle events, from now on (take the subscription on the builder,
    /// [`EngineBuilder::subscribe`](crate::EngineBuilder::subscribe), to see every event from the start).
    ///
    /// The stream ends when the engine stops, even while clones of this
    /// `Engine` are alive: after a graceful shutdown the last event is
    /// [`EngineEvent::ShutDown`] with the shutdown's report, after the store
    /// was taken over by another process it is [`EngineEvent::StoreClosed`];
    /// then `recv` answers `RecvError::Closed`. A subscription taken after
    /// the engine stopped is already ended. A subscriber that falls more than
    /// 4096 events behind is told so (`RecvError::Lagged`) and goes on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.inner.subscribe()
    }

    /// Have the actor `to` told (a [`JobFinished`](crate::protocol::JobFinished)
    /// message, with the outcome record: [`decode_outcome`](Self::decode_outcome)
    /// reads it typed) when the job `id` ends; at once if it has ended.
    /// The watch survives restarts of the engine's actors (not of the
    /// process).
    pub fn watch_job(
        &self,
        id: &str,
        to: ractor::DerivedActorRef<gaffer_actors::JobFinished>,
    ) -> Result<()> {
        if !gaffer_actors::layout::keys::is_valid_id(id) {
            return Err(EngineError::InvalidJobId(id.to_string()));
        }
        self.inner
            .actor()
            .cast(EngineMessage::WatchJob(id.to_string(), to))
            .map_err(|_| EngineError::ShutDown)
    }

    /// Have the actor `to` told (a [`BatchFinished`](gaffer_actors::BatchFinished)
    /// message) when the run of batch `batch_id` in progress here ends: how a
    /// service restarted by its supervisor re-attaches to the batch it
    /// started. `to` gets `BatchNotRunning` if no run is in progress.
    pub fn watch_batch(
        &self,
        batch_id: &str,
        to: ractor::DerivedActorRef<gaffer_actors::BatchFinished>,
    ) -> Result<()> {
        self.inner.watch_batch(batch_id, to)
    }

    /// Resume a job type (or pipeline) that was paused, by
    /// [`pause`](Self::pause) or after crashing too often
    /// (`EngineEvent::JobTypePaused`): it claims its queued jobs again.
    /// Answers whether it was paused.
    pub async fn resume(&self, job_type: &str) -> Result<bool> {
        self.inner.resume(job_type).await
    }

    /// Pause a job type (or pipeline) durably: nothing more of it is
    /// claimed, also after a restart, until [`resume`](Self::resume);
    /// running jobs finish and nothing is failed. Answers whether it was
    /// running.
    pub async fn pause(&self, job_type: &str) -> Result<bool> {
        self.inner.pause(job_type).await
    }

    /// Pause one value of a job type's partitioning header durably (the
    /// header of its `fair_by`, `key_concurrency` or per-header rate limit,
    /// e.g. `pause_value("report", "tenant", "acme")`): nothing more of
    /// that value's jobs is claimed, also after a restart, until
    /// [`resume_value`](Self::resume_value), while the type's other values
    /// run; running jobs finish and nothing is failed. Answers whether it
    /// was running. A type not spread by `header` is
    /// [`Error::NotPartitioned`](crate::Error::NotPartitioned): pause the
    /// whole type instead.
    pub async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<bool> {
        self.inner.pause_value(job_type, header, value).await
    }

    /// Resume a value paused by [`pause_value`](Self::pause_value): its
    /// queued jobs are claimed again. Answers whether it was paused.
    pub async fn resume_value(&self, job_type: &str, header: &str, value: &str) -> Result<bool> {
        self.inner.resume_value(job_type, header, value).await
    }

    /// Run a failed or cancelled job again, under its id: a new attempt
    /// series from its original payload, in one transaction that removes its
    /// failure record, so a handle's `join` afterwards waits for the new
    /// outcome. A job that succeeded or has not ended, or whose payload the
    /// queue no longer keeps (cancelled while queued), is
    /// [`Error::NotRetryable`](crate::Error::NotRetryable).
    pub async fn retry(&self, id: &str) -> Result<()> {
        self.inner.retry(id).await
    }

    /// Retry every job of `job_type` that failed at or after `since` (all of
    /// them with `None`); answers how many were retried.
    pub async fn retry_failed(
        &self,
        job_type: &str,
        since: Option<std::time::SystemTime>,
    ) -> Result<usize> {
        let since_ms = since
            .map(gaffer_actors::engine::intake::epoch_ms)
            .unwrap_or(0);
        self.inner.retry_failed(job_type, since_ms).await
    }

    /// Schedule a periodic job at run time, as
    /// [`EngineBuilder::periodic`](crate::EngineBuilder::periodic) does at
    /// start (its job type must be registered, its name free on this
    /// engine). A periodic job scheduled before under this name (its record
    /// in the store) goes on from the last tick it handled.
    pub async fn add_periodic<J: Job>(
        &self,
        name: impl Into<String>,
        schedule: gaffer_actors::Schedule,
        make_job: impl Fn(&gaffer_actors::Tick) -> J + Send + Sync + 'static,
    ) -> Result<()> {
        let spec = crate::periodic::periodic_spec(name, schedule, make_job);
        self.inner.add_periodic(spec).await
    }

    /// Stop the periodic job `name` on this engine: no tick fires from now
    /// on. Its record stays in the store, so scheduling it again goes on
    /// from its last tick. Answers whether it was scheduled.
    pub async fn remove_periodic(&self, name: &str) -> Result<bool> {
        self.inner.remove_periodic(name).await
    }

    /// Fire the periodic jobs' due ticks now rather than at the engine's
    /// next look (at most a poll interval away); answers how many fired.
    pub async fn check_periodic(&self) -> Result<usize> {
        self.inner.check_periodic().await
    }

    /// Every periodic job the store has a record of (scheduled on this
    /// engine or not), by name: its schedule, the last tick it fired and
    /// when the next is due.
    pub async fn periodic_jobs(&self) -> Result<Vec<gaffer_actors::PeriodicStatus>> {
        self.inner.periodic_jobs().await
    }

    /// The supervisor's `ActorRef`, for services that talk to the engine by
    /// message (`call!(engine.actor(), EngineMessage::SubmitJob, request)`).
    pub fn actor(&self) -> &ActorRef<EngineMessage> {
        self.inner.actor()
    }

    /// Write every value the store keeps under the keyring's newest key
    /// ([`EngineBuilder::encryption`](crate::EngineBuilder::encryption)), a
    /// plain one from before the engine had a keyring too; resumable (an
    /// interrupted pass goes on where it stopped). Once no value is left
    /// under an older key, queued jobs included, the store stops listing
    /// the older keys (`RekeyReport::retired`) and they may leave the
    /// keyring; until then a start without them is refused. Runs in the
    /// caller's task; `gaffer rekey` asks for it from another process.
    pub async fn rekey(&self) -> Result<crate::encryption::RekeyReport> {
        self.inner.services().rekey().await
    }

    /// Run one retention pass now (outcomes, batches, operator request
    /// records past their retention) and answer what it removed; the
    /// sweeper runs one every poll interval anyway.
    pub async fn sweep_now(&self) -> Result<crate::protocol::SweepReport> {
        self.inner.sweep_now().await
    }

    /// Each job type's and pipeline's pool: its workers, running and
    /// waiting jobs, settlements in flight, crashes, and whether it is
    /// paused.
    pub async fn pool_stats(
        &self,
    ) -> Result<std::collections::HashMap<String, crate::protocol::PoolStats>> {
        self.inner.pool_stats().await
    }

    /// The settings the engine runs with.
    pub fn settings(&self) -> &gaffer_actors::Settings {
        self.inner.services().settings()
    }

    /// Shut down gracefully: stop claiming, let running jobs finish and
    /// settle, close the queue.
    pub async fn shutdown(&self) -> Result<ShutdownReport> {
        self.inner.shutdown().await
    }
}
