//! `CostReport`: named counters an item records (tokens, API calls, cents …).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
