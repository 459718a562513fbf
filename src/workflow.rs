//! Workflows: graphs of jobs submitted in one call, where a step starts
//! once the steps it needs have succeeded and reads their outputs
//! ([`JobContext::dep`](crate::JobContext::dep)).
//!
//! ```no_run
//! # use gaffer::{Engine, Job, JobContext};
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] struct Fetch { url: String }
//! # impl Job for Fetch { const NAME: &'static str = "fetch"; type Output = String;
//! #   type Error = std::io::Error;
//! #   async fn run(&self, _: JobContext) -> Result<String, std::io::Error> { Ok(String::new()) } }
//! # #[derive(Serialize, Deserialize)] struct Merge;
//! # impl Job for Merge { const NAME: &'static str = "merge"; type Output = usize;
//! #   type Error = gaffer::Error;
//! #   async fn run(&self, ctx: JobContext) -> Result<usize, gaffer::Error> {
//! #     Ok(ctx.dep::<Fetch>("a").await?.len() + ctx.dep::<Fetch>("b").await?.len()) } }
//! # async fn demo(engine: Engine) -> gaffer::Result<()> {
//! use gaffer::workflow::Workflow;
//! let flow = Workflow::new("pages")
//!     .step("a", Fetch { url: "https://a.example".into() })
//!     .step("b", Fetch { url: "https://b.example".into() })
//!     .step_after("merge", Merge, ["a", "b"]);
//! let handle = engine.submit_workflow(flow).await?;
//! let outputs = handle.join().await?.expect("every step succeeded");
//! let total: usize = outputs.get::<Merge>("merge").await?;
//! # let _ = total; Ok(()) }
//! ```

use std::collections::HashMap;

use gaffer_actors::workflows::{StepSpec, WorkflowSpec};
use gaffer_actors::{EngineError, EngineRef, OutcomeRecord};

use crate::error::{JobError, Result};
use crate::job::handle::decode_outcome_with;
use crate::job::submit::{SubmitOptions, submit_request};
use crate::job::typed::Job;

pub use gaffer_actors::workflows::layout::WorkflowRecord;
pub use gaffer_actors::workflows::{StepStatus, WorkflowStatus};

/// A workflow to submit: named steps, each a job of a registered type and
/// the steps it needs. Built with chained calls; the first mistake (a job
/// that does not encode) is reported by
/// [`Engine::submit_workflow`](crate::Engine::submit_workflow), as are a
/// step named twice, a dependency the workflow does not have and a cycle.
#[derive(Debug, Clone)]
pub struct Workflow {
    spec: WorkflowSpec,
    error: Option<EngineError>,
}

impl Workflow {
    /// A workflow called `name` (any text, shown by `gaffer workflows`),
    /// with a fresh id.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            spec: WorkflowSpec {
                name: name.into(),
                ..Default::default()
            },
            error: None,
        }
    }

    /// Give it this id (1-128 characters of `[A-Za-z0-9_-]`): a second
    /// submission under the id answers with the same workflow.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.spec.id = Some(id.into());
        self
    }

    /// Derive its id from `key` ([`workflow_id`]): a second submission with
    /// the key answers with the same workflow.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.spec.key = Some(key.into());
        self
    }

    /// A step that needs no other: its job is created with the workflow.
    pub fn step<J: Job>(self, name: &str, job: J) -> Self {
        self.add(name, job, SubmitOptions::default(), Vec::new(), false)
    }

    /// A step that starts once every step of `deps` has succeeded, and is
    /// cancelled (its reason naming the step) as soon as one of them fails
    /// or is cancelled.
    pub fn step_after<J: Job, D: Into<String>>(
        self,
        name: &str,
        job: J,
        deps: impl IntoIterator<Item = D>,
    ) -> Self {
        let deps = deps.into_iter().map(Into::into).collect();
        self.add(name, job, SubmitOptions::default(), deps, false)
    }

    /// A step that runs once every step of `deps` has ended, whichever way
    /// (a cleanup step). It reads what succeeded with
    /// [`JobContext::dep`](crate::JobContext::dep), which answers an error
    /// for a step that did not.
    pub fn cleanup_after<J: Job, D: Into<String>>(
        self,
        name: &str,
        job: J,
        deps: impl IntoIterator<Item = D>,
    ) -> Self {
        let deps = deps.into_iter().map(Into::into).collect();
        self.add(name, job, SubmitOptions::default(), deps, true)
    }

    /// A step with options (priority, attempt limit, headers, tags; `run_at` is
    /// not used) that needs `deps` (none: it starts with the workflow) and
    /// runs `regardless` of how they end, or only when they all succeed.
    pub fn step_with<J: Job, D: Into<String>>(
        self,
        name: &str,
        job: J,
        opts: SubmitOptions,
        deps: impl IntoIterator<Item = D>,
        regardless: bool,
    ) -> Self {
        let deps = deps.into_iter().map(Into::into).collect();
        self.add(name, job, opts, deps, regardless)
    }

    fn add<J: Job>(
        mut self,
        name: &str,
        job: J,
        opts: SubmitOptions,
        deps: Vec<String>,
        regardless: bool,
    ) -> Self {
        match submit_request(&job, opts) {
            Ok(request) => self.spec.steps.push(StepSpec {
                name: name.to_string(),
                job: request,
                deps,
                regardless,
            }),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        self
    }

    /// Settle its id now (the one given, the one derived from its key, or
    /// a fresh ULID) and fix it in the workflow, for a submitter that must
    /// know it before the engine sees the workflow (a client, a shard
    /// set's router). `InvalidWorkflow` for a given id that cannot be one.
    pub(crate) fn pin_id(mut self) -> Result<(String, Self)> {
        let id = match (&self.spec.id, &self.spec.key) {
            (Some(id), _) if gaffer_actors::layout::keys::is_valid_id(id) => id.clone(),
            (Some(id), _) => {
                return Err(EngineError::InvalidWorkflow(format!(
                    "id `{id}` is not 1-128 characters of [A-Za-z0-9_-]"
                )));
            }
            (None, Some(key)) => workflow_id(key),
            (None, None) => ulid::Ulid::new().to_string(),
        };
        self.spec.id = Some(id.clone());
        Ok((id, self))
    }

    pub(crate) fn into_spec(self) -> Result<WorkflowSpec> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.spec),
        }
    }
}

/// The id of the workflow submitted with key `key` ([`Workflow::key`]).
pub fn workflow_id(key: &str) -> String {
    gaffer_actors::workflows::layout::keyed_workflow_id(key)
}

/// The job id of step `name` of workflow `workflow`: its handle
/// ([`Engine::handle`](crate::Engine::handle)) answers for the step once its
/// job exists.
pub fn step_id(workflow: &str, name: &str) -> String {
    gaffer_actors::workflows::layout::step_run_id(workflow, name)
}

/// A submitted workflow.
#[derive(Debug, Clone)]
pub struct WorkflowHandle {
    id: String,
    newly_submitted: bool,
    engine: EngineRef,
}

/// How a workflow ended when a step did not succeed: the first step (in
/// dependency order) that failed, else the first that was cancelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("step `{step}` of the workflow did not succeed: {error}")]
pub struct StepFailed {
    /// The step.
    pub step: String,
    /// How it ended.
    pub error: JobError,
    /// Why gaffer ended it so, when it says more (a cancelled step names
    /// the step it needed that failed).
    pub reason: Option<String>,
}

/// The first step of `steps` (in dependency order) that failed, else the
/// first that was cancelled, from its outcome record in `records` (a step
/// without one there is passed over).
pub(crate) fn step_failed(
    steps: &[StepStatus],
    records: &HashMap<String, OutcomeRecord>,
) -> Option<StepFailed> {
    let first = |failed: bool| {
        steps.iter().find_map(|s| {
            let r = records.get(&s.name)?;
            match &r.outcome {
                gaffer_actors::Outcome::Failed { kind, message } if failed => Some(StepFailed {
                    step: s.name.clone(),
                    error: JobError::failed(*kind, message.clone()),
                    reason: r.reason.clone(),
                }),
                gaffer_actors::Outcome::Cancelled if !failed => Some(StepFailed {
                    step: s.name.clone(),
                    error: JobError::cancelled(),
                    reason: r.reason.clone(),
                }),
                _ => None,
            }
        })
    };
    first(true).or_else(|| first(false))
}

/// The outputs of a workflow whose steps all succeeded.
#[derive(Debug, Clone)]
pub struct WorkflowOutputs {
    records: HashMap<String, OutcomeRecord>,
    engine: EngineRef,
}

impl WorkflowOutputs {
    /// The output of step `name`, a job of type `J`.
    pub async fn get<J: Job>(&self, name: &str) -> Result<J::Output> {
        let Some(record) = self.records.get(name) else {
            return Err(EngineError::NoDependencyOutput {
                step: name.to_string(),
                reason: "the workflow has no step of this name".into(),
            });
        };
        let services = self.engine.services();
        let output =
            decode_outcome_with::<J>(record, async |o| services.output_bytes(o).await).await?;
        output.map_err(|e| EngineError::NoDependencyOutput {
            step: name.to_string(),
            reason: e.to_string(),
        })
    }

    /// The names of the steps.
    pub fn steps(&self) -> impl Iterator<Item = &str> {
        self.records.keys().map(String::as_str)
    }
}

impl WorkflowHandle {
    pub(crate) fn new(id: String, newly_submitted: bool, engine: EngineRef) -> Self {
        Self {
            id,
            newly_submitted,
            engine,
        }
    }

    /// The workflow's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the submission created it (false: it existed, same steps).
    pub fn newly_submitted(&self) -> bool {
        self.newly_submitted
    }

    /// Its record and each step's state, dependencies first (a step whose
    /// `state` is `None` waits for the steps it needs).
    /// `Error::WorkflowNotFound` if no such workflow exists.
    pub async fn status(&self) -> Result<WorkflowStatus> {
        self.engine.services().workflow_status(&self.id).await
    }

    /// Wait until every step ended; answers every output, or the first
    /// step that did not succeed. Survives restarts (it reads the records).
    pub async fn join(&self) -> Result<Result<WorkflowOutputs, StepFailed>> {
        // The steps in order, without their jobs' states (each is waited
        // for next).
        let steps = self.engine.services().workflow_steps(&self.id).await?;
        let mut records = HashMap::with_capacity(steps.len());
        // Dependencies first: by the time a step's dependencies have
        // ended, the transaction that ended the last of them created its
        // job or cancelled it.
        for step in &steps {
            let record = self.await_step(&step.run_id).await?;
            records.insert(step.name.clone(), record);
        }
        if let Some(failed) = step_failed(&steps, &records) {
            return Ok(Err(failed));
        }
        Ok(Ok(WorkflowOutputs {
            records,
            engine: self.engine.clone(),
        }))
    }

    /// [`join`](Self::join), answering the workflow's status when every
    /// step succeeded (as a client's join does) rather than the outputs.
    pub(crate) async fn join_status(&self) -> Result<Result<WorkflowStatus, StepFailed>> {
        match self.join().await? {
            Ok(_) => Ok(Ok(self.status().await?)),
            Err(failed) => Ok(Err(failed)),
        }
    }

    /// The result of step `name`, a job of type `J`, once it ended: `None`
    /// while it has not (or its job does not exist yet: a step waiting for
    /// the steps it needs). As [`ClientWorkflow::output`](crate::remote::ClientWorkflow::output).
    pub async fn output<J: Job>(&self, name: &str) -> Result<Option<Result<J::Output, JobError>>> {
        match self.engine.outcome(&step_id(&self.id, name)).await {
            Ok(Some(record)) => crate::job::handle::decode_outcome::<J>(&self.engine, &record)
                .await
                .map(Some),
            Ok(None) | Err(EngineError::JobNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Wait for one step's job. A step not released yet (its job not
    /// created: a retry of the workflow set it back) is looked at again
    /// once the steps before it ended.
    async fn await_step(&self, run_id: &str) -> Result<OutcomeRecord> {
        loop {
            match self.engine.await_job(run_id).await {
                Err(EngineError::JobNotFound(_)) => {
                    // Held: a step before it in the order has not ended
                    // since a retry set both back. Wait for the workflow's
                    // next end by waiting on the first step not ended.
                    let status = self.status().await?;
                    let Some(next) = status
                        .steps
                        .iter()
                        .find(|s| s.state.is_some_and(|st| !st.is_terminal()))
                    else {
                        // Nothing runs: the step is decided or never will be.
                        return Err(EngineError::JobNotFound(run_id.to_string()));
                    };
                    self.engine.await_job(&next.run_id).await?;
                }
                other => return other,
            }
        }
    }

    /// Cancel the workflow: no step starts from now on, every step still
    /// waiting for others is cancelled, and every step whose job exists is
    /// cancelled as a job is (a running one is asked to stop: its
    /// [`cancel_token`](crate::JobContext::cancel_token) fires). Answers
    /// how many steps it cancelled or asked to stop.
    pub async fn cancel(&self) -> Result<usize> {
        self.engine.services().cancel_workflow(&self.id).await
    }

    /// Run the failed and cancelled steps again and resume the graph from
    /// them (a step whose dependencies all succeeded starts now, the rest
    /// as theirs succeed); clears a cancel of the workflow. Answers how
    /// many steps were set back.
    pub async fn retry(&self) -> Result<usize> {
        self.engine.services().retry_workflow(&self.id).await
    }
}
