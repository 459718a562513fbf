//! Operator actions on the durable records: retry a job that failed or was
//! cancelled, retry the failed jobs of a type, and the durable pause of a
//! job type (the pools and the supervisor act on it; see the supervisor's
//! requests).

use taquba::{CancelOutcome, EnqueueOptions, EnqueueRequest, SettlementEffects};

use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::jobs::submit::{CancelResult, JobState, MAX_SUBMIT_ROUNDS};
use crate::layout::inspect::{self, EndedState};
use crate::layout::keys;
use crate::layout::records::OutcomeRecord;
use crate::layout::records::{self, Outcome};
use crate::services::Services;

/// Earlier claims a run record keeps at most (as a requeue keeps them).
const PAST_KEPT: usize = 64;

/// The claims of a run's attempt series that ended as `record` says (its
/// last claim, claimed at `last_claimed_at`, after the ones the record
/// keeps), the newest [`PAST_KEPT`]: what a retry's run record carries on.
fn ended_series(
    record: &records::OutcomeRecord,
    last_claimed_at: Option<u64>,
) -> Vec<records::PastAttempt> {
    let mut past = record.history.clone();
    let (how, error) = match &record.outcome {
        Outcome::Failed { message, .. } => ("dead-lettered", Some(message.clone())),
        Outcome::Cancelled => ("cancelled", None),
        Outcome::Succeeded(_) => ("completed", None),
    };
    past.push(records::PastAttempt {
        claim: past.last().map_or(0, |a| a.claim).saturating_add(1),
        claimed_at_ms: last_claimed_at,
        ended_at_ms: record.finished_at_ms,
        how: how.to_string(),
        error: error.map(|mut e| {
            if e.len() > 2048 {
                let mut cut = 2048;
                while !e.is_char_boundary(cut) {
                    cut -= 1;
                }
                e.truncate(cut);
                e.push('…');
            }
            e
        }),
    });
    let skip = past.len().saturating_sub(PAST_KEPT);
    past.split_off(skip)
}

impl Services {
    /// Cancel a job. A queued job is removed and recorded as cancelled in one
    /// transaction; a running job's cancel token fires and its handler's return
    /// is recorded as cancelled.
    pub async fn cancel(&self, run_id: &str) -> Result<(CancelResult, Option<OutcomeRecord>)> {
        let queue = self.queue()?;
        for _ in 0..MAX_SUBMIT_ROUNDS {
            let Some(run) = self.run_record_of(run_id).await? else {
                return match self.outcome(run_id).await? {
                    Some(rec) => Ok((
                        CancelResult::AlreadyFinished(JobState::of(&rec.outcome)),
                        None,
                    )),
                    None => Err(self.unknown(run_id).await),
                };
            };
            let record = OutcomeRecord {
                job_id: run.job_id.clone(),
                job_type: run.job_type.clone(),
                input_hash: run.input_hash,
                attempts: 0,
                finished_at_ms: self.clock().now_ms(),
                outcome: Outcome::Cancelled,
                history: Vec::new(),
                followups: Vec::new(),
                reason: None,
                tags: run.tags.clone(),
            };
            let mut effects = self.terminal_effects(run_id, &record)?;
            if run.wait.is_some() {
                // A run that waited keeps its signals until it ends.
                effects.kv_deletes.extend(self.signal_keys(run_id).await?);
            }
            // A workflow step's cancel decides the steps that need it.
            let (effects, plan) = match &run.step {
                Some(step) => {
                    crate::exec::settle::with_step_plan(self, effects, step, &Outcome::Cancelled)
                        .await?
                }
                None => (effects, None),
            };
            match queue.cancel_with(&run.job_id, effects).await?.0 {
                CancelOutcome::Removed => {
                    if let Some(plan) = plan {
                        plan.guard.committed();
                    }
                    self.emit(EngineEvent::JobCancelled {
                        run_id: run_id.to_string(),
                    });
                    return Ok((CancelResult::Cancelled, Some(record)));
                }
                CancelOutcome::Requested => return Ok((CancelResult::Requested, None)),
                // Ended between our read and the cancel: look again.
                CancelOutcome::NotFound => continue,
            }
        }
        Err(EngineError::Contended {
            operation: format!("the cancel of `{run_id}`"),
        })
    }

    /// Run a failed or cancelled job again: a new attempt series under the
    /// same id, from its original payload and headers, in one transaction
    /// that removes its outcome record (and index entry) and writes its run
    /// record and its new queue job, guarded by a compare on the outcome
    /// record. A handle's `join` afterwards waits for the new outcome.
    /// Memo entries its failed attempts left are found again.
    ///
    /// A job that succeeded, has not ended, or whose payload the queue no
    /// longer keeps (a job cancelled while queued; a dead letter past its
    /// retention) is `NotRetryable`; an unknown id is `JobNotFound`.
    pub async fn retry(&self, run_id: &str) -> Result<()> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        let queue = self.queue()?;
        let not = |reason: &str| EngineError::NotRetryable {
            id: run_id.to_string(),
            reason: reason.to_string(),
        };
        let outcome_key = keys::outcome_key(run_id);
        let Some(raw) = queue.view().kv_get(&outcome_key).await? else {
            return Err(match self.run_record_of(run_id).await? {
                Some(_) => not("it has not ended"),
                None => self.unknown(run_id).await,
            });
        };
        let record: records::OutcomeRecord = records::decode(&outcome_key, &raw)?;
        if matches!(record.outcome, Outcome::Succeeded(_)) {
            return Err(not("it succeeded"));
        }
        let Some(job) = queue.view().get_job(&record.job_id).await? else {
            return Err(not(
                "the queue no longer keeps its payload (cancelled while queued, or a dead letter \
                 past the queue's dead retention)",
            ));
        };
        if let Some(workflow) = job.headers.get(crate::workflows::layout::HEADER_WORKFLOW) {
            return Err(not(&format!(
                "it is a step of workflow `{workflow}`: retry the workflow, which runs its failed \
                 and cancelled steps again and resumes the graph from them"
            )));
        }
        // The claims of the series that ended stay the run's history: the
        // new series' outcome record starts with them (as a requeue's do).
        let past = ended_series(&record, job.claimed_at);
        let job_id = queue.next_job_id();
        let mut headers = job.headers.clone();
        headers.insert(keys::HEADER_RUN.into(), run_id.to_string());
        // Its failed attempts' memo entries are in the store: the new first
        // attempt must look for them.
        headers.insert(keys::HEADER_MEMO.into(), String::new());
        // A retried run starts its count afresh.
        headers.remove(keys::HEADER_PAST);
        let run = records::encode(&records::RunRecord {
            job_id: job_id.clone(),
            job_type: record.job_type.clone(),
            input_hash: record.input_hash,
            submitted_at_ms: self.clock().now_ms(),
            past,
            wait: None,
            step: None,
            sleep: None,
            snoozes: 0,
            // The same tags at the same time: its index entries stay.
            tags: record.tags.clone(),
        })?;
        // Back on its queue: a partition queue's pool may have forgotten
        // it, and finds it again by its mark and the event.
        let marked = self.mark_partition(
            SettlementEffects::default(),
            &record.job_type,
            &job.queue,
            &headers,
            &job_id,
        );
        let effects = marked
            .kv_delete(outcome_key.clone())
            .kv_delete(record.ended_key(run_id))
            .kv_put(keys::run_key(run_id), run)
            .enqueue(EnqueueRequest {
                queue: job.queue.to_string(),
                // Written again under the engine's newest key.
                payload: self.keyring().renewed(job.payload)?,
                options: EnqueueOptions::default()
                    .headers(headers)
                    .id_override(job_id)
                    .max_attempts(keys::QUEUE_ATTEMPTS),
            });
        let run_key = keys::run_key(run_id);
        let compares: [(&[u8], Option<&[u8]>); 2] =
            [(&outcome_key, Some(raw.as_ref())), (&run_key, None)];
        let job_queue = job.queue.to_string();
        match queue.kv_compare_commit(&compares, effects).await? {
            Some(_) => {
                self.tell_partition(&record.job_type, &job_queue);
                Ok(())
            }
            None => Err(EngineError::Contended {
                operation: format!("the retry of `{run_id}` (it changed meanwhile)"),
            }),
        }
    }

    /// Retry every job of `job_type` that failed at or after `since_ms`
    /// (epoch ms; 0 for all), newest first; returns how many were retried.
    /// Jobs that cannot be retried (payload gone) are skipped.
    pub async fn retry_failed(&self, job_type: &str, since_ms: u64) -> Result<usize> {
        let queue = self.queue()?;
        let mut ids = Vec::new();
        let mut before: Option<String> = None;
        'pages: loop {
            let page = inspect::ended_page(
                queue.view(),
                Some(&[job_type]),
                &[EndedState::Failed],
                before.as_deref(),
                1000,
            )
            .await?;
            for (id, rec) in page.jobs {
                if rec.finished_at_ms < since_ms {
                    break 'pages;
                }
                ids.push(id);
            }
            match page.next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        drop(queue);
        let mut retried = 0;
        for id in ids {
            match self.retry(&id).await {
                Ok(()) => retried += 1,
                Err(EngineError::NotRetryable { reason, .. }) => {
                    tracing::warn!(run_id = %id, %reason, "not retried");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(retried)
    }

    /// Job types an operator paused (their names).
    pub async fn paused_types(&self) -> Result<Vec<String>> {
        use futures_util::TryStreamExt;
        let queue = self.queue()?;
        let entries =
            queue
                .view()
                .kv_entries(keys::PAUSED_PREFIX, .., taquba::KvOrder::Ascending, 1000);
        let mut entries = std::pin::pin!(entries);
        let mut out = Vec::new();
        while let Some((_, name)) = entries.try_next().await? {
            out.push(String::from_utf8_lossy(&name).into_owned());
        }
        Ok(out)
    }

    /// The values of `job_type`'s partitioning header an operator paused
    /// (`keys::paused_value_key`), at most `limit`, in key order.
    pub async fn paused_values(&self, job_type: &str, limit: usize) -> Result<Vec<String>> {
        use futures_util::{StreamExt, TryStreamExt};
        let queue = self.queue()?;
        let prefix = keys::paused_values_prefix(job_type);
        let entries = queue.view().kv_entries(
            &prefix,
            ..,
            taquba::KvOrder::Ascending,
            limit.clamp(1, 1000),
        );
        let mut entries = std::pin::pin!(entries.take(limit));
        let mut out = Vec::new();
        while let Some((key, _)) = entries.try_next().await? {
            if let Some(value) = key.get(prefix.len()..) {
                out.push(String::from_utf8_lossy(value).into_owned());
            }
        }
        Ok(out)
    }

    /// Record (or clear) an operator's pause of the value `value` of
    /// `job_type`'s partitioning header `header`.
    pub async fn set_value_paused(
        &self,
        job_type: &str,
        header: &str,
        value: &str,
        paused: bool,
    ) -> Result<()> {
        let queue = self.queue()?;
        let key = keys::paused_value_key(job_type, value);
        if paused {
            queue.kv_put(&key, header.as_bytes()).await?;
        } else {
            queue.kv_delete(&key).await?;
        }
        Ok(())
    }

    /// Record (or clear) an operator's pause of `job_type`.
    pub async fn set_paused(&self, job_type: &str, paused: bool) -> Result<()> {
        let queue = self.queue()?;
        let key = keys::paused_key(job_type);
        if paused {
            queue.kv_put(&key, job_type.as_bytes()).await?;
        } else {
            queue.kv_delete(&key).await?;
        }
        Ok(())
    }
}
