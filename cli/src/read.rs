//! The store, opened read-only, and what each command reads from it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use gaffer_actors::EngineError;
use gaffer_actors::layout::inspect::{self, EndedState};
use gaffer_actors::layout::keys;
use gaffer_actors::layout::records;
use gaffer_actors::layout::records::{ItemMarker, Outcome, OutcomeRecord, OutputRef, PastAttempt};
use taquba::{
    InboxSender, JobRecord, JobStatus, QueueReader, QueueView, ReaderMode, ReaderOptions,
    default_inbox_path,
};

use crate::StateArg;
use crate::error::CliError;
use crate::report::{
    AttemptRow, BatchRow, Batches, Dead, DeadRow, Health, JobDetail, JobRow, Jobs, Periodic,
    PeriodicRow, QueueRow, Stats,
};
use crate::unflushed::{Counter, Newest, Unflushed};

/// Most failed keys `gaffer batch` shows.
const FAILED_KEYS_SHOWN: usize = 100;

/// How a command reads the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Through a reader that replays the WAL past the writer's last
    /// memtable flush at open: the whole current state, for the commands
    /// that list or look up jobs, batches and records.
    Replay,
    /// The flushed state, and of the WAL past it only the liveness beat,
    /// the job counters and the store's markers, read from the WAL objects
    /// raw (see [`crate::unflushed`]): `health`, which then reads the WAL
    /// of about one beat interval however long the unflushed WAL, and
    /// `stats`, which reads every unflushed object but keeps only the
    /// counter rows (about half a replay's cost).
    Flushed,
}

/// A store opened read-only.
pub struct Store {
    reader: QueueReader,
    /// With [`Reading::Flushed`]: the WAL past the reader's flushed state.
    unflushed: Option<Unflushed>,
    jobs_prefix: String,
    bulk_prefix: String,
    /// Where operator requests go: the store's inbox.
    sender: InboxSender,
}

impl Store {
    /// Open the store at `dir` or `url`, read as `reading` says, and check
    /// it is a gaffer store of the layout this build reads.
    pub async fn open(
        dir: Option<&Path>,
        url: Option<&str>,
        queue_path: &str,
        jobs_prefix: &str,
        bulk_prefix: &str,
        reading: Reading,
    ) -> Result<Self, CliError> {
        let named = match (dir, url) {
            (Some(dir), _) => gaffer_actors::layout::store::Store::local_dir(dir),
            (None, Some(url)) => gaffer_actors::layout::store::Store::url(url),
            (None, None) => return Err(CliError::NoStoreGiven),
        };
        let name = named.name();
        let store = named.open_existing()?;
        let sender = InboxSender::new(store.clone(), default_inbox_path(queue_path));
        let mut options = ReaderOptions::default().mode(ReaderMode::FollowLatest);
        // The WAL past the flushed state starts after the manifest's
        // `replay_after_wal_id`. The manifest is read before the reader
        // opens (on a manifest as new or newer): the WAL objects from there
        // hold every commit past the reader's flushed state, and those
        // already flushed are told apart by their sequence numbers.
        let after = match reading {
            Reading::Replay => {
                options = options.manifest_poll_interval(std::time::Duration::from_millis(100));
                None
            }
            Reading::Flushed => {
                let admin = slatedb::admin::Admin::builder(queue_path, store.clone()).build();
                let manifest = admin
                    .read_manifest(None)
                    .await
                    .map_err(taquba::Error::from)?;
                // The view stays on the manifest it opened on (its flushed
                // sequence number is the one the WAL rows are told apart by).
                options = options
                    .skip_wal_replay(true)
                    .manifest_poll_interval(std::time::Duration::from_secs(3600));
                manifest.map(|m| m.replay_after_wal_id())
            }
        };
        let reader = match QueueReader::open_with_options(store.clone(), queue_path, options).await
        {
            Ok(r) => r,
            Err(taquba::Error::StoreNotInitialized { .. }) => {
                return Err(CliError::NotInitialized(name));
            }
            Err(e) => return Err(e.into()),
        };
        let unflushed = match after {
            Some(after) => match Unflushed::find(store, queue_path, after).await {
                Ok(u) => Some(u),
                Err(e) => {
                    let _ = reader.close().await;
                    return Err(e);
                }
            },
            None => None,
        };
        let opened = Self {
            reader,
            unflushed,
            jobs_prefix: jobs_prefix.to_string(),
            bulk_prefix: bulk_prefix.to_string(),
            sender,
        };
        let refused = match opened.store_marker(keys::LAYOUT_KEY).await {
            Ok(found) => inspect::layout_of(found.as_deref())
                .readable(&name)
                .err()
                .map(CliError::from),
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            opened.close().await;
            return Err(e);
        }
        Ok(opened)
    }

    /// The value of a gaffer marker (written once, at the store's first
    /// start): from the view, else, read [`Reading::Flushed`], from the WAL
    /// past it.
    async fn store_marker(&self, key: &[u8]) -> Result<Option<Vec<u8>>, CliError> {
        if let Some(found) = self.view().kv_get(key).await? {
            return Ok(Some(found.to_vec()));
        }
        match &self.unflushed {
            Some(u) => u.marker(key).await,
            None => Ok(None),
        }
    }

    /// Check the store's shard marker: refused if it was written as
    /// another shard or under another count (`--shard-count`).
    pub async fn check_shard(&self, index: usize, count: usize, url: &str) -> Result<(), CliError> {
        let place = gaffer_actors::ShardPlace {
            index,
            count,
            url: url.to_string(),
        };
        let found = self.store_marker(keys::SHARD_KEY).await?;
        inspect::shard_of(found.as_deref(), &place)?;
        Ok(())
    }

    /// Close the reader.
    pub async fn close(&self) {
        let _ = self.reader.close().await;
    }

    /// The inbox sender of operator requests.
    pub fn sender(&self) -> &InboxSender {
        &self.sender
    }

    /// The engine's jobs queue prefix.
    pub fn jobs_prefix(&self) -> &str {
        &self.jobs_prefix
    }

    pub(crate) fn view(&self) -> &QueueView {
        self.reader.view()
    }

    /// The engine's queues, `(queue, kind, name)`, in name order.
    async fn queues(
        &self,
        only: Option<&str>,
    ) -> Result<Vec<(String, &'static str, String)>, CliError> {
        self.queues_and(only, Vec::new()).await
    }

    /// [`Self::queues`], with the queues `more` names beside the view's
    /// (those of counters only the WAL holds yet).
    async fn queues_and(
        &self,
        only: Option<&str>,
        more: Vec<String>,
    ) -> Result<Vec<(String, &'static str, String)>, CliError> {
        let mut out = Vec::new();
        let wanted = only.map(|t| {
            [
                keys::queue_for(&self.jobs_prefix, t),
                keys::queue_for(&self.bulk_prefix, t),
            ]
        });
        let mut all = self.view().list_queues().await?;
        all.extend(more);
        all.sort();
        all.dedup();
        for q in all {
            // A partition queue (a rate limit per header value) is listed
            // under its type.
            let base = keys::partition_base(&q).unwrap_or(&q).to_string();
            if let Some(w) = &wanted
                && !w.contains(&base)
            {
                continue;
            }
            match self.classify(&q) {
                // Requests from clients in other processes: only in a
                // listing of every queue.
                Some(("intake", _)) if only.is_some() => {}
                Some((kind, name)) => out.push((q, kind, name)),
                None => {}
            }
        }
        out.sort();
        Ok(out)
    }

    /// What a queue of the store is: `(kind, name)`, a job type's (a
    /// partition queue under its type), a pipeline's, or the intake's (its
    /// dead jobs are refused client requests, with the reason); `None` for
    /// a queue that is not the engine's.
    fn classify(&self, q: &str) -> Option<(&'static str, String)> {
        let base = keys::partition_base(q).unwrap_or(q);
        if q == gaffer_actors::engine::intake::intake_queue(&self.jobs_prefix) {
            return Some(("intake", "client requests".to_string()));
        }
        if let Some(name) = base.strip_prefix(&format!("{}.", self.jobs_prefix)) {
            return Some(("job", name.to_string()));
        }
        q.strip_prefix(&format!("{}.", self.bulk_prefix))
            .map(|name| ("pipeline", name.to_string()))
    }

    /// `gaffer stats`: each queue's counters; read [`Reading::Flushed`],
    /// the flushed counters with the WAL's changes to them applied (the
    /// same counts as a replaying reader's).
    pub async fn stats(&self, exact: bool) -> Result<Stats, CliError> {
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

    /// `gaffer jobs`: live jobs (running, queued, scheduled; or dead with
    /// `--state dead`) queue by queue, then finished jobs newest first
    /// through the finished-jobs index; from `after`, a previous page's
    /// cursor.
    pub async fn jobs(
        &self,
        state: Option<StateArg>,
        job_type: Option<&str>,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Jobs, CliError> {
        let limit = limit.clamp(1, 1000);
        let live: &[JobStatus] = match state {
            None => &[JobStatus::Claimed, JobStatus::Pending, JobStatus::Scheduled],
            Some(StateArg::Running) => &[JobStatus::Claimed],
            Some(StateArg::Queued) => &[JobStatus::Pending],
            Some(StateArg::Scheduled | StateArg::Waiting) => &[JobStatus::Scheduled],
            Some(StateArg::Dead) => &[JobStatus::Dead],
            Some(_) => &[],
        };
        let ended: &[EndedState] = match state {
            None => &EndedState::ALL,
            Some(StateArg::Succeeded) => &[EndedState::Succeeded],
            Some(StateArg::Failed) => &[EndedState::Failed],
            Some(StateArg::Cancelled) => &[EndedState::Cancelled],
            Some(_) => &[],
        };
        let from = match after {
            Some(c) => Cursor::parse(c)?,
            None => Cursor::Live {
                phase: 0,
                queue: String::new(),
                at: None,
            },
        };
        let mut jobs = Vec::new();
        let mut next = None;
        if let Cursor::Live {
            phase: from_phase,
            queue: from_queue,
            at: from_at,
        } = &from
        {
            let queues = self.queues(job_type).await?;
            'live: for (phase, &status) in live.iter().enumerate().skip(*from_phase) {
                for (queue, _, _) in &queues {
                    let first = phase == *from_phase && queue == from_queue;
                    if phase == *from_phase && queue < from_queue {
                        continue;
                    }
                    let at = if first { from_at.as_deref() } else { None };
                    if jobs.len() == limit {
                        // Full: is there anything after it?
                        let probe = self.view().list_jobs(queue, status, at, 1).await?;
                        if !probe.jobs.is_empty() {
                            next = Some(Cursor::Live {
                                phase,
                                queue: queue.clone(),
                                at: at.map(<[u8]>::to_vec),
                            });
                            break 'live;
                        }
                        continue;
                    }
                    let page = self
                        .view()
                        .list_jobs(queue, status, at, limit - jobs.len())
                        .await?;
                    // Waiting jobs are scheduled ones parked on a signal.
                    let keep = |row: &JobRow| match state {
                        Some(StateArg::Waiting) => row.state == "waiting",
                        Some(StateArg::Scheduled) => row.state == "scheduled",
                        _ => true,
                    };
                    jobs.extend(page.jobs.iter().map(|j| queue_row(j, status)).filter(keep));
                    if let Some(at) = page.next_cursor {
                        next = Some(Cursor::Live {
                            phase,
                            queue: queue.clone(),
                            at: Some(at),
                        });
                        break 'live;
                    }
                }
            }
        }
        if next.is_none() && !ended.is_empty() {
            if !inspect::ended_index_ready(self.view()).await? {
                return Err(CliError::IndexNotReady);
            }
            let before = match &from {
                Cursor::Ended(pos) => Some(pos.as_str()),
                Cursor::Live { .. } => None,
            };
            let types = job_type.map(|t| [t]);
            let types = types.as_ref().map(|t| &t[..]);
            let room = limit - jobs.len();
            let page = inspect::ended_page(self.view(), types, ended, before, room.max(1)).await?;
            if room == 0 {
                if !page.jobs.is_empty() {
                    next = Some(Cursor::Ended(before.unwrap_or_default().to_string()));
                }
            } else {
                next = page.next.map(Cursor::Ended);
                jobs.extend(page.jobs.into_iter().map(|(id, rec)| JobRow {
                    id,
                    job_type: rec.job_type.clone(),
                    state: outcome_state(&rec.outcome),
                    attempts: rec.attempts,
                    at_ms: Some(rec.finished_at_ms),
                    batch: None,
                    key: None,
                    error: outcome_error(&rec.outcome),
                    shard: None,
                }));
            }
        }
        let next = next.map(|c| c.render());
        Ok(Jobs {
            jobs,
            more: next.is_some(),
            next,
        })
    }

    /// `gaffer job ID`.
    pub async fn job(&self, id: &str) -> Result<JobDetail, CliError> {
        let view = self.view();
        if !keys::is_valid_id(id) {
            return Err(CliError::JobNotFound(id.to_string()));
        }
        if let Some(rec) = inspect::outcome_record(view, id).await? {
            let mut d = outcome_detail(id, &rec);
            d.history = self.history(&rec.job_id, Some(&rec)).await?;
            if let Some(job) = view.job_record(&rec.job_id).await? {
                d.enqueued_at_ms = Some(job.enqueued_at);
                d.claimed_at_ms = job.claimed_at;
            }
            return Ok(d);
        }
        let run = inspect::run_record(view, id).await?;
        let (job_id, submitted) = match &run {
            Some(run) => (run.job_id.clone(), Some(run.submitted_at_ms)),
            None => (id.to_string(), None),
        };
        let Some(job) = view.job_record(&job_id).await? else {
            return Err(CliError::JobNotFound(id.to_string()));
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
        };
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
            } else if let (Some(b), Some(k)) = (&row.batch, &row.key)
                && let Some(m) = self.marker(b, k).await?
            {
                d.error = m.error.or(d.error);
            }
        } else if let (Some(b), Some(k)) = (&row.batch, &row.key)
            && let Some(m) = self.marker(b, k).await?
        {
            d.state = match m.status {
                records::ItemStatus::Succeeded => "succeeded",
                records::ItemStatus::Failed => "failed",
                records::ItemStatus::Cancelled => "cancelled",
            };
            d.error = m.error;
            if let Some(out) = &m.output {
                (d.output, d.output_blob) = output(out);
            }
        }
        Ok(d)
    }

    async fn marker(&self, batch: &str, key: &str) -> Result<Option<ItemMarker>, CliError> {
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
    ) -> Result<Vec<AttemptRow>, CliError> {
        let queue = self.view().attempt_history(job_id).await?;
        let past = if queue.is_empty() {
            record.map(|r| r.history.clone()).unwrap_or_default()
        } else {
            PastAttempt::from_history(&queue)
        };
        Ok(rows(past))
    }

    /// `gaffer dead`.
    pub async fn dead(&self, job_type: Option<&str>, limit: usize) -> Result<Dead, CliError> {
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
                dead.push(d);
            }
        }
        Ok(Dead { dead })
    }

    /// `gaffer batches`.
    pub async fn batches(&self, limit: usize) -> Result<Batches, CliError> {
        let (ids, more) = inspect::batch_ids(self.view(), None, limit).await?;
        let mut batches = Vec::with_capacity(ids.len());
        for id in ids {
            match self.batch_row(&id, false).await {
                Ok(row) => batches.push(row),
                // A batch forgotten between the two reads.
                Err(CliError::BatchNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Batches { batches, more })
    }

    /// `gaffer batch ID`.
    pub async fn batch(&self, id: &str) -> Result<BatchRow, CliError> {
        if !keys::is_valid_id(id) {
            return Err(CliError::BatchNotFound(id.to_string()));
        }
        self.batch_row(id, true).await
    }

    async fn batch_row(&self, id: &str, keys_too: bool) -> Result<BatchRow, CliError> {
        let view = self.view();
        let Some(head) = inspect::batch_head(view, id).await? else {
            return Err(CliError::BatchNotFound(id.to_string()));
        };
        let s = match inspect::batch_state(view, id).await {
            Ok(s) => s,
            Err(EngineError::BatchNotFound(_)) => return Err(CliError::BatchNotFound(id.into())),
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
    pub async fn periodic(&self) -> Result<Periodic, CliError> {
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

    /// `gaffer health`.
    pub async fn health(&self) -> Result<Health, CliError> {
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

/// A listing row of a queue job in `status`.
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
    gaffer_actors::exec::attempts::tried_before(&job.headers).saturating_add(job.attempts)
}

fn queue_row(job: &JobRecord, status: JobStatus) -> JobRow {
    let h = |k: &str| job.headers.get(k).cloned();
    let (state, at_ms) = match status {
        JobStatus::Pending => ("queued", Some(job.enqueued_at)),
        // Parked on a signal (`wait_signal`): due at its timeout.
        JobStatus::Scheduled if job.signal_wait => ("waiting", job.run_at),
        JobStatus::Scheduled => ("scheduled", job.run_at.or(Some(job.enqueued_at))),
        JobStatus::Claimed => ("running", job.claimed_at),
        JobStatus::Done => ("succeeded", Some(job.enqueued_at)),
        JobStatus::Dead => ("dead", Some(job.enqueued_at)),
    };
    JobRow {
        // A bulk item's run id follows from its batch and key (items carry
        // no `gaffer.run`).
        id: h(keys::HEADER_RUN)
            .or_else(|| {
                Some(keys::item_run_id(
                    &h(keys::HEADER_BATCH)?,
                    &h(keys::HEADER_KEY)?,
                ))
            })
            .unwrap_or_else(|| job.id.clone()),
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

fn outcome_state(o: &Outcome) -> &'static str {
    match o {
        Outcome::Succeeded(_) => "succeeded",
        Outcome::Failed { .. } => "failed",
        Outcome::Cancelled => "cancelled",
    }
}

fn outcome_error(o: &Outcome) -> Option<String> {
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

/// An output as JSON (decoded from MessagePack), or its blob path.
fn output(out: &OutputRef) -> (Option<serde_json::Value>, Option<String>) {
    match out {
        OutputRef::Inline(bytes) => {
            let v = rmp_serde::from_slice::<serde_json::Value>(bytes).unwrap_or_else(|_| {
                serde_json::Value::String(format!("<{} bytes, not MessagePack>", bytes.len()))
            });
            (Some(v), None)
        }
        OutputRef::Blob(path) => (None, Some(path.clone())),
    }
}

fn outcome_detail(id: &str, rec: &OutcomeRecord) -> JobDetail {
    let (output, output_blob) = match &rec.outcome {
        Outcome::Succeeded(out) => output(out),
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
    }
}

/// Where a page of `gaffer jobs` starts: printed as the previous page's
/// `next`, passed back as `--after`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cursor {
    /// In the live part: the `phase`-th state of the listing, at `queue`,
    /// from the queue's own listing cursor `at` (its start with `None`).
    Live {
        phase: usize,
        queue: String,
        at: Option<Vec<u8>>,
    },
    /// In the finished part, before this index position (from the newest
    /// when empty).
    Ended(String),
}

impl Cursor {
    fn render(&self) -> String {
        match self {
            Self::Live { phase, queue, at } => format!(
                "live:{phase}:{queue}:{}",
                at.as_deref().map(keys::hex).unwrap_or_default()
            ),
            Self::Ended(pos) => format!("ended:{pos}"),
        }
    }

    fn parse(s: &str) -> Result<Self, CliError> {
        let bad = || CliError::BadCursor(s.to_string());
        if let Some(pos) = s.strip_prefix("ended:") {
            return Ok(Self::Ended(pos.to_string()));
        }
        let rest = s.strip_prefix("live:").ok_or_else(bad)?;
        let mut parts = rest.splitn(3, ':');
        let phase = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let queue = parts.next().ok_or_else(bad)?.to_string();
        let at = parts.next().ok_or_else(bad)?;
        let at = if at.is_empty() {
            None
        } else {
            Some(unhex(at).ok_or_else(bad)?)
        };
        Ok(Self::Live { phase, queue, at })
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        for c in [
            Cursor::Live {
                phase: 2,
                queue: "jobs.a-b".into(),
                at: Some(vec![0, 0xff, 0x10]),
            },
            Cursor::Live {
                phase: 0,
                queue: String::new(),
                at: None,
            },
            Cursor::Ended("0000018c/01ABC".into()),
            Cursor::Ended(String::new()),
        ] {
            assert_eq!(Cursor::parse(&c.render()).unwrap(), c);
        }
        for bad in ["", "live:x:q:", "live:1:q:zz", "live:1:q:abc", "other:1"] {
            assert!(Cursor::parse(bad).is_err(), "{bad}");
        }
    }
}
