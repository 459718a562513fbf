//! Claimer: one per queue, a linked child of its handler pool. It claims
//! when its pool asks, as many jobs as the pool has room for, waits on the
//! queue's wake-up until some come (or the pool stops), reads each job's
//! attempts and standing before any user code runs, and answers the pool
//! with [`Claimed`].
//!
//! The pool owns the capacity (how many to claim, from which queues, the
//! rate limit's tokens); the claimer owns nothing but the wait. It waits
//! inside its own `handle`, which is what it is for: nothing else is ever
//! in its mailbox, and the pool never waits on it. If it dies (a panic while
//! it reads a job's records), its pool is told by supervision, gives the
//! plan's tokens back, starts a new claimer and asks again; the jobs it had
//! claimed are redelivered when their leases expire.
//!
//! It reaches its pool only through a `DerivedActorRef<Claimed>`, so it
//! names no type of the pool's. Claims that land after the pool stopped (the
//! stop token is cancelled, or the answer finds no pool) are given back to
//! the queue at once rather than left to their leases.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, DerivedActorRef};
use taquba::Claim;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::exec::attempts::{self, Attempts};
use crate::exec::rate::Plan;
use crate::exec::settle::{self, Standing};
use crate::services::Services;
use crate::telemetry::TypeMetrics;

/// A claimed job, its attempts as gaffer counts them, and whether it is the
/// live job of the run it names (read with the claim, before any user code).
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) claim: Claim,
    pub(crate) attempts: Attempts,
    /// Its run's earlier claims (empty on a first claim), for its outcome
    /// record.
    pub(crate) history: Vec<crate::layout::records::PastAttempt>,
    /// What it is to gaffer: the run it owns, or why it is not run.
    pub(crate) standing: Standing,
    /// The attempt's `gaffer.job` span: the user's code and the settlement
    /// run inside it.
    pub(crate) span: tracing::Span,
}

impl Held {
    /// The parts its settlement takes (the span goes to the task).
    pub(crate) fn into_claimed(self) -> settle::Claimed {
        settle::Claimed {
            claim: self.claim,
            attempts: self.attempts,
            history: self.history,
            standing: self.standing,
        }
    }
}

/// A claim's answer to the pool: the jobs claimed, or the queue's error,
/// and the planned queues that came back short (fewer jobs than planned:
/// drained for now). A queue not tried because of an error is not drained;
/// nor is one whose wake-up ended the claim's wait.
#[derive(Debug)]
pub(crate) struct Claimed {
    /// The jobs claimed, or the queue's error.
    pub result: Result<Vec<Held>, taquba::Error>,
    /// Planned queues that had fewer jobs than planned.
    pub drained: Vec<String>,
}

/// What a pool asks its claimer for.
#[derive(Debug)]
pub(crate) struct Ask {
    /// How many jobs from which queues (a queue per partition under a rate
    /// limit per header value; else the pool's one queue).
    pub(crate) plan: Plan,
    /// With several queues: claim once and wait once (for a job on one of
    /// them, a new partition through `wake`, or the next token, at most
    /// `wait`; a zero `wait`: not at all), then answer, empty or not, so
    /// that the pool plans again. `None`: wait on the one queue until jobs
    /// come.
    pub(crate) once: Option<(Arc<tokio::sync::Notify>, Duration)>,
    /// Cancelled when the pool drains or stops: the claimer answers at
    /// once, and gives back what it claimed meanwhile.
    pub(crate) stop: CancellationToken,
}

/// Messages of a claimer.
#[derive(Debug)]
pub(crate) enum ClaimerMessage {
    /// Claim what the ask allows; answer [`Claimed`].
    Claim(Ask),
}

/// Arguments of a claimer.
#[derive(Clone)]
pub(crate) struct ClaimerArguments {
    /// Engine services (the queue, settings).
    pub(crate) services: Arc<Services>,
    /// The type's metric handles (queue waits).
    pub(crate) metrics: TypeMetrics,
    /// Where answers go: its pool.
    pub(crate) to: DerivedActorRef<Claimed>,
}

impl std::fmt::Debug for ClaimerArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimerArguments").finish_non_exhaustive()
    }
}

/// The claimer actor.
#[derive(Debug)]
pub(crate) struct Claimer;

impl Actor for Claimer {
    type Msg = ClaimerMessage;
    type State = ClaimerArguments;
    type Arguments = ClaimerArguments;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ClaimerArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let ClaimerMessage::Claim(ask) = message;
        let (result, drained) = claim(&state.services, &state.metrics, &ask).await;
        // The pool stopped (or began draining) during the claim: give the
        // jobs back at once rather than let their leases run out.
        let result = match result {
            Ok(held) if ask.stop.is_cancelled() => {
                release_all(&state.services, held, "the pool stopped claiming").await;
                Ok(Vec::new())
            }
            other => other,
        };
        if let Err(ractor::MessagingErr::SendErr(Claimed {
            result: Ok(held), ..
        })) = state.to.send_message(Claimed { result, drained })
        {
            release_all(&state.services, held, "the pool stopped").await;
        }
        Ok(())
    }
}

/// Claim as `ask` says and read each job's attempts and standing; with
/// the planned queues that came back short.
async fn claim(
    services: &Services,
    metrics: &TypeMetrics,
    ask: &Ask,
) -> (Result<Vec<Held>, taquba::Error>, Vec<String>) {
    let mut drained = Vec::new();
    let result = claim_into(services, metrics, ask, &mut drained).await;
    (result, drained)
}

async fn claim_into(
    services: &Services,
    metrics: &TypeMetrics,
    ask: &Ask,
    drained: &mut Vec<String>,
) -> Result<Vec<Held>, taquba::Error> {
    let queue = match services.queue() {
        Ok(queue) => queue,
        // The engine is shutting down: nothing to claim.
        Err(_) => return Ok(Vec::new()),
    };
    let Some((first, want)) = ask.plan.first() else {
        return Ok(Vec::new());
    };
    #[cfg(feature = "testing")]
    crate::testing::panics::check(crate::testing::panics::PanicPoint::Claim, first);
    let poll = services.settings().poll_interval;
    let claims = match &ask.once {
        None => claim_one(&queue, first, *want, poll, &ask.stop).await?,
        Some((wake, wait)) => {
            claim_planned(&queue, &ask.plan, *wait, wake, &ask.stop, drained).await?
        }
    };
    let settings = services.settings();
    let counted = claims.into_iter().map(|claim| {
        let queue = &queue;
        async move {
            // Its attempts and its standing, read side by side: the one
            // read a settlement used to make.
            let ((attempts, own), standing) = futures_util::join!(
                attempts::of(queue, &claim, settings),
                settle::standing(queue, &claim, &settings.encryption)
            );
            let history = match &standing {
                Standing::Owner(settle::Owner { run: Some(run), .. }) => run.claims_with(own),
                _ => own,
            };
            let span = settle::attempt_span(&claim, &attempts);
            if let Some(at) = claim.claimed_at {
                // Runnable since its enqueue, or its run_at (a schedule, a
                // retry's backoff).
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

/// Give claims back to the queue without counting an attempt (the pool that
/// claimed them is gone or stopping).
async fn release_all(services: &Services, held: Vec<Held>, why: &str) {
    for h in held {
        let id = h.claim.id.clone();
        if let Err(e) = settle::give_back(services, h.into_claimed(), why).await {
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
    poll: Duration,
    stop: &CancellationToken,
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

/// Claim what `plan` allows from each of its queues (noting in `drained`
/// each that had fewer jobs than planned); when none has a job, wait once
/// (a job on one of them, a new partition, or `wait`; a zero `wait`: not
/// at all) and answer empty, so that the pool plans again. A queue whose
/// wake-up ended the wait is not drained: its new job is claimed at the
/// next plan (the wait took the wake-up's permit, which the pool's idle
/// check would otherwise have seen).
async fn claim_planned(
    queue: &taquba::Queue,
    plan: &Plan,
    wait: Duration,
    wake: &tokio::sync::Notify,
    stop: &CancellationToken,
    drained: &mut Vec<String>,
) -> Result<Vec<Claim>, taquba::Error> {
    // The queues are claimed at once, not one after the other: each claim
    // is a transaction of its own queue's keys (no two conflict), and
    // together they wait for one flush rather than one each (a fair type
    // with many values plans one job from each of many queues).
    let results = futures_util::future::join_all(plan.iter().map(|(name, want)| {
        let lease = queue.queue_config(name).lease_duration;
        queue.claim_batch(name, *want, lease)
    }))
    .await;
    let mut claims = Vec::new();
    let mut failed = None;
    for ((name, want), result) in plan.iter().zip(results) {
        match result {
            Ok(more) => {
                if more.len() < *want {
                    drained.push(name.clone());
                }
                claims.extend(more);
            }
            // Jobs claimed beside it are reported (not left to their
            // lease); the error comes back at the next claim.
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed
        && claims.is_empty()
    {
        return Err(e);
    }
    if claims.is_empty() && !wait.is_zero() {
        // Each queue's wait is bounded by the one timeout around them all,
        // so that a wake-up tells which queue had an insert.
        let arrivals = plan
            .iter()
            .map(|(name, _)| Box::pin(queue.wait_for_jobs_on(name, Duration::from_secs(3600))));
        tokio::select! {
            woke = tokio::time::timeout(wait, futures_util::future::select_all(arrivals)) => {
                if let Ok((_, i, _)) = woke
                    && let Some((name, _)) = plan.get(i)
                {
                    drained.retain(|d| d != name);
                }
            }
            _ = wake.notified() => {}
            _ = stop.cancelled() => {}
        }
    }
    Ok(claims)
}
