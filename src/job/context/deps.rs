//! A workflow step's reads of the steps it needs: `dep` and `deps`.

use std::collections::HashSet;

use super::JobContext;
use crate::error::{Error, Result};
use crate::job::typed::Job;
use gaffer_actors::layout::records::OutcomeRecord;
use gaffer_actors::workflows::layout::{is_valid_step_name, step_run_id};

fn none(name: &str, reason: &str) -> Error {
    Error::NoDependencyOutput {
        step: name.to_string(),
        reason: reason.to_string(),
    }
}

impl JobContext {
    /// The output of step `name` of this job's workflow, a job of type
    /// `J` (see [`Workflow`](crate::workflow::Workflow)). A step starts
    /// only once the steps it needs succeeded, so their outputs are there;
    /// a cleanup step ([`Workflow::cleanup_after`](crate::workflow::Workflow::cleanup_after))
    /// gets `Error::NoDependencyOutput` for one that did not succeed, as
    /// does a job that is not a workflow step or a name the workflow does
    /// not have; `Error::WrongJobType` if the step is not a `J`.
    pub async fn dep<J: Job>(&self, name: &str) -> Result<J::Output> {
        let mut outputs = self.deps::<J, _>([name]).await?;
        outputs
            .pop()
            .ok_or_else(|| none(name, "the workflow has no step of this name"))
    }

    /// The outputs of steps `names` of this job's workflow, all jobs of
    /// type `J`, in their order: [`dep`](Self::dep) for each, read at once
    /// (a fan-in over many steps reads them in one go, not one by one).
    /// The first name that has no output answers for the whole.
    pub async fn deps<J: Job, S: AsRef<str>>(
        &self,
        names: impl IntoIterator<Item = S>,
    ) -> Result<Vec<J::Output>> {
        let names: Vec<S> = names.into_iter().collect();
        let Some(step) = &self.delivery.step else {
            return match names.first() {
                Some(name) => Err(none(name.as_ref(), "this job is not a workflow step")),
                None => Ok(Vec::new()),
            };
        };
        if let Some(bad) = names.iter().find(|n| !is_valid_step_name(n.as_ref())) {
            return Err(none(bad.as_ref(), "the workflow has no step of this name"));
        }
        // The steps it declares ended no later than it was created: their
        // records are read as committed, at once. Any other name (or a
        // record not found) is asked the ordinary way.
        let declared = self.declared().await;
        let direct: Vec<String> = names
            .iter()
            .filter(|n| declared.is_some_and(|d| d.contains(n.as_ref())))
            .map(|n| step_run_id(&step.workflow, n.as_ref()))
            .collect();
        let engine = self.delivery.engine.as_ref();
        let mut read = engine.committed_outcomes(direct).await?.into_iter();
        let mut outputs = Vec::with_capacity(names.len());
        for name in &names {
            let name = name.as_ref();
            let found = match declared.is_some_and(|d| d.contains(name)) {
                true => read.next().flatten(),
                false => None,
            };
            let record = match found {
                Some(record) => record,
                None => self.asked(&step.workflow, name).await?,
            };
            outputs.push(output::<J>(self, name, record).await?);
        }
        Ok(outputs)
    }

    /// The steps this step needs, read once per attempt; `None` when its
    /// record cannot be read (every name is then asked the ordinary way).
    async fn declared(&self) -> Option<&HashSet<String>> {
        if let Some(declared) = self.declared.get() {
            return Some(declared);
        }
        let step = self.delivery.step.clone()?;
        let deps = self.delivery.engine.step_deps(step).await.ok()?;
        let _ = self.declared.set(deps.into_iter().collect());
        self.declared.get()
    }

    /// The outcome record of step `name`, asked as `Engine::outcome` does
    /// (answered once its end is durable).
    async fn asked(&self, workflow: &str, name: &str) -> Result<OutcomeRecord> {
        let run_id = step_run_id(workflow, name);
        match self.delivery.engine.outcome(run_id).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(none(name, "it has not ended")),
            Err(crate::Error::JobNotFound(_)) => Err(none(
                name,
                "the workflow has no step of this name, or it has not started",
            )),
            Err(e) => Err(e),
        }
    }
}

/// The output `record` holds, as a `J`'s.
async fn output<J: Job>(ctx: &JobContext, name: &str, record: OutcomeRecord) -> Result<J::Output> {
    match crate::job::handle::decode_outcome::<J>(ctx.delivery.engine.as_ref(), &record).await? {
        Ok(output) => Ok(output),
        Err(e) => Err(none(
            name,
            &match record.reason {
                Some(reason) => format!("{e} ({reason})"),
                None => e.to_string(),
            },
        )),
    }
}
