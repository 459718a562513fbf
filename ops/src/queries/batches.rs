//! Batches and periodic jobs.

use super::*;

impl Store {
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
}
