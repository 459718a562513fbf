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

    /// Workflow `id` and each step's state, as the store shows it
    /// (`WorkflowNotFound` before the engine took it, or past retention).
    pub async fn workflow_status(&self, id: &str) -> Result<WorkflowStatus> {
        status(self.inner.reader.view(), id).await
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
            Err(EngineError::WorkflowNotFound(_)) => self.absent().await,
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
        let view = self.inner.reader.view();
        match read_record(view, &self.id).await? {
            None => self.absent().await,
            Some(record) if record.ended_at_ms.is_none() => Ok(None),
            Some(_) => {
                let status = status(view, &self.id).await?;
                if !status.ended() {
                    return Ok(None);
                }
                let mut records = HashMap::new();
                for step in &status.steps {
                    if step.state != Some(JobState::Succeeded)
                        && let Some(rec) = inspect::outcome_record(view, &step.run_id).await?
                    {
                        records.insert(step.name.clone(), rec.opened(&self.inner.keyring)?);
                    }
                }
                Ok(Some(match step_failed(&status.steps, &records) {
                    Some(failed) => Err(failed),
                    None => Ok(status),
                }))
            }
        }
    }

    /// The workflow is not in the store: `None` while the request waits
    /// for the engine, `Error::Refused` when it refused it,
    /// `WorkflowNotFound` when it took it (the workflow since removed).
    async fn absent<T>(&self) -> Result<Option<T>> {
        match self.request.result().await? {
            None => Ok(None),
            Some(_) => Err(EngineError::WorkflowNotFound(self.id.clone())),
        }
    }
}
