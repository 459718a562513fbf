//! The seam between the engine and user code: a type-erased handler that
//! takes a delivery (bytes) and returns a verdict (bytes or a failure).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use taquba::LeaseHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::exec::effects::{CostMeter, Effects};
use crate::exec::memo::Memo;
use crate::jobs::submit::{CancelResult, JobState, SubmitRequest, Submitted};
use crate::layout::records::FailureKind;
use crate::layout::records::{OutcomeRecord, OutputRef};
pub use crate::services::Kind;

/// One delivery of a job to its handler.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The attempt's `gaffer.job` span (job type, id, attempt, batch and
    /// key of an item, queue): the user's code runs inside it.
    pub span: tracing::Span,
    /// Run id: the id handles answer to.
    pub run_id: String,
    /// taquba job id of this delivery.
    pub job_id: String,
    /// Job type name.
    pub job_type: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Attempt limit of the job.
    pub max_attempts: u32,
    /// Headers given at submission (reserved `gaffer.` headers removed).
    pub headers: Arc<HashMap<String, String>>,
    /// The encoded job.
    pub payload: Arc<[u8]>,
    /// Lease of the delivery: extend it for long work.
    pub lease: LeaseHandle,
    /// Fires when the job is cancelled (or the store closes), and when the
    /// attempt runs past its timeout.
    pub cancel: CancellationToken,
    /// The attempt's timeout (the job's, else its type's): past it the
    /// attempt is cancelled and counted as a failed attempt.
    pub timeout: Option<std::time::Duration>,
    /// The run's memo.
    pub memo: Memo,
    /// Effects applied with the successful settlement.
    pub effects: Effects,
    /// Cost recorded by this attempt (kept in a bulk item's marker).
    pub cost: CostMeter,
    /// For a bulk item: its batch id and key.
    pub item: Option<ItemInfo>,
    /// What the job can reach of its engine (KV reads, child submissions and
    /// waits for them).
    pub engine: Arc<dyn JobEngine>,
    /// The batch run this job completes, if it is a batch's completion job.
    pub completes: Option<CompletedBatch>,
    /// The worker slot it runs in (a wait for another job parks it).
    pub(crate) parking: crate::exec::parking::Parking,
    /// Where a pause (a wait for a signal, a sleep, a snooze) suspends the
    /// attempt.
    pub suspend: crate::exec::suspend::Suspend,
    /// The signal the run waited for last (its deadline), from its run
    /// record: a wait on the same name keeps that deadline.
    pub wait: Option<crate::layout::records::WaitRecord>,
    /// The run's latest sleep, from its run record: the sleeps before it
    /// answer at once, and it answers at its end.
    pub sleep: Option<crate::layout::records::SleepRecord>,
    /// How many times its run snoozed before this attempt.
    pub snoozes: u32,
    /// The most snoozes its run may make (its type's, else the engine's).
    pub max_snoozes: u32,
    /// The workflow step the job is, from its run record: its dependencies'
    /// outputs are read by their names (`JobContext::dep`).
    pub step: Option<crate::layout::records::StepOf>,
}

/// The batch run a completion job completes (`Batch::on_complete`), from
/// its `gaffer.completes` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedBatch {
    /// Batch id.
    pub batch_id: String,
    /// The run's generation (1 for the first run; each run or resume adds 1).
    pub generation: u64,
    /// Items in the batch.
    pub total: u64,
    /// Items succeeded.
    pub succeeded: u64,
    /// Items failed.
    pub failed: u64,
    /// Items cancelled.
    pub cancelled: u64,
}

impl CompletedBatch {
    /// The header value.
    pub fn encode(&self) -> String {
        format!(
            "{},{},{},{},{},{}",
            self.total, self.succeeded, self.failed, self.cancelled, self.generation, self.batch_id
        )
    }

    /// Read a header value (`None` if it is not one).
    pub fn decode(value: &str) -> Option<Self> {
        let mut parts = value.splitn(6, ',');
        let mut number = || parts.next()?.parse::<u64>().ok();
        let (total, succeeded, failed, cancelled, generation) =
            (number()?, number()?, number()?, number()?, number()?);
        let batch_id = parts.next()?.to_string();
        Some(Self {
            batch_id,
            generation,
            total,
            succeeded,
            failed,
            cancelled,
        })
    }
}

/// Where a bulk item belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemInfo {
    /// Batch id.
    pub batch_id: String,
    /// Item key.
    pub key: String,
}

/// What a delivery came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The job returned this encoded output.
    Succeeded(Vec<u8>),
    /// The job failed.
    Failed {
        /// Retry or not.
        kind: FailureKind,
        /// Why.
        message: String,
    },
    /// The job paused its run (a wait for a signal, a sleep, a snooze): the
    /// attempt ended without an outcome and without spending itself.
    Pause(crate::exec::suspend::Pause),
}

impl Verdict {
    /// A permanent failure.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::Failed {
            kind: FailureKind::Permanent,
            message: message.into(),
        }
    }

    /// A transient failure.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::Failed {
            kind: FailureKind::Transient,
            message: message.into(),
        }
    }
}

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a running job can reach of its engine: submit jobs, follow them, read
/// a success output, read the KV namespace. The engine's handle (`EngineRef`)
/// implements it; a delivery carries it, so the handler seam knows nothing of
/// the engine's actors. A wait made through it from inside a job parks the
/// job's slot (see `parking`).
pub trait JobEngine: Send + Sync + std::fmt::Debug + 'static {
    /// Submit a job.
    fn submit(&self, request: SubmitRequest) -> BoxFuture<Result<Submitted>>;
    /// Wait for a job to end.
    fn await_job(&self, run_id: String) -> BoxFuture<Result<OutcomeRecord>>;
    /// Wait for a job whose submission was answered from this record.
    fn await_recorded(
        &self,
        run_id: String,
        record: OutcomeRecord,
    ) -> BoxFuture<Result<OutcomeRecord>>;
    /// The outcome of a job if it has durably ended (`None` while it exists
    /// and has not; `JobNotFound` if no record of it exists).
    fn outcome(&self, run_id: String) -> BoxFuture<Result<Option<OutcomeRecord>>>;
    /// The steps workflow step `step` needs, by name (its record's).
    fn step_deps(&self, step: crate::layout::records::StepOf) -> BoxFuture<Result<Vec<String>>>;
    /// The outcome records of a running step's dependencies, as committed
    /// (not waiting for their durability, which the step's own creation
    /// implies), in order; `None` where there is none.
    fn committed_outcomes(
        &self,
        run_ids: Vec<String>,
    ) -> BoxFuture<Result<Vec<Option<OutcomeRecord>>>>;
    /// Where a job is now (`JobNotFound` if no record of it exists).
    fn status(&self, run_id: String) -> BoxFuture<Result<JobState>>;
    /// Cancel a job.
    fn cancel(&self, run_id: String) -> BoxFuture<Result<CancelResult>>;
    /// The bytes of a success output (a blob is fetched).
    fn output_bytes(&self, output: OutputRef) -> BoxFuture<Result<Vec<u8>>>;
    /// A committed value of the queue's KV namespace.
    fn kv_get(&self, key: Vec<u8>) -> BoxFuture<Result<Option<Vec<u8>>>>;
    /// `UnknownJobType` unless `job_type` is a job type of this engine.
    fn check_job_type(&self, job_type: &str) -> Result<()>;
    /// Now, on the queue's clock (epoch ms): what a wait's deadline is
    /// measured on.
    fn now_ms(&self) -> u64;
}

/// User code behind a job type, with its types erased.
pub trait ErasedHandler: Send + Sync + 'static {
    /// Run one delivery. May panic: the handler worker that runs it fails and
    /// is replaced, and the attempt counts as failed (the job is retried).
    fn run(&self, delivery: Delivery) -> BoxFuture<Verdict>;
}

/// A registered job type.
#[derive(Clone)]
pub struct Registration {
    /// Job type name (`Job::NAME`).
    pub job_type: String,
    /// The handler.
    pub handler: Arc<dyn ErasedHandler>,
    /// Workers of this type's pool (its own capacity, over its own queue);
    /// `None` = the engine's `max_concurrent_jobs` for a job type, 200 for a
    /// pipeline.
    pub concurrency: Option<usize>,
    /// Job type or pipeline.
    pub kind: Kind,
    /// At most this many attempts start per period (`None`: no limit).
    pub rate: Option<crate::exec::rate::RateLimit>,
    /// Claim round robin over the values of a header (`None`: in queue
    /// order).
    pub fair_by: Option<crate::exec::fair::Fairness>,
    /// At most this many jobs of one header value at once (`None`: no
    /// limit per value).
    pub key_concurrency: Option<crate::exec::fair::Concurrency>,
    /// Each attempt is cancelled past this and counted as failed (`None`:
    /// no limit); a job's own timeout beats it.
    pub timeout: Option<std::time::Duration>,
    /// The most snoozes one job may make (`None`: the engine's
    /// `Settings::max_snoozes`).
    pub max_snoozes: Option<u32>,
}

/// Default workers of a pipeline (the reference's `max_concurrent`).
pub const DEFAULT_PIPELINE_CONCURRENCY: usize = 200;

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("job_type", &self.job_type)
            .field("concurrency", &self.concurrency)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}
/// The handler of a queue whose job type or pipeline is not registered (jobs
/// a previous version of the program left): each job fails permanently, with
/// its record, so its handles learn why.
pub(crate) struct Unregistered;

impl ErasedHandler for Unregistered {
    fn run(&self, delivery: Delivery) -> BoxFuture<Verdict> {
        let message = if delivery.job_type.is_empty() {
            "job has no `gaffer.type` header: it was not submitted through gaffer".to_string()
        } else if delivery.item.is_some() {
            format!("no pipeline `{}` is registered", delivery.job_type)
        } else {
            format!("no handler registered for job type `{}`", delivery.job_type)
        };
        Box::pin(async move { Verdict::permanent(message) })
    }
}
