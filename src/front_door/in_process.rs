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

/// `FrontDoor` for the in-process door `$door`: each operation is its own
/// inherent method of that name, applied when it answers; `$engine` is the
/// engine (by reference or value) a signal to `$id` goes to.
macro_rules! in_process_door {
    ($door:ident, |$me:ident, $id:ident| $engine:expr) => {
        impl FrontDoor for $door {
            type Handle<J: Job> = JobHandle<J>;
            type Workflow = WorkflowHandle;

            fn submit_with<J: Job>(
                &self,
                job: J,
                opts: SubmitOptions,
            ) -> impl Future<Output = Result<JobHandle<J>>> + Send {
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
                $door::cancel(self, id).await.map(Answer::Applied)
            }

            async fn retry(&self, id: &str) -> Result<Answer<()>> {
                $door::retry(self, id).await.map(Answer::Applied)
            }

            async fn retry_failed(
                &self,
                job_type: &str,
                since: Option<SystemTime>,
            ) -> Result<Answer<usize>> {
                $door::retry_failed(self, job_type, since)
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
                    let engine = {
                        let $me = self;
                        let $id = id;
                        $engine
                    };
                    let signalled = engine.inner.signal(id, name, bytes?).await?;
                    Ok(Answer::Applied(signalled))
                }
            }

            async fn pause(&self, job_type: &str) -> Result<Answer<bool>> {
                $door::pause(self, job_type).await.map(Answer::Applied)
            }

            async fn resume(&self, job_type: &str) -> Result<Answer<bool>> {
                $door::resume(self, job_type).await.map(Answer::Applied)
            }

            async fn pause_value(
                &self,
                job_type: &str,
                header: &str,
                value: &str,
            ) -> Result<Answer<bool>> {
                $door::pause_value(self, job_type, header, value)
                    .await
                    .map(Answer::Applied)
            }

            async fn resume_value(
                &self,
                job_type: &str,
                header: &str,
                value: &str,
            ) -> Result<Answer<bool>> {
                $door::resume_value(self, job_type, header, value)
                    .await
                    .map(Answer::Applied)
            }

            fn submit_workflow(
                &self,
                workflow: Workflow,
            ) -> impl Future<Output = Result<WorkflowHandle>> + Send {
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
                $door::cancel_workflow(self, id).await.map(Answer::Applied)
            }

            async fn retry_workflow(&self, id: &str) -> Result<Answer<usize>> {
                $door::retry_workflow(self, id).await.map(Answer::Applied)
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

in_process_door!(Engine, |me, _id| me);
in_process_door!(ShardedEngine, |me, id| me.engine_of(id)?);
