//! Submissions of typed jobs: their options and the bytes-level request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use gaffer_actors::SubmitRequest;
use gaffer_actors::erased::JobEngine;

use crate::error::{Error, Result};
use crate::job::handle::JobHandle;
use crate::job::typed::Job;

/// Options of one submission. Only the payload decides whether two keyed
/// submissions are the same job; options of a duplicate are ignored.
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// Attempt limit; beats [`Job::max_attempts`], which beats the queue's.
    pub max_attempts: Option<u32>,
    /// Priority: lower is claimed first (taquba's `PRIORITY_HIGH` = 100,
    /// `PRIORITY_NORMAL` = 1000, `PRIORITY_LOW` = 10000).
    pub priority: Option<u32>,
    /// Do not run before this time (queue clock).
    pub run_at: Option<SystemTime>,
    /// Headers stored with the job and readable by it; the `gaffer.` prefix is
    /// reserved.
    pub headers: HashMap<String, String>,
    /// Each attempt's timeout: past it the attempt's cancel token fires, its
    /// future is dropped and the attempt counts as a failed one (transient,
    /// retried as any failure). Beats its type's [`JobOptions::timeout`];
    /// `None` = its type's.
    ///
    /// [`JobOptions::timeout`]: crate::JobOptions::timeout
    pub timeout: Option<std::time::Duration>,
    /// The job's tags: a few short strings (at most 8, each 1 to 64
    /// characters of `[A-Za-z0-9_.:@=-]`, e.g. `order:42`) stored with it
    /// and indexed, so [`Engine::jobs_by_tag`](crate::Engine::jobs_by_tag)
    /// and the command's `gaffer jobs --tag` list a tag's jobs in any state.
    /// Checked at submit (`Error::InvalidTag`). Stored in the clear, also
    /// under a keyring. See [`tags`](Self::tags).
    pub tags: Vec<String>,
    /// At most one job of its key per period of this length (River's
    /// `ByPeriod`, Sidekiq's `unique_for`): the key's slot is the period
    /// that holds the submission, counted in whole periods from the epoch
    /// (an hour's periods start on the hour, UTC), so a submission in the
    /// same period is the same job (joined while it lives, answered from
    /// its record once it ended) and the next period's runs again. The key
    /// is the job's [`Job::idempotency_key`], else one of its type and
    /// payload (as [`payload_idempotency_key`](crate::job::payload_idempotency_key)
    /// derives); the job's id is that key's in that period. The engine
    /// takes the period from its queue's clock; a `Client` or a shard set
    /// from the submitting machine's. Duplicates are answered while the
    /// outcome record is kept: with `Settings::retention` shorter than the
    /// period, a submission after its job's record was removed runs again.
    /// See [`unique_for`](Self::unique_for).
    pub unique_for: Option<std::time::Duration>,
    /// Debounce: submissions of this job type with one key within a window
    /// are one job, run after the burst (see [`Debounce`] and
    /// [`debounce`](Self::debounce)).
    pub debounce: Option<Debounce>,
}

/// How a submission is debounced ([`SubmitOptions::debounce`]): "re-index
/// this document" fired 40 times while a user types becomes one run after
/// the typing stops.
///
/// The first submission of a key starts a **burst**: its job is scheduled
/// `window` ahead. Each later submission within the burst pushes the run
/// back to `window` after it and replaces the job's payload and options
/// (trailing, the default: the last wins), or keeps the first's
/// ([`leading`](Self::leading)). The run starts once the burst has been
/// quiet for `window`, or at the latest [`max_delay`](Self::max_delay)
/// after its first submission, so a stream of submissions cannot put it
/// off forever. Every submission of a burst answers the handle of its one
/// job. Once that job has started, the next submission starts a new burst.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Debounce {
    key: String,
    window: std::time::Duration,
    leading: bool,
    max_delay: Option<std::time::Duration>,
}

impl Debounce {
    /// Debounce by `key` (1-256 bytes; per job type) over `window`.
    pub fn new(key: impl Into<String>, window: std::time::Duration) -> Self {
        Self {
            key: key.into(),
            window,
            leading: false,
            max_delay: None,
        }
    }

    /// Keep the burst's first submission (its payload and options), not
    /// its last.
    #[must_use]
    pub fn leading(mut self) -> Self {
        self.leading = true;
        self
    }

    /// Run at the latest this long after the burst's first submission
    /// (default: the engine's `Settings::debounce_max_delay`, 1 h).
    #[must_use]
    pub fn max_delay(mut self, max_delay: std::time::Duration) -> Self {
        self.max_delay = Some(max_delay);
        self
    }

    fn wire(&self) -> gaffer_actors::layout::request::Debounce {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        gaffer_actors::layout::request::Debounce {
            key: self.key.clone(),
            window_ms: ms(self.window),
            leading: self.leading,
            max_delay_ms: self.max_delay.map(ms),
        }
    }
}

impl SubmitOptions {
    /// At most one job of its key per `period` (see the field
    /// [`unique_for`](Self#structfield.unique_for)). A zero period is
    /// refused at submission (`InvalidSubmitOptions`).
    #[must_use]
    pub fn unique_for(mut self, period: std::time::Duration) -> Self {
        self.unique_for = Some(period);
        self
    }

    /// Debounce by `key` over `window`, trailing (the last submission of a
    /// burst wins): see [`Debounce`]. A debounced job has no idempotency
    /// key and no `run_at` of its own (`InvalidSubmitOptions`): its burst
    /// decides both.
    #[must_use]
    pub fn debounce(self, key: impl Into<String>, window: std::time::Duration) -> Self {
        self.debounce_with(Debounce::new(key, window))
    }

    /// Debounce as `debounce` says (leading, a max delay).
    #[must_use]
    pub fn debounce_with(mut self, debounce: Debounce) -> Self {
        self.debounce = Some(debounce);
        self
    }
}

impl SubmitOptions {
    /// These options with `tags` (see [`SubmitOptions::tags`], the field):
    /// `SubmitOptions::default().tags(["order:42", "customer:acme"])`.
    pub fn tags<T: Into<String>>(mut self, tags: impl IntoIterator<Item = T>) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }
}

/// The bytes-level request for a typed job. Its tags are checked here,
/// before it is sent anywhere (`Error::InvalidTag`).
pub fn submit_request<J: Job>(job: &J, opts: SubmitOptions) -> Result<SubmitRequest> {
    let tags = gaffer_actors::layout::tags::checked(&opts.tags)?;
    let payload = rmp_serde::to_vec_named(job).map_err(|e| Error::encode(J::NAME, e))?;
    Ok(SubmitRequest {
        job_type: J::NAME.to_string(),
        payload,
        idempotency_key: job.idempotency_key(),
        run_id: None,
        headers: opts.headers,
        priority: opts.priority,
        max_attempts: opts.max_attempts.or(job.max_attempts()),
        run_at: opts.run_at,
        // Taken from the current span at `submit`, in the submitting task.
        traceparent: None,
        timeout: opts.timeout,
        tags,
        unique_for: opts.unique_for,
        debounce: opts.debounce.as_ref().map(Debounce::wire),
    })
}

/// Refuse a debounced `req` where its burst could not be one job: a shard
/// set routes a job by its id, which a burst's engine picks.
pub(crate) fn refuse_debounce(req: &SubmitRequest, door: &str) -> Result<()> {
    match req.debounce {
        Some(_) => Err(Error::InvalidSubmitOptions(format!(
            "a debounced submission through {door} is not supported: submit it to the shard's engine or a Client of it"
        ))),
        None => Ok(()),
    }
}

/// Fix `req`'s period, if it is unique for one, on this machine's clock
/// (a submitter outside the engine, which must know the job's id first).
pub(crate) fn pin_period_now(req: &mut SubmitRequest) -> Result<()> {
    let now_ms = gaffer_actors::layout::request::epoch_ms(SystemTime::now());
    req.pin_period(now_ms)
}

/// The id `req`'s job will have: its idempotency key's
/// ([`keyed_job_id`](crate::job::keyed_job_id)), else `fresh` (a new ULID).
/// Known before the request is sent, so a shard set routes by it.
pub(crate) fn job_id_of(req: &SubmitRequest, fresh: &str) -> String {
    match &req.idempotency_key {
        Some(key) => gaffer_actors::layout::keys::keyed_run_id(key),
        None => fresh.to_string(),
    }
}

/// Fix `req`'s job id before it is sent (an unkeyed job gets `fresh`, a
/// new ULID, as its `run_id`) and answer it: the id a shard set routes by.
pub(crate) fn pin_job_id(req: &mut SubmitRequest, fresh: String) -> Result<String> {
    pin_period_now(req)?;
    let id = job_id_of(req, &fresh);
    if req.idempotency_key.is_none() {
        req.run_id = Some(id.clone());
    }
    Ok(id)
}

pub(crate) async fn submit_typed<J: Job>(
    engine: &Arc<dyn JobEngine>,
    job: J,
    opts: SubmitOptions,
) -> Result<JobHandle<J>> {
    let request = submit_request(&job, opts)?;
    let submitted = engine.submit(request).await?;
    Ok(JobHandle::submitted(submitted, engine.clone()))
}
