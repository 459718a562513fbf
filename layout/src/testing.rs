//! Test helpers (feature `testing`): the hostile-bytes kit for property
//! tests of the decoders of stored bytes.

pub mod hostile;
