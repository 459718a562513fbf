//! A client's workflows: submitted through the store's inbox, read through
//! its reader, as [`Engine::submit_workflow`](crate::Engine::submit_workflow)
//! and [`WorkflowHandle`](crate::workflow::WorkflowHandle) do in process.

use std::collections::HashMap;
use std::sync::Arc;

use gaffer_actors::engine::intake::IntakeOp;
use gaffer_actors::layout::inspect;
use gaffer_actors::layout::workflow::status::status;
use gaffer_actors::workflows::graph::read_record;
use gaffer_actors::workflows::wire::IntakeWorkflow;
use gaffer_actors::{EngineError, JobState};

use super::{Client, Inner, Request};
use crate::error::{Error, JobError, Result};
use crate::job::typed::Job;
use crate::workflow::{StepFailed, Workflow, WorkflowStatus, step_failed, step_id};

impl Client {
    /// Submit a workflow through the store (as
    /// [`Engine::submit_workflow`](crate::Engine::submit_workflow): every
    /// step or none, in one transaction, once the engine takes the
    /// request). Returns once the request is durable. The workflow's id is
    /// known at once: the one given with [`Workflow::id`], the one derived
    /// from [`Workflow::key`], or a fresh ULID; a second submission under
    /// the id answers with the same workflow.
    ///
    /// Refused before anything is written: a mistake of the builder (a job
    /// that does not encode), an id that cannot be one
    /// ([`Error::InvalidWorkflow`]), a request over the inbox's 16 MiB
    /// ([`Error::RequestTooLarge`]). Refused by the engine (the request's
    /// result, [`ClientWorkflow::join`]'s error): a step of a type it has
    /// not registered, a cycle, a missing dependency, another workflow
    /// under the id.
    pub async fn submit_workflow(&self, workflow: Workflow) -> Result<ClientWorkflow> {
        let (id, workflow) = workflow.pin_id()?;
        let spec = workflow.into_spec()?;
        let op = IntakeOp::SubmitWorkflow(IntakeWorkflow::of(spec, id.clone()));
        let request = self.inner.operate(op).await?;
        Ok(ClientWorkflow {
            id,
            request,
            inner: self.inner.clone(),
        })
    }

    /// Wait until every step of the workflow `id` ended, reading the store
    /// every poll interval (as [`ClientWorkflow::join`]): its status when
    /// every step succeeded, else the first step that failed (or, failing
    /// none, was cancelled). It waits while the workflow is unknown too (the
    /// engine may not have taken the request yet): join the
    /// [`ClientWorkflow`], which also ends on a refused request, when you
    /// have it.
    pub async fn join_workflow(&self, id: &str) -> Result<Result<WorkflowStatus, StepFailed>> {
        loop {
            match self.inner.workflow_ended(id).await {
                Ok(Some(done)) => return Ok(done),
                Ok(None) | Err(EngineError::WorkflowNotFound(_)) => {}
                Err(e) if !e.is_permanent() => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(self.inner.poll).await;
        }
    }

    /// Workflow `id` and each step's state, as the store shows it
    /// (`WorkflowNotFound` before the engine took it, or past retention).
    pub async fn workflow_status(&self, id: &str) -> Result<WorkflowStatus> {
        status(self.inner.reader.view(), id).await
    }
}

impl Inner {
    /// What a workflow's join answers once every step of workflow `id`
    /// ended: `None` while one has not; `WorkflowNotFound` while the store
    /// holds no such workflow.
    async fn workflow_ended(&self, id: &str) -> Result<Option<Result<WorkflowStatus, StepFailed>>> {
        let view = self.reader.view();
        match read_record(view, id).await? {
            None => Err(EngineError::WorkflowNotFound(id.to_string())),
            Some(record) if record.ended_at_ms.is_none() => Ok(None),
            Some(_) => {
                let status = status(view, id).await?;
                if !status.ended() {
                    return Ok(None);
                }
                let mut records = HashMap::new();
                for step in &status.steps {
                    if step.state != Some(JobState::Succeeded)
                        && let Some(rec) = inspect::outcome_record(view, &step.run_id).await?
                    {
                        records.insert(step.name.clone(), rec.opened(&self.keyring)?);
                    }
                }
                Ok(Some(match step_failed(&status.steps, &records) {
                    Some(failed) => Err(failed),
                    None => Ok(status),
                }))
            }
        }
    }
}

/// A workflow a [`Client`] submitted.
#[derive(Clone)]
pub struct ClientWorkflow {
    id: String,
    request: Request,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ClientWorkflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientWorkflow")
            .field("id", &self.id)
            .field("request", &self.request)
            .finish()
    }
}

impl ClientWorkflow {
    /// The workflow's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The request that carries it: its result says whether the engine
    /// submitted it or why it refused.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// Each step's state; `None` while the engine has not taken the
    /// request; `Error::Refused` when it refused it; `WorkflowNotFound`
    /// when it took it and the workflow is gone (past retention).
    pub async fn status(&self) -> Result<Option<WorkflowStatus>> {
        match status(self.inner.reader.view(), &self.id).await {
            Ok(s) => Ok(Some(s)),
            // Read again once the request reads as taken (see `taken`).
            Err(EngineError::WorkflowNotFound(_)) if self.taken().await? => {
                status(self.inner.reader.view(), &self.id).await.map(Some)
            }
            Err(EngineError::WorkflowNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Wait until every step ended (reading the workflow's record every
    /// poll interval): its status when every step succeeded, else the
    /// first step that failed (or, failing none, was cancelled).
    /// `Error::Refused` when the engine refused the request;
    /// `WorkflowNotFound` when the engine took it and the workflow is gone
    /// (past retention).
    pub async fn join(&self) -> Result<Result<WorkflowStatus, StepFailed>> {
        loop {
            match self.ended().await {
                Ok(Some(done)) => return Ok(done),
                Ok(None) => {}
                Err(e @ Error::Refused { .. }) => return Err(e),
                Err(e) if !e.is_permanent() => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(self.inner.poll).await;
        }
    }

    /// [`join`](Self::join), giving up after `timeout`: `Ok(None)` when the
    /// workflow had not ended by then (it runs on; join again later).
    pub async fn join_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<Result<WorkflowStatus, StepFailed>>> {
        match tokio::time::timeout(timeout, self.join()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The result of step `name`, a job of type `J`, once it ended (as
    /// [`Client::outcome`] of its job, [`step_id`]).
    pub async fn output<J: Job>(&self, name: &str) -> Result<Option<Result<J::Output, JobError>>> {
        self.inner.outcome::<J>(&step_id(&self.id, name)).await
    }

    /// What [`join`](Self::join) answers, once every step ended.
    async fn ended(&self) -> Result<Option<Result<WorkflowStatus, StepFailed>>> {
        match self.inner.workflow_ended(&self.id).await {
            // Read again once the request reads as taken (see `taken`).
            Err(EngineError::WorkflowNotFound(_)) if self.taken().await? => {
                self.inner.workflow_ended(&self.id).await
            }
            Err(EngineError::WorkflowNotFound(_)) => Ok(None),
            other => other,
        }
    }

    /// The workflow read as not in the store: whether the engine took its
    /// request (`Error::Refused` when it refused it). Taken, the workflow
    /// is read again: the reader follows the store's latest state, so the
    /// request's result may be read from a later state than the absence
    /// (the request taken in between), and a read after it sees the
    /// workflow the taking wrote, unless retention removed it since
    /// (`WorkflowNotFound`).
    async fn taken(&self) -> Result<bool> {
        Ok(self.request.result().await?.is_some())
    }
}
