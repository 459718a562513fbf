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
//! It claims through its claimer (`exec::claimer`), a linked child that
//! waits on the queue; the pool owns the capacity and asks for what it has
//! room for, one claim in flight at a time. A claimer that dies is
//! replaced and asked again.
//!
//! The pool, not the worker, holds each `Claim`: a worker gets a copy of the
//! job and its lease, runs the user's code and reports a verdict. So when a
//! worker crashes (a panic in user code), the pool still holds the claim and
//! settles it at once as a failed attempt, and replaces the worker (at once,
//! unless panics are systemic: see `restarts`). Settlements run
//! in short tasks so a worker takes its next job while the last one's commit
//! waits for the queue's flush (unless `settlement_window` commits are in
//! flight). A job waiting for another job from inside its run parks its slot
//! (see `parking`): the pool runs an extra worker meanwhile.
//!
//! The pool keeps the lease of every job it holds (see `leases`): a job
//! runs as long as it needs while its process lives, and is redelivered
//! only when the process died or stalled past its lease.
//!
//! Files: `claiming` (the claim in flight, the claimer, partition queues),
//! `slots` (workers and the jobs they run, settlements), `leases` (the
//! leases of the jobs it holds, renewed on one timer), `lifecycle`
//! (crashes, pause and resume, releases, drain).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ractor::{
    Actor, ActorId, ActorProcessingErr, ActorRef, DerivedActorRef, RpcReplyPort, SupervisionEvent,
};
use tokio_util::sync::CancellationToken;

use crate::engine::notify::Notify;
use crate::erased::{ErasedHandler, Verdict};
use crate::exec::effects::StagedEffects;
use crate::exec::memo::Memo;
use crate::exec::parking::{ParkState, SlotWait};
use crate::exec::restarts::Restarts;
use crate::exec::worker::WorkerMessage;
use crate::layout::records::Cost;
use crate::services::Services;

mod claiming;
mod leases;
mod lifecycle;
mod sample;
mod slots;

pub(crate) use crate::exec::claimer::Held;
use crate::exec::claimer::{Claimed, ClaimerMessage};

pub(crate) use crate::exec::parking::SlotId;

/// Messages of a handler pool.
#[derive(Debug)]
pub(crate) enum PoolMessage {
    /// A claim finished (jobs claimed, with their attempts; the planned
    /// queues that came back short).
    Claimed(Claimed),
    /// Claim again (after an error, or when a throttled queue has a token).
    Retry,
    /// Partition queues of the type (a rate limit per header value,
    /// fairness or a limit per key): found in the store at the start, or
    /// told by a submission (to a fair type, each submission's queue joins
    /// its ring).
    Partitions(Vec<String>),
    /// Partition queues the store marks (at the start, after a lag in the
    /// submissions' channel, and every `forget_drained_after` for a fair type):
    /// those the pool does not know are learned; known ones are left as
    /// they are (their wake-ups tell when they have jobs).
    Listed(Vec<String>),
    /// A fair type's idle check (every poll interval, sent to itself): the
    /// known queues out of its ring that had an insert since the last look
    /// join it (scheduled jobs come due, retries after their backoff, reaped
    /// leases, a submission whose event came before its commit).
    CheckIdle,
    /// A forget check of a fair type's idle partition queues ended (`None`:
    /// it failed; see `exec::rate::forget`).
    ForgetChecked(Option<crate::exec::rate::ForgetCheck>),
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
    /// A settlement task finished (or ended without finishing: a panic,
    /// told by its reporter): its number.
    Settled(u64),
    /// Renew the leases of every job it holds (running, parked, waiting in
    /// the backlog or settling); sent to itself every third of the lease.
    KeepLeases,
    /// Start a claimer in place of one that died, and ask it.
    RestartClaimer,
    /// The task that follows the type's partition queues ended; `Some`:
    /// how, when it ended early (a panic): it is started again.
    PartitionsEnded(Option<String>),
    /// Start the worker of `slot` again (after a crash and its backoff).
    RestartWorker(SlotId),
    /// A job's wait for another job began or ended.
    Wait(SlotWait),
    /// Resume a paused type (after too many crashes, or by an operator);
    /// answers whether it was paused.
    Resume(RpcReplyPort<bool>),
    /// An operator's pause: claim nothing more (running jobs finish, jobs
    /// waiting here go back to the queue); answers whether it was running.
    Pause(RpcReplyPort<bool>),
    /// An operator's pause (`pause: true`) or resume of one value of the
    /// type's partitioning header: its partition queue `queue` is held
    /// (nothing more of it is claimed; its jobs waiting here go back to
    /// the queue, running ones finish) or let go. Answers whether it
    /// changed.
    PauseValue {
        /// The value's partition queue (`keys::partition_queue`).
        queue: String,
        /// Pause, or resume.
        pause: bool,
        /// Whether it changed.
        reply: RpcReplyPort<bool>,
    },
    /// Sample the type's ready jobs for its metrics (feature `metrics`;
    /// sent to itself every `sample::SAMPLE_EVERY`).
    SampleReady,
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

/// The typed handle of a job type's (or pipeline's) pool, for its supervisor.
#[derive(Debug, Clone)]
pub(crate) struct PoolRef(pub(crate) ActorRef<PoolMessage>);

impl PoolRef {
    #[cfg(feature = "testing")]
    /// The pool's actor cell (to link, watch or kill it).
    pub(crate) fn get_cell(&self) -> ractor::ActorCell {
        self.0.get_cell()
    }

    /// Stop claiming and answer once nothing is held, with the number of jobs
    /// given back at the end of `grace` (see [`PoolMessage::Drain`]).
    pub(crate) async fn drain(
        &self,
        grace: Option<Duration>,
    ) -> std::result::Result<usize, ractor::RactorErr<PoolMessage>> {
        ractor::call!(self.0, PoolMessage::Drain, grace)
    }

    /// The pool's counters (`None` if it stopped before it answered).
    pub(crate) async fn stats(&self) -> Option<PoolStats> {
        ractor::call!(self.0, PoolMessage::GetStats).ok()
    }

    /// Resume the type if it is paused; answers whether it was.
    pub(crate) async fn resume(&self) -> crate::Result<bool> {
        ractor::call!(self.0, PoolMessage::Resume)
            .map_err(|e| crate::EngineError::unavailable("handler pool", e))
    }

    /// Pause the type (an operator's pause); answers whether it was running.
    pub(crate) async fn pause(&self) -> crate::Result<bool> {
        ractor::call!(self.0, PoolMessage::Pause)
            .map_err(|e| crate::EngineError::unavailable("handler pool", e))
    }

    /// Pause or resume one value's partition queue (see
    /// [`PoolMessage::PauseValue`]); answers whether it changed.
    pub(crate) async fn pause_value(&self, queue: String, pause: bool) -> crate::Result<bool> {
        ractor::call!(self.0, |reply| PoolMessage::PauseValue {
            queue,
            pause,
            reply
        })
        .map_err(|e| crate::EngineError::unavailable("handler pool", e))
    }
}

impl From<Claimed> for PoolMessage {
    fn from(c: Claimed) -> Self {
        Self::Claimed(c)
    }
}

impl TryFrom<PoolMessage> for Claimed {
    type Error = PoolMessage;
    fn try_from(m: PoolMessage) -> Result<Self, PoolMessage> {
        match m {
            PoolMessage::Claimed(claimed) => Ok(claimed),
            other => Err(other),
        }
    }
}

/// What a pool tells its supervisor when it finds the store closed under
/// it: another process opened it as its writer (fenced), or it was closed.
/// Nothing this engine settles can commit any more.
#[derive(Debug, Clone)]
pub struct StoreClosed {
    /// Why, as the store said.
    pub reason: String,
}

impl From<SlotWait> for PoolMessage {
    fn from(wait: SlotWait) -> Self {
        Self::Wait(wait)
    }
}

impl TryFrom<PoolMessage> for SlotWait {
    type Error = PoolMessage;
    fn try_from(m: PoolMessage) -> Result<Self, PoolMessage> {
        match m {
            PoolMessage::Wait(wait) => Ok(wait),
            other => Err(other),
        }
    }
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
    /// Queues the pool knows: the type's own and the partition queues (per
    /// header value) it learned and has not forgotten. A fair type forgets
    /// a value's queue once it has stayed drained for the engine's
    /// `forget_drained_after` (a minute by default).
    pub queues: usize,
    /// A fair type's values in its claim ring (those that may have jobs
    /// ready); 0 for other types.
    pub ready_values: usize,
}

/// Arguments of a pool.
#[derive(Clone)]
pub(crate) struct PoolArguments {
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
    /// What jobs can reach of their engine (child submissions and waits).
    pub jobs: Arc<dyn crate::erased::JobEngine>,
    /// Start paused: an operator paused the type (durably).
    pub paused: bool,
    /// Partition queues of values an operator paused (durably, see
    /// `keys::paused_value_key`): held from the start.
    pub paused_values: Vec<String>,
    /// At most this many starts per period (`register_with_rate`).
    pub rate: Option<crate::exec::rate::RateLimit>,
    /// Fairness and a limit per key (`JobOptions::fair_by`,
    /// `JobOptions::key_concurrency`): `None` for a type with neither.
    pub fair: Option<crate::exec::fair::FairConfig>,
    /// The type's timeout per attempt (`JobOptions::timeout`); a job's own
    /// (its `gaffer.timeout` header) beats it.
    pub timeout: Option<Duration>,
    /// The most snoozes one job may make (its type's, else the engine's).
    pub max_snoozes: u32,
    /// Where it says that the store closed: its supervisor.
    pub closed: DerivedActorRef<StoreClosed>,
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

/// The handler pool actor.
#[derive(Debug)]
pub(crate) struct HandlerPool;

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

/// A settlement in flight.
#[derive(Debug)]
struct Settling {
    /// The lease of the job it ends, and the lease's length.
    lease: taquba::LeaseHandle,
    duration: Duration,
    /// Its claim's queue: the job counts against its value's limit per key
    /// until the settlement reports.
    queue: String,
    /// It may put the job back on its queue (anything but a success).
    may_return: bool,
}

/// State of a pool.
#[derive(Debug)]
pub(crate) struct PoolState {
    args: PoolArguments,
    slots: BTreeMap<SlotId, Slot>,
    next_slot: SlotId,
    by_actor: HashMap<ActorId, SlotId>,
    idle: VecDeque<SlotId>,
    backlog: VecDeque<Held>,
    parked: usize,
    /// The claim in flight: how many jobs it may bring from which queue.
    claiming: Option<crate::exec::rate::Plan>,
    /// Its claimer (`None` while a dead one is being replaced).
    claimer: Option<ActorRef<ClaimerMessage>>,
    /// The store closed under it: it claims nothing more.
    closed: bool,
    /// Cancelled when the pool drains, or its state is dropped (the pool
    /// stopped or was killed): stops the claim task and ends parked waits.
    draining_token: CancellationToken,
    _cancel_on_drop: tokio_util::sync::DropGuard,
    /// Settlements in flight, by number: the lease of each job they end,
    /// kept alive until the settlement reports, and its claim's queue.
    settling: HashMap<u64, Settling>,
    next_settlement: u64,
    restarts: Restarts,
    crashes: u64,
    drains: Vec<RpcReplyPort<usize>>,
    draining: bool,
    abandoned: usize,
    paused: bool,
    /// The queues it claims from and the type's rate limit: tokens are
    /// taken for a claim's size when it starts, and those it did not use
    /// given back when it lands.
    limiter: crate::exec::rate::Limiter,
    /// A wake for the next token is scheduled.
    rate_wake: bool,
    /// Wakes a claim waiting on partition queues when a new one is learned
    /// (a wake-up signal, not state: a permit is kept until taken).
    partition_wake: Arc<tokio::sync::Notify>,
    /// The type's metric handles, shared with its workers and tasks.
    metrics: crate::telemetry::TypeMetrics,
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
        if self.paused
            || self.draining
            || self.closed
            || self.settling.len() >= self.settings().settlement_window
        {
            return 0;
        }
        self.idle.len().saturating_sub(self.backlog.len())
    }
}

impl PoolState {
    fn stats(&self) -> PoolStats {
        PoolStats {
            workers: self.slots.values().filter(|s| s.worker.is_some()).count(),
            running: self.running(),
            parked: self.parked,
            backlog: self.backlog.len(),
            settling: self.settling.len(),
            crashes: self.crashes,
            paused: self.paused,
            queues: self.limiter.known_len(),
            ready_values: self.limiter.ring().map_or(0, |r| r.len()),
        }
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
        let restarts = Restarts::new(args.services.settings());
        let paused = args.paused;
        let mut limiter = crate::exec::rate::Limiter::new(args.queue.clone(), args.rate.clone());
        if let Some(fair) = &args.fair {
            limiter = limiter.fair(fair.clone());
        }
        for q in &args.paused_values {
            limiter.pause_value(q, true);
        }
        let metrics = crate::telemetry::TypeMetrics::new(&args.job_type);
        let mut state = PoolState {
            metrics,
            limiter,
            rate_wake: false,
            partition_wake: Arc::new(tokio::sync::Notify::new()),
            args,
            slots: BTreeMap::new(),
            next_slot: 0,
            by_actor: HashMap::new(),
            idle: VecDeque::new(),
            backlog: VecDeque::new(),
            parked: 0,
            claiming: None,
            claimer: None,
            closed: false,
            _cancel_on_drop: draining_token.clone().drop_guard(),
            draining_token,
            settling: HashMap::new(),
            next_settlement: 0,
            restarts,
            crashes: 0,
            drains: Vec::new(),
            draining: false,
            abandoned: 0,
            paused,
        };
        state.args.concurrency = n;
        for _ in 0..n {
            state.add_slot(&myself).await;
        }
        state.spawn_claimer(&myself).await;
        // A job type's partition queues (a rate limit per header value, now
        // or in an earlier configuration); pipelines have none.
        if matches!(
            state.args.services.route(&state.args.job_type),
            Some(crate::services::Route {
                kind: crate::erased::Kind::Job,
                ..
            })
        ) {
            let follow = state.limiter.partitioned();
            state.watch_partitions(&myself, follow);
        }
        state.maybe_claim(&myself);
        myself.send_after(state.renew_every(), || PoolMessage::KeepLeases);
        if state.limiter.ring().is_some() {
            myself.send_after(state.settings().poll_interval, || PoolMessage::CheckIdle);
        }
        if crate::telemetry::TypeMetrics::ENABLED
            && state.args.services.route(&state.args.job_type).is_some()
        {
            myself.send_after(sample::SAMPLE_EVERY, || PoolMessage::SampleReady);
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
            PoolMessage::Claimed(claimed) => state.claimed(&myself, claimed),
            PoolMessage::CheckIdle => {
                state.check_idle(&myself);
                myself.send_after(state.settings().poll_interval, || PoolMessage::CheckIdle);
            }
            PoolMessage::Retry => state.retry(&myself),
            PoolMessage::ForgetChecked(found) => state.forget_checked(&myself, found),
            PoolMessage::Partitions(queues) => state.learn_partitions(&myself, queues, true),
            PoolMessage::Listed(queues) => state.learn_partitions(&myself, queues, false),
            PoolMessage::PartitionsEnded(early) => state.partitions_ended(&myself, early),
            PoolMessage::WorkerDone {
                slot,
                verdict,
                effects,
                cost,
            } => state.finish(&myself, slot, verdict, effects, cost),
            PoolMessage::Settled(n) => state.settled(&myself, n),
            PoolMessage::KeepLeases => {
                state.keep_leases();
                myself.send_after(state.renew_every(), || PoolMessage::KeepLeases);
            }
            PoolMessage::RestartClaimer => state.restart_claimer(&myself).await,
            PoolMessage::RestartWorker(slot) => state.restart_worker(&myself, slot).await,
            PoolMessage::Wait(SlotWait::Park(slot)) => state.park(&myself, slot).await,
            PoolMessage::Wait(SlotWait::Unpark(slot)) => state.unpark(slot),
            PoolMessage::Pause(reply) => {
                let _ = reply.send(state.operator_pause(&myself));
            }
            PoolMessage::Resume(reply) => {
                let resumed = state.resume(&myself).await;
                let _ = reply.send(resumed);
            }
            PoolMessage::PauseValue {
                queue,
                pause,
                reply,
            } => {
                let _ = reply.send(state.pause_value(&myself, &queue, pause));
            }
            PoolMessage::SampleReady => state.sample_ready(&myself),
            PoolMessage::Drain(grace, reply) => state.drain(&myself, grace, reply),
            PoolMessage::DrainDeadline => state.abandon(&myself),
            PoolMessage::GetStats(reply) => {
                let _ = reply.send(state.stats());
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
        let (who, reason) = match event {
            SupervisionEvent::ActorFailed(who, err) => (who, err.to_string()),
            SupervisionEvent::ActorTerminated(who, _, reason) => {
                (who, reason.unwrap_or_else(|| "stopped".into()))
            }
            _ => return Ok(()),
        };
        if state
            .claimer
            .as_ref()
            .is_some_and(|c| c.get_id() == who.get_id())
        {
            state.claimer_died(&myself, reason);
        } else {
            state.crashed(&myself, who, reason);
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
