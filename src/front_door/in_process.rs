//! The front door in process: [`Engine`] and [`ShardedEngine`], their
//! [`JobHandle`]s and [`WorkflowHandle`]s. Every operation is applied when
//! it answers ([`Answer::Applied`]).

use std::future::Future;
use std::time::SystemTime;

use serde::Serialize;

use super::{Answer, FrontDoor, JobRef, WorkflowRef};
use crate::engine::Engine;
use crate::engine::signal_payload;
use crate::error::{JobError, Result};
use crate::job::handle::JobHandle;
use crate::job::submit::SubmitOptions;
use crate::job::typed::Job;
use crate::job::{CancelResult, JobState, Signalled};
use crate::remote::ShardedEngine;
use crate::workflow::{StepFailed, Workflow, WorkflowHandle, WorkflowStatus};

impl<J: Job> JobRef<J> for JobHandle<J> {
    fn id(&self) -> &str {
        JobHandle::id(self)
    }

    fn join(&self) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
        JobHandle::join(self)
    }

    fn outcome(&self) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        JobHandle::outcome(self)
    }
}

impl WorkflowRef for WorkflowHandle {
    fn id(&self) -> &str {
        WorkflowHandle::id(self)
    }

    fn join(&self) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
        self.join_status()
    }

    fn output<J: Job>(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        WorkflowHandle::output::<J>(self, name)
    }
}

impl FrontDoor for Engine {
    type Handle<J: Job> = JobHandle<J>;
    type Workflow = WorkflowHandle;

    fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> impl Future<Output = Result<JobHandle<J>>> + Send {
        Engine::submit_with(self, job, opts)
    }

    fn join<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
        Engine::join::<J>(self, id)
    }

    fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        Engine::outcome::<J>(self, id)
    }

    fn status(&self, id: &str) -> impl Future<Output = Result<JobState>> + Send {
        Engine::status(self, id)
    }

    async fn cancel(&self, id: &str) -> Result<Answer<CancelResult>> {
        Engine::cancel(self, id).await.map(Answer::Applied)
    }

    async fn retry(&self, id: &str) -> Result<Answer<()>> {
        Engine::retry(self, id).await.map(Answer::Applied)
    }

    async fn retry_failed(
        &self,
        job_type: &str,
        since: Option<SystemTime>,
    ) -> Result<Answer<usize>> {
        Engine::retry_failed(self, job_type, since)
            .await
            .map(Answer::Applied)
    }

    fn signal<S: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> impl Future<Output = Result<Answer<Signalled>>> + Send {
        // Encoded here: the future holds bytes, not the payload.
        let bytes = signal_payload(name, payload);
        async move {
            let signalled = self.inner.signal(id, name, bytes?).await?;
            Ok(Answer::Applied(signalled))
        }
    }

    async fn pause(&self, job_type: &str) -> Result<Answer<bool>> {
        Engine::pause(self, job_type).await.map(Answer::Applied)
    }

    async fn resume(&self, job_type: &str) -> Result<Answer<bool>> {
        Engine::resume(self, job_type).await.map(Answer::Applied)
    }

    async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<Answer<bool>> {
        Engine::pause_value(self, job_type, header, value)
            .await
            .map(Answer::Applied)
    }

    async fn resume_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> Result<Answer<bool>> {
        Engine::resume_value(self, job_type, header, value)
            .await
            .map(Answer::Applied)
    }

    fn submit_workflow(
        &self,
        workflow: Workflow,
    ) -> impl Future<Output = Result<WorkflowHandle>> + Send {
        Engine::submit_workflow(self, workflow)
    }

    fn workflow_status(&self, id: &str) -> impl Future<Output = Result<WorkflowStatus>> + Send {
        Engine::workflow_status(self, id)
    }

    fn join_workflow(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
        Engine::join_workflow(self, id)
    }

    async fn cancel_workflow(&self, id: &str) -> Result<Answer<usize>> {
        Engine::cancel_workflow(self, id).await.map(Answer::Applied)
    }

    async fn retry_workflow(&self, id: &str) -> Result<Answer<usize>> {
        Engine::retry_workflow(self, id).await.map(Answer::Applied)
    }
}

impl FrontDoor for ShardedEngine {
    type Handle<J: Job> = JobHandle<J>;
    type Workflow = WorkflowHandle;

    fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> impl Future<Output = Result<JobHandle<J>>> + Send {
        ShardedEngine::submit_with(self, job, opts)
    }

    fn join<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
        ShardedEngine::join::<J>(self, id)
    }

    fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        ShardedEngine::outcome::<J>(self, id)
    }

    fn status(&self, id: &str) -> impl Future<Output = Result<JobState>> + Send {
        ShardedEngine::status(self, id)
    }

    async fn cancel(&self, id: &str) -> Result<Answer<CancelResult>> {
        ShardedEngine::cancel(self, id).await.map(Answer::Applied)
    }

    async fn retry(&self, id: &str) -> Result<Answer<()>> {
        ShardedEngine::retry(self, id).await.map(Answer::Applied)
    }

    async fn retry_failed(
        &self,
        job_type: &str,
        since: Option<SystemTime>,
    ) -> Result<Answer<usize>> {
        ShardedEngine::retry_failed(self, job_type, since)
            .await
            .map(Answer::Applied)
    }

    fn signal<S: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> impl Future<Output = Result<Answer<Signalled>>> + Send {
        let bytes = signal_payload(name, payload);
        async move {
            let engine = self.engine_of(id)?;
            let signalled = engine.inner.signal(id, name, bytes?).await?;
            Ok(Answer::Applied(signalled))
        }
    }

    async fn pause(&self, job_type: &str) -> Result<Answer<bool>> {
        ShardedEngine::pause(self, job_type)
            .await
            .map(Answer::Applied)
    }

    async fn resume(&self, job_type: &str) -> Result<Answer<bool>> {
        ShardedEngine::resume(self, job_type)
            .await
            .map(Answer::Applied)
    }

    async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<Answer<bool>> {
        ShardedEngine::pause_value(self, job_type, header, value)
            .await
            .map(Answer::Applied)
    }

    async fn resume_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> Result<Answer<bool>> {
        ShardedEngine::resume_value(self, job_type, header, value)
            .await
            .map(Answer::Applied)
    }

    fn submit_workflow(
        &self,
        workflow: Workflow,
    ) -> impl Future<Output = Result<WorkflowHandle>> + Send {
        ShardedEngine::submit_workflow(self, workflow)
    }

    fn workflow_status(&self, id: &str) -> impl Future<Output = Result<WorkflowStatus>> + Send {
        ShardedEngine::workflow_status(self, id)
    }

    fn join_workflow(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
        ShardedEngine::join_workflow(self, id)
    }

    async fn cancel_workflow(&self, id: &str) -> Result<Answer<usize>> {
        ShardedEngine::cancel_workflow(self, id)
            .await
            .map(Answer::Applied)
    }

    async fn retry_workflow(&self, id: &str) -> Result<Answer<usize>> {
        ShardedEngine::retry_workflow(self, id)
            .await
            .map(Answer::Applied)
    }
}
