//! Durable records and their encoding (MessagePack with field names).
//!
//! Records are self-contained so a reader (an inspector, another process with a
//! `QueueReader`) can decode them without the actor tree.

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::keys;

/// How a failure is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureKind {
    /// Worth retrying: retried with backoff while attempts remain.
    Transient,
    /// Retrying cannot help: the job is dead-lettered on this attempt.
    Permanent,
}

/// The active-run record at `gaffer/v1/runs/{run_id}`. Exists exactly while the
/// run's queue job is pending, scheduled or claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The taquba job id currently carrying this run.
    pub job_id: String,
    /// Job type name.
    pub job_type: String,
    /// SHA-256 of type name + payload: equal iff the same job was submitted.
    #[serde(with = "serde_bytes_array")]
    pub input_hash: [u8; 32],
    /// Submission time, queue clock, epoch ms.
    pub submitted_at_ms: u64,
    /// The run's claims on its earlier queue jobs, oldest first: a job put
    /// back on its queue (a retry, a claim given back) is a new queue job
    /// under the same id, and the queue forgets the old one's history, so
    /// the transaction that puts it back writes them here; its outcome
    /// record's `history` starts with them. Empty until then (and in
    /// records written before this field existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub past: Vec<PastAttempt>,
    /// The signal the run waits for, or last waited for: set by the
    /// transaction that puts the job back to wait, kept (its deadline with
    /// it) until the run waits again or ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitRecord>,
    /// The workflow step this run is, if it is one: its settlement goes
    /// through the workflow's gate (see `workflows`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<StepOf>,
    /// The job's tags (`SubmitOptions::tags`), left out when it has none;
    /// its index entries are at [`Tags::keys`](crate::tags::Tags::keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<crate::tags::Tags>,
    /// The run's latest durable sleep (`JobContext::sleep`): set by the
    /// transaction that puts the job back to sleep, kept until the run
    /// sleeps again or ends. Sleeps are counted in the order the run makes
    /// them, so a run started again after it answers every earlier sleep
    /// at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep: Option<SleepRecord>,
    /// How many times the run snoozed (`JobContext::snooze`): each snooze
    /// puts the job back after its delay without spending an attempt, and
    /// adds one here in the same transaction.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub snoozes: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Which step of which workflow a run is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepOf {
    /// The workflow's id.
    pub workflow: String,
    /// The step's name.
    pub step: String,
}

mod pauses;
pub use pauses::{DebounceRecord, SleepRecord, WaitRecord};
mod shard;
pub use shard::ShardOwnerRecord;

impl RunRecord {
    /// The run's earlier claims: those this record keeps (its earlier queue
    /// jobs'), then `own`, the claims of its current queue job as the
    /// queue's attempt history gives them, numbered on from them.
    pub fn claims_with(&self, own: Vec<PastAttempt>) -> Vec<PastAttempt> {
        if self.past.is_empty() {
            return own;
        }
        let offset = self.past.last().map_or(0, |a| a.claim);
        let mut all = self.past.clone();
        all.extend(own.into_iter().map(|mut a| {
            a.claim = a.claim.saturating_add(offset);
            a
        }));
        all
    }
}

/// Where a success output lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputRef {
    /// The encoded output, inline.
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The encoded output was over the KV cap: it lives at this object path.
    Blob(String),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The job returned an output.
    Succeeded(OutputRef),
    /// The job failed for good (permanent error, attempts exhausted, lease lost on
    /// the last attempt, unknown type, malformed payload).
    Failed {
        /// Classification of the failure.
        kind: FailureKind,
        /// Human-readable reason.
        message: String,
    },
    /// The job was cancelled before it finished.
    Cancelled,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for its `run_at`, or for a retry's backoff.
    Scheduled,
    /// Waiting for a signal (`JobContext::wait_signal`), or its timeout:
    /// it holds no worker meanwhile.
    Waiting,
    /// Waiting to be claimed.
    Queued,
    /// Claimed by a handler.
    Running,
    /// Finished with an output.
    Succeeded,
    /// Finished with a failure.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl JobState {
    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// The state a recorded outcome ends a job in.
    pub fn of(outcome: &Outcome) -> Self {
        match outcome {
            Outcome::Succeeded(_) => Self::Succeeded,
            Outcome::Failed { .. } => Self::Failed,
            Outcome::Cancelled => Self::Cancelled,
        }
    }
}

/// The outcome record at `gaffer/v1/outcomes/{run_id}`, committed in the same
/// transaction as the settlement that ended the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeRecord {
    /// The job id of the run's last delivery.
    pub job_id: String,
    /// Job type name.
    pub job_type: String,
    /// Input hash of the run (see [`RunRecord::input_hash`]).
    #[serde(with = "serde_bytes_array")]
    pub input_hash: [u8; 32],
    /// Attempts used.
    pub attempts: u32,
    /// When the run ended, queue clock, epoch ms.
    pub finished_at_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The claims before the last one, oldest first: each failed attempt, and
    /// each claim interrupted by a process exit or given back. Empty for a
    /// job that ended on its first claim (and in records written before this
    /// field existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<PastAttempt>,
    /// The run ids of the follow-up jobs its success created
    /// (`JobContext::then`), in the order they were staged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub followups: Vec<String>,
    /// Why it ended so, when gaffer knows more than the outcome says: a
    /// workflow step cancelled because a step it needs failed names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The job's tags, from its run record: the retention pass removes
    /// their index entries with this record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<crate::tags::Tags>,
}

impl OutcomeRecord {
    /// Its entry in the finished-jobs index (see [`keys::ENDED_ROOT`]).
    pub fn ended_key(&self, run_id: &str) -> Vec<u8> {
        let state = match self.outcome {
            Outcome::Succeeded(_) => keys::ENDED_SUCCEEDED,
            Outcome::Failed { .. } => keys::ENDED_FAILED,
            Outcome::Cancelled => keys::ENDED_CANCELLED,
        };
        keys::ended_key(&self.job_type, state, self.finished_at_ms, run_id)
    }
}

/// One earlier claim of a job, as its outcome record keeps it (the queue
/// forgets the claims of a job once it is acknowledged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PastAttempt {
    /// The queue's claim count at that claim (1-based; it counts
    /// interruptions and releases, which gaffer's attempt count does not).
    pub claim: u32,
    /// When it was claimed, epoch ms, if known.
    pub claimed_at_ms: Option<u64>,
    /// When it ended, epoch ms.
    pub ended_at_ms: u64,
    /// How it ended: `failed`, `lease-expired`, `interrupted`, `released`,
    /// `revived`, ….
    pub how: String,
    /// Its error, if it had one.
    pub error: Option<String>,
}

impl PastAttempt {
    /// The entries of a job's attempt history as an outcome record keeps them.
    pub fn from_history(history: &[taquba::JobAttempt]) -> Vec<Self> {
        use taquba::AttemptOutcome as A;
        history
            .iter()
            .map(|a| {
                let released = a
                    .error
                    .as_deref()
                    .is_some_and(|e| e.starts_with(keys::RELEASED_PREFIX));
                let how = match a.outcome {
                    A::Retried if released => "released",
                    A::Retried => "failed",
                    A::LeaseExpired => "lease-expired",
                    A::Interrupted => "interrupted",
                    A::Requeued => "revived",
                    A::Completed => "completed",
                    A::DeadLettered => "dead-lettered",
                };
                Self {
                    claim: a.attempt,
                    claimed_at_ms: a.claimed_at,
                    ended_at_ms: a.recorded_at,
                    how: how.to_string(),
                    error: a.error.clone(),
                }
            })
            .collect()
    }
}

/// The engine's snapshot of its queues' counters at `gaffer/v1/stats`
/// (taquba's `QueueStats` of every queue, as its writer saw them at
/// `at_ms`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// When the counters were read, queue clock, epoch ms.
    pub at_ms: u64,
    /// Each queue's counters, in name order.
    pub queues: Vec<QueueCounts>,
}

/// One queue's counters in a [`StatsSnapshot`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueCounts {
    /// The queue.
    pub queue: String,
    /// Waiting to be claimed.
    pub pending: i64,
    /// Claimed (running).
    pub claimed: i64,
    /// Waiting for their time.
    pub scheduled: i64,
    /// Acknowledged so far (each retry's acknowledgement included).
    pub done: i64,
    /// In the dead-letter set.
    pub dead: i64,
}

impl From<taquba::QueueStats> for QueueCounts {
    fn from(s: taquba::QueueStats) -> Self {
        Self {
            queue: s.queue,
            pending: s.pending,
            claimed: s.claimed,
            scheduled: s.scheduled,
            done: s.done,
            dead: s.dead,
        }
    }
}

/// Encode a record. An encoding failure is an error at the write: an empty
/// or partial value never reaches the store.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    rmp_serde::to_vec_named(value).map_err(|e| EngineError::RecordEncoding {
        record: std::any::type_name::<T>()
            .rsplit("::")
            .next()
            .unwrap_or("record")
            .to_string(),
        reason: crate::error::cause(e),
    })
}

/// How deep a decode of stored bytes follows nested arrays and maps
/// (MessagePack's containers, counted by rmp-serde; the limit of
/// serde_json's own parser): a value nested deeper is refused. rmp-serde's
/// own limit (1024 levels) is deeper than a thread's stack: 1 KiB of
/// nested arrays in an unknown field of a record overflowed a 2 MiB
/// stack (a tokio worker's) in a debug build, which aborts the process.
pub const MAX_NESTING: usize = 128;

/// Decode MessagePack bytes someone else may have written (a record, a
/// client's request, a job's payload or output, a signal, a memo entry)
/// as a `T`: `rmp_serde::from_slice` with nesting bounded by
/// [`MAX_NESTING`]. Every decode of stored bytes goes through it.
pub fn from_msgpack<'a, T: Deserialize<'a>>(
    bytes: &'a [u8],
) -> std::result::Result<T, rmp_serde::decode::Error> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    de.set_max_depth(MAX_NESTING);
    T::deserialize(&mut de)
}

/// Decode a record read at `key`.
pub fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], bytes: &[u8]) -> Result<T> {
    from_msgpack(bytes).map_err(|e| EngineError::CorruptRecord {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: crate::error::cause(e),
    })
}

mod serde_bytes_array {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let v: serde_bytes::ByteBuf = Deserialize::deserialize(d)?;
        v.as_ref()
            .try_into()
            .map_err(|_| serde::de::Error::invalid_length(v.len(), &"32 bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_records_round_trip() {
        let rec = OutcomeRecord {
            job_id: "j".into(),
            job_type: "t".into(),
            input_hash: [7; 32],
            attempts: 2,
            finished_at_ms: 9,
            outcome: Outcome::Failed {
                kind: FailureKind::Permanent,
                message: "no".into(),
            },
            history: Vec::new(),
            followups: vec!["f".into()],
            reason: None,
            tags: None,
        };
        let bytes = encode(&rec).unwrap();
        let back: OutcomeRecord = decode(b"k", &bytes).unwrap();
        assert_eq!(back, rec);
    }

    /// A value whose serialization fails.
    struct Unencodable;

    impl Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, _s: S) -> std::result::Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("refuses to encode"))
        }
    }

    #[test]
    fn an_encoding_failure_is_an_error_never_an_empty_value() {
        let err = encode(&Unencodable).unwrap_err();
        assert!(
            matches!(&err, EngineError::RecordEncoding { record, reason }
                if record == "Unencodable" && reason.to_string().contains("refuses to encode")),
            "{err}"
        );
        // The encoder's error is kept as the typed cause.
        assert!(
            std::error::Error::source(&err)
                .is_some_and(|s| s.to_string().contains("refuses to encode"))
        );
    }

    #[test]
    fn item_markers_leave_out_empty_fields_and_read_markers_written_with_them() {
        let marker = ItemMarker {
            status: ItemStatus::Succeeded,
            error: None,
            cost: Cost::new(),
            output: Some(OutputRef::Inline(vec![1, 2])),
            job_id: "01J".into(),
        };
        let bytes = encode(&marker).unwrap();
        let back: ItemMarker = decode(b"k", &bytes).unwrap();
        assert_eq!(back, marker);
        // The form written before the empty fields were left out.
        #[derive(Serialize)]
        struct Full<'a> {
            status: ItemStatus,
            error: Option<String>,
            cost: &'a Cost,
            output: Option<OutputRef>,
            job_id: &'a str,
        }
        let full = rmp_serde::to_vec_named(&Full {
            status: ItemStatus::Succeeded,
            error: None,
            cost: &Cost::new(),
            output: Some(OutputRef::Inline(vec![1, 2])),
            job_id: "01J",
        })
        .unwrap();
        assert!(bytes.len() < full.len());
        assert_eq!(decode::<ItemMarker>(b"k", &full).unwrap(), marker);
    }

    /// Found writing `tests/hostile_bytes.rs` (its nesting mutations
    /// reach it): a record holding a field this build does not know,
    /// nested 1000 arrays deep (1 KiB), overflowed a 2 MiB thread stack in
    /// a debug build (rmp-serde follows 1024 levels), aborting the process
    /// that read it.
    #[test]
    fn nesting_past_the_limit_is_refused_not_followed_down_the_stack() {
        let record = |depth: usize| {
            // {"x": [[[…nil…]]], "job_type": "t"}: a step record with an
            // unknown field.
            let mut b = vec![0x82, 0xa1, b'x'];
            b.extend(std::iter::repeat_n(0x91, depth));
            b.push(0xc0);
            b.push(0xa8);
            b.extend_from_slice(b"job_type");
            b.extend_from_slice(&[0xa1, b't']);
            b
        };
        let decode = move |depth: usize| {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn(move || {
                    decode::<crate::workflow::StepRecord>(b"k", &record(depth)).map(|r| r.job_type)
                })
                .unwrap()
                .join()
                .unwrap()
        };
        assert_eq!(decode(MAX_NESTING - 2).unwrap(), "t");
        for depth in [MAX_NESTING, 1000, 1023, 5000] {
            let err = decode(depth).unwrap_err();
            assert!(
                matches!(&err, EngineError::CorruptRecord { reason, .. } if reason.to_string().contains("depth")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_corrupt_record_is_a_typed_error() {
        let err = decode::<RunRecord>(b"gaffer/v1/runs/x", b"\xc1garbage").unwrap_err();
        assert!(matches!(err, EngineError::CorruptRecord { .. }), "{err}");
    }
}

/// The record of a periodic job at `gaffer/v1/periodic/{name}`: its
/// schedule as last registered and where its ticks stand. Created when an
/// engine first schedules the job; rewritten (with a compare on its bytes)
/// in the transaction that enqueues each tick's job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeriodicRecord {
    /// The periodic job's name.
    pub name: String,
    /// The job type its ticks submit.
    pub job_type: String,
    /// Its schedule.
    pub schedule: crate::schedule::ScheduleSpec,
    /// Its policy for missed ticks.
    pub missed: crate::schedule::Missed,
    /// Every tick at or before this time (epoch ms, queue clock) is handled:
    /// fired, or dropped by the policy. At creation: the time it was first
    /// scheduled.
    pub cursor_ms: u64,
    /// The last tick fired (epoch ms).
    pub last_fired_ms: Option<u64>,
    /// The job id (run id) of the last tick fired.
    pub last_run_id: Option<String>,
    /// Ticks fired so far.
    pub fired: u64,
    /// When it was first scheduled (epoch ms, queue clock).
    pub created_at_ms: u64,
}

/// Cost counters by metric name (sums of `record_cost` amounts).
pub type Cost = std::collections::BTreeMap<String, f64>;

/// Add `other` into `into`.
pub fn merge_cost(into: &mut Cost, other: &Cost) {
    for (k, v) in other {
        *into.entry(k.clone()).or_insert(0.0) += v;
    }
}

/// The head of a batch at `gaffer/v1/batches/{batch_id}/head`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchHead {
    /// Pipeline name.
    pub pipeline: String,
    /// Whether every manifest chunk is written (`total`, `chunks`, `digest` final).
    pub complete: bool,
    /// Items in the manifest.
    pub total: u64,
    /// Manifest chunks.
    pub chunks: u32,
    /// SHA-256 over every (key, input) of the manifest, in order.
    #[serde(with = "serde_bytes_array")]
    pub digest: [u8; 32],
    /// Bumped by every run or resume: a retention entry of an earlier run
    /// compares the head and so never removes a batch that ran again.
    pub generation: u64,
    /// Headers stored on every item.
    pub headers: std::collections::HashMap<String, String>,
}

/// One manifest chunk at `gaffer/v1/batches/{batch_id}/manifest/{index:08}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestChunk {
    /// `(key, encoded input)` in input order.
    pub items: Vec<ManifestItem>,
}

/// One item of a manifest chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestItem {
    /// Item key.
    pub key: String,
    /// Encoded input.
    #[serde(with = "serde_bytes")]
    pub input: Vec<u8>,
}

/// Status of a settled item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ItemStatus {
    /// The pipeline returned an output.
    Succeeded,
    /// The item failed for good.
    Failed,
    /// The item's job was cancelled.
    Cancelled,
}

/// The marker of a settled item at `gaffer/v1/batches/{batch_id}/items/{key}`,
/// committed with the item's terminal settlement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemMarker {
    /// How the item ended.
    pub status: ItemStatus,
    /// The failure message (failed items). Not written when absent (one
    /// marker per item is kept for the batch's life).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Cost recorded by the attempt that settled the item (not written when
    /// empty).
    #[serde(default, skip_serializing_if = "Cost::is_empty")]
    pub cost: Cost,
    /// The output (succeeded items; not written when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputRef>,
    /// Job id of the delivery that settled it.
    pub job_id: String,
}

/// Sealing the user-supplied fields of records (see [`sealed`](crate::sealed)):
/// `sealed` gives the record as it is stored, `opened` as the engine uses
/// it. Ids, types, states, hashes, times and gaffer's own texts stay
/// readable. A text already sealed is kept as it is (errors read back from
/// the queue's attempt history were sealed on their way in).
mod sealing {
    use super::*;
    use crate::sealed::{Keyring, SealError, text_sealed_under};

    /// A text sealed under `k`'s newest key: as it is when it already is,
    /// else sealed (a plain one) or sealed again (one under an older key:
    /// a record rewritten is rewritten under the newest key). One this
    /// keyring cannot open stays as it is.
    fn seal_text(k: &Keyring, text: &str) -> Result<String, SealError> {
        match text_sealed_under(text) {
            Some(id) if Some(id.as_str()) == k.newest_id() => Ok(text.to_string()),
            Some(_) => match k.renew_text(text) {
                Ok(Some(resealed)) => Ok(resealed),
                Ok(None) | Err(SealError::UnknownKey { .. }) => Ok(text.to_string()),
                Err(e) => Err(e),
            },
            None => k.seal_text(text),
        }
    }

    /// Whether `stored` is sealed under `newest`.
    fn under(stored: &[u8], newest: &str) -> bool {
        crate::sealed::sealed_under(stored) == Some(newest)
    }

    /// Whether the text `stored` is sealed under `newest`.
    fn text_under(stored: &str, newest: &str) -> bool {
        text_sealed_under(stored).as_deref() == Some(newest)
    }

    fn output_under(output: &OutputRef, newest: &str) -> bool {
        match output {
            OutputRef::Inline(bytes) => under(bytes, newest),
            // Its object is renewed on its own.
            OutputRef::Blob(_) => true,
        }
    }

    fn past_under(past: &[PastAttempt], newest: &str) -> bool {
        past.iter()
            .all(|a| a.error.as_deref().is_none_or(|e| text_under(e, newest)))
    }

    impl OutcomeRecord {
        /// Whether every value it seals is sealed under `newest` (a rekey
        /// rewrites it otherwise).
        pub fn all_under(&self, newest: &str) -> bool {
            let outcome = match &self.outcome {
                Outcome::Succeeded(out) => output_under(out, newest),
                Outcome::Failed { message, .. } => text_under(message, newest),
                Outcome::Cancelled => true,
            };
            outcome && past_under(&self.history, newest)
        }
    }

    impl RunRecord {
        /// Whether every value it seals is sealed under `newest`.
        pub fn all_under(&self, newest: &str) -> bool {
            past_under(&self.past, newest)
        }
    }

    impl ItemMarker {
        /// Whether every value it seals is sealed under `newest`.
        pub fn all_under(&self, newest: &str) -> bool {
            self.error.as_deref().is_none_or(|e| text_under(e, newest))
                && self.output.as_ref().is_none_or(|o| output_under(o, newest))
        }
    }

    impl ManifestChunk {
        /// Whether every input is sealed under `newest`.
        pub fn all_under(&self, newest: &str) -> bool {
            self.items.iter().all(|i| under(&i.input, newest))
        }
    }

    fn open_text(k: &Keyring, text: String) -> Result<String, SealError> {
        match k.open_text(&text)? {
            std::borrow::Cow::Borrowed(_) => Ok(text),
            std::borrow::Cow::Owned(plain) => Ok(plain),
        }
    }

    fn seal_output(k: &Keyring, output: &OutputRef) -> Result<OutputRef, SealError> {
        Ok(match output {
            OutputRef::Inline(bytes) => OutputRef::Inline(k.seal(bytes)?),
            // The object itself is sealed by the engine's blob store.
            OutputRef::Blob(path) => OutputRef::Blob(path.clone()),
        })
    }

    fn open_output(k: &Keyring, output: OutputRef) -> Result<OutputRef, SealError> {
        Ok(match output {
            OutputRef::Inline(bytes) => OutputRef::Inline(k.open_vec(bytes)?),
            blob => blob,
        })
    }

    fn seal_past(k: &Keyring, past: &[PastAttempt]) -> Result<Vec<PastAttempt>, SealError> {
        past.iter()
            .map(|a| {
                Ok(PastAttempt {
                    error: a.error.as_deref().map(|e| seal_text(k, e)).transpose()?,
                    ..a.clone()
                })
            })
            .collect()
    }

    fn open_past(k: &Keyring, past: Vec<PastAttempt>) -> Result<Vec<PastAttempt>, SealError> {
        past.into_iter()
            .map(|a| {
                Ok(PastAttempt {
                    error: a.error.map(|e| open_text(k, e)).transpose()?,
                    ..a
                })
            })
            .collect()
    }

    impl OutcomeRecord {
        /// The record as stored: its output, failure message and earlier
        /// attempts' errors sealed.
        pub fn sealed(&self, k: &Keyring) -> Result<Self, SealError> {
            if k.is_empty() {
                return Ok(self.clone());
            }
            Ok(Self {
                outcome: match &self.outcome {
                    Outcome::Succeeded(out) => Outcome::Succeeded(seal_output(k, out)?),
                    Outcome::Failed { kind, message } => Outcome::Failed {
                        kind: *kind,
                        message: seal_text(k, message)?,
                    },
                    Outcome::Cancelled => Outcome::Cancelled,
                },
                history: seal_past(k, &self.history)?,
                ..self.clone()
            })
        }

        /// The record as the engine uses it: what [`sealed`](Self::sealed)
        /// sealed, opened (a plain record as it is).
        pub fn opened(self, k: &Keyring) -> Result<Self, SealError> {
            Ok(Self {
                outcome: match self.outcome {
                    Outcome::Succeeded(out) => Outcome::Succeeded(open_output(k, out)?),
                    Outcome::Failed { kind, message } => Outcome::Failed {
                        kind,
                        message: open_text(k, message)?,
                    },
                    Outcome::Cancelled => Outcome::Cancelled,
                },
                history: open_past(k, self.history)?,
                ..self
            })
        }
    }

    impl RunRecord {
        /// The record as stored: its earlier claims' errors sealed.
        pub fn sealed(&self, k: &Keyring) -> Result<Self, SealError> {
            if k.is_empty() || self.past.is_empty() {
                return Ok(self.clone());
            }
            Ok(Self {
                past: seal_past(k, &self.past)?,
                ..self.clone()
            })
        }

        /// The record with its earlier claims' errors opened.
        pub fn opened(self, k: &Keyring) -> Result<Self, SealError> {
            Ok(Self {
                past: open_past(k, self.past)?,
                ..self
            })
        }
    }

    impl ItemMarker {
        /// The marker as stored: its error and output sealed.
        pub fn sealed(&self, k: &Keyring) -> Result<Self, SealError> {
            if k.is_empty() {
                return Ok(self.clone());
            }
            Ok(Self {
                error: self.error.as_deref().map(|e| seal_text(k, e)).transpose()?,
                output: self
                    .output
                    .as_ref()
                    .map(|o| seal_output(k, o))
                    .transpose()?,
                ..self.clone()
            })
        }

        /// The marker with its error and output opened.
        pub fn opened(self, k: &Keyring) -> Result<Self, SealError> {
            Ok(Self {
                error: self.error.map(|e| open_text(k, e)).transpose()?,
                output: self.output.map(|o| open_output(k, o)).transpose()?,
                ..self
            })
        }
    }

    impl ManifestChunk {
        /// The chunk as stored: each input sealed (so an item's queue job
        /// takes its input as stored, sealed once); the keys readable.
        pub fn sealed(self, k: &Keyring) -> Result<Self, SealError> {
            if k.is_empty() {
                return Ok(self);
            }
            Ok(Self {
                items: self
                    .items
                    .into_iter()
                    .map(|item| {
                        Ok(ManifestItem {
                            input: k.seal_vec(item.input)?,
                            key: item.key,
                        })
                    })
                    .collect::<Result<_, SealError>>()?,
            })
        }

        /// The chunk with each input opened.
        pub fn opened(self, k: &Keyring) -> Result<Self, SealError> {
            Ok(Self {
                items: self
                    .items
                    .into_iter()
                    .map(|item| {
                        Ok(ManifestItem {
                            input: k.open_vec(item.input)?,
                            key: item.key,
                        })
                    })
                    .collect::<Result<_, SealError>>()?,
            })
        }
    }
}
