//! A client's operator requests (signal, cancel, retry, pause, resume, and
//! a workflow's cancel and retry) and the [`Request`] each answers with.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gaffer_actors::engine::intake::{IntakeOp, RequestProgress, epoch_ms, request_progress};

use super::{Client, Inner};
use crate::error::{Error, Result};

impl Client {
    /// Send the signal `name` with `payload` to the job `id` (as
    /// `Engine::signal`), through the store: the engine applies it at its
    /// next look, and the request's result says what it came to.
    pub async fn signal<S: serde::Serialize>(
        &self,
        id: &str,
        name: &str,
        payload: &S,
    ) -> Result<Request> {
        let payload = crate::engine::signal_payload(name, payload)?;
        self.signal_bytes(id, name, payload).await
    }

    /// [`signal`](Self::signal) with its payload encoded.
    pub(crate) async fn signal_bytes(
        &self,
        id: &str,
        name: &str,
        payload: Vec<u8>,
    ) -> Result<Request> {
        self.inner
            .operate(IntakeOp::Signal {
                run_id: id.to_string(),
                name: name.to_string(),
                payload,
            })
            .await
    }

    /// Cancel the job `id` (as `Engine::cancel`), through the store.
    pub async fn cancel(&self, id: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::Cancel {
                run_id: id.to_string(),
            })
            .await
    }

    /// Cancel the workflow `id` (as `WorkflowHandle::cancel`), through the
    /// store.
    pub async fn cancel_workflow(&self, id: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::CancelWorkflow { id: id.to_string() })
            .await
    }

    /// Run the workflow `id`'s failed and cancelled steps again (as
    /// `WorkflowHandle::retry`), through the store.
    pub async fn retry_workflow(&self, id: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::RetryWorkflow { id: id.to_string() })
            .await
    }

    /// Run a failed or cancelled job again under its id (as
    /// `Engine::retry`); a handle's `join` then waits for the new outcome.
    pub async fn retry(&self, id: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::Retry {
                run_id: id.to_string(),
            })
            .await
    }

    /// Retry every job of `job_type` that failed at or after `since`
    /// (`None`: all of them).
    pub async fn retry_failed(&self, job_type: &str, since: Option<SystemTime>) -> Result<Request> {
        self.inner
            .operate(IntakeOp::RetryFailed {
                job_type: job_type.to_string(),
                since_ms: since.map(epoch_ms).unwrap_or(0),
            })
            .await
    }

    /// Pause a job type durably (as `Engine::pause`).
    pub async fn pause(&self, job_type: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::Pause {
                job_type: job_type.to_string(),
            })
            .await
    }

    /// Resume a paused job type (as `Engine::resume`).
    pub async fn resume(&self, job_type: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::Resume {
                job_type: job_type.to_string(),
            })
            .await
    }

    /// Pause one value of a job type's partitioning header durably (as
    /// `Engine::pause_value`).
    pub async fn pause_value(&self, job_type: &str, header: &str, value: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::PauseValue {
                job_type: job_type.to_string(),
                header: header.to_string(),
                value: value.to_string(),
            })
            .await
    }

    /// Resume a paused value (as `Engine::resume_value`).
    pub async fn resume_value(&self, job_type: &str, header: &str, value: &str) -> Result<Request> {
        self.inner
            .operate(IntakeOp::ResumeValue {
                job_type: job_type.to_string(),
                header: header.to_string(),
                value: value.to_string(),
            })
            .await
    }
}

impl Inner {
    pub(super) async fn operate(self: &Arc<Self>, op: IntakeOp) -> Result<Request> {
        let id = ulid::Ulid::new().to_string();
        self.send(&id, &op).await?;
        Ok(Request {
            id,
            inner: self.clone(),
        })
    }
}

/// An operator request a [`Client`] sent (cancel, retry, pause, resume).
#[derive(Clone)]
pub struct Request {
    id: String,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).finish()
    }
}

impl Request {
    /// The request's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the engine applied it yet: `None` while not, else what it
    /// came to (`Err(Error::Refused)` when refused).
    ///
    /// Every operator request's result is written in the transaction that
    /// takes it, so a request read as taken without its result is read as
    /// not applied yet: a reader catching up on the store saw the request
    /// leave the intake before the result that left with it (seen with
    /// racing signals). Past `request_retention` the result is gone for
    /// good: [`wait`](Self::wait) answers then.
    pub async fn result(&self) -> Result<Option<String>> {
        Ok(self.progress().await?.flatten())
    }

    /// `None` while not applied; `Some(None)` taken, its result not read.
    async fn progress(&self) -> Result<Option<Option<String>>> {
        match request_progress(self.inner.reader.view(), &self.inner.queue_name, &self.id).await? {
            RequestProgress::Sent => Ok(None),
            RequestProgress::Refused(reason) => Err(Error::Refused {
                request: self.id.clone(),
                reason,
            }),
            RequestProgress::Applied(result) => Ok(Some(result)),
        }
    }

    /// Wait until the engine applied it (reading the store every poll
    /// interval); what it came to, or `Error::Refused`.
    pub async fn wait(&self) -> Result<String> {
        // Taken without a result: the reader catching up (read again), or a
        // result past `request_retention` (answered after a grace).
        let mut unread_since: Option<tokio::time::Instant> = None;
        loop {
            match self.progress().await {
                Ok(Some(Some(result))) => return Ok(result),
                Ok(Some(None))
                    if unread_since
                        .get_or_insert_with(tokio::time::Instant::now)
                        .elapsed()
                        >= super::MISSING_GRACE =>
                {
                    return Ok("applied (its result is no longer kept)".into());
                }
                Ok(_) => {}
                Err(e @ Error::Refused { .. }) => return Err(e),
                Err(e) if !e.is_permanent() => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(self.inner.poll).await;
        }
    }

    /// [`wait`](Self::wait) for at most `timeout`; `Ok(None)` if the
    /// engine has not applied it by then (no engine took it yet, say).
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<Option<String>> {
        match tokio::time::timeout(timeout, self.wait()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }
}
