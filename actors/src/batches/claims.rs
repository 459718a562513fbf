//! Claims on batch ids: the one run (or forget) of each batch in progress in
//! this process, and the callers watching a run.
//!
//! The claims are held by the supervisor, which outlives every other actor of
//! the engine: a run lives in its driver, in its caller's task, and survives
//! restarts of the batches registry and of its coordinator; so the decision
//! that a batch id is taken cannot live in an actor that restarts. A driver
//! claims its batch id before anything else and holds the claim (a `Claim`,
//! released when dropped, also when the run future is dropped) until its
//! caller is answered. A second run, a resume or a forget of a claimed id is
//! refused with `BatchRunning`, whatever restarted in between.
//!
//! A run's claim also holds its watchers (told the run's result when it is
//! released) and the way to its driver for a sink that takes over the run's
//! records (`AttachBatch`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{DerivedActorRef, RpcReplyPort};
use tokio::sync::mpsc;

use crate::batches::spec::{BatchFinished, BatchOutcome, RecordSink, SinkAttached, SinkTakeover};
use crate::error::{EngineError, Result};

/// The answer to a sink's takeover.
pub(crate) type AttachReply = RpcReplyPort<Result<SinkAttached>>;

/// A sink taking over a run's records, on its way to the run's driver and on
/// to its coordinator.
pub struct Attach {
    /// The new sink.
    pub sink: Arc<dyn RecordSink>,
    /// Answered where the switch fell.
    pub reply: AttachReply,
}

impl std::fmt::Debug for Attach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attach").finish_non_exhaustive()
    }
}

/// Messages of the claims (handled by the supervisor).
#[derive(Debug)]
pub enum ClaimMessage {
    /// Claim a batch id: for a run (`attach`: where the run's driver takes a
    /// sink that takes over) or a forget (`None`). Answered with the claim's
    /// token, or `BatchRunning` if the id is claimed.
    Claim {
        /// The batch.
        batch_id: String,
        /// The run's driver, for takeovers of its sink.
        attach: Option<mpsc::UnboundedSender<Attach>>,
        /// Answered with the token.
        reply: RpcReplyPort<Result<u64>>,
    },
    /// The claim `token` ended with `result`: its watchers are told, the id
    /// is free. A stale token (not the id's claim) changes nothing.
    Release {
        /// The batch.
        batch_id: String,
        /// The claim's token.
        token: u64,
        /// How the run ended.
        result: Result<BatchOutcome>,
    },
}

/// The claims on batch ids in this process (the supervisor's).
#[derive(Debug, Default)]
pub(crate) struct Claims {
    held: HashMap<String, Held>,
    /// The last token given.
    last: u64,
}

#[derive(Debug)]
struct Held {
    token: u64,
    /// `None` for a forget.
    run: Option<RunClaim>,
}

#[derive(Debug)]
struct RunClaim {
    attach: mpsc::UnboundedSender<Attach>,
    watchers: Vec<DerivedActorRef<BatchFinished>>,
}

/// Times a takeover is handed to the run's driver again when the coordinator
/// it went to died before it answered.
const ATTACH_ATTEMPTS: u32 = 20;

impl Claims {
    /// Handle a claim or a release.
    pub(crate) fn handle(&mut self, message: ClaimMessage) {
        match message {
            ClaimMessage::Claim {
                batch_id,
                attach,
                reply,
            } => {
                if self.held.contains_key(&batch_id) {
                    let _ = reply.send(Err(EngineError::BatchRunning(batch_id)));
                    return;
                }
                self.last += 1;
                let run = attach.map(|attach| RunClaim {
                    attach,
                    watchers: Vec::new(),
                });
                let token = self.last;
                self.held.insert(batch_id, Held { token, run });
                let _ = reply.send(Ok(token));
            }
            ClaimMessage::Release {
                batch_id,
                token,
                result,
            } => {
                if self.held.get(&batch_id).is_none_or(|h| h.token != token) {
                    return;
                }
                let Some(Held { run: Some(run), .. }) = self.held.remove(&batch_id) else {
                    return;
                };
                for watcher in run.watchers {
                    let _ = watcher.send_message(BatchFinished {
                        batch_id: batch_id.clone(),
                        result: result.clone(),
                    });
                }
            }
        }
    }

    /// Tell `to` when the run of `batch_id` in progress ends (at once,
    /// `BatchNotRunning`, if none is).
    pub(crate) fn watch(&mut self, batch_id: String, to: DerivedActorRef<BatchFinished>) {
        match self.held.get_mut(&batch_id).and_then(|h| h.run.as_mut()) {
            Some(run) => run.watchers.push(to),
            None => {
                let _ = to.send_message(BatchFinished {
                    result: Err(EngineError::BatchNotRunning(batch_id.clone())),
                    batch_id,
                });
            }
        }
    }

    /// Watch the run of `takeover.batch_id` in progress and hand its sink to
    /// the run's driver, which hands it to the run's coordinator: `reply` is
    /// answered from a task (`BatchNotRunning` if no run is in progress).
    pub(crate) fn attach(&mut self, takeover: SinkTakeover, reply: AttachReply) {
        let SinkTakeover { batch_id, sink, to } = takeover;
        let Some(run) = self.held.get_mut(&batch_id).and_then(|h| h.run.as_mut()) else {
            let _ = reply.send(Err(EngineError::BatchNotRunning(batch_id)));
            return;
        };
        run.watchers.push(to);
        let driver = run.attach.clone();
        let work = async move { hand_over(&driver, &batch_id, sink).await };
        crate::task::spawn_reported(work, move |ended| {
            let _ = reply.send(ended.unwrap_or_else(|e| {
                Err(EngineError::Internal {
                    doing: "handing a sink over to a running batch",
                    reason: e.to_string(),
                })
            }));
        });
    }
}

/// Hand `sink` to the run's driver until a coordinator of the run answers:
/// one that dies first drops the answer, and the driver hands the sink to its
/// replacement (which starts with it). `BatchNotRunning` once the driver is
/// gone (the run ended). Bounded: [`ATTACH_ATTEMPTS`], with a growing pause.
async fn hand_over(
    driver: &mpsc::UnboundedSender<Attach>,
    batch_id: &str,
    sink: Arc<dyn RecordSink>,
) -> Result<SinkAttached> {
    for attempt in 0..ATTACH_ATTEMPTS {
        let (reply, answer) = ractor::concurrency::oneshot();
        let attach = Attach {
            sink: sink.clone(),
            reply: reply.into(),
        };
        if driver.send(attach).is_err() {
            return Err(EngineError::BatchNotRunning(batch_id.to_string()));
        }
        match answer.await {
            Ok(answer) => return answer,
            Err(_) => tokio::time::sleep(Duration::from_millis(10) * (attempt + 1)).await,
        }
    }
    Err(EngineError::unavailable(
        "batch coordinator",
        format!("it kept dying while a sink took over the run of `{batch_id}`"),
    ))
}

/// A batch id claimed by a run or a forget: released when dropped (with the
/// result given to [`Claim::end`], else as abandoned).
#[derive(Debug)]
pub(crate) struct Claim {
    claims: DerivedActorRef<ClaimMessage>,
    batch_id: String,
    token: u64,
    result: Option<Result<BatchOutcome>>,
}

impl Claim {
    /// Claim `batch_id` (for a run when `attach` is given): `BatchRunning` if
    /// it is claimed, `ShutDown` if the engine stopped.
    pub(crate) async fn take(
        claims: &DerivedActorRef<ClaimMessage>,
        batch_id: &str,
        attach: Option<mpsc::UnboundedSender<Attach>>,
    ) -> Result<Self> {
        let (reply, answer) = ractor::concurrency::oneshot();
        claims
            .send_message(ClaimMessage::Claim {
                batch_id: batch_id.to_string(),
                attach,
                reply: reply.into(),
            })
            .map_err(|_| EngineError::ShutDown)?;
        // The supervisor answers at once; it drops the port only when it stops.
        let token = answer.await.map_err(|_| EngineError::ShutDown)??;
        Ok(Self {
            claims: claims.clone(),
            batch_id: batch_id.to_string(),
            token,
            result: None,
        })
    }

    /// Release the claim: the run's watchers are told `result`.
    pub(crate) fn end(mut self, result: &Result<BatchOutcome>) {
        self.result = Some(result.clone());
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err(EngineError::BatchAbandoned(self.batch_id.clone())));
        let _ = self.claims.send_message(ClaimMessage::Release {
            batch_id: std::mem::take(&mut self.batch_id),
            token: self.token,
            result,
        });
    }
}
