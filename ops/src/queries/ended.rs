//! The failed and dead jobs: dead letters, the finished-jobs index scanned and counted, the preview of a retry of failed jobs.

use super::*;

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
}
