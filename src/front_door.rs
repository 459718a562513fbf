//! One front door: the operations a service has on an [`Engine`], a
//! [`Client`], a [`ShardedEngine`] and a [`ShardedClient`], under the same
//! names, through one trait, [`FrontDoor`]. A service written against it
//! runs on one engine, from another process, or over a shard set,
//! unchanged.
//!
//! # Every front door, every operation
//!
//! The inherent methods of each type (a `FrontDoor` method of the same name
//! answers the same, wrapped as the table's last column says):
//!
//! | operation | `Engine` | `Client` | `ShardedEngine` | `ShardedClient` | `FrontDoor` answers |
//! |---|---|---|---|---|---|
//! | `submit`, `submit_with` | `JobHandle<J>` | `ClientHandle<J>` | `JobHandle<J>` (its shard's engine) | `ClientHandle<J>` (its shard's inbox) | [`FrontDoor::Handle`] (a [`JobRef`]) |
//! | `join::<J>(id)` | the result | the result (waits while unknown) | in its shard | in its shard | `Result<J::Output, JobError>` |
//! | `outcome::<J>(id)` | `Option<result>` | `Option<result>` | in its shard | in its shard | `Option<Result<J::Output, JobError>>` |
//! | `status(id)` | `JobState` | `JobState` | in its shard | in its shard | `JobState` |
//! | `cancel(id)` | `CancelResult` | `Request` | `CancelResult` | `Request` | [`Answer`]`<CancelResult>` |
//! | `retry(id)` | `()` | `Request` | `()` | `Request` | `Answer<()>` |
//! | `retry_failed(type, since)` | `usize` | `Request` | `usize` (owned shards) | `Vec<Request>` (every shard) | `Answer<usize>` |
//! | `signal(id, name, &payload)` | `Signalled` | `Request` | `Signalled` | `Request` | `Answer<Signalled>` |
//! | `pause`, `resume(type)` | `bool` | `Request` | `bool` (owned shards) | `Vec<Request>` (every shard) | `Answer<bool>` |
//! | `pause_value`, `resume_value` | `bool` | `Request` | `bool` (owned shards) | `Vec<Request>` (every shard) | `Answer<bool>` |
//! | `submit_workflow(flow)` | `WorkflowHandle` | `ClientWorkflow` | `WorkflowHandle` (its id's shard) | `ClientWorkflow` (its id's shard) | [`FrontDoor::Workflow`] (a [`WorkflowRef`]) |
//! | `workflow_status(id)` | `WorkflowStatus` | `WorkflowStatus` | in its shard | in its shard | `WorkflowStatus` |
//! | `join_workflow(id)` | `Result<WorkflowStatus, StepFailed>` | the same (waits while unknown) | in its shard | in its shard | `Result<WorkflowStatus, StepFailed>` |
//! | `cancel_workflow(id)` | `usize` | `Request` | `usize` | `Request` | `Answer<usize>` |
//! | `retry_workflow(id)` | `usize` | `Request` | `usize` | `Request` | `Answer<usize>` |
//!
//! In process, an operation is applied when it answers
//! ([`Answer::Applied`], with the engine's answer); from a client it is a
//! request in the store's inbox, applied at the engine's next look
//! ([`Answer::Sent`]; [`Answer::wait`] waits for it). Reads from a client lag
//! the engine (see [`Client`]): a job or workflow not taken from the inbox
//! yet reads as not found, and a join by id waits for it.
//!
//! An operation on a type (`pause`, `resume`, `retry_failed` and the
//! value forms) reaches every shard from a [`ShardedClient`], and the
//! shards this process owns from a [`ShardedEngine`] (the other owners
//! apply it to theirs, or send it from a client). An operation on an id
//! goes to the shard of the id; on a `ShardedEngine` a shard another
//! process owns answers [`ShardError::NotOwned`](crate::remote::ShardError::NotOwned).
//! A workflow's step is the exception: its job lives with its workflow, in
//! the shard of the workflow's id, not of its own
//! ([`step_id`](crate::workflow::step_id)), so over a shard set read a step
//! through its workflow (`workflow_status`, [`WorkflowRef::output`]), not
//! by its job's id.
//!
//! Not front doors, and why:
//! - a [`JobContext`](crate::JobContext) submits, and through
//!   [`JobContext::handle`](crate::JobContext::handle) joins, reads and
//!   cancels a job by id; a job reaches its engine only through what its
//!   delivery carries (submit, wait, read, cancel, KV reads), so pausing a
//!   type, retrying, signalling and workflows are not offered from inside
//!   a job (a job runs at least once: they would be sent again on every
//!   retry);
//! - the engine's messages ([`protocol`](crate::protocol): `SubmitJob`,
//!   `AwaitJob`, `JobOutcome`, `JobStatus`, `CancelJob`, `RetryJob`,
//!   `RetryFailed`, `SignalJob`, `PauseJobType`, `ResumeJobType`,
//!   `PauseValue`) are one message per operation, bytes-level, for a
//!   service that talks to the engine by `call!`; workflows have none;
//! - a `ClusterRouter` (feature `cluster`) submits (answering the job's
//!   id), joins and runs batches across a ractor cluster: its gateway
//!   carries no other request, and its submissions have no handle.
//!
//! [`Engine`]: crate::Engine
//! [`Client`]: crate::remote::Client
//! [`ShardedEngine`]: crate::remote::ShardedEngine
//! [`ShardedClient`]: crate::remote::ShardedClient

use std::future::Future;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::{JobError, Result};
use crate::job::submit::SubmitOptions;
use crate::job::typed::Job;
use crate::job::{CancelResult, JobState, Signalled};
use crate::remote::Request;
use crate::workflow::{StepFailed, Workflow, WorkflowStatus};

mod in_process;
mod remote;

/// What an operation on a job, a type or a workflow answered: applied in
/// this process (the engine's answer), or sent through a store's inbox
/// (a client's request, one per shard for a type over a shard set), which
/// the engine applies at its next look.
#[derive(Debug, Clone)]
pub enum Answer<T> {
    /// Applied: what the engine answered.
    Applied(T),
    /// Sent: the requests, each applied at its engine's next look.
    Sent(Vec<Request>),
}

impl<T> Answer<T> {
    /// The engine's answer, when the operation was applied here.
    pub fn applied(&self) -> Option<&T> {
        match self {
            Self::Applied(value) => Some(value),
            Self::Sent(_) => None,
        }
    }

    /// [`applied`](Self::applied), taken.
    pub fn into_applied(self) -> Option<T> {
        match self {
            Self::Applied(value) => Some(value),
            Self::Sent(_) => None,
        }
    }

    /// The requests sent (none when it was applied here).
    pub fn requests(&self) -> &[Request] {
        match self {
            Self::Applied(_) => &[],
            Self::Sent(requests) => requests,
        }
    }

    /// Wait until the operation is applied: at once when it was applied
    /// here, else until every request's engine applied it
    /// ([`Request::wait`]): `Err(Error::Refused)` when one refused it.
    pub async fn wait(&self) -> Result<()> {
        for request in self.requests() {
            request.wait().await?;
        }
        Ok(())
    }
}

/// A submitted job, as every front door's submission answers it
/// ([`JobHandle`](crate::JobHandle), [`ClientHandle`](crate::remote::ClientHandle)).
pub trait JobRef<J: Job>: Send + Sync {
    /// The job's id: a ULID, or the hex SHA-256 of its idempotency key.
    fn id(&self) -> &str;

    /// Wait for the job to end; its result. From a client, a refused
    /// request ends the wait with [`Error::Refused`](crate::Error::Refused).
    fn join(&self) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send;

    /// The job's result if it has ended, without waiting.
    fn outcome(&self) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send;

    /// [`join`](Self::join) for at most `timeout`: `Ok(None)` if the job
    /// has not ended by then.
    fn join_timeout(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        async move {
            match tokio::time::timeout(timeout, self.join()).await {
                Ok(r) => r.map(Some),
                Err(_) => Ok(None),
            }
        }
    }
}

/// A submitted workflow, as every front door's `submit_workflow` answers
/// it ([`WorkflowHandle`](crate::workflow::WorkflowHandle),
/// [`ClientWorkflow`](crate::remote::ClientWorkflow)).
pub trait WorkflowRef: Send + Sync {
    /// The workflow's id.
    fn id(&self) -> &str;

    /// Wait until every step ended: the workflow's status when every step
    /// succeeded, else the first step that failed (or, failing none, was
    /// cancelled). Read the steps' outputs with [`output`](Self::output).
    fn join(&self) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send;

    /// The result of step `name`, a job of type `J`, once it ended.
    fn output<J: Job>(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send;
}

/// The operations on jobs, types and workflows that every front door
/// offers under the same names: an [`Engine`](crate::Engine) in process, a
/// [`Client`](crate::remote::Client) from another process, a
/// [`ShardedEngine`](crate::remote::ShardedEngine) and a
/// [`ShardedClient`](crate::remote::ShardedClient) over a shard set. See
/// the [module](self) for the table.
///
/// Each type has these operations as inherent methods too, which answer
/// the type's own values (a client's `cancel` a [`Request`], an engine's a
/// [`CancelResult`]); the trait's answer them alike, wrapped in an
/// [`Answer`]. A call on the concrete type takes the inherent method; a
/// call through a generic `F: FrontDoor` takes the trait's. Every future
/// is `Send`, so a service calls them from its tokio tasks.
///
/// ```no_run
/// use std::sync::Arc;
/// use gaffer::front_door::{FrontDoor, JobRef};
/// use gaffer::{Job, JobContext};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)] struct Invoice { customer: String }
/// # impl Job for Invoice { const NAME: &'static str = "invoice"; type Output = u64;
/// #   type Error = gaffer::Error;
/// #   async fn run(&self, _: JobContext) -> Result<u64, gaffer::Error> { Ok(1) } }
///
/// /// Bills a customer wherever the engine runs: its invoice number, or
/// /// `None` when the invoice failed (it is run again).
/// async fn bill<F: FrontDoor>(door: &F, customer: &str) -> gaffer::Result<Option<u64>> {
///     let handle = door.submit(Invoice { customer: customer.into() }).await?;
///     match handle.join().await? {
///         Ok(number) => Ok(Some(number)),
///         Err(_failed) => {
///             // Applied at once in process; a client's request, waited for.
///             door.retry(handle.id()).await?.wait().await?;
///             Ok(None)
///         }
///     }
/// }
///
/// # async fn demo(engine: gaffer::Engine, client: gaffer::remote::Client) -> gaffer::Result<()> {
/// // The same service, in process and from another process ...
/// bill(&engine, "acme").await?;
/// bill(&client, "acme").await?;
/// // ... and from a task of its own: every future is `Send`.
/// let door = Arc::new(client);
/// let task = tokio::spawn(async move { bill(&*door, "globex").await });
/// task.await.expect("the task ran")?;
/// # Ok(()) }
/// ```
pub trait FrontDoor: Send + Sync {
    /// What a submission answers: a [`JobHandle`](crate::JobHandle) in
    /// process, a [`ClientHandle`](crate::remote::ClientHandle) from a
    /// client.
    type Handle<J: Job>: JobRef<J>;
    /// What a workflow's submission answers: a
    /// [`WorkflowHandle`](crate::workflow::WorkflowHandle) in process, a
    /// [`ClientWorkflow`](crate::remote::ClientWorkflow) from a client.
    type Workflow: WorkflowRef;

    /// Submit a job.
    fn submit<J: Job>(&self, job: J) -> impl Future<Output = Result<Self::Handle<J>>> + Send {
        self.submit_with(job, SubmitOptions::default())
    }

    /// Submit a job with options.
    fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> impl Future<Output = Result<Self::Handle<J>>> + Send;

    /// Wait for the job `id` to end; its result. `Err(Error::JobNotFound)`
    /// in process when no record of it exists; a client waits while the
    /// job is unknown (its request may not be taken yet): join its
    /// handle to hear of a refused request.
    fn join<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send;

    /// The job's result if it has ended, without waiting: `None` while it
    /// has not.
    fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send;

    /// Where the job `id` is now; `Err(Error::JobNotFound)` if no record of
    /// it exists (from a client: or not taken from the inbox yet).
    fn status(&self, id: &str) -> impl Future<Output = Result<JobState>> + Send;

    /// Cancel the job `id`.
    fn cancel(&self, id: &str) -> impl Future<Output = Result<Answer<CancelResult>>> + Send;

    /// Run a failed or cancelled job again, under its id.
    fn retry(&self, id: &str) -> impl Future<Output = Result<Answer<()>>> + Send;

    /// Retry every job of `job_type` that failed at or after `since` (all
    /// of them with `None`); answers how many.
    fn retry_failed(
        &self,
        job_type: &str,
        since: Option<SystemTime>,
    ) -> impl Future<Output = Result<Answer<usize>>> + Send;

    /// Send the signal `name` with `payload` to the job `id`
    /// ([`JobContext::wait_signal`](crate::JobContext::wait_signal)).
    fn signal<S: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> impl Future<Output = Result<Answer<Signalled>>> + Send;

    /// Pause a job type (or pipeline) durably; answers whether it was
    /// running.
    fn pause(&self, job_type: &str) -> impl Future<Output = Result<Answer<bool>>> + Send;

    /// Resume a paused job type (or pipeline); answers whether it was
    /// paused.
    fn resume(&self, job_type: &str) -> impl Future<Output = Result<Answer<bool>>> + Send;

    /// Pause one value of a job type's partitioning header durably;
    /// answers whether it was running.
    fn pause_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> impl Future<Output = Result<Answer<bool>>> + Send;

    /// Resume a paused value; answers whether it was paused.
    fn resume_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> impl Future<Output = Result<Answer<bool>>> + Send;

    /// Submit a workflow: every step or none.
    fn submit_workflow(
        &self,
        workflow: Workflow,
    ) -> impl Future<Output = Result<Self::Workflow>> + Send;

    /// The workflow `id` and each step's state;
    /// `Err(Error::WorkflowNotFound)` if no such workflow exists (from a
    /// client: or not taken from the inbox yet).
    fn workflow_status(&self, id: &str) -> impl Future<Output = Result<WorkflowStatus>> + Send;

    /// Wait until every step of the workflow `id` ended (as
    /// [`WorkflowRef::join`]). A client waits while the workflow is
    /// unknown (its request may not be taken yet).
    fn join_workflow(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send;

    /// Cancel the workflow `id`; answers how many steps it cancelled or
    /// asked to stop.
    fn cancel_workflow(&self, id: &str) -> impl Future<Output = Result<Answer<usize>>> + Send;

    /// Run the workflow `id`'s failed and cancelled steps again; answers
    /// how many steps were set back.
    fn retry_workflow(&self, id: &str) -> impl Future<Output = Result<Answer<usize>>> + Send;

    /// The jobs submitted with the tag `tag`
    /// ([`SubmitOptions::tags`](crate::SubmitOptions::tags)), in any state,
    /// newest first: up to `limit` before `before` (a previous page's
    /// `next`). A shard set lists its shards together (a `ShardedEngine`
    /// the shards it owns).
    fn jobs_by_tag(
        &self,
        tag: &str,
        before: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<crate::job::TaggedJobs>> + Send;
}
