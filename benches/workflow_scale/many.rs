//! The second shape: many small workflows at once (half a diamond
//! a → {b..i} → j, half a chain of ten), against the same jobs plain; and
//! the state the gates keep for them.

use std::collections::HashMap;

use futures_util::StreamExt;
use gaffer::workflow::Workflow;
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

/// A step of either shape: reads the outputs of the steps it names (in a
/// workflow) and adds one; plain, answers its salt.
#[derive(Serialize, Deserialize)]
pub struct Node {
    pub deps: Vec<String>,
    pub salt: u64,
}

impl Job for Node {
    const NAME: &'static str = "node";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        if ctx.workflow_step().is_none() || !super::read_deps() {
            return Ok(self.salt);
        }
        let outputs = super::read_all::<Node>(&ctx, &self.deps).await?;
        Ok(1 + outputs.iter().sum::<u64>())
    }
}

/// The steps of workflow `i`: (name, deps), in submission order.
pub fn shape(i: u64) -> Vec<(String, Vec<String>)> {
    if i.is_multiple_of(2) {
        let mids: Vec<String> = "bcdefghi".chars().map(|c| c.to_string()).collect();
        let mut steps = vec![("a".to_string(), Vec::new())];
        steps.extend(mids.iter().map(|m| (m.clone(), vec!["a".to_string()])));
        steps.push(("j".to_string(), mids));
        steps
    } else {
        (0..10)
            .map(|s| {
                let deps = if s == 0 {
                    Vec::new()
                } else {
                    vec![format!("s{}", s - 1)]
                };
                (format!("s{s}"), deps)
            })
            .collect()
    }
}

/// What the last step of workflow `i` answers.
fn expected(i: u64) -> u64 {
    if i.is_multiple_of(2) { 8 * 2 + 1 } else { 10 }
}

/// `n` workflows of ten steps, submitted 64 at a time, every one joined;
/// answers when the last was submitted (seconds after `started`).
pub async fn workflows(engine: &Engine, n: u64, started: std::time::Instant) -> f64 {
    let handles: Vec<_> = futures_util::stream::iter(0..n)
        .map(|i| {
            let mut flow = Workflow::new("many");
            for (name, deps) in shape(i) {
                let job = Node {
                    deps: deps.clone(),
                    salt: i,
                };
                flow = flow.step_after(&name, job, deps);
            }
            async move { (i, engine.submit_workflow(flow).await) }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let submitted = started.elapsed().as_secs_f64();
    for (i, handle) in handles {
        let outputs = handle
            .expect("submitted")
            .join()
            .await
            .expect("joined")
            .expect("succeeded");
        let last = if i.is_multiple_of(2) { "j" } else { "s9" };
        if super::read_deps() {
            let got = outputs.get::<Node>(last).await.expect("an output");
            assert_eq!(got, expected(i));
        }
    }
    submitted
}

/// The same steps as plain jobs, submitted 64 at a time, every one joined;
/// answers when the last was submitted.
pub async fn plain(engine: &Engine, n: u64, started: std::time::Instant) -> f64 {
    let handles: Vec<_> = futures_util::stream::iter((0..n).flat_map(shape))
        .map(|(_, deps)| engine.submit(Node { deps, salt: 1 }))
        .buffer_unordered(64)
        .collect()
        .await;
    let submitted = started.elapsed().as_secs_f64();
    for handle in handles {
        handle
            .expect("submitted")
            .join()
            .await
            .expect("joined")
            .expect("ran");
    }
    submitted
}

/// The gates' state for `n` running workflows of the two shapes, as they
/// hold it (one `Flow` each, read from the records a submission writes):
/// the resident memory it adds, in KiB, measured in this process.
pub fn gates_kib(n: u64) -> (u64, usize) {
    use gaffer_actors::workflows::graph::{Flow, Node as At, Step};
    use gaffer_actors::workflows::layout::{StepRecord, WorkflowRecord};
    let before = super::rss::rss_kib().0;
    let mut kept: HashMap<String, Flow> = HashMap::new();
    for i in 0..n {
        let steps = shape(i);
        let mut graph: HashMap<String, StepRecord> = steps
            .iter()
            .map(|(name, deps)| {
                let record = StepRecord {
                    job_type: Node::NAME.into(),
                    deps: deps.clone(),
                    dependents: Vec::new(),
                    regardless: false,
                };
                (name.clone(), record)
            })
            .collect();
        for (name, deps) in &steps {
            for dep in deps {
                if let Some(d) = graph.get_mut(dep) {
                    d.dependents.push(name.clone());
                }
            }
        }
        let record = WorkflowRecord {
            name: "many".into(),
            created_at_ms: 0,
            steps: 10,
            input_hash: vec![0; 32],
            cancelled: false,
            ended_at_ms: None,
        };
        let steps = graph
            .into_iter()
            .map(|(name, rec)| {
                let at = if rec.deps.is_empty() {
                    At::Released
                } else {
                    At::Held
                };
                (name, Step::new(rec, at))
            })
            .collect();
        kept.insert(format!("{i:032x}"), Flow::new(record, steps));
    }
    let after = super::rss::rss_kib().0;
    let held = kept.len();
    drop(kept);
    (after.saturating_sub(before), held)
}
