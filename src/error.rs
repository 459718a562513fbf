//! The typed API's error types.

use gaffer_actors::FailureKind;

/// The error of every gaffer operation: one flat enum, matched on
/// directly (`Error::JobNotFound(id)`, `Error::InputMismatch(key)`,
/// `Error::Refused { .. }` …). Schedules and shards keep their detail types
/// ([`ScheduleError`](crate::periodic::ScheduleError),
/// [`ShardError`](crate::remote::ShardError)) inside `Error::Schedule` and
/// `Error::Shard`.
pub use gaffer_actors::EngineError as Error;

/// Result alias of gaffer.
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
