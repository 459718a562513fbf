//! A workflow's graph and the state of its steps, as read from the store,
//! and the one decision of the engine about it: what the end of a step
//! does to the steps that need it ([`Flow::plan`]).

use std::collections::{HashMap, HashSet};

use futures_util::TryStreamExt;
use taquba::{KvOrder, QueueView};

use crate::error::{EngineError, Result};
use crate::records;
use crate::workflow::{StepEnd, StepKey, StepRecord, WorkflowRecord, workflow_dir};
use crate::workflow::{step_run_id, workflow_key};

/// Where a step is, as its workflow's records say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// Its job is not created yet: it waits for the steps it needs.
    Held,
    /// Its job was created and has not ended.
    Released,
    /// It ended.
    Ended(StepEnd),
}

/// One step: its record, where it is, and where the steps it needs are.
#[derive(Debug, Clone)]
pub struct Step {
    /// As submitted.
    pub record: StepRecord,
    /// Where it is.
    pub node: Node,
    /// How many of the steps it needs have not ended.
    pub pending: usize,
    /// The first step it needs found failed or cancelled, and which.
    pub failed: Option<(String, StepEnd)>,
}

impl Step {
    /// A step with its dependencies' counts not yet taken ([`Flow::new`]).
    pub fn new(record: StepRecord, node: Node) -> Self {
        Self {
            record,
            node,
            pending: 0,
            failed: None,
        }
    }
}

/// A workflow as its records say: its record and every step.
#[derive(Debug, Clone)]
pub struct Flow {
    /// The workflow's record.
    pub record: WorkflowRecord,
    /// Its steps by name.
    pub steps: HashMap<String, Step>,
    /// How many of them ended.
    pub ended: usize,
}

/// What the end of a step does to a step that needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Create its job now: every step it needs ended as it requires.
    Release,
    /// End it as cancelled, with this reason, without running it.
    Cancel(String),
}

/// Of a step reached by a plan: how many of the steps it needs end in the
/// plan, and the first of them that did not succeed.
type Closing<'a> = (usize, Option<(&'a str, StepEnd)>);

/// The answer of [`Flow::plan`].
#[derive(Debug, PartialEq, Eq)]
pub enum Planned {
    /// These steps are decided with the ending step, in its transaction;
    /// `completes`: with them, every step of the workflow has ended.
    Decided {
        /// The steps decided.
        decided: Vec<(String, Decision)>,
        /// Whether the workflow ends with this transaction.
        completes: bool,
    },
    /// A decision depends on a step whose end is being committed now: ask
    /// again once it is.
    Wait,
}

/// Workflow `id`'s record alone (one read), if the store holds it.
pub async fn read_record(view: &QueueView, id: &str) -> Result<Option<WorkflowRecord>> {
    let key = workflow_key(id);
    match view.kv_get(&key).await? {
        Some(bytes) => Ok(Some(records::decode(&key, &bytes)?)),
        None => Ok(None),
    }
}

impl Flow {
    /// Read workflow `id` from the store; `WorkflowNotFound` without its
    /// record.
    pub async fn load(view: &QueueView, id: &str) -> Result<Self> {
        let Some(record) = read_record(view, id).await? else {
            return Err(EngineError::WorkflowNotFound(id.to_string()));
        };
        let dir = workflow_dir(id);
        let mut graph = HashMap::new();
        let mut released = HashSet::new();
        let mut ended = HashMap::new();
        let entries = view.kv_entries(&dir, .., KvOrder::Ascending, 1000);
        let mut entries = std::pin::pin!(entries);
        while let Some((key, value)) = entries.try_next().await? {
            let Some((kind, step)) = StepKey::parse(id, &key) else {
                continue;
            };
            match kind {
                StepKey::Graph => {
                    let rec: StepRecord = records::decode(&key, &value)?;
                    graph.insert(step.to_string(), rec);
                }
                StepKey::Released => {
                    released.insert(step.to_string());
                }
                StepKey::Ended => {
                    let end =
                        StepEnd::from_bytes(&value).ok_or_else(|| EngineError::CorruptRecord {
                            key: String::from_utf8_lossy(&key).into_owned(),
                            reason: crate::error::cause("not a step's end"),
                        })?;
                    ended.insert(step.to_string(), end);
                }
                StepKey::Held => {}
            }
        }
        let steps: HashMap<String, Step> = graph
            .into_iter()
            .map(|(name, record)| {
                let node = match (ended.get(&name), released.contains(&name)) {
                    (Some(end), _) => Node::Ended(*end),
                    (None, true) => Node::Released,
                    (None, false) => Node::Held,
                };
                (name, Step::new(record, node))
            })
            .collect();
        Ok(Self::new(record, steps))
    }

    /// A workflow of `steps` as they are, its counts taken.
    pub fn new(record: WorkflowRecord, mut steps: HashMap<String, Step>) -> Self {
        let ends: HashMap<String, StepEnd> = steps
            .iter()
            .filter_map(|(n, s)| match s.node {
                Node::Ended(end) => Some((n.clone(), end)),
                _ => None,
            })
            .collect();
        for step in steps.values_mut() {
            step.pending = 0;
            step.failed = None;
            for dep in &step.record.deps {
                match ends.get(dep) {
                    None => step.pending += 1,
                    Some(StepEnd::Succeeded) => {}
                    Some(end) => {
                        step.failed.get_or_insert((dep.clone(), *end));
                    }
                }
            }
        }
        Self {
            record,
            ended: ends.len(),
            steps,
        }
    }

    /// The run id of step `step` of workflow `id`.
    pub fn run_id(id: &str, step: &str) -> String {
        step_run_id(id, step)
    }

    /// Whether every step ended.
    pub fn ended(&self) -> bool {
        self.ended == self.steps.len()
    }

    /// What ending `step` with `end` does to the steps that need it, in the
    /// same transaction, given the steps whose ends are being committed now
    /// (`busy`: their settlements planned and not finished; the steps they
    /// decide are busy too).
    ///
    /// A step that needs it is decided when the end settles its fate: it
    /// is cancelled as soon as a step it needs failed or was cancelled
    /// (unless it runs regardless), which cascades to the steps that need
    /// it; it is released when every step it needs ended (all succeeded,
    /// or any way for a step that runs regardless); while the workflow is
    /// cancelled, a release is a cancel. When that fate depends on a busy
    /// step (the others all ended or busy), the answer is [`Planned::Wait`]:
    /// deciding now could release a step twice or never. So it is when
    /// every step left would have ended once the `ending` steps being
    /// committed elsewhere did: the last of them completes the workflow.
    pub fn plan(
        &self,
        step: &str,
        end: StepEnd,
        busy: &HashMap<String, usize>,
        ending: usize,
    ) -> Planned {
        let mut ends: HashMap<&str, StepEnd> = HashMap::from([(step, end)]);
        // Per step reached: how many of the steps it needs end here, and
        // the first of them that did not succeed.
        let mut closing: HashMap<&str, Closing<'_>> = HashMap::new();
        let mut todo = vec![step];
        let mut decided = Vec::new();
        while let Some(at) = todo.pop() {
            let Some(here) = self.steps.get(at) else {
                continue;
            };
            let at_end = ends[at];
            // A dependent named twice (only a record gaffer did not write
            // can: a submission refuses it) is decided once.
            let mut seen = std::collections::HashSet::new();
            for next in &here.record.dependents {
                if !seen.insert(next.as_str()) {
                    continue;
                }
                let Some(dependent) = self.steps.get(next) else {
                    continue;
                };
                if ends.contains_key(next.as_str()) || dependent.node != Node::Held {
                    continue;
                }
                if busy.contains_key(next) {
                    return Planned::Wait;
                }
                let close = closing.entry(next.as_str()).or_insert((0, None));
                close.0 += 1;
                if at_end != StepEnd::Succeeded {
                    close.1.get_or_insert((at, at_end));
                }
                let failed = dependent
                    .failed
                    .as_ref()
                    .map(|(d, e)| (d.as_str(), *e))
                    .or(close.1);
                // Steps it needs that end neither before nor here, and of
                // those, the ones being committed elsewhere.
                let left = dependent.pending.saturating_sub(close.0);
                let in_flight = busy
                    .keys()
                    .filter(|b| !ends.contains_key(b.as_str()))
                    .filter(|b| {
                        self.steps
                            .get(b.as_str())
                            .is_some_and(|s| s.record.dependents.contains(next))
                    })
                    .count();
                let decision = match failed {
                    _ if self.record.cancelled => {
                        Decision::Cancel("the workflow was cancelled".into())
                    }
                    Some((dep, how)) if !dependent.record.regardless => {
                        let how = match how {
                            StepEnd::Cancelled => "was cancelled",
                            _ => "failed",
                        };
                        Decision::Cancel(format!("step `{dep}` it needs {how}"))
                    }
                    _ if left > in_flight => continue,
                    _ if left > 0 => return Planned::Wait,
                    _ => Decision::Release,
                };
                if let Decision::Cancel(_) = decision {
                    ends.insert(next.as_str(), StepEnd::Cancelled);
                    todo.push(next.as_str());
                }
                decided.push((next.clone(), decision));
            }
        }
        // Steps not ended once this commits (the ending step was not).
        let cancels = Self::ends_in(&decided);
        let already = matches!(self.steps.get(step).map(|s| s.node), Some(Node::Ended(_)));
        let left = self
            .steps
            .len()
            .saturating_sub(self.ended + cancels + usize::from(!already));
        let releases = decided.len() - cancels;
        if left > 0 && releases == 0 && left == ending {
            return Planned::Wait;
        }
        Planned::Decided {
            decided,
            completes: left == 0,
        }
    }

    /// Record that `step` ended with `end` and `decided` were decided with
    /// it (the commit is durable).
    pub fn apply(&mut self, step: &str, end: StepEnd, decided: &[(String, Decision)]) {
        self.set(step, Node::Ended(end));
        for (name, decision) in decided {
            let node = match decision {
                Decision::Release => Node::Released,
                Decision::Cancel(_) => Node::Ended(StepEnd::Cancelled),
            };
            self.set(name, node);
        }
    }

    /// Step `name` is now `node`: when it ends, the steps that need it
    /// count it.
    fn set(&mut self, name: &str, node: Node) {
        let Some(s) = self.steps.get_mut(name) else {
            return;
        };
        let was_ended = matches!(s.node, Node::Ended(_));
        s.node = node;
        let Node::Ended(end) = node else {
            return;
        };
        if was_ended {
            return;
        }
        self.ended += 1;
        let dependents = s.record.dependents.clone();
        for next in dependents {
            if let Some(d) = self.steps.get_mut(&next) {
                d.pending = d.pending.saturating_sub(1);
                if end != StepEnd::Succeeded {
                    d.failed.get_or_insert((name.to_string(), end));
                }
            }
        }
    }

    /// How many steps `decided` ends (its cancels).
    pub fn ends_in(decided: &[(String, Decision)]) -> usize {
        decided
            .iter()
            .filter(|(_, d)| matches!(d, Decision::Cancel(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `a` and `b` feed `join`; `clean` needs `join` and runs regardless.
    fn flow() -> Flow {
        let step = |deps: &[&str], dependents: &[&str], regardless| {
            Step::new(
                StepRecord {
                    job_type: "t".into(),
                    deps: deps.iter().map(|s| s.to_string()).collect(),
                    dependents: dependents.iter().map(|s| s.to_string()).collect(),
                    regardless,
                },
                if deps.is_empty() {
                    Node::Released
                } else {
                    Node::Held
                },
            )
        };
        Flow::new(
            WorkflowRecord {
                name: "w".into(),
                created_at_ms: 0,
                steps: 4,
                input_hash: Vec::new(),
                cancelled: false,
                ended_at_ms: None,
            },
            HashMap::from([
                ("a".into(), step(&[], &["join"], false)),
                ("b".into(), step(&[], &["join"], false)),
                ("join".into(), step(&["a", "b"], &["clean"], false)),
                ("clean".into(), step(&["join"], &[], true)),
            ]),
        )
    }

    fn none() -> HashMap<String, usize> {
        HashMap::new()
    }

    #[test]
    fn the_last_dependency_to_succeed_releases_and_an_earlier_one_does_not() {
        let mut f = flow();
        assert_eq!(
            f.plan("a", StepEnd::Succeeded, &none(), 0),
            Planned::Decided {
                decided: vec![],
                completes: false
            }
        );
        f.apply("a", StepEnd::Succeeded, &[]);
        assert_eq!(
            f.plan("b", StepEnd::Succeeded, &none(), 0),
            Planned::Decided {
                decided: vec![("join".into(), Decision::Release)],
                completes: false
            }
        );
    }

    /// A record of another writer may name a dependent twice: it is
    /// decided once, not released twice.
    #[test]
    fn a_dependent_named_twice_is_decided_once() {
        let mut f = flow();
        f.apply("a", StepEnd::Succeeded, &[]);
        if let Some(b) = f.steps.get_mut("b") {
            b.record.dependents = vec!["join".into(), "join".into()];
        }
        assert_eq!(
            f.plan("b", StepEnd::Succeeded, &none(), 0),
            Planned::Decided {
                decided: vec![("join".into(), Decision::Release)],
                completes: false
            }
        );
    }

    #[test]
    fn a_decision_that_hangs_on_a_commit_in_flight_waits_for_it() {
        let f = flow();
        let busy = HashMap::from([("a".to_string(), 1)]);
        assert_eq!(f.plan("b", StepEnd::Succeeded, &busy, 1), Planned::Wait);
        // A failure cancels at once: whatever `a` does cannot save `join`.
        assert!(matches!(
            f.plan("b", StepEnd::Failed, &busy, 1),
            Planned::Decided { decided: d, .. } if d[0] == ("join".into(), Decision::Cancel("step `b` it needs failed".into()))
        ));
        // A step being decided by another commit is waited for.
        let busy = HashMap::from([("join".to_string(), 1)]);
        assert_eq!(f.plan("a", StepEnd::Failed, &busy, 0), Planned::Wait);
    }

    #[test]
    fn a_failure_cancels_what_needs_it_down_to_a_step_that_runs_regardless() {
        let f = flow();
        assert_eq!(
            f.plan("a", StepEnd::Failed, &none(), 0),
            Planned::Decided {
                decided: vec![
                    (
                        "join".into(),
                        Decision::Cancel("step `a` it needs failed".into())
                    ),
                    ("clean".into(), Decision::Release),
                ],
                completes: false
            }
        );
    }

    #[test]
    fn a_cancelled_workflow_releases_nothing_not_even_a_cleanup_step() {
        let mut f = flow();
        f.record.cancelled = true;
        f.apply("a", StepEnd::Succeeded, &[]);
        let cancelled = || Decision::Cancel("the workflow was cancelled".into());
        assert_eq!(
            f.plan("b", StepEnd::Succeeded, &none(), 0),
            Planned::Decided {
                decided: vec![("join".into(), cancelled()), ("clean".into(), cancelled())],
                // `b` and the two cancels end everything, `a` ended.
                completes: true
            }
        );
    }

    #[test]
    fn the_last_steps_to_end_together_complete_the_workflow_once() {
        let mut f = flow();
        f.apply("a", StepEnd::Succeeded, &[]);
        f.apply(
            "b",
            StepEnd::Succeeded,
            &[("join".into(), Decision::Release)],
        );
        f.apply(
            "join",
            StepEnd::Succeeded,
            &[("clean".into(), Decision::Release)],
        );
        assert_eq!(f.ended, 3);
        // `clean` is the last: it completes.
        assert_eq!(
            f.plan("clean", StepEnd::Succeeded, &none(), 0),
            Planned::Decided {
                decided: vec![],
                completes: true
            }
        );
        // Two sinks ending at once: the second waits for the first, then
        // completes; the first does not.
        let mut g = flow();
        g.steps.get_mut("clean").unwrap().record.deps.clear();
        g.steps.get_mut("join").unwrap().record.dependents.clear();
        g.apply("a", StepEnd::Succeeded, &[]);
        g.apply("b", StepEnd::Succeeded, &[]);
        g.steps.get_mut("join").unwrap().node = Node::Released;
        g.steps.get_mut("clean").unwrap().node = Node::Released;
        let g = Flow::new(g.record.clone(), g.steps.clone());
        let busy = HashMap::from([("join".to_string(), 1)]);
        assert_eq!(g.plan("clean", StepEnd::Succeeded, &busy, 1), Planned::Wait);
        assert_eq!(
            g.plan("join", StepEnd::Succeeded, &none(), 0),
            Planned::Decided {
                decided: vec![],
                completes: false
            }
        );
    }
}
