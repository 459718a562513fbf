//! Periodic jobs: a job type submitted on a [`Schedule`] (a cron
//! expression in a time zone, or an interval), one run per tick across
//! restarts; what happens to ticks missed while no engine ran
//! ([`Missed`]); what the store records of each ([`PeriodicRecord`],
//! [`PeriodicStatus`]). Schedule one with `EngineBuilder::periodic` or
//! `Engine::add_periodic`; [`periodic_spec`] makes the bytes-level
//! [`PeriodicSpec`] a service sends by message.

use std::sync::Arc;

pub use gaffer_actors::{
    Missed, PeriodicRecord, PeriodicSpec, PeriodicStatus, Schedule, ScheduleError, ScheduleSpec,
    Tick,
};

use crate::job::submit::{SubmitOptions, submit_request};
use crate::job::typed::Job;

/// The bytes-level periodic job named `name` that submits the job
/// `make_job` makes for each tick of `schedule`: what
/// [`EngineBuilder::periodic`](crate::EngineBuilder::periodic) and
/// [`Engine::add_periodic`](crate::Engine::add_periodic) schedule, and what
/// [`EngineMessage::AddPeriodic`](crate::protocol::EngineMessage::AddPeriodic) carries
/// for a service that talks to the engine by message.
///
/// `make_job` runs in an engine task when a tick fires; it should make the
/// same job for the same tick (a tick is one job, by its id, whatever a
/// second call makes). The job's own idempotency key is not used: a tick's
/// job is keyed by the periodic job's name and the tick's time
/// ([`Tick::job_id`]).
pub fn periodic_spec<J: Job>(
    name: impl Into<String>,
    schedule: Schedule,
    make_job: impl Fn(&Tick) -> J + Send + Sync + 'static,
) -> PeriodicSpec {
    PeriodicSpec {
        name: name.into(),
        job_type: J::NAME.to_string(),
        schedule,
        make: Arc::new(move |tick: &Tick| {
            submit_request(&make_job(tick), SubmitOptions::default()).map_err(|e| e.to_string())
        }),
    }
}
