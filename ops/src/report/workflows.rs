//! The workflow documents: `gaffer workflows`, `gaffer workflow ID`.

use super::*;

/// `gaffer workflows`: `{"workflows": [...], "more": bool, "next": …}`.
#[derive(Debug, Clone, Serialize)]
pub struct Workflows {
    /// Workflows in id order.
    pub workflows: Vec<WorkflowRow>,
    /// Whether more workflows follow this page.
    pub more: bool,
    /// When more follow: the id to list after (`--after`).
    pub next: Option<String>,
}

/// A workflow's summary (a row of `gaffer workflows`, the head of
/// `gaffer workflow ID`).
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowRow {
    /// The workflow's id.
    pub id: String,
    /// Its name (for people: any text).
    pub name: String,
    /// `running` (a step has not ended), `cancelling` (cancelled, a step
    /// has not ended yet), or, once every step ended, `succeeded`,
    /// `failed` (a step failed), `cancelled` (the workflow was cancelled,
    /// or a step was).
    pub state: &'static str,
    /// When it was submitted.
    pub created_at_ms: u64,
    /// Whether every step ended.
    pub ended: bool,
    /// When its last step ended (cleared by a retry).
    pub ended_at_ms: Option<u64>,
    /// Whether it was cancelled (and not retried since).
    pub cancelled: bool,
    /// How many steps it has.
    pub steps: usize,
    /// Its steps by state.
    pub counts: StepCounts,
}

/// A workflow's steps counted by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StepCounts {
    /// Waiting for the steps they need (no job yet).
    pub blocked: u32,
    /// Their job waits for its time (a retry's backoff).
    pub scheduled: u32,
    /// Their job waits for a signal.
    pub waiting: u32,
    /// Their job waits to be claimed.
    pub queued: u32,
    /// Their job runs.
    pub running: u32,
    /// Succeeded.
    pub succeeded: u32,
    /// Failed.
    pub failed: u32,
    /// Cancelled (by an operator, by the workflow's cancel, or because a
    /// step they need failed).
    pub cancelled: u32,
}

impl StepCounts {
    /// Steps whose job exists and has not ended (scheduled, waiting,
    /// queued, running).
    pub fn active(&self) -> u32 {
        self.scheduled + self.waiting + self.queued + self.running
    }

    /// Steps that ended.
    pub fn ended(&self) -> u32 {
        self.succeeded + self.failed + self.cancelled
    }
}

/// `gaffer workflow ID`: `{"workflow": {...}, "steps": [...]}`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowDetail {
    /// The workflow.
    pub workflow: WorkflowRow,
    /// Its steps, every step after the steps it needs.
    pub steps: Vec<StepRow>,
}

/// One step of a workflow.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// Its name in the workflow.
    pub name: String,
    /// `blocked` (it waits for the steps it needs: no job yet), or its
    /// job's: `scheduled`, `waiting`, `queued`, `running`, `succeeded`,
    /// `failed`, `cancelled`.
    pub state: &'static str,
    /// Its job type.
    pub job_type: String,
    /// Its job's id (`gaffer job ID`), fixed at submit.
    pub job: String,
    /// The steps it needs, by name.
    pub deps: Vec<String>,
    /// A cleanup step: it runs once the steps it needs ended, whichever way.
    pub regardless: bool,
}
