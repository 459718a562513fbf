//! A batch's settled items, listed a page at a time from their records
//! ([`Batch::items`](crate::Batch::items)).

use gaffer_actors::batches::report::CostReport;

/// How a settled item of a batch ended, as its record says.
#[derive(Debug, Clone, PartialEq)]
pub enum ItemOutcome<O> {
    /// The pipeline returned this output.
    Succeeded(O),
    /// The item failed for good; the pipeline's (or the engine's) message.
    Failed(String),
    /// The item's job was cancelled.
    Cancelled,
    /// The item succeeded but its recorded output cannot be had: its blob
    /// could not be read, or it no longer decodes as the pipeline's output
    /// type. Why.
    OutputUnavailable(String),
}

impl<O> ItemOutcome<O> {
    /// Whether the item succeeded (even if its output is unavailable).
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Succeeded(_) | Self::OutputUnavailable(_))
    }
}

/// One settled item of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchItem<O> {
    /// The item's key.
    pub key: String,
    /// How it ended.
    pub outcome: ItemOutcome<O>,
    /// What the attempt that settled it recorded (`BulkCtx::record_cost`).
    pub cost: CostReport,
}

/// A page of a batch's settled items, in key order (byte order of the keys).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemPage<O> {
    /// The items of this page.
    pub items: Vec<BatchItem<O>>,
    /// Pass this as `after` to read the next page; `None` once this page
    /// reached the last item.
    pub next: Option<String>,
}
