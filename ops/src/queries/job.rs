//! A job's page and a batch item's, as the store holds them: its record, its attempts, its payload and output (`gaffer job`, `gaffer item`, the dashboard's job page), and the rows of listings.

use super::*;
use crate::listing::ListedState;

impl Store {
    /// `gaffer job ID`.
    pub async fn job(&self, id: &str) -> Result<JobDetail, OpsError> {
        let view = self.view();
        if !keys::is_valid_id(id) {
            return Err(OpsError::JobNotFound(id.to_string()));
        }
        if let Some(rec) = inspect::outcome_record(view, id).await? {
            let mut d = outcome_detail(id, &rec, self.keyring());
            d.history = self.history(&rec.job_id, Some(&rec)).await?;
            d.snoozes = snoozed_claims(&d.history);
            let kept = match view.job_record(&rec.job_id).await? {
                Some(job) => {
                    d.enqueued_at_ms = Some(job.enqueued_at);
                    d.claimed_at_ms = job.claimed_at;
                    Some(job)
                }
                // Acknowledged (succeeded): the queue deleted the delivery.
                // A run an operator retried keeps the dead letter of its
                // earlier series, with the same payload.
                None if d
                    .history
                    .iter()
                    .any(|a| a.outcome == "dead-lettered" || a.outcome == "cancelled") =>
                {
                    let found = self.earlier_delivery(id, &rec.job_type).await?;
                    if let Some(job) = &found {
                        d.payload_source = Some(job.id.clone());
                    }
                    found
                }
                None => None,
            };
            if let Some(job) = kept {
                d.debounced = job.headers.get(keys::HEADER_DEBOUNCED).cloned();
                d.workflow = job.headers.get(HEADER_WORKFLOW).cloned();
                d.step = job.headers.get(HEADER_STEP).cloned();
                d.payload_ref = job.payload_ref.clone();
                d.payload = job.payload_ref.is_none().then_some(job.payload);
                // The queue keeps this run's own delivery: a retry can
                // start from it.
                d.retryable = d.payload_source.is_none()
                    && !matches!(rec.outcome, Outcome::Succeeded(_))
                    && d.workflow.is_none();
            }
            return Ok(self.reveal(d));
        }
        let run = inspect::run_record(view, id).await?;
        let (job_id, submitted) = match &run {
            Some(run) => (run.job_id.clone(), Some(run.submitted_at_ms)),
            None => (id.to_string(), None),
        };
        let Some(job) = view.job_record(&job_id).await? else {
            return Err(OpsError::JobNotFound(id.to_string()));
        };
        let run_id = job.headers.get(keys::HEADER_RUN).cloned();
        let row = queue_row(&job, job.status);
        let mut d = JobDetail {
            id: row.id.clone(),
            job_id: Some(job.id.clone()),
            job_type: row.job_type,
            state: row.state,
            attempts: attempts_of(&job),
            submitted_at_ms: submitted,
            enqueued_at_ms: Some(job.enqueued_at),
            claimed_at_ms: job.claimed_at,
            run_at_ms: job.run_at,
            finished_at_ms: None,
            output: None,
            output_blob: None,
            error: job.last_error.clone(),
            failure_kind: None,
            batch: row.batch.clone(),
            key: row.key.clone(),
            history: self.history(&job.id, None).await?,
            followups: Vec::new(),
            workflow: job.headers.get(HEADER_WORKFLOW).cloned(),
            step: job.headers.get(HEADER_STEP).cloned(),
            waiting_for: None,
            sleeping: false,
            snoozes: 0,
            debounced: None,
            debounced_submits: None,
            retryable: false,
            payload: job.payload_ref.is_none().then(|| job.payload.clone()),
            payload_ref: job.payload_ref.clone(),
            payload_source: None,
            tags: run
                .as_ref()
                .and_then(|r| r.tags.as_ref())
                .map(|t| t.names.clone())
                .unwrap_or_default(),
        };
        // A job waiting for a signal: its run record names it, and when
        // the wait times out (the queue job's due time).
        if d.state == ListedState::Waiting
            && let Some(wait) = run.as_ref().and_then(|r| r.wait.as_ref())
        {
            d.waiting_for = Some(wait.name.clone());
            d.run_at_ms = Some(wait.until_ms);
        }
        // A debounced run: its key, and while its burst is open (its timer
        // is the run's queue job), the burst's submissions.
        d.debounced = job.headers.get(keys::HEADER_DEBOUNCED).cloned();
        if let Some(key) = &d.debounced
            && job.queue.as_str() == keys::debounce_queue(&self.jobs_prefix)
        {
            let burst = keys::debounce_key(&d.job_type, key);
            if let Some(raw) = view.kv_get(&burst).await? {
                let rec: records::DebounceRecord = records::decode(&burst, &raw)?;
                d.debounced_submits = (rec.run_id == d.id).then_some(rec.submits);
            }
        }
        // A job asleep: scheduled for its run's latest sleep's end.
        if let Some(run) = &run {
            d.sleeping = d.state == ListedState::Scheduled
                && run.sleep.is_some_and(|s| Some(s.until_ms) == job.run_at);
            d.snoozes = run.snoozes;
        }
        // A job put back on its queue (a retry, a release) is a new queue
        // job under the same id: its run record keeps the claims before,
        // and its last error until it fails again.
        if let Some(run) = run.as_ref().filter(|r| !r.past.is_empty()) {
            let own = self.view().attempt_history(&job.id).await?;
            d.history = rows(run.claims_with(PastAttempt::from_history(&own)));
            if d.error.is_none() {
                d.error = run.past.iter().rev().find_map(|a| a.error.clone());
            }
        }
        // A dead job: its outcome record (jobs) or item marker (bulk items).
        if job.status == JobStatus::Dead {
            if let Some(run_id) = &run_id
                && let Some(rec) = inspect::outcome_record(view, run_id).await?
            {
                d.finished_at_ms = Some(rec.finished_at_ms);
                d.attempts = rec.attempts;
                d.error = outcome_error(&rec.outcome);
                d.failure_kind = failure_kind(&rec.outcome);
                // This dead letter is the run's latest delivery (not one a
                // retry superseded): a retry can start from it.
                d.retryable = rec.job_id == job.id
                    && !matches!(rec.outcome, Outcome::Succeeded(_))
                    && d.workflow.is_none();
            } else if let (Some(b), Some(k)) = (&row.batch, &row.key)
                && let Some(m) = self.marker(b, k).await?
            {
                // An item's end is its marker's (the dead letter is its
                // delivery's).
                d.state = item_state(m.status);
                d.error = m.error.or(d.error);
            }
        } else if let (Some(b), Some(k)) = (&row.batch, &row.key)
            && let Some(m) = self.marker(b, k).await?
        {
            d.state = item_state(m.status);
            d.error = m.error;
            if let Some(out) = &m.output {
                (d.output, d.output_blob) = output_with(out, self.keyring());
            }
        }
        Ok(self.reveal(d))
    }

    /// A job's values as this store's keyring shows them: opened where it
    /// can, `encrypted (key ID)` where it cannot (the payload stays sealed,
    /// and its display says so).
    fn reveal(&self, mut d: JobDetail) -> JobDetail {
        let keyring = self.keyring();
        d.error = d.error.map(|e| keyring.show_text(&e));
        for row in &mut d.history {
            row.error = row.error.take().map(|e| keyring.show_text(&e));
        }
        if let Some(p) = &d.payload
            && let Ok(plain) = keyring.open(p)
        {
            d.payload = Some(plain.into_owned());
        }
        d
    }

    /// The dead letter a retried run `run_id` of `job_type` left of an
    /// earlier attempt series (the payload is the same): from the type's
    /// dead letters, [`EARLIER_SCAN`] at most.
    async fn earlier_delivery(
        &self,
        run_id: &str,
        job_type: &str,
    ) -> Result<Option<JobRecord>, OpsError> {
        let mut scanned = 0;
        for (queue, _, _) in self.queues(Some(job_type)).await? {
            let mut after: Option<String> = None;
            while scanned < EARLIER_SCAN {
                let page = self.view().dead_jobs(&queue, after.as_deref(), 500).await?;
                scanned += page.len();
                let last = page.last().map(|j| j.id.clone());
                if let Some(found) = page
                    .into_iter()
                    .find(|j| j.headers.get(keys::HEADER_RUN).is_some_and(|r| r == run_id))
                {
                    // Its payload, when an object holds it.
                    return Ok(self.view().get_job(&found.id).await?);
                }
                match last {
                    Some(l) => after = Some(l),
                    None => break,
                }
            }
        }
        Ok(None)
    }

    /// `gaffer item BATCH KEY`: a batch item, whatever became of its
    /// delivery: its live or dead queue job when the queue keeps it, else
    /// its marker (how it ended: status, error, output).
    pub async fn item(&self, batch: &str, key: &str) -> Result<JobDetail, OpsError> {
        let view = self.view();
        if !keys::is_valid_id(batch) {
            return Err(OpsError::BatchNotFound(batch.to_string()));
        }
        let Some(head) = inspect::batch_head(view, batch).await? else {
            return Err(OpsError::BatchNotFound(batch.to_string()));
        };
        let marker = self.marker(batch, key).await?;
        let active = view
            .kv_get(&keys::item_active_key(batch, key))
            .await?
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let delivery = active
            .clone()
            .or_else(|| marker.as_ref().map(|m| m.job_id.clone()));
        if let Some(job_id) = &delivery
            && keys::is_valid_id(job_id)
            && view.job_record(job_id).await?.is_some()
        {
            let mut d = self.job(job_id).await?;
            d.batch = Some(batch.to_string());
            d.key = Some(key.to_string());
            return Ok(d);
        }
        let Some(m) = marker else {
            return Err(OpsError::ItemNotFound {
                batch: batch.to_string(),
                key: key.to_string(),
            });
        };
        let (output, output_blob) = m.output.as_ref().map(output).unwrap_or_default();
        Ok(JobDetail {
            id: m.job_id.clone(),
            job_id: Some(m.job_id.clone()),
            job_type: head.pipeline,
            state: item_state(m.status),
            attempts: 0,
            submitted_at_ms: None,
            enqueued_at_ms: None,
            claimed_at_ms: None,
            run_at_ms: None,
            finished_at_ms: None,
            output,
            output_blob,
            error: m.error,
            failure_kind: None,
            batch: Some(batch.to_string()),
            key: Some(key.to_string()),
            history: Vec::new(),
            followups: Vec::new(),
            workflow: None,
            step: None,
            waiting_for: None,
            sleeping: false,
            snoozes: 0,
            debounced: None,
            debounced_submits: None,
            retryable: false,
            payload: None,
            payload_ref: None,
            payload_source: None,
            tags: Vec::new(),
        })
    }

    pub(super) async fn marker(
        &self,
        batch: &str,
        key: &str,
    ) -> Result<Option<ItemMarker>, OpsError> {
        let k = keys::item_marker_key(batch, key);
        match self.view().kv_get(&k).await? {
            Some(raw) => Ok(Some(records::decode(&k, &raw)?)),
            None => Ok(None),
        }
    }

    /// A job's claims: the queue's attempt history, or, for a job the queue
    /// has forgotten (acknowledged), the one its outcome record kept.
    async fn history(
        &self,
        job_id: &str,
        record: Option<&OutcomeRecord>,
    ) -> Result<Vec<AttemptRow>, OpsError> {
        let queue = self.view().attempt_history(job_id).await?;
        let past = if queue.is_empty() {
            record.map(|r| r.history.clone()).unwrap_or_default()
        } else {
            PastAttempt::from_history(&queue)
        };
        Ok(rows(past))
    }
}

/// Most dead letters [`Store::job`] reads to find the payload of a
/// retried run's earlier series.
pub(super) const EARLIER_SCAN: usize = 2000;

/// How a settled item ended, in words.
pub(super) fn item_state(status: records::ItemStatus) -> ListedState {
    match status {
        records::ItemStatus::Succeeded => ListedState::Succeeded,
        records::ItemStatus::Failed => ListedState::Failed,
        records::ItemStatus::Cancelled => ListedState::Cancelled,
    }
}

/// A job's claims as the command shows them.
pub(super) fn rows(past: Vec<PastAttempt>) -> Vec<AttemptRow> {
    past.into_iter()
        .map(|a| AttemptRow {
            attempt: a.claim,
            outcome: a.how,
            claimed_at_ms: a.claimed_at_ms,
            recorded_at_ms: a.ended_at_ms,
            error: a.error,
        })
        .collect()
}

/// How many of `history`'s claims snoozed.
fn snoozed_claims(history: &[AttemptRow]) -> u32 {
    let n = history.iter().filter(|a| a.outcome == "snoozed").count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A live queue job's attempts: its own claims, plus the real attempts its
/// run spent on the queue jobs before it (a retry puts the job back as a
/// new queue job under the same id).
pub(super) fn attempts_of(job: &JobRecord) -> u32 {
    gaffer_layout::past::tried_before(&job.headers).saturating_add(job.attempts)
}

/// A listing row of a queue job in `status`.
pub(crate) fn queue_row(job: &JobRecord, status: JobStatus) -> JobRow {
    let h = |k: &str| job.headers.get(k).cloned();
    let (state, at_ms) = match status {
        JobStatus::Pending => (ListedState::Queued, Some(job.enqueued_at)),
        JobStatus::Scheduled if job.signal_wait => {
            (ListedState::Waiting, job.run_at.or(Some(job.enqueued_at)))
        }
        JobStatus::Scheduled => (ListedState::Scheduled, job.run_at.or(Some(job.enqueued_at))),
        JobStatus::Claimed => (ListedState::Running, job.claimed_at),
        JobStatus::Done => (ListedState::Succeeded, Some(job.enqueued_at)),
        JobStatus::Dead => (ListedState::Dead, Some(job.enqueued_at)),
    };
    JobRow {
        // A job's run id; a bulk item (it carries no `gaffer.run`: it has
        // no run records) by the queue job id of its delivery, what
        // `gaffer job` reads while the queue keeps it.
        id: h(keys::HEADER_RUN).unwrap_or_else(|| job.id.clone()),
        job_type: h(keys::HEADER_TYPE).unwrap_or_else(|| job.queue.to_string()),
        state,
        attempts: attempts_of(job),
        at_ms,
        batch: h(keys::HEADER_BATCH),
        key: h(keys::HEADER_KEY),
        error: job.last_error.clone(),
        shard: None,
    }
}

pub(crate) fn outcome_state(o: &Outcome) -> ListedState {
    match o {
        Outcome::Succeeded(_) => ListedState::Succeeded,
        Outcome::Failed { .. } => ListedState::Failed,
        Outcome::Cancelled => ListedState::Cancelled,
    }
}

pub(crate) fn outcome_error(o: &Outcome) -> Option<String> {
    match o {
        Outcome::Failed { message, .. } => Some(message.clone()),
        Outcome::Cancelled => Some("cancelled".into()),
        Outcome::Succeeded(_) => None,
    }
}

pub(super) fn failure_kind(o: &Outcome) -> Option<String> {
    match o {
        Outcome::Failed { kind, .. } => Some(format!("{kind:?}")),
        Outcome::Cancelled => Some("Cancelled".into()),
        Outcome::Succeeded(_) => None,
    }
}

/// Bytes a job's submitter or handler wrote (a payload, an output) as
/// JSON, when they are MessagePack: decoded with nesting bounded
/// (`records::from_msgpack`), so a value nested thousands of levels deep
/// is refused instead of overflowing the reader's stack.
pub fn json_of(bytes: &[u8]) -> Option<serde_json::Value> {
    records::from_msgpack::<serde_json::Value>(bytes).ok()
}

/// An output as JSON (decoded from MessagePack), or its blob path.
pub fn output(out: &OutputRef) -> (Option<serde_json::Value>, Option<String>) {
    output_with(out, &gaffer_layout::sealed::Keyring::new())
}

/// [`output`], opened with `keyring`: a sealed output it cannot open shows
/// as the string `encrypted (key ID)`.
pub fn output_with(
    out: &OutputRef,
    keyring: &gaffer_layout::sealed::Keyring,
) -> (Option<serde_json::Value>, Option<String>) {
    match out {
        OutputRef::Inline(bytes) => {
            let bytes = match keyring.open(bytes) {
                Ok(plain) => plain,
                Err(e) => {
                    let label = gaffer_layout::sealed::encrypted_label(&e);
                    return (Some(serde_json::Value::String(label)), None);
                }
            };
            let v = json_of(&bytes).unwrap_or_else(|| {
                serde_json::Value::String(format!("<{} bytes, not MessagePack>", bytes.len()))
            });
            (Some(v), None)
        }
        OutputRef::Blob(path) => (None, Some(path.clone())),
    }
}

pub(super) fn outcome_detail(
    id: &str,
    rec: &OutcomeRecord,
    keyring: &gaffer_layout::sealed::Keyring,
) -> JobDetail {
    let (output, output_blob) = match &rec.outcome {
        Outcome::Succeeded(out) => output_with(out, keyring),
        _ => (None, None),
    };
    JobDetail {
        id: id.to_string(),
        job_id: Some(rec.job_id.clone()),
        job_type: rec.job_type.clone(),
        state: outcome_state(&rec.outcome),
        attempts: rec.attempts,
        submitted_at_ms: None,
        enqueued_at_ms: None,
        claimed_at_ms: None,
        run_at_ms: None,
        finished_at_ms: Some(rec.finished_at_ms),
        output,
        output_blob,
        error: outcome_error(&rec.outcome),
        failure_kind: failure_kind(&rec.outcome),
        batch: None,
        key: None,
        history: Vec::new(),
        followups: rec.followups.clone(),
        workflow: None,
        step: None,
        waiting_for: None,
        sleeping: false,
        snoozes: 0,
        debounced: None,
        debounced_submits: None,
        retryable: false,
        payload: None,
        payload_ref: None,
        payload_source: None,
        tags: rec
            .tags
            .as_ref()
            .map(|t| t.names.clone())
            .unwrap_or_default(),
    }
}
