//! Accounting: each settled item counted once, its record handed to the
//! run's sink (or to the sink that took over), progress told.

use std::sync::Arc;

use tracing::warn;

use super::CoordinatorState;
use crate::batches::data::output_of;
use crate::batches::sink_writer::{OwnedRecord, SinkWriter};
use crate::batches::spec::{BatchProgress, RecordSink, SinkAttached};
use crate::layout::records::{ItemMarker, ItemStatus, merge_cost};

impl CoordinatorState {
    /// Count an item and hand its record to the sink. `output` is the
    /// succeeded item's output as read (only read when there is a sink).
    pub(super) async fn record(
        &mut self,
        key: &str,
        marker: &ItemMarker,
        output: Option<std::result::Result<Vec<u8>, String>>,
    ) {
        merge_cost(&mut self.outcome.cost, &marker.cost);
        match marker.status {
            ItemStatus::Succeeded => self.outcome.succeeded += 1,
            ItemStatus::Cancelled => self.outcome.cancelled += 1,
            ItemStatus::Failed => {
                self.outcome.failed += 1;
                self.outcome.failed_keys.push(key.to_string());
            }
        }
        let Some(sink) = &self.sink else {
            return;
        };
        let record = match marker.status {
            ItemStatus::Succeeded => match output {
                Some(Ok(bytes)) => OwnedRecord::Succeeded(bytes),
                Some(Err(e)) => OwnedRecord::OutputUnavailable(e),
                None => OwnedRecord::OutputUnavailable("the item's output was not read".into()),
            },
            ItemStatus::Failed => {
                OwnedRecord::Failed(marker.error.clone().unwrap_or_else(|| "failed".into()))
            }
            ItemStatus::Cancelled => OwnedRecord::Cancelled,
        };
        if let OwnedRecord::OutputUnavailable(e) = &record {
            warn!(batch_id = %self.spec.batch_id, %key, error = %e, "a succeeded item's output could not be read; the sink gets an error record");
        }
        sink.write(key, record).await;
    }

    pub(super) async fn settled(&mut self, key: String, job_id: String, mut marker: ItemMarker) {
        if self.outstanding.get(&key) != Some(&job_id) {
            return;
        }
        self.outstanding.remove(&key);
        let output = if self.sink.is_some() && marker.status == ItemStatus::Succeeded {
            Some(output_of(&self.services, marker.output.take()).await)
        } else {
            None
        };
        self.record(&key, &marker, output).await;
    }

    /// Items counted so far.
    pub(super) fn counted(&self) -> u64 {
        self.outcome.succeeded + self.outcome.failed + self.outcome.cancelled
    }

    /// `sink` takes over the records of the items counted from now on (the
    /// writer switches after the records before). Answers how many items
    /// were counted before it took over: the same sink again (a takeover
    /// asked again) keeps its place.
    pub(super) async fn take_sink(&mut self, sink: Arc<dyn RecordSink>) -> SinkAttached {
        if self
            .spec
            .sink
            .as_ref()
            .is_some_and(|now| Arc::ptr_eq(now, &sink))
        {
            return SinkAttached {
                written: self.before_sink,
            };
        }
        let counted = self.counted();
        if self.finishing {
            // Every item is counted: no record is still to come.
            return SinkAttached { written: counted };
        }
        self.spec.sink = Some(sink.clone());
        self.before_sink = counted;
        match &self.sink {
            Some(writer) => writer.switch(sink).await,
            // Begun without a sink: the writer starts now. (Before `Begin`,
            // the spec's sink is the one it starts with.)
            None if self.head.is_some() => {
                self.sink = Some(SinkWriter::start(sink, self.spec.batch_id.clone()));
            }
            None => {}
        }
        SinkAttached { written: counted }
    }

    /// A debug event in the run's span at each tenth of the items counted.
    pub(super) fn tell_progress(&mut self) {
        let total = self.head.as_ref().map(|h| h.total).unwrap_or(0);
        let done = self.counted();
        let step = (total / 10).max(1);
        let due = done >= self.told + step || (done == total && self.told < total);
        if total == 0 || !due {
            return;
        }
        self.told = done;
        tracing::debug!(
            parent: &self.span,
            done,
            total,
            succeeded = self.outcome.succeeded,
            failed = self.outcome.failed,
            cancelled = self.outcome.cancelled,
            "batch progress"
        );
    }

    pub(super) fn progress(&self) -> BatchProgress {
        BatchProgress {
            total: self.head.as_ref().map(|h| h.total).unwrap_or(0),
            succeeded: self.outcome.succeeded,
            failed: self.outcome.failed,
            cancelled: self.outcome.cancelled,
            elapsed: self.started.elapsed(),
            cost: self.outcome.cost.clone(),
        }
    }
}
