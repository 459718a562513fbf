//! Claiming, the pool's side: its one claim in flight, sized by its idle
//! workers and its rate limit, asked of its claimer (`exec::claimer`), and
//! the answer dispatched; the partition queues of a type rate-limited per
//! header value followed.

use std::collections::HashMap;

use ractor::ActorRef;
use tracing::warn;

use super::{PoolMessage, PoolState, StoreClosed};
use crate::exec::claimer::{Ask, Claimed, Claimer, ClaimerArguments, ClaimerMessage};
use crate::layout::keys;

impl PoolState {
    /// Start its claimer, a linked child (its death is a supervision
    /// event: [`Self::claimer_died`]).
    pub(super) async fn spawn_claimer(&mut self, myself: &ActorRef<PoolMessage>) {
        let args = ClaimerArguments {
            services: self.args.services.clone(),
            metrics: self.metrics.clone(),
            to: myself.get_derived(),
        };
        match ractor::Actor::spawn_linked(None, Claimer, args, myself.get_cell()).await {
            Ok((claimer, _)) => self.claimer = Some(claimer),
            Err(e) => {
                // Its start does nothing that can fail; try again after
                // the poll interval rather than never claim.
                warn!(job_type = %self.args.job_type, error = %e, "starting the claimer failed; trying again");
                myself.send_after(self.settings().poll_interval, || {
                    PoolMessage::RestartClaimer
                });
            }
        }
    }

    /// Its claimer died (a panic while it read a claimed job's records):
    /// the claim in flight is over (its tokens go back; jobs it had claimed
    /// come back when their leases expire), and a new claimer starts after
    /// the poll interval, so a claimer that dies at once every time does
    /// not spin.
    pub(super) fn claimer_died(&mut self, myself: &ActorRef<PoolMessage>, reason: String) {
        warn!(job_type = %self.args.job_type, %reason, "the claimer died; starting a new one");
        self.claimer = None;
        if let Some(plan) = self.claiming.take() {
            self.limiter.give_back(&plan, &Default::default());
        }
        crate::telemetry::restarted("claimer");
        myself.send_after(self.settings().poll_interval, || {
            PoolMessage::RestartClaimer
        });
        self.check_drained();
    }

    /// Start a new claimer in place of a dead one, and ask it.
    pub(super) async fn restart_claimer(&mut self, myself: &ActorRef<PoolMessage>) {
        if self.claimer.is_none() && !self.draining {
            self.spawn_claimer(myself).await;
            self.maybe_claim(myself);
        }
    }

    pub(super) fn maybe_claim(&mut self, myself: &ActorRef<PoolMessage>) {
        let want = self.want();
        if self.claiming.is_some() || want == 0 {
            return;
        }
        let Some(claimer) = self.claimer.clone() else {
            // Being replaced: the new claimer is asked when it starts.
            return;
        };
        // A rate-limited type claims no more than it may start: its backlog
        // waits in the queue (a partitioned limit: each value's in its own),
        // and the pool wakes when the next token is due. A fair type with a
        // limit per key counts what each value holds now.
        let plan = if self.limiter.key_limit().is_some() {
            let held = held_per_queue(&self.slots, &self.backlog, &self.settling);
            self.limiter.plan_held(want, &held)
        } else {
            self.limiter.plan(want)
        };
        if plan.is_empty() {
            // A fair type whose ring is empty has nothing ready: it plans
            // again when a queue joins (a submission, a settlement, the idle
            // check).
            if self.limiter.ring().is_some_and(|r| r.len() == 0) {
                return;
            }
            if !self.rate_wake {
                self.rate_wake = true;
                myself.send_after(self.limiter.until_next(), || PoolMessage::Retry);
            }
            return;
        }
        // Partition queues come and go: claim once, wait once (for a job on
        // a planned queue, a new partition or a token), then plan again.
        let poll = self.settings().poll_interval;
        let once = self.limiter.several().then(|| {
            let wait = self.limiter.next_token().map_or(poll, |t| t.min(poll));
            // A fair type with other queues in its ring than those planned
            // tries them at once if these come back empty.
            let wait = if self.limiter.more_than(plan.len()) {
                std::time::Duration::ZERO
            } else {
                wait
            };
            (self.partition_wake.clone(), wait)
        });
        let ask = Ask {
            plan: plan.clone(),
            once,
            stop: self.draining_token.clone(),
        };
        if claimer.cast(ClaimerMessage::Claim(ask)).is_ok() {
            self.claiming = Some(plan);
        } else {
            // It died: its supervision event starts a new one, which is
            // asked then; the tokens go back now.
            self.limiter.give_back(&plan, &Default::default());
        }
    }

    /// Learn the type's partition queues: those the store marks now (see
    /// `exec::rate::forget::marked`), and (`follow`: its jobs are spread
    /// over partition queues) each one a submission names from now on,
    /// until the pool stops. A lag in the submissions' channel lists the
    /// marks again, and so does a fair type every `forget_drained_after` (a queue
    /// it forgot just before a job's commit landed on it).
    pub(super) fn watch_partitions(&self, myself: &ActorRef<PoolMessage>, follow: bool) {
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        let mut told = self.args.services.partition_events();
        let base = self.args.queue.clone();
        let stop = self.draining_token.clone();
        let forgets = self.limiter.ring().is_some();
        let every = self.settings().forget_drained_after;
        let myself = myself.clone();
        let me = myself.clone();
        let work = async move {
            let mut relist = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            // The type's own queue too: a submission without the header
            // names it (`Services::queue_for_job`), and a fair type's ring
            // must hear of it as of any value's queue.
            let mine = |q: &str| q == base || keys::partition_base(q) == Some(base.as_str());
            let mut list = true;
            loop {
                if list {
                    list = false;
                    match crate::exec::rate::marked(&queue, &base).await {
                        Ok(found) => {
                            if !found.is_empty() && myself.cast(PoolMessage::Listed(found)).is_err()
                            {
                                return;
                            }
                        }
                        Err(e) => {
                            warn!(queue = %base, error = %e, "listing the partition queues failed; new ones are still learned as jobs are submitted");
                        }
                    }
                }
                if !follow {
                    return;
                }
                let q = tokio::select! {
                    q = told.recv() => q,
                    _ = relist.tick(), if forgets => {
                        list = true;
                        continue;
                    }
                    _ = stop.cancelled() => return,
                };
                match q {
                    Ok(q) if mine(&q) => {
                        if myself.cast(PoolMessage::Partitions(vec![q])).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => list = true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        };
        crate::task::spawn_reported(work, move |ended| {
            let early = ended.err().map(|e| e.to_string());
            let _ = me.cast(PoolMessage::PartitionsEnded(early));
        });
    }

    /// The partition follower ended: started again if it ended early (a
    /// panic) while the pool still claims.
    pub(super) fn partitions_ended(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        early: Option<String>,
    ) {
        if let Some(how) = early
            && !self.draining
        {
            warn!(job_type = %self.args.job_type, %how, "following the partition queues ended early; starting again");
            let follow = self.limiter.partitioned();
            self.watch_partitions(myself, follow);
        }
    }

    /// A queue joined a fair type's ring: a claim waiting on other queues
    /// answers now, so that the pool plans again.
    pub(super) fn woke_ring(&self) {
        if self.claiming.is_some() {
            self.partition_wake.notify_one();
        }
    }

    /// A fair type's idle check (see [`PoolMessage::CheckIdle`]).
    pub(super) fn check_idle(&mut self, myself: &ActorRef<PoolMessage>) {
        if self.draining || self.closed {
            return;
        }
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        if self.limiter.check_idle(&queue) > 0 {
            self.woke_ring();
            self.maybe_claim(myself);
        }
        let due = self
            .limiter
            .due_for_check(self.settings().forget_drained_after);
        if !due.is_empty() {
            let me = myself.clone();
            let services = self.args.services.clone();
            let work =
                async move { crate::exec::rate::check_forget(&queue, services.marks(), due).await };
            crate::task::spawn_reported(work, move |ended| {
                let found = match ended {
                    Ok(Ok(found)) => Some(found),
                    Ok(Err(e)) => {
                        warn!(error = %e, "checking idle partition queues failed; trying again later");
                        None
                    }
                    Err(e) => {
                        warn!(error = %e, "checking idle partition queues ended early; trying again later");
                        None
                    }
                };
                let _ = me.cast(PoolMessage::ForgetChecked(found));
            });
        }
    }

    /// A forget check ended: the queues nothing woke meanwhile are
    /// forgotten; those that woke join the ring.
    pub(super) fn forget_checked(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        found: Option<crate::exec::rate::ForgetCheck>,
    ) {
        let Ok(queue) = self.args.services.queue() else {
            self.limiter.forgot(None, |_| false);
            return;
        };
        let woke = self
            .limiter
            .forgot(found, |q| crate::exec::rate::inserted_since(&queue, q));
        if !woke.is_empty() {
            self.woke_ring();
            self.maybe_claim(myself);
        }
    }

    pub(super) fn claimed(&mut self, myself: &ActorRef<PoolMessage>, claimed: Claimed) {
        let Claimed { result, drained } = claimed;
        self.limiter.drained(&drained);
        if let Some(plan) = self.claiming.take() {
            let mut used = std::collections::HashMap::new();
            for h in result.iter().flatten() {
                *used.entry(&*h.claim.queue).or_insert(0) += 1;
            }
            self.limiter.give_back(&plan, &used);
        }
        match result {
            Ok(held) => {
                for h in held {
                    // A claim planned before its value's pause.
                    if self.limiter.is_paused(&h.claim.queue) {
                        self.release(myself, h, "its value is paused".into(), None);
                    } else {
                        self.dispatch(myself, h);
                    }
                }
                self.shrink();
                self.maybe_claim(myself);
            }
            Err(e) => {
                if let Some(reason) = crate::error::store_closed(&e) {
                    // The store is gone (another process opened it as its
                    // writer, or it was closed): nothing this engine settles
                    // can commit any more. Claim nothing more and tell the
                    // supervisor, which takes the tree down.
                    self.closed = true;
                    let _ = self.args.closed.send_message(StoreClosed { reason });
                    return;
                }
                // Claim again after the poll interval, not at once.
                warn!(job_type = %self.args.job_type, error = %e, "claiming failed; retrying after the poll interval");
                myself.send_after(self.settings().poll_interval, || PoolMessage::Retry);
            }
        }
        self.check_drained();
    }

    /// Claim again (after an error, or when the rate limit has a token).
    pub(super) fn retry(&mut self, myself: &ActorRef<PoolMessage>) {
        self.rate_wake = false;
        self.maybe_claim(myself);
    }

    /// Partition queues learned: claim from them too. With `wake` (a
    /// submission named them: each has a job, or will once the submission
    /// commits), a fair type puts each in its ring; without (a listing),
    /// only those it did not know join it.
    pub(super) fn learn_partitions(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        queues: Vec<String>,
        wake: bool,
    ) {
        let mut learned = false;
        let mut woke = false;
        for q in queues {
            if wake {
                woke |= self.limiter.wake(&q);
            }
            learned |= self.limiter.learn(q);
        }
        if learned || woke {
            if learned || self.claiming.is_some() {
                self.partition_wake.notify_one();
            }
            self.maybe_claim(myself);
        }
    }
}

/// How many jobs of each queue the pool holds: running (parked ones too),
/// waiting in its backlog, settling. What a fair type's limit per key
/// counts, derived from the pool's state each time it plans.
fn held_per_queue<'a>(
    slots: &'a std::collections::BTreeMap<super::SlotId, super::Slot>,
    backlog: &'a std::collections::VecDeque<crate::exec::claimer::Held>,
    settling: &'a HashMap<u64, super::Settling>,
) -> HashMap<&'a str, usize> {
    let mut held: HashMap<&str, usize> = HashMap::new();
    let claims = slots
        .values()
        .filter_map(|s| s.job.as_ref())
        .chain(backlog.iter())
        .map(|h| &*h.claim.queue);
    for q in claims.chain(settling.values().map(|s| s.queue.as_str())) {
        *held.entry(q).or_insert(0) += 1;
    }
    held
}
