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

/// What a client's operation sent: one request (a `Client`'s) or one per
/// shard (a `ShardedClient`'s operation on a type).
trait Requests {
    fn into_requests(self) -> Vec<Request>;
}

impl Requests for Request {
    fn into_requests(self) -> Vec<Request> {
        vec![self]
    }
}

impl Requests for Vec<Request> {
    fn into_requests(self) -> Vec<Request> {
        self
    }
}

/// What was sent, as an answer.
fn sent<T>(requests: Result<impl Requests>) -> Result<Answer<T>> {
    requests.map(|r| Answer::Sent(r.into_requests()))
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

/// `FrontDoor` for the door `$door` in another process: each operation is
/// its own inherent method of that name, answered with what it sent;
/// `$client` is the client a signal to `$id` goes through.
macro_rules! remote_door {
    ($door:ident, |$me:ident, $id:ident| $client:expr) => {
        impl FrontDoor for $door {
            type Handle<J: Job> = ClientHandle<J>;
            type Workflow = ClientWorkflow;

            fn submit_with<J: Job>(
                &self,
                job: J,
                opts: SubmitOptions,
            ) -> impl Future<Output = Result<ClientHandle<J>>> + Send {
                $door::submit_with(self, job, opts)
            }

            fn join<J: Job>(
                &self,
                id: &str,
            ) -> impl Future<Output = Result<Result<J::Output, JobError>>> + Send {
                $door::join::<J>(self, id)
            }

            fn outcome<J: Job>(
                &self,
                id: &str,
            ) -> impl Future<Output = Result<Option<Result<J::Output, JobError>>>> + Send {
                $door::outcome::<J>(self, id)
            }

            fn status(&self, id: &str) -> impl Future<Output = Result<JobState>> + Send {
                $door::status(self, id)
            }

            async fn cancel(&self, id: &str) -> Result<Answer<CancelResult>> {
                sent($door::cancel(self, id).await)
            }

            async fn retry(&self, id: &str) -> Result<Answer<()>> {
                sent($door::retry(self, id).await)
            }

            async fn retry_failed(
                &self,
                job_type: &str,
                since: Option<SystemTime>,
            ) -> Result<Answer<usize>> {
                sent($door::retry_failed(self, job_type, since).await)
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
                    let client = {
                        let $me = self;
                        let $id = id;
                        $client
                    };
                    sent(client.signal_bytes(id, name, bytes?).await)
                }
            }

            async fn pause(&self, job_type: &str) -> Result<Answer<bool>> {
                sent($door::pause(self, job_type).await)
            }

            async fn resume(&self, job_type: &str) -> Result<Answer<bool>> {
                sent($door::resume(self, job_type).await)
            }

            async fn pause_value(
                &self,
                job_type: &str,
                header: &str,
                value: &str,
            ) -> Result<Answer<bool>> {
                sent($door::pause_value(self, job_type, header, value).await)
            }

            async fn resume_value(
                &self,
                job_type: &str,
                header: &str,
                value: &str,
            ) -> Result<Answer<bool>> {
                sent($door::resume_value(self, job_type, header, value).await)
            }

            fn submit_workflow(
                &self,
                workflow: Workflow,
            ) -> impl Future<Output = Result<ClientWorkflow>> + Send {
                $door::submit_workflow(self, workflow)
            }

            fn workflow_status(
                &self,
                id: &str,
            ) -> impl Future<Output = Result<WorkflowStatus>> + Send {
                $door::workflow_status(self, id)
            }

            fn join_workflow(
                &self,
                id: &str,
            ) -> impl Future<Output = Result<Result<WorkflowStatus, StepFailed>>> + Send {
                $door::join_workflow(self, id)
            }

            async fn cancel_workflow(&self, id: &str) -> Result<Answer<usize>> {
                sent($door::cancel_workflow(self, id).await)
            }

            async fn retry_workflow(&self, id: &str) -> Result<Answer<usize>> {
                sent($door::retry_workflow(self, id).await)
            }

            fn jobs_by_tag(
                &self,
                tag: &str,
                before: Option<&str>,
                limit: usize,
            ) -> impl Future<Output = Result<crate::job::TaggedJobs>> + Send {
                $door::jobs_by_tag(self, tag, before, limit)
            }
        }
    };
}

remote_door!(Client, |me, _id| me);
remote_door!(ShardedClient, |me, id| me.client_of(id));
