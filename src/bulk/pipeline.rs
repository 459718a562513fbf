//! Bulk pipelines: the same work applied to every item of a batch.

use std::collections::HashMap;
use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use taquba::LeaseHandle;
use tokio_util::sync::CancellationToken;

use gaffer_actors::exec::effects::Effects;
use gaffer_actors::{Delivery, FailureKind};

use crate::error::Error;
use crate::job::context::Memo;
use gaffer_actors::batches::report::CostReport;

/// Why an item failed: transient errors retry (queue backoff, queue attempt
/// limit), permanent ones fail the item now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ItemError {
    /// Retry or not.
    pub kind: FailureKind,
    /// Why.
    pub message: String,
}

impl ItemError {
    /// A transient failure.
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::Transient,
            message: message.into(),
        }
    }

    /// A permanent failure.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            kind: FailureKind::Permanent,
            message: message.into(),
        }
    }
}

impl From<Error> for ItemError {
    fn from(e: Error) -> Self {
        let kind = if e.is_permanent() {
            FailureKind::Permanent
        } else {
            FailureKind::Transient
        };
        Self {
            kind,
            message: e.to_string(),
        }
    }
}

/// A bulk pipeline. Registered on the engine (`EngineBuilder::pipeline`);
/// batches of its inputs run on the bulk queue, apart from jobs.
pub trait Pipeline: Send + Sync + 'static {
    /// Stable, unique name: routes a batch's items to this pipeline.
    const NAME: &'static str;
    /// One item's input.
    type Input: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// One item's output (recorded in its marker; streamed to the sink as JSON).
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// What an item fails with.
    type Error: Into<ItemError> + Send + 'static;

    /// Process one item. Runs at least once per item: make it idempotent, and
    /// wrap expensive phases in the memo.
    fn run(
        &self,
        ctx: &BulkCtx<Self::Input>,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
}

/// The context of one item: its input and identity, cost recording, memo,
/// lease, cancel token, effects and KV reads.
#[derive(Debug)]
pub struct BulkCtx<T> {
    /// The item's input.
    pub input: T,
    /// The batch id.
    pub batch_id: String,
    /// The item key.
    pub key: String,
    /// The item's run id: hex SHA-256 of `{batch_id}/{key}`.
    pub run_id: String,
    /// The batch's headers.
    pub headers: HashMap<String, String>,
    pub(crate) delivery: Delivery,
}

impl<T> BulkCtx<T> {
    /// This delivery's attempt, 1-based.
    pub fn attempt(&self) -> u32 {
        self.delivery.attempt
    }

    /// The item's memo: results kept across its retries and re-runs.
    pub fn memo(&self) -> Memo {
        Memo::from_inner(self.delivery.memo.clone())
    }

    /// Add `amount` to the item's `metric` (this attempt's cost; kept in its
    /// marker when the attempt settles the item, success or final failure).
    pub fn record_cost(&self, metric: &str, amount: f64) {
        self.delivery.cost.record(metric, amount);
    }

    /// The cost recorded so far by this attempt.
    pub fn cost(&self) -> CostReport {
        self.delivery.cost.snapshot().into()
    }

    /// Fires when the item is cancelled (or the store closes).
    pub fn cancel_token(&self) -> &CancellationToken {
        &self.delivery.cancel
    }

    /// The lease of this delivery.
    pub fn lease(&self) -> &LeaseHandle {
        &self.delivery.lease
    }

    /// KV writes applied with the item's successful settlement only.
    pub fn effects(&self) -> &Effects {
        &self.delivery.effects
    }

    /// A committed value of the queue's KV namespace.
    pub async fn kv_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ItemError> {
        self.delivery
            .engine
            .kv_get(key.to_vec())
            .await
            .map_err(ItemError::from)
    }

    /// Memoize `f`'s `(value, cost)` under `key`; the cost is added to this
    /// item's cost both when computed and when answered from the memo.
    pub async fn memoized_with_cached_cost<R, E, F, Fut>(&self, key: &str, f: F) -> Result<R, E>
    where
        R: Serialize + DeserializeOwned,
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(R, CostReport), E>>,
    {
        let (value, cost): (R, CostReport) = self.memo().memoized(key, f).await?;
        for (metric, amount) in cost.entries() {
            self.record_cost(metric, amount);
        }
        Ok(value)
    }

    /// [`memoized_with_cached_cost`](Self::memoized_with_cached_cost) under the
    /// content key of `input`.
    pub async fn memoized_by_content_with_cached_cost<I, R, E, F, Fut>(
        &self,
        input: &I,
        f: F,
    ) -> Result<R, E>
    where
        I: Serialize,
        R: Serialize + DeserializeOwned,
        E: From<Error>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(R, CostReport), E>>,
    {
        let key = Memo::content_key(input)?;
        self.memoized_with_cached_cost(&key, f).await
    }
}
