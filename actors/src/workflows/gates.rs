//! The gates of workflows: which transaction decides the steps that wait
//! for others. Held by the supervisor, which outlives every other actor of
//! the engine (as the claims on batch ids are), so what is in flight is
//! never forgotten while a settlement that planned it may still commit.
//!
//! taquba's settlement transactions take no compare, so two settlements
//! that each read "one dependency left" would both release the step, or
//! neither. The gates order them: a settlement of a workflow step asks for
//! its plan ([`GateMessage::Begin`]); the gates answer from the workflow's
//! state (read from the store once, then kept), marking the step and every
//! step the plan decides busy; the settlement commits the plan with its own
//! end, in one transaction, and reports ([`GateMessage::Finish`], sent by a
//! [`PlanGuard`] when dropped, so a settlement task that panics or is
//! aborted reports too). A plan that would depend on a busy step waits for
//! it to finish. A transaction that did not commit (or whose fate is
//! unknown) marks the workflow stale: it is read again from the store once
//! nothing of it is in flight.
//!
//! Every wait ends: a `Begin` waits only for steps in flight, whose
//! settlements report when they end, whichever way; a load is a reported
//! task. The wait is not bounded by a timer on purpose: a reply lost to a
//! timeout would leave its plan in flight forever.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ractor::{DerivedActorRef, RpcReplyPort};
use tracing::warn;

use crate::error::{EngineError, Result};
use crate::services::Services;
use crate::workflows::graph::{Decision, Flow, Planned};
use crate::workflows::layout::{StepEnd, StepRecord};

/// A plan, as the settlement that asked commits it.
#[derive(Debug)]
pub struct Plan {
    /// The steps decided with the ending step.
    pub decided: Vec<(String, Decision)>,
    /// Their records, as the gates hold them (in `decided`'s order).
    pub records: Vec<StepRecord>,
    /// Whether their held jobs are many enough of the workflow's to be
    /// read in one scan rather than one by one.
    pub scan_held: bool,
    /// The workflow's record, when this transaction ends its last step
    /// (written back with its end time).
    pub completes: Option<crate::workflows::layout::WorkflowRecord>,
    /// Sends the plan's `Finish` when dropped.
    pub guard: PlanGuard,
}

/// The right to change a workflow alone (a cancel or a retry of the whole
/// workflow): nothing of it is in flight, and nothing begins until this is
/// dropped. Its state is read again from the store afterwards.
#[derive(Debug)]
pub struct Exclusive {
    /// The workflow as the store says, with nothing in flight.
    pub flow: Flow,
    /// Sends `Finish` (stale) when dropped.
    pub guard: PlanGuard,
}

/// Reports the end of a plan (or of an exclusive change) when dropped.
#[derive(Debug)]
pub struct PlanGuard {
    to: Option<DerivedActorRef<GateMessage>>,
    workflow: String,
    token: u64,
    committed: bool,
}

impl PlanGuard {
    /// The plan's transaction is durable.
    pub fn committed(mut self) {
        self.committed = true;
    }
}

impl Drop for PlanGuard {
    fn drop(&mut self) {
        if let Some(to) = self.to.take() {
            // The supervisor gone, the engine is stopping: nothing waits.
            let _ = to.send_message(GateMessage::Finish {
                workflow: std::mem::take(&mut self.workflow),
                token: self.token,
                committed: self.committed,
            });
        }
    }
}

/// Messages of the gates (handled by the supervisor).
#[derive(Debug)]
pub enum GateMessage {
    /// Step `step` of `workflow` is about to end with `end`: answered with
    /// what its transaction does to the steps that need it, once nothing in
    /// flight can change that.
    Begin {
        /// The workflow.
        workflow: String,
        /// The ending step.
        step: String,
        /// How it ends.
        end: StepEnd,
        /// Answered with the plan.
        reply: RpcReplyPort<Result<Plan>>,
    },
    /// The workflow alone, for a change of the whole (cancel, retry).
    Exclusive {
        /// The workflow.
        workflow: String,
        /// Answered with the workflow's state and the right.
        reply: RpcReplyPort<Result<Exclusive>>,
    },
    /// A plan's (or an exclusive change's) transaction ended.
    Finish {
        /// The workflow.
        workflow: String,
        /// The plan's token.
        token: u64,
        /// Whether it committed.
        committed: bool,
    },
    /// A workflow was read from the store.
    Loaded {
        /// The workflow.
        workflow: String,
        /// What was read.
        flow: Box<Result<Flow>>,
    },
}

#[derive(Debug)]
enum Ask {
    Begin {
        step: String,
        end: StepEnd,
        reply: RpcReplyPort<Result<Plan>>,
    },
    Exclusive {
        reply: RpcReplyPort<Result<Exclusive>>,
    },
}

/// What a plan in flight holds.
#[derive(Debug)]
struct InFlight {
    step: String,
    end: StepEnd,
    decided: Vec<(String, Decision)>,
}

#[derive(Debug, Default)]
struct Gate {
    /// `None` while it is read (or to be read again).
    flow: Option<Flow>,
    loading: bool,
    /// Read again once nothing is in flight.
    stale: bool,
    in_flight: HashMap<u64, Option<InFlight>>,
    /// Steps a plan in flight ends or decides, with how many plans do
    /// (two deliveries of one step may both plan).
    busy: HashMap<String, usize>,
    /// Of those, the steps a plan in flight decides (releases or cancels).
    decided: HashMap<String, usize>,
    asks: VecDeque<Ask>,
}

/// The gates of the workflows this engine settles steps of.
#[derive(Debug, Default)]
pub struct Gates {
    gates: HashMap<String, Gate>,
    last: u64,
}

impl Gates {
    /// Handle one message. `me` is where the gates are reached (the
    /// supervisor); `services` reads workflows.
    pub fn handle(
        &mut self,
        message: GateMessage,
        me: &DerivedActorRef<GateMessage>,
        services: &Arc<Services>,
    ) {
        let workflow = match message {
            GateMessage::Begin {
                workflow,
                step,
                end,
                reply,
            } => {
                let gate = self.gates.entry(workflow.clone()).or_default();
                gate.asks.push_back(Ask::Begin { step, end, reply });
                workflow
            }
            GateMessage::Exclusive { workflow, reply } => {
                let gate = self.gates.entry(workflow.clone()).or_default();
                gate.asks.push_back(Ask::Exclusive { reply });
                workflow
            }
            GateMessage::Finish {
                workflow,
                token,
                committed,
            } => {
                let Some(gate) = self.gates.get_mut(&workflow) else {
                    return;
                };
                let Some(done) = gate.in_flight.remove(&token) else {
                    return;
                };
                match done {
                    Some(plan) => {
                        unbusy(&mut gate.busy, &plan.step);
                        for (name, _) in &plan.decided {
                            unbusy(&mut gate.busy, name);
                            unbusy(&mut gate.decided, name);
                        }
                        match (&mut gate.flow, committed) {
                            (Some(flow), true) => flow.apply(&plan.step, plan.end, &plan.decided),
                            _ => gate.stale = true,
                        }
                    }
                    // An exclusive change: read it back.
                    None => gate.stale = true,
                }
                workflow
            }
            GateMessage::Loaded { workflow, flow } => {
                let Some(gate) = self.gates.get_mut(&workflow) else {
                    return;
                };
                gate.loading = false;
                match *flow {
                    Ok(flow) => {
                        gate.flow = Some(flow);
                        self.bound_steps();
                    }
                    Err(e) => {
                        // Every ask waiting for it gets the error.
                        for ask in gate.asks.drain(..) {
                            match ask {
                                Ask::Begin { reply, .. } => {
                                    let _ = reply.send(Err(e.clone()));
                                }
                                Ask::Exclusive { reply } => {
                                    let _ = reply.send(Err(e.clone()));
                                }
                            }
                        }
                    }
                }
                workflow
            }
        };
        self.serve(&workflow, me, services);
    }

    /// Forget the idle workflows when those kept hold more than
    /// [`MAX_KEPT_STEPS`] steps (checked when one is read: only a read
    /// adds steps).
    fn bound_steps(&mut self) {
        let kept: usize = self
            .gates
            .values()
            .filter_map(|g| g.flow.as_ref())
            .map(|f| f.steps.len())
            .sum();
        if kept > MAX_KEPT_STEPS {
            self.gates
                .retain(|_, g| !(g.asks.is_empty() && g.in_flight.is_empty() && !g.loading));
        }
    }

    /// Answer what can be answered for `workflow`, in order; read it when
    /// it is not known.
    fn serve(
        &mut self,
        workflow: &str,
        me: &DerivedActorRef<GateMessage>,
        services: &Arc<Services>,
    ) {
        let Some(gate) = self.gates.get_mut(workflow) else {
            return;
        };
        if gate.stale {
            // What is known may be wrong: nothing is planned until the
            // store is read again, once nothing is in flight.
            if !gate.in_flight.is_empty() {
                return;
            }
            gate.stale = false;
            gate.flow = None;
        }
        if gate.flow.is_none() {
            if gate.asks.is_empty() && gate.in_flight.is_empty() {
                // Nothing wants it: forget it.
                self.gates.remove(workflow);
                return;
            }
            if !gate.loading && gate.in_flight.is_empty() && !gate.asks.is_empty() {
                gate.loading = true;
                load(workflow, me, services);
            }
            return;
        }
        let mut waiting = VecDeque::new();
        // An exclusive change waits for everything in flight, and
        // everything asked after it waits for it.
        let mut blocked = false;
        while let Some(ask) = gate.asks.pop_front() {
            let Some(flow) = &gate.flow else {
                waiting.push_back(ask);
                continue;
            };
            if blocked || gate.in_flight.values().any(Option::is_none) {
                waiting.push_back(ask);
                continue;
            }
            self.last += 1;
            let token = self.last;
            let guard = PlanGuard {
                to: Some(me.clone()),
                workflow: workflow.to_string(),
                token,
                committed: false,
            };
            match ask {
                Ask::Exclusive { reply } => {
                    if !gate.in_flight.is_empty() {
                        blocked = true;
                        drop(guard_off(guard));
                        waiting.push_back(Ask::Exclusive { reply });
                        continue;
                    }
                    gate.in_flight.insert(token, None);
                    // A reply nobody reads drops the guard, which reports.
                    let _ = reply.send(Ok(Exclusive {
                        flow: flow.clone(),
                        guard,
                    }));
                }
                Ask::Begin { step, end, reply } => {
                    // A step whose release is still being committed (its
                    // job ran before that plan's `Finish` came) waits for
                    // it: the plan would count the steps released with it
                    // as ending, and re-planning it on every message costs
                    // as many as they are (a fan-out's thousands).
                    if gate.decided.contains_key(&step) {
                        drop(guard_off(guard));
                        waiting.push_back(Ask::Begin { step, end, reply });
                        continue;
                    }
                    let ending = gate
                        .in_flight
                        .values()
                        .flatten()
                        .map(|p| 1 + Flow::ends_in(&p.decided))
                        .sum();
                    let (decided, completes) = match flow.plan(&step, end, &gate.busy, ending) {
                        Planned::Wait => {
                            drop(guard_off(guard));
                            waiting.push_back(Ask::Begin { step, end, reply });
                            continue;
                        }
                        Planned::Decided { decided, completes } => {
                            (decided, completes.then(|| flow.record.clone()))
                        }
                    };
                    *gate.busy.entry(step.clone()).or_default() += 1;
                    for (name, _) in &decided {
                        *gate.busy.entry(name.clone()).or_default() += 1;
                        *gate.decided.entry(name.clone()).or_default() += 1;
                    }
                    let records = decided
                        .iter()
                        .filter_map(|(name, _)| flow.steps.get(name))
                        .map(|s| s.record.clone())
                        .collect();
                    let plan = Plan {
                        decided: decided.clone(),
                        records,
                        scan_held: decided.len() >= SCAN_HELD_FROM
                            && decided.len() * 4 >= flow.steps.len(),
                        completes,
                        guard,
                    };
                    gate.in_flight
                        .insert(token, Some(InFlight { step, end, decided }));
                    // A reply nobody reads drops the guard, which reports
                    // the plan uncommitted.
                    let _ = reply.send(Ok(plan));
                }
            }
        }
        gate.asks = waiting;
        let idle = gate.asks.is_empty() && gate.in_flight.is_empty();
        if idle && gate.flow.as_ref().is_some_and(Flow::ended) {
            // Nothing more to decide: forget it (read again if retried).
            self.gates.remove(workflow);
        } else if self.gates.len() > MAX_KEPT {
            // Forget idle workflows beyond the bound: read again on demand.
            self.gates
                .retain(|_, g| !(g.asks.is_empty() && g.in_flight.is_empty() && !g.loading));
        }
    }
}

/// A plan that decides at least this many steps, and a quarter of its
/// workflow's, reads their held jobs in one scan.
const SCAN_HELD_FROM: usize = 64;

/// Workflows whose state is kept between their steps' ends; idle ones
/// beyond it are forgotten (and read again when a step of one ends).
const MAX_KEPT: usize = 1024;

/// Steps kept between their workflows' steps' ends (about 0.7 KiB each,
/// `benches/workflow_scale.rs`): beyond them, idle workflows are forgotten
/// as beyond [`MAX_KEPT`]. What a workflow with a settlement in flight
/// holds is kept whatever its size (at most `MAX_STEPS` steps each).
const MAX_KEPT_STEPS: usize = 1 << 18;

fn unbusy(busy: &mut HashMap<String, usize>, name: &str) {
    if let Some(n) = busy.get_mut(name) {
        *n -= 1;
        if *n == 0 {
            busy.remove(name);
        }
    }
}

/// A guard that reports nothing (a plan not given).
fn guard_off(mut guard: PlanGuard) -> PlanGuard {
    guard.to = None;
    guard
}

/// Read `workflow` in a reported task; the gates get it as `Loaded`.
fn load(workflow: &str, me: &DerivedActorRef<GateMessage>, services: &Arc<Services>) {
    let (to, id) = (me.clone(), workflow.to_string());
    let services = services.clone();
    let reported = id.clone();
    crate::task::spawn_reported(
        async move {
            let queue = services.queue()?;
            Flow::load(queue.view(), &id).await
        },
        move |ended| {
            let flow = match ended {
                Ok(read) => read,
                Err(e) => {
                    warn!(workflow = %reported, "reading the workflow ended without an answer: {e:?}");
                    Err(EngineError::Contended {
                        operation: format!("reading workflow `{reported}`"),
                    })
                }
            };
            let _ = to.send_message(GateMessage::Loaded {
                workflow: reported,
                flow: Box::new(flow),
            });
        },
    );
}
