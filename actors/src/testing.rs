//! Test helpers shipped with the crate (feature `testing`).
