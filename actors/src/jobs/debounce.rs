//! Debounce: submissions of one job type and key within a window are one
//! run, started once the burst has been quiet for the window (or its
//! maximum delay passed).
//!
//! **Records.** An open burst is its record at `keys::debounce_key`
//! (`DebounceRecord`: the burst's run id, its timer, its first and latest
//! submission, when it closes, and the request the run is made of); its run
//! has a run record from the burst's first submission, naming the burst's
//! **timer**: a scheduled job on the engine's debounce queue
//! (`keys::debounce_queue`) whose payload is the burst's key and whose
//! time is the burst's end as it was when the timer was last written. A
//! handle on the run waits, is cancelled and reads its state (scheduled)
//! as any job's.
//!
//! **Transactions.** The first submission of a burst writes the record,
//! the run record and the timer in one transaction; each later one
//! rewrites the record (its latest time, its end pushed back, the request
//! replaced unless the debounce is leading). When the timer comes due (the
//! loop in this module claims it): an end pushed back puts the timer back
//! at the new end (acknowledged and enqueued again under its id, one
//! transaction); an end reached closes the burst: the record deleted, the
//! run's job created from the record's request (its run record rewritten
//! to name it), with the timer's acknowledgement. The next submission of
//! the key starts a new burst.
//!
//! **Serial per key.** The operations of one key (submissions and timers)
//! go through the supervisor, which holds them in a line per key ([`Debouncer`],
//! messages [`DebounceMessage`]): one batch of a key's operations is in
//! flight at a time, a reported task that reads the record once, folds
//! every operation queued meanwhile over it in order, and commits them in
//! one transaction (up to the first timer: a timer's acknowledgement is its
//! batch's transaction). Submissions from other processes come through the
//! intake into the same line, so two submitters are never both told they
//! started a burst. A batch that fails answers each of its submitters with
//! the error and commits nothing; a timer in it runs again after its lease.
//!
//! Every wait ends: a submitter's reply port travels with its operation
//! into the batch task, which answers it or drops it (a panic): the caller
//! gets an answer or `ActorUnavailable`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{DerivedActorRef, RpcReplyPort};
use taquba::{Claim, EnqueueOptions, EnqueueRequest, SettlementEffects};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::engine::notify::{JobEnd, Notify};
use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::jobs::submit::Submitted;
use crate::layout::keys;
use crate::layout::records::{self, DebounceRecord, Outcome, OutcomeRecord};
use crate::layout::request::SubmitRequest;
use crate::services::Services;

/// How long a claimed timer is held while its batch commits.
const TIMER_LEASE: Duration = Duration::from_secs(30);
/// Timers claimed at once.
const TIMER_BATCH: usize = 64;

/// A message to the debounce lines (held by the supervisor).
#[derive(Debug)]
pub enum DebounceMessage {
    /// A debounced submission: answered with the burst's run once its
    /// batch is durable.
    Submit {
        /// The submission (its `debounce` set).
        request: Box<SubmitRequest>,
        /// Where the answer goes.
        reply: RpcReplyPort<Result<Submitted>>,
    },
    /// A burst's timer came due: claimed from the debounce queue.
    Due(Box<Claim>),
    /// A batch of `key`'s operations ended, committed or not.
    Done {
        /// The burst's record key.
        key: Vec<u8>,
    },
    /// The timers' claim loop ended: with the reason when it failed.
    TimersEnded(Option<String>),
}

/// One operation on a key's burst.
#[derive(Debug)]
enum Op {
    Submit(Box<SubmitRequest>, RpcReplyPort<Result<Submitted>>),
    Due(Box<Claim>),
}

/// The debounce lines: per key, whether a batch is in flight and the
/// operations that came since. Held by the supervisor, which outlives every
/// batch task (a batch reports its end by message).
#[derive(Debug, Default)]
pub(crate) struct Debouncer {
    lines: HashMap<Vec<u8>, Line>,
    /// Stops the timers' claim loop (when the supervisor's state drops).
    timers: Option<tokio_util::sync::DropGuard>,
}

#[derive(Debug, Default)]
struct Line {
    busy: bool,
    queued: Vec<Op>,
}

impl Debouncer {
    /// Start the timers' claim loop.
    pub(crate) fn start(
        &mut self,
        me: &DerivedActorRef<DebounceMessage>,
        services: &Arc<Services>,
    ) {
        let stop = CancellationToken::new();
        self.timers = Some(stop.clone().drop_guard());
        let me = me.clone();
        let work = claim_timers(services.clone(), me.clone(), stop);
        crate::task::spawn_reported(work, move |how| {
            let why = match how {
                Ok(None) => None,
                Ok(Some(why)) => Some(why),
                Err(e) => Some(e.to_string()),
            };
            let _ = me.send_message(DebounceMessage::TimersEnded(why));
        });
    }

    /// Stop the timers' claim loop (the engine is stopping): it lets go of
    /// the queue at its next await.
    pub(crate) fn stop_timers(&mut self) {
        self.timers = None;
    }

    pub(crate) fn handle(
        &mut self,
        message: DebounceMessage,
        me: &DerivedActorRef<DebounceMessage>,
        services: &Arc<Services>,
        notify: &Notify,
    ) {
        let (key, op) = match message {
            DebounceMessage::Submit { request, reply } => {
                let Some(debounce) = &request.debounce else {
                    let _ = reply.send(Err(EngineError::InvalidSubmitOptions(
                        "a submission sent to the debounce lines is not debounced".into(),
                    )));
                    return;
                };
                (
                    keys::debounce_key(&request.job_type, &debounce.key),
                    Op::Submit(request, reply),
                )
            }
            DebounceMessage::Due(claim) => (claim.payload.clone(), Op::Due(claim)),
            DebounceMessage::Done { key } => {
                if let Some(line) = self.lines.get_mut(&key) {
                    line.busy = false;
                    if line.queued.is_empty() {
                        self.lines.remove(&key);
                    } else {
                        self.run(key, me, services, notify);
                    }
                }
                return;
            }
            DebounceMessage::TimersEnded(why) => {
                // Not after a stop (the engine is stopping).
                if let (Some(why), Some(_)) = (why, &self.timers) {
                    warn!(%why, "the debounce timers' loop ended; started again");
                    self.start(me, services);
                }
                return;
            }
        };
        let line = self.lines.entry(key.clone()).or_default();
        line.queued.push(op);
        if !line.busy {
            self.run(key, me, services, notify);
        }
    }

    /// Start a batch of `key`'s queued operations: up to its first timer.
    fn run(
        &mut self,
        key: Vec<u8>,
        me: &DerivedActorRef<DebounceMessage>,
        services: &Arc<Services>,
        notify: &Notify,
    ) {
        let Some(line) = self.lines.get_mut(&key) else {
            return;
        };
        let cut = line
            .queued
            .iter()
            .position(|op| matches!(op, Op::Due(_)))
            .map_or(line.queued.len(), |i| i + 1);
        let ops: Vec<Op> = line.queued.drain(..cut).collect();
        line.busy = true;
        let me = me.clone();
        let done = key.clone();
        let work = batch(services.clone(), notify.clone(), key, ops);
        crate::task::spawn_reported(work, move |_| {
            let _ = me.send_message(DebounceMessage::Done { key: done });
        });
    }
}

impl Services {
    /// A debounced submission: through the key's debounce line, answered
    /// with the burst's run (see `jobs::debounce`). A key, a run id or a
    /// due time of its own is refused: the burst decides its run and when
    /// it starts.
    pub(crate) async fn debounced(&self, mut req: SubmitRequest) -> Result<Submitted> {
        // A client's request names the id it answered with: the burst's
        // run id replaces it (the intake records it as the result).
        req.run_id = None;
        req.check_debounce(false)?;
        let unavailable = |reason: String| EngineError::ActorUnavailable {
            actor: "supervisor (debounce)",
            reason,
        };
        // The answer comes from the batch task that holds the reply port:
        // it answers, or drops the port (a panic), which ends this wait.
        let (tx, rx) = ractor::concurrency::oneshot();
        self.debounce()?
            .send_message(DebounceMessage::Submit {
                request: Box::new(req),
                reply: tx.into(),
            })
            .map_err(|e| unavailable(e.to_string()))?;
        rx.await.map_err(|e| unavailable(e.to_string()))?
    }
}

/// Claim due timers and hand them to the lines, until `stop` or the store
/// closes (`None`); a failure that is not the store's closing ends it with
/// the reason.
async fn claim_timers(
    services: Arc<Services>,
    me: DerivedActorRef<DebounceMessage>,
    stop: CancellationToken,
) -> Option<String> {
    let name = keys::debounce_queue(&services.settings().queue_name);
    let poll = services.settings().poll_interval;
    while !stop.is_cancelled() {
        let Ok(queue) = services.queue() else {
            return None;
        };
        match queue.claim_batch(&name, TIMER_BATCH, TIMER_LEASE).await {
            Ok(claims) if claims.is_empty() => {
                tokio::select! {
                    _ = queue.wait_for_jobs_on(&name, poll) => {}
                    _ = stop.cancelled() => return None,
                }
            }
            Ok(claims) => {
                for claim in claims {
                    if me
                        .send_message(DebounceMessage::Due(Box::new(claim)))
                        .is_err()
                    {
                        return None;
                    }
                }
            }
            Err(e) => {
                drop(queue);
                if let Some(reason) = crate::error::store_closed(&e) {
                    debug!(%reason, "the debounce timers stop: the store closed");
                    return None;
                }
                warn!(error = %e, "claiming debounce timers failed; retrying after the poll interval");
                tokio::select! {
                    _ = tokio::time::sleep(poll) => {}
                    _ = stop.cancelled() => return None,
                }
            }
        }
    }
    None
}

/// Apply `ops` to the burst of `key` in one transaction and answer them.
async fn batch(services: Arc<Services>, notify: Notify, key: Vec<u8>, ops: Vec<Op>) {
    let mut replies = Vec::new();
    let mut requests = Vec::new();
    let mut timer = None;
    for op in ops {
        match op {
            Op::Submit(request, reply) => {
                requests.push(*request);
                replies.push(reply);
            }
            Op::Due(claim) => timer = Some(claim),
        }
    }
    match apply(&services, &notify, &key, requests, timer.as_deref()).await {
        Ok(answers) => {
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        Err(e) => {
            if let Some(claim) = &timer {
                warn!(timer = %claim.id, error = %e, "a debounce timer's transaction failed; it runs again after its lease");
            }
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// Fold `requests` (in order), then `timer`, over the burst of `key` as the
/// store has it, and commit the result: the answers of the requests.
async fn apply(
    services: &Services,
    notify: &Notify,
    key: &[u8],
    requests: Vec<SubmitRequest>,
    timer: Option<&Claim>,
) -> Result<Vec<Submitted>> {
    let queue = services.queue()?;
    let view = queue.view();
    let now = services.clock().now_ms();
    let mut open: Option<DebounceRecord> = match view.kv_get(key).await? {
        Some(raw) => Some(records::decode(key, &raw)?),
        None => None,
    };
    let stored = open.is_some();
    // A burst whose run ended (cancelled while it waited) is over.
    if let Some(rec) = &open
        && crate::layout::inspect::run_record(view, &rec.run_id)
            .await?
            .is_none()
    {
        open = None;
    }
    let mut fx = SettlementEffects::default();
    let mut answers = Vec::with_capacity(requests.len());
    let mut closed: Option<(String, String)> = None;
    let mut cancelled: Option<(String, OutcomeRecord)> = None;
    for request in requests {
        let (submitted, opened) = submit(services, &queue, &mut fx, open.take(), request, now)?;
        answers.push(submitted);
        open = Some(opened);
    }
    if let Some(claim) = timer {
        match open.take() {
            // Cancelled while it was handed over: the run ends so.
            Some(rec) if rec.timer_id == claim.id && claim.cancel_token().is_cancelled() => {
                // The hash of the plain payload, as every record's.
                let payload = services.keyring().open(&rec.request.payload)?;
                let record = OutcomeRecord {
                    job_id: claim.id.clone(),
                    job_type: rec.request.job_type.clone(),
                    input_hash: keys::input_hash(&rec.request.job_type, &payload),
                    attempts: 0,
                    finished_at_ms: now,
                    outcome: Outcome::Cancelled,
                    history: Vec::new(),
                    followups: Vec::new(),
                    reason: None,
                    tags: None,
                };
                let ended = services.terminal_effects(&rec.run_id, &record)?;
                fx.kv_writes.extend(ended.kv_writes);
                fx.kv_deletes.extend(ended.kv_deletes);
                fx.expiry_entries.extend(ended.expiry_entries);
                cancelled = Some((rec.run_id.clone(), record));
            }
            // Put off since the timer was written: again at the new end.
            Some(rec) if rec.timer_id == claim.id && rec.due_ms > now => {
                fx = fx.enqueue(timer_request(services, &rec, key)?);
                open = Some(rec);
            }
            // Quiet for its window (or at its max delay): the run's job.
            Some(rec) if rec.timer_id == claim.id => {
                let mut request = rec.request.clone();
                request.payload = services.keyring().open(&request.payload)?.into_owned();
                request.debounce = None;
                if let Some(d) = &rec.request.debounce {
                    request
                        .headers
                        .insert(keys::HEADER_DEBOUNCED.into(), d.key.clone());
                }
                fx = services.creation_effects(fx, &request, &rec.run_id)?;
                closed = Some((request.job_type.clone(), rec.run_id.clone()));
                debug!(run_id = %rec.run_id, submits = rec.submits, "debounced burst closed");
            }
            // A timer of a burst that is over: acknowledged alone.
            other => open = other,
        }
    }
    match &open {
        Some(rec) => fx = fx.kv_put(key.to_vec(), records::encode(rec)?),
        None if stored => fx = fx.kv_delete(key.to_vec()),
        None => {}
    }
    if let Some((run_id, _)) = &cancelled {
        notify.job(JobEnd::Settling(run_id.clone()));
    }
    let committed = match timer {
        Some(claim) => queue.ack_with(claim, fx).await.map(drop),
        None => queue.commit_effects(fx).await.map(drop),
    };
    if let Some((run_id, record)) = cancelled {
        if committed.is_ok() {
            services.emit(EngineEvent::JobCancelled {
                run_id: run_id.clone(),
            });
            notify.job(JobEnd::Ended {
                run_id,
                record: Box::new(record),
            });
        } else {
            notify.job(JobEnd::Aborted(run_id));
        }
    }
    committed?;
    if let Some((job_type, run_id)) = closed
        && let Ok(job_queue) = services.job_queue_of(&job_type, &HashMap::new())
    {
        services.tell_partition(&job_type, &job_queue);
        debug!(%run_id, "debounced run's job created");
    }
    Ok(answers)
}

/// One submission folded over the burst `open`: a new burst when there is
/// none (its run record and timer staged in `fx`), else the burst put off
/// and, unless leading, its request replaced.
fn submit(
    services: &Services,
    queue: &taquba::Queue,
    fx: &mut SettlementEffects,
    open: Option<DebounceRecord>,
    mut request: SubmitRequest,
    now: u64,
) -> Result<(Submitted, DebounceRecord)> {
    let Some(debounce) = request.debounce.clone() else {
        return Err(EngineError::InvalidSubmitOptions(
            "a submission sent to the debounce lines is not debounced".into(),
        ));
    };
    let hash = keys::input_hash(&request.job_type, &request.payload);
    request.payload = services.keyring().seal(&request.payload)?;
    if let Some(mut rec) = open {
        rec.last_ms = now;
        rec.due_ms = now.saturating_add(debounce.window_ms).min(rec.until_ms);
        rec.submits = rec.submits.saturating_add(1);
        if !rec.request.debounce.as_ref().is_some_and(|d| d.leading) {
            rec.request = request;
        }
        let submitted = Submitted {
            run_id: rec.run_id.clone(),
            newly_submitted: false,
            recorded: None,
        };
        return Ok((submitted, rec));
    }
    let max_delay = debounce.max_delay_ms.unwrap_or_else(|| {
        u64::try_from(services.settings().debounce_max_delay.as_millis()).unwrap_or(u64::MAX)
    });
    let until_ms = now.saturating_add(max_delay.max(1));
    let rec = DebounceRecord {
        run_id: queue.next_job_id(),
        timer_id: queue.next_job_id(),
        first_ms: now,
        last_ms: now,
        due_ms: now.saturating_add(debounce.window_ms).min(until_ms),
        until_ms,
        submits: 1,
        request,
    };
    let job_type = rec.request.job_type.clone();
    // Its tags (and their index entries) come with its job, at the close.
    let run = services.run_record(&rec.timer_id, &job_type, hash, None, None)?;
    let key = keys::debounce_key(&job_type, &debounce.key);
    let staged = std::mem::take(fx)
        .kv_put(keys::run_key(&rec.run_id), run)
        .enqueue(timer_request(services, &rec, &key)?);
    *fx = staged;
    let submitted = Submitted {
        run_id: rec.run_id.clone(),
        newly_submitted: true,
        recorded: None,
    };
    Ok((submitted, rec))
}

/// The burst's timer, at its end (under its id, so the run's record names
/// it throughout).
fn timer_request(services: &Services, rec: &DebounceRecord, key: &[u8]) -> Result<EnqueueRequest> {
    let mut headers = HashMap::from([
        (keys::HEADER_RUN.to_string(), rec.run_id.clone()),
        (keys::HEADER_TYPE.to_string(), rec.request.job_type.clone()),
    ]);
    if let Some(d) = &rec.request.debounce {
        headers.insert(keys::HEADER_DEBOUNCED.into(), d.key.clone());
    }
    let at = std::time::UNIX_EPOCH + Duration::from_millis(rec.due_ms);
    Ok(EnqueueRequest {
        queue: keys::debounce_queue(&services.settings().queue_name),
        payload: key.to_vec(),
        options: EnqueueOptions::default()
            .id_override(rec.timer_id.clone())
            .headers(headers)
            .max_attempts(keys::QUEUE_ATTEMPTS)
            .run_at(Some(at)),
    })
}
