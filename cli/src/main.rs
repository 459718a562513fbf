//! `gaffer`: look inside a gaffer store from a shell, read-only.
//!
//! The store is opened through taquba's `QueueReader` in `FollowLatest` mode:
//! nothing is ever written, so read-only credentials suffice and a running
//! engine is never fenced or slowed. `health` and `stats` open it without
//! replaying the WAL and read the beat and the counters from the WAL
//! objects past the last memtable flush themselves (`gaffer_ops::unflushed`): the
//! cost of `health` does not grow with the WAL the writer has not flushed
//! yet, and `stats` costs about half a replay. Every command prints aligned tables, or
//! with `--json` one JSON document whose field names are documented on the
//! types in [`report`].
//!
//! Exit status: 0 on success, 1 on an error (one line on stderr), 3 when
//! `gaffer health` finds no live writer.

mod act;
mod error;
mod read;
mod report;
mod table;
mod watch;
mod web;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use gaffer_actors::engine::intake::IntakeOp;

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
    /// A shard set instead of one store: a URL template whose `{shard}`
    /// is each shard's index, two digits at least (as
    /// `gaffer::ShardSet::from_template`); needs `--shard-count`. `stats`
    /// `health`, `jobs` (a first page), `dead`, `batches` and `periodic`
    /// read every shard (one part each; `stats` adds them up too, `jobs`
    /// and `dead` print one listing merged over the set with a SHARD
    /// column, at most `--limit` rows); `job`, `batch`, `cancel` and
    /// `retry ID` the shard of the id; other commands, and any with
    /// `--shard`, the one shard it names.
    #[arg(long, global = true, conflicts_with_all = ["dir", "url"], requires = "shard_count", value_name = "TEMPLATE")]
    shards: Option<String>,
    /// How many shards the set has (fixed at deploy).
    #[arg(long, global = true, value_name = "N")]
    shard_count: Option<usize>,
    /// With `--shards`: the one shard to read or act on.
    #[arg(long, global = true, value_name = "INDEX")]
    shard: Option<usize>,
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
    /// Waiting for a signal (or its timeout).
    Waiting,
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
    /// running, done, dead. Beside a live engine, as of its latest
    /// snapshot of them (at most a few seconds old, said in the output).
    Stats {
        /// Count exactly now, from every WAL object past the writer's last
        /// memtable flush (up to thousands: about 0.5 s after 100 000 jobs).
        #[arg(long)]
        exact: bool,
    },
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
    /// Dead letters with their failure records. A job retried since its
    /// dead letter is listed by its latest dead letter only (or not at all
    /// while it runs again); `stats`'s dead count is the queue's own and
    /// still counts the older ones until the queue's dead retention.
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
    /// Periodic jobs: name, job type, schedule, missed-tick policy, last
    /// tick fired, next tick due.
    Periodic,
    /// The writer's heartbeat and the store's activity; exit status 0 when a
    /// writer is alive, 3 when it is stale, closed or absent.
    Health,
    /// Submit a job (through the store's inbox; the engine takes it at its
    /// next look). Exit 0 once submitted, 1 if refused, 3 if not taken in
    /// time.
    Submit {
        /// The job type.
        job_type: String,
        /// The job as JSON: its fields, as its Rust type serializes them
        /// (`--json` is the output format of every command).
        #[arg(value_name = "JOB_JSON")]
        job: String,
        /// An idempotency key.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Run a failed or cancelled job again under its id, or every failed
    /// job of a type.
    Retry {
        /// The job's id.
        #[arg(required_unless_present = "failed", conflicts_with = "failed")]
        id: Option<String>,
        /// Every failed job of `--type`.
        #[arg(long, requires = "job_type")]
        failed: bool,
        /// With `--failed`: the job type.
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// With `--failed`: only jobs that failed in the last this many
        /// seconds.
        #[arg(long, value_name = "SECS")]
        since_secs: Option<u64>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Cancel a job.
    Cancel {
        /// The job's id.
        id: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Pause a job type: nothing more of it is claimed, across restarts,
    /// until `resume`; nothing is failed.
    Pause {
        /// The job type.
        job_type: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Resume a paused job type.
    Resume {
        /// The job type.
        job_type: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Serve the web dashboard (all the above in a browser, live) until
    /// Ctrl-C. Asks for `Authorization: Bearer $GAFFER_WEB_TOKEN`, or
    /// basic auth `$GAFFER_WEB_USER`/`$GAFFER_WEB_PASSWORD`, when set.
    Web {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Serve under this path prefix (`/admin/jobs`).
        #[arg(long, default_value = "")]
        base_path: String,
        /// No actions: no button, every POST answers 403.
        #[arg(long)]
        read_only: bool,
    },
}

/// How a command that acts waits for the engine.
#[derive(Debug, clap::Args)]
struct WaitArgs {
    /// Return once the request is in the store, without waiting for the
    /// engine.
    #[arg(long)]
    no_wait: bool,
    /// Wait at most this long for the engine to apply it (exit 3 after).
    #[arg(long, default_value_t = 30)]
    wait_secs: u64,
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

fn ulid() -> String {
    ::ulid::Ulid::new().to_string()
}

async fn act_on(
    store: &read::Store,
    op: IntakeOp,
    request: String,
    job: Option<String>,
    wait: &WaitArgs,
    json: bool,
) -> Result<ExitCode, CliError> {
    let limit = Duration::from_secs(wait.wait_secs);
    act::send(store, op, request, job, wait.no_wait, limit, json).await
}

fn fail(e: &CliError) -> ExitCode {
    eprintln!("gaffer: {e}");
    ExitCode::from(1)
}

async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    if let Command::Web {
        listen,
        base_path,
        read_only,
    } = &cli.command
    {
        return web::serve(&cli, listen, base_path, *read_only).await;
    }
    if let Some(template) = &cli.shards {
        return run_on_shards(template, &cli).await;
    }
    let store = open(&cli, cli.dir.as_deref(), cli.url.as_deref()).await?;
    let result = command(&store, &cli).await;
    store.close().await;
    result
}

async fn open(
    cli: &Cli,
    dir: Option<&std::path::Path>,
    url: Option<&str>,
) -> Result<read::Store, CliError> {
    // `health` and `stats` read the flushed state and, of the WAL past it,
    // only the beat and the counters; every other command the whole state.
    let reading = match cli.command {
        Command::Health | Command::Stats { .. } => read::Reading::Flushed,
        _ => read::Reading::Replay,
    };
    Ok(read::Store::open(
        dir,
        url,
        &cli.queue_path,
        &cli.jobs_queue,
        &cli.bulk_queue,
        reading,
    )
    .await?)
}

/// A command on a shard set: `stats` and `health` on every shard (or the
/// `--shard`), one document with a part per shard; a command on an id on
/// the id's shard; any other on the `--shard`.
async fn run_on_shards(template: &str, cli: &Cli) -> Result<ExitCode, CliError> {
    let count = cli.shard_count.unwrap_or(0);
    if count == 0
        || count > gaffer_actors::layout::keys::MAX_SHARDS
        || !template.contains("{shard}")
    {
        return Err(CliError::BadInput(format!(
            "--shards needs a template with `{{shard}}` and --shard-count 1 to {}",
            gaffer_actors::layout::keys::MAX_SHARDS
        )));
    }
    if let Some(s) = cli.shard
        && s >= count
    {
        return Err(CliError::BadInput(format!(
            "--shard {s}: the set has shards 0 to {}",
            count - 1
        )));
    }
    let url = |shard: usize| gaffer_actors::layout::keys::shard_url(template, shard, count);
    let by_id = match &cli.command {
        Command::Job { id }
        | Command::Batch { id, .. }
        | Command::Cancel { id, .. }
        | Command::Retry { id: Some(id), .. } => Some(id),
        _ => None,
    };
    // Reads of the whole set: one part per shard (a listing, `limit` per
    // shard; `jobs` pages by cursor in one shard only).
    let every = cli.shard.is_none()
        && matches!(
            cli.command,
            Command::Stats { .. }
                | Command::Health
                | Command::Jobs { after: None, .. }
                | Command::Dead { .. }
                | Command::Batches { .. }
                | Command::Periodic
        );
    if !every {
        let shard = match (by_id, cli.shard) {
            (Some(id), _) => gaffer_actors::layout::keys::shard_of(id, count),
            (None, Some(s)) => s,
            (None, None) => {
                return Err(CliError::BadInput(
                    "with --shards, this command reads one shard: pass --shard INDEX".into(),
                ));
            }
        };
        let store = open_shard(cli, shard, count, &url(shard)).await?;
        let result = command(&store, cli).await;
        store.close().await;
        return result;
    }
    let mut parts = Vec::new();
    let mut over = OverSet {
        code: ExitCode::SUCCESS,
        total: matches!(cli.command, Command::Stats { .. }).then(report::Stats::default),
        ..OverSet::default()
    };
    for shard in 0..count {
        let store = open_shard(cli, shard, count, &url(shard)).await?;
        let part = shard_part(&store, cli, shard, url(shard), &mut over).await;
        store.close().await;
        parts.push(part?);
    }
    let (all, all_text) = match &cli.command {
        Command::Jobs { limit, .. } => report::as_report(cli.json, &over.jobs(*limit))?,
        Command::Dead { limit, .. } => report::as_report(cli.json, &over.dead(*limit))?,
        _ => (None, None),
    };
    report::print(
        cli.json,
        &report::Shards {
            shards: parts,
            total: over.total,
            all,
            all_text,
        },
    )?;
    Ok(over.code)
}

/// What a read of every shard gathers beside the shards' parts: the exit
/// status (3 when a shard has no live writer, `health`), `stats` added up,
/// and the rows of every shard's `jobs` or `dead` listing, each tagged
/// with its shard, for the listing merged over the set.
#[derive(Default)]
struct OverSet {
    code: ExitCode,
    total: Option<report::Stats>,
    jobs: Vec<report::JobRow>,
    dead: Vec<report::DeadRow>,
    /// A shard had more jobs than its page.
    more: bool,
}

impl OverSet {
    /// The merged `jobs` listing: live jobs first (running, queued,
    /// scheduled, dead; each oldest first), then finished ones newest
    /// first; at most `limit` (each shard listed at most `limit`, so the
    /// newest `limit` finished jobs of the set are among them).
    fn jobs(&mut self, limit: usize) -> report::Jobs {
        let rank = |state: &str| match state {
            "running" => 0,
            "queued" => 1,
            "scheduled" => 2,
            "dead" => 3,
            _ => 4,
        };
        let mut jobs = std::mem::take(&mut self.jobs);
        jobs.sort_by(|a, b| {
            let (ra, rb) = (rank(a.state), rank(b.state));
            ra.cmp(&rb).then_with(|| {
                if ra == 4 {
                    b.at_ms.cmp(&a.at_ms)
                } else {
                    a.at_ms.cmp(&b.at_ms)
                }
            })
        });
        let limit = limit.clamp(1, 1000);
        let more = self.more || jobs.len() > limit;
        jobs.truncate(limit);
        report::Jobs {
            jobs,
            more,
            next: None,
        }
    }

    /// The merged `dead` listing: newest failure first (letters without a
    /// failure time after, by enqueue time), at most `limit`.
    fn dead(&mut self, limit: usize) -> report::Dead {
        let mut dead = std::mem::take(&mut self.dead);
        dead.sort_by(|a, b| {
            (b.failed_at_ms.is_some(), b.failed_at_ms, b.enqueued_at_ms).cmp(&(
                a.failed_at_ms.is_some(),
                a.failed_at_ms,
                a.enqueued_at_ms,
            ))
        });
        dead.truncate(limit);
        report::Dead { dead }
    }
}

/// Open shard `shard` of a set of `count` at `url`, refused if the store's
/// shard marker says it is another shard or of another count.
async fn open_shard(
    cli: &Cli,
    shard: usize,
    count: usize,
    url: &str,
) -> Result<read::Store, CliError> {
    let store = open(cli, None, Some(url)).await?;
    if let Err(e) = store.check_shard(shard, count, url).await {
        store.close().await;
        return Err(e.into());
    }
    Ok(store)
}

/// One shard's part of a read of the whole set (see `run_on_shards`),
/// and what it adds to `over`.
async fn shard_part(
    store: &read::Store,
    cli: &Cli,
    shard: usize,
    url: String,
    over: &mut OverSet,
) -> Result<report::ShardPart, CliError> {
    let json = cli.json;
    match &cli.command {
        Command::Health => {
            let health = store.health().await?;
            if !health.alive {
                over.code = ExitCode::from(3);
            }
            report::ShardPart::new(shard, url, json, &health)
        }
        Command::Jobs {
            state,
            job_type,
            limit,
            ..
        } => {
            let jobs = store
                .jobs(state.map(Into::into), job_type.as_deref(), *limit, None)
                .await?;
            let part = report::ShardPart::new(shard, url, json, &jobs);
            over.more |= jobs.more;
            over.jobs.extend(jobs.jobs.into_iter().map(|mut j| {
                j.shard = Some(shard);
                j
            }));
            part
        }
        Command::Dead { job_type, limit } => {
            let dead = store.dead(job_type.as_deref(), *limit).await?;
            let part = report::ShardPart::new(shard, url, json, &dead);
            over.dead.extend(dead.dead.into_iter().map(|mut d| {
                d.shard = Some(shard);
                d
            }));
            part
        }
        Command::Batches { limit } => {
            report::ShardPart::new(shard, url, json, &store.batches(*limit).await?)
        }
        Command::Periodic => report::ShardPart::new(shard, url, json, &store.periodic().await?),
        _ => {
            let exact = matches!(cli.command, Command::Stats { exact: true });
            let stats = store.stats(exact).await?;
            if let Some(total) = &mut over.total {
                total.add(&stats);
            }
            report::ShardPart::new(shard, url, json, &stats)
        }
    }
}

async fn command(store: &read::Store, cli: &Cli) -> Result<ExitCode, CliError> {
    let json = cli.json;
    match &cli.command {
        Command::Stats { exact } => report::print(json, &store.stats(*exact).await?)?,
        Command::Jobs {
            state,
            job_type,
            limit,
            after,
        } => report::print(
            json,
            &store
                .jobs(
                    state.map(Into::into),
                    job_type.as_deref(),
                    *limit,
                    after.as_deref(),
                )
                .await?,
        )?,
        Command::Job { id } => report::print(json, &store.job(id).await?)?,
        Command::Dead { job_type, limit } => {
            report::print(json, &store.dead(job_type.as_deref(), *limit).await?)?
        }
        Command::Batches { limit } => report::print(json, &store.batches(*limit).await?)?,
        Command::Periodic => report::print(json, &store.periodic().await?)?,
        Command::Batch {
            id, watch: false, ..
        } => report::print(json, &store.batch(id).await?)?,
        Command::Batch {
            id,
            watch: true,
            every_ms,
        } => return watch::batch(store, id, json, Duration::from_millis(*every_ms)).await,
        Command::Submit {
            job_type,
            job,
            key,
            wait,
        } => {
            let (op, request, run_id) = act::submit_op(job_type, job, key.as_deref())?;
            return act_on(store, op, request, Some(run_id), wait, json).await;
        }
        Command::Retry {
            id,
            failed,
            job_type,
            since_secs,
            wait,
        } => {
            let op = match (id, failed, job_type) {
                (Some(id), false, _) => IntakeOp::Retry { run_id: id.clone() },
                (None, true, Some(t)) => IntakeOp::RetryFailed {
                    job_type: t.clone(),
                    since_ms: since_secs.map_or(0, |s| {
                        gaffer_actors::engine::intake::epoch_ms(std::time::SystemTime::now())
                            .saturating_sub(s.saturating_mul(1000))
                    }),
                },
                _ => {
                    return Err(CliError::BadInput(
                        "pass a job id, or --failed --type TYPE".into(),
                    ));
                }
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Cancel { id, wait } => {
            let op = IntakeOp::Cancel { run_id: id.clone() };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Pause { job_type, wait } => {
            let op = IntakeOp::Pause {
                job_type: job_type.clone(),
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Resume { job_type, wait } => {
            let op = IntakeOp::Resume {
                job_type: job_type.clone(),
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Web { .. } => {
            return Err(CliError::BadInput(
                "`gaffer web` serves, it reads no store here".into(),
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &'static str, at_ms: u64, shard: usize) -> report::JobRow {
        report::JobRow {
            id: format!("{state}-{at_ms}"),
            job_type: "t".into(),
            state,
            attempts: 1,
            at_ms: Some(at_ms),
            batch: None,
            key: None,
            error: None,
            shard: Some(shard),
        }
    }

    fn dead(failed: Option<u64>, enqueued: u64) -> report::DeadRow {
        report::DeadRow {
            id: format!("{failed:?}-{enqueued}"),
            job_id: String::new(),
            job_type: "t".into(),
            attempts: 3,
            enqueued_at_ms: enqueued,
            failed_at_ms: failed,
            failure_kind: None,
            error: None,
            batch: None,
            key: None,
            shard: Some(0),
        }
    }

    #[test]
    fn a_merged_listing_puts_live_jobs_first_then_the_newest_finished() {
        let mut m = OverSet {
            jobs: vec![
                job("succeeded", 5, 0),
                job("queued", 7, 1),
                job("failed", 9, 1),
                job("running", 8, 0),
                job("queued", 3, 2),
                job("succeeded", 1, 2),
            ],
            ..OverSet::default()
        };
        let listed = m.jobs(5);
        let ids: Vec<_> = listed.jobs.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "running-8",
                "queued-3",
                "queued-7",
                "failed-9",
                "succeeded-5"
            ]
        );
        assert!(listed.more, "a sixth job was left out");
        let mut m = OverSet {
            jobs: vec![job("succeeded", 1, 0)],
            ..OverSet::default()
        };
        assert!(!m.jobs(5).more);
    }

    #[test]
    fn a_merged_dead_listing_is_newest_failure_first() {
        let mut m = OverSet {
            dead: vec![
                dead(None, 50),
                dead(Some(10), 1),
                dead(Some(30), 2),
                dead(None, 60),
            ],
            ..OverSet::default()
        };
        let ids: Vec<_> = m.dead(3).dead.into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["Some(30)-2", "Some(10)-1", "None-60"]);
    }
}
