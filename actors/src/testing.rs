//! Test helpers shipped with the crate (feature `testing`): a
//! fault-injecting object store ([`FaultyStore`]), panics injected into
//! the work the engine's actors spawn ([`panics`]), and hostile bytes for
//! the decoders' property tests ([`hostile`]).

mod faulty_store;
pub use gaffer_layout::testing::hostile;
pub mod panics;

pub use faulty_store::*;
