//! Waiters: the one actor that resolves callers waiting for a job to end.
//!
//! Owns the map run id → waiting callers. Completions are pushed to it by the
//! settlement that ended the run (or by a cancel); it never polls per handle.
//! A new waiter triggers one read of the durable records, so a run that ended
//! before the waiter arrived (or in an earlier process) answers from its
//! outcome record.
//!
//! Durability. taquba's reads see commits that are not yet durable, so every
//! ending commit is announced (`Settling`) before it starts and a record read
//! while its run is settling does not answer: the pushed `Settled` (sent once
//! the commit is durable) does. A waiters actor started to replace one that
//! died never saw the announcements of the commits then in flight, so it runs
//! in *barrier mode* for its life: an answer drawn from a read (a record found
//! by a late waiter, a `Peek`, a record a submission carried) waits for one
//! durable barrier write ([`keys::BARRIER_KEY`]) issued after the read; once
//! the barrier is durable, so is everything the read could see. Barriers are
//! shared: every answer held while one is in flight waits for the next.
//! Settlements address the waiters through the supervisor's address book
//! (`Notify`), so a settlement that began before a restart tells the new
//! actor when it ends.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::engine::notify::JobEnd;
use crate::layout::keys;
use crate::layout::records::OutcomeRecord;
use crate::services::Services;

/// Why a wait ended without an outcome.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// No job with this id is known: never submitted, or retention removed its record.
    #[error("no job `{0}` is known: it was never submitted here, or retention removed its record")]
    NotFound(String),
    /// The id is a queue job's that was put on the queue directly, not
    /// submitted through gaffer: it has no outcome to wait for.
    #[error(
        "queue job `{0}` was not submitted through gaffer: gaffer does not run it and keeps no \
         outcome for it"
    )]
    NotSubmittedThroughGaffer(String),
    /// The engine shut down before the job ended.
    #[error("the engine shut down before the job ended")]
    ShutDown,
    /// Reading the job's records failed, or the engine's waiters could not
    /// be reached.
    #[error("reading the job's records failed: {0}")]
    Read(crate::EngineError),
}

/// The message an actor that watches a job receives when the job ends.
#[derive(Debug, Clone)]
pub struct JobFinished {
    /// The run id watched.
    pub run_id: String,
    /// Its outcome record, or why there is none.
    pub result: Result<OutcomeRecord, WaitError>,
}

/// A caller waiting for a job to end.
pub type WaitReply = RpcReplyPort<Result<OutcomeRecord, WaitError>>;
/// A caller asking whether a job has durably ended: `Ok(None)` = it exists
/// and has not (durably) ended, `NotFound` = no record of it.
pub type PeekReply = RpcReplyPort<Result<Option<OutcomeRecord>, WaitError>>;

/// Messages of the waiters actor.
#[derive(Debug)]
pub enum WaitersMessage {
    /// Wait for `run_id` to end.
    Await {
        /// Run id.
        run_id: String,
        /// Who to tell.
        reply: WaitReply,
        /// Its outcome record as the caller already read it (a submission
        /// answered from it): it answers without a read, unless a terminal
        /// commit of this run is in flight.
        recorded: Option<Box<OutcomeRecord>>,
    },
    /// A settlement (or a cancel) reports on a run's terminal commit.
    End(JobEnd),
    /// The outcome of a run if it has durably ended (`None` while it is
    /// queued, running or settling; `NotFound` if neither of its records
    /// exists); answers `outcome` and `status` without waiting.
    Peek(String, PeekReply),
    /// The read started by `Peek` finished.
    Peeked(String, Result<Option<OutcomeRecord>, WaitError>, PeekReply),
    /// The durable check started by `Await` finished: `Ok(None)` = still running.
    Checked {
        /// Run id.
        run_id: String,
        /// What the records said.
        result: Result<Option<OutcomeRecord>, WaitError>,
    },
    /// A barrier write finished (barrier mode).
    Barrier(Result<(), crate::EngineError>),
    /// The engine is shutting down: fail every waiter.
    FailAll,
    /// How many runs have waiters.
    GetWaiting(RpcReplyPort<usize>),
}

/// The typed handle of the waiters, for their supervisor. A request whose
/// waiters die drops its reply port: the caller (`EngineRef::wait_for`) asks
/// again.
#[derive(Debug, Clone)]
pub struct WaitersRef(pub(crate) ActorRef<WaitersMessage>);

impl WaitersRef {
    /// The actor's cell.
    pub fn get_cell(&self) -> ractor::ActorCell {
        self.0.get_cell()
    }

    /// Answer `reply` when `run_id` ends; `recorded` is its outcome record as
    /// the caller already read it.
    pub(crate) fn await_run(
        &self,
        run_id: String,
        recorded: Option<Box<OutcomeRecord>>,
        reply: WaitReply,
    ) {
        let _ = self.0.cast(WaitersMessage::Await {
            run_id,
            reply,
            recorded,
        });
    }

    /// Answer `reply` with the outcome of `run_id` if it has durably ended.
    pub(crate) fn peek(&self, run_id: String, reply: PeekReply) {
        let _ = self.0.cast(WaitersMessage::Peek(run_id, reply));
    }

    /// The engine is stopping: fail every waiter.
    pub(crate) fn fail_all(&self) {
        let _ = self.0.cast(WaitersMessage::FailAll);
    }
}

impl From<JobEnd> for WaitersMessage {
    fn from(end: JobEnd) -> Self {
        Self::End(end)
    }
}

impl TryFrom<WaitersMessage> for JobEnd {
    type Error = WaitersMessage;
    fn try_from(m: WaitersMessage) -> Result<Self, WaitersMessage> {
        match m {
            WaitersMessage::End(end) => Ok(end),
            other => Err(other),
        }
    }
}

/// The waiters actor.
#[derive(Debug)]
pub struct Waiters;

/// Arguments of the waiters actor.
#[derive(Debug)]
pub struct WaitersArguments {
    /// Engine services.
    pub services: Arc<Services>,
    /// Whether this actor replaces one that died (barrier mode).
    pub restarted: bool,
}

/// An answer drawn from a read, held until a barrier makes it durable.
#[derive(Debug)]
enum Held {
    /// Every waiter of `run_id` is answered with `record`.
    Await(String, Box<OutcomeRecord>),
    /// One peek is answered with `result`.
    Peek(String, Option<Box<OutcomeRecord>>, PeekReply),
}

/// Barrier mode: answers waiting for the next barrier, and those waiting for
/// the one in flight.
#[derive(Debug, Default)]
struct Barrier {
    next: Vec<Held>,
    in_flight: Option<Vec<Held>>,
}

/// State of the waiters actor.
#[derive(Debug)]
pub struct WaitersState {
    services: Arc<Services>,
    waiting: HashMap<String, Vec<WaitReply>>,
    /// Runs whose terminal commit is in flight (count of commits).
    settling: HashMap<String, usize>,
    /// Answers waiting for a durability barrier.
    barrier: Barrier,
    /// Barrier mode (a restarted actor): every answer from a read waits for
    /// a barrier.
    always_barrier: bool,
    /// Runs whose terminal commit was aborted while callers waited: they are
    /// read again, and answered from that read only after a barrier (an
    /// aborted commit may have left its record visible).
    recheck: std::collections::HashSet<String>,
}

fn read_error(e: crate::EngineError) -> WaitError {
    match e {
        crate::EngineError::ShutDown => WaitError::ShutDown,
        e => WaitError::Read(e),
    }
}

impl WaitersState {
    fn add(
        &mut self,
        myself: &ActorRef<WaitersMessage>,
        run_id: String,
        reply: WaitReply,
        recorded: Option<Box<OutcomeRecord>>,
    ) {
        self.waiting.entry(run_id.clone()).or_default().push(reply);
        // A record the caller read is durable unless its commit is in flight:
        // a commit is announced (`Settling`) before it begins and leaves
        // `settling` only once it is durable (or aborted, as a read here would
        // see it too). Otherwise the records are read as for any waiter.
        if let Some(record) = recorded
            && !self.settling.contains_key(&run_id)
        {
            self.answer(myself, Held::Await(run_id, record));
            return;
        }
        let myself = myself.clone();
        spawn_check(self.services.clone(), run_id, move |run_id, result| {
            let _ = myself.cast(WaitersMessage::Checked { run_id, result });
        });
    }

    /// Give an answer drawn from a read: at once, or (barrier mode, or a run
    /// whose commit was aborted) once a barrier issued after the read is
    /// durable.
    fn answer(&mut self, myself: &ActorRef<WaitersMessage>, held: Held) {
        let run_id = match &held {
            Held::Await(run_id, _) | Held::Peek(run_id, _, _) => run_id,
        };
        let forced = self.recheck.remove(run_id);
        if !self.always_barrier && !forced {
            self.deliver(held);
            return;
        }
        self.barrier.next.push(held);
        if self.barrier.in_flight.is_none() {
            self.start_barrier(myself);
        }
    }

    fn start_barrier(&mut self, myself: &ActorRef<WaitersMessage>) {
        let barrier = &mut self.barrier;
        if barrier.next.is_empty() {
            return;
        }
        barrier.in_flight = Some(std::mem::take(&mut barrier.next));
        let services = self.services.clone();
        let myself = myself.clone();
        let work = async move {
            match services.queue() {
                Ok(queue) => queue
                    .kv_put(keys::BARRIER_KEY, b"".as_slice())
                    .await
                    .map_err(crate::EngineError::from),
                Err(e) => Err(e),
            }
        };
        crate::task::spawn_reported(work, move |ended| {
            let result = ended.unwrap_or_else(|e| {
                Err(crate::EngineError::Internal {
                    doing: "writing the waiters' barrier",
                    reason: e.to_string(),
                })
            });
            let _ = myself.cast(WaitersMessage::Barrier(result));
        });
    }

    fn barrier_done(
        &mut self,
        myself: &ActorRef<WaitersMessage>,
        result: Result<(), crate::EngineError>,
    ) {
        let held = self.barrier.in_flight.take().unwrap_or_default();
        for h in held {
            match &result {
                Ok(()) => self.deliver(h),
                Err(e) => match h {
                    Held::Await(run_id, _) => {
                        self.resolve(&run_id, Err(WaitError::Read(e.clone())));
                    }
                    Held::Peek(_, _, reply) => {
                        let _ = reply.send(Err(WaitError::Read(e.clone())));
                    }
                },
            }
        }
        self.start_barrier(myself);
    }

    /// Deliver an answer whose read is durable. A run whose terminal commit
    /// began meanwhile is answered by that commit's push instead.
    fn deliver(&mut self, held: Held) {
        match held {
            Held::Await(run_id, record) => {
                if !self.settling.contains_key(&run_id) {
                    self.resolve(&run_id, Ok(*record));
                }
            }
            Held::Peek(run_id, record, reply) => {
                let answer = if self.settling.contains_key(&run_id) {
                    None
                } else {
                    record.map(|r| *r)
                };
                let _ = reply.send(Ok(answer));
            }
        }
    }

    fn settle_done(&mut self, run_id: &str) {
        if let Some(n) = self.settling.get_mut(run_id) {
            *n -= 1;
            if *n == 0 {
                self.settling.remove(run_id);
            }
        }
    }

    fn resolve(&mut self, run_id: &str, result: Result<OutcomeRecord, WaitError>) {
        for reply in self.waiting.remove(run_id).unwrap_or_default() {
            let _ = reply.send(result.clone());
        }
    }
}

/// Read the outcome record first: a run that has ended answers with one read
/// (an outcome record and a run record never exist together, so no newer run
/// can hide behind it). Otherwise the run record: if it exists the run has not
/// ended, and its end will be pushed to us. If neither was seen, the run may
/// have ended between the two reads (its outcome record is committed in the
/// same transaction that deletes its run record): the outcome record is read
/// once more, and if it is still absent nothing is known (or, if a queue job
/// of this id was put on the queue without gaffer's headers, it is not a
/// gaffer job).
/// [`check`] in a reported task: `done` gets its answer, or a read error
/// if the task ended without one (a panic), so the waiters never wait for
/// a check that will not come.
fn spawn_check(
    services: Arc<Services>,
    run_id: String,
    done: impl FnOnce(String, Result<Option<OutcomeRecord>, WaitError>) + Send + 'static,
) {
    let id = run_id.clone();
    let work = async move { check(&services, &id).await };
    crate::task::spawn_reported(work, move |ended| {
        let result = ended.unwrap_or_else(|e| {
            Err(WaitError::Read(crate::EngineError::Internal {
                doing: "reading a job's records for its waiters",
                reason: e.to_string(),
            }))
        });
        done(run_id, result);
    });
}

async fn check(services: &Services, run_id: &str) -> Result<Option<OutcomeRecord>, WaitError> {
    if let Some(rec) = services.outcome(run_id).await.map_err(read_error)? {
        return Ok(Some(rec));
    }
    if services
        .run_record_of(run_id)
        .await
        .map_err(read_error)?
        .is_some()
    {
        return Ok(None);
    }
    match services.outcome(run_id).await.map_err(read_error)? {
        Some(rec) => Ok(Some(rec)),
        None => match services.unknown(run_id).await {
            crate::EngineError::NotSubmittedThroughGaffer(id) => {
                Err(WaitError::NotSubmittedThroughGaffer(id))
            }
            crate::EngineError::JobNotFound(id) => Err(WaitError::NotFound(id)),
            e => Err(read_error(e)),
        },
    }
}

impl Actor for Waiters {
    type Msg = WaitersMessage;
    type State = WaitersState;
    type Arguments = WaitersArguments;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: WaitersArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(WaitersState {
            services: args.services,
            waiting: HashMap::new(),
            settling: HashMap::new(),
            barrier: Barrier::default(),
            always_barrier: args.restarted,
            recheck: Default::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            WaitersMessage::Await {
                run_id,
                reply,
                recorded,
            } => state.add(&myself, run_id, reply, recorded),
            WaitersMessage::End(JobEnd::Ended { run_id, record }) => {
                state.settle_done(&run_id);
                state.resolve(&run_id, Ok(*record))
            }
            WaitersMessage::End(JobEnd::Settling(run_id)) => {
                *state.settling.entry(run_id).or_default() += 1
            }
            WaitersMessage::End(JobEnd::Aborted(run_id)) => {
                state.settle_done(&run_id);
                // Callers waiting for the push that will not come: read the
                // records again (the run may be retried, or may have ended).
                if state.waiting.contains_key(&run_id) && !state.settling.contains_key(&run_id) {
                    state.recheck.insert(run_id.clone());
                    let me = myself.clone();
                    spawn_check(state.services.clone(), run_id, move |run_id, result| {
                        let _ = me.cast(WaitersMessage::Checked { run_id, result });
                    });
                }
            }
            WaitersMessage::Peek(run_id, reply) => {
                if state.settling.contains_key(&run_id) {
                    let _ = reply.send(Ok(None));
                } else {
                    let me = myself.clone();
                    // The same reads as a waiter's: no record at all is
                    // `NotFound`, as for `join`.
                    spawn_check(state.services.clone(), run_id, move |run_id, result| {
                        let _ = me.cast(WaitersMessage::Peeked(run_id, result, reply));
                    });
                }
            }
            // A commit whose record this read may have seen was announced
            // (Settling) before it began, so it is in `settling` now unless it
            // is durable: only then does the read answer.
            WaitersMessage::Peeked(run_id, result, reply) => match result {
                Ok(Some(record)) if !state.settling.contains_key(&run_id) => {
                    state.answer(&myself, Held::Peek(run_id, Some(Box::new(record)), reply));
                }
                Ok(_) => {
                    let _ = reply.send(Ok(None));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            // A record read while its commit was in flight may not be durable:
            // the pushed `Settled` (sent once it is) answers instead.
            WaitersMessage::Checked { run_id, .. } if state.settling.contains_key(&run_id) => {}
            WaitersMessage::Checked { run_id, result } => match result {
                Ok(None) => {
                    state.recheck.remove(&run_id);
                }
                Ok(Some(record)) => state.answer(&myself, Held::Await(run_id, Box::new(record))),
                Err(e) => state.resolve(&run_id, Err(e)),
            },
            WaitersMessage::Barrier(result) => state.barrier_done(&myself, result),
            WaitersMessage::FailAll => {
                let ids: Vec<String> = state.waiting.keys().cloned().collect();
                for id in ids {
                    state.resolve(&id, Err(WaitError::ShutDown));
                }
            }
            WaitersMessage::GetWaiting(reply) => {
                let _ = reply.send(state.waiting.len());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
