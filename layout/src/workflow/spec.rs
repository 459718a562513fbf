//! A workflow as submitted: its steps, each a job and the steps it needs,
//! and what the submission came to.

use crate::request::SubmitRequest;

/// Most steps in one workflow.
pub const MAX_STEPS: usize = 100_000;

/// One step as submitted: its name, its job, the steps it needs.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// Its name in the workflow: 1-128 characters of `[A-Za-z0-9_.-]`.
    pub name: String,
    /// Its job (type, payload, headers, priority, attempt limit; the key,
    /// run id and `run_at` are not used).
    pub job: SubmitRequest,
    /// The steps it needs.
    pub deps: Vec<String>,
    /// Run once every step it needs ended, whichever way.
    pub regardless: bool,
}

/// A workflow as submitted.
#[derive(Debug, Clone, Default)]
pub struct WorkflowSpec {
    /// A name for people.
    pub name: String,
    /// Its id, if given (1-128 characters of `[A-Za-z0-9_-]`).
    pub id: Option<String>,
    /// A key its id is derived from: a second submission with the key is
    /// the same workflow.
    pub key: Option<String>,
    /// Its steps.
    pub steps: Vec<StepSpec>,
}

/// What a submission came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowSubmitted {
    /// The workflow's id.
    pub id: String,
    /// False when the workflow existed (same id, same steps).
    pub newly_submitted: bool,
}
