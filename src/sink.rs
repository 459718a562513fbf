//! Output sinks: where a batch's item records go, and JSONL helpers.

use std::io::{BufRead, Write};
use std::sync::Mutex;

use ractor::DerivedActorRef;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// [`OutputRecord::status`] of a succeeded item (its `output` is set).
pub const STATUS_SUCCEEDED: &str = "succeeded";
/// [`OutputRecord::status`] of a failed item (its `error` says why).
pub const STATUS_FAILED: &str = "failed";
/// [`OutputRecord::status`] of a cancelled item.
pub const STATUS_CANCELLED: &str = "cancelled";
/// [`OutputRecord::status`] of an item that succeeded but whose output could
/// not be given (it could not be read from the store, or not converted to
/// JSON): its `error` says why, and the run counts it in `sink_errors`. A
/// later run of the batch writes it again.
pub const STATUS_OUTPUT_UNAVAILABLE: &str = "output_unavailable";

/// One item's record in one run of a batch. Every run writes every item
/// (items answered from an earlier run too), so consumers dedupe on `key`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputRecord {
    /// Item key.
    pub key: String,
    /// `"succeeded"` (with its output), `"failed"`, `"cancelled"` or
    /// `"output_unavailable"` (see [`STATUS_OUTPUT_UNAVAILABLE`]).
    pub status: String,
    /// The output as JSON (succeeded items).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub output: Option<serde_json::Value>,
    /// The failure message (failed items), or why a succeeded item's output
    /// could not be given.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

/// Receives item records, in order, on a thread of the batch run's own (a
/// write may block on I/O without holding up the engine); `flush` once when a
/// run completes (not when it is dropped), or when another sink takes over
/// from it ([`Batch::attach`](crate::Batch::attach)).
pub trait OutputSink: Send + Sync + 'static {
    /// One record. An error is counted in the report's `sink_errors`.
    fn write(&self, record: &OutputRecord) -> Result<()>;
    /// Flush buffered records.
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}

/// Discards records (the default).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl OutputSink for NullSink {
    fn write(&self, _record: &OutputRecord) -> Result<()> {
        Ok(())
    }
}

/// Writes one JSON object per line to a writer (wrap files in a `BufWriter`).
#[derive(Debug)]
pub struct JsonlSink<W: Write + Send> {
    // Sink-local I/O state, written from one run's sink thread at a time; the
    // lock only makes the sink `Sync`.
    writer: Mutex<W>,
}

impl<W: Write + Send> JsonlSink<W> {
    /// A sink writing to `writer`.
    pub fn new(writer: W) -> Self {
        Self {
            writer: Mutex::new(writer),
        }
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.writer.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

impl<W: Write + Send + 'static> OutputSink for JsonlSink<W> {
    fn write(&self, record: &OutputRecord) -> Result<()> {
        let mut line = serde_json::to_vec(record).map_err(|e| Error::encode("output record", e))?;
        line.push(b'\n');
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&line).map_err(Error::from)
    }

    fn flush(&self) -> Result<()> {
        self.writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush()
            .map_err(Error::from)
    }
}

/// Forwards each record to a ractor actor as a message.
///
/// A record sent after the actor stopped is a sink error. A service that is
/// its batch's sink and is restarted by its supervisor takes the running
/// batch's sink over with [`Batch::attach`](crate::Batch::attach) (a new
/// `ActorSink` to itself): it gets the records of the items counted from then
/// on, and reads those before from [`Batch::items`](crate::Batch::items).
#[derive(Debug, Clone)]
pub struct ActorSink {
    to: DerivedActorRef<OutputRecord>,
}

impl ActorSink {
    /// Forward to `to` (any actor whose message type converts from `OutputRecord`:
    /// `actor.get_derived()`).
    pub fn new(to: DerivedActorRef<OutputRecord>) -> Self {
        Self { to }
    }
}

impl OutputSink for ActorSink {
    fn write(&self, record: &OutputRecord) -> Result<()> {
        self.to.send_message(record.clone()).map_err(|_| {
            Error::from(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the sink's actor has stopped; a live actor takes the run's sink over with Batch::attach",
            ))
        })
    }
}

/// Read one `T` per line of JSON; blank lines are skipped; a bad line yields an
/// error and reading goes on.
pub fn read_jsonl<T: DeserializeOwned, R: BufRead>(reader: R) -> impl Iterator<Item = Result<T>> {
    reader
        .lines()
        .enumerate()
        .filter_map(|(i, line)| match line {
            Err(e) => Some(Err(Error::from(e))),
            Ok(l) if l.trim().is_empty() => None,
            Ok(l) => Some(serde_json::from_str(&l).map_err(|e| Error::Json {
                line: i + 1,
                reason: e.to_string(),
            })),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_jsonl_decodes_lines_skips_blanks_and_reports_bad_lines() {
        let input = "1\n\n  \n2\nnope\n3\n";
        let got: Vec<Result<u32>> = read_jsonl(input.as_bytes()).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].as_ref().ok(), Some(&1));
        assert_eq!(got[1].as_ref().ok(), Some(&2));
        assert!(matches!(got[2], Err(Error::Json { line: 5, .. })));
        assert_eq!(got[3].as_ref().ok(), Some(&3));
    }

    #[test]
    fn jsonl_sink_writes_one_object_per_line_with_output_only_for_success() {
        let sink = JsonlSink::new(Vec::new());
        sink.write(&OutputRecord {
            key: "a".into(),
            status: "succeeded".into(),
            output: Some(serde_json::json!(42)),
            error: None,
        })
        .unwrap();
        sink.write(&OutputRecord {
            key: "b".into(),
            status: "failed".into(),
            output: None,
            error: Some("boom".into()),
        })
        .unwrap();
        OutputSink::flush(&sink).unwrap();
        let text = String::from_utf8(sink.into_inner()).unwrap();
        assert_eq!(
            text,
            "{\"key\":\"a\",\"status\":\"succeeded\",\"output\":42}\n{\"key\":\"b\",\"status\":\"failed\",\"error\":\"boom\"}\n"
        );
    }
}
