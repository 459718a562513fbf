//! The durable layout of workflows: their keys and records (see
//! ARCHITECTURE.md, *Workflows*). Everything lives under
//! `gaffer/v1/workflows/{id}` (the workflow's record) and
//! `gaffer/v1/wf/{id}/…` (one record per step and the markers of its
//! life), so one prefix scan reads a workflow's graph and state.

pub mod graph;
pub mod spec;
pub mod status;
pub mod wire;

use serde::{Deserialize, Serialize};

use crate::keys::hex_sha256;

/// Header on a workflow step's queue job: its workflow's id.
pub const HEADER_WORKFLOW: &str = "gaffer.workflow";
/// Header on a workflow step's queue job: its step's name.
pub const HEADER_STEP: &str = "gaffer.step";

/// Prefix of the workflows' retention index (a taquba `ExpiryIndex`,
/// suffix = workflow id, time = [`WorkflowRecord::ended_at_ms`]).
pub const WORKFLOWS_EXPIRY_PREFIX: &[u8] = b"gaffer/v1/expiry/workflows/";

/// Prefix of the workflows' records ([`workflow_key`]).
pub const WORKFLOWS_PREFIX: &[u8] = b"gaffer/v1/workflows/";

/// `gaffer/v1/workflows/{id}`: the workflow's record ([`WorkflowRecord`]).
pub fn workflow_key(id: &str) -> Vec<u8> {
    format!("gaffer/v1/workflows/{id}").into_bytes()
}

/// `gaffer/v1/wf/{id}/`: every step record and marker of the workflow.
pub fn workflow_dir(id: &str) -> Vec<u8> {
    format!("gaffer/v1/wf/{id}/").into_bytes()
}

/// What a key under [`workflow_dir`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKey {
    /// `g/{step}`: the step's record ([`StepRecord`]), written at submit.
    Graph,
    /// `h/{step}`: the step's job (its [`HeldJob`]), kept for the
    /// workflow's life: released from it, and retried from it.
    Held,
    /// `r/{step}`: present once the step's job was created (released).
    Released,
    /// `e/{step}`: the step's end (one byte: `s`, `f` or `c`), written in
    /// the transaction that ends it.
    Ended,
}

impl StepKey {
    fn letter(self) -> char {
        match self {
            Self::Graph => 'g',
            Self::Held => 'h',
            Self::Released => 'r',
            Self::Ended => 'e',
        }
    }

    /// The key of `step` of workflow `id`.
    pub fn of(self, id: &str, step: &str) -> Vec<u8> {
        format!("gaffer/v1/wf/{id}/{}/{step}", self.letter()).into_bytes()
    }

    /// Read a key under [`workflow_dir`]`(id)`: what it is and its step.
    pub fn parse<'k>(id: &str, key: &'k [u8]) -> Option<(Self, &'k str)> {
        let rest = key.strip_prefix(workflow_dir(id).as_slice())?;
        let rest = std::str::from_utf8(rest).ok()?;
        let (letter, step) = rest.split_once('/')?;
        let kind = match letter {
            "g" => Self::Graph,
            "h" => Self::Held,
            "r" => Self::Released,
            "e" => Self::Ended,
            _ => return None,
        };
        Some((kind, step))
    }
}

/// The run id of step `step` of workflow `id`: hex SHA-256 of
/// `gaffer.step`, the workflow id and the step name, NUL-separated. Fixed
/// at submit, so a step reads its dependencies' outcomes by their names.
pub fn step_run_id(id: &str, step: &str) -> String {
    hex_sha256(format!("gaffer.step\0{id}\0{step}").as_bytes())
}

/// The id of the workflow submitted with key `key`: hex SHA-256 of
/// `gaffer.workflow` and the key, NUL-separated.
pub fn keyed_workflow_id(key: &str) -> String {
    hex_sha256(format!("gaffer.workflow\0{key}").as_bytes())
}

/// Whether `name` is an acceptable step name: 1-128 characters of
/// `[A-Za-z0-9_.-]`.
pub fn is_valid_step_name(name: &str) -> bool {
    crate::keys::is_valid_periodic_name(name)
}

/// A workflow, as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRecord {
    /// Its name (for people: any text).
    pub name: String,
    /// When it was submitted, epoch ms.
    pub created_at_ms: u64,
    /// How many steps it has.
    pub steps: u32,
    /// SHA-256 of its graph and jobs: a second submission under the same id
    /// is the same workflow only if this is equal.
    #[serde(with = "serde_bytes")]
    pub input_hash: Vec<u8>,
    /// Set by a cancel of the whole workflow, cleared by its retry: while
    /// set, no step is released (each is cancelled instead).
    #[serde(default)]
    pub cancelled: bool,
    /// When its last step ended, epoch ms (written by the transaction that
    /// ended it; cleared by a retry): under the engine's `retention`, the
    /// workflow's records are removed that long after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<u64>,
}

/// One step of a workflow, as submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Its job type.
    pub job_type: String,
    /// The steps it needs, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deps: Vec<String>,
    /// The steps that need it, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependents: Vec<String>,
    /// It runs once every dependency ended, whichever way (a cleanup step);
    /// otherwise it runs only when they all succeeded and is cancelled when
    /// one fails or is cancelled.
    #[serde(default)]
    pub regardless: bool,
}

/// A step's job, kept until the workflow is removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldJob {
    /// The encoded job.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// Its headers (the caller's).
    #[serde(default, skip_serializing_if = "std::collections::HashMap::is_empty")]
    pub headers: std::collections::HashMap<String, String>,
    /// Its priority.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Its attempt limit.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Each attempt's timeout, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Its tags, indexed when its job is created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

impl HeldJob {
    /// The job as stored: its payload sealed under `keyring`.
    pub fn sealed(
        &self,
        keyring: &crate::sealed::Keyring,
    ) -> std::result::Result<Self, crate::sealed::SealError> {
        Ok(Self {
            payload: keyring.seal(&self.payload)?,
            ..self.clone()
        })
    }

    /// The job with its payload opened.
    pub fn opened(
        self,
        keyring: &crate::sealed::Keyring,
    ) -> std::result::Result<Self, crate::sealed::SealError> {
        Ok(Self {
            payload: keyring.open_vec(self.payload)?,
            ..self
        })
    }
}

/// How a step ended, as its marker keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepEnd {
    /// It succeeded.
    Succeeded,
    /// It failed for good.
    Failed,
    /// It was cancelled (by an operator, by its workflow's cancel, or
    /// because a step it needs failed).
    Cancelled,
}

impl StepEnd {
    /// Its marker byte.
    pub fn byte(self) -> u8 {
        match self {
            Self::Succeeded => b's',
            Self::Failed => b'f',
            Self::Cancelled => b'c',
        }
    }

    /// Read a marker.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        match bytes {
            b"s" => Some(Self::Succeeded),
            b"f" => Some(Self::Failed),
            b"c" => Some(Self::Cancelled),
            _ => None,
        }
    }

    /// The end of a run with this outcome.
    pub fn of(outcome: &crate::records::Outcome) -> Self {
        use crate::records::Outcome;
        match outcome {
            Outcome::Succeeded(_) => Self::Succeeded,
            Outcome::Failed { .. } => Self::Failed,
            Outcome::Cancelled => Self::Cancelled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_keys_read_back_and_ids_are_valid_job_ids() {
        for kind in [
            StepKey::Graph,
            StepKey::Held,
            StepKey::Released,
            StepKey::Ended,
        ] {
            let key = kind.of("wf1", "fetch.a");
            assert_eq!(StepKey::parse("wf1", &key), Some((kind, "fetch.a")));
            assert_eq!(StepKey::parse("wf", &key), None);
        }
        let a = step_run_id("wf1", "a");
        assert!(crate::keys::is_valid_id(&a));
        assert_ne!(a, step_run_id("wf1", "b"));
        assert_ne!(a, step_run_id("wf2", "a"));
        assert!(crate::keys::is_valid_id(&keyed_workflow_id("k")));
        for end in [StepEnd::Succeeded, StepEnd::Failed, StepEnd::Cancelled] {
            assert_eq!(StepEnd::from_bytes(&[end.byte()]), Some(end));
        }
    }
}
