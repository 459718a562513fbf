//! Claimer: claims jobs from the queue in batches sized to the free handler
//! capacity (its credits) and routes each to its job type's pool.
//!
//! Owns the credits and the routing table. At most one claim is in flight; it
//! runs in a task that claims, and when the queue is empty waits on taquba's
//! in-process wake-up (enqueue, retry, scheduled promotion, reap) for at most
//! the poll interval, then reports back by message. A delivery no handler can
//! take (unknown type) is settled here as a recorded permanent failure.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::Claim;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::handler::Verdict;
use crate::pool::PoolMessage;
use crate::services::Services;
use crate::settle::{Notify, identify, settle};

/// Prefix of the exit reason of a claimer whose store closed under it.
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

/// Messages of the claimer.
#[derive(Debug)]
pub enum ClaimerMessage {
    /// Set the routing table (job type → pool) and start claiming.
    Route(HashMap<String, ActorRef<PoolMessage>>),
    /// A claim finished.
    Claimed(Result<Vec<Claim>, taquba::Error>),
    /// Handler capacity came back.
    Credit(usize),
    /// Time to try claiming again (after an error).
    Retry,
    /// Stop claiming; reply once no claim is in flight.
    Drain(RpcReplyPort<()>),
    /// The waiters or the batches registry restarted: tell the new ones.
    SetNotify(Notify),
    /// Set the free credits (reconciliation after a restart); answers the old value.
    SetCredits(usize, RpcReplyPort<usize>),
    /// Current free credits (for tests and reconciliation).
    GetCredits(RpcReplyPort<usize>),
}

/// Arguments of the claimer.
#[derive(Debug)]
pub struct ClaimerArguments {
    /// Engine services.
    pub services: Arc<Services>,
    /// Who settlements tell.
    pub(crate) notify: Notify,
    /// The taquba queue this claimer claims from.
    pub queue_name: String,
    /// Handler capacity behind it.
    pub credits: usize,
}

/// The claimer actor.
#[derive(Debug)]
pub struct Claimer;

/// State of the claimer.
#[derive(Debug)]
pub struct ClaimerState {
    services: Arc<Services>,
    notify: Notify,
    queue_name: String,
    routes: Option<HashMap<String, ActorRef<PoolMessage>>>,
    credits: usize,
    claiming: bool,
    stop: CancellationToken,
    drains: Vec<RpcReplyPort<()>>,
}

impl ClaimerState {
    fn draining(&self) -> bool {
        self.stop.is_cancelled()
    }

    fn maybe_claim(&mut self, myself: &ActorRef<ClaimerMessage>) {
        if self.claiming || self.credits == 0 || self.draining() || self.routes.is_none() {
            return;
        }
        let Ok(queue) = self.services.queue() else {
            return;
        };
        self.claiming = true;
        let name = self.queue_name.clone();
        let poll = self.services.settings().poll_interval;
        let max = self.credits;
        let stop = self.stop.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let lease = queue.queue_config(&name).lease_duration;
            let result = loop {
                match queue.claim_batch(&name, max, lease).await {
                    Ok(claims) if claims.is_empty() => {
                        tokio::select! {
                            _ = queue.wait_for_jobs_on(&name, poll) => {}
                            _ = stop.cancelled() => break Ok(claims),
                        }
                    }
                    Ok(claims) => break Ok(claims),
                    Err(e) => break Err(e),
                }
            };
            drop(queue);
            let _ = myself.cast(ClaimerMessage::Claimed(result));
        });
    }

    fn claimed(
        &mut self,
        myself: &ActorRef<ClaimerMessage>,
        result: Result<Vec<Claim>, taquba::Error>,
    ) {
        self.claiming = false;
        match result {
            Ok(claims) => {
                for claim in claims {
                    self.route(claim);
                }
            }
            Err(e) if store_closed(&e).is_some() => {
                // The store is gone (another process opened it as its writer, or
                // it was closed): nothing this engine settles can commit any
                // more. Exit; the supervisor takes the tree down.
                let reason = store_closed(&e).unwrap_or_default();
                myself.stop(Some(format!("{STORE_CLOSED}: {reason}")));
                return;
            }
            Err(e) => {
                warn!(error = %e, "claiming failed; retrying after the poll interval");
                let poll = self.services.settings().poll_interval;
                myself.send_after(poll, || ClaimerMessage::Retry);
            }
        }
        if self.draining() {
            for reply in self.drains.drain(..) {
                let _ = reply.send(());
            }
        } else {
            self.maybe_claim(myself);
        }
    }

    fn route(&mut self, claim: Claim) {
        let (_, job_type) = identify(&claim);
        let pool = self.routes.as_ref().and_then(|r| r.get(&job_type)).cloned();
        let verdict = match pool {
            Some(pool) => match pool.cast(PoolMessage::Dispatch(Box::new(claim))) {
                Ok(()) => {
                    self.credits -= 1;
                    return;
                }
                Err(ractor::MessagingErr::SendErr(PoolMessage::Dispatch(claim))) => {
                    self.settle_here(
                        *claim,
                        Verdict::transient(format!(
                            "the handler pool of `{job_type}` is unavailable"
                        )),
                    );
                    return;
                }
                Err(_) => return,
            },
            None if job_type.is_empty() => Verdict::permanent(
                "job has no `gaffer.type` header: it was not submitted through gaffer",
            ),
            None => Verdict::permanent(format!("no handler registered for job type `{job_type}`")),
        };
        self.settle_here(claim, verdict);
    }

    fn settle_here(&self, claim: Claim, verdict: Verdict) {
        let services = self.services.clone();
        let notify = self.notify.clone();
        tokio::spawn(async move {
            settle(
                &services,
                &notify,
                claim,
                verdict,
                Default::default(),
                Default::default(),
            )
            .await;
        });
    }
}

impl Actor for Claimer {
    type Msg = ClaimerMessage;
    type State = ClaimerState;
    type Arguments = ClaimerArguments;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ClaimerArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ClaimerState {
            services: args.services,
            notify: args.notify,
            queue_name: args.queue_name,
            credits: args.credits,
            routes: None,
            claiming: false,
            stop: CancellationToken::new(),
            drains: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ClaimerMessage::Route(routes) => {
                state.routes = Some(routes);
                state.maybe_claim(&myself);
            }
            ClaimerMessage::Claimed(result) => state.claimed(&myself, result),
            ClaimerMessage::Credit(n) => {
                state.credits += n;
                state.maybe_claim(&myself);
            }
            ClaimerMessage::Retry => state.maybe_claim(&myself),
            ClaimerMessage::Drain(reply) => {
                state.stop.cancel();
                if state.claiming {
                    state.drains.push(reply);
                } else {
                    let _ = reply.send(());
                }
            }
            ClaimerMessage::SetNotify(notify) => state.notify = notify,
            ClaimerMessage::SetCredits(n, reply) => {
                let _ = reply.send(std::mem::replace(&mut state.credits, n));
            }
            ClaimerMessage::GetCredits(reply) => {
                let _ = reply.send(state.credits);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.stop.cancel();
        Ok(())
    }
}
