//! A workflow as a client in another process sends it through the store's
//! inbox ([`IntakeOp::SubmitWorkflow`](crate::intake::IntakeOp)):
//! every step's job already encoded, the workflow's id always given (the
//! client's, derived from its key, or a fresh ULID the client made), so a
//! request the intake applies twice (a crash between the commit and the
//! intake's ack) meets its own workflow and is answered as it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::request::SubmitRequest;
use crate::workflow::spec::{StepSpec, WorkflowSpec};

/// A workflow to submit, as the inbox carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntakeWorkflow {
    /// Its id (always set by the client).
    pub id: String,
    /// A name for people.
    pub name: String,
    /// Its steps.
    pub steps: Vec<IntakeStep>,
}

/// One step of an [`IntakeWorkflow`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntakeStep {
    /// Its name in the workflow.
    pub name: String,
    /// Its job's type.
    pub job_type: String,
    /// Its encoded job.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// Headers (none under `gaffer.`).
    #[serde(default)]
    pub headers: HashMap<String, String>,
    /// Priority.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Attempt limit.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Each attempt's timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The steps it needs.
    #[serde(default)]
    pub deps: Vec<String>,
    /// Run once every step it needs ended, whichever way.
    #[serde(default)]
    pub regardless: bool,
    /// Its job's tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl IntakeWorkflow {
    /// `spec` to send as workflow `id` (the id the client settled on).
    pub fn of(spec: WorkflowSpec, id: String) -> Self {
        let steps = spec
            .steps
            .into_iter()
            .map(|s| IntakeStep {
                name: s.name,
                job_type: s.job.job_type,
                payload: s.job.payload,
                headers: s.job.headers,
                priority: s.job.priority,
                max_attempts: s.job.max_attempts,
                timeout_ms: s.job.timeout.map(millis),
                deps: s.deps,
                regardless: s.regardless,
                tags: s.job.tags,
            })
            .collect();
        Self {
            id,
            name: spec.name,
            steps,
        }
    }

    /// The submission it asks for.
    pub fn into_spec(self) -> WorkflowSpec {
        let steps = self
            .steps
            .into_iter()
            .map(|s| StepSpec {
                name: s.name,
                job: SubmitRequest {
                    job_type: s.job_type,
                    payload: s.payload,
                    headers: s.headers,
                    priority: s.priority,
                    max_attempts: s.max_attempts,
                    timeout: s.timeout_ms.map(std::time::Duration::from_millis),
                    tags: s.tags,
                    ..Default::default()
                },
                deps: s.deps,
                regardless: s.regardless,
            })
            .collect();
        WorkflowSpec {
            name: self.name,
            id: Some(self.id),
            key: None,
            steps,
        }
    }
}

/// A duration in whole milliseconds (saturating).
pub fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_comes_out_of_the_inbox_as_it_went_in() {
        let spec = WorkflowSpec {
            name: "w".into(),
            id: None,
            key: Some("k".into()),
            steps: vec![StepSpec {
                name: "a".into(),
                job: SubmitRequest {
                    job_type: "t".into(),
                    payload: vec![1, 2, 3],
                    headers: HashMap::from([("h".to_string(), "v".to_string())]),
                    priority: Some(3),
                    max_attempts: Some(2),
                    ..Default::default()
                },
                deps: vec!["b".into()],
                regardless: true,
            }],
        };
        let wire = IntakeWorkflow::of(spec.clone(), "wf-1".into());
        let bytes = crate::records::encode(&wire).unwrap();
        let back: IntakeWorkflow = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, wire);
        let out = back.into_spec();
        assert_eq!(out.id.as_deref(), Some("wf-1"));
        assert_eq!(out.key, None, "the id stands for the key");
        let (a, b) = (&out.steps[0], &spec.steps[0]);
        assert_eq!(
            (&a.name, &a.deps, a.regardless),
            (&b.name, &b.deps, b.regardless)
        );
        assert_eq!(
            (
                &a.job.job_type,
                &a.job.payload,
                &a.job.headers,
                a.job.priority,
                a.job.max_attempts
            ),
            (
                &b.job.job_type,
                &b.job.payload,
                &b.job.headers,
                b.job.priority,
                b.job.max_attempts
            )
        );
    }
}
