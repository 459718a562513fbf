//! Periodic jobs, typed: a job type submitted on a [`Schedule`], one run per
//! tick. The engine side (the periodic actor, the durable record, the
//! transaction that fires a tick) is `gaffer-actors`' `periodic` and
//! `ticks`; this module turns a typed `make_job` into the bytes-level
//! [`PeriodicSpec`].

use std::sync::Arc;

use gaffer_actors::{PeriodicSpec, Schedule, Tick};

use crate::job::Job;
use crate::submit::{SubmitOptions, submit_request};

/// The bytes-level periodic job named `name` that submits the job
/// `make_job` makes for each tick of `schedule`: what
/// [`EngineBuilder::periodic`](crate::EngineBuilder::periodic) and
/// [`Engine::add_periodic`](crate::Engine::add_periodic) schedule, and what
/// [`EngineMessage::AddPeriodic`](crate::EngineMessage::AddPeriodic) carries
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
