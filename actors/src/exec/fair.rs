//! Fairness and concurrency per key inside one job type (#37 §1, §2).
//!
//! A type registered with [`Fairness`] (`JobOptions::fair_by`) or
//! [`Concurrency::per_header`] (`JobOptions::key_concurrency`) keeps each
//! value of a job header in a queue of its own (the partition queues of a
//! rate limit per header, `keys::partition_queue`; jobs without the header
//! stay on the type's own queue, one value of its own), and its pool claims
//! round robin over the values that have jobs ready: a value of weight `w`
//! gets up to `w` times `Fairness::turn` jobs per turn (8 by default,
//! claimed at once). A value with one ready job therefore waits about one
//! turn of each value ahead of it, however large another value's backlog
//! is.
//!
//! Fairness comes first across values, priority within one: a job's
//! priority orders it among its own value's jobs only (its value's queue is
//! a taquba queue like any other), never ahead of another value's turn. This
//! is Hatchet's choice for its group round robin; Temporal orders by
//! priority first and applies fairness within a priority level.
//!
//! With a limit per key (`Concurrency::per_header(header, n)`), a value
//! holds at most `n` jobs in the pool at once, counted from their claim to
//! the end of their settlement (running, parked, waiting in the pool's
//! backlog, settling). The pool counts from what it holds, not from a
//! counter: see `Ring::plan`'s `held`.
//!
//! The pool owns a `Ring` (its state, changed only in its handler): the
//! queues that may have ready jobs, in turn order; the queues at their key
//! limit (`blocked`, out of the ring until one of their jobs settles); every
//! other known queue is idle (drained: a claim came back short), and costs
//! only the pool's idle check (an in-memory look at the queue's wake-up,
//! see the pool's `CheckIdle`). A plan walks the ring from its front and
//! stops as soon as it has filled what it was asked for, so its cost is
//! the queues it visits: the slots it fills plus those it skips (a value at
//! its limit, once, before it leaves the ring; a value without a rate
//! token).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::error::{EngineError, Result};
use crate::exec::rate::Plan;

/// The largest weight a value may have ([`Fairness::weight`] clamps to
/// `1..=MAX_WEIGHT`).
pub const MAX_WEIGHT: u32 = 1000;

/// Jobs a value of weight 1 takes per turn unless [`Fairness::turn`] says
/// otherwise. Each turn is one claim of its queue (one taquba
/// transaction), so a turn of one job would cost a transaction per job: at
/// 1,000 busy values a fair type ran at about half a plain type's rate
/// (benches/README.md, *Tenants*).
pub const DEFAULT_TURN: u32 = 8;

/// The largest turn ([`Fairness::turn`] clamps to `1..=MAX_TURN`).
pub const MAX_TURN: u32 = 1000;

/// Fair claiming across the values of a job header: the pool claims round
/// robin over the values with jobs ready, a value of weight `w` getting up
/// to `w` turns' worth of jobs per turn (weight 1 unless
/// [`weight`](Self::weight) says more; a turn is [`turn`](Self::turn)
/// jobs, 8 by default, claimed at once). Priority orders jobs within one
/// value only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fairness {
    header: String,
    weights: Vec<(String, u32)>,
    turn: u32,
}

impl Fairness {
    /// Fair over the values of the job header `name` (a header of your
    /// own: a name starting with `gaffer.`, or an empty one, is refused
    /// when the engine starts). Jobs without the header form one value of
    /// their own.
    pub fn header(name: impl Into<String>) -> Self {
        Self {
            header: name.into(),
            weights: Vec::new(),
            turn: DEFAULT_TURN,
        }
    }

    /// Jobs a value of weight 1 takes per turn (a value of weight `w`:
    /// `w` times as many), claimed at once: clamped to `1..=1000`, default
    /// [`DEFAULT_TURN`]. A smaller turn interleaves values more finely (a
    /// value that becomes ready waits behind at most one turn of each
    /// value ahead of it in the ring); a larger one claims more jobs per
    /// transaction. Up to `turn - 1` jobs are claimed before a worker is
    /// free for them (they wait in the pool, their leases kept), which
    /// costs little with short jobs; for jobs of minutes, `turn(1)` (strict
    /// round robin, one job each, none claimed ahead) lets a value that
    /// becomes ready start at the next free worker.
    pub fn turn(mut self, jobs: u32) -> Self {
        self.turn = jobs.clamp(1, MAX_TURN);
        self
    }

    /// Give `value` `weight` times the jobs of a turn (paid tiers):
    /// clamped to `1..=1000`; the last weight given for a value counts.
    pub fn weight(mut self, value: impl Into<String>, weight: u32) -> Self {
        let value = value.into();
        let weight = weight.clamp(1, MAX_WEIGHT);
        self.weights.retain(|(v, _)| *v != value);
        self.weights.push((value, weight));
        self
    }

    /// The header whose values share the type fairly.
    pub fn header_name(&self) -> &str {
        &self.header
    }

    /// The weights given, by value.
    pub fn weights(&self) -> &[(String, u32)] {
        &self.weights
    }

    /// Jobs a value of weight 1 takes per turn.
    pub fn turn_jobs(&self) -> u32 {
        self.turn
    }
}

/// A limit on the jobs of one header value held at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Concurrency {
    header: String,
    limit: usize,
}

impl Concurrency {
    /// At most `n` jobs of each value of the job header `name` run at once
    /// in one engine (`InvalidConfig` for `n = 0`). `n = 1` runs each
    /// value's jobs one at a time.
    pub fn per_header(name: impl Into<String>, n: usize) -> Result<Self> {
        let header = name.into();
        if n == 0 {
            return Err(EngineError::InvalidConfig(format!(
                "a concurrency per header `{header}` of 0 would never run a job; give at least 1"
            )));
        }
        Ok(Self { header, limit: n })
    }

    /// The header whose values are limited.
    pub fn header_name(&self) -> &str {
        &self.header
    }

    /// Jobs of one value held at once, at most.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// What a pool's ring needs of its registration: weights by queue and the
/// limit per key.
#[derive(Debug, Clone, Default)]
pub struct FairConfig {
    /// Weights by partition queue (absent: 1).
    pub(crate) weights: HashMap<String, u32>,
    /// At most this many jobs of one value held at once.
    pub(crate) limit: Option<usize>,
    /// Jobs per turn of a value of weight 1 (`Fairness::turn`; 0 counts
    /// as 1).
    pub(crate) turn: u32,
}

impl FairConfig {
    /// The ring's configuration for a type whose queue is `base`: weights
    /// by value become weights by the value's partition queue.
    pub fn new(base: &str, fair: Option<&Fairness>, limit: Option<&Concurrency>) -> Self {
        let weights = fair
            .map(|f| {
                f.weights
                    .iter()
                    .map(|(v, w)| {
                        (
                            crate::layout::keys::partition_queue(base, v),
                            (*w).clamp(1, MAX_WEIGHT),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            weights,
            limit: limit.map(Concurrency::limit),
            turn: fair.map_or(DEFAULT_TURN, |f| f.turn),
        }
    }
}

/// The queues of a fair type, in turn order. Owned by the pool's limiter.
#[derive(Debug)]
pub(crate) struct Ring {
    /// Queues in turn order, each with the generation it entered with: an
    /// entry whose generation is not its queue's in `members` is stale (the
    /// queue left since) and is dropped when reached.
    ring: VecDeque<(String, u64)>,
    /// Queues in the ring, by their generation.
    members: HashMap<String, u64>,
    next_generation: u64,
    /// Queues at their key limit: out of the ring until a job of theirs
    /// settles.
    blocked: HashSet<String>,
    /// Queues an operator paused (`Engine::pause_value`): out of the ring
    /// and never let in (a submission, a settlement, the idle check) until
    /// resumed.
    paused: HashSet<String>,
    /// Slots the front queue took in its current turn.
    turn_used: u32,
    config: FairConfig,
    /// Queues the last plan visited (for tests of its cost).
    pub(crate) visits: usize,
}

impl Ring {
    pub(crate) fn new(config: FairConfig) -> Self {
        Self {
            ring: VecDeque::new(),
            members: HashMap::new(),
            next_generation: 0,
            blocked: HashSet::new(),
            paused: HashSet::new(),
            turn_used: 0,
            config,
            visits: 0,
        }
    }

    /// The limit per key, if any.
    pub(crate) fn limit(&self) -> Option<usize> {
        self.config.limit
    }

    /// Jobs `queue` takes per turn: its weight times the turn.
    fn quantum(&self, queue: &str) -> u32 {
        let weight = self.config.weights.get(queue).copied().unwrap_or(1);
        weight.saturating_mul(self.config.turn.max(1))
    }

    /// `queue` may have ready jobs: it joins the ring at the back (a
    /// blocked queue too); `false` if it was in the ring already, or is
    /// paused.
    pub(crate) fn enter(&mut self, queue: &str) -> bool {
        if self.paused.contains(queue) {
            return false;
        }
        self.blocked.remove(queue);
        if self.members.contains_key(queue) {
            return false;
        }
        let generation = self.next_generation;
        self.next_generation += 1;
        self.members.insert(queue.to_string(), generation);
        self.ring.push_back((queue.to_string(), generation));
        // Stale entries are dropped as the plan reaches them; a ring whose
        // queues come and go faster than its front moves is compacted.
        if self.ring.len() > 2 * self.members.len() + 64 {
            let members = &self.members;
            self.ring.retain(|(q, g)| members.get(q) == Some(g));
            self.turn_used = 0;
        }
        true
    }

    /// A job of `queue` settled: a blocked queue is eligible again, and one
    /// whose job may have gone back to it (`may_return`: a retry, a
    /// release, a wait) may have ready jobs.
    pub(crate) fn settled(&mut self, queue: &str, may_return: bool) -> bool {
        if self.blocked.contains(queue) || may_return {
            self.enter(queue)
        } else {
            false
        }
    }

    /// `queue` came back short from a claim: it leaves the ring (the idle
    /// check, a submission or a settlement brings it back).
    pub(crate) fn drained(&mut self, queue: &str) {
        self.members.remove(queue);
    }

    /// An operator paused `queue`: it leaves the ring (its stale entry is
    /// dropped when the front reaches it) and stays out until
    /// [`resume`](Self::resume); `false` if it was paused already.
    pub(crate) fn pause(&mut self, queue: &str) -> bool {
        self.members.remove(queue);
        self.blocked.remove(queue);
        self.paused.insert(queue.to_string())
    }

    /// An operator resumed `queue`: it joins the ring at the back (it may
    /// have ready jobs; a claim that finds none drains it as any other);
    /// `false` if it was not paused.
    pub(crate) fn resume(&mut self, queue: &str) -> bool {
        if !self.paused.remove(queue) {
            return false;
        }
        self.enter(queue);
        true
    }

    /// The queues that may hold ready jobs: in the ring, blocked at their
    /// limit, or paused (any order).
    pub(crate) fn live_queues(&self) -> impl Iterator<Item = &str> {
        self.members
            .keys()
            .chain(self.blocked.iter())
            .chain(self.paused.iter())
            .map(String::as_str)
    }

    /// Whether an operator paused `queue`.
    pub(crate) fn is_paused(&self, queue: &str) -> bool {
        self.paused.contains(queue)
    }

    /// Whether `queue` is in the ring or blocked (not idle).
    pub(crate) fn is_active(&self, queue: &str) -> bool {
        self.members.contains_key(queue) || self.blocked.contains(queue)
    }

    /// The queues in the ring (any order).
    pub(crate) fn members(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// Queues in the ring.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Up to `want` jobs, round robin from the ring's front: each queue
    /// visited gets up to its weight's worth of the turn (less when its key
    /// limit leaves less room: `held` says how many jobs of each queue the
    /// pool holds; or when `tokens` gives fewer), then goes to the back. A
    /// queue at its key limit leaves the ring for `blocked`. Passes repeat
    /// while slots are left and the last pass gave something; a turn cut
    /// short by `want` goes on at the next plan.
    pub(crate) fn plan(
        &mut self,
        want: usize,
        held: &HashMap<&str, usize>,
        mut tokens: impl FnMut(&str, usize) -> usize,
    ) -> Plan {
        let mut plan: Plan = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        let mut left = want;
        // Live visits since the last one that gave a slot.
        let mut idle = 0usize;
        self.visits = 0;
        while left > 0 && idle < self.members.len() {
            let Some((queue, generation)) = self.ring.front().cloned() else {
                break;
            };
            self.visits += 1;
            if self.members.get(&queue) != Some(&generation) {
                self.ring.pop_front();
                self.turn_used = 0;
                continue;
            }
            let planned = at.get(&queue).map_or(0, |&i| plan[i].1);
            let held_now = held.get(queue.as_str()).copied().unwrap_or(0);
            let room = match self.config.limit {
                Some(n) => n.saturating_sub(held_now + planned),
                None => usize::MAX,
            };
            if room == 0 {
                self.ring.pop_front();
                self.turn_used = 0;
                if planned == 0 {
                    // At its limit with what the pool holds: out of the
                    // ring until one of those settles.
                    self.members.remove(&queue);
                    self.blocked.insert(queue);
                } else {
                    // Full only with this plan's claims, which may come
                    // back short (a job not committed yet, one another
                    // claim took): it stays in the ring, and the next
                    // plan blocks it if its claims are held by then. A
                    // queue blocked on claims that never came would wait
                    // for a settlement that never comes.
                    self.ring.push_back((queue, generation));
                    idle += 1;
                }
                continue;
            }
            let quantum = self.quantum(&queue);
            // A turn is claimed whole when it fits in one turn of weight 1
            // (its jobs beyond the free slots wait in the pool's backlog),
            // so that each value's turn is one claim, not one per plan it
            // spans: at most `turn - 1` jobs are claimed ahead.
            let ask = usize::try_from(quantum.saturating_sub(self.turn_used))
                .unwrap_or(usize::MAX)
                .min(room)
                .min(left.max(self.config.turn.max(1) as usize));
            let got = tokens(&queue, ask).min(ask);
            if got > 0 {
                left = left.saturating_sub(got);
                idle = 0;
                self.turn_used += u32::try_from(got).unwrap_or(quantum);
                match at.get(&queue) {
                    Some(&i) => plan[i].1 += got,
                    None => {
                        at.insert(queue.clone(), plan.len());
                        plan.push((queue.clone(), got));
                    }
                }
            } else {
                idle += 1;
            }
            // Its turn is over when it used its weight, or got less than
            // asked (no token); cut short by `want`, it goes on next plan.
            if got < ask || self.turn_used >= quantum {
                self.ring.pop_front();
                self.ring.push_back((queue, generation));
                self.turn_used = 0;
            }
        }
        plan
    }
}

#[cfg(test)]
mod tests;
