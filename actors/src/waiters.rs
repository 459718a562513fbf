//! Waiters: the one actor that resolves callers waiting for a job to end.
//!
//! Owns the map run id → waiting callers. Completions are pushed to it by the
//! settlement that ended the run (or by the sweeper's reconciliation, or a
//! cancel); it never polls per handle. A new waiter triggers one read of the
//! durable records, so a run that ended before the waiter arrived (or in an
//! earlier process) answers from its outcome record.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, DerivedActorRef, RpcReplyPort};

use crate::records::OutcomeRecord;
use crate::services::Services;

/// Why a wait ended without an outcome.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    /// No job with this id is known: never submitted, or retention removed its record.
    #[error("no job `{0}` is known: it was never submitted here, or retention removed its record")]
    NotFound(String),
    /// The engine shut down before the job ended.
    #[error("the engine shut down before the job ended")]
    ShutDown,
    /// Reading the records failed.
    #[error("reading the job's records failed: {0}")]
    Read(String),
}

/// The message an actor that watches a job receives when the job ends.
#[derive(Debug, Clone)]
pub struct JobFinished {
    /// The run id watched.
    pub run_id: String,
    /// Its outcome record, or why there is none.
    pub result: Result<OutcomeRecord, WaitError>,
}

/// Someone waiting for a job to end.
#[derive(Debug)]
pub enum Waiter {
    /// A caller blocked in `call!`.
    Reply(RpcReplyPort<Result<OutcomeRecord, WaitError>>),
    /// An actor told by message.
    Notify(DerivedActorRef<JobFinished>),
}

impl Waiter {
    fn resolve(self, run_id: &str, result: Result<OutcomeRecord, WaitError>) {
        match self {
            Self::Reply(port) => {
                let _ = port.send(result);
            }
            Self::Notify(to) => {
                let _ = to.send_message(JobFinished {
                    run_id: run_id.to_string(),
                    result,
                });
            }
        }
    }
}

/// Messages of the waiters actor.
#[derive(Debug)]
pub enum WaitersMessage {
    /// Wait for `run_id` to end.
    Await {
        /// Run id.
        run_id: String,
        /// Who to tell.
        waiter: Waiter,
        /// Its outcome record as the caller already read it (a submission
        /// answered from it): it answers at once, without a read, unless a
        /// terminal commit of this run is in flight.
        recorded: Option<Box<OutcomeRecord>>,
    },
    /// A settlement ended `run_id`.
    Settled {
        /// Run id.
        run_id: String,
        /// Its outcome record.
        record: Box<OutcomeRecord>,
    },
    /// A terminal commit of `run_id` is starting: until it is durable (a
    /// `Settled` or `SettleAborted` follows), a record read from the store may
    /// not be durable yet, so reads do not answer for this run.
    Settling(String),
    /// The terminal commit announced by `Settling` did not happen.
    SettleAborted(String),
    /// The outcome of a run if it has durably ended (`None` while running or
    /// settling); answers `fetch_result` and `status` without waiting.
    Peek(
        String,
        RpcReplyPort<Result<Option<OutcomeRecord>, WaitError>>,
    ),
    /// The read started by `Peek` finished.
    Peeked(
        String,
        Result<Option<OutcomeRecord>, WaitError>,
        RpcReplyPort<Result<Option<OutcomeRecord>, WaitError>>,
    ),
    /// The durable check started by `Await` finished: `Ok(None)` = still running.
    Checked {
        /// Run id.
        run_id: String,
        /// What the records said.
        result: Result<Option<OutcomeRecord>, WaitError>,
    },
    /// The engine is shutting down: fail every waiter.
    FailAll,
    /// How many runs have waiters.
    GetWaiting(RpcReplyPort<usize>),
}

/// The waiters actor.
#[derive(Debug)]
pub struct Waiters;

/// State of the waiters actor.
#[derive(Debug)]
pub struct WaitersState {
    services: Arc<Services>,
    waiting: HashMap<String, Vec<Waiter>>,
    /// Runs whose terminal commit is in flight (count of commits).
    settling: HashMap<String, usize>,
}

impl WaitersState {
    fn add(
        &mut self,
        myself: &ActorRef<WaitersMessage>,
        run_id: String,
        waiter: Waiter,
        recorded: Option<Box<OutcomeRecord>>,
    ) {
        // A record the caller read is durable unless its commit is in flight:
        // a commit is announced (`Settling`) before it begins and leaves
        // `settling` only once it is durable (or aborted, as a read here would
        // see it too). Otherwise the records are read as for any waiter.
        if let Some(record) = recorded
            && !self.settling.contains_key(&run_id)
        {
            waiter.resolve(&run_id, Ok(*record));
            return;
        }
        self.waiting.entry(run_id.clone()).or_default().push(waiter);
        let services = self.services.clone();
        let myself = myself.clone();
        tokio::spawn(async move {
            let result = check(&services, &run_id).await;
            let _ = myself.cast(WaitersMessage::Checked { run_id, result });
        });
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
        for waiter in self.waiting.remove(run_id).unwrap_or_default() {
            waiter.resolve(run_id, result.clone());
        }
    }
}

/// Read the outcome record first: a run that has ended answers with one read
/// (an outcome record and a run record never exist together, so no newer run
/// can hide behind it). Otherwise the run record: if it exists the run has not
/// ended, and its end will be pushed to us. If neither was seen, the run may
/// have ended between the two reads (its outcome record is committed in the
/// same transaction that deletes its run record): the outcome record is read
/// once more, and if it is still absent nothing is known.
async fn check(services: &Services, run_id: &str) -> Result<Option<OutcomeRecord>, WaitError> {
    let read = |e: crate::EngineError| match e {
        crate::EngineError::ShutDown => WaitError::ShutDown,
        e => WaitError::Read(e.to_string()),
    };
    if let Some(rec) = services.outcome(run_id).await.map_err(read)? {
        return Ok(Some(rec));
    }
    if services
        .run_record_of(run_id)
        .await
        .map_err(read)?
        .is_some()
    {
        return Ok(None);
    }
    match services.outcome(run_id).await.map_err(read)? {
        Some(rec) => Ok(Some(rec)),
        None => Err(WaitError::NotFound(run_id.to_string())),
    }
}

impl Actor for Waiters {
    type Msg = WaitersMessage;
    type State = WaitersState;
    type Arguments = Arc<Services>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        services: Arc<Services>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(WaitersState {
            services,
            waiting: HashMap::new(),
            settling: HashMap::new(),
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
                waiter,
                recorded,
            } => state.add(&myself, run_id, waiter, recorded),
            WaitersMessage::Settled { run_id, record } => {
                state.settle_done(&run_id);
                state.resolve(&run_id, Ok(*record))
            }
            WaitersMessage::Settling(run_id) => *state.settling.entry(run_id).or_default() += 1,
            WaitersMessage::SettleAborted(run_id) => state.settle_done(&run_id),
            WaitersMessage::Peek(run_id, reply) => {
                if state.settling.contains_key(&run_id) {
                    let _ = reply.send(Ok(None));
                } else {
                    let services = state.services.clone();
                    let me = myself.clone();
                    tokio::spawn(async move {
                        let result = services.outcome(&run_id).await.map_err(|e| match e {
                            crate::EngineError::ShutDown => WaitError::ShutDown,
                            e => WaitError::Read(e.to_string()),
                        });
                        let _ = me.cast(WaitersMessage::Peeked(run_id, result, reply));
                    });
                }
            }
            // A commit whose record this read may have seen was announced
            // (Settling) before it began, so it is in `settling` now unless it
            // is durable: only then does the read answer.
            WaitersMessage::Peeked(run_id, result, reply) => {
                let answer = if state.settling.contains_key(&run_id) {
                    Ok(None)
                } else {
                    result
                };
                let _ = reply.send(answer);
            }
            // A record read while its commit was in flight may not be durable:
            // the pushed `Settled` (sent once it is) answers instead.
            WaitersMessage::Checked { run_id, .. } if state.settling.contains_key(&run_id) => {}
            WaitersMessage::Checked { run_id, result } => match result {
                Ok(None) => {}
                Ok(Some(record)) => state.resolve(&run_id, Ok(record)),
                Err(e) => state.resolve(&run_id, Err(e)),
            },
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
mod tests {
    use std::time::Duration;

    use taquba::Queue;
    use taquba::object_store::{ObjectStore, memory::InMemory};

    use super::*;
    use crate::records::{Outcome, OutputRef};
    use crate::settings::Settings;

    const LIMIT: Duration = Duration::from_secs(5);

    fn record(output: u8) -> OutcomeRecord {
        OutcomeRecord {
            job_id: "job".into(),
            job_type: "t".into(),
            input_hash: [0; 32],
            attempts: 1,
            finished_at_ms: 0,
            outcome: Outcome::Succeeded(OutputRef::Inline(vec![output])),
        }
    }

    /// A waiters actor over an empty store: a read of any run finds nothing.
    async fn waiters() -> (ActorRef<WaitersMessage>, Arc<Queue>) {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let queue = Arc::new(Queue::open(store.clone(), "q").await.unwrap());
        let services = Services::new(&queue, store, Settings::default(), queue.clock());
        let (actor, _) = Actor::spawn(None, Waiters, Arc::new(services))
            .await
            .unwrap();
        (actor, queue)
    }

    fn await_recorded(
        actor: &ActorRef<WaitersMessage>,
        run_id: &str,
        recorded: Option<OutcomeRecord>,
    ) -> tokio::task::JoinHandle<Result<OutcomeRecord, WaitError>> {
        let actor = actor.clone();
        let run_id = run_id.to_string();
        tokio::spawn(async move {
            actor
                .call(
                    |reply| WaitersMessage::Await {
                        run_id,
                        waiter: Waiter::Reply(reply),
                        recorded: recorded.map(Box::new),
                    },
                    Some(LIMIT),
                )
                .await
                .expect("the waiters actor answers")
                .success_or(WaitError::Read("no answer in time".into()))
                .expect("answered in time")
        })
    }

    #[tokio::test]
    async fn a_record_the_caller_read_answers_without_a_read() {
        let (actor, _queue) = waiters().await;
        // The store holds nothing for this run: a read would answer NotFound.
        let got = await_recorded(&actor, "r", Some(record(7))).await.unwrap();
        assert_eq!(got, Ok(record(7)));
        let got = await_recorded(&actor, "r", None).await.unwrap();
        assert_eq!(
            got,
            Err(WaitError::NotFound("r".into())),
            "a read finds nothing"
        );
        actor.stop(None);
    }

    #[tokio::test]
    async fn a_record_read_while_its_commit_is_in_flight_waits_for_the_durable_settlement() {
        let (actor, _queue) = waiters().await;
        actor.cast(WaitersMessage::Settling("r".into())).unwrap();
        let waiting = await_recorded(&actor, "r", Some(record(7)));
        // Messages are handled in order: once the count is 1, the `Await` was
        // handled and did not answer from the record it carried.
        let mut waiting_count = 0;
        for _ in 0..1000 {
            waiting_count = ractor::call!(actor, WaitersMessage::GetWaiting).unwrap();
            if waiting_count == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            waiting_count, 1,
            "the caller waits instead of being answered"
        );
        assert!(!waiting.is_finished());
        actor
            .cast(WaitersMessage::Settled {
                run_id: "r".into(),
                record: Box::new(record(8)),
            })
            .unwrap();
        assert_eq!(waiting.await.unwrap(), Ok(record(8)));
        actor.stop(None);
    }
}
