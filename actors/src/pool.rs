//! Handler pool: one per job type. Owns the type's worker actors, the claims
//! they hold, a small backlog, and the settlements in flight.
//!
//! The pool, not the worker, holds each `Claim`: a worker gets a copy of the
//! job and its lease, runs the user's code and reports a verdict. So when a
//! worker crashes (a panic in user code), the pool still holds the claim and
//! nacks it at once, then restarts the worker after a backoff. Settlements run
//! in short tasks so a worker takes its next job while the last one's commit
//! waits for the queue's flush; the credit for a job goes back to the claimer
//! when its worker is free, unless `settlement_window` commits are in flight.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use taquba::Claim;
use tokio::time::Instant;
use tracing::{error, warn};

use crate::claimer::ClaimerMessage;
use crate::effects::{CostMeter, Effects, StagedEffects};
use crate::events::EngineEvent;
use crate::handler::{Delivery, ErasedHandler, ItemInfo, Verdict};
use crate::keys;
use crate::memo::{Memo, UnwrittenEntries};
use crate::records::Cost;
use crate::services::Services;
use crate::settle::{Notify, Target, identify, settle};

/// Messages of a handler pool.
#[derive(Debug)]
pub enum PoolMessage {
    /// Run this claimed job.
    Dispatch(Box<Claim>),
    /// A worker finished its job.
    WorkerDone {
        /// Slot of the worker.
        slot: usize,
        /// What the job came to.
        verdict: Verdict,
        /// What it staged.
        effects: StagedEffects,
        /// What it recorded as cost.
        cost: Cost,
    },
    /// A settlement task finished.
    Settled,
    /// Start the worker of `slot` again (after a crash and its backoff).
    RestartWorker(usize),
    /// Reply once nothing is held: no job running, queued here or settling.
    /// With a grace period, jobs still running at its end are nacked and their
    /// workers stopped; the reply counts them.
    Drain(Option<Duration>, RpcReplyPort<usize>),
    /// The drain's grace period ended.
    DrainDeadline,
    /// The waiters or the batches registry restarted: tell the new ones.
    SetNotify(Notify),
    /// A new claimer took over (the old one was restarted): send credits there,
    /// and answer how many claims this pool holds (running, backlogged, or
    /// settling with their credit still owed), so its credits are reconciled.
    SetClaimer(ActorRef<ClaimerMessage>, RpcReplyPort<usize>),
    /// Counters, for tests and status pages.
    GetStats(RpcReplyPort<PoolStats>),
}

/// Counters of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Workers alive.
    pub workers: usize,
    /// Jobs running in workers.
    pub running: usize,
    /// Jobs waiting here for a free worker.
    pub backlog: usize,
    /// Settlements in flight.
    pub settling: usize,
    /// Worker crashes so far.
    pub crashes: u64,
    /// Whether the type crashed past its restart limit and is paused.
    pub paused: bool,
}

/// Arguments of a pool.
#[derive(Clone)]
pub struct PoolArguments {
    /// Job type.
    pub job_type: String,
    /// User code.
    pub handler: Arc<dyn ErasedHandler>,
    /// Workers.
    pub concurrency: usize,
    /// Engine services.
    pub services: Arc<Services>,
    /// Who settlements tell.
    pub(crate) notify: Notify,
    /// Where credits go.
    pub claimer: ActorRef<ClaimerMessage>,
    /// The engine's supervisor (handed to jobs for child submissions).
    pub engine: ActorRef<crate::EngineMessage>,
}

impl std::fmt::Debug for PoolArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolArguments")
            .field("job_type", &self.job_type)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// The handler pool actor.
#[derive(Debug)]
pub struct HandlerPool;

#[derive(Debug, Default)]
struct Slot {
    worker: Option<ActorRef<WorkerMessage>>,
    job: Option<Claim>,
    /// The running job's memo (shares the attempt's unwritten entries).
    memo: Option<Memo>,
}

/// State of a pool.
#[derive(Debug)]
pub struct PoolState {
    args: PoolArguments,
    slots: Vec<Slot>,
    by_actor: HashMap<ActorId, usize>,
    idle: VecDeque<usize>,
    backlog: VecDeque<Claim>,
    settling: usize,
    owed_credits: usize,
    crash_times: VecDeque<Instant>,
    crashes: u64,
    drains: Vec<RpcReplyPort<usize>>,
    draining: bool,
    abandoned: usize,
    paused: bool,
}

impl PoolState {
    fn running(&self) -> usize {
        self.slots.iter().filter(|s| s.job.is_some()).count()
    }

    async fn spawn_worker(&mut self, myself: &ActorRef<PoolMessage>, slot: usize) {
        let worker = HandlerWorker {
            handler: self.args.handler.clone(),
            pool: myself.clone(),
            slot,
            services: self.args.services.clone(),
        };
        match Actor::spawn_linked(None, worker, (), myself.get_cell()).await {
            Ok((actor, _)) => {
                self.by_actor.insert(actor.get_id(), slot);
                self.slots[slot].worker = Some(actor);
                self.idle.push_back(slot);
            }
            Err(e) => {
                // A worker has no fallible start, so this is the runtime refusing:
                // try again later rather than take the pool down.
                error!(job_type = %self.args.job_type, error = %e, "handler worker failed to start");
                myself.send_after(Duration::from_secs(1), move || {
                    PoolMessage::RestartWorker(slot)
                });
            }
        }
    }

    /// The type crashed past its restart limit: stop restarting its workers
    /// and fail its jobs (queued here now, and claimed later) permanently, so
    /// every handle gets an error instead of waiting; the engine serves every
    /// other type as before. Dead-lettered jobs can be requeued once fixed.
    fn pause(&mut self, myself: &ActorRef<PoolMessage>, crashes: usize) {
        self.paused = true;
        let window = self.args.services.settings().restart_window;
        error!(job_type = %self.args.job_type, crashes, ?window, "job type paused: its handler keeps crashing");
        self.args.services.emit(EngineEvent::JobTypePaused {
            job_type: self.args.job_type.clone(),
        });
        while let Some(claim) = self.backlog.pop_front() {
            self.refuse(myself, claim);
        }
    }

    fn refuse(&mut self, myself: &ActorRef<PoolMessage>, claim: Claim) {
        let window = self.args.services.settings().restart_window;
        let verdict = Verdict::permanent(format!(
            "job type `{}` is paused: its handler crashed more than {} times within {:?}",
            self.args.job_type,
            self.args.services.settings().max_restarts,
            window
        ));
        self.start_settlement(
            myself,
            claim,
            verdict,
            StagedEffects::default(),
            Cost::default(),
            None,
        );
    }

    /// The drain's grace period is over: nack what still runs or waits here
    /// (each attempt is counted as used) and stop those workers.
    fn abandon(&mut self, myself: &ActorRef<PoolMessage>) {
        let mut claims: Vec<(Claim, Option<UnwrittenEntries>)> =
            self.backlog.drain(..).map(|claim| (claim, None)).collect();
        for slot in self.slots.iter_mut() {
            if let Some(claim) = slot.job.take() {
                if let Some(worker) = slot.worker.take() {
                    self.by_actor.remove(&worker.get_id());
                    worker.kill();
                }
                claims.push((claim, slot.memo.take().map(|m| m.take_unwritten())));
            }
        }
        for (claim, memo) in claims {
            self.abandoned += 1;
            warn!(job_type = %self.args.job_type, job_id = %claim.id, "shutdown grace period over; nacking the job");
            self.start_settlement(
                myself,
                claim,
                Verdict::transient(
                    "the engine shut down before the job finished (grace period over)",
                ),
                StagedEffects::default(),
                Cost::default(),
                memo,
            );
        }
        self.check_drained();
    }

    fn dispatch(&mut self, myself: &ActorRef<PoolMessage>, claim: Claim) {
        if self.paused {
            self.refuse(myself, claim);
            return;
        }
        let Some(slot) = self.idle.pop_front() else {
            self.backlog.push_back(claim);
            return;
        };
        let Some(worker) = self.slots[slot].worker.clone() else {
            self.backlog.push_back(claim);
            return;
        };
        let (target, job_type) = identify(&claim);
        let services = &self.args.services;
        let blob = &services.settings().blob_prefix;
        let writes = services.settings().memo_writes;
        let (run_id, memo, item) = match target {
            Target::Job { run_id } => (
                run_id.clone(),
                Memo::new(services.store().clone(), blob, &run_id).with_writes(writes),
                None,
            ),
            Target::Item {
                batch_id,
                key,
                run_id,
            } => (
                run_id.clone(),
                Memo::for_item(services.store().clone(), blob, &batch_id, &run_id)
                    .with_writes(writes),
                Some(ItemInfo { batch_id, key }),
            ),
        };
        let lease = match services.queue() {
            Ok(queue) => queue.lease_handle(&claim),
            Err(_) => taquba::LeaseHandle::detached(),
        };
        let mut headers = claim.headers.clone();
        headers.retain(|k, _| !k.starts_with(keys::RESERVED_HEADER_PREFIX));
        let delivery = Delivery {
            memo,
            item,
            cost: CostMeter::default(),
            run_id,
            job_id: claim.id.clone(),
            job_type,
            attempt: claim.attempts,
            max_attempts: claim.max_attempts,
            headers: Arc::new(headers),
            payload: claim.payload.clone().into(),
            cancel: claim.cancel_token().clone(),
            lease,
            effects: Effects::default(),
            engine: crate::EngineRef::from_parts(self.args.engine.clone(), services.clone()),
        };
        self.slots[slot].memo = Some(delivery.memo.clone());
        self.slots[slot].job = Some(claim);
        if let Err(ractor::MessagingErr::SendErr(_)) =
            worker.cast(WorkerMessage::Run(Box::new(delivery)))
        {
            // The worker died between its last report and now; its supervision
            // event will nack the job and restart it.
        }
    }

    fn finish(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        slot: usize,
        verdict: Verdict,
        effects: StagedEffects,
        cost: Cost,
    ) {
        let Some(claim) = self.slots.get_mut(slot).and_then(|s| s.job.take()) else {
            return;
        };
        let memo = self.slots[slot].memo.take().map(|m| m.take_unwritten());
        self.start_settlement(myself, claim, verdict, effects, cost, memo);
        if self.slots[slot].worker.is_some() {
            self.idle.push_back(slot);
        }
        if let Some(next) = self.backlog.pop_front() {
            self.dispatch(myself, next);
        }
    }

    fn start_settlement(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        claim: Claim,
        verdict: Verdict,
        effects: StagedEffects,
        cost: Cost,
        memo: Option<UnwrittenEntries>,
    ) {
        self.settling += 1;
        // The job leaves the handlers: its credit goes back, unless too many
        // settlements are in flight (then when one finishes).
        if self.settling <= self.args.services.settings().settlement_window {
            let _ = self.args.claimer.cast(ClaimerMessage::Credit(1));
        } else {
            self.owed_credits += 1;
        }
        let services = self.args.services.clone();
        let notify = self.args.notify.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            // An attempt that did not succeed leaves its memo entries for the
            // next one (MemoWrites::OnFailure); a cancelled run has none.
            if let Some(memo) = memo
                && !memo.is_empty()
                && matches!(verdict, Verdict::Failed { .. })
                && !claim.cancel_token().is_cancelled()
            {
                let entries = memo.len();
                if let Err(e) = memo.write().await {
                    warn!(job_id = %claim.id, entries, error = %e, "writing the failed attempt's memo entries failed; the next attempt computes them again");
                }
            }
            settle(&services, &notify, claim, verdict, effects, cost).await;
            let _ = myself.cast(PoolMessage::Settled);
        });
    }

    fn settled(&mut self) {
        self.settling = self.settling.saturating_sub(1);
        if self.owed_credits > 0 && self.settling < self.args.services.settings().settlement_window
        {
            self.owed_credits -= 1;
            let _ = self.args.claimer.cast(ClaimerMessage::Credit(1));
        }
        self.check_drained();
    }

    fn check_drained(&mut self) {
        if self.drains.is_empty()
            || self.running() > 0
            || !self.backlog.is_empty()
            || self.settling > 0
        {
            return;
        }
        for reply in self.drains.drain(..) {
            let _ = reply.send(self.abandoned);
        }
    }

    fn crashed(&mut self, myself: &ActorRef<PoolMessage>, who: ActorCell, reason: String) {
        let Some(slot) = self.by_actor.remove(&who.get_id()) else {
            return;
        };
        self.slots[slot].worker = None;
        self.idle.retain(|s| *s != slot);
        self.crashes += 1;
        let services = self.args.services.clone();
        services.emit(EngineEvent::HandlerCrashed {
            job_type: self.args.job_type.clone(),
            reason: reason.clone(),
        });
        if let Some(claim) = self.slots[slot].job.take() {
            warn!(job_type = %self.args.job_type, job_id = %claim.id, %reason, "handler crashed; nacking its job");
            let memo = self.slots[slot].memo.take().map(|m| m.take_unwritten());
            self.start_settlement(
                myself,
                claim,
                Verdict::transient(format!("handler crashed: {reason}")),
                StagedEffects::default(),
                Cost::default(),
                memo,
            );
        }
        let now = Instant::now();
        let window = services.settings().restart_window;
        while self
            .crash_times
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.crash_times.pop_front();
        }
        self.crash_times.push_back(now);
        let recent = self.crash_times.len();
        if recent > services.settings().max_restarts && !self.paused {
            self.pause(myself, recent);
        }
        if !self.paused && !self.draining {
            let base = services.settings().restart_backoff_base;
            let max = services.settings().restart_backoff_max;
            let delay = base
                .saturating_mul(1u32 << (recent.min(16) as u32 - 1))
                .min(max);
            myself.send_after(delay, move || PoolMessage::RestartWorker(slot));
        }
        self.check_drained();
    }
}

impl Actor for HandlerPool {
    type Msg = PoolMessage;
    type State = PoolState;
    type Arguments = PoolArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: PoolArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let n = args.concurrency.max(1);
        let mut state = PoolState {
            args,
            slots: (0..n).map(|_| Slot::default()).collect(),
            by_actor: HashMap::new(),
            idle: VecDeque::new(),
            backlog: VecDeque::new(),
            settling: 0,
            owed_credits: 0,
            crash_times: VecDeque::new(),
            crashes: 0,
            drains: Vec::new(),
            draining: false,
            abandoned: 0,
            paused: false,
        };
        for slot in 0..n {
            state.spawn_worker(&myself, slot).await;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PoolMessage::Dispatch(claim) => state.dispatch(&myself, *claim),
            PoolMessage::WorkerDone {
                slot,
                verdict,
                effects,
                cost,
            } => state.finish(&myself, slot, verdict, effects, cost),
            PoolMessage::Settled => state.settled(),
            PoolMessage::RestartWorker(slot) => {
                if !state.paused
                    && !state.draining
                    && state.slots.get(slot).is_some_and(|s| s.worker.is_none())
                {
                    state.spawn_worker(&myself, slot).await;
                    state.args.services.emit(EngineEvent::HandlerRestarted {
                        job_type: state.args.job_type.clone(),
                    });
                    if let Some(next) = state.backlog.pop_front() {
                        state.dispatch(&myself, next);
                    }
                }
            }
            PoolMessage::Drain(grace, reply) => {
                state.draining = true;
                state.drains.push(reply);
                if let Some(grace) = grace {
                    myself.send_after(grace, || PoolMessage::DrainDeadline);
                }
                state.check_drained();
            }
            PoolMessage::DrainDeadline => state.abandon(&myself),
            PoolMessage::SetNotify(notify) => state.args.notify = notify,
            PoolMessage::SetClaimer(claimer, reply) => {
                state.args.claimer = claimer;
                let _ = reply.send(state.running() + state.backlog.len() + state.owed_credits);
            }
            PoolMessage::GetStats(reply) => {
                let _ = reply.send(PoolStats {
                    workers: state.slots.iter().filter(|s| s.worker.is_some()).count(),
                    running: state.running(),
                    backlog: state.backlog.len(),
                    settling: state.settling,
                    crashes: state.crashes,
                    paused: state.paused,
                });
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(who, err) => state.crashed(&myself, who, err.to_string()),
            SupervisionEvent::ActorTerminated(who, _, reason) => {
                let reason = reason.unwrap_or_else(|| "stopped".into());
                state.crashed(&myself, who, reason)
            }
            _ => {}
        }
        Ok(())
    }
}

/// Messages of a handler worker.
#[derive(Debug)]
pub enum WorkerMessage {
    /// Run this delivery.
    Run(Box<Delivery>),
}

/// A handler worker: runs the user's code for one job at a time, inside
/// `handle`, so a panic fails this actor only.
pub struct HandlerWorker {
    handler: Arc<dyn ErasedHandler>,
    pool: ActorRef<PoolMessage>,
    slot: usize,
    services: Arc<Services>,
}

impl std::fmt::Debug for HandlerWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerWorker")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Actor for HandlerWorker {
    type Msg = WorkerMessage;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let WorkerMessage::Run(delivery) = message;
        if delivery.item.is_none() {
            self.services.emit(EngineEvent::JobStarted {
                run_id: delivery.run_id.clone(),
                job_type: delivery.job_type.clone(),
                attempt: delivery.attempt,
            });
        }
        let effects = delivery.effects.clone();
        let cost = delivery.cost.clone();
        let verdict = self.handler.run(*delivery).await;
        let effects = effects.seal();
        let _ = self.pool.cast(PoolMessage::WorkerDone {
            slot: self.slot,
            verdict,
            effects,
            cost: cost.snapshot(),
        });
        Ok(())
    }
}
