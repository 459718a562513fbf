//! How a job ends and is read back, what it keeps across attempts (memo)
//! and stages for its success (effects), and the ids of keyed jobs.
//!
//! The files: `typed.rs` (the [`Job`] trait, keyed ids), `context.rs`
//! ([`JobContext`](crate::JobContext)), `handle.rs`
//! ([`JobHandle`](crate::JobHandle)), `submit.rs`
//! ([`SubmitOptions`](crate::SubmitOptions)), `state.rs` (application state
//! by type).

pub(crate) mod context;
pub(crate) mod handle;
pub(crate) mod state;
pub(crate) mod submit;
pub(crate) mod typed;

pub use crate::error::{JobError, JoinError};
pub use context::Memo;
pub use gaffer_actors::erased::CompletedBatch;
pub use gaffer_actors::exec::effects::{Effects, MAX_EFFECT_VALUE};
pub use gaffer_actors::layout::tags::listing::{TaggedJob, TaggedJobs};
pub use gaffer_actors::layout::tags::{MAX_TAG_LEN, MAX_TAGS};
pub use gaffer_actors::{CancelResult, FailureKind, JobState, MemoWrites, Signalled};
pub use typed::{Job, keyed_job_id, payload_idempotency_key};
