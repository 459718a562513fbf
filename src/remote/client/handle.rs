//! [`ClientHandle`]: a job submitted through a [`Client`](super::Client), followed
//! through the store (a debounced one through its request's result).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::engine::intake::{RequestProgress, request_progress};

use super::{Inner, MISSING_GRACE, RequestState};
use crate::error::{Error, JobError, Result};
use crate::job::typed::Job;

/// A job submitted by a [`Client`](super::Client).
pub struct ClientHandle<J: Job> {
    pub(super) id: String,
    pub(super) request_id: String,
    /// A debounced submission: its job is its burst's, whose id the engine
    /// records as the request's result.
    pub(super) debounced: bool,
    pub(super) inner: Arc<Inner>,
    pub(super) _job: PhantomData<fn() -> J>,
}

impl<J: Job> std::fmt::Debug for ClientHandle<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandle")
            .field("job_type", &J::NAME)
            .field("id", &self.id)
            .field("request_id", &self.request_id)
            .finish()
    }
}

impl<J: Job> ClientHandle<J> {
    /// The job's id (as in-process: a ULID, or the hex SHA-256 of its key).
    /// A debounced submission's job is its burst's, which the engine picks
    /// when it takes the request: this is then the request's id, and
    /// [`job_id`](Self::job_id) answers the job's once the engine took it
    /// (`status`, `outcome` and `join` follow the job).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id of the job this submission is: [`id`](Self::id), or for a
    /// debounced submission its burst's job once the engine took the
    /// request (`None` before; `Refused` if it refused it).
    pub async fn job_id(&self) -> Result<Option<String>> {
        if !self.debounced {
            return Ok(Some(self.id.clone()));
        }
        let view = self.inner.reader.view();
        match request_progress(view, &self.inner.queue_name, &self.request_id).await? {
            RequestProgress::Sent => Ok(None),
            RequestProgress::Refused(reason) => Err(Error::Refused {
                request: self.request_id.clone(),
                reason,
            }),
            RequestProgress::Applied(Some(id)) => Ok(Some(id)),
            RequestProgress::Applied(None) => Err(Error::Internal {
                doing: "reading a debounced request's job",
                reason: format!(
                    "request `{}` was applied without recording its job's id",
                    self.request_id
                ),
            }),
        }
    }

    /// The id of this submission's request (the intake queue job's id).
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// Where the submission stands: sent, refused, or the job's state.
    pub async fn status(&self) -> Result<RequestState> {
        if self.debounced {
            return match self.job_id().await {
                Ok(Some(id)) => self.inner.request_state(&self.request_id, &id).await,
                Ok(None) => Ok(RequestState::Sent),
                Err(Error::Refused { reason, .. }) => Ok(RequestState::Refused(reason)),
                Err(e) => Err(e),
            };
        }
        self.inner.request_state(&self.request_id, &self.id).await
    }

    /// The job's result if it has ended.
    pub async fn outcome(&self) -> Result<Option<Result<J::Output, JobError>>> {
        match self.job_id().await {
            Ok(Some(id)) => self.inner.outcome::<J>(&id).await,
            Ok(None) | Err(Error::Refused { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Wait for the job to end (reading the store every poll interval).
    /// Ends with [`Error::Refused`] if the engine refused the request.
    pub async fn join(&self) -> Result<Result<J::Output, JobError>> {
        // When the request reads as taken but its job reads as absent, the
        // job is past retention. This was also seen under load across an
        // engine restart, from `request_progress` reading the intake job
        // before the inbox record (a request still queued read as taken);
        // it reads them the other way round now. Only an absence that
        // lasts `MISSING_GRACE` ends the wait, in case a reader can still
        // see a taken request before its job.
        let mut missing_since: Option<tokio::time::Instant> = None;
        loop {
            // A read can fail for a moment (the engine restarting, the
            // store briefly unavailable): only a permanent error ends the
            // wait.
            let status = match self.status().await {
                Ok(status) => {
                    missing_since = None;
                    status
                }
                Err(Error::JobNotFound(_))
                    if missing_since
                        .get_or_insert_with(tokio::time::Instant::now)
                        .elapsed()
                        < MISSING_GRACE =>
                {
                    tokio::time::sleep(self.inner.poll).await;
                    continue;
                }
                Err(e) if !e.is_permanent() => {
                    tokio::time::sleep(self.inner.poll).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match status {
                RequestState::Refused(reason) => {
                    return Err(Error::Refused {
                        request: self.request_id.clone(),
                        reason,
                    });
                }
                RequestState::Job(state) if state.is_terminal() => match self.outcome().await {
                    Ok(Some(result)) => return Ok(result),
                    Ok(None) => {}
                    Err(e) if !e.is_permanent() => {}
                    Err(e) => return Err(e),
                },
                _ => {}
            }
            tokio::time::sleep(self.inner.poll).await;
        }
    }

    /// [`join`](Self::join) for at most `timeout`; `Ok(None)` if the job
    /// has not ended by then (as [`JobHandle::join_timeout`](crate::JobHandle::join_timeout)),
    /// also when no engine has taken the request yet.
    pub async fn join_timeout(
        &self,
        timeout: Duration,
    ) -> Result<Option<Result<J::Output, JobError>>> {
        match tokio::time::timeout(timeout, self.join()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }
}
