//! The guides: one page per topic, from `docs/guide/` in the repository.
//!
//! Each module below is one page, included as its documentation, so docs.rs
//! shows the guides beside the API and every Rust example in them is
//! compiled as a doctest (`cargo test --doc`). Examples that start an
//! engine or need a server are compiled, not run. Start with [`jobs`];
//! README.md has the map of the API and of the crates.

pub mod jobs {
    #![doc = include_str!("../docs/guide/jobs.md")]
}

pub mod batches {
    #![doc = include_str!("../docs/guide/batches.md")]
}

pub mod periodic {
    #![doc = include_str!("../docs/guide/periodic.md")]
}

pub mod signals {
    #![doc = include_str!("../docs/guide/signals.md")]
}

pub mod workflows {
    #![doc = include_str!("../docs/guide/workflows.md")]
}

pub mod client {
    #![doc = include_str!("../docs/guide/client.md")]
}

pub mod shards {
    #![doc = include_str!("../docs/guide/shards.md")]
}
