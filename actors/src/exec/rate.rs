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
    /// The type's queue first, then partition queues in the order learned.
    queues: Vec<String>,
    /// The same queues, to tell a new one at once.
    known: std::collections::HashSet<String>,
    /// Where the next plan starts (round robin over `queues`).
    next: usize,
    /// Buckets not full (a full bucket is the same as a new one, so it is
    /// dropped: the map stays as small as the set of recently busy values).
    buckets: HashMap<String, Bucket>,
    /// When the pool started: every bucket earns from here (see the
    /// module's note), also one made later for a value first seen later.
    since: Instant,
}

impl Limiter {
    /// A pool's limiter, at its start: its buckets start empty.
    pub(crate) fn new(queue: String, limit: Option<RateLimit>) -> Self {
        Self {
            limit,
            known: std::collections::HashSet::from([queue.clone()]),
            queues: vec![queue],
            next: 0,
            buckets: HashMap::new(),
            since: Instant::now(),
        }
    }

    /// Whether jobs of this type are spread over partition queues.
    pub(crate) fn partitioned(&self) -> bool {
        self.limit
            .as_ref()
            .is_some_and(|l| l.partition_header().is_some())
    }

    /// Learn a partition queue; `false` if it was known. A type whose
    /// limit is no longer per header still claims from the partition
    /// queues an earlier configuration left (sharing its one bucket).
    pub(crate) fn learn(&mut self, queue: String) -> bool {
        if !self.known.insert(queue.clone()) {
            return false;
        }
        self.queues.push(queue);
        true
    }

    /// Up to `want` jobs to claim, spread round robin over the queues whose
    /// buckets have tokens (the tokens are taken; give back what a claim
    /// did not use). Empty when every queue is throttled.
    pub(crate) fn plan(&mut self, want: usize) -> Plan {
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
        let mut dry = vec![false; n];
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

    /// Settle the tokens of `plan` when its claim returns (`used`: jobs
    /// claimed per queue): those not used go back, and those used count
    /// from now, when their jobs start. A claim waits for jobs with its
    /// tokens in hand; counted from the plan, a token taken while the queue
    /// was empty would be spent long after, on top of the tokens earned
    /// meanwhile (with a burst of 1, two starts at once after a quiet
    /// spell).
    pub(crate) fn give_back(&mut self, plan: &Plan, used: &HashMap<&str, usize>) {
        let shared = !self.partitioned();
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
        let deciding = if self.partitioned() {
            &self.queues[..]
        } else {
            &self.queues[..1]
        };
        deciding.iter().filter_map(move |q| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_needs_starts_and_a_period() {
        assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
        assert!(RateLimit::new(1, Duration::ZERO).is_err());
        assert_eq!(
            RateLimit::per_minute(3).unwrap().period(),
            Duration::from_secs(60)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_starts_empty_refills_at_the_rate_and_takes_back_what_was_not_used() {
        let mut b = Bucket::new(&RateLimit::per_second(2).unwrap(), Instant::now());
        // Empty at its start: the first token one interval on.
        assert_eq!(b.take(5), 0);
        assert_eq!(b.until_next(), Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(499)).await;
        assert_eq!(b.take(1), 0);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(b.take(3), 1);
        assert_eq!(b.until_next(), Duration::from_millis(500));
        // A period's worth later: the burst.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.take(5), 2);
        assert_eq!(b.take(1), 0);
        assert_eq!(b.until_next(), Duration::from_millis(500));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(b.take(3), 1);
        b.give_back(1);
        assert_eq!(b.take(3), 1);
        // Never more than a period's worth.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(b.is_full());
        assert_eq!(b.take(10), 2);

        // Made long after its pool's start: what it earned since, full.
        let started = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        let mut late = Bucket::new(&RateLimit::per_second(2).unwrap(), started);
        assert!(late.is_full());
        assert_eq!(late.take(5), 2);

        let mut spaced = Bucket::new(&RateLimit::per_second(2).unwrap().burst(1), Instant::now());
        assert_eq!(spaced.take(2), 0);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(spaced.take(2), 1);
        assert_eq!(spaced.until_next(), Duration::from_millis(500));
    }

    /// A pool's limiter at its start has no token for any queue (a value
    /// first seen later neither), says when the first one comes, and after
    /// the burst's worth of time has the burst.
    #[tokio::test(start_paused = true)]
    async fn a_limiter_starts_empty_for_every_queue() {
        let limit = RateLimit::per_second(2).unwrap().per_header("tenant");
        let mut l = Limiter::new("q".into(), Some(limit));
        assert!(l.learn("q..pa".into()));
        assert_eq!(l.plan(5), Vec::new());
        assert_eq!(l.until_next(), Duration::from_millis(500));
        assert_eq!(l.next_token(), Some(Duration::from_millis(500)));
        tokio::time::advance(Duration::from_millis(250)).await;
        // A value first seen now earns from the pool's start, not from now.
        assert!(l.learn("q..pb".into()));
        assert_eq!(l.until_next(), Duration::from_millis(250));
        tokio::time::advance(Duration::from_millis(250)).await;
        let mut plan = l.plan(5);
        plan.sort();
        assert_eq!(
            plan,
            vec![
                ("q".to_string(), 1),
                ("q..pa".to_string(), 1),
                ("q..pb".to_string(), 1)
            ]
        );
        // Unlimited: nothing to wait for.
        let mut plain = Limiter::new("q".into(), None);
        assert_eq!(plain.plan(3), vec![("q".to_string(), 3)]);
        assert_eq!(plain.until_next(), Duration::ZERO);
        assert_eq!(plain.next_token(), None);
    }

    /// A claim may wait long for jobs with its tokens reserved: the tokens
    /// its jobs used count from when it returned, not from when it was
    /// planned, so a token reserved while the queue was empty is not
    /// banked (with a burst of 1, two jobs arriving after a quiet second
    /// started together).
    #[tokio::test(start_paused = true)]
    async fn tokens_a_claim_used_count_from_when_it_returned() {
        for limit in [
            RateLimit::per_second(2).unwrap().burst(1),
            RateLimit::per_second(2)
                .unwrap()
                .burst(1)
                .per_header("tenant"),
        ] {
            let mut l = Limiter::new("q".into(), Some(limit));
            tokio::time::advance(Duration::from_millis(500)).await;
            let plan = l.plan(1);
            assert_eq!(plan, vec![("q".to_string(), 1)]);
            // The claim waits a second for a job, and brings one.
            tokio::time::advance(Duration::from_secs(1)).await;
            l.give_back(&plan, &HashMap::from([("q", 1)]));
            assert_eq!(l.plan(1), Vec::new(), "a second start at once");
            assert_eq!(l.until_next(), Duration::from_millis(500));
            // Nothing used: everything back, as before.
            tokio::time::advance(Duration::from_millis(500)).await;
            let plan = l.plan(1);
            assert_eq!(plan.len(), 1);
            l.give_back(&plan, &HashMap::new());
            assert_eq!(l.plan(1).len(), 1);
        }
    }

    /// A limit no longer per header shares the type's one bucket across
    /// the partition queues an earlier configuration left: with it empty,
    /// the pool waits for its next token (it was told "now" while some
    /// queue had no bucket, and woke again and again until the token).
    #[tokio::test(start_paused = true)]
    async fn a_shared_bucket_over_several_queues_says_when_its_next_token_comes() {
        let mut shared = Limiter::new("q".into(), Some(RateLimit::per_second(2).unwrap()));
        shared.learn("q..pa".into());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(shared.plan(10).iter().map(|(_, n)| n).sum::<usize>(), 2);
        assert_eq!(shared.plan(10), Vec::new());
        assert_eq!(shared.until_next(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_partitioned_plan_spreads_over_the_values_with_tokens() {
        let limit = RateLimit::per_second(2).unwrap().per_header("tenant");
        let mut l = Limiter::new("q".into(), Some(limit));
        assert!(l.learn("q..pa".into()));
        assert!(!l.learn("q..pa".into()));
        assert!(l.learn("q..pb".into()));
        // A period after the pool's start, every queue has its burst.
        tokio::time::advance(Duration::from_secs(1)).await;
        // 3 queues with 2 tokens each: 5 wanted are spread 2/2/1 or so.
        let plan = l.plan(5);
        let total: usize = plan.iter().map(|(_, n)| n).sum();
        assert_eq!(total, 5, "{plan:?}");
        assert!(plan.iter().all(|(_, n)| *n <= 2), "{plan:?}");
        // Nothing claimed from `q..pa`: its tokens come back.
        let mut used = HashMap::new();
        for (q, n) in &plan {
            if q != "q..pa" {
                used.insert(q.as_str(), *n);
            }
        }
        l.give_back(&plan, &used);
        // `q` spent its 2; `q..pa` has its 2 back; `q..pb` its one left.
        let mut again = l.plan(10);
        again.sort();
        assert_eq!(
            again,
            vec![("q..pa".to_string(), 2), ("q..pb".to_string(), 1)],
            "{plan:?} then {again:?}"
        );
        assert_eq!(l.plan(1), Vec::new());
        assert_eq!(l.until_next(), Duration::from_millis(500));
        // An unlimited type claims from its queue, and from partition
        // queues an earlier configuration left, sharing what it wants.
        let mut plain = Limiter::new("q".into(), None);
        assert_eq!(plain.plan(7), vec![("q".to_string(), 7)]);
        assert!(plain.learn("q..pa".into()));
        let mut spread = plain.plan(7);
        spread.sort();
        assert_eq!(
            spread,
            vec![("q".to_string(), 4), ("q..pa".to_string(), 3)],
            "{spread:?}"
        );
        // A limit no longer per header: one bucket across its queues.
        let mut shared = Limiter::new("q".into(), Some(RateLimit::per_second(3).unwrap()));
        shared.learn("q..pa".into());
        tokio::time::advance(Duration::from_secs(1)).await;
        let plan = shared.plan(10);
        assert_eq!(plan.iter().map(|(_, n)| n).sum::<usize>(), 3, "{plan:?}");
        shared.give_back(&plan, &HashMap::new());
        assert_eq!(shared.plan(10).iter().map(|(_, n)| n).sum::<usize>(), 3);
    }
}
