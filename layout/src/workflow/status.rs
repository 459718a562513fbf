//! A workflow as read back: each step's state, dependencies first, and the
//! list of a store's workflows.

use std::collections::{HashMap, VecDeque};

use futures_util::TryStreamExt;
use taquba::{KvOrder, QueueView};

use crate::error::{EngineError, Result};
use crate::keys;
use crate::records::{self, JobState};
use crate::workflow::graph::{Flow, Node};
use crate::workflow::{
    StepEnd, StepRecord, WORKFLOWS_PREFIX, WorkflowRecord, step_run_id, workflow_key,
};

/// A step, as the workflow's status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepStatus {
    /// Its name.
    pub name: String,
    /// Its job type.
    pub job_type: String,
    /// Its job's id.
    pub run_id: String,
    /// The steps it needs.
    pub deps: Vec<String>,
    /// Whether it runs whichever way they end.
    pub regardless: bool,
    /// Where its job is; `None` while it waits for the steps it needs
    /// (its job is not created yet).
    pub state: Option<JobState>,
}

/// A workflow and each step's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowStatus {
    /// Its id.
    pub id: String,
    /// Its record.
    pub record: WorkflowRecord,
    /// Its steps, dependencies before the steps that need them.
    pub steps: Vec<StepStatus>,
}

impl WorkflowStatus {
    /// Whether every step ended.
    pub fn ended(&self) -> bool {
        self.steps
            .iter()
            .all(|s| s.state.is_some_and(JobState::is_terminal))
    }
}

/// The names of `steps` with every step after the steps it needs
/// (`InvalidWorkflow` on a cycle). The records may come from a store in
/// any form: a dependent a step does not count among its needs (named
/// twice, or by a step it does not need) is not counted below zero.
pub fn topological(steps: &HashMap<String, StepRecord>) -> Result<Vec<String>> {
    let mut needs: HashMap<&str, usize> = steps
        .iter()
        .map(|(n, s)| (n.as_str(), s.deps.len()))
        .collect();
    let mut names: Vec<&str> = needs
        .iter()
        .filter(|(_, n)| **n == 0)
        .map(|(k, _)| *k)
        .collect();
    names.sort_unstable();
    let mut ready: VecDeque<&str> = names.into();
    let mut order = Vec::with_capacity(steps.len());
    while let Some(name) = ready.pop_front() {
        order.push(name.to_string());
        for next in &steps[name].dependents {
            if let Some(n) = needs.get_mut(next.as_str())
                && *n > 0
            {
                *n -= 1;
                if *n == 0 {
                    ready.push_back(next);
                }
            }
        }
    }
    if order.len() != steps.len() {
        let mut stuck: Vec<&str> = needs
            .iter()
            .filter(|(n, _)| !order.iter().any(|o| o == *n))
            .map(|(n, _)| *n)
            .collect();
        stuck.sort_unstable();
        stuck.truncate(5);
        return Err(EngineError::InvalidWorkflow(format!(
            "its steps form a cycle (among: {})",
            stuck.join(", ")
        )));
    }
    Ok(order)
}

/// Workflow `id` and each step's state, as `view` reads them.
pub async fn status(view: &QueueView, id: &str) -> Result<WorkflowStatus> {
    if !keys::is_valid_id(id) {
        return Err(EngineError::WorkflowNotFound(id.to_string()));
    }
    let flow = Flow::load(view, id).await?;
    let graph: HashMap<String, StepRecord> = flow
        .steps
        .iter()
        .map(|(n, s)| (n.clone(), s.record.clone()))
        .collect();
    let mut steps = Vec::with_capacity(graph.len());
    for name in topological(&graph)? {
        let step = &flow.steps[&name];
        let run_id = step_run_id(id, &name);
        let state = match step.node {
            Node::Held => None,
            Node::Ended(StepEnd::Succeeded) => Some(JobState::Succeeded),
            Node::Ended(StepEnd::Failed) => Some(JobState::Failed),
            Node::Ended(StepEnd::Cancelled) => Some(JobState::Cancelled),
            Node::Released => crate::inspect::job_state(view, &run_id).await?,
        };
        steps.push(StepStatus {
            name,
            job_type: step.record.job_type.clone(),
            run_id,
            deps: step.record.deps.clone(),
            regardless: step.record.regardless,
            state,
        });
    }
    Ok(WorkflowStatus {
        id: id.to_string(),
        record: flow.record,
        steps,
    })
}

/// Workflow `id`'s steps, dependencies first, without where their jobs
/// are (`state` is `None`): its record and its steps' records alone, one
/// scan (what a join needs to wait for each step in order).
pub async fn steps(view: &QueueView, id: &str) -> Result<Vec<StepStatus>> {
    if !keys::is_valid_id(id)
        || crate::workflow::graph::read_record(view, id)
            .await?
            .is_none()
    {
        return Err(EngineError::WorkflowNotFound(id.to_string()));
    }
    let prefix = crate::workflow::StepKey::Graph.of(id, "");
    let entries = view.kv_entries(&prefix, .., KvOrder::Ascending, 1000);
    let mut entries = std::pin::pin!(entries);
    let mut graph: HashMap<String, StepRecord> = HashMap::new();
    while let Some((key, value)) = entries.try_next().await? {
        if let Some((crate::workflow::StepKey::Graph, name)) =
            crate::workflow::StepKey::parse(id, &key)
        {
            graph.insert(name.to_string(), records::decode(&key, &value)?);
        }
    }
    let mut steps = Vec::with_capacity(graph.len());
    for name in topological(&graph)? {
        let Some(step) = graph.remove(&name) else {
            continue;
        };
        steps.push(StepStatus {
            run_id: step_run_id(id, &name),
            name,
            job_type: step.job_type,
            deps: step.deps,
            regardless: step.regardless,
            state: None,
        });
    }
    Ok(steps)
}

/// Up to `limit` workflows after the id `after` (in id order).
pub async fn list(
    view: &QueueView,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, WorkflowRecord)>> {
    let start = match after {
        Some(after) => {
            let mut k = workflow_key(after);
            k.push(0);
            k
        }
        None => WORKFLOWS_PREFIX.to_vec(),
    };
    let entries = view.kv_entries(
        WORKFLOWS_PREFIX,
        start..,
        KvOrder::Ascending,
        limit.min(1000),
    );
    let mut entries = std::pin::pin!(entries);
    let mut out = Vec::new();
    while out.len() < limit
        && let Some((key, value)) = entries.try_next().await?
    {
        let id = String::from_utf8_lossy(&key[WORKFLOWS_PREFIX.len()..]).into_owned();
        out.push((id, records::decode(&key, &value)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(deps: &[&str], dependents: &[&str]) -> StepRecord {
        StepRecord {
            job_type: "t".into(),
            deps: deps.iter().map(|s| s.to_string()).collect(),
            dependents: dependents.iter().map(|s| s.to_string()).collect(),
            regardless: false,
        }
    }

    /// Found by `tests/hostile_bytes.rs`: step records whose dependents
    /// do not match the needs of the steps they name (as a store written
    /// by other hands may hold them) counted a need below zero: in a debug
    /// build, a panic in a workflow's status (`WorkflowHandle::status`,
    /// `ClientWorkflow`, `gaffer workflow`, the dashboard's page).
    #[test]
    fn dependents_a_step_does_not_need_are_not_counted_below_zero() {
        let alone = HashMap::from([("c".to_string(), step(&[], &["c"]))]);
        assert_eq!(topological(&alone).unwrap(), vec!["c".to_string()]);
        let twice = HashMap::from([
            ("a".to_string(), step(&[], &["b", "b"])),
            ("b".to_string(), step(&["a"], &[])),
        ]);
        assert_eq!(topological(&twice).unwrap(), vec!["a", "b"]);
        let cycle = HashMap::from([
            ("a".to_string(), step(&["b"], &["b"])),
            ("b".to_string(), step(&["a"], &["a"])),
        ]);
        assert!(matches!(
            topological(&cycle),
            Err(EngineError::InvalidWorkflow(_))
        ));
    }
}
