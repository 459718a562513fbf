//! The `Job` trait: a typed unit of background work.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::job::context::JobContext;
use gaffer_actors::FailureKind;

/// A typed job. The value itself is the job's input: it is serialized
/// (MessagePack) at submission and deserialized by the handler.
///
/// Jobs run at least once: a crash or a lost lease re-runs one, so make `run`
/// idempotent (the memo and idempotency keys help).
///
/// ```
/// use gaffer::{Job, JobContext};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendWelcome { user: String }
///
/// impl Job for SendWelcome {
///     const NAME: &'static str = "send-welcome";
///     type Output = u32;
///     type Error = std::io::Error;
///     async fn run(&self, _ctx: JobContext) -> Result<u32, std::io::Error> {
///         Ok(self.user.len() as u32)
///     }
///     fn idempotency_key(&self) -> Option<String> {
///         Some(format!("welcome:{}", self.user))
///     }
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Stable, unique type tag: routes queued jobs to this type's handler.
    /// Renaming it strands queued jobs of the old name (they fail as "no
    /// handler registered").
    const NAME: &'static str;
    /// What the job returns; recorded in its outcome record.
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// What the job fails with; only its `Display` and classification are kept.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The work.
    fn run(
        &self,
        ctx: JobContext,
    ) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;

    /// Transient errors retry (with the queue's backoff) until the attempts run
    /// out; permanent errors end the job now. Default: transient.
    fn classify(&self, _error: &Self::Error) -> FailureKind {
        FailureKind::Transient
    }

    /// Submissions with the same key are one job: a live one is joined, a
    /// finished one answers from its record. Default: none (every submission is
    /// a new job).
    fn idempotency_key(&self) -> Option<String> {
        None
    }

    /// Attempt limit of this type; [`SubmitOptions::max_attempts`](crate::SubmitOptions)
    /// overrides it, and `None` uses the queue's (taquba default 3).
    fn max_attempts(&self) -> Option<u32> {
        None
    }
}

/// An idempotency key derived from the job's payload:
/// `"{NAME}:{hex sha256(msgpack(job))}"`. Equal jobs get equal keys (for types
/// that serialize deterministically: not `HashMap`).
pub fn payload_idempotency_key<J: Job>(job: &J) -> Result<String> {
    let bytes = rmp_serde::to_vec_named(job).map_err(|e| Error::encode(J::NAME, e))?;
    Ok(format!(
        "{}:{}",
        J::NAME,
        gaffer_actors::layout::keys::hex_sha256(&bytes)
    ))
}

/// The id of the job submitted with idempotency key `key`
/// ([`Job::idempotency_key`]): the id its [`JobHandle::id`](crate::JobHandle::id)
/// returns, computed without submitting anything (the engine's own
/// derivation, the lowercase hex SHA-256 of the key). Build a handle on it
/// with [`Engine::keyed_handle`](crate::Engine::keyed_handle) or
/// [`Engine::handle`](crate::Engine::handle).
///
/// The id depends on the key alone, not on the job type: two job types that
/// use the same key share one id (the second submission is refused with
/// `InputMismatch`), so put the type in the key (as
/// [`payload_idempotency_key`] does).
///
/// ```
/// let id = gaffer::job::keyed_job_id("welcome:ada");
/// assert_eq!(id.len(), 64);
/// ```
pub fn keyed_job_id(key: &str) -> String {
    gaffer_actors::layout::keys::keyed_run_id(key)
}
