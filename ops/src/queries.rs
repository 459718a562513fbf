//! Queries: what each read of the store answers (stats, a job, dead
//! letters, batches, periodic jobs, the writer's health, paused types).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use gaffer_layout::EngineError;
use gaffer_layout::inspect;
use gaffer_layout::keys;
use gaffer_layout::records;
use gaffer_layout::records::{ItemMarker, Outcome, OutcomeRecord, OutputRef, PastAttempt};
use taquba::{JobRecord, JobStatus};

use crate::error::OpsError;
use crate::listing::StateFilter;
use crate::report::{
    AttemptRow, BatchRow, Batches, Dead, DeadRow, Health, JobDetail, JobRow, Periodic, PeriodicRow,
    QueueRow, RetryPreview, Stats,
};
use crate::store::Store;
use crate::unflushed::{Counter, Newest};
use gaffer_layout::workflow::{HEADER_STEP, HEADER_WORKFLOW};

/// A step of a forward scan of the finished-jobs index (see
/// [`Store::scan_ended`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndedScan {
    /// When each job listed ended, epoch ms, in index order.
    pub at_ms: Vec<u64>,
    /// The last entry's key: `after` of the next step.
    pub last: Option<Vec<u8>>,
    /// Whether more entries follow.
    pub more: bool,
}

/// Most failed keys a batch's status shows.
pub const FAILED_KEYS_SHOWN: usize = 100;

impl Store {
    /// `gaffer stats`: each queue's counters; read [`crate::Reading::Flushed`],
    /// the flushed counters with the WAL's changes to them applied (the
    /// same counts as a replaying reader's).
    pub async fn stats(&self, exact: bool) -> Result<Stats, OpsError> {
        let above = self.reader.last_store_activity().durable_seq;
        let changes = match &self.unflushed {
            // Beside a live engine, its latest snapshot of the counters is
            // among the newest WAL objects: read back to it, not through
            // every one.
            Some(u) if !exact => match u.newest_or_counters(keys::STATS_KEY, above).await? {
                Newest::Found { value, since } => {
                    let snapshot: records::StatsSnapshot =
                        records::decode(keys::STATS_KEY, &value)?;
                    return Ok(self.rows_from_snapshot(snapshot, &since));
                }
                Newest::Counters(changes) => changes,
            },
            Some(u) => u.counters(above).await?,
            None => Default::default(),
        };
        let more = changes.keys().map(|(queue, _)| queue.clone()).collect();
        let mut queues = Vec::new();
        for (queue, kind, name) in self.queues_and(None, more).await? {
            let s = self.view().stats(&queue).await?;
            let count = |metric: &str, flushed: i64| {
                changes
                    .get(&(queue.clone(), metric.to_string()))
                    .map_or(flushed, |c| c.over(flushed))
            };
            queues.push(QueueRow {
                pending: count("pending", s.pending),
                scheduled: count("scheduled", s.scheduled),
                running: count("claimed", s.claimed),
                done: count("done", s.done),
                dead: count("dead", s.dead),
                queue,
                kind,
                name,
            });
        }
        Ok(Stats {
            queues,
            snapshot_at_ms: None,
        })
    }

    /// The rows of the engine's counters snapshot with the changes
    /// committed after it (`since`) applied.
    fn rows_from_snapshot(
        &self,
        snapshot: records::StatsSnapshot,
        since: &BTreeMap<(String, String), Counter>,
    ) -> Stats {
        let mut counts: BTreeMap<String, records::QueueCounts> = snapshot
            .queues
            .into_iter()
            .map(|c| (c.queue.clone(), c))
            .collect();
        // A queue created since has only changes.
        for (queue, _) in since.keys() {
            counts
                .entry(queue.clone())
                .or_insert_with(|| records::QueueCounts {
                    queue: queue.clone(),
                    pending: 0,
                    claimed: 0,
                    scheduled: 0,
                    done: 0,
                    dead: 0,
                });
        }
        let queues = counts
            .into_values()
            .filter_map(|c| {
                let (kind, name) = self.classify(&c.queue)?;
                let count = |metric: &str, at: i64| {
                    since
                        .get(&(c.queue.clone(), metric.to_string()))
                        .map_or(at, |d| d.over(at))
                };
                Some(QueueRow {
                    pending: count("pending", c.pending),
                    scheduled: count("scheduled", c.scheduled),
                    running: count("claimed", c.claimed),
                    done: count("done", c.done),
                    dead: count("dead", c.dead),
                    queue: c.queue,
                    kind,
                    name,
                })
            })
            .collect();
        Stats {
            queues,
            snapshot_at_ms: Some(snapshot.at_ms),
        }
    }

    /// `gaffer job ID`.
    pub async fn job(&self, id: &str) -> Result<JobDetail, OpsError> {
        let view = self.view();
        if !keys::is_valid_id(id) {
            return Err(OpsError::JobNotFound(id.to_string()));
        }
        if let Some(rec) = inspect::outcome_record(view, id).await? {
            let mut d = outcome_detail(id, &rec, self.keyring());
            d.history = self.history(&rec.job_id, Some(&rec)).await?;
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
            retryable: false,
            payload: job.payload_ref.is_none().then(|| job.payload.clone()),
            payload_ref: job.payload_ref.clone(),
            payload_source: None,
        };
        // A job waiting for a signal: its run record names it, and when
        // the wait times out (the queue job's due time).
        if d.state == "waiting"
            && let Some(wait) = run.as_ref().and_then(|r| r.wait.as_ref())
        {
            d.waiting_for = Some(wait.name.clone());
            d.run_at_ms = Some(wait.until_ms);
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
            retryable: false,
            payload: None,
            payload_ref: None,
            payload_source: None,
        })
    }

    async fn marker(&self, batch: &str, key: &str) -> Result<Option<ItemMarker>, OpsError> {
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

    /// `gaffer dead`.
    pub async fn dead(&self, job_type: Option<&str>, limit: usize) -> Result<Dead, OpsError> {
        let mut dead = Vec::new();
        for (queue, _, _) in self.queues(job_type).await? {
            for job in self.view().dead_jobs(&queue, None, limit).await? {
                let row = queue_row(&job, JobStatus::Dead);
                let mut d = DeadRow {
                    id: row.id,
                    job_id: job.id.clone(),
                    job_type: row.job_type,
                    attempts: job.attempts,
                    enqueued_at_ms: job.enqueued_at,
                    failed_at_ms: None,
                    failure_kind: None,
                    error: job.last_error.clone(),
                    batch: row.batch,
                    key: row.key,
                    workflow: job.headers.get(HEADER_WORKFLOW).cloned(),
                    shard: None,
                };
                if let (Some(b), Some(k)) = (&d.batch, &d.key) {
                    if let Some(m) = self.marker(b, k).await? {
                        d.error = m.error.or(d.error);
                        d.failure_kind = Some(format!("{:?}", m.status));
                    }
                } else if let Some(rec) = inspect::outcome_record(self.view(), &d.id).await? {
                    if rec.job_id != job.id {
                        // Retried since: a later attempt series ended (and
                        // has its own dead letter if it failed).
                        continue;
                    }
                    d.failed_at_ms = Some(rec.finished_at_ms);
                    d.attempts = rec.attempts;
                    d.error = outcome_error(&rec.outcome);
                    d.failure_kind = failure_kind(&rec.outcome);
                } else if inspect::run_record(self.view(), &d.id)
                    .await?
                    .is_some_and(|run| run.job_id != job.id)
                {
                    // Retried since, and running again.
                    continue;
                }
                d.error = d.error.map(|e| self.keyring().show_text(&e));
                dead.push(d);
            }
        }
        Ok(Dead { dead })
    }

    /// `gaffer batches`.
    pub async fn batches(&self, limit: usize) -> Result<Batches, OpsError> {
        let (ids, more) = inspect::batch_ids(self.view(), None, limit).await?;
        let mut batches = Vec::with_capacity(ids.len());
        for id in ids {
            match self.batch_row(&id, false).await {
                Ok(row) => batches.push(row),
                // A batch forgotten between the two reads.
                Err(OpsError::BatchNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Batches { batches, more })
    }

    /// `gaffer batch ID`.
    pub async fn batch(&self, id: &str) -> Result<BatchRow, OpsError> {
        if !keys::is_valid_id(id) {
            return Err(OpsError::BatchNotFound(id.to_string()));
        }
        self.batch_row(id, true).await
    }

    async fn batch_row(&self, id: &str, keys_too: bool) -> Result<BatchRow, OpsError> {
        let view = self.view();
        let Some(head) = inspect::batch_head(view, id).await? else {
            return Err(OpsError::BatchNotFound(id.to_string()));
        };
        let s = match inspect::batch_state(view, id).await {
            Ok(s) => s,
            Err(EngineError::BatchNotFound(_)) => return Err(OpsError::BatchNotFound(id.into())),
            Err(e) => return Err(e.into()),
        };
        let settled = s.succeeded + s.failed + s.cancelled;
        Ok(BatchRow {
            id: id.to_string(),
            pipeline: head.pipeline,
            complete: head.complete,
            total: s.total,
            succeeded: s.succeeded,
            failed: s.failed,
            cancelled: s.cancelled,
            active: s.active,
            outstanding: s.total.saturating_sub(settled),
            cost: s.cost,
            failed_keys: keys_too
                .then(|| s.failed_keys.into_iter().take(FAILED_KEYS_SHOWN).collect()),
        })
    }

    /// `gaffer periodic`.
    pub async fn periodic(&self) -> Result<Periodic, OpsError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let periodic = inspect::periodic_jobs(self.view())
            .await?
            .into_iter()
            .map(|p| PeriodicRow {
                missed: p.record.missed.to_string(),
                name: p.record.name,
                job_type: p.record.job_type,
                schedule: p.schedule,
                last_fired_ms: p.record.last_fired_ms,
                last_job_id: p.record.last_run_id,
                next_due_ms: p.next_due_ms,
                fired: p.record.fired,
                handled_until_ms: p.record.cursor_ms,
            })
            .collect();
        Ok(Periodic { now_ms, periodic })
    }

    /// The index segments of the job types with finished jobs (one scan
    /// of one key per type).
    pub async fn ended_types(&self) -> Result<Vec<String>, OpsError> {
        Ok(inspect::ended_types(self.view()).await?)
    }

    /// The finished-jobs index of type segment `seg` in `result`
    /// (`succeeded`, `failed`, `cancelled`), forward in time: the end times
    /// of up to `limit` jobs (1 to 1000) that ended at or after `from_ms`
    /// and, with `after` (a previous scan's [`EndedScan::last`]), after that
    /// entry. Its keys only: no outcome record is read.
    pub async fn scan_ended(
        &self,
        seg: &str,
        result: &str,
        from_ms: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<EndedScan, OpsError> {
        use std::ops::Bound;
        let letter = match result {
            "succeeded" => keys::ENDED_SUCCEEDED,
            "failed" => keys::ENDED_FAILED,
            "cancelled" => keys::ENDED_CANCELLED,
            other => return Err(OpsError::BadInput(format!("no result `{other}`"))),
        };
        let prefix = keys::ended_prefix(seg, letter);
        let mut from = prefix.clone();
        from.extend_from_slice(format!("{from_ms:016x}").as_bytes());
        let start = match after {
            Some(last) if last >= from.as_slice() => Bound::Excluded(last.to_vec()),
            _ => Bound::Included(from),
        };
        let page = self
            .view()
            .kv_scan(
                &prefix,
                (start, Bound::Unbounded),
                taquba::KvOrder::Ascending,
                limit.clamp(1, 1000),
            )
            .await?;
        let at_ms = page
            .entries
            .iter()
            .filter_map(|(key, _)| {
                let hex = key.get(prefix.len()..prefix.len() + 16)?;
                u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
            })
            .collect();
        Ok(EndedScan {
            at_ms,
            last: page.entries.last().map(|(k, _)| k.clone()),
            more: page.more,
        })
    }

    /// How many finished jobs of `job_type` (of every type with `None`)
    /// ended in `state`, as the listing of that state shows them (through
    /// the finished-jobs index, keys only), counted up to `cap`: the count
    /// and whether more are there.
    pub async fn count_ended(
        &self,
        job_type: Option<&str>,
        state: StateFilter,
        cap: usize,
    ) -> Result<(u64, bool), OpsError> {
        use std::ops::Bound;
        let letter = match state {
            StateFilter::Succeeded => keys::ENDED_SUCCEEDED,
            StateFilter::Failed => keys::ENDED_FAILED,
            StateFilter::Cancelled => keys::ENDED_CANCELLED,
            other => {
                return Err(OpsError::BadInput(format!(
                    "{other:?} is not an ended state"
                )));
            }
        };
        let segments = match job_type {
            Some(t) => vec![keys::type_segment(t)],
            None => self.ended_types().await?,
        };
        let mut n = 0u64;
        for seg in segments {
            let prefix = keys::ended_prefix(&seg, letter);
            let mut start: Bound<Vec<u8>> = Bound::Unbounded;
            loop {
                let room = cap.saturating_sub(n as usize);
                if room == 0 {
                    return Ok((n, true));
                }
                let page = self
                    .view()
                    .kv_scan(
                        &prefix,
                        (start, Bound::Unbounded),
                        taquba::KvOrder::Ascending,
                        room.min(1000),
                    )
                    .await?;
                n += page.entries.len() as u64;
                match (page.more, page.entries.last()) {
                    (true, Some((last, _))) => start = Bound::Excluded(last.clone()),
                    _ => break,
                }
            }
        }
        Ok((n, false))
    }

    /// What `gaffer retry --failed --type T` (the dashboard's Retry all)
    /// would do now to the jobs of `job_type` that failed at or after
    /// `since_ms`: of the newest `cap` of them, how many it retries and how
    /// many it skips, and why.
    pub async fn retry_preview(
        &self,
        job_type: &str,
        since_ms: u64,
        cap: usize,
    ) -> Result<RetryPreview, OpsError> {
        let mut p = RetryPreview {
            job_type: job_type.to_string(),
            ..RetryPreview::default()
        };
        let mut before: Option<String> = None;
        'pages: loop {
            let page = inspect::ended_page(
                self.view(),
                Some(&[job_type]),
                &[inspect::EndedState::Failed],
                before.as_deref(),
                200,
            )
            .await?;
            for (_, rec) in page.jobs {
                if rec.finished_at_ms < since_ms {
                    break 'pages;
                }
                if p.retried + p.steps + p.payload_gone >= cap as u64 {
                    p.more = true;
                    break 'pages;
                }
                match self.view().job_record(&rec.job_id).await? {
                    None => p.payload_gone += 1,
                    Some(job) if job.headers.contains_key(HEADER_WORKFLOW) => p.steps += 1,
                    Some(_) => p.retried += 1,
                }
            }
            match page.next {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        Ok(p)
    }

    /// The job types an operator paused (`gaffer pause`), by name.
    pub async fn paused(&self) -> Result<Vec<String>, OpsError> {
        let page = self
            .view()
            .kv_scan(
                keys::PAUSED_PREFIX,
                (
                    std::ops::Bound::<Vec<u8>>::Unbounded,
                    std::ops::Bound::Unbounded,
                ),
                taquba::KvOrder::Ascending,
                1000,
            )
            .await?;
        Ok(page
            .entries
            .into_iter()
            .map(|(_, name)| String::from_utf8_lossy(&name).into_owned())
            .collect())
    }

    /// `gaffer health`.
    pub async fn health(&self) -> Result<Health, OpsError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let activity = self.reader.last_store_activity();
        let flushed = self.reader.writer_heartbeat().await?;
        // Read flushed: the newest beat is in the WAL past the flushed
        // state if any is, else the flushed one.
        let (beat, durable_seq, unflushed) = match &self.unflushed {
            None => (flushed, activity.durable_seq, None),
            Some(u) => {
                let (found, newest_seq) = u.newest_beat().await?;
                let beat = match found {
                    Some(b) if b.seq > activity.durable_seq => b.beat,
                    _ => flushed,
                };
                let durable = newest_seq.unwrap_or(0).max(activity.durable_seq);
                (beat, durable, Some(u.objects()))
            }
        };
        let (status, alive) = match &beat {
            None => ("absent", false),
            Some(b) if b.closed => ("closed", false),
            Some(b) if b.writer_epoch < activity.writer_epoch => ("superseded", false),
            Some(b) => {
                let allowed = (b.interval.as_millis() as u64).saturating_mul(3).max(1000);
                if now_ms.saturating_sub(b.at_ms) <= allowed {
                    ("alive", true)
                } else {
                    ("stale", false)
                }
            }
        };
        Ok(Health {
            alive,
            status,
            now_ms,
            heartbeat_at_ms: beat.as_ref().map(|b| b.at_ms),
            heartbeat_age_ms: beat.as_ref().map(|b| now_ms.saturating_sub(b.at_ms)),
            heartbeat_interval_ms: beat.as_ref().map(|b| b.interval.as_millis() as u64),
            heartbeat_writer_epoch: beat.as_ref().map(|b| b.writer_epoch),
            writer_epoch: activity.writer_epoch,
            last_flush_at_ms: activity.last_flush_at_ms,
            durable_seq,
            unflushed_wal_objects: unflushed,
        })
    }
}

/// Most dead letters [`Store::job`] reads to find the payload of a
/// retried run's earlier series.
const EARLIER_SCAN: usize = 2000;

/// How a settled item ended, in words.
fn item_state(status: records::ItemStatus) -> &'static str {
    match status {
        records::ItemStatus::Succeeded => "succeeded",
        records::ItemStatus::Failed => "failed",
        records::ItemStatus::Cancelled => "cancelled",
    }
}

/// A job's claims as the command shows them.
fn rows(past: Vec<PastAttempt>) -> Vec<AttemptRow> {
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

/// A live queue job's attempts: its own claims, plus the real attempts its
/// run spent on the queue jobs before it (a retry puts the job back as a
/// new queue job under the same id).
fn attempts_of(job: &JobRecord) -> u32 {
    gaffer_layout::past::tried_before(&job.headers).saturating_add(job.attempts)
}

/// A listing row of a queue job in `status`.
pub(crate) fn queue_row(job: &JobRecord, status: JobStatus) -> JobRow {
    let h = |k: &str| job.headers.get(k).cloned();
    let (state, at_ms) = match status {
        JobStatus::Pending => ("queued", Some(job.enqueued_at)),
        JobStatus::Scheduled if job.signal_wait => {
            ("waiting", job.run_at.or(Some(job.enqueued_at)))
        }
        JobStatus::Scheduled => ("scheduled", job.run_at.or(Some(job.enqueued_at))),
        JobStatus::Claimed => ("running", job.claimed_at),
        JobStatus::Done => ("succeeded", Some(job.enqueued_at)),
        JobStatus::Dead => ("dead", Some(job.enqueued_at)),
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

pub(crate) fn outcome_state(o: &Outcome) -> &'static str {
    match o {
        Outcome::Succeeded(_) => "succeeded",
        Outcome::Failed { .. } => "failed",
        Outcome::Cancelled => "cancelled",
    }
}

pub(crate) fn outcome_error(o: &Outcome) -> Option<String> {
    match o {
        Outcome::Failed { message, .. } => Some(message.clone()),
        Outcome::Cancelled => Some("cancelled".into()),
        Outcome::Succeeded(_) => None,
    }
}

fn failure_kind(o: &Outcome) -> Option<String> {
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

fn outcome_detail(
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
        retryable: false,
        payload: None,
        payload_ref: None,
        payload_source: None,
    }
}
