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
    })
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
pub(crate) fn pin_job_id(req: &mut SubmitRequest, fresh: String) -> String {
    let id = job_id_of(req, &fresh);
    if req.idempotency_key.is_none() {
        req.run_id = Some(id.clone());
    }
    id
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
