//! The pool's life: crashes and restarts of its workers, pausing and
//! resuming its type, giving claims back, and draining at shutdown.

use std::time::Duration;

use ractor::{ActorCell, ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tracing::{error, warn};

use super::{Held, PoolMessage, PoolState, SlotId};
use crate::erased::Verdict;
use crate::events::EngineEvent;
use crate::exec::effects::StagedEffects;
use crate::exec::memo::UnwrittenEntries;
use crate::exec::restarts::AfterCrash;
use crate::exec::settle::Ending;
use crate::layout::records::Cost;

impl PoolState {
    /// Claim nothing more until resumed (`why`: logged); jobs waiting here
    /// go back to the queue, running ones finish.
    pub(super) fn pause(&mut self, myself: &ActorRef<PoolMessage>, why: &str) {
        self.paused = true;
        self.metrics.paused(true);
        warn!(job_type = %self.args.job_type, "pausing the job type: {why} (its jobs stay queued)");
        self.args.services.emit(EngineEvent::JobTypePaused {
            job_type: self.args.job_type.clone(),
        });
        while let Some(held) = self.backlog.pop_front() {
            self.release(myself, held, "its job type is paused".into(), None);
        }
    }

    pub(super) async fn resume(&mut self, myself: &ActorRef<PoolMessage>) -> bool {
        if !self.paused {
            return false;
        }
        self.paused = false;
        self.metrics.paused(false);
        self.restarts.clear();
        let down: Vec<SlotId> = self
            .slots
            .iter()
            .filter(|(_, s)| s.worker.is_none())
            .map(|(id, _)| *id)
            .collect();
        for slot in down {
            self.spawn_worker(myself, slot).await;
        }
        self.args.services.emit(EngineEvent::JobTypeResumed {
            job_type: self.args.job_type.clone(),
        });
        self.maybe_claim(myself);
        true
    }

    /// An operator's pause or resume of one value (its partition queue
    /// `queue`): paused, its jobs waiting here go back to the queue
    /// without an attempt (running ones finish) and nothing more of it is
    /// claimed; resumed, it is claimed from again. Answers whether it
    /// changed.
    pub(super) fn pause_value(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        queue: &str,
        pause: bool,
    ) -> bool {
        let changed = self.limiter.pause_value(queue, pause);
        if pause {
            let (held, kept) = std::mem::take(&mut self.backlog)
                .into_iter()
                .partition(|h| &*h.claim.queue == queue);
            self.backlog = kept;
            for h in held {
                self.release(myself, h, "its value is paused".into(), None);
            }
        } else if changed {
            // A claim waiting on other queues answers, and the pool plans
            // again with this one.
            self.woke_ring();
            self.maybe_claim(myself);
        }
        changed
    }

    /// Give a claim back to the queue without counting an attempt.
    pub(super) fn release(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        held: Held,
        why: String,
        memo: Option<UnwrittenEntries>,
    ) {
        self.start_settlement(
            myself,
            held,
            Ending::Release(why),
            StagedEffects::default(),
            Cost::default(),
            memo,
        );
    }

    /// The drain's grace period is over: give back what still runs or waits
    /// here (their attempts are not counted) and stop those workers.
    pub(super) fn abandon(&mut self, myself: &ActorRef<PoolMessage>) {
        let mut held: Vec<(Held, Option<UnwrittenEntries>)> =
            self.backlog.drain(..).map(|h| (h, None)).collect();
        for slot in self.slots.values_mut() {
            if let Some(job) = slot.job.take() {
                if let Some(worker) = slot.worker.take() {
                    self.by_actor.remove(&worker.get_id());
                    worker.kill();
                }
                slot.parked = false;
                slot.waits = None;
                held.push((job, slot.memo.take().map(|m| m.take_unwritten())));
            }
        }
        self.parked = 0;
        for (h, memo) in held {
            self.abandoned += 1;
            warn!(job_type = %self.args.job_type, job_id = %h.claim.id, "shutdown grace period over; giving the job back to the queue");
            self.release(
                myself,
                h,
                "the engine shut down before the job finished (grace period over)".into(),
                memo,
            );
        }
        self.check_drained();
    }

    pub(super) fn check_drained(&mut self) {
        if self.drains.is_empty()
            || self.running() > 0
            || !self.backlog.is_empty()
            || !self.settling.is_empty()
            || self.claiming.is_some()
        {
            return;
        }
        for reply in self.drains.drain(..) {
            let _ = reply.send(self.abandoned);
        }
    }

    /// An attempt ended without a panic: a streak of panics is over, and
    /// workers still waiting out its backoff start now.
    pub(super) fn ended_normally(&mut self, myself: &ActorRef<PoolMessage>) {
        if !self.restarts.ended_normally() {
            return;
        }
        for (slot, s) in &self.slots {
            if s.worker.is_none() {
                let _ = myself.cast(PoolMessage::RestartWorker(*slot));
            }
        }
    }

    pub(super) fn crashed(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        who: ActorCell,
        reason: String,
    ) {
        let Some(slot) = self.by_actor.remove(&who.get_id()) else {
            return;
        };
        self.idle.retain(|s| *s != slot);
        self.crashes += 1;
        self.metrics.handler_crashed();
        let services = self.args.services.clone();
        services.emit(EngineEvent::HandlerCrashed {
            job_type: self.args.job_type.clone(),
            reason: reason.clone(),
        });
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        s.worker = None;
        s.waits = None;
        let was_parked = std::mem::take(&mut s.parked);
        let job = s.job.take();
        let memo = s.memo.take().map(|m| m.take_unwritten());
        if was_parked {
            self.parked -= 1;
        }
        if let Some(held) = job {
            warn!(job_type = %self.args.job_type, job_id = %held.claim.id, %reason, "handler crashed; nacking its job");
            self.start_settlement(
                myself,
                held,
                Ending::Verdict(Verdict::transient(format!("handler crashed: {reason}"))),
                StagedEffects::default(),
                Cost::default(),
                memo,
            );
        }
        let delay = match self.restarts.crashed(Instant::now(), self.args.concurrency) {
            AfterCrash::Restart(delay) => Some(delay),
            AfterCrash::Pause { recent } => {
                if !self.paused {
                    error!(job_type = %self.args.job_type, crashes = recent, "job type crashed too often");
                    self.pause(
                        myself,
                        &format!("{recent} worker crashes within the restart window"),
                    );
                }
                None
            }
        };
        if self.excess() > 0 {
            // A slot added for a parked job: not needed any more.
            self.retire(slot);
        } else if let Some(delay) = delay
            && !self.paused
            && !self.draining
        {
            if delay.is_zero() {
                let _ = myself.cast(PoolMessage::RestartWorker(slot));
            } else {
                myself.send_after(delay, move || PoolMessage::RestartWorker(slot));
            }
        }
        self.check_drained();
    }

    /// Start the worker of `slot` again after its crash and backoff.
    pub(super) async fn restart_worker(&mut self, myself: &ActorRef<PoolMessage>, slot: SlotId) {
        let down = self.slots.get(&slot).is_some_and(|s| s.worker.is_none());
        if down && self.excess() > 0 {
            // A slot added for a parked job: not needed any more.
            self.retire(slot);
        } else if down && !self.paused && !self.draining {
            self.spawn_worker(myself, slot).await;
            self.args.services.emit(EngineEvent::HandlerRestarted {
                job_type: self.args.job_type.clone(),
            });
            if let Some(next) = self.backlog.pop_front() {
                self.dispatch(myself, next);
            }
            self.maybe_claim(myself);
        }
    }

    /// An operator's pause: answers whether the type was running.
    pub(super) fn operator_pause(&mut self, myself: &ActorRef<PoolMessage>) -> bool {
        let was_running = !self.paused;
        if was_running {
            self.pause(myself, "an operator paused it");
        }
        was_running
    }

    /// Stop claiming; `reply` once nothing is held (see
    /// [`PoolMessage::Drain`]).
    pub(super) fn drain(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        grace: Option<Duration>,
        reply: RpcReplyPort<usize>,
    ) {
        self.draining = true;
        self.draining_token.cancel();
        self.drains.push(reply);
        // Jobs waiting for a worker have not started: give them back.
        while let Some(held) = self.backlog.pop_front() {
            self.release(myself, held, "the engine shut down".into(), None);
        }
        if let Some(grace) = grace {
            myself.send_after(grace, || PoolMessage::DrainDeadline);
        }
        self.check_drained();
    }
}
