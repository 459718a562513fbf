//! side-by-side's effectum child (`sbs-effectum child --engine effectum
//! ...`): effectum 0.7 (embedded SQLite; unmaintained: its last release,
//! 0.7.0, and last commit are from 2024) on jobs_plain, measured and
//! reported as the harness's other children are: the harness's own
//! arguments, meter and checks, compiled from its sources (`../src`).
//!
//! Its own workspace because effectum's SQLite (rusqlite 0.31,
//! libsqlite3-sys 0.28) cannot link beside the harness's sqlx 0.9.

#[path = "../../src/args.rs"]
mod args;
#[path = "../../src/kinds.rs"]
#[allow(dead_code)]
mod kinds;
#[path = "../../src/meter.rs"]
#[allow(dead_code)]
mod meter;
#[path = "../../src/plan.rs"]
#[allow(dead_code)]
mod plan;

/// What `plan` names as `crate::child`.
mod child {
    pub type BoxErr = Box<dyn std::error::Error + Send + Sync>;
}

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::{Parser, Subcommand};
use effectum::{Job, JobRunner, JobState, Queue, RunningJob, Worker};
use futures::StreamExt;

use args::ChildArgs;
use child::BoxErr;
use kinds::{Engine, Group, StoreKind, Workload};
use meter::{COUNT, Meter, RUNS, emit, set_phase, spawn_progress_ticker};
use plan::{IN_FLIGHT, Plain, jobs_note};

#[derive(Parser, Debug)]
#[command(name = "sbs-effectum")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run one workload group of effectum and print RESULT lines.
    Child(ChildArgs),
}

fn main() {
    let Cmd::Child(a) = Cli::parse().cmd;
    spawn_progress_ticker();
    set_phase("startup");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let res = rt.block_on(run(&a));
    set_phase("exit");
    if let Err(e) = res {
        eprintln!("child error: {e}");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "ERROR {}", e.to_string().replace('\n', " | "));
        let _ = out.flush();
        std::process::exit(2);
    }
}

/// Jobs that ran to success (the handler's count; the phase then reads
/// every job's status and result from the queue).
static DONE: AtomicUsize = AtomicUsize::new(0);
static DONE_NOTIFY: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// effectum's handler: input + 1 (effectum stores the returned value as
/// the run's `info`).
async fn add_one(job: RunningJob, _ctx: Arc<()>) -> Result<u64, String> {
    let p: Plain = job.json_payload().map_err(|e| e.to_string())?;
    RUNS.fetch_add(1, Ordering::Relaxed);
    DONE.fetch_add(1, Ordering::SeqCst);
    DONE_NOTIFY.notify_one();
    Ok(p.x + 1)
}

/// `PRAGMA journal_mode` of the database file and `PRAGMA synchronous` of
/// a connection opened as effectum opens its own (effectum sets
/// `synchronous = normal` on its writer connection; it also sets `journal
/// = wal`, a pragma SQLite does not have, so the journal stays as the
/// file has it unless something else sets it).
fn sqlite_durability(path: &Path) -> String {
    let read = || -> rusqlite::Result<(String, i64)> {
        let c = rusqlite::Connection::open(path)?;
        let j: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        let s: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        Ok((j, s))
    };
    match read() {
        Ok((j, s)) => format!(
            "SQLite {}: journal_mode={j}; synchronous=NORMAL on effectum's writer (its source), {s} on a fresh connection (1 = NORMAL, 2 = FULL)",
            rusqlite::version()
        ),
        Err(e) => format!("? ({e})"),
    }
}

/// effectum 0.7.0: a `Queue` on a SQLite file in the temp dir, one
/// `Worker` with `max_concurrency(job_workers)` (effectum's default is 1),
/// everything else at its defaults.
///
/// jobs_plain as gaffer's: N `add_job` calls with 64 in flight, then every
/// job awaited and checked. effectum has no way to await a job (no
/// subscription, no wait call): the phase waits on the handler's count in
/// this process, then reads every job's status through
/// `Queue::get_job_status` (64 in flight) and checks each succeeded with
/// x + 1. effectum has no idempotency key (a job's `name` is a label, not
/// unique), so jobs_keyed and jobs_resubmit have no equivalent.
async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    if a.engine != Engine::Effectum || a.store != StoreKind::Local {
        return Err("this binary runs --engine effectum --store local only".into());
    }
    if a.group != Group::JobsPlain {
        return Err("effectum has no idempotency key: jobs-plain only".into());
    }
    let mut b = tempfile::Builder::new();
    b.prefix("sbs-effectum-");
    let dir = match &a.tmp_dir {
        Some(d) => b.tempdir_in(d)?,
        None => b.tempdir()?,
    };
    let path = dir.path().join("effectum.db");
    let queue = Queue::new(&path).await?;
    let durability = sqlite_durability(&path);
    let runner = JobRunner::builder("bench_plain", add_one).build();
    let concurrency = u16::try_from(a.job_workers)?;
    let worker = Worker::builder(&queue, Arc::new(()))
        .max_concurrency(concurrency)
        .jobs([runner])
        .build()
        .await?;

    let w = Workload::JobsPlain;
    let m = Meter::start(w.label());
    let queue_ref = &queue;
    let added: Vec<Result<(u64, uuid::Uuid), String>> = futures::stream::iter(0..a.n as u64)
        .map(|x| async move {
            let job = Job::builder("bench_plain")
                .json_payload(&Plain { x })
                .map_err(|e| e.to_string())?
                .build();
            let r = queue_ref.add_job(job).await;
            COUNT.fetch_add(1, Ordering::Relaxed);
            r.map(|id| (x, id))
                .map_err(|e| format!("add_job of {x} failed: {e}"))
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let added = added.into_iter().collect::<Result<Vec<_>, String>>()?;
    loop {
        let notified = DONE_NOTIFY.notified();
        let done = DONE.load(Ordering::SeqCst);
        COUNT.store(a.n + done, Ordering::Relaxed);
        if done >= a.n {
            break;
        }
        notified.await;
    }
    let checked: Vec<Result<bool, String>> = futures::stream::iter(added)
        .map(|(x, id)| async move {
            let s = queue_ref
                .get_job_status(id)
                .await
                .map_err(|e| format!("status of {x}: {e}"))?;
            let out = s
                .run_info
                .last()
                .and_then(|r| serde_json::from_str::<u64>(r.info.get()).ok());
            Ok(s.state == JobState::Succeeded && out == Some(x + 1))
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut correct = true;
    for c in checked {
        correct &= c?;
    }
    let runs = m.runs();
    let (ok, note) = jobs_note(w, a.n, correct, a.n, runs);
    let mut r = m.finish(a, w, ok, note);
    r.durability = Some(durability);
    emit(&r);

    set_phase("shutdown");
    worker.unregister(None).await?;
    queue.close(std::time::Duration::from_secs(5)).await?;
    set_phase("cleanup");
    drop(dir);
    Ok(())
}
