//! What a completed batch run reports, in the typed API's terms:
//! [`BulkReport`] and its [`CostReport`]. They hold no user type, so the
//! engine's error can carry a run's report
//! (`EngineError::FailureThresholdExceeded`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a completed run of a batch counted. Every manifest item is counted
/// exactly once: from its settlement in this run, or from the marker an
/// earlier run left (succeeded items are not run again).
#[derive(Debug, Clone, PartialEq)]
pub struct BulkReport {
    /// Batch id.
    pub batch_id: String,
    /// Items in the batch.
    pub total: u64,
    /// Items succeeded.
    pub succeeded: u64,
    /// Items failed.
    pub failed: u64,
    /// Items cancelled.
    pub cancelled: u64,
    /// Wall time of this run.
    pub elapsed: Duration,
    /// Cost rollup.
    pub cost: CostReport,
    /// Keys of failed items, in completion order.
    pub failed_keys: Vec<String>,
    /// Item records the sink rejected, or could not be given their output
    /// (it could not be read, or failed JSON conversion): written with status
    /// `output_unavailable`.
    pub sink_errors: u64,
    /// Keys of those items, in order.
    pub sink_error_keys: Vec<String>,
    /// The id of the completion job this run created
    /// (`Batch::on_complete` in `gaffer`): `Engine::handle`
    /// on it gives its handle.
    pub on_complete: Option<String>,
}

/// Named `f64` counters. Serializes as a plain map.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CostReport {
    metrics: BTreeMap<String, f64>,
}

impl CostReport {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `amount` to `metric` (created at `amount`).
    pub fn record(&mut self, metric: &str, amount: f64) {
        *self.metrics.entry(metric.to_string()).or_insert(0.0) += amount;
    }

    /// The value of `metric` (0.0 if never recorded).
    pub fn get(&self, metric: &str) -> f64 {
        self.metrics.get(metric).copied().unwrap_or(0.0)
    }

    /// Add every counter of `other`.
    pub fn merge(&mut self, other: &CostReport) {
        for (k, v) in &other.metrics {
            self.record(k, *v);
        }
    }

    /// Counters in name order.
    pub fn entries(&self) -> impl Iterator<Item = (&str, f64)> {
        self.metrics.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }
}

impl From<BTreeMap<String, f64>> for CostReport {
    fn from(metrics: BTreeMap<String, f64>) -> Self {
        Self { metrics }
    }
}

impl From<CostReport> for BTreeMap<String, f64> {
    fn from(c: CostReport) -> Self {
        c.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_accumulates_and_unknown_metrics_are_zero() {
        let mut c = CostReport::new();
        c.record("tokens", 2.0);
        c.record("tokens", 3.5);
        assert_eq!(c.get("tokens"), 5.5);
        assert_eq!(c.get("nope"), 0.0);
    }

    #[test]
    fn merge_sums_overlapping_and_disjoint_metrics_in_name_order() {
        let mut a = CostReport::new();
        a.record("b", 1.0);
        let mut b = CostReport::new();
        b.record("b", 2.0);
        b.record("a", 4.0);
        a.merge(&b);
        assert_eq!(
            a.entries().collect::<Vec<_>>(),
            vec![("a", 4.0), ("b", 3.0)]
        );
    }

    #[test]
    fn serde_round_trips_through_msgpack_and_clones_are_independent() {
        let mut a = CostReport::new();
        a.record("x", 1.5);
        let bytes = rmp_serde::to_vec_named(&a).unwrap();
        let back: CostReport = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, a);
        let mut c = a.clone();
        c.record("x", 1.0);
        assert_eq!(a.get("x"), 1.5);
        assert!(CostReport::new().is_empty());
    }
}
