//! `gaffer`: look inside a gaffer store from a shell, read-only.
//!
//! The store is opened through taquba's `QueueReader` in `FollowLatest` mode:
//! nothing is ever written, so read-only credentials suffice and a running
//! engine is never fenced or slowed. Every command prints aligned tables, or
//! with `--json` one JSON document whose field names are documented on the
//! types in [`report`].
//!
//! Exit status: 0 on success, 1 on an error (one line on stderr), 3 when
//! `gaffer health` finds no live writer.

mod error;
mod read;
mod report;
mod table;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use crate::error::CliError;

/// Look inside a gaffer store (read-only: never opens a writer).
#[derive(Debug, Parser)]
#[command(name = "gaffer", version, about)]
struct Cli {
    /// The store: a local directory (as `EngineBuilder::local_dir`).
    #[arg(long, global = true, conflicts_with = "url", value_name = "PATH")]
    dir: Option<PathBuf>,
    /// The store: a URL (`s3://bucket/prefix`, `gs://…`, `az://…`,
    /// `file:///dir`), configured from the provider variables.
    #[arg(long, global = true, value_name = "URL")]
    url: Option<String>,
    /// The queue's path inside the store (the engine's `queue_path`).
    #[arg(long, global = true, default_value = "queue")]
    queue_path: String,
    /// Prefix of the job types' queues (the engine's `queue_name`).
    #[arg(long, global = true, default_value = "jobs")]
    jobs_queue: String,
    /// Prefix of the pipelines' queues (the engine's `bulk_queue_name`).
    #[arg(long, global = true, default_value = "bulk-items")]
    bulk_queue: String,
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// A state to list jobs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// Waiting to be claimed.
    Queued,
    /// Waiting for its time (run_at or a retry's backoff).
    Scheduled,
    /// Claimed by a handler.
    Running,
    /// Dead-lettered (failed or cancelled).
    Dead,
    /// Ended with an output.
    Succeeded,
    /// Ended with a failure.
    Failed,
    /// Cancelled.
    Cancelled,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Per queue (one per job type and pipeline): pending, scheduled,
    /// running, done, dead.
    Stats,
    /// Jobs: running, queued and scheduled, then finished ones newest first.
    Jobs {
        /// Only jobs in this state.
        #[arg(long)]
        state: Option<StateArg>,
        /// Only jobs of this type (or pipeline).
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// At most this many jobs (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this cursor: the `next` a previous page printed.
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
    },
    /// One job: its run or outcome record, attempts, output or error.
    Job {
        /// The job's id (its run id, as `JobHandle::id`), or a queue job id.
        id: String,
    },
    /// Dead letters with their failure records.
    Dead {
        /// Only dead letters of this type (or pipeline).
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// At most this many per queue.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Every batch and its status.
    Batches {
        /// At most this many batches.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One batch: total, succeeded, failed, outstanding, cost.
    Batch {
        /// The batch id.
        id: String,
        /// Redraw a progress bar (items settled, rate, time left) until the
        /// batch has no outstanding item, then print its status. Stops with
        /// exit status 3 if the engine's writer stops meanwhile.
        #[arg(long)]
        watch: bool,
        /// With `--watch`: read the batch this often, in milliseconds.
        #[arg(long, default_value_t = 500)]
        every_ms: u64,
    },
    /// The writer's heartbeat and the store's activity; exit status 0 when a
    /// writer is alive, 3 when it is stale, closed or absent.
    Health,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&CliError::Runtime(e)),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

fn fail(e: &CliError) -> ExitCode {
    eprintln!("gaffer: {e}");
    ExitCode::from(1)
}

async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let store = read::Store::open(
        cli.dir.as_deref(),
        cli.url.as_deref(),
        &cli.queue_path,
        &cli.jobs_queue,
        &cli.bulk_queue,
    )
    .await?;
    let result = command(&store, &cli).await;
    store.close().await;
    result
}

async fn command(store: &read::Store, cli: &Cli) -> Result<ExitCode, CliError> {
    let json = cli.json;
    match &cli.command {
        Command::Stats => report::print(json, &store.stats().await?)?,
        Command::Jobs {
            state,
            job_type,
            limit,
            after,
        } => report::print(
            json,
            &store
                .jobs(*state, job_type.as_deref(), *limit, after.as_deref())
                .await?,
        )?,
        Command::Job { id } => report::print(json, &store.job(id).await?)?,
        Command::Dead { job_type, limit } => {
            report::print(json, &store.dead(job_type.as_deref(), *limit).await?)?
        }
        Command::Batches { limit } => report::print(json, &store.batches(*limit).await?)?,
        Command::Batch {
            id, watch: false, ..
        } => report::print(json, &store.batch(id).await?)?,
        Command::Batch {
            id,
            watch: true,
            every_ms,
        } => return watch::batch(store, id, json, Duration::from_millis(*every_ms)).await,
        Command::Health => {
            let health = store.health().await?;
            report::print(json, &health)?;
            if !health.alive {
                return Ok(ExitCode::from(3));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
