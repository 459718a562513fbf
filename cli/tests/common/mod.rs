//! Job types the command's tests run on a live engine.

use gaffer::{Job, JobContext, job::FailureKind};
use serde::{Deserialize, Serialize};

/// Succeeds with `hello {name}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Greet {
    pub name: String,
}

impl Job for Greet {
    const NAME: &'static str = "greet";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<String, gaffer::Error> {
        Ok(format!("hello {}", self.name))
    }
}

/// The error of [`Explode`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Boom(pub String);

/// Fails permanently: "the fuse was lit".
#[derive(Debug, Serialize, Deserialize)]
pub struct Explode;

impl Job for Explode {
    const NAME: &'static str = "explode";
    type Output = ();
    type Error = Boom;

    async fn run(&self, _ctx: JobContext) -> Result<(), Boom> {
        Err(Boom("the fuse was lit".into()))
    }

    fn classify(&self, _: &Boom) -> FailureKind {
        FailureKind::Permanent
    }
}
