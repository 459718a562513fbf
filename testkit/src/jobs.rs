//! The test jobs that the tests of more than one file run: the command's
//! and the dashboard's tests read what these leave in a store.

use std::time::Duration;

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

/// The error of [`Explode`] (and of other failing test jobs): its text.
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

/// Waits for the signal `approval` (an hour at most), then answers
/// `order {order} approved by {by}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Approve {
    pub order: u32,
}

/// The payload of the signal [`Approve`] waits for.
#[derive(Debug, Serialize, Deserialize)]
pub struct Approval {
    pub by: String,
}

impl Job for Approve {
    const NAME: &'static str = "approve";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        let a: Approval = ctx
            .wait_signal("approval", Duration::from_secs(3600))
            .await?;
        Ok(format!("order {} approved by {}", self.order, a.by))
    }
}

/// Sleeps an hour (`ctx.sleep`), then answers `rested`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Nap;

impl Job for Nap {
    const NAME: &'static str = "nap";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        ctx.sleep(Duration::from_secs(3600)).await;
        Ok("rested".into())
    }
}

/// Snoozes an hour (`ctx.snooze`) on its first run, then answers how many
/// times it snoozed.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snoozy;

impl Job for Snoozy {
    const NAME: &'static str = "snoozy";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u32, gaffer::Error> {
        if ctx.snoozes() == 0 {
            ctx.snooze(Duration::from_secs(3600)).await
        }
        Ok(ctx.snoozes())
    }
}
