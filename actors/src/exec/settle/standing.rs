//! What a claimed job is to gaffer, read when it is claimed and before any
//! user code runs: the run it names ([`Target`], from its headers), and
//! whether it is that run's live job ([`Standing`]); and the span its
//! attempt runs in.

use taquba::Claim;

use crate::exec::attempts::Attempts;
use crate::layout::keys;
use crate::layout::records::{self, RunRecord};

/// What a claimed job is, from its headers.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// A job: the run id handles answer to.
    Job { run_id: String },
    /// A bulk item.
    Item {
        batch_id: String,
        key: String,
        run_id: String,
    },
}

impl Target {
    pub(crate) fn run_id(&self) -> &str {
        match self {
            Self::Job { run_id } | Self::Item { run_id, .. } => run_id,
        }
    }
}

/// The target and type name a claimed job carries in its headers, or why it
/// carries none gaffer could run: a job carries its run id, an item its
/// batch and key (its run id follows from them; items enqueued before the
/// header was dropped carry `gaffer.run` too). A header that is not a valid
/// id is an error, never replaced by the queue job's id.
pub(crate) fn identify(claim: &Claim) -> std::result::Result<(Target, String), String> {
    let h = &claim.headers;
    let run_id = match h.get(keys::HEADER_RUN) {
        Some(r) if keys::is_valid_id(r) => Some(r.clone()),
        Some(r) => {
            return Err(format!(
                "queue job `{}` carries an invalid run id `{}`; not run",
                claim.id,
                r.escape_debug()
            ));
        }
        None => None,
    };
    let job_type = h.get(keys::HEADER_TYPE).cloned().unwrap_or_default();
    let target = match (h.get(keys::HEADER_BATCH), h.get(keys::HEADER_KEY)) {
        (Some(batch_id), Some(_)) if !keys::is_valid_id(batch_id) => {
            return Err(format!(
                "queue job `{}` carries an invalid batch id `{}`; not run",
                claim.id,
                batch_id.escape_debug()
            ));
        }
        (Some(batch_id), Some(key)) => Target::Item {
            run_id: run_id.unwrap_or_else(|| keys::item_run_id(batch_id, key)),
            batch_id: batch_id.clone(),
            key: key.clone(),
        },
        _ => match run_id {
            Some(run_id) => Target::Job { run_id },
            None => {
                return Err(
                    crate::EngineError::NotSubmittedThroughGaffer(claim.id.clone()).to_string(),
                );
            }
        },
    };
    Ok((target, job_type))
}

/// What a claimed job is to gaffer, read when it is claimed.
#[derive(Debug)]
pub(crate) enum Standing {
    /// The live job of its run: run it.
    Owner(Owner),
    /// Not a job gaffer runs (no run id, an invalid one, or a run whose
    /// record names another queue job or is gone): dead-lettered at once with
    /// this reason, touching no run's records, the user's code never run.
    Stray(String),
    /// The read failed (the store): give the claim back, to be claimed again.
    Unread(String),
    /// Its payload does not open with the engine's keyring (sealed under a
    /// key it does not hold, or changed since): given back without
    /// spending an attempt, the user's code never run on it, and claimed
    /// again after the queue's backoff, until an engine that holds the key
    /// takes it. The reason names the key.
    Sealed(String),
}

/// The run a claimed job owns.
#[derive(Debug)]
pub(crate) struct Owner {
    pub(crate) target: Target,
    pub(crate) job_type: String,
    /// A job's run record, as read at the claim (an item has none).
    pub(crate) run: Option<Box<RunRecord>>,
    /// The job's payload, opened (the claim's is as stored).
    pub(crate) payload: std::sync::Arc<[u8]>,
}

/// Whether `claim` is the live job of the run it names: its run record (a
/// job) or its active record (an item) holds the claim's id (one read);
/// and, for the live job, its payload opened with `keyring`.
pub(crate) async fn standing(
    queue: &taquba::Queue,
    claim: &Claim,
    keyring: &crate::layout::sealed::Keyring,
) -> Standing {
    match owner(queue, claim).await {
        Ok(mut owner) => match keyring.open(&claim.payload) {
            Ok(payload) => {
                owner.payload = payload.as_ref().into();
                Standing::Owner(owner)
            }
            Err(e) => Standing::Sealed(format!(
                "the payload of queue job `{}` (run `{}`) does not open: {e}; not run, it waits \
                 for an engine that holds its key",
                claim.id,
                owner.target.run_id()
            )),
        },
        Err(standing) => standing,
    }
}

/// The run `claim` owns (its payload not yet opened), or its standing
/// when it owns none.
async fn owner(queue: &taquba::Queue, claim: &Claim) -> std::result::Result<Owner, Standing> {
    let (target, job_type) = match identify(claim) {
        Ok(found) => found,
        Err(reason) => return Err(Standing::Stray(reason)),
    };
    let stray = |target: &Target| {
        Standing::Stray(format!(
            "queue job `{}` carries run id `{}` but is not that run's live job (enqueued by \
             hand, or a stale duplicate); not run, and the run's records are untouched",
            claim.id,
            target.run_id()
        ))
    };
    let found = match &target {
        Target::Job { run_id } => {
            let key = keys::run_key(run_id);
            match queue.view().kv_get(&key).await {
                Ok(Some(raw)) => match records::decode::<RunRecord>(&key, &raw) {
                    Ok(run) if run.job_id == claim.id => Ok(Some(Box::new(run))),
                    Ok(_) => Err(stray(&target)),
                    Err(e) => Err(Standing::Stray(format!(
                        "queue job `{}`: its run's record does not decode ({e}); not run",
                        claim.id
                    ))),
                },
                Ok(None) => Err(stray(&target)),
                Err(e) => Err(Standing::Unread(e.to_string())),
            }
        }
        Target::Item { batch_id, key, .. } => {
            match queue
                .view()
                .kv_get(&keys::item_active_key(batch_id, key))
                .await
            {
                Ok(Some(job)) if job.as_ref() == claim.id.as_bytes() => Ok(None),
                Ok(_) => Err(stray(&target)),
                Err(e) => Err(Standing::Unread(e.to_string())),
            }
        }
    };
    let run = found?;
    Ok(Owner {
        target,
        job_type,
        run,
        payload: std::sync::Arc::from(&[][..]),
    })
}

/// The `gaffer.job` span of one attempt: an info span (spans print
/// nothing by themselves; a user's `info!` inside `run` carries its
/// fields), with the job type, the job's id (its run id), the attempt and
/// its limit, the queue, and a bulk item's batch id and key.
///
/// Its fields are the same as [`identify`]'s answer, but borrowed from the
/// claim's headers: nothing is copied, and an item's run id (a hash of its
/// batch and key) is computed only when a subscriber wants the span (the
/// macro evaluates its fields only then).
pub(crate) fn attempt_span(claim: &Claim, attempts: &Attempts) -> tracing::Span {
    let h = &claim.headers;
    let job_type = h.get(keys::HEADER_TYPE).map_or("", String::as_str);
    let run_header = h.get(keys::HEADER_RUN).filter(|r| keys::is_valid_id(r));
    // Every field given at creation (none recorded later): a formatting
    // subscriber formats a span's fields once, and again at each record.
    let span = match (h.get(keys::HEADER_BATCH), h.get(keys::HEADER_KEY)) {
        (Some(batch_id), Some(key)) if keys::is_valid_id(batch_id) => tracing::info_span!(
            "gaffer.job",
            job_type = %job_type,
            job_id = %ItemRunId { header: run_header, batch_id, key, derived: Default::default() },
            attempt = attempts.number,
            max_attempts = attempts.limit,
            queue = %claim.queue,
            batch_id = %batch_id,
            item_key = %key,
        ),
        _ => tracing::info_span!(
            "gaffer.job",
            job_type = %job_type,
            job_id = %run_header.unwrap_or(&claim.id),
            attempt = attempts.number,
            max_attempts = attempts.limit,
            queue = %claim.queue,
        ),
    };
    if let Some(traceparent) = h.get(keys::HEADER_TRACEPARENT) {
        crate::telemetry::adopt_traceparent(&span, traceparent);
    }
    span
}

/// An item's run id as [`identify`] finds it: its `gaffer.run` header (items
/// enqueued before it was dropped), or else derived from its batch and key
/// when first formatted (once, however many layers format the span).
struct ItemRunId<'a> {
    header: Option<&'a String>,
    batch_id: &'a str,
    key: &'a str,
    derived: std::cell::OnceCell<String>,
}

impl std::fmt::Display for ItemRunId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.header {
            Some(run_id) => f.write_str(run_id),
            None => f.write_str(
                self.derived
                    .get_or_init(|| keys::item_run_id(self.batch_id, self.key)),
            ),
        }
    }
}
