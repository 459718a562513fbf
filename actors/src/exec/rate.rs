//! Rate limits per job type: attempts begin at `starts` per `period` at
//! most, with bursts of at most `burst` (default `starts`): in any window of
//! length `t`, at most `burst + t × starts / period` begin (the usual
//! token-bucket / GCRA meaning, as governor's). The type's pool owns its
//! limiter (a token bucket on tokio's clock, so paused test time drives
//! it): it claims no more jobs than it has tokens, so a throttled type's
//! backlog waits in the queue, holding no claim and no worker slot, and
//! other types (their own pools, their own queues) are not slowed.
//!
//! Buckets start empty: a pool earns tokens only from its own start, at
//! the rate, up to the burst. Nothing of a bucket is stored, so a bucket
//! that started full would let a crash loop (or a pool restarted again and
//! again) start a burst per restart on top of the rate; an empty start
//! keeps the limit over any window, across restarts, at one cost: after
//! every start (a deploy too) the type's first job waits one interval
//! (`period / starts`), and the full burst is there after `burst`
//! intervals.
//!
//! A limit partitioned by a header (`RateLimit::per_header("tenant")`)
//! gives each value of the header its own bucket, and its own queue
//! (`keys::partition_queue`): a job is enqueued on the queue of its value,
//! and the pool claims from every value's queue that has tokens, round
//! robin, so a throttled tenant's backlog waits in its own queue while the
//! others' jobs are claimed past it. Jobs without the header share the
//! type's own queue and its bucket.
//!
//! Why not `governor`: its limiters answer "may one more start now" and
//! cannot give back a token a claim did not use (the pool reserves as many
//! tokens as jobs it asks the queue for, and gets fewer when the queue runs
//! short); its state is lock-free shared state for many threads, which an
//! actor's own state does not need; and its clocks do not follow tokio's
//! paused time. The bucket is a few lines of arithmetic.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{EngineError, Result};

/// A rate limit: attempts of a job type begin at `starts` per `period` at
/// most, with bursts of at most [`burst`](Self::burst) (default `starts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    starts: u32,
    period: Duration,
    burst: u32,
    per_header: Option<String>,
}

impl RateLimit {
    /// At most `starts` per `period` (`InvalidConfig` if either is zero).
    pub fn new(starts: u32, period: Duration) -> Result<Self> {
        if starts == 0 || period.is_zero() {
            return Err(EngineError::InvalidConfig(format!(
                "a rate limit needs at least 1 start per non-zero period (got {starts} per {period:?})"
            )));
        }
        Ok(Self {
            starts,
            period,
            burst: starts,
            per_header: None,
        })
    }

    /// The limit holds for each value of the job header `name` apart (per
    /// tenant, per customer, per partner account): jobs submitted with
    /// `name: acme` start at most at the rate, and so do those with `name:
    /// globex`, each on its own. Each value's jobs wait in their own queue,
    /// so a throttled value never holds back another's. Jobs without the
    /// header share one more bucket. The header is a user header
    /// (`SubmitOptions::headers`); a name starting with `gaffer.` is refused
    /// when the engine starts.
    pub fn per_header(mut self, name: impl Into<String>) -> Self {
        self.per_header = Some(name.into());
        self
    }

    /// The header this limit is partitioned by, if any.
    pub fn partition_header(&self) -> Option<&str> {
        self.per_header.as_deref()
    }

    /// At most `burst` starts at once (default: `starts`, a period's
    /// worth); 1 spaces every start by `period / starts`. Clamped to
    /// `1..=starts`.
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst.clamp(1, self.starts);
        self
    }

    /// At most `starts` per second.
    pub fn per_second(starts: u32) -> Result<Self> {
        Self::new(starts, Duration::from_secs(1))
    }

    /// At most `starts` per minute.
    pub fn per_minute(starts: u32) -> Result<Self> {
        Self::new(starts, Duration::from_secs(60))
    }

    /// Starts allowed per period.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Starts allowed at once.
    pub fn max_burst(&self) -> u32 {
        self.burst
    }
}

/// A token bucket of `burst` tokens refilled at `starts / period`, in
/// integer time (GCRA: a theoretical arrival time `tat`, each start moves
/// it one interval on, and a start is allowed while `tat` is at most
/// `burst - 1` intervals ahead of now). It holds what it earned since
/// `since` (its pool's start): empty then, one token an interval later,
/// full `burst` intervals later.
#[derive(Debug)]
pub(crate) struct Bucket {
    interval: Duration,
    tolerance: Duration,
    tat: Instant,
}

impl Bucket {
    pub(crate) fn new(limit: &RateLimit, since: Instant) -> Self {
        let interval = limit.period / limit.starts;
        Self {
            interval,
            tolerance: interval * (limit.burst - 1),
            // Empty at `since`: `tat - since` is one interval past the
            // tolerance.
            tat: since + interval * limit.burst,
        }
    }

    /// Take up to `want` tokens; answers how many were taken.
    pub(crate) fn take(&mut self, want: usize) -> usize {
        let now = Instant::now();
        let mut taken = 0;
        while taken < want {
            let t = self.tat.max(now);
            if t - now > self.tolerance {
                break;
            }
            self.tat = t + self.interval;
            taken += 1;
        }
        taken
    }

    /// Give back `n` tokens taken but not used.
    pub(crate) fn give_back(&mut self, n: usize) {
        let back = self.interval * u32::try_from(n).unwrap_or(u32::MAX);
        self.tat = self.tat.checked_sub(back).unwrap_or(self.tat);
    }

    /// Settle `reserved` tokens taken earlier of which `used` were used:
    /// all go back, and the used ones are taken again as of now. Taking
    /// them again cannot find too few (a later `now` only adds tokens), but
    /// they are spent whatever it finds: their jobs are claimed.
    fn settle(&mut self, reserved: usize, used: usize) {
        self.give_back(reserved);
        let spent = self.interval * u32::try_from(used).unwrap_or(u32::MAX);
        self.tat = self.tat.max(Instant::now()) + spent;
    }

    /// How long until a token is there.
    pub(crate) fn until_next(&self) -> Duration {
        let now = Instant::now();
        (self.tat.max(now) - now).saturating_sub(self.tolerance)
    }

    /// Refilled to the brim: the same as a bucket made now from the same
    /// `since` (`tat` never goes below where it started, `burst` intervals
    /// after `since`, so once it is full, so is a new one).
    fn is_full(&self) -> bool {
        self.tat <= Instant::now()
    }
}

/// What a pool's claim may take: how many jobs from which queue.
pub(crate) type Plan = Vec<(String, usize)>;

/// A pool's claims, planned: the type's queue and, for a limit partitioned
/// by a header, every partition queue it knows, each with its bucket. Owned
/// by the pool (its state, changed only in its handler).
#[derive(Debug)]
pub(crate) struct Limiter {
    limit: Option<RateLimit>,
    /// Partition queues an operator paused (`Engine::pause_value`) on a
    /// type that is not fair (a rate limit per header): its round robin
    /// passes them over. A fair type's are its ring's.
    paused: std::collections::HashSet<String>,
    /// The type's queue first, then partition queues in the order learned.
    queues: Vec<String>,
    /// The same queues, to tell a new one at once, each with its place in
    /// `queues` and (a fair type) what its forgetting needs.
    known: HashMap<String, forget::Known>,
    /// Where the next plan starts (round robin over `queues`).
    next: usize,
    /// Buckets not full (a full bucket is the same as a new one, so it is
    /// dropped: the map stays as small as the set of recently busy values).
    buckets: HashMap<String, Bucket>,
    /// When the pool started: every bucket earns from here (see the
    /// module's note), also one made later for a value first seen later.
    since: Instant,
    /// A fair type's turn order over its values (`exec::fair`): `None` for
    /// a type without fairness or a limit per key.
    fair: Option<crate::exec::fair::Ring>,
    /// Where the next idle check starts in `queues`.
    idle_cursor: usize,
    /// A fair type's drained partition queues, to be forgotten once they
    /// stay idle (`forget`).
    forgetting: forget::Forgetting,
}

/// Known queues a fair type's idle check looks at, at most, per check.
pub(crate) const IDLE_CHECK_BATCH: usize = 1024;

impl Limiter {
    /// A pool's limiter, at its start: its buckets start empty.
    pub(crate) fn new(queue: String, limit: Option<RateLimit>) -> Self {
        Self {
            limit,
            known: HashMap::from([(queue.clone(), forget::Known::at(0))]),
            queues: vec![queue],
            next: 0,
            buckets: HashMap::new(),
            paused: Default::default(),
            since: Instant::now(),
            fair: None,
            idle_cursor: 0,
            forgetting: forget::Forgetting::default(),
        }
    }

    /// The limiter of a fair type (fairness or a limit per key): its
    /// claims go round robin over the values with ready jobs. The type's
    /// own queue starts in the ring.
    pub(crate) fn fair(mut self, config: crate::exec::fair::FairConfig) -> Self {
        let mut ring = crate::exec::fair::Ring::new(config);
        ring.enter(&self.queues[0]);
        self.fair = Some(ring);
        self
    }

    /// Whether jobs of this type are spread over partition queues (a rate
    /// limit per header, fairness or a limit per key).
    pub(crate) fn partitioned(&self) -> bool {
        self.per_value_buckets() || self.fair.is_some()
    }

    /// Whether each value has its own bucket (a rate limit per header).
    fn per_value_buckets(&self) -> bool {
        self.limit
            .as_ref()
            .is_some_and(|l| l.partition_header().is_some())
    }

    /// The ring of a fair type.
    pub(crate) fn ring(&self) -> Option<&crate::exec::fair::Ring> {
        self.fair.as_ref()
    }

    /// The limit per key of a fair type, if any.
    pub(crate) fn key_limit(&self) -> Option<usize> {
        self.fair.as_ref().and_then(|r| r.limit())
    }

    /// `queue` may have ready jobs (a submission named it, the idle check
    /// found an insert): a fair type puts it in its ring; `true` if it
    /// was not there.
    pub(crate) fn wake(&mut self, queue: &str) -> bool {
        self.touched(queue);
        match &mut self.fair {
            Some(ring) => ring.enter(queue),
            None => false,
        }
    }

    /// A job of `queue` settled (see `Ring::settled`); `true` if the
    /// queue joined the ring.
    pub(crate) fn settled(&mut self, queue: &str, may_return: bool) -> bool {
        let entered = match &mut self.fair {
            Some(ring) => ring.settled(queue, may_return),
            None => false,
        };
        if entered {
            self.touched(queue);
        }
        entered
    }

    /// Queues a claim found short leave a fair type's ring.
    pub(crate) fn drained(&mut self, queues: &[String]) {
        if let Some(ring) = &mut self.fair {
            for q in queues {
                ring.drained(q);
            }
            for q in queues {
                self.went_idle(q);
            }
        }
    }

    /// A fair type's idle check: known queues neither in the ring nor
    /// blocked join the ring if an insert happened on them since the last
    /// look (taquba's per-queue wake-up keeps a permit for an insert made
    /// while nobody waited; taking it is a look in memory, no store read).
    /// At most [`IDLE_CHECK_BATCH`] known queues are looked at per check,
    /// from where the last one stopped, so a check's cost is bounded
    /// whatever the number of values; with more known queues than that, a
    /// queue is looked at every `known / IDLE_CHECK_BATCH` checks. Answers
    /// how many joined.
    pub(crate) fn check_idle(&mut self, queue: &taquba::Queue) -> usize {
        let Some(ring) = &mut self.fair else {
            return 0;
        };
        let n = self.queues.len();
        let mut joined = Vec::new();
        for _ in 0..n.min(IDLE_CHECK_BATCH) {
            let q = &self.queues[self.idle_cursor % n];
            self.idle_cursor = (self.idle_cursor + 1) % n;
            if !ring.is_active(q) && inserted_since(queue, q) {
                ring.enter(q);
                joined.push(q.clone());
            }
        }
        for q in &joined {
            self.touched(q);
        }
        joined.len()
    }

    /// Learn a partition queue; `false` if it was known. A type whose
    /// limit is no longer per header still claims from the partition
    /// queues an earlier configuration left (sharing its one bucket). A
    /// fair type's new queue joins its ring.
    pub(crate) fn learn(&mut self, queue: String) -> bool {
        if self.known.contains_key(&queue) {
            return false;
        }
        self.known
            .insert(queue.clone(), forget::Known::at(self.queues.len()));
        if let Some(ring) = &mut self.fair {
            ring.enter(&queue);
            self.touched(&queue);
        }
        self.queues.push(queue);
        true
    }

    /// Queues known (the type's own and the partition queues learned and
    /// not forgotten).
    pub(crate) fn known_len(&self) -> usize {
        self.queues.len()
    }

    /// Up to `want` jobs to claim, spread round robin over the queues whose
    /// buckets have tokens (the tokens are taken; give back what a claim
    /// did not use). Empty when every queue is throttled.
    pub(crate) fn plan(&mut self, want: usize) -> Plan {
        self.plan_held(want, &HashMap::new())
    }

    /// [`plan`](Self::plan), for a fair type with a limit per key: `held`
    /// says how many jobs of each queue the pool holds now.
    pub(crate) fn plan_held(&mut self, want: usize, held: &HashMap<&str, usize>) -> Plan {
        if self.fair.is_some() {
            return self.plan_fair(want, held);
        }
        let partitioned = self.partitioned();
        let Some(limit) = &self.limit else {
            return self.spread(want);
        };
        self.buckets.retain(|_, b| !b.is_full());
        let since = self.since;
        if !partitioned {
            // One bucket for the type, whatever queues its jobs are in.
            let got = self
                .buckets
                .entry(self.queues[0].clone())
                .or_insert_with(|| Bucket::new(limit, since))
                .take(want);
            return self.spread(got);
        }
        let n = self.queues.len();
        let mut counts = vec![0usize; n];
        let mut left = want;
        // A paused value is passed over, as one without a token.
        let mut dry: Vec<bool> = self
            .queues
            .iter()
            .map(|q| self.paused.contains(q))
            .collect();
        let mut i = self.next % n;
        while left > 0 && dry.iter().any(|d| !d) {
            if !dry[i] {
                let bucket = self
                    .buckets
                    .entry(self.queues[i].clone())
                    .or_insert_with(|| Bucket::new(limit, since));
                if bucket.take(1) == 1 {
                    counts[i] += 1;
                    left -= 1;
                } else {
                    dry[i] = true;
                }
            }
            i = (i + 1) % n;
        }
        self.next = (self.next + 1) % n;
        self.collect(counts)
    }

    /// A fair type's plan: round robin over its ring, each visited value's
    /// tokens taken as it is visited (a limit per header), or the type's
    /// bucket's tokens taken first (a limit for the whole type).
    fn plan_fair(&mut self, want: usize, held: &HashMap<&str, usize>) -> Plan {
        let per_value = self.per_value_buckets();
        self.buckets.retain(|_, b| !b.is_full());
        let since = self.since;
        let Self {
            limit,
            fair,
            buckets,
            queues,
            ..
        } = self;
        let Some(ring) = fair else {
            return Vec::new();
        };
        match limit {
            None => ring.plan(want, held, |_, n| n),
            Some(limit) if per_value => ring.plan(want, held, |q, n| {
                buckets
                    .entry(q.to_string())
                    .or_insert_with(|| Bucket::new(limit, since))
                    .take(n)
            }),
            Some(limit) => {
                let got = buckets
                    .entry(queues[0].clone())
                    .or_insert_with(|| Bucket::new(limit, since))
                    .take(want);
                let plan = ring.plan(got, held, |_, n| n);
                // What the ring did not place goes back.
                let placed: usize = plan.iter().map(|(_, n)| n).sum();
                if let Some(b) = buckets.get_mut(&queues[0]) {
                    b.give_back(got - placed);
                }
                plan
            }
        }
    }

    /// `n` jobs spread evenly over the queues, from where the last plan
    /// left off (one queue: all of them there).
    fn spread(&mut self, n: usize) -> Plan {
        let q = self.queues.len();
        let mut counts = vec![n / q; q];
        for k in 0..n % q {
            counts[(self.next + k) % q] += 1;
        }
        self.next = (self.next + 1) % q;
        self.collect(counts)
    }

    fn collect(&self, counts: Vec<usize>) -> Plan {
        self.queues
            .iter()
            .zip(counts)
            .filter(|(_, c)| *c > 0)
            .map(|(q, c)| (q.clone(), c))
            .collect()
    }

    /// Whether a claim spans several queues (claim once, then plan again).
    pub(crate) fn several(&self) -> bool {
        self.queues.len() > 1 || self.partitioned()
    }

    /// Whether a fair type's ring holds queues beyond the `planned` ones
    /// (a claim that finds nothing answers at once rather than wait).
    pub(crate) fn more_than(&self, planned: usize) -> bool {
        self.fair.as_ref().is_some_and(|r| r.len() > planned)
    }

    /// Settle the tokens of `plan` when its claim returns (`used`: jobs
    /// claimed per queue): those not used go back, and those used count
    /// from now, when their jobs start. A claim waits for jobs with its
    /// tokens in hand; counted from the plan, a token taken while the queue
    /// was empty would be spent long after, on top of the tokens earned
    /// meanwhile (with a burst of 1, two starts at once after a quiet
    /// spell).
    pub(crate) fn give_back(&mut self, plan: &Plan, used: &HashMap<&str, usize>) {
        let shared = !self.per_value_buckets();
        // Per bucket: tokens reserved, tokens used.
        let mut settled: HashMap<&str, (usize, usize)> = HashMap::new();
        for (queue, reserved) in plan {
            let used = used
                .get(queue.as_str())
                .copied()
                .unwrap_or(0)
                .min(*reserved);
            let bucket = if shared { &self.queues[0] } else { queue };
            let entry = settled.entry(bucket.as_str()).or_default();
            entry.0 += reserved;
            entry.1 += used;
        }
        for (bucket, (reserved, used)) in settled {
            if let Some(bucket) = self.buckets.get_mut(bucket) {
                bucket.settle(reserved, used);
            }
        }
    }

    /// How long until each bucket that decides a claim has a token: the
    /// type's one (not partitioned) or each queue's, a queue without a
    /// bucket as a bucket made now would say. Empty without a limit.
    fn waits(&self) -> impl Iterator<Item = Duration> + '_ {
        let limit = self.limit.as_ref();
        let fresh = limit.map(|l| Bucket::new(l, self.since).until_next());
        // Each value's bucket decides (a fair type's: those in its ring),
        // or the type's one.
        let deciding: Box<dyn Iterator<Item = &str> + '_> =
            match (self.per_value_buckets(), &self.fair) {
                (true, Some(ring)) => Box::new(ring.members()),
                (true, None) => Box::new(
                    self.queues
                        .iter()
                        .map(String::as_str)
                        .filter(|q| !self.paused.contains(*q)),
                ),
                (false, _) => Box::new(self.queues[..1].iter().map(String::as_str)),
            };
        deciding.filter_map(move |q| {
            fresh.map(|fresh| self.buckets.get(q).map_or(fresh, Bucket::until_next))
        })
    }

    /// How long until a throttled queue has a token again (`None`: none is
    /// throttled).
    pub(crate) fn next_token(&self) -> Option<Duration> {
        self.waits().filter(|d| !d.is_zero()).min()
    }

    /// How long until some queue has a token again.
    pub(crate) fn until_next(&self) -> Duration {
        self.waits().min().unwrap_or(Duration::ZERO)
    }
}

mod forget;
pub(crate) use forget::{ForgetCheck, check as check_forget, marked};
mod values;
pub(crate) use values::inserted_since;

#[cfg(test)]
mod tests;
