//! What batches report: a run's report, a running batch's progress, and
//! what a batch's records say.

use std::time::Duration;

pub use gaffer_actors::batches::report::BulkReport;
use gaffer_actors::batches::report::CostReport;

/// A running batch's progress.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressSnapshot {
    /// Items in the batch.
    pub total: u64,
    /// Items done (`succeeded + failed + cancelled`).
    pub completed: u64,
    /// Items succeeded.
    pub succeeded: u64,
    /// Items failed.
    pub failed: u64,
    /// Items cancelled.
    pub cancelled: u64,
    /// Since the run started.
    pub elapsed: Duration,
    /// `completed / elapsed` (0 before any time passed).
    pub rate_per_sec: f64,
    /// `remaining / rate` when both are positive.
    pub time_remaining: Option<Duration>,
    /// Cost rollup so far.
    pub cost: CostReport,
}

impl ProgressSnapshot {
    pub(crate) fn from_progress(p: gaffer_actors::BatchProgress) -> Self {
        let completed = p.succeeded + p.failed + p.cancelled;
        let secs = p.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            completed as f64 / secs
        } else {
            0.0
        };
        let remaining = p.total.saturating_sub(completed);
        Self {
            total: p.total,
            completed,
            succeeded: p.succeeded,
            failed: p.failed,
            cancelled: p.cancelled,
            elapsed: p.elapsed,
            rate_per_sec: rate,
            time_remaining: (rate > 0.0 && remaining > 0)
                .then(|| Duration::from_secs_f64(remaining as f64 / rate)),
            cost: p.cost.into(),
        }
    }
}

/// What a batch's durable records say (no run needed; works after a restart).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStatus {
    /// Batch id.
    pub batch_id: String,
    /// Items in the batch.
    pub total: u64,
    /// Items whose latest outcome is a success.
    pub succeeded: u64,
    /// Items whose latest outcome is a failure.
    pub failed: u64,
    /// Items whose latest outcome is a cancel.
    pub cancelled: u64,
    /// Items queued or running now.
    pub pending: u64,
    /// Cost rollup of the recorded outcomes.
    pub cost: CostReport,
    /// Failed keys, in key order.
    pub failed_keys: Vec<String>,
}
