//! The operations on a job, a type or a workflow over a shard set, as one
//! engine and one client have them (see [`FrontDoor`](crate::FrontDoor)):
//! an operation on an id goes to the id's shard; one on a type goes to
//! every shard a [`ShardedClient`] reaches, and every shard a
//! [`ShardedEngine`] owns. (A workflow step's job is in the shard of its
//! workflow's id, not of its own: read it through its workflow.)

use std::future::Future;
use std::time::SystemTime;

use super::{ShardedClient, ShardedEngine};
use crate::engine::Engine;
use crate::error::{JobError, Result};
use crate::job::typed::Job;
use crate::job::{CancelResult, JobState, Signalled};
use crate::remote::client::{Client, Request};
use crate::workflow::{StepFailed, WorkflowStatus};

use gaffer_actors::ShardError;

impl ShardedEngine {
    /// The running engine of `shard`, owned here: `Down` while it is down.
    fn engine_at(&self, shard: usize) -> std::result::Result<Engine, ShardError> {
        self.engine(shard).ok_or_else(|| ShardError::Down {
            shard,
            reason: self
                .shard_status(shard)
                .map_or_else(|| "not owned here".into(), |s| s.reason()),
        })
    }

    /// Run `op` on the engine of every owned shard, one after another:
    /// every answer, or the first error once every shard was tried (a
    /// shard down here answers `Down`; the others still run `op`).
    async fn on_owned<T, Fut>(&self, op: impl Fn(Engine) -> Fut) -> Result<Vec<T>>
    where
        Fut: Future<Output = Result<T>>,
    {
        let mut answers = Vec::new();
        let mut first_error = None;
        for shard in self.owned() {
            let answer = match self.engine_at(shard) {
                Ok(engine) => op(engine).await,
                Err(e) => Err(e.into()),
            };
            match answer {
                Ok(answer) => answers.push(answer),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(answers),
        }
    }

    /// Wait for the job `id` to end, on its shard's engine (as
    /// [`Engine::join`]): `NotOwned` if another process owns that shard,
    /// `Down` at once while it is down here.
    pub async fn join<J: Job>(&self, id: &str) -> Result<Result<J::Output, JobError>> {
        self.engine_of(id)?.join::<J>(id).await
    }

    /// The job's result if it has ended, without waiting, on its shard's
    /// engine (as [`Engine::outcome`]).
    pub async fn outcome<J: Job>(&self, id: &str) -> Result<Option<Result<J::Output, JobError>>> {
        self.engine_of(id)?.outcome::<J>(id).await
    }

    /// Where the job `id` is now, on its shard's engine (as
    /// [`Engine::status`]).
    pub async fn status(&self, id: &str) -> Result<JobState> {
        self.engine_of(id)?.status(id).await
    }

    /// Cancel the job `id`, on its shard's engine (as [`Engine::cancel`]).
    pub async fn cancel(&self, id: &str) -> Result<CancelResult> {
        self.engine_of(id)?.cancel(id).await
    }

    /// Run a failed or cancelled job again under its id, on its shard's
    /// engine (as [`Engine::retry`]).
    pub async fn retry(&self, id: &str) -> Result<()> {
        self.engine_of(id)?.retry(id).await
    }

    /// Send the signal `name` with `payload` to the job `id`, on its
    /// shard's engine (as [`Engine::signal`]).
    pub async fn signal<S: serde::Serialize>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> Result<Signalled> {
        self.engine_of(id)?.signal(id, name, payload).await
    }

    /// Retry the failed jobs of `job_type` (as [`Engine::retry_failed`]) on
    /// every shard this process owns; answers how many, in all. Another
    /// process's shards are its own to retry (or send the retry from a
    /// [`ShardedClient`], which reaches every shard).
    pub async fn retry_failed(&self, job_type: &str, since: Option<SystemTime>) -> Result<usize> {
        let counts = self
            .on_owned(move |e| async move { e.retry_failed(job_type, since).await })
            .await?;
        Ok(counts.into_iter().sum())
    }

    /// Pause a job type (as [`Engine::pause`]) on every shard this process
    /// owns; answers whether it was running on any. The shards that are up
    /// are paused even when one is down (answered `Down`). Another
    /// process's shards are its own to pause (or send the pause from a
    /// [`ShardedClient`], which reaches every shard).
    pub async fn pause(&self, job_type: &str) -> Result<bool> {
        let was = self
            .on_owned(move |e| async move { e.pause(job_type).await })
            .await?;
        Ok(was.into_iter().any(|w| w))
    }

    /// Resume a paused job type (as [`Engine::resume`]) on every shard this
    /// process owns; answers whether it was paused on any (see
    /// [`pause`](Self::pause)).
    pub async fn resume(&self, job_type: &str) -> Result<bool> {
        let was = self
            .on_owned(move |e| async move { e.resume(job_type).await })
            .await?;
        Ok(was.into_iter().any(|w| w))
    }

    /// Pause one value of a job type's partitioning header (as
    /// [`Engine::pause_value`]) on every shard this process owns; answers
    /// whether it was running on any (see [`pause`](Self::pause)).
    pub async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<bool> {
        let was = self
            .on_owned(move |e| async move { e.pause_value(job_type, header, value).await })
            .await?;
        Ok(was.into_iter().any(|w| w))
    }

    /// Resume a paused value (as [`Engine::resume_value`]) on every shard
    /// this process owns; answers whether it was paused on any.
    pub async fn resume_value(&self, job_type: &str, header: &str, value: &str) -> Result<bool> {
        let was = self
            .on_owned(move |e| async move { e.resume_value(job_type, header, value).await })
            .await?;
        Ok(was.into_iter().any(|w| w))
    }

    /// The workflow `id` and each step's state, on its shard's engine (as
    /// [`Engine::workflow_status`]).
    pub async fn workflow_status(&self, id: &str) -> Result<WorkflowStatus> {
        self.engine_of(id)?.workflow_status(id).await
    }

    /// Wait until every step of the workflow `id` ended, on its shard's
    /// engine (as [`Engine::join_workflow`]).
    pub async fn join_workflow(&self, id: &str) -> Result<Result<WorkflowStatus, StepFailed>> {
        self.engine_of(id)?.join_workflow(id).await
    }

    /// Cancel the workflow `id`, on its shard's engine (as
    /// [`Engine::cancel_workflow`]).
    pub async fn cancel_workflow(&self, id: &str) -> Result<usize> {
        self.engine_of(id)?.cancel_workflow(id).await
    }

    /// Run the workflow `id`'s failed and cancelled steps again, on its
    /// shard's engine (as [`Engine::retry_workflow`]).
    pub async fn retry_workflow(&self, id: &str) -> Result<usize> {
        self.engine_of(id)?.retry_workflow(id).await
    }
}

impl ShardedClient {
    /// Send `op` through every shard's inbox, one after another: every
    /// request, or the first error (the shards before it have theirs).
    async fn on_every<Fut>(&self, op: impl Fn(Client) -> Fut) -> Result<Vec<Request>>
    where
        Fut: Future<Output = Result<Request>>,
    {
        let mut requests = Vec::with_capacity(self.set().len());
        for client in (0..self.set().len()).filter_map(|shard| self.client(shard)) {
            requests.push(op(client.clone()).await?);
        }
        Ok(requests)
    }

    /// Cancel the job `id` through its shard's inbox (as
    /// [`Client::cancel`]).
    pub async fn cancel(&self, id: &str) -> Result<Request> {
        self.client_of(id).cancel(id).await
    }

    /// Run a failed or cancelled job again under its id, through its
    /// shard's inbox (as [`Client::retry`]).
    pub async fn retry(&self, id: &str) -> Result<Request> {
        self.client_of(id).retry(id).await
    }

    /// Send the signal `name` with `payload` to the job `id` through its
    /// shard's inbox (as [`Client::signal`]).
    pub async fn signal<S: serde::Serialize>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> Result<Request> {
        self.client_of(id).signal(id, name, payload).await
    }

    /// Retry the failed jobs of `job_type` on every shard (as
    /// [`Client::retry_failed`]): a request per shard, in shard order.
    pub async fn retry_failed(
        &self,
        job_type: &str,
        since: Option<SystemTime>,
    ) -> Result<Vec<Request>> {
        self.on_every(move |c| async move { c.retry_failed(job_type, since).await })
            .await
    }

    /// Pause a job type on every shard (as [`Client::pause`]): a request
    /// per shard, in shard order.
    pub async fn pause(&self, job_type: &str) -> Result<Vec<Request>> {
        self.on_every(move |c| async move { c.pause(job_type).await })
            .await
    }

    /// Resume a paused job type on every shard (as [`Client::resume`]): a
    /// request per shard, in shard order.
    pub async fn resume(&self, job_type: &str) -> Result<Vec<Request>> {
        self.on_every(move |c| async move { c.resume(job_type).await })
            .await
    }

    /// Pause one value of a job type's partitioning header on every shard
    /// (as [`Client::pause_value`]): a request per shard, in shard order.
    pub async fn pause_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> Result<Vec<Request>> {
        self.on_every(move |c| async move { c.pause_value(job_type, header, value).await })
            .await
    }

    /// Resume a paused value on every shard (as [`Client::resume_value`]):
    /// a request per shard, in shard order.
    pub async fn resume_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> Result<Vec<Request>> {
        self.on_every(move |c| async move { c.resume_value(job_type, header, value).await })
            .await
    }

    /// Wait until every step of the workflow `id` ended, reading its shard
    /// (as [`Client::join_workflow`]).
    pub async fn join_workflow(&self, id: &str) -> Result<Result<WorkflowStatus, StepFailed>> {
        self.client_of(id).join_workflow(id).await
    }

    /// Cancel the workflow `id` through its shard's inbox (as
    /// [`Client::cancel_workflow`]).
    pub async fn cancel_workflow(&self, id: &str) -> Result<Request> {
        self.client_of(id).cancel_workflow(id).await
    }

    /// Run the workflow `id`'s failed and cancelled steps again, through
    /// its shard's inbox (as [`Client::retry_workflow`]).
    pub async fn retry_workflow(&self, id: &str) -> Result<Request> {
        self.client_of(id).retry_workflow(id).await
    }
}
