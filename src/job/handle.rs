//! `JobHandle`: a typed reference to a submitted job.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::erased::JobEngine;
use gaffer_actors::layout::records::from_msgpack;
use gaffer_actors::{
    CancelResult, EngineError, JobState, Outcome, OutcomeRecord, OutputRef, Submitted,
};

use crate::error::{Error, JobError, JoinError, Result};
use crate::job::typed::Job;

/// A typed reference to a job. Cheap to clone; works across restarts (build
/// one from an id with [`Engine::handle`](crate::Engine::handle)).
pub struct JobHandle<J: Job> {
    id: String,
    newly_submitted: bool,
    /// The outcome record the submission was answered from (the job had
    /// already ended): `join` waits only for it to be durable, not for a read.
    recorded: Option<Arc<OutcomeRecord>>,
    engine: Arc<dyn JobEngine>,
    _job: PhantomData<fn() -> J>,
}

impl<J: Job> Clone for JobHandle<J> {
    fn clone(&self) -> Self {
        Self {
            id: self.id.clone(),
            newly_submitted: self.newly_submitted,
            recorded: self.recorded.clone(),
            engine: self.engine.clone(),
            _job: PhantomData,
        }
    }
}

impl<J: Job> std::fmt::Debug for JobHandle<J> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("job_type", &J::NAME)
            .field("id", &self.id)
            .field("newly_submitted", &self.newly_submitted)
            .finish()
    }
}

/// Decode an outcome record as job `J`'s result.
pub(crate) async fn decode_outcome<J: Job>(
    engine: &dyn JobEngine,
    record: &OutcomeRecord,
) -> Result<Result<J::Output, JobError>> {
    decode_outcome_with::<J>(record, async |output: &OutputRef| {
        engine.output_bytes(output.clone()).await
    })
    .await
}

/// [`decode_outcome`], fetching an output stored as a blob with `fetch`.
pub(crate) async fn decode_outcome_with<J: Job>(
    record: &OutcomeRecord,
    fetch: impl AsyncFnOnce(&OutputRef) -> Result<Vec<u8>>,
) -> Result<Result<J::Output, JobError>> {
    // A record without a type belongs to a queue job put on the queue
    // without gaffer's headers (recorded by a version before the ownership
    // check): not a job of any type.
    if record.job_type.is_empty() {
        return Err(EngineError::NotSubmittedThroughGaffer(
            record.job_id.clone(),
        ));
    }
    if record.job_type != J::NAME {
        return Err(Error::WrongJobType {
            id: record.job_id.clone(),
            expected: J::NAME.into(),
            actual: record.job_type.clone(),
        });
    }
    match &record.outcome {
        Outcome::Succeeded(output) => {
            let decode = |bytes: &[u8]| {
                from_msgpack(bytes)
                    .map_err(|e| Error::decode(format!("output of `{}`", J::NAME), e))
            };
            // An inline output decodes in place; a blob is fetched first.
            let value = match output {
                OutputRef::Inline(bytes) => decode(bytes)?,
                OutputRef::Blob(_) => decode(&fetch(output).await?)?,
            };
            Ok(Ok(value))
        }
        Outcome::Failed { kind, message } => Ok(Err(JobError::failed(*kind, message.clone()))),
        Outcome::Cancelled => Ok(Err(JobError::cancelled())),
    }
}

impl<J: Job> JobHandle<J> {
    pub(crate) fn new(id: String, newly_submitted: bool, engine: Arc<dyn JobEngine>) -> Self {
        Self {
            id,
            newly_submitted,
            recorded: None,
            engine,
            _job: PhantomData,
        }
    }

    /// The handle a submission returns.
    pub(crate) fn submitted(submitted: Submitted, engine: Arc<dyn JobEngine>) -> Self {
        Self {
            id: submitted.run_id,
            newly_submitted: submitted.newly_submitted,
            recorded: submitted.recorded.map(|r| Arc::new(*r)),
            engine,
            _job: PhantomData,
        }
    }

    /// The job's id: a ULID, or the hex SHA-256 of its idempotency key.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the submission that made this handle created the job (false when
    /// it joined a live job or was answered from a recorded outcome).
    pub fn newly_submitted(&self) -> bool {
        self.newly_submitted
    }

    /// Wait for the job to end. `Err(`[`EngineError::JobNotFound`](crate::Error::JobNotFound)`)`
    /// if no record of the job exists: never submitted, or its record passed
    /// retention. A handle whose submission was answered from the job's
    /// recorded outcome answers from that record, without reading it again
    /// (even once retention removed it from the store).
    /// Called from inside a job, the wait gives that job's worker slot back
    /// while it lasts (see [`JobContext::submit`](crate::JobContext::submit)).
    pub async fn join(&self) -> Result<Result<J::Output, JobError>> {
        let record = match &self.recorded {
            Some(recorded) => {
                self.engine
                    .await_recorded(self.id.clone(), OutcomeRecord::clone(recorded))
                    .await?
            }
            None => self.engine.await_job(self.id.clone()).await?,
        };
        decode_outcome::<J>(self.engine.as_ref(), &record).await
    }

    /// Wait at most `timeout`; `Ok(None)` if the job has not ended by then.
    pub async fn join_timeout(
        &self,
        timeout: Duration,
    ) -> Result<Option<Result<J::Output, JobError>>> {
        match tokio::time::timeout(timeout, self.join()).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The recorded result, without waiting.
    ///
    /// One meaning on every read path (`join`, `outcome`, `status`,
    /// `cancel`, and their messages):
    /// - `Ok(Some(result))`: the job ended (durably) with this result;
    /// - `Ok(None)`: the job exists and has not ended yet (queued, scheduled,
    ///   running, or its ending commit not yet durable);
    /// - `Err(`[`EngineError::JobNotFound`](crate::Error::JobNotFound)`)`:
    ///   no record of the job exists: it was never submitted, or its outcome
    ///   record passed the engine's [`retention`](crate::EngineBuilder::retention).
    pub async fn outcome(&self) -> Result<Option<Result<J::Output, JobError>>> {
        match self.engine.outcome(self.id.clone()).await? {
            Some(record) => decode_outcome::<J>(self.engine.as_ref(), &record)
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// Where the job is now; `Err(`[`EngineError::JobNotFound`](crate::Error::JobNotFound)`)`
    /// if no record of it exists (see [`outcome`](Self::outcome)).
    pub async fn status(&self) -> Result<JobState> {
        self.engine.status(self.id.clone()).await
    }

    /// Cancel the job.
    pub async fn cancel(&self) -> Result<CancelResult> {
        self.engine.cancel(self.id.clone()).await
    }

    /// The ids of the follow-up jobs this job's success created
    /// ([`JobContext::then`](crate::JobContext::then)), in the order it
    /// staged them: `Ok(None)` while the job has not ended, `Ok(Some([]))`
    /// if it ended without follow-ups (or did not succeed).
    pub async fn followups(&self) -> Result<Option<Vec<String>>> {
        Ok(self
            .engine
            .outcome(self.id.clone())
            .await?
            .map(|record| record.followups))
    }
}

impl<J: Job> IntoFuture for JobHandle<J> {
    type Output = std::result::Result<J::Output, JoinError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            match self.join().await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(JoinError::Job(e)),
                Err(e) => Err(JoinError::Infra(e)),
            }
        })
    }
}
