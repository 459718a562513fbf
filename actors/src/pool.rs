//! Handler pool: one per job type or pipeline, over the type's own taquba
//! queue. Owns the type's worker actors, the claims they hold, the claim in
//! flight, and the count of settlements in flight.
//!
//! Capacity belongs to the type. The pool claims from its queue only as many
//! jobs as it has idle, live workers (one claim in flight at a time, in a
//! task), so a type whose workers are restarting after crashes, a paused type
//! or a type waiting for its own children holds nothing another type could
//! use, and no type ever waits behind another's jobs.
//!
//! The pool, not the worker, holds each `Claim`: a worker gets a copy of the
//! job and its lease, runs the user's code and reports a verdict. So when a
//! worker crashes (a panic in user code), the pool still holds the claim and
//! nacks it at once, then restarts the worker after a backoff. Settlements run
//! in short tasks so a worker takes its next job while the last one's commit
//! waits for the queue's flush (unless `settlement_window` commits are in
//! flight). A job waiting for another job from inside its run parks its slot
//! (see `parking`): the pool runs an extra worker meanwhile.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};
use taquba::Claim;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::attempts::{self, Attempts, Fate};
use crate::effects::{CostMeter, Effects, StagedEffects};
use crate::events::EngineEvent;
use crate::handler::{BoxFuture, Delivery, ErasedHandler, ItemInfo, Verdict};
use crate::keys;
use crate::memo::{Memo, UnwrittenEntries};
use crate::parking::{self, ParkState, Parking};
use crate::records::Cost;
use crate::services::Services;
use crate::settle::{Ending, Notify, Target, identify, settle};

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

/// A worker slot of a pool.
pub type SlotId = u64;

/// Give claims back to the queue without counting an attempt (the pool that
/// claimed them is gone or stopping).
async fn release_all(queue: &taquba::Queue, held: Vec<Held>, why: &str) {
    let reason = format!("{}{why}", keys::RELEASED_PREFIX);
    for h in held {
        if let Err(e) = queue.nack(&h.claim, &reason).await {
            warn!(job_id = %h.claim.id, error = %e, "giving a claim back failed; it runs again once its lease expires");
        }
    }
}

/// A claimed job and its attempts, as gaffer counts them.
#[derive(Debug)]
pub struct Held {
    claim: Claim,
    attempts: Attempts,
}

/// Messages of a handler pool.
#[derive(Debug)]
pub enum PoolMessage {
    /// A claim finished (jobs claimed, with their attempts).
    Claimed(Result<Vec<Held>, taquba::Error>),
    /// Claim again (after an error).
    Retry,
    /// A worker finished its job.
    WorkerDone {
        /// Slot of the worker.
        slot: SlotId,
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
    RestartWorker(SlotId),
    /// The job in `slot` waits for another job: run one more meanwhile.
    Park(SlotId),
    /// The wait of the job in `slot` is over.
    Unpark(SlotId),
    /// Resume a type paused after too many crashes.
    Resume(RpcReplyPort<bool>),
    /// Stop claiming; reply once nothing is held: no job running, queued here
    /// or settling. With a grace period, jobs still running at its end are
    /// given back to the queue (their attempt is not counted) and their
    /// workers stopped; the reply counts them.
    Drain(Option<Duration>, RpcReplyPort<usize>),
    /// The drain's grace period ended.
    DrainDeadline,
    /// Counters, for tests and status pages.
    GetStats(RpcReplyPort<PoolStats>),
}

/// Counters of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Workers alive.
    pub workers: usize,
    /// Jobs running in workers (parked ones included).
    pub running: usize,
    /// Running jobs waiting for another job (their slots parked).
    pub parked: usize,
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
    /// Job type or pipeline name.
    pub job_type: String,
    /// The taquba queue it claims from.
    pub queue: String,
    /// User code.
    pub handler: Arc<dyn ErasedHandler>,
    /// Workers.
    pub concurrency: usize,
    /// Engine services.
    pub services: Arc<Services>,
    /// Who settlements tell.
    pub(crate) notify: Notify,
    /// The engine's supervisor (handed to jobs for child submissions).
    pub engine: ActorRef<crate::EngineMessage>,
}

impl std::fmt::Debug for PoolArguments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolArguments")
            .field("job_type", &self.job_type)
            .field("queue", &self.queue)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

/// The handler of a queue whose job type or pipeline is not registered (jobs
/// a previous version of the program left): each job fails permanently, with
/// its record, so its handles learn why.
pub(crate) struct Unregistered;

impl ErasedHandler for Unregistered {
    fn run(&self, delivery: Delivery) -> BoxFuture<Verdict> {
        let message = if delivery.job_type.is_empty() {
            "job has no `gaffer.type` header: it was not submitted through gaffer".to_string()
        } else if delivery.item.is_some() {
            format!("no pipeline `{}` is registered", delivery.job_type)
        } else {
            format!("no handler registered for job type `{}`", delivery.job_type)
        };
        Box::pin(async move { Verdict::permanent(message) })
    }
}

/// The handler pool actor.
#[derive(Debug)]
pub struct HandlerPool;

#[derive(Debug, Default)]
struct Slot {
    worker: Option<ActorRef<WorkerMessage>>,
    job: Option<Held>,
    /// The running job's memo (shares the attempt's unwritten entries).
    memo: Option<Memo>,
    /// What the running job's waits share (whether one was cut by a drain).
    waits: Option<Arc<ParkState>>,
    /// The running job waits for another job.
    parked: bool,
}

/// State of a pool.
#[derive(Debug)]
pub struct PoolState {
    args: PoolArguments,
    slots: BTreeMap<SlotId, Slot>,
    next_slot: SlotId,
    by_actor: HashMap<ActorId, SlotId>,
    idle: VecDeque<SlotId>,
    backlog: VecDeque<Held>,
    parked: usize,
    /// The claim in flight and how many jobs it may bring.
    claiming: Option<usize>,
    /// Cancelled when the pool drains, or its state is dropped (the pool
    /// stopped or was killed): stops the claim task and ends parked waits.
    draining_token: CancellationToken,
    _cancel_on_drop: tokio_util::sync::DropGuard,
    settling: usize,
    crash_times: VecDeque<Instant>,
    crashes: u64,
    drains: Vec<RpcReplyPort<usize>>,
    draining: bool,
    abandoned: usize,
    paused: bool,
}

impl PoolState {
    fn settings(&self) -> &crate::Settings {
        self.args.services.settings()
    }

    fn running(&self) -> usize {
        self.slots.values().filter(|s| s.job.is_some()).count()
    }

    /// Slots beyond the type's concurrency plus its parked slots.
    fn excess(&self) -> usize {
        self.slots
            .len()
            .saturating_sub(self.args.concurrency + self.parked)
    }

    /// Jobs to claim now: one per idle live worker not already promised to
    /// the backlog; none while paused, draining or too many settlements are in
    /// flight.
    fn want(&self) -> usize {
        if self.paused || self.draining || self.settling >= self.settings().settlement_window {
            return 0;
        }
        self.idle.len().saturating_sub(self.backlog.len())
    }

    fn maybe_claim(&mut self, myself: &ActorRef<PoolMessage>) {
        let want = self.want();
        if self.claiming.is_some() || want == 0 {
            return;
        }
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        self.claiming = Some(want);
        let name = self.args.queue.clone();
        let services = self.args.services.clone();
        let stop = self.draining_token.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let poll = services.settings().poll_interval;
            let lease = queue.queue_config(&name).lease_duration;
            let claimed = loop {
                if stop.is_cancelled() {
                    break Ok(Vec::new());
                }
                match queue.claim_batch(&name, want, lease).await {
                    Ok(claims) if claims.is_empty() => {
                        tokio::select! {
                            _ = queue.wait_for_jobs_on(&name, poll) => {}
                            _ = stop.cancelled() => break Ok(claims),
                        }
                    }
                    other => break other,
                }
            };
            let result = match claimed {
                Ok(claims) => {
                    let settings = services.settings();
                    let counted = claims.into_iter().map(|claim| {
                        let queue = &queue;
                        async move {
                            let attempts = attempts::of(queue, &claim, settings).await;
                            Held { claim, attempts }
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
                    release_all(&queue, held, "the pool stopped claiming").await;
                    Ok(Vec::new())
                }
                other => other,
            };
            if let Err(ractor::MessagingErr::SendErr(PoolMessage::Claimed(Ok(held)))) =
                myself.cast(PoolMessage::Claimed(result))
            {
                release_all(&queue, held, "the pool stopped").await;
            }
        });
    }

    fn claimed(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        result: Result<Vec<Held>, taquba::Error>,
    ) {
        self.claiming = None;
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

    async fn add_slot(&mut self, myself: &ActorRef<PoolMessage>) {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(slot, Slot::default());
        self.spawn_worker(myself, slot).await;
    }

    async fn spawn_worker(&mut self, myself: &ActorRef<PoolMessage>, slot: SlotId) {
        let worker = HandlerWorker {
            handler: self.args.handler.clone(),
            pool: myself.clone(),
            slot,
            services: self.args.services.clone(),
        };
        match Actor::spawn_linked(None, worker, (), myself.get_cell()).await {
            Ok((actor, _)) => {
                self.by_actor.insert(actor.get_id(), slot);
                if let Some(s) = self.slots.get_mut(&slot) {
                    s.worker = Some(actor);
                }
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

    /// Remove `slot` (its worker, if any, is stopped).
    fn retire(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.remove(&slot)
            && let Some(worker) = s.worker
        {
            self.by_actor.remove(&worker.get_id());
            worker.stop(None);
        }
        self.idle.retain(|s| *s != slot);
    }

    /// Retire idle slots while there are more than the type needs.
    fn shrink(&mut self) {
        // Idle slots the claim in flight (and the backlog) may need are kept.
        let promised = self.claiming.unwrap_or(0) + self.backlog.len();
        while self.excess() > 0 && self.idle.len() > promised {
            let Some(slot) = self.idle.pop_back() else {
                return;
            };
            self.retire(slot);
        }
    }

    fn pause(&mut self, myself: &ActorRef<PoolMessage>, recent: usize) {
        self.paused = true;
        error!(job_type = %self.args.job_type, crashes = recent, "job type crashed too often; pausing it (its jobs stay queued)");
        self.args.services.emit(EngineEvent::JobTypePaused {
            job_type: self.args.job_type.clone(),
        });
        while let Some(held) = self.backlog.pop_front() {
            self.release(myself, held, "its job type is paused".into(), None);
        }
    }

    async fn resume(&mut self, myself: &ActorRef<PoolMessage>) -> bool {
        if !self.paused {
            return false;
        }
        self.paused = false;
        self.crash_times.clear();
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

    /// Give a claim back to the queue without counting an attempt.
    fn release(
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
    fn abandon(&mut self, myself: &ActorRef<PoolMessage>) {
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

    fn dispatch(&mut self, myself: &ActorRef<PoolMessage>, held: Held) {
        match held.attempts.fate(self.settings()) {
            Fate::Run => {}
            Fate::Poisoned(message) => {
                warn!(job_type = %self.args.job_type, job_id = %held.claim.id, "{message}");
                self.start_settlement(
                    myself,
                    held,
                    Ending::Verdict(Verdict::permanent(message)),
                    StagedEffects::default(),
                    Cost::default(),
                    None,
                );
                return;
            }
            Fate::Exhausted(message) => {
                self.start_settlement(
                    myself,
                    held,
                    Ending::Verdict(Verdict::transient(message)),
                    StagedEffects::default(),
                    Cost::default(),
                    None,
                );
                return;
            }
        }
        if self.paused {
            self.release(myself, held, "its job type is paused".into(), None);
            return;
        }
        let Some(slot) = self.idle.pop_front() else {
            self.backlog.push_back(held);
            return;
        };
        let Some(worker) = self.slots.get(&slot).and_then(|s| s.worker.clone()) else {
            self.backlog.push_back(held);
            return;
        };
        let delivery = self.delivery(myself, slot, &held);
        if let Some(s) = self.slots.get_mut(&slot) {
            s.memo = Some(delivery.memo.clone());
            s.waits = Some(delivery.parking.state.clone());
            s.job = Some(held);
        }
        // A worker that died between its last report and now is handled by its
        // supervision event, which gives the job back.
        let _ = worker.cast(WorkerMessage::Run(Box::new(delivery)));
    }

    fn delivery(&self, myself: &ActorRef<PoolMessage>, slot: SlotId, held: &Held) -> Delivery {
        let claim = &held.claim;
        let (target, job_type) = identify(claim);
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
        let (lease, lease_duration) = match services.queue() {
            Ok(queue) => (
                queue.lease_handle(claim),
                queue.queue_config(&claim.queue).lease_duration,
            ),
            Err(_) => (taquba::LeaseHandle::detached(), Duration::from_secs(30)),
        };
        let mut headers = claim.headers.clone();
        headers.retain(|k, _| !k.starts_with(keys::RESERVED_HEADER_PREFIX));
        Delivery {
            memo,
            item,
            cost: CostMeter::default(),
            run_id,
            job_id: claim.id.clone(),
            job_type,
            attempt: held.attempts.number,
            max_attempts: held.attempts.limit,
            headers: Arc::new(headers),
            payload: claim.payload.clone().into(),
            cancel: claim.cancel_token().clone(),
            lease: lease.clone(),
            effects: Effects::default(),
            engine: crate::EngineRef::from_parts(self.args.engine.clone(), services.clone()),
            parking: Parking {
                pool: myself.clone(),
                slot,
                draining: self.draining_token.clone(),
                lease,
                lease_duration,
                state: Arc::default(),
            },
        }
    }

    fn finish(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        slot: SlotId,
        verdict: Verdict,
        effects: StagedEffects,
        cost: Cost,
    ) {
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        let Some(held) = s.job.take() else {
            return;
        };
        let memo = s.memo.take().map(|m| m.take_unwritten());
        let cut = s.waits.take().is_some_and(|w| w.cut_by_shutdown());
        let was_parked = std::mem::take(&mut s.parked);
        let alive = s.worker.is_some();
        if was_parked {
            self.parked -= 1;
        }
        // A job whose wait for another job was cut short by the shutdown did
        // not fail by itself: it is given back, its attempt not spent.
        let ending = match verdict {
            Verdict::Failed { .. } if cut => {
                Ending::Release("the engine shut down while the job waited for another job".into())
            }
            verdict => Ending::Verdict(verdict),
        };
        self.start_settlement(myself, held, ending, effects, cost, memo);
        if alive {
            if self.excess() > 0 {
                self.retire(slot);
            } else {
                self.idle.push_back(slot);
            }
        }
        if let Some(next) = self.backlog.pop_front() {
            self.dispatch(myself, next);
        }
        self.maybe_claim(myself);
    }

    fn start_settlement(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        held: Held,
        ending: Ending,
        effects: StagedEffects,
        cost: Cost,
        memo: Option<UnwrittenEntries>,
    ) {
        self.settling += 1;
        let services = self.args.services.clone();
        let notify = self.args.notify.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let Held { claim, attempts } = held;
            // An attempt that did not succeed leaves its memo entries for the
            // next one (MemoWrites::OnFailure); a cancelled run has none.
            let succeeded = matches!(ending, Ending::Verdict(Verdict::Succeeded(_)));
            if let Some(memo) = memo
                && !memo.is_empty()
                && !succeeded
                && !claim.cancel_token().is_cancelled()
            {
                let entries = memo.len();
                if let Err(e) = memo.write().await {
                    warn!(job_id = %claim.id, entries, error = %e, "writing the failed attempt's memo entries failed; the next attempt computes them again");
                }
            }
            settle(&services, &notify, claim, attempts, ending, effects, cost).await;
            let _ = myself.cast(PoolMessage::Settled);
        });
    }

    fn settled(&mut self, myself: &ActorRef<PoolMessage>) {
        self.settling = self.settling.saturating_sub(1);
        self.maybe_claim(myself);
        self.check_drained();
    }

    fn check_drained(&mut self) {
        if self.drains.is_empty()
            || self.running() > 0
            || !self.backlog.is_empty()
            || self.settling > 0
            || self.claiming.is_some()
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
        self.idle.retain(|s| *s != slot);
        self.crashes += 1;
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
        if self.excess() > 0 {
            // A slot added for a parked job: not needed any more.
            self.retire(slot);
        } else if !self.paused && !self.draining {
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
        let draining_token = CancellationToken::new();
        let mut state = PoolState {
            args,
            slots: BTreeMap::new(),
            next_slot: 0,
            by_actor: HashMap::new(),
            idle: VecDeque::new(),
            backlog: VecDeque::new(),
            parked: 0,
            claiming: None,
            _cancel_on_drop: draining_token.clone().drop_guard(),
            draining_token,
            settling: 0,
            crash_times: VecDeque::new(),
            crashes: 0,
            drains: Vec::new(),
            draining: false,
            abandoned: 0,
            paused: false,
        };
        state.args.concurrency = n;
        for _ in 0..n {
            state.add_slot(&myself).await;
        }
        state.maybe_claim(&myself);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            PoolMessage::Claimed(result) => state.claimed(&myself, result),
            PoolMessage::Retry => state.maybe_claim(&myself),
            PoolMessage::WorkerDone {
                slot,
                verdict,
                effects,
                cost,
            } => state.finish(&myself, slot, verdict, effects, cost),
            PoolMessage::Settled => state.settled(&myself),
            PoolMessage::RestartWorker(slot) => {
                let down = state.slots.get(&slot).is_some_and(|s| s.worker.is_none());
                if down && state.excess() > 0 {
                    // A slot added for a parked job: not needed any more.
                    state.retire(slot);
                } else if down && !state.paused && !state.draining {
                    state.spawn_worker(&myself, slot).await;
                    state.args.services.emit(EngineEvent::HandlerRestarted {
                        job_type: state.args.job_type.clone(),
                    });
                    if let Some(next) = state.backlog.pop_front() {
                        state.dispatch(&myself, next);
                    }
                    state.maybe_claim(&myself);
                }
            }
            PoolMessage::Park(slot) => {
                let parked = match state.slots.get_mut(&slot) {
                    Some(s) if s.job.is_some() && !s.parked => {
                        s.parked = true;
                        true
                    }
                    _ => false,
                };
                if parked {
                    state.parked += 1;
                    // One more slot, unless surplus slots are still there.
                    if !state.draining && state.slots.len() < state.args.concurrency + state.parked
                    {
                        state.add_slot(&myself).await;
                        if let Some(next) = state.backlog.pop_front() {
                            state.dispatch(&myself, next);
                        }
                        state.maybe_claim(&myself);
                    }
                }
            }
            PoolMessage::Unpark(slot) => {
                let was_parked = state
                    .slots
                    .get_mut(&slot)
                    .is_some_and(|s| std::mem::take(&mut s.parked));
                if was_parked {
                    state.parked -= 1;
                    state.shrink();
                }
            }
            PoolMessage::Resume(reply) => {
                let resumed = state.resume(&myself).await;
                let _ = reply.send(resumed);
            }
            PoolMessage::Drain(grace, reply) => {
                state.draining = true;
                state.draining_token.cancel();
                state.drains.push(reply);
                // Jobs waiting for a worker have not started: give them back.
                while let Some(held) = state.backlog.pop_front() {
                    state.release(&myself, held, "the engine shut down".into(), None);
                }
                if let Some(grace) = grace {
                    myself.send_after(grace, || PoolMessage::DrainDeadline);
                }
                state.check_drained();
            }
            PoolMessage::DrainDeadline => state.abandon(&myself),
            PoolMessage::GetStats(reply) => {
                let _ = reply.send(PoolStats {
                    workers: state.slots.values().filter(|s| s.worker.is_some()).count(),
                    running: state.running(),
                    parked: state.parked,
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

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.draining_token.cancel();
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
    slot: SlotId,
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
        let parking = delivery.parking.clone();
        let verdict = parking::scope(parking, self.handler.run(*delivery)).await;
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
