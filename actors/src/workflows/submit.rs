//! A workflow's submission (one transaction: every step or none), its
//! status, and the changes of the whole: cancel and retry.

use std::collections::{HashMap, HashSet};

use sha2::{Digest, Sha256};
use taquba::SettlementEffects;

use crate::error::{EngineError, Result};
use crate::layout::keys;
use crate::layout::records::{self, OutcomeRecord};
use crate::services::Services;
use crate::workflows::gates::{Exclusive, GateMessage};
use crate::workflows::graph::Node;
use crate::workflows::layout::{
    HeldJob, StepEnd, StepKey, StepRecord, WorkflowRecord, is_valid_step_name, keyed_workflow_id,
    step_run_id, workflow_key,
};
use crate::workflows::settle;

pub(crate) use crate::layout::workflow::spec::{MAX_STEPS, WorkflowSpec, WorkflowSubmitted};
pub(crate) use crate::layout::workflow::status::{WorkflowStatus, list, status, topological};

fn invalid(why: impl Into<String>) -> EngineError {
    EngineError::InvalidWorkflow(why.into())
}

/// The id of `spec`: given, derived from its key, or new.
fn workflow_id(spec: &WorkflowSpec, fresh: impl FnOnce() -> String) -> Result<String> {
    match (&spec.id, &spec.key) {
        (Some(id), _) if keys::is_valid_id(id) => Ok(id.clone()),
        (Some(id), _) => Err(invalid(format!(
            "id `{id}` is not 1-128 characters of [A-Za-z0-9_-]"
        ))),
        (None, Some(key)) => Ok(keyed_workflow_id(key)),
        (None, None) => Ok(fresh()),
    }
}

/// Check `spec` and build its records: each step's, with its dependents,
/// its job, and the workflow's input hash.
#[allow(clippy::type_complexity)]
fn records_of(
    services: &Services,
    spec: &WorkflowSpec,
) -> Result<(
    HashMap<String, StepRecord>,
    HashMap<String, HeldJob>,
    Vec<u8>,
)> {
    if spec.steps.is_empty() {
        return Err(invalid("it has no steps"));
    }
    if spec.steps.len() > MAX_STEPS {
        return Err(invalid(format!(
            "it has {} steps; at most {MAX_STEPS}",
            spec.steps.len()
        )));
    }
    let mut graph: HashMap<String, StepRecord> = HashMap::with_capacity(spec.steps.len());
    let mut jobs = HashMap::with_capacity(spec.steps.len());
    for step in &spec.steps {
        if !is_valid_step_name(&step.name) {
            return Err(invalid(format!(
                "step name `{}` is not 1-128 characters of [A-Za-z0-9_.-]",
                step.name
            )));
        }
        services.job_queue(&step.job.job_type)?;
        if let Some(h) = step
            .job
            .headers
            .keys()
            .find(|h| h.starts_with(keys::RESERVED_HEADER_PREFIX))
        {
            return Err(EngineError::ReservedHeader(h.clone()));
        }
        let mut seen = HashSet::new();
        for dep in &step.deps {
            if dep == &step.name {
                return Err(invalid(format!("step `{}` needs itself", step.name)));
            }
            if !seen.insert(dep) {
                return Err(invalid(format!("step `{}` names `{dep}` twice", step.name)));
            }
        }
        let record = StepRecord {
            job_type: step.job.job_type.clone(),
            deps: step.deps.clone(),
            dependents: Vec::new(),
            regardless: step.regardless,
        };
        if graph.insert(step.name.clone(), record).is_some() {
            return Err(invalid(format!("step `{}` is named twice", step.name)));
        }
        let job = HeldJob {
            payload: step.job.payload.clone(),
            headers: step.job.headers.clone(),
            priority: step.job.priority,
            max_attempts: step.job.max_attempts,
            timeout_ms: step.job.timeout.map(crate::workflows::wire::millis),
            tags: crate::layout::tags::checked(&step.job.tags)?,
        };
        jobs.insert(step.name.clone(), job);
    }
    for step in &spec.steps {
        for dep in &step.deps {
            match graph.get_mut(dep) {
                Some(d) => d.dependents.push(step.name.clone()),
                None => {
                    return Err(invalid(format!(
                        "step `{}` needs `{dep}`, which the workflow does not have",
                        step.name
                    )));
                }
            }
        }
    }
    let order = topological(&graph)?;
    let mut hash = Sha256::new();
    hash.update(spec.name.as_bytes());
    for name in &order {
        let (g, j) = (&graph[name], &jobs[name]);
        hash.update(records::encode(&(
            name,
            &g.job_type,
            &g.deps,
            g.regardless,
        ))?);
        hash.update(keys::input_hash(&g.job_type, &j.payload));
    }
    Ok((graph, jobs, hash.finalize().to_vec()))
}

impl Services {
    /// Submit a workflow: its record, every step's record and job, and the
    /// jobs of the steps that need none, in one transaction that commits
    /// only if no workflow has its id. A second submission of the same
    /// workflow (same id, same steps and jobs) answers with it;
    /// `WorkflowMismatch` if the id holds another.
    pub async fn submit_workflow(&self, spec: WorkflowSpec) -> Result<WorkflowSubmitted> {
        let queue = self.queue()?;
        let id = workflow_id(&spec, || queue.next_job_id())?;
        let (graph, jobs, input_hash) = records_of(self, &spec)?;
        let record = WorkflowRecord {
            name: spec.name.clone(),
            created_at_ms: self.clock().now_ms(),
            steps: u32::try_from(graph.len()).unwrap_or(u32::MAX),
            input_hash,
            cancelled: false,
            ended_at_ms: None,
        };
        let mut fx =
            SettlementEffects::default().kv_put(workflow_key(&id), records::encode(&record)?);
        for step in &spec.steps {
            let (g, job) = (&graph[&step.name], &jobs[&step.name]);
            let held = records::encode(&job.sealed(self.keyring())?)?;
            let value = records::encode(g)?;
            for (what, bytes) in [("job", &held), ("record", &value)] {
                if bytes.len() > taquba::MAX_KV_VALUE_SIZE {
                    return Err(invalid(format!(
                        "step `{}`'s {what} is {} bytes; a step's job and record are kept in \
                         the store's KV, at most {} bytes each",
                        step.name,
                        bytes.len(),
                        taquba::MAX_KV_VALUE_SIZE
                    )));
                }
            }
            fx = fx
                .kv_put(StepKey::Graph.of(&id, &step.name), value)
                .kv_put(StepKey::Held.of(&id, &step.name), held);
            if g.deps.is_empty() {
                fx = settle::release(self, fx, &id, &step.name, g.clone(), job.clone())?;
            }
        }
        let key = workflow_key(&id);
        let compares: [(&[u8], Option<&[u8]>); 1] = [(&key, None)];
        if queue.kv_compare_commit(&compares, fx).await?.is_some() {
            return Ok(WorkflowSubmitted {
                id,
                newly_submitted: true,
            });
        }
        let found = match queue.view().kv_get(&key).await? {
            Some(bytes) => records::decode::<WorkflowRecord>(&key, &bytes)?,
            None => {
                return Err(EngineError::Contended {
                    operation: format!("the submission of workflow `{id}`"),
                });
            }
        };
        if found.input_hash == record.input_hash {
            Ok(WorkflowSubmitted {
                id,
                newly_submitted: false,
            })
        } else {
            Err(EngineError::WorkflowMismatch(id))
        }
    }

    /// Cancel workflow `id`: no step is released from now on; every step
    /// still waiting for others is cancelled (in one transaction); every
    /// step whose job exists and has not ended is cancelled as a job is
    /// (a running one is asked to stop). Answers how many steps it
    /// cancelled or asked to stop.
    pub async fn cancel_workflow(&self, id: &str) -> Result<usize> {
        let Exclusive { flow, guard } = self.exclusive(id).await?;
        let mut fx = SettlementEffects::default();
        let mut record = flow.record.clone();
        record.cancelled = true;
        fx = fx.kv_put(workflow_key(id), records::encode(&record)?);
        let mut running = Vec::new();
        let mut count = 0;
        for (name, step) in &flow.steps {
            match step.node {
                Node::Held => {
                    let (rec, job) = settle::read_step(self, id, name).await?;
                    fx = settle::cancel_held(
                        self,
                        fx,
                        id,
                        name,
                        &rec,
                        &job,
                        "the workflow was cancelled",
                    )?;
                    count += 1;
                }
                Node::Released => running.push(step_run_id(id, name)),
                Node::Ended(_) => {}
            }
        }
        if running.is_empty() {
            // Nothing left to end: the workflow ends with this commit.
            fx = settle::completed(self, fx, id, record)?;
        }
        self.queue()?.commit_effects(fx).await?;
        guard.committed();
        for run_id in running {
            match self.cancel(&run_id).await {
                Ok(_) => count += 1,
                Err(e) => {
                    tracing::warn!(%run_id, error = %e, "cancelling a step of the workflow failed")
                }
            }
        }
        Ok(count)
    }

    /// Run workflow `id`'s failed and cancelled steps again and resume the
    /// graph from them: in one transaction, each such step is set back to
    /// waiting (its outcome removed), and each step whose dependencies all
    /// succeeded is released; the rest follow as their dependencies
    /// succeed. Clears the workflow's cancel. Answers how many steps were
    /// set back.
    pub async fn retry_workflow(&self, id: &str) -> Result<usize> {
        let Exclusive { mut flow, guard } = self.exclusive(id).await?;
        let queue = self.queue()?;
        let mut fx = SettlementEffects::default();
        let mut reset = 0;
        let names: Vec<String> = flow.steps.keys().cloned().collect();
        for name in &rerun(&flow) {
            let run_id = step_run_id(id, name);
            let okey = keys::outcome_key(&run_id);
            if let Some(bytes) = queue.view().kv_get(&okey).await? {
                let rec: OutcomeRecord = records::decode(&okey, &bytes)?;
                fx = fx.kv_delete(rec.ended_key(&run_id));
                // Its release writes its tags' entries again, at its new time.
                for key in rec.tags.iter().flat_map(|t| t.keys(&run_id)) {
                    fx = fx.kv_delete(key);
                }
            }
            fx = fx
                .kv_delete(okey)
                .kv_delete(StepKey::Ended.of(id, name))
                .kv_delete(StepKey::Released.of(id, name));
            if let Some(s) = flow.steps.get_mut(name) {
                s.node = Node::Held;
            }
            reset += 1;
        }
        flow.record.cancelled = false;
        if reset > 0 {
            flow.record.ended_at_ms = None;
        }
        fx = fx.kv_put(workflow_key(id), records::encode(&flow.record)?);
        for name in &names {
            let step = &flow.steps[name];
            if step.node != Node::Held {
                continue;
            }
            let ready = step.record.deps.iter().all(|d| {
                matches!(
                    flow.steps.get(d).map(|s| s.node),
                    Some(Node::Ended(StepEnd::Succeeded))
                )
            });
            if ready {
                let (rec, mut job) = settle::read_step(self, id, name).await?;
                // Memo entries of its earlier attempts are found again.
                job.headers.insert(keys::HEADER_MEMO.into(), String::new());
                // Released again: its marker is rewritten, not removed.
                let released = StepKey::Released.of(id, name);
                fx.kv_deletes.retain(|k| *k != released);
                fx = settle::release(self, fx, id, name, rec, job)?;
            }
        }
        queue.commit_effects(fx).await?;
        guard.committed();
        Ok(reset)
    }

    /// Workflow `id` and each step's state.
    pub async fn workflow_status(&self, id: &str) -> Result<WorkflowStatus> {
        status(self.queue()?.view(), id).await
    }

    /// Workflow `id`'s steps, dependencies first, without their jobs'
    /// states (what a join waits for).
    pub async fn workflow_steps(&self, id: &str) -> Result<Vec<crate::workflows::StepStatus>> {
        crate::layout::workflow::status::steps(self.queue()?.view(), id).await
    }

    /// Up to `limit` workflows after the id `after`, in id order.
    pub async fn workflows(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, WorkflowRecord)>> {
        list(self.queue()?.view(), after, limit).await
    }

    /// The workflow alone (see `gates`).
    async fn exclusive(&self, id: &str) -> Result<Exclusive> {
        if !keys::is_valid_id(id) {
            return Err(EngineError::WorkflowNotFound(id.to_string()));
        }
        let gates = self.gates()?;
        let (tx, rx) = ractor::concurrency::oneshot();
        gates
            .send_message(GateMessage::Exclusive {
                workflow: id.to_string(),
                reply: tx.into(),
            })
            .map_err(|_| EngineError::ShutDown)?;
        rx.await.map_err(|_| EngineError::ShutDown)?
    }
}

/// The steps a retry sets back: every step that failed or was cancelled,
/// and every ended step that needs one of those, however indirectly (a
/// cleanup step that ran after a failure runs again once the retried steps
/// end, and so sees the final outcome; so does whatever needs it).
fn rerun(flow: &crate::workflows::graph::Flow) -> Vec<String> {
    let mut set: std::collections::BTreeSet<&String> = flow
        .steps
        .iter()
        .filter(|(_, s)| matches!(s.node, Node::Ended(end) if end != StepEnd::Succeeded))
        .map(|(name, _)| name)
        .collect();
    loop {
        let more: Vec<&String> = flow
            .steps
            .iter()
            .filter(|(name, s)| {
                !set.contains(name)
                    && matches!(s.node, Node::Ended(_))
                    && s.record.deps.iter().any(|d| set.contains(d))
            })
            .map(|(name, _)| name)
            .collect();
        if more.is_empty() {
            return set.into_iter().cloned().collect();
        }
        set.extend(more);
    }
}
