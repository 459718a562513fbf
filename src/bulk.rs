//! A batch's items (a page at a time, outputs typed), its progress and
//! status, and the cost its items record.
//!
//! The files: `pipeline.rs` ([`Pipeline`](crate::Pipeline),
//! [`BulkCtx`](crate::BulkCtx)), `batch.rs` ([`Batch`](crate::Batch)), `items.rs`
//! (a batch's items a page at a time), `report.rs` ([`BulkReport`],
//! [`BatchStatus`], [`ProgressSnapshot`]). Where its outputs go is
//! [`sink`](crate::sink).

pub(crate) mod batch;
pub(crate) mod items;
pub(crate) mod pipeline;
pub(crate) mod report;

pub use gaffer_actors::batches::report::CostReport;
pub use items::{BatchItem, ItemOutcome, ItemPage};
pub use pipeline::ItemError;
pub use report::{BatchStatus, BulkReport, ProgressSnapshot};
