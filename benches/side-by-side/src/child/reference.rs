//! The reference child: `taquba-workflow` 0.11.0 (`jobs::JobRunner`,
//! `bulk::Bulk`) on its own queue, taquba 0.12, its phases run by the
//! shared plan.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::ChildArgs;
use crate::child::{BoxErr, temp_dir};
use crate::kinds::{Group, StoreKind};
use crate::meter::RUNS;
use crate::plan::{self, BulkBatch, JobsEngine, Keyed, Plain, Tally};

pub async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    use taquba012::object_store::{ObjectStore, local::LocalFileSystem, memory::InMemory};
    let dir = temp_dir(a)?;
    let store: Arc<dyn ObjectStore> = match a.store {
        StoreKind::Local => Arc::new(LocalFileSystem::new_with_prefix(dir.path())?),
        StoreKind::Memory => Arc::new(InMemory::new()),
        StoreKind::S3 | StoreKind::LocalFsync => {
            return Err("the reference runs on --store local and memory only here".into());
        }
    };
    let mut opts = taquba012::OpenOptions::default();
    if let Some(f) = a.flush.interval() {
        opts = opts.flush_interval(f);
    }
    let queue = Arc::new(taquba012::Queue::open_with_options(store.clone(), "queue", opts).await?);
    match a.group {
        Group::JobsKeyed | Group::JobsPlain => {
            use taquba_workflow::jobs::JobRunner;
            let mut runner = JobRunner::builder(queue, store)
                .max_concurrent_jobs(a.job_workers)
                .register::<Keyed>()
                .register::<Plain>()
                .build();
            let worker = runner.spawn(std::future::pending::<()>());
            plan::jobs_phases(a, a.group.phases(), &Jobs(&runner)).await?;
            plan::shutdown(async {
                worker.shutdown().await?;
                Ok(())
            })
            .await?;
        }
        Group::Bulk => {
            use taquba_workflow::bulk::Bulk;
            let mut bulk = Bulk::builder(queue, store, RPipe)
                .max_concurrent(a.conc)
                .build();
            let worker = bulk.spawn(std::future::pending::<()>());
            {
                let batch = bulk.batch("bench")?;
                plan::bulk_phases(a, a.group.phases(), &batch).await?;
            }
            plan::shutdown(async {
                worker.shutdown().await?;
                Ok(())
            })
            .await?;
        }
        Group::Raw => unreachable!("raw runs on the raw engine"),
    }
    drop(dir);
    Ok(())
}

/// The reference's jobs, as the plan submits them.
struct Jobs<'a>(&'a taquba_workflow::jobs::JobRunner);

impl JobsEngine for Jobs<'_> {
    type SubmitError = taquba_workflow::Error;
    type JoinError = taquba_workflow::jobs::JoinError;
    type KeyedHandle = taquba_workflow::jobs::JobHandle<Keyed>;
    type PlainHandle = taquba_workflow::jobs::JobHandle<Plain>;

    async fn submit_keyed(
        &self,
        job: Keyed,
    ) -> Result<(Self::KeyedHandle, bool), Self::SubmitError> {
        self.0.submit(job).await.map(|h| {
            let new = h.newly_submitted();
            (h, new)
        })
    }

    async fn submit_plain(
        &self,
        job: Plain,
    ) -> Result<(Self::PlainHandle, bool), Self::SubmitError> {
        self.0.submit(job).await.map(|h| {
            let new = h.newly_submitted();
            (h, new)
        })
    }
}

impl BulkBatch for taquba_workflow::bulk::Batch<'_, RPipe> {
    async fn run(&self, n: usize) -> Result<Tally, BoxErr> {
        let report = taquba_workflow::bulk::Batch::run(self, 0..n as u64).await?;
        Ok(Tally {
            succeeded: report.succeeded,
            failed: report.failed,
            total: report.total,
        })
    }

    async fn completed(&self) -> Option<usize> {
        self.progress().map(|p| p.completed)
    }
}

// ---------------------------------------------------------------- the job and the pipeline

impl taquba_workflow::jobs::Job for Keyed {
    const NAME: &'static str = "bench.add_one_keyed";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: taquba_workflow::jobs::JobContext<'_>) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("k-{}", self.x))
    }
}

impl taquba_workflow::jobs::Job for Plain {
    const NAME: &'static str = "bench.add_one";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: taquba_workflow::jobs::JobContext<'_>) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
}

struct RPipe;

impl taquba_workflow::bulk::Pipeline for RPipe {
    type Input = u64;
    type Output = u64;
    type Error = taquba_workflow::StepError;
    async fn run(
        &self,
        ctx: &taquba_workflow::bulk::BulkCtx<u64>,
    ) -> Result<u64, taquba_workflow::StepError> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        let memo = ctx.memo();
        let x = ctx.input;
        let a: u64 = memo
            .memoized("parse", async { Ok::<_, taquba_workflow::StepError>(x) })
            .await?;
        let b: u64 = memo
            .memoized("enrich", async { Ok::<_, taquba_workflow::StepError>(a) })
            .await?;
        let c: u64 = memo
            .memoized("score", async { Ok::<_, taquba_workflow::StepError>(b) })
            .await?;
        Ok(c)
    }
}
