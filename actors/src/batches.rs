//! Bulk batches: what a run is given and reports ([`spec`]), the claim that
//! keeps one run of a batch id at a time ([`claims`]), the run from start to
//! end in its caller's task ([`driver`]), the registry of running batches
//! and a coordinator per run (window, counters, report), the thread that
//! writes a run's records to its sink, the manifest, what a batch's
//! records say ([`status`], `lookups`), and the memory budget a run's
//! feeding is paced by (`budget`).

pub(crate) mod budget;
pub(crate) mod claims;
pub(crate) mod coordinator;
pub(crate) mod data;
pub(crate) mod driver;
pub(crate) mod lookups;
pub(crate) mod manifest;
pub(crate) mod registry;
pub use crate::layout::report;
pub(crate) mod sink_writer;
pub(crate) mod spec;
pub mod status;
