//! The graphile_worker child (`side-by-side peers --peers graphile`):
//! graphile_worker 0.14 (Rust, Postgres), the jobs workloads; see [`run`]
//! for what it does and lacks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use graphile_worker::{
    IntoTaskHandlerResult, JobSpec, LocalQueueConfig, TaskHandler, WorkerContext, WorkerOptions,
};
use serde::{Deserialize, Serialize};

use crate::ChildArgs;
use crate::child::{BoxErr, servers};
use crate::kinds::{Engine, Group, Workload};
use crate::meter::{COUNT, Meter, RUNS, emit};
use crate::plan::{IN_FLIGHT, jobs_note};

/// What the handlers computed, by input (`x + 1`, 0 until it ran):
/// graphile_worker keeps no result (a job's row is deleted when it
/// succeeds), so the submitter reads them here.
static OUTPUTS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Jobs that ran to success.
static DONE: AtomicUsize = AtomicUsize::new(0);
static DONE_NOTIFY: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn record(x: u64) {
    if let Some(slot) = OUTPUTS.lock().unwrap().get_mut(x as usize) {
        *slot = x + 1;
    }
    RUNS.fetch_add(1, Ordering::Relaxed);
    COUNT.fetch_add(1, Ordering::Relaxed);
    DONE.fetch_add(1, Ordering::SeqCst);
    DONE_NOTIFY.notify_one();
}

/// The plain job: input + 1, recorded.
#[derive(Serialize, Deserialize, Clone)]
struct GPlain {
    x: u64,
}

impl TaskHandler for GPlain {
    const IDENTIFIER: &'static str = "bench_plain";
    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        record(self.x);
        Ok::<(), String>(())
    }
}

/// The same job added with a job key.
#[derive(Serialize, Deserialize, Clone)]
struct GKeyed {
    x: u64,
}

impl TaskHandler for GKeyed {
    const IDENTIFIER: &'static str = "bench_keyed";
    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        record(self.x);
        Ok::<(), String>(())
    }
}

/// graphile_worker 0.14.1 in a fresh database on the server at
/// `SBS_PG_URL`: `WorkerOptions` with the two task types, `concurrency`
/// = the job workers (its default is the CPU count), everything else at
/// its defaults (its own pool of 20 connections, `LISTEN/NOTIFY` wakeups,
/// 1 s poll interval beside them, schema `graphile_worker` migrated at
/// `init`), its run loop spawned. At these defaults each job slot fetches
/// one job per wakeup (a notification or a poll tick) and then waits for
/// the next one, so once the inserts' notifications are used up it runs
/// about `concurrency` jobs per poll interval. `graphile-local-queue` adds
/// its `LocalQueue` at `LocalQueueConfig`'s defaults (batch fetches into a
/// local cache that the slots drain), its setting for throughput.
///
/// The same shape as gaffer's jobs workloads: N `add_job` calls with 64 in
/// flight, then every job awaited and checked. graphile_worker has no
/// result to await (it deletes a job's row when it succeeds), so the
/// handler records x + 1 in this process and the phase ends when all N
/// have run: cheaper than what gaffer and apalis do (persist each result
/// and read it back), and what a submitter in another process could not
/// do. Keyed: `JobSpec::job_key("k-{x}")` (default mode `replace`: a key
/// names a *pending* job; once the job has succeeded its row and key are
/// gone). So jobs_resubmit has no equivalent: the same keys again add N
/// new jobs that run again; the phase is not run.
pub async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    let workload = match a.group {
        Group::JobsPlain => Workload::JobsPlain,
        Group::JobsKeyed => Workload::JobsKeyed,
        Group::Bulk | Group::Raw => return Err("graphile runs the jobs workloads only".into()),
    };
    let db = servers::PgDb::create().await?;
    *OUTPUTS.lock().unwrap() = vec![0; a.n];
    let mut options = WorkerOptions::default()
        .database_url(&db.url)
        .concurrency(a.job_workers)
        .define_job::<GPlain>()
        .define_job::<GKeyed>()
        .listen_os_shutdown_signals(false);
    if a.engine == Engine::GraphileLocalQueue {
        options = options.local_queue(LocalQueueConfig::default());
    }
    let worker = options.init().await?;
    let durability = {
        let pool = sqlx::PgPool::connect(&db.url).await?;
        let d = servers::pg_durability(&pool).await;
        pool.close().await;
        d
    };
    let utils = worker.create_utils();
    let running = tokio::spawn(async move { worker.run().await });

    let m = Meter::start(workload.label());
    let keyed = workload == Workload::JobsKeyed;
    let added: Vec<Result<(), String>> = futures::stream::iter(0..a.n as u64)
        .map(|x| {
            let utils = utils.clone();
            async move {
                let r = if keyed {
                    let spec = JobSpec {
                        job_key: Some(format!("k-{x}")),
                        ..Default::default()
                    };
                    utils.add_job(GKeyed { x }, spec).await
                } else {
                    utils.add_job(GPlain { x }, JobSpec::default()).await
                };
                COUNT.fetch_add(1, Ordering::Relaxed);
                r.map(|_| ())
                    .map_err(|e| format!("add_job of {x} failed: {e}"))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    added.into_iter().collect::<Result<Vec<()>, String>>()?;
    loop {
        let notified = DONE_NOTIFY.notified();
        if DONE.load(Ordering::SeqCst) >= a.n {
            break;
        }
        notified.await;
    }
    let correct = OUTPUTS
        .lock()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(x, &v)| v == x as u64 + 1);
    let runs = m.runs();
    let (ok, note) = jobs_note(workload, a.n, correct, a.n, runs);
    let mut r = m.finish(a, workload, ok, note);
    r.durability = Some(durability);
    emit(&r);

    running.abort();
    let _ = running.await;
    db.drop_db().await?;
    Ok(())
}
