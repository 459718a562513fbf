//! The apalis children (`side-by-side peers`): apalis 1.0 on apalis-sqlite
//! 1.0 ([`sqlite`]), on apalis-postgres 1.0 ([`postgres`]) and on
//! apalis-redis 1.0 ([`redis`]), the jobs workloads only, the same phases
//! on each backend ([`phases`]); see [`sqlite`] for what they do and lack.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;

use apalis::prelude::{
    BackendExt, ParallelizeExt, Status, Strategy, TaskBuilder, TaskId, TaskSink, WaitForCompletion,
    WorkerBuilder, WorkerBuilderExt,
};

use crate::ChildArgs;
use crate::child::{BoxErr, servers, temp_dir};
use crate::kinds::{Engine, Group, StoreKind, Workload};
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
/// (task id, x) or the error, for each push.
async fn apalis_push<S, T, K>(
    storage: &S,
    n: usize,
    keyed: bool,
    make: fn(u64) -> T,
) -> Vec<Result<(String, u64), String>>
where
    S: TaskSink<T, K> + Clone + Send + 'static,
    T: Send + 'static,
{
    futures::stream::iter(0..n as u64)
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
        .await
}

/// Wait for every pushed job's result through apalis's `wait_for` (one
/// stream over all the ids: it polls the backend, sleeping whenever a poll
/// finds nothing new: 500 ms on SQLite and Postgres, 100 ms on Redis) and
/// check each is Done with x + 1. Returns whether all were correct.
async fn apalis_await<S>(storage: &S, pushed: &[(String, u64)]) -> Result<bool, BoxErr>
where
    S: WaitForCompletion<u64> + Clone,
{
    let want: std::collections::HashMap<&str, u64> =
        pushed.iter().map(|(id, x)| (id.as_str(), *x)).collect();
    let ids: Vec<TaskId> = pushed
        .iter()
        .map(|(id, _)| id.parse::<TaskId>())
        .collect::<Result<_, _>>()?;
    let mut s = storage.clone();
    let mut results = std::pin::pin!(s.wait_for(ids));
    let mut seen = 0usize;
    let mut wrong = 0usize;
    let mut first_wrong = String::new();
    while let Some(r) = results.next().await {
        let r = r?;
        seen += 1;
        COUNT.fetch_add(1, Ordering::Relaxed);
        let x = want.get(r.task_id.to_string().as_str()).copied();
        if !(r.status == Status::Done && x.is_some_and(|x| r.result == Ok(x + 1))) {
            wrong += 1;
            if first_wrong.is_empty() {
                first_wrong = format!(
                    "task {} (x {x:?}): status {:?}, attempt {}, result {:?}",
                    r.task_id, r.status, r.attempt, r.result
                );
            }
        }
    }
    if wrong > 0 {
        eprintln!("apalis: {wrong} of {seen} results wrong; first: {first_wrong}");
        println!("WRONG {wrong} of {seen}; first: {first_wrong}");
    }
    let correct = wrong == 0;
    if seen != pushed.len() {
        return Err(format!(
            "wait_for ended after {seen} of {} results (apalis's stream ends silently when a poll fails)",
            pushed.len()
        )
        .into());
    }
    Ok(correct)
}

/// The jobs phases on one apalis backend whose worker runs: jobs_plain
/// (`Plain`), or jobs_keyed then jobs_resubmit (`Keyed`). N pushes with 64
/// in flight, then every result awaited and checked. jobs_resubmit pushes
/// the same N keyed tasks again: SQLite and Redis answer each duplicate
/// with `Ok(())` and insert nothing, Postgres with a unique-violation
/// error; none tells the caller the original's id, so there is no result
/// to await: the phase times the pushes only and checks, after a 1 s pause
/// outside the timing, that none ran.
async fn phases<S, T, K>(
    a: &ChildArgs,
    storage: &S,
    durability: &str,
    make: fn(u64) -> T,
) -> Result<(), BoxErr>
where
    S: TaskSink<T, K> + WaitForCompletion<u64> + Clone + Send + 'static,
    T: Send + 'static,
{
    let first = match a.group {
        Group::JobsPlain => Workload::JobsPlain,
        Group::JobsKeyed => Workload::JobsKeyed,
        Group::Bulk | Group::Raw => return Err("apalis runs the jobs workloads only".into()),
    };
    let keyed = first == Workload::JobsKeyed;
    let m = Meter::start(first.label());
    let pushed = apalis_push(storage, a.n, keyed, make)
        .await
        .into_iter()
        .collect::<Result<Vec<_>, String>>()?;
    let correct = apalis_await(storage, &pushed).await?;
    let runs = m.runs();
    let (ok, note) = jobs_note(first, a.n, correct, a.n, runs);
    let mut r = m.finish(a, first, ok, note);
    r.durability = Some(durability.to_string());
    emit(&r);
    if !keyed {
        return Ok(());
    }
    let m = Meter::start(Workload::JobsResubmit.label());
    let pushed = apalis_push(storage, a.n, true, make).await;
    let mut r = m.finish(a, Workload::JobsResubmit, true, String::new());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let errors: Vec<&String> = pushed.iter().filter_map(|p| p.as_ref().err()).collect();
    let duplicates = errors
        .iter()
        .filter(|e| e.contains("duplicate key"))
        .count();
    let runs = m.runs();
    r.runs = runs;
    r.ok = runs == 0 && duplicates == errors.len();
    r.note = format!(
        "pushes only: no id of the original, no result to await; {} answered Ok(()), {duplicates} a duplicate-key error, {} another error{}; {runs} ran within 1 s",
        pushed.len() - errors.len(),
        errors.len() - duplicates,
        errors
            .iter()
            .find(|e| !e.contains("duplicate key"))
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    r.durability = Some(durability.to_string());
    emit(&r);
    Ok(())
}

/// One worker on `backend` (`concurrency(job_workers)`,
/// `parallelize(tokio::spawn)`, as apalis's README), running while the
/// phases run on `storage`.
macro_rules! with_worker {
    ($a:expr, $name:expr, $backend:expr, $storage:expr, $durability:expr, $t:ty, $make:expr) => {{
        let worker = WorkerBuilder::new($name)
            .backend($backend)
            .concurrency($a.job_workers)
            .parallelize(tokio::spawn)
            .build(apalis_add_one::<$t>);
        let running = tokio::spawn(worker.run());
        let r = phases($a, &$storage, &$durability, $make).await;
        running.abort();
        r
    }};
}

pub async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    match a.engine {
        Engine::Apalis => sqlite(a).await,
        Engine::ApalisPostgres => postgres(a).await,
        Engine::ApalisRedis => redis(a).await,
        e => Err(format!("not an apalis engine: {}", e.label()).into()),
    }
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
/// The same shape as gaffer's jobs workloads ([`phases`]). apalis's `push`
/// returns no task id, so each task is built with an id of ours; results
/// are awaited through `WaitForCompletion::wait_for`, which polls. Keyed:
/// the task carries `idempotency_key("k-{x}")` (unique per queue; a
/// duplicate insert is `ON CONFLICT DO NOTHING`).
async fn sqlite(a: &ChildArgs) -> Result<(), BoxErr> {
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
    let r = match a.group {
        Group::JobsPlain => {
            let storage = SqliteStorage::<Plain>::new(&pool);
            let backend = storage.clone().poll_with_strategy(strategy);
            with_worker!(a, "bench-plain", backend, storage, durability, Plain, |x| {
                Plain { x }
            })
        }
        _ => {
            let storage = SqliteStorage::<Keyed>::new(&pool);
            let backend = storage.clone().poll_with_strategy(strategy);
            with_worker!(a, "bench-keyed", backend, storage, durability, Keyed, |x| {
                Keyed { x }
            })
        }
    };
    pool.close().await;
    drop(dir);
    r
}

/// apalis 1.0 on apalis-postgres 1.0, in a fresh database on the server
/// at `SBS_PG_URL`: `PostgresStorage::setup` (its migrations), the storage
/// of its README's pubsub example (`with_pubsub()`: a worker woken by
/// Postgres `LISTEN/NOTIFY` on each insert, the storage's trigger), default
/// `Config` (fetch batches of 10, results persisted), sqlx's default pool
/// (10 connections). Duplicate keyed pushes fail with a unique violation
/// (`idx_jobs_idempotency_key`).
async fn postgres(a: &ChildArgs) -> Result<(), BoxErr> {
    use apalis_postgres::PostgresStorage;
    let db = servers::PgDb::create().await?;
    let pool = sqlx::PgPool::connect(&db.url).await?;
    PostgresStorage::setup(&pool).await?;
    let durability = servers::pg_durability(&pool).await;
    let r = match a.group {
        Group::JobsPlain => {
            let storage = PostgresStorage::<Plain>::new(&pool);
            let backend = storage.clone().with_pubsub();
            with_worker!(a, "bench-plain", backend, storage, durability, Plain, |x| {
                Plain { x }
            })
        }
        _ => {
            let storage = PostgresStorage::<Keyed>::new(&pool);
            let backend = storage.clone().with_pubsub();
            with_worker!(a, "bench-keyed", backend, storage, durability, Keyed, |x| {
                Keyed { x }
            })
        }
    };
    pool.close().await;
    db.drop_db().await?;
    r
}

/// apalis 1.0 on apalis-redis 1.0, on the server at `SBS_REDIS_URL`
/// (flushed first): the storage of its README's factory example
/// (`RedisStorageFactory`: one multiplexed connection, workers woken by the
/// pub/sub message each push publishes), a queue per job type (named
/// without `:`, which the factory's channel parsing splits on), default
/// `Config` otherwise (fetch batches of 10, results persisted). Pushes and
/// `wait_for` go through the same storage (the factory's backend derefs to
/// it). Duplicate keyed pushes are skipped by its Lua script (`SETNX` on
/// the key) and answered `Ok(())`.
async fn redis(a: &ChildArgs) -> Result<(), BoxErr> {
    use apalis::prelude::BackendFactory;
    use apalis_redis::Config;
    use apalis_redis::factory::RedisStorageFactory;
    let durability = servers::redis_fresh().await?;
    let client = apalis_redis::Client::open(servers::redis_url()?)?;
    let mut factory = RedisStorageFactory::new(client).await?;
    match a.group {
        Group::JobsPlain => {
            let backend = BackendFactory::<Plain>::create_with_config(
                &mut factory,
                Config::default().queue("bench-plain"),
            )?;
            let storage = (*backend).clone();
            with_worker!(a, "bench-plain", backend, storage, durability, Plain, |x| {
                Plain { x }
            })
        }
        _ => {
            let backend = BackendFactory::<Keyed>::create_with_config(
                &mut factory,
                Config::default().queue("bench-keyed"),
            )?;
            let storage = (*backend).clone();
            with_worker!(a, "bench-keyed", backend, storage, durability, Keyed, |x| {
                Keyed { x }
            })
        }
    }
}
