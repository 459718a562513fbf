//! The typed API's error types.

use gaffer_actors::{EngineError, FailureKind};

/// Errors of gaffer's API (the engine's errors plus the typed layer's own).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine refused or failed the operation; see [`EngineError`].
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A value failed to encode (MessagePack).
    #[error("`{what}` failed to encode: {reason}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// The encoder's message.
        reason: String,
    },
    /// A recorded value failed to decode as the expected type (the type changed
    /// since it was recorded, or the id belongs to another job type).
    #[error("`{what}` failed to decode: {reason}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The decoder's message.
        reason: String,
    },
    /// A line of JSON input failed to decode.
    #[error("line {line}: invalid JSON: {reason}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The decoder's message.
        reason: String,
    },
    /// An I/O error (reading inputs, writing a sink).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// More items failed than the batch's `fail_threshold` allows. The report
    /// of the run is included.
    #[error("{failed} of {total} items failed, over the {threshold}% threshold")]
    FailureThresholdExceeded {
        /// Items failed.
        failed: u64,
        /// Items in the batch.
        total: u64,
        /// The threshold, percent.
        threshold: f64,
        /// The run's report.
        report: Box<crate::report::BulkReport>,
    },
    /// The engine refused a [`Client`](crate::Client)'s submission (unknown
    /// job type, a key already used with another input, a request that does
    /// not decode as a gaffer request …): the job will not run. A job payload
    /// its type does not decode is not refused: the job fails when it runs.
    #[error("request `{request}` was refused by the engine: {reason}")]
    Refused {
        /// The request's id ([`ClientHandle::request_id`](crate::ClientHandle::request_id)).
        request: String,
        /// Why.
        reason: String,
    },
    /// A [`Client`](crate::Client)'s request would be larger than the store's
    /// inbox takes (taquba's `MAX_INBOX_ENTRY_SIZE`, 16 MiB): refused before
    /// anything is written.
    #[error(
        "the request is {size} bytes, over the {max}-byte limit of the store's inbox; keep large data in an object of its own and pass its key in the job"
    )]
    RequestTooLarge {
        /// The size of the inbox entry it would be.
        size: usize,
        /// The inbox's limit.
        max: usize,
    },
    /// A schedule is not valid (a cron expression that does not parse, an
    /// unknown time zone …): see [`ScheduleError`](crate::ScheduleError).
    #[error(transparent)]
    Schedule(#[from] gaffer_actors::ScheduleError),
    /// A shard set or placement is not valid, or the job belongs to a
    /// shard this process does not own: see [`ShardError`](crate::ShardError).
    #[error(transparent)]
    Shard(#[from] crate::shards::ShardError),
    /// The job id belongs to a job of another type.
    #[error("job `{id}` is a `{actual}` job, not a `{expected}` job")]
    WrongJobType {
        /// The id.
        id: String,
        /// The type asked for.
        expected: String,
        /// The type recorded.
        actual: String,
    },
}

impl Error {
    /// True when retrying the same call cannot succeed.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::Engine(e) => e.is_permanent(),
            Self::Io(_) => false,
            _ => true,
        }
    }

    pub(crate) fn encode(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        Self::Encode {
            what: what.into(),
            reason: e.to_string(),
        }
    }

    pub(crate) fn decode(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        Self::Decode {
            what: what.into(),
            reason: e.to_string(),
        }
    }
}

/// Result alias of the typed API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a job ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job failed ({kind:?}): {message}")]
pub struct JobError {
    /// Transient (attempts ran out) or permanent.
    pub kind: FailureKind,
    /// The job's error message (its `Display`), or the engine's reason.
    pub message: String,
    cancelled: bool,
}

impl JobError {
    pub(crate) fn failed(kind: FailureKind, message: String) -> Self {
        Self {
            kind,
            message,
            cancelled: false,
        }
    }

    pub(crate) fn cancelled() -> Self {
        Self {
            kind: FailureKind::Permanent,
            message: "the job was cancelled".into(),
            cancelled: true,
        }
    }

    /// Whether the job was cancelled rather than failed.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
}

/// What awaiting a handle can fail with: the infrastructure, or the job itself.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The engine could not answer.
    #[error(transparent)]
    Infra(#[from] Error),
    /// The job ended without an output.
    #[error(transparent)]
    Job(#[from] JobError),
}
