//! The apalis child (`side-by-side peers`): apalis 1.0 on apalis-sqlite
//! 1.0, the jobs workloads only; see [`run`] for what it does and lacks.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;

use crate::ChildArgs;
use crate::child::{BoxErr, temp_dir};
use crate::kinds::{Group, StoreKind, Workload};
use crate::meter::{COUNT, Meter, RUNS, emit};
use crate::plan::{IN_FLIGHT, Keyed, Plain, jobs_note};

/// The job's input, for the apalis side (one handler for both job types).
trait HasX {
    fn x(&self) -> u64;
}

impl HasX for Plain {
    fn x(&self) -> u64 {
        self.x
    }
}

impl HasX for Keyed {
    fn x(&self) -> u64 {
        self.x
    }
}

/// apalis's handler: input + 1.
async fn apalis_add_one<T: HasX>(job: T) -> Result<u64, apalis::prelude::BoxDynError> {
    RUNS.fetch_add(1, Ordering::Relaxed);
    Ok(job.x() + 1)
}

fn push_note(note: &mut String, more: &str) {
    if !note.is_empty() {
        note.push_str("; ");
    }
    note.push_str(more);
}

/// `PRAGMA synchronous` on each of the pool's connections, opened at once:
/// apalis-sqlite's `setup` sets it to OFF on the connection that runs it
/// (the setting is per connection); a connection opened later has SQLite's
/// default (2 = FULL).
async fn apalis_synchronous(pool: &apalis_sqlite::SqlitePool) -> String {
    let mut conns = Vec::new();
    let mut modes = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        match tokio::time::timeout(Duration::from_secs(1), pool.acquire()).await {
            Ok(Ok(mut c)) => {
                let m: Result<(i64,), _> = sqlx::query_as("PRAGMA synchronous")
                    .fetch_one(&mut *c)
                    .await;
                modes.push(
                    m.map(|m| m.0.to_string())
                        .unwrap_or_else(|e| format!("?{e}")),
                );
                conns.push(c);
            }
            _ => break,
        }
    }
    format!(
        "PRAGMA synchronous per pool connection [{}] (0 = OFF, 2 = FULL)",
        modes.join(",")
    )
}

/// Push `n` jobs, `IN_FLIGHT` pushes in flight, each with a task id of ours
/// (apalis's `push` returns no id) and, keyed, an idempotency key. Returns
/// (task id, x) for each push.
async fn apalis_push<T>(
    storage: &apalis_sqlite::SqliteStorage<T>,
    n: usize,
    keyed: bool,
    make: fn(u64) -> T,
) -> Result<Vec<(String, u64)>, BoxErr>
where
    T: Serialize + serde::de::DeserializeOwned + Send + Sync + Unpin + 'static,
{
    use apalis::prelude::{TaskBuilder, TaskId, TaskSink};
    let pushed: Vec<Result<(String, u64), String>> = futures::stream::iter(0..n as u64)
        .map(|x| {
            let mut s = storage.clone();
            async move {
                let id = TaskId::from_ulid(ulid::Ulid::generate());
                let mut b = TaskBuilder::new(make(x)).task_id(id.clone());
                if keyed {
                    b = b.idempotency_key(format!("k-{x}"));
                }
                let r = s.push_task(b.build()).await;
                COUNT.fetch_add(1, Ordering::Relaxed);
                r.map(|()| (id.to_string(), x))
                    .map_err(|e| format!("push of {x} failed: {e}"))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    Ok(pushed.into_iter().collect::<Result<Vec<_>, String>>()?)
}

/// Wait for every pushed job's result through apalis's `wait_for` (one
/// stream over all the ids: it polls the table, sleeping 500 ms whenever a
/// poll finds nothing new) and check each is Done with x + 1. Returns
/// whether all were correct.
async fn apalis_await<T>(
    storage: &apalis_sqlite::SqliteStorage<T>,
    pushed: &[(String, u64)],
) -> Result<bool, BoxErr> {
    use apalis::prelude::{Status, TaskId, WaitForCompletion};
    let want: std::collections::HashMap<&str, u64> =
        pushed.iter().map(|(id, x)| (id.as_str(), *x)).collect();
    let ids: Vec<TaskId> = pushed
        .iter()
        .map(|(id, _)| id.parse::<TaskId>())
        .collect::<Result<_, _>>()?;
    let mut s = storage.clone();
    let mut results = WaitForCompletion::<u64>::wait_for(&mut s, ids);
    let mut seen = 0usize;
    let mut correct = true;
    while let Some(r) = results.next().await {
        let r = r?;
        seen += 1;
        COUNT.fetch_add(1, Ordering::Relaxed);
        let x = want.get(r.task_id.to_string().as_str()).copied();
        correct &= r.status == Status::Done && x.is_some_and(|x| r.result == Ok(x + 1));
    }
    if seen != pushed.len() {
        return Err(format!(
            "wait_for ended after {seen} of {} results (apalis's stream ends silently when a poll fails)",
            pushed.len()
        )
        .into());
    }
    Ok(correct)
}

/// apalis 1.0 on apalis-sqlite 1.0: a SQLite file in the temp dir, set up
/// as apalis-sqlite's README's event-driven worker
/// (`SqliteStorage::connect_with_callback`, `SqliteStorage::setup`: WAL
/// journal, `synchronous = OFF` on the connection that runs it; a poll
/// strategy woken by SQLite's insert hook, with a 500 ms interval beside
/// it), one worker with `concurrency(job_workers)` and
/// `parallelize(tokio::spawn)` (apalis's README), default `Config` (fetch
/// batches of 10, results persisted). Its basic polling worker (no
/// strategy) is no option here: after a fetch finds nothing it sleeps until
/// its next heartbeat, 30 s.
///
/// The same shape as gaffer's jobs workloads: N pushes with 64 in flight,
/// then every result awaited and checked. apalis's `push` returns no task
/// id, so each task is built with an id of ours; results are awaited through
/// `WaitForCompletion::wait_for`, which polls. Keyed: the task carries
/// `idempotency_key("k-{x}")` (unique per queue; a duplicate insert is
/// `ON CONFLICT DO NOTHING`). jobs_resubmit pushes the same N keyed tasks
/// again: apalis answers each with `Ok(())` and inserts nothing, but tells
/// the caller neither that it was a duplicate nor the original's id, so
/// there is no result to await: the phase times the pushes only and checks,
/// after a 1 s pause outside the timing, that none ran.
pub async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    use apalis::prelude::{BackendExt, ParallelizeExt, Strategy, WorkerBuilder, WorkerBuilderExt};
    use apalis_sqlite::{Config, SqliteStorage};
    if a.store != StoreKind::Local {
        return Err("apalis runs on --store local only (a SQLite file)".into());
    }
    let dir = temp_dir(a)?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("apalis.db").display()
    );
    let (pool, listener) = SqliteStorage::connect_with_callback(&url)?;
    SqliteStorage::setup(&pool).await?;
    let durability = apalis_synchronous(&pool).await;
    let strategy = Strategy::new()
        .stream(listener.ready_chunks(Config::default().batch_size))
        .interval(Duration::from_millis(500));
    match a.group {
        Group::JobsPlain => {
            let storage = SqliteStorage::<Plain>::new(&pool);
            let worker = WorkerBuilder::new("bench-plain")
                .backend(storage.clone().poll_with_strategy(strategy))
                .concurrency(a.job_workers)
                .parallelize(tokio::spawn)
                .build(apalis_add_one::<Plain>);
            let running = tokio::spawn(worker.run());
            let m = Meter::start(Workload::JobsPlain.label());
            let pushed = apalis_push(&storage, a.n, false, |x| Plain { x }).await?;
            let correct = apalis_await(&storage, &pushed).await?;
            let runs = m.runs();
            let (ok, mut note) = jobs_note(Workload::JobsPlain, a.n, correct, a.n, runs);
            push_note(&mut note, &durability);
            emit(&m.finish(a, Workload::JobsPlain, ok, note));
            running.abort();
        }
        Group::JobsKeyed => {
            let storage = SqliteStorage::<Keyed>::new(&pool);
            let worker = WorkerBuilder::new("bench-keyed")
                .backend(storage.clone().poll_with_strategy(strategy))
                .concurrency(a.job_workers)
                .parallelize(tokio::spawn)
                .build(apalis_add_one::<Keyed>);
            let running = tokio::spawn(worker.run());
            let m = Meter::start(Workload::JobsKeyed.label());
            let pushed = apalis_push(&storage, a.n, true, |x| Keyed { x }).await?;
            let correct = apalis_await(&storage, &pushed).await?;
            let runs = m.runs();
            let (ok, mut note) = jobs_note(Workload::JobsKeyed, a.n, correct, a.n, runs);
            push_note(&mut note, &durability);
            emit(&m.finish(a, Workload::JobsKeyed, ok, note));

            let m = Meter::start(Workload::JobsResubmit.label());
            apalis_push(&storage, a.n, true, |x| Keyed { x }).await?;
            let mut r = m.finish(a, Workload::JobsResubmit, true, String::new());
            tokio::time::sleep(Duration::from_secs(1)).await;
            let runs = m.runs();
            r.runs = runs;
            r.ok = runs == 0;
            r.note = format!(
                "pushes only: apalis answers a duplicate with Ok(()), no id, no result to await; {runs} ran within 1 s"
            );
            emit(&r);
            running.abort();
        }
        Group::Bulk | Group::Raw => {
            return Err("apalis runs the jobs workloads only".into());
        }
    }
    pool.close().await;
    drop(dir);
    Ok(())
}
