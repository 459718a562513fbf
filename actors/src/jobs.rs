//! Jobs, bytes-level: the submit path every job takes (in process, from a
//! client, a follow-up, a periodic tick or a batch's completion), what a
//! job to create is ([`request::SubmitRequest`]), the operator's actions on
//! the records, a job's tags and their index entries at its creation, and
//! the waiters actor that answers callers when a job ends.

pub mod debounce;
pub(crate) mod operate;
pub use crate::layout::request;
pub(crate) mod signals;
pub(crate) mod submit;
mod tags;
pub mod waiters;
