//! Claiming: the pool's one claim in flight, sized by its idle workers, run
//! in a task that waits on the queue's wake-up and counts each job's attempts
//! (see `attempts`) before it reports back; claims that land after the pool
//! stopped are given back.

use ractor::ActorRef;
use taquba::Claim;
use tracing::warn;

use super::{PoolMessage, PoolState};
use crate::exec::attempts::{self, Attempts};
use crate::exec::settle::{Claimed, Standing};
use crate::layout::keys;

/// Prefix of the exit reason of a pool whose store closed under it.
pub(crate) const STORE_CLOSED: &str = "store closed";

/// `Some(reason)` when `e` says the store is closed for good (fenced by
/// another writer, closed, or its background tasks died).
pub(crate) fn store_closed(e: &taquba::Error) -> Option<String> {
    match e {
        taquba::Error::Storage(s) => match s.kind() {
            slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced) => {
                Some("fenced: another process opened this store as its writer".into())
            }
            slatedb::ErrorKind::Closed(reason) => Some(format!("{reason:?}")),
            _ => None,
        },
        _ => None,
    }
}

/// Give claims back to the queue without counting an attempt (the pool that
/// claimed them is gone or stopping).
async fn release_all(services: &crate::services::Services, held: Vec<Held>, why: &str) {
    for h in held {
        let id = h.claim.id.clone();
        if let Err(e) = crate::exec::settle::give_back(services, h.into_claimed(), why).await {
            warn!(job_id = %id, error = %e, "giving a claim back failed; it runs again once its lease expires");
        }
    }
}

/// Claim up to `want` jobs of `name`, waiting for them (woken by the queue,
/// or every `poll`) until some come or the pool stops.
async fn claim_one(
    queue: &taquba::Queue,
    name: &str,
    want: usize,
    poll: std::time::Duration,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<Vec<Claim>, taquba::Error> {
    let lease = queue.queue_config(name).lease_duration;
    loop {
        if stop.is_cancelled() {
            return Ok(Vec::new());
        }
        match queue.claim_batch(name, want, lease).await {
            Ok(claims) if claims.is_empty() => {
                tokio::select! {
                    _ = queue.wait_for_jobs_on(name, poll) => {}
                    _ = stop.cancelled() => return Ok(claims),
                }
            }
            other => return other,
        }
    }
}

/// Claim what `plan` allows from each of its queues; when none has a job,
/// wait once (a job on one of them, a new partition, or `wait`) and answer
/// empty, so that the pool plans again.
async fn claim_planned(
    queue: &taquba::Queue,
    plan: &crate::exec::rate::Plan,
    wait: std::time::Duration,
    wake: &tokio::sync::Notify,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<Vec<Claim>, taquba::Error> {
    let mut claims = Vec::new();
    for (name, want) in plan {
        let lease = queue.queue_config(name).lease_duration;
        match queue.claim_batch(name, *want, lease).await {
            Ok(more) => claims.extend(more),
            // Jobs already claimed are reported (not left to their lease);
            // the error comes back at the next claim.
            Err(_) if !claims.is_empty() => return Ok(claims),
            Err(e) => return Err(e),
        }
    }
    if claims.is_empty() {
        let arrivals = plan
            .iter()
            .map(|(name, _)| Box::pin(queue.wait_for_jobs_on(name, wait)));
        tokio::select! {
            _ = futures_util::future::select_all(arrivals) => {}
            _ = wake.notified() => {}
            _ = stop.cancelled() => {}
        }
    }
    Ok(claims)
}

/// A claimed job, its attempts as gaffer counts them, and whether it is the
/// live job of the run it names (read with the claim, before any user code).
#[derive(Debug)]
pub struct Held {
    pub(super) claim: Claim,
    pub(super) attempts: Attempts,
    /// Its run's earlier claims (empty on a first claim), for its outcome
    /// record.
    pub(super) history: Vec<crate::layout::records::PastAttempt>,
    /// What it is to gaffer: the run it owns, or why it is not run.
    pub(super) standing: Standing,
    /// The attempt's `gaffer.job` span: the user's code and the settlement
    /// run inside it.
    pub(super) span: tracing::Span,
}

impl Held {
    /// The parts its settlement takes (the span goes to the task).
    pub(super) fn into_claimed(self) -> Claimed {
        Claimed {
            claim: self.claim,
            attempts: self.attempts,
            history: self.history,
            standing: self.standing,
        }
    }
}

impl PoolState {
    pub(super) fn maybe_claim(&mut self, myself: &ActorRef<PoolMessage>) {
        let want = self.want();
        if self.claiming.is_some() || want == 0 {
            return;
        }
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        // A rate-limited type claims no more than it may start: its backlog
        // waits in the queue (a partitioned limit: each value's in its own),
        // and the pool wakes when the next token is due.
        let plan = self.limiter.plan(want);
        if plan.is_empty() {
            if !self.rate_wake {
                self.rate_wake = true;
                myself.send_after(self.limiter.until_next(), || PoolMessage::Retry);
            }
            return;
        }
        self.claiming = Some(plan.clone());
        // Partition queues come and go: claim once, wait once (for a job on
        // a planned queue, a new partition or a token), then plan again.
        let once = self
            .limiter
            .several()
            .then(|| (self.partition_wake.clone(), self.limiter.next_token()));
        let metrics = self.metrics.clone();
        let services = self.args.services.clone();
        let stop = self.draining_token.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let poll = services.settings().poll_interval;
            let claimed = match once {
                None => claim_one(&queue, &plan[0].0, plan[0].1, poll, &stop).await,
                Some((wake, token)) => {
                    let wait = token.map_or(poll, |t| t.min(poll));
                    claim_planned(&queue, &plan, wait, &wake, &stop).await
                }
            };
            let result = match claimed {
                Ok(claims) => {
                    let settings = services.settings();
                    let counted = claims.into_iter().map(|claim| {
                        let queue = &queue;
                        let metrics = &metrics;
                        async move {
                            // Its attempts and its standing, read side by
                            // side: the one read a settlement used to make.
                            let ((attempts, own), standing) = futures_util::join!(
                                attempts::of(queue, &claim, settings),
                                crate::exec::settle::standing(queue, &claim)
                            );
                            let history = match &standing {
                                Standing::Owner(crate::exec::settle::Owner {
                                    run: Some(run),
                                    ..
                                }) => run.claims_with(own),
                                _ => own,
                            };
                            let span = crate::exec::settle::attempt_span(&claim, &attempts);
                            if let Some(at) = claim.claimed_at {
                                // Runnable since its enqueue, or its run_at
                                // (a schedule, a retry's backoff).
                                let since = claim.enqueued_at.max(claim.run_at.unwrap_or(0));
                                let waited = at.saturating_sub(since) as f64 / 1000.0;
                                metrics.queue_wait(waited);
                            }
                            Held {
                                claim,
                                attempts,
                                history,
                                standing,
                                span,
                            }
                        }
                    });
                    Ok(futures_util::future::join_all(counted).await)
                }
                Err(e) => Err(e),
            };
            // The pool stopped (or began draining) during the claim: give the
            // jobs back at once rather than let their leases run out.
            let result = match result {
                Ok(held) if stop.is_cancelled() => {
                    release_all(&services, held, "the pool stopped claiming").await;
                    Ok(Vec::new())
                }
                other => other,
            };
            if let Err(ractor::MessagingErr::SendErr(PoolMessage::Claimed(Ok(held)))) =
                myself.cast(PoolMessage::Claimed(result))
            {
                release_all(&services, held, "the pool stopped").await;
            }
        });
    }

    /// Learn the type's partition queues: those in the store now, and
    /// (`follow`: its limit is per header value) each one a submission
    /// names from now on, until the pool stops. A lag in the submissions'
    /// channel lists the store again.
    pub(super) fn watch_partitions(&self, myself: &ActorRef<PoolMessage>, follow: bool) {
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        let mut told = self.args.services.partition_events();
        let base = self.args.queue.clone();
        let stop = self.draining_token.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let mine = |q: &str| keys::partition_base(q) == Some(base.as_str());
            let mut list = true;
            loop {
                if list {
                    list = false;
                    match queue.view().list_queues().await {
                        Ok(all) => {
                            let found: Vec<String> = all.into_iter().filter(|q| mine(q)).collect();
                            if !found.is_empty()
                                && myself.cast(PoolMessage::Partitions(found)).is_err()
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
        });
    }

    pub(super) fn claimed(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        result: Result<Vec<Held>, taquba::Error>,
    ) {
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
                    self.dispatch(myself, h);
                }
                self.shrink();
                self.maybe_claim(myself);
            }
            Err(e) => {
                if let Some(reason) = store_closed(&e) {
                    // The store is gone (another process opened it as its
                    // writer, or it was closed): nothing this engine settles
                    // can commit any more. Exit; the supervisor takes the tree
                    // down.
                    myself.stop(Some(format!("{STORE_CLOSED}: {reason}")));
                    return;
                }
                // Claim again after the poll interval, not at once.
                warn!(job_type = %self.args.job_type, error = %e, "claiming failed; retrying after the poll interval");
                myself.send_after(self.settings().poll_interval, || PoolMessage::Retry);
            }
        }
        self.check_drained();
    }
}
