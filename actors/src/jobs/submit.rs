//! The bytes-level job operations of the engine, on [`Services`]: submit
//! (with the keyed compare-and-commit), read a job's outcome, record and
//! state, read an output, cancel; and the types they take and answer.

use taquba::object_store::ObjectStoreExt;
use taquba::object_store::path::Path;
use taquba::{EnqueueOptions, EnqueueRequest, SettlementEffects};

use crate::error::{EngineError, Result};
use crate::layout::keys;
use crate::layout::records::{self, OutcomeRecord, OutputRef, RunRecord};
use crate::services::Services;

pub use crate::jobs::request::SubmitRequest;

/// What a submission came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// Run id: the job's id from now on.
    pub run_id: String,
    /// True when this call created the job; false when it joined a live job or
    /// found a recorded outcome.
    pub newly_submitted: bool,
    /// The outcome record this submission was answered from, when the job had
    /// already ended. It was read from the store and may belong to a commit
    /// still in flight: [`EngineRef::await_recorded`](crate::EngineRef::await_recorded)
    /// returns it once it is durable, without reading it again.
    pub recorded: Option<Box<OutcomeRecord>>,
}

pub use crate::layout::records::JobState;

/// What a cancel request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelResult {
    /// The job had not started; it is removed and recorded as cancelled.
    Cancelled,
    /// The job is running: its cancel token fired, and it is recorded as
    /// cancelled when its handler returns.
    Requested,
    /// The job had already ended in this state.
    AlreadyFinished(JobState),
}

/// Rounds of a submit or cancel that keeps racing concurrent changes.
pub(crate) const MAX_SUBMIT_ROUNDS: usize = 16;

/// A submission with a larger payload reads the outcome record before it
/// prepares its job, whatever the duplicate rate.
const PRE_READ_PAYLOAD: usize = 16 * 1024;

impl Services {
    /// Submit a job. With an idempotency key, a live job with the same key is
    /// joined and a recorded outcome answers, atomically: the run record is
    /// created only if neither a run record nor an outcome record exists.
    ///
    /// Order of checks: reserved headers (before any read, so a finished key
    /// does not hide them); for a keyed job, while duplicates are frequent
    /// (see `DuplicateRate`), its outcome record (a finished job answers from
    /// it with one read); then the compare-and-commit that creates the job
    /// (outcome record absent, run record absent), and when it fails the
    /// records that hold the id: the outcome record (unless just read), the
    /// run record, the outcome record again.
    pub async fn submit(&self, req: SubmitRequest) -> Result<Submitted> {
        let span = tracing::debug_span!(
            "gaffer.submit",
            job_type = %req.job_type,
            keyed = req.idempotency_key.is_some(),
        );
        tracing::Instrument::instrument(self.submit_inner(req), span).await
    }

    async fn submit_inner(&self, mut req: SubmitRequest) -> Result<Submitted> {
        if let Some(h) = req
            .headers
            .keys()
            .find(|h| h.starts_with(keys::RESERVED_HEADER_PREFIX))
        {
            return Err(EngineError::ReservedHeader(h.clone()));
        }
        req.tags = crate::layout::tags::checked(&req.tags)?;
        if req.traceparent.is_none() {
            req.traceparent = crate::telemetry::current_traceparent();
        }
        // A job unique for a period: its key's slot is the period now, on
        // the queue's clock (a client fixed it on its own).
        req.pin_period(self.clock().now_ms())?;
        self.job_queue(&req.job_type)?;
        if req.debounce.is_some() {
            return self.debounced(req).await;
        }
        let queue = self.queue()?;
        let hash = keys::input_hash(&req.job_type, &req.payload);
        let given = match (&req.idempotency_key, &req.run_id) {
            (Some(key), _) => Some(keys::keyed_run_id(key)),
            (None, Some(run_id)) => {
                check_id(run_id)?;
                Some(run_id.clone())
            }
            (None, None) => None,
        };
        let Some(run_id) = given else {
            let job_id = queue.next_job_id();
            let job_queue = self.job_queue_of(&req.job_type, &req.headers)?;
            let marking = self.begin_marking(&job_queue);
            let (effects, tags) =
                self.tag_effects(SettlementEffects::default(), &req.tags, &job_id)?;
            let mut effects = effects.kv_put(
                keys::run_key(&job_id),
                self.run_record(&job_id, &req.job_type, hash, None, tags)?,
            );
            if marking.writes() {
                effects =
                    self.mark_partition(effects, &req.job_type, &job_queue, &req.headers, &job_id);
            }
            let (opts, payload) = self.enqueue_options(&req, &job_id, &job_id)?;
            queue
                .enqueue_with_effects(&job_queue, payload, opts, effects)
                .await?;
            marking.committed();
            self.tell_partition(&req.job_type, &job_queue);
            return Ok(Submitted {
                run_id: job_id,
                newly_submitted: true,
                recorded: None,
            });
        };
        let outcome_key = keys::outcome_key(&run_id);
        // A finished job answers from its outcome record, without preparing a
        // job or a transaction. This is the answer the compare-and-commit below
        // would give at the moment of the read: an outcome record and a run
        // record never exist together (a keyed job is created only when both
        // are absent; the transaction that writes the outcome record deletes
        // the run record), so the compare would fail, the run record would be
        // absent and this outcome record would decide. Its input hash decides
        // "same job" or `InputMismatch` exactly as there.
        //
        // The read is made only while submissions lately found their id
        // taken (`DuplicateRate`): for a new id it is a miss that the
        // compare below repeats, and a miss is the costlier read (every
        // memtable and every filter of the store is searched). Skipping it
        // changes no answer, only which reads give it. A large payload is
        // always looked up first: preparing its job costs more than a read
        // (and above taquba's offload threshold, an object written and
        // deleted again).
        let duplicates = self.duplicates();
        let pre_read = req.payload.len() > PRE_READ_PAYLOAD || duplicates.pre_read();
        if pre_read && let Some(bytes) = queue.view().kv_get(&outcome_key).await? {
            duplicates.note(true);
            let rec: OutcomeRecord = records::decode(&outcome_key, &bytes)?;
            return self.answer_recorded(rec, hash, run_id);
        }
        let run_key = keys::run_key(&run_id);
        let job_queue = self.job_queue_of(&req.job_type, &req.headers)?;
        let marking = self.begin_marking(&job_queue);
        for _ in 0..MAX_SUBMIT_ROUNDS {
            let effects = self.creation_effects_with(
                SettlementEffects::default(),
                &req,
                &run_id,
                None,
                Creating::Submission {
                    mark: marking.writes(),
                    queue: &job_queue,
                    hash,
                },
            )?;
            // The outcome record first: a finished id fails the compare at
            // its first read.
            let compares: [(&[u8], Option<&[u8]>); 2] = [(&outcome_key, None), (&run_key, None)];
            if queue.kv_compare_commit(&compares, effects).await?.is_some() {
                marking.committed();
                self.tell_partition(&req.job_type, &job_queue);
                duplicates.note(false);
                return Ok(Submitted {
                    run_id,
                    newly_submitted: true,
                    recorded: None,
                });
            }
            duplicates.note(true);
            // Someone holds the id: a live run or a recorded outcome. Without
            // the read above, most likely a recorded outcome: read it first.
            // Then the run record, and the outcome record again: a run that
            // ends between the two reads has its outcome committed in the
            // same transaction that deleted the run record.
            if !pre_read && let Some(bytes) = queue.view().kv_get(&outcome_key).await? {
                let rec: OutcomeRecord = records::decode(&outcome_key, &bytes)?;
                return self.answer_recorded(rec, hash, run_id);
            }
            if let Some(bytes) = queue.view().kv_get(&run_key).await? {
                let run: RunRecord = records::decode(&run_key, &bytes)?;
                return self.answer(run.input_hash, hash, run_id);
            }
            if let Some(bytes) = queue.view().kv_get(&outcome_key).await? {
                let rec: OutcomeRecord = records::decode(&outcome_key, &bytes)?;
                return self.answer_recorded(rec, hash, run_id);
            }
            // Both were removed in between (retention): try again.
        }
        Err(EngineError::Contended {
            operation: format!("the submission of `{run_id}`"),
        })
    }

    /// Create the keyed job `req` (its idempotency key set) and apply `puts`,
    /// in one transaction, if neither the run's record nor its outcome
    /// record exists and every one of `compares` holds (a KV key's bytes,
    /// `None`: absent). `Ok(true)`: created; `Ok(false)`: a compare failed
    /// and nothing was written. How a periodic job's tick enqueues its job
    /// with the new state of its record.
    pub(crate) async fn create_keyed_with(
        &self,
        req: &SubmitRequest,
        compares: &[(&[u8], Option<&[u8]>)],
        puts: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<bool> {
        if let Some(h) = req
            .headers
            .keys()
            .find(|h| h.starts_with(keys::RESERVED_HEADER_PREFIX))
        {
            return Err(EngineError::ReservedHeader(h.clone()));
        }
        let Some(key) = &req.idempotency_key else {
            return Err(EngineError::InvalidConfig(
                "a job created with its record needs an idempotency key".into(),
            ));
        };
        let queue = self.queue()?;
        let run_id = keys::keyed_run_id(key);
        let run_key = keys::run_key(&run_id);
        let outcome_key = keys::outcome_key(&run_id);
        let mut effects = self.creation_effects(SettlementEffects::default(), req, &run_id)?;
        for (k, v) in puts {
            effects = effects.kv_put(k, v);
        }
        let mut all: Vec<(&[u8], Option<&[u8]>)> = vec![(&run_key, None), (&outcome_key, None)];
        all.extend_from_slice(compares);
        Ok(queue.kv_compare_commit(&all, effects).await?.is_some())
    }

    /// A submission that joins the run `run_id`, whose input hash is
    /// `run_hash` (`InputMismatch` unless it is this submission's `hash`).
    fn answer(&self, run_hash: [u8; 32], hash: [u8; 32], run_id: String) -> Result<Submitted> {
        if run_hash == hash {
            Ok(Submitted {
                run_id,
                newly_submitted: false,
                recorded: None,
            })
        } else {
            Err(EngineError::InputMismatch(run_id))
        }
    }

    /// A submission answered by the outcome record of the ended run `run_id`.
    fn answer_recorded(
        &self,
        record: OutcomeRecord,
        hash: [u8; 32],
        run_id: String,
    ) -> Result<Submitted> {
        let mut submitted = self.answer(record.input_hash, hash, run_id)?;
        submitted.recorded = Some(Box::new(record));
        Ok(submitted)
    }

    /// `fx` plus what creates the run `run_id` of `req` as one commit: its
    /// run record and the enqueue of its first queue job. The caller
    /// decides when it may commit (a compare for a keyed submission; the
    /// parent's success for a follow-up).
    pub(crate) fn creation_effects(
        &self,
        fx: SettlementEffects,
        req: &SubmitRequest,
        run_id: &str,
    ) -> Result<SettlementEffects> {
        self.step_creation_effects(fx, req, run_id, None)
    }

    /// [`creation_effects`](Self::creation_effects) of a run that is the
    /// workflow step `step` (its run record says so).
    pub(crate) fn step_creation_effects(
        &self,
        fx: SettlementEffects,
        req: &SubmitRequest,
        run_id: &str,
        step: Option<records::StepOf>,
    ) -> Result<SettlementEffects> {
        self.creation_effects_with(fx, req, run_id, step, Creating::Effect)
    }

    /// [`step_creation_effects`](Self::step_creation_effects), as `how`
    /// says.
    fn creation_effects_with(
        &self,
        fx: SettlementEffects,
        req: &SubmitRequest,
        run_id: &str,
        step: Option<records::StepOf>,
        how: Creating<'_>,
    ) -> Result<SettlementEffects> {
        // A submission found its queue and hashed its payload already.
        let (job_queue, mark, hash) = match how {
            Creating::Submission { mark, queue, hash } => (queue.to_string(), mark, hash),
            Creating::Effect => (
                self.queue_for_job(&req.job_type, &req.headers)?,
                true,
                keys::input_hash(&req.job_type, &req.payload),
            ),
        };
        let job_id = self.queue()?.next_job_id();
        let (options, payload) = self.enqueue_options(req, run_id, &job_id)?;
        let fx = if mark {
            self.mark_partition(fx, &req.job_type, &job_queue, &req.headers, &job_id)
        } else {
            fx
        };
        let (fx, tags) = self.tag_effects(fx, &req.tags, run_id)?;
        Ok(fx
            .kv_put(
                keys::run_key(run_id),
                self.run_record(&job_id, &req.job_type, hash, step, tags)?,
            )
            .enqueue(EnqueueRequest {
                queue: job_queue,
                payload,
                options,
            }))
    }

    pub(crate) fn run_record(
        &self,
        job_id: &str,
        job_type: &str,
        input_hash: [u8; 32],
        step: Option<records::StepOf>,
        tags: Option<crate::layout::tags::Tags>,
    ) -> Result<Vec<u8>> {
        records::encode(&RunRecord {
            job_id: job_id.to_string(),
            job_type: job_type.to_string(),
            input_hash,
            submitted_at_ms: self.clock().now_ms(),
            past: Vec::new(),
            wait: None,
            step,
            sleep: None,
            snoozes: 0,
            tags,
        })
    }

    /// The enqueue of `req`'s queue job: its options, and its payload as
    /// stored (sealed under the engine's keyring; its input hash is of the
    /// plain payload).
    fn enqueue_options(
        &self,
        req: &SubmitRequest,
        run_id: &str,
        job_id: &str,
    ) -> Result<(EnqueueOptions, Vec<u8>)> {
        let mut headers = req.headers.clone();
        headers.insert(keys::HEADER_TYPE.into(), req.job_type.clone());
        headers.insert(keys::HEADER_RUN.into(), run_id.into());
        if let Some(traceparent) = &req.traceparent {
            headers.insert(keys::HEADER_TRACEPARENT.into(), traceparent.clone());
        }
        // gaffer counts attempts itself (see `attempts`): the queue's own
        // limit is out of reach, and a limit other than the queue's default
        // travels in a header.
        if let Some(limit) = req.max_attempts {
            headers.insert(keys::HEADER_ATTEMPTS.into(), limit.max(1).to_string());
        }
        if let Some(timeout) = req.timeout.filter(|t| !t.is_zero()) {
            let ms = crate::workflows::wire::millis(timeout).max(1);
            headers.insert(keys::HEADER_TIMEOUT.into(), ms.to_string());
        }
        let opts = EnqueueOptions::default()
            .headers(headers)
            .id_override(job_id.to_string())
            .priority(req.priority)
            .max_attempts(keys::QUEUE_ATTEMPTS)
            .run_at(req.run_at);
        Ok((opts, self.keyring().seal(&req.payload)?))
    }

    /// The outcome record of a run, if it has ended and the record is
    /// retained; its output and errors opened.
    pub async fn outcome(&self, run_id: &str) -> Result<Option<OutcomeRecord>> {
        check_id(run_id)?;
        match crate::layout::inspect::outcome_record(self.queue()?.view(), run_id).await? {
            Some(record) => Ok(Some(record.opened(self.keyring())?)),
            None => Ok(None),
        }
    }

    /// Why no record of `run_id` exists: `NotSubmittedThroughGaffer` if a
    /// queue job of this id was put on the queue without gaffer's
    /// `gaffer.run` header, `JobNotFound` otherwise (never submitted, or
    /// its outcome record passed retention); a read error as itself. Read
    /// only once both records were found absent.
    pub async fn unknown(&self, run_id: &str) -> EngineError {
        let queue = match self.queue() {
            Ok(queue) => queue,
            Err(e) => return e,
        };
        match queue.view().job_record(run_id).await {
            Ok(Some(job)) if !job.headers.contains_key(keys::HEADER_RUN) => {
                EngineError::NotSubmittedThroughGaffer(run_id.to_string())
            }
            Ok(_) => EngineError::JobNotFound(run_id.to_string()),
            Err(e) => e.into(),
        }
    }

    /// The active-run record of a run, if it is queued, scheduled or running.
    pub async fn run_record_of(&self, run_id: &str) -> Result<Option<RunRecord>> {
        check_id(run_id)?;
        crate::layout::inspect::run_record(self.queue()?.view(), run_id).await
    }

    /// The bytes of a success output, fetching a blob if the output was
    /// large (opened, if sealed).
    pub async fn output_bytes(&self, output: &OutputRef) -> Result<Vec<u8>> {
        match output {
            OutputRef::Inline(bytes) => Ok(self.keyring().open(bytes)?.into_owned()),
            OutputRef::Blob(path) => {
                let found = self.store().get(&Path::from(path.as_str())).await?;
                Ok(found.bytes().await?.to_vec())
            }
        }
    }

    /// Where a job is now; `None` if no job with this id is known (never
    /// submitted, or its record was removed by retention). Durable: works across
    /// restarts.
    pub async fn state(&self, run_id: &str) -> Result<Option<JobState>> {
        check_id(run_id)?;
        crate::layout::inspect::job_state(self.queue()?.view(), run_id).await
    }

    /// Read a committed value from the caller KV namespace (opened, if
    /// sealed: a job's KV writes and a signal's payload are). Without a
    /// keyring the value is as stored: the store holds nothing sealed (the
    /// start refuses a store that does), and a job's own bytes that only
    /// start like a sealed value read as they were written.
    pub async fn kv_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let keyring = self.keyring();
        match self.queue()?.view().kv_get(key).await? {
            Some(stored) if keyring.is_empty() => Ok(Some(stored.to_vec())),
            Some(stored) => Ok(Some(keyring.open(&stored)?.into_owned())),
            None => Ok(None),
        }
    }

    /// The effects that end a run: delete its run record, write its outcome
    /// record and its entry in the finished-jobs index and, under retention,
    /// its expiry entry.
    pub(crate) fn terminal_effects(
        &self,
        run_id: &str,
        record: &OutcomeRecord,
    ) -> Result<SettlementEffects> {
        let mut effects = SettlementEffects::default()
            .kv_delete(keys::run_key(run_id))
            .kv_put(
                keys::outcome_key(run_id),
                records::encode(&record.sealed(self.keyring())?)?,
            )
            .kv_put(record.ended_key(run_id), Vec::new());
        if self.settings().retention.is_some() {
            effects = effects.expiry_entry(self.expiry(), record.finished_at_ms, run_id.as_bytes());
        }
        Ok(effects)
    }
}

pub(crate) fn check_id(run_id: &str) -> Result<()> {
    if keys::is_valid_id(run_id) {
        Ok(())
    } else {
        Err(EngineError::InvalidJobId(run_id.to_string()))
    }
}

/// How a job's creation effects are made.
#[derive(Clone, Copy)]
enum Creating<'a> {
    /// By a submission that commits them itself: it tells the type's pool
    /// after its commit ([`Services::tell_partition`]), and writes the
    /// partition's mark only when `mark` (see `exec::marks`: a submission
    /// that tracks its commit skips a mark known written). It found its
    /// job's `queue` and its payload's input `hash` already.
    Submission {
        mark: bool,
        queue: &'a str,
        hash: [u8; 32],
    },
    /// As effects another commit carries (a follow-up, a workflow step, a
    /// periodic tick): the pool is told now, the mark always written.
    Effect,
}
