//! Workflows: the listing of workflows with their steps counted by state
//! (`gaffer workflows`), and one workflow's graph with each step's state
//! (`gaffer workflow ID`), read through the engine's own status read.

use gaffer_layout::EngineError;
use gaffer_layout::keys;
use gaffer_layout::records::JobState;
use gaffer_layout::workflow::status;
use gaffer_layout::workflow::status::WorkflowStatus;

use crate::error::OpsError;
use crate::report::{StepCounts, StepRow, WorkflowDetail, WorkflowRow, Workflows};
use crate::store::Store;

/// Most workflows one page of the listing reads.
pub const MAX_PAGE: usize = 1000;

impl Store {
    /// `gaffer workflows`: up to `limit` workflows (1 to 1000) in id order,
    /// after the id `after`, each with its steps counted by state. Reads
    /// each listed workflow's graph (its cost grows with their steps).
    pub async fn workflows(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Workflows, OpsError> {
        if let Some(a) = after
            && !keys::is_valid_id(a)
        {
            return Err(OpsError::BadInput(format!(
                "`{a}` is not a workflow id: pass the `next` a previous page printed"
            )));
        }
        let limit = limit.clamp(1, MAX_PAGE);
        let mut listed = status::list(self.view(), after, limit + 1).await?;
        let more = listed.len() > limit;
        listed.truncate(limit);
        let next = if more {
            listed.last().map(|(id, _)| id.clone())
        } else {
            None
        };
        let mut workflows = Vec::with_capacity(listed.len());
        for (id, _) in listed {
            match status::status(self.view(), &id).await {
                Ok(status) => workflows.push(row(&status)),
                // Removed (its retention) between the two reads.
                Err(EngineError::WorkflowNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Workflows {
            workflows,
            more,
            next,
        })
    }

    /// `gaffer workflow ID`: the workflow and each of its steps, the
    /// steps it needs before the steps that need them.
    pub async fn workflow(&self, id: &str) -> Result<WorkflowDetail, OpsError> {
        let status = match status::status(self.view(), id).await {
            Ok(s) => s,
            Err(EngineError::WorkflowNotFound(_)) => {
                return Err(OpsError::WorkflowNotFound(id.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        let steps = status
            .steps
            .iter()
            .map(|s| StepRow {
                name: s.name.clone(),
                state: step_state(s.state),
                job_type: s.job_type.clone(),
                job: s.run_id.clone(),
                deps: s.deps.clone(),
                regardless: s.regardless,
            })
            .collect();
        Ok(WorkflowDetail {
            workflow: row(&status),
            steps,
        })
    }
}

/// A step's state in words: its job's (`scheduled`, `waiting`, `queued`,
/// `running`, `succeeded`, `failed`, `cancelled`), or `blocked` while it
/// waits for the steps it needs (its job is not created yet).
pub fn step_state(state: Option<JobState>) -> &'static str {
    match state {
        None => "blocked",
        Some(JobState::Scheduled) => "scheduled",
        Some(JobState::Waiting) => "waiting",
        Some(JobState::Queued) => "queued",
        Some(JobState::Running) => "running",
        Some(JobState::Succeeded) => "succeeded",
        Some(JobState::Failed) => "failed",
        Some(JobState::Cancelled) => "cancelled",
    }
}

/// The steps of `status` counted by state.
fn counts(status: &WorkflowStatus) -> StepCounts {
    let mut c = StepCounts::default();
    for s in &status.steps {
        let n = match s.state {
            None => &mut c.blocked,
            Some(JobState::Scheduled) => &mut c.scheduled,
            Some(JobState::Waiting) => &mut c.waiting,
            Some(JobState::Queued) => &mut c.queued,
            Some(JobState::Running) => &mut c.running,
            Some(JobState::Succeeded) => &mut c.succeeded,
            Some(JobState::Failed) => &mut c.failed,
            Some(JobState::Cancelled) => &mut c.cancelled,
        };
        *n += 1;
    }
    c
}

/// The workflow's state in words (see [`WorkflowRow::state`]).
fn workflow_state(ended: bool, cancelled: bool, c: &StepCounts) -> &'static str {
    match (ended, cancelled) {
        (false, true) => "cancelling",
        (false, false) => "running",
        (true, true) => "cancelled",
        (true, false) if c.failed > 0 => "failed",
        (true, false) if c.cancelled > 0 => "cancelled",
        (true, false) => "succeeded",
    }
}

/// The summary of a workflow.
fn row(status: &WorkflowStatus) -> WorkflowRow {
    let c = counts(status);
    let ended = status.ended();
    WorkflowRow {
        id: status.id.clone(),
        name: status.record.name.clone(),
        state: workflow_state(ended, status.record.cancelled, &c),
        created_at_ms: status.record.created_at_ms,
        ended,
        ended_at_ms: status.record.ended_at_ms,
        cancelled: status.record.cancelled,
        steps: status.steps.len(),
        counts: c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_state_follows_its_steps_and_its_cancel() {
        let failed = StepCounts {
            failed: 1,
            cancelled: 1,
            succeeded: 2,
            ..StepCounts::default()
        };
        let cancelled = StepCounts {
            cancelled: 1,
            succeeded: 1,
            ..StepCounts::default()
        };
        let ok = StepCounts {
            succeeded: 3,
            ..StepCounts::default()
        };
        assert_eq!(workflow_state(true, false, &failed), "failed");
        assert_eq!(workflow_state(true, false, &cancelled), "cancelled");
        assert_eq!(workflow_state(true, false, &ok), "succeeded");
        assert_eq!(workflow_state(true, true, &failed), "cancelled");
        assert_eq!(workflow_state(false, false, &failed), "running");
        assert_eq!(workflow_state(false, true, &ok), "cancelling");
        assert_eq!(step_state(None), "blocked");
        assert_eq!(step_state(Some(JobState::Queued)), "queued");
    }
}
