//! Batches, bytes-level: what a run is given and reports (`BatchSpec`,
//! `BatchOutcome`, the sink seam), the checks of ids and keys, the status read
//! from the item markers, and the removal of a batch's data.
//!
//! A run has two phases: the manifest (`manifest`), then the coordinator
//! (`coordinator`), which enqueues the items chunk by chunk, many per
//! transaction, keeping at most a window of items outstanding, and counts their
//! settlements as they are pushed to it. `driver` runs both.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::RpcReplyPort;

use crate::error::{EngineError, Result};
use crate::layout::records::Cost;

/// One item's record, as a sink receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemRecord<'a> {
    /// The item succeeded with this encoded output.
    Succeeded {
        /// The encoded output.
        output: &'a [u8],
    },
    /// The item failed.
    Failed {
        /// Why.
        error: &'a str,
    },
    /// The item was cancelled.
    Cancelled,
    /// The item succeeded but its output could not be read (its blob is
    /// missing or the store failed): counted in
    /// [`BatchOutcome::sink_errors`] and named in
    /// [`BatchOutcome::sink_error_keys`]. A later run reads it again.
    OutputUnavailable {
        /// Why it could not be read.
        error: &'a str,
    },
}

/// What a [`RecordSink`] failed with: any error (its `Display` is logged and
/// reported).
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// Receives one record per item per run, in order, on a thread of the run's
/// own (writes may block: a slow disk holds up only the sink, never the
/// engine).
pub trait RecordSink: Send + Sync + 'static {
    /// One item's record. An `Err` is counted in
    /// [`BatchOutcome::sink_errors`], the key named in
    /// [`BatchOutcome::sink_error_keys`], and logged; the run goes on.
    fn write(&self, key: &str, record: ItemRecord<'_>) -> std::result::Result<(), SinkError>;
    /// Called once when the run completes, after its last record. An `Err`
    /// fails the run with [`EngineError::SinkFailed`]. A sink another sink
    /// took over from (`EngineMessage::AttachBatch`) is flushed after its
    /// last record instead; an `Err` then is only logged.
    fn flush(&self) -> std::result::Result<(), SinkError> {
        Ok(())
    }
}

/// How to run a batch.
#[derive(Clone)]
pub struct BatchSpec {
    /// Batch id.
    pub batch_id: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Headers stored on every item (no `gaffer.` prefix).
    pub headers: HashMap<String, String>,
    /// Where item records go.
    pub sink: Option<Arc<dyn RecordSink>>,
    /// Remove the batch this long after it completes.
    pub retention: Option<Duration>,
    /// Items outstanding (enqueued, not yet settled) at most.
    pub window: usize,
    /// Items enqueued per second at most (`None`: as fast as the window
    /// allows). The store's memory follows how fast the engine writes (see
    /// benches/README.md, "Memory"), so a pace is a memory budget.
    pub max_rate: Option<u32>,
    /// The span the run's `gaffer.batch` span is a child of: the caller's
    /// (`Span::current()` where the run was asked for, if this is
    /// `Span::none()`).
    pub parent: tracing::Span,
    /// A job to create when this run completes (every item counted), in the
    /// run's final transaction, once per run: its run id is
    /// [`crate::layout::keys::completion_run_id`] of the
    /// batch and the run's generation. Not stored: each run or resume sets
    /// its own.
    pub on_complete: Option<crate::jobs::request::SubmitRequest>,
}

impl std::fmt::Debug for BatchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchSpec")
            .field("batch_id", &self.batch_id)
            .field("pipeline", &self.pipeline)
            .field("window", &self.window)
            .field("max_rate", &self.max_rate)
            .finish_non_exhaustive()
    }
}

/// What a completed run counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchOutcome {
    /// Items in the manifest.
    pub total: u64,
    /// Succeeded (in this run or answered from an earlier run's marker).
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Cost rollup.
    pub cost: Cost,
    /// Keys of failed items, in completion order.
    pub failed_keys: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Item records the sink rejected, or could not be given as they are
    /// (an output that could not be read).
    pub sink_errors: u64,
    /// Keys of those items, in order.
    pub sink_error_keys: Vec<String>,
    /// The run id of the completion job this run created
    /// ([`BatchSpec::on_complete`]).
    pub on_complete: Option<String>,
}

/// The message an actor that ran a batch by `RunBatchAndTell`, or watches it
/// by `WatchBatch`, receives when the run ends.
#[derive(Debug, Clone)]
pub struct BatchFinished {
    /// The batch.
    pub batch_id: String,
    /// Its outcome, or why the run failed.
    pub result: std::result::Result<BatchOutcome, EngineError>,
}

/// What [`crate::EngineMessage::AttachBatch`] carries: a sink to take over
/// the item records still to come of the run of `batch_id` in progress here,
/// and an actor to tell when the run ends (as `WatchBatch` does).
pub struct SinkTakeover {
    /// The batch.
    pub batch_id: String,
    /// The sink that gets the run's records from the switch on.
    pub sink: Arc<dyn RecordSink>,
    /// Told (a [`BatchFinished`] message) when the run ends.
    pub to: ractor::DerivedActorRef<BatchFinished>,
}

impl std::fmt::Debug for SinkTakeover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkTakeover")
            .field("batch_id", &self.batch_id)
            .field("to", &self.to)
            .finish_non_exhaustive()
    }
}

/// The answer to a sink's takeover of a running batch
/// ([`crate::EngineMessage::AttachBatch`]): where the switch fell.
///
/// The run's coordinator counts each item once and hands its record to the
/// run's sink as it counts it. The first `written` items it counted had their
/// records given to the sink the run had before (or to none); every item it
/// counts from then on goes to the new sink. So each item of the run reaches
/// exactly one of the two, and the new sink's owner reads the first part with
/// the batch's item listing (`Batch::items` in `gaffer`): once the run ended,
/// the items listed whose keys the new sink did not get are exactly those
/// `written`. (If the run's coordinator is replaced after the switch, the
/// replacement gives every item's record to the new sink again: dedupe on
/// key, as for every re-run.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkAttached {
    /// Items the run counted before the switch (their records went to the
    /// earlier sink).
    pub written: u64,
}

/// A running batch's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchProgress {
    /// Items in the manifest (so far, while the manifest is written).
    pub total: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Since the run started.
    pub elapsed: Duration,
    /// Cost rollup.
    pub cost: Cost,
}

/// A reply port for batch results (re-exported for the protocol).
pub(crate) type BatchReply = RpcReplyPort<Result<BatchOutcome>>;
