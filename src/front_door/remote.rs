//! The front door from other processes: [`Client`] and [`ShardedClient`],
//! their [`ClientHandle`]s and [`ClientWorkflow`]s. Every operation is a
//! request in a store's inbox ([`Answer::Sent`]), applied at the engine's
//! next look.

use std::future::Future;
use std::time::SystemTime;

use serde::Serialize;

use super::{Answer, FrontDoor, JobRef, WorkflowRef};
use crate::engine::signal_payload;
use crate::error::{JobError, Result};
use crate::job::submit::SubmitOptions;
use crate::job::typed::Job;
use crate::job::{CancelResult, JobState, Signalled};
use crate::remote::{Client, ClientHandle, ClientWorkflow, Request, ShardedClient};
use crate::workflow::{StepFailed, Workflow, WorkflowStatus};

/// One request, as an answer.
fn sent<T>(request: Result<Request>) -> Result<Answer<T>> {
    request.map(|r| Answer::Sent(vec![r]))
}

impl<J: Job> JobRef<J> for ClientHandle<J> {
    fn id(&self) -> &str {
        ClientHandle::id(self)
    }

    fn join(&self) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
        ClientHandle::join(self)
    }

    fn outcome(&self) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        ClientHandle::outcome(self)
    }
}

impl WorkflowRef for ClientWorkflow {
    fn id(&self) -> &str {
        ClientWorkflow::id(self)
    }

    fn join(&self) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
        ClientWorkflow::join(self)
    }

    fn output<J: Job>(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        ClientWorkflow::output::<J>(self, name)
    }
}

impl FrontDoor for Client {
    type Handle<J: Job> = ClientHandle<J>;
    type Workflow = ClientWorkflow;

    fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> impl Future<Output = Result<ClientHandle<J>>> + Send {
        Client::submit_with(self, job, opts)
    }

    fn join<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
        Client::join::<J>(self, id)
    }

    fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        Client::outcome::<J>(self, id)
    }

    fn status(&self, id: &str) -> impl Future<Output = Result<JobState>> + Send {
        Client::status(self, id)
    }

    async fn cancel(&self, id: &str) -> Result<Answer<CancelResult>> {
        sent(Client::cancel(self, id).await)
    }

    async fn retry(&self, id: &str) -> Result<Answer<()>> {
        sent(Client::retry(self, id).await)
    }

    async fn retry_failed(
        &self,
        job_type: &str,
        since: Option<SystemTime>,
    ) -> Result<Answer<usize>> {
        sent(Client::retry_failed(self, job_type, since).await)
    }

    fn signal<S: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> impl Future<Output = Result<Answer<Signalled>>> + Send {
        // Encoded here: the future holds bytes, not the payload.
        let bytes = signal_payload(name, payload);
        async move { sent(self.signal_bytes(id, name, bytes?).await) }
    }

    async fn pause(&self, job_type: &str) -> Result<Answer<bool>> {
        sent(Client::pause(self, job_type).await)
    }

    async fn resume(&self, job_type: &str) -> Result<Answer<bool>> {
        sent(Client::resume(self, job_type).await)
    }

    async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<Answer<bool>> {
        sent(Client::pause_value(self, job_type, header, value).await)
    }

    async fn resume_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> Result<Answer<bool>> {
        sent(Client::resume_value(self, job_type, header, value).await)
    }

    fn submit_workflow(
        &self,
        workflow: Workflow,
    ) -> impl Future<Output = Result<ClientWorkflow>> + Send {
        Client::submit_workflow(self, workflow)
    }

    fn workflow_status(&self, id: &str) -> impl Future<Output = Result<WorkflowStatus>> + Send {
        Client::workflow_status(self, id)
    }

    fn join_workflow(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
        Client::join_workflow(self, id)
    }

    async fn cancel_workflow(&self, id: &str) -> Result<Answer<usize>> {
        sent(Client::cancel_workflow(self, id).await)
    }

    async fn retry_workflow(&self, id: &str) -> Result<Answer<usize>> {
        sent(Client::retry_workflow(self, id).await)
    }
}

impl FrontDoor for ShardedClient {
    type Handle<J: Job> = ClientHandle<J>;
    type Workflow = ClientWorkflow;

    fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> impl Future<Output = Result<ClientHandle<J>>> + Send {
        ShardedClient::submit_with(self, job, opts)
    }

    fn join<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
        ShardedClient::join::<J>(self, id)
    }

    fn outcome<J: Job>(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
        ShardedClient::outcome::<J>(self, id)
    }

    fn status(&self, id: &str) -> impl Future<Output = Result<JobState>> + Send {
        ShardedClient::status(self, id)
    }

    async fn cancel(&self, id: &str) -> Result<Answer<CancelResult>> {
        sent(ShardedClient::cancel(self, id).await)
    }

    async fn retry(&self, id: &str) -> Result<Answer<()>> {
        sent(ShardedClient::retry(self, id).await)
    }

    async fn retry_failed(
        &self,
        job_type: &str,
        since: Option<SystemTime>,
    ) -> Result<Answer<usize>> {
        ShardedClient::retry_failed(self, job_type, since)
            .await
            .map(Answer::Sent)
    }

    fn signal<S: Serialize + ?Sized>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> impl Future<Output = Result<Answer<Signalled>>> + Send {
        let bytes = signal_payload(name, payload);
        async move { sent(self.client_of(id).signal_bytes(id, name, bytes?).await) }
    }

    async fn pause(&self, job_type: &str) -> Result<Answer<bool>> {
        ShardedClient::pause(self, job_type).await.map(Answer::Sent)
    }

    async fn resume(&self, job_type: &str) -> Result<Answer<bool>> {
        ShardedClient::resume(self, job_type)
            .await
            .map(Answer::Sent)
    }

    async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<Answer<bool>> {
        ShardedClient::pause_value(self, job_type, header, value)
            .await
            .map(Answer::Sent)
    }

    async fn resume_value(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
    ) -> Result<Answer<bool>> {
        ShardedClient::resume_value(self, job_type, header, value)
            .await
            .map(Answer::Sent)
    }

    fn submit_workflow(
        &self,
        workflow: Workflow,
    ) -> impl Future<Output = Result<ClientWorkflow>> + Send {
        ShardedClient::submit_workflow(self, workflow)
    }

    fn workflow_status(&self, id: &str) -> impl Future<Output = Result<WorkflowStatus>> + Send {
        ShardedClient::workflow_status(self, id)
    }

    fn join_workflow(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
        ShardedClient::join_workflow(self, id)
    }

    async fn cancel_workflow(&self, id: &str) -> Result<Answer<usize>> {
        sent(ShardedClient::cancel_workflow(self, id).await)
    }

    async fn retry_workflow(&self, id: &str) -> Result<Answer<usize>> {
        sent(ShardedClient::retry_workflow(self, id).await)
    }
}
