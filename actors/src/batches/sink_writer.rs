//! The writer of a batch run's sink: a thread of its own, fed the run's item
//! records in order through a bounded channel (the coordinator waits when it
//! is full), flushed once at the end. A slow sink holds up only this thread,
//! never the runtime's async workers. A sink that takes over the run's
//! records is switched to in order: the records sent before the switch go to
//! the sink before, which is then flushed; those after to the new one.

use std::sync::Arc;

use tracing::warn;

use crate::batches::spec::{ItemRecord, RecordSink};

/// An item's record, owned, on its way to the sink's thread.
#[derive(Debug)]
pub(crate) enum OwnedRecord {
    Succeeded(Vec<u8>),
    Failed(String),
    Cancelled,
    OutputUnavailable(String),
}

impl OwnedRecord {
    fn as_record(&self) -> ItemRecord<'_> {
        match self {
            Self::Succeeded(output) => ItemRecord::Succeeded { output },
            Self::Failed(error) => ItemRecord::Failed { error },
            Self::Cancelled => ItemRecord::Cancelled,
            Self::OutputUnavailable(error) => ItemRecord::OutputUnavailable { error },
        }
    }
}

enum SinkOp {
    Write(String, OwnedRecord),
    Switch(Arc<dyn RecordSink>),
    Flush(tokio::sync::oneshot::Sender<SinkReport>),
}

/// What the sink's thread reports when the run's records are flushed.
#[derive(Debug)]
pub(crate) struct SinkReport {
    pub(crate) errors: u64,
    pub(crate) error_keys: Vec<String>,
    pub(crate) flushed: std::result::Result<(), String>,
}

/// Records in flight to a sink's thread, at most (then the coordinator waits).
const SINK_BUFFER: usize = 1024;

/// The writer of one run's sink: a thread fed in order.
pub(crate) struct SinkWriter {
    tx: tokio::sync::mpsc::Sender<SinkOp>,
}

impl SinkWriter {
    pub(crate) fn start(sink: Arc<dyn RecordSink>, batch_id: String) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<SinkOp>(SINK_BUFFER);
        // A thread of its own, not the runtime's blocking pool: it lives for
        // the whole run, mostly waiting for records.
        let name = format!("gaffer-sink-{batch_id}");
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let mut sink = sink;
            let mut report = SinkReport {
                errors: 0,
                error_keys: Vec::new(),
                flushed: Ok(()),
            };
            while let Some(op) = rx.blocking_recv() {
                match op {
                    SinkOp::Write(key, record) => {
                        let written = sink.write(&key, record.as_record());
                        if let Err(e) = &written {
                            warn!(%batch_id, %key, error = %e, "the sink rejected an item record");
                        }
                        if written.is_err() || matches!(record, OwnedRecord::OutputUnavailable(_)) {
                            report.errors += 1;
                            report.error_keys.push(key);
                        }
                    }
                    SinkOp::Switch(next) => {
                        // The sink before got its last record.
                        if let Err(e) = sink.flush() {
                            warn!(%batch_id, error = %e, "flushing the sink taken over failed");
                        }
                        sink = next;
                    }
                    SinkOp::Flush(done) => {
                        report.flushed = sink.flush().map_err(|e| e.to_string());
                        let _ = done.send(report);
                        return;
                    }
                }
            }
            // The run stopped without finishing: no flush.
        });
        if let Err(e) = spawned {
            // The receiver was dropped with the closure: the flush reports it.
            warn!(error = %e, "the sink's writer thread could not start");
        }
        Self { tx }
    }

    pub(crate) async fn write(&self, key: &str, record: OwnedRecord) {
        // A closed channel means the thread is gone (the sink panicked): the
        // flush reports it.
        let _ = self.tx.send(SinkOp::Write(key.to_string(), record)).await;
    }

    /// Give the records sent from now on to `sink` (the one before is flushed
    /// after the records sent before).
    pub(crate) async fn switch(&self, sink: Arc<dyn RecordSink>) {
        // A closed channel: the thread is gone, and the flush reports it.
        let _ = self.tx.send(SinkOp::Switch(sink)).await;
    }

    /// Flush after the last record; the report arrives on the receiver.
    pub(crate) async fn flush(self) -> SinkReport {
        let (done, report) = tokio::sync::oneshot::channel();
        if self.tx.send(SinkOp::Flush(done)).await.is_err() {
            return sink_gone();
        }
        report.await.unwrap_or_else(|_| sink_gone())
    }
}

impl SinkReport {
    /// A flush that ended without its report (its task panicked).
    pub(crate) fn failed(why: String) -> Self {
        SinkReport {
            errors: 0,
            error_keys: Vec::new(),
            flushed: Err(why),
        }
    }
}

fn sink_gone() -> SinkReport {
    SinkReport {
        errors: 0,
        error_keys: Vec::new(),
        flushed: Err(
            "the sink's writer thread stopped (it could not start, or the sink panicked)".into(),
        ),
    }
}
