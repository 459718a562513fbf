//! The guides: one page per topic, from `docs/guide/` in the repository.
//!
//! Each module below is one page, included as its documentation, so docs.rs
//! shows the guides beside the API and every Rust example in them is
//! compiled as a doctest (`cargo test --doc`); the examples that start an
//! engine or need a server are compiled, not run. Start with
//! [`jobs`](crate::guide::jobs).
//!
//! | page | what |
//! |---|---|
//! | [`jobs`](crate::guide::jobs) | job types, retries, handles, keyed jobs, memo and effects, follow-ups, completion jobs, rate limits, tenants |
//! | [`batches`](crate::guide::batches) | pipelines and batches of items |
//! | [`periodic`](crate::guide::periodic) | jobs on a cron expression or an interval |
//! | [`signals`](crate::guide::signals) | a job that waits for an outside event |
//! | [`control`](crate::guide::control) | a job's own verbs: sleep, snooze; debounce, unique for a period |
//! | [`workflows`](crate::guide::workflows) | graphs of jobs |
//! | [`client`](crate::guide::client) | submitting and operating from other processes |
//! | [`shards`](crate::guide::shards) | one workload over several stores and machines |
//! | [`dashboard`](crate::guide::dashboard) | the dashboard and the `gaffer` command |
//! | [`s3`](crate::guide::s3) | running on S3 and other object stores |
//! | [`tuning`](crate::guide::tuning) | the defaults, the WAL flush, memory |
//! | [`telemetry`](crate::guide::telemetry) | tracing and metrics |
//! | [`encryption`](crate::guide::encryption) | values encrypted at rest |
//! | [`taquba_settings`](crate::guide::taquba_settings) | what taquba does not expose, measured (for its maintainers) |

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

pub mod control {
    #![doc = include_str!("../docs/guide/control.md")]
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

pub mod dashboard {
    #![doc = include_str!("../docs/guide/dashboard.md")]
}

pub mod s3 {
    #![doc = include_str!("../docs/guide/s3.md")]
}

pub mod tuning {
    #![doc = include_str!("../docs/guide/tuning.md")]
}

pub mod telemetry {
    #![doc = include_str!("../docs/guide/telemetry.md")]
}

pub mod encryption {
    #![doc = include_str!("../docs/guide/encryption.md")]
}

pub mod taquba_settings {
    #![doc = include_str!("../docs/guide/taquba-settings.md")]
}

/// README.md's examples, compiled as doctests (not part of the docs).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
