//! Test helpers shipped with the crate (feature `testing`): a
//! fault-injecting object store ([`FaultyStore`]), and panics injected into
//! the work the engine's actors spawn ([`panics`]).

mod faulty_store;
pub mod panics;

pub use faulty_store::*;
