//! `gaffer`: look inside a gaffer store from a shell, read-only.
//!
//! The store is opened through taquba's `QueueReader` in `FollowLatest` mode:
//! nothing is ever written, so read-only credentials suffice and a running
//! engine is never fenced or slowed. `health` and `stats` open it without
//! replaying the WAL and read the beat and the counters from the WAL
//! objects past the last memtable flush themselves (`gaffer_ops::unflushed`): the
//! WAL objects `health` reads are bounded however long the WAL the writer
//! has not flushed yet (a shard's owner adds a listing of them), and `stats` costs about half a replay. Every command prints aligned tables, or
//! with `--json` one JSON document whose field names are documented on the
//! types in [`report`].
//!
//! Exit status: 0 on success, 1 on an error (one line on stderr), 3 when
//! `gaffer health` finds no live writer.
//!
//! The commands and their options are in [`args`]; a command on a shard
//! set, fanned out and merged, in [`shards`]; workflows as text in
//! [`workflows`].

mod act;
mod args;
mod error;
mod read;
mod report;
mod shards;
mod table;
mod watch;
mod web;
mod workflows;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use gaffer_layout::intake::IntakeOp;

use crate::args::{Cli, Command, WaitArgs};
// `read` names the state filter from here.
use crate::args::StateArg;
use crate::error::CliError;

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
    report::err(&format!("gaffer: {e}"));
    ExitCode::from(1)
}

async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    if let Command::Keygen { id } = &cli.command {
        let line = gaffer_layout::sealed::Keyring::generate_line(id)
            .map_err(|e| CliError::BadInput(e.to_string()))?;
        println!("{line}");
        return Ok(ExitCode::SUCCESS);
    }
    if let Command::Web {
        listen,
        base_path,
        read_only,
        allowed_host,
    } = &cli.command
    {
        return web::serve(&cli, listen, base_path, *read_only, allowed_host).await;
    }
    if let Some(template) = &cli.shards {
        return shards::run_on_shards(template, &cli).await;
    }
    if let Command::Stats {
        watch: true,
        every,
        rebase_every,
        ..
    } = &cli.command
    {
        let sources = vec![watch::Source::One];
        return watch::stats(&cli, sources, *every, *rebase_every).await;
    }
    let store = open(&cli, cli.dir.as_deref(), cli.url.as_deref()).await?;
    let result = command(&store, &cli).await;
    store.close().await;
    result
}

/// The keyring the command was given: `--key-file`, else the environment
/// (`GAFFER_KEY_FILE`, `GAFFER_KEYS`); `None` without one.
pub(crate) fn keyring(cli: &Cli) -> Result<Option<gaffer_layout::sealed::Keyring>, CliError> {
    use gaffer_layout::sealed::Keyring;
    let found = match &cli.key_file {
        Some(path) => Keyring::from_file(path).map(Some),
        None => Keyring::from_env(),
    };
    found.map_err(|e| CliError::BadInput(e.to_string()))
}

async fn open(
    cli: &Cli,
    dir: Option<&std::path::Path>,
    url: Option<&str>,
) -> Result<read::Store, CliError> {
    // `health` and `stats` read the flushed state and, of the WAL past it,
    // only the beat and the counters; every other command the whole state.
    let reading = match cli.command {
        Command::Health | Command::Stats { job_type: None, .. } => read::Reading::Flushed,
        _ => read::Reading::Replay,
    };
    let keyring = keyring(cli)?;
    let store = read::Store::open(
        dir,
        url,
        &cli.queue_path,
        &cli.jobs_queue,
        &cli.bulk_queue,
        reading,
    )
    .await?;
    Ok(match keyring {
        Some(keyring) => store.with_keyring(keyring).await?,
        None => store,
    })
}

async fn command(store: &read::Store, cli: &Cli) -> Result<ExitCode, CliError> {
    let json = cli.json;
    match &cli.command {
        Command::Stats {
            job_type: None,
            exact,
            ..
        } => report::print(json, &store.stats(*exact).await?)?,
        Command::Stats {
            job_type: Some(t),
            top,
            ..
        } => report::print(json, &store.tenants(t, usize::from(*top)).await?)?,
        Command::Jobs {
            tag: Some(tag),
            limit,
            after,
            ..
        } => report::print(
            json,
            &store.jobs_by_tag(tag, *limit, after.as_deref()).await?,
        )?,
        Command::Jobs {
            state,
            job_type,
            limit,
            after,
            tag: None,
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
        Command::Item { batch, key } => report::print(json, &store.item(batch, key).await?)?,
        Command::Dead { job_type, limit } => {
            report::print(json, &store.dead(job_type.as_deref(), *limit).await?)?
        }
        Command::Batches { limit } => report::print(json, &store.batches(*limit).await?)?,
        Command::Periodic => report::print(json, &store.periodic().await?)?,
        Command::Workflows { limit, after } => {
            report::print(json, &store.workflows(after.as_deref(), *limit).await?)?
        }
        Command::Workflow { id } => report::print(json, &store.workflow(id).await?)?,
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
            workflow,
            failed,
            job_type,
            since_secs,
            wait,
        } => {
            let op = match (id, failed, job_type) {
                (Some(id), false, _) if *workflow => IntakeOp::RetryWorkflow { id: id.clone() },
                (Some(id), false, _) => IntakeOp::Retry { run_id: id.clone() },
                (None, true, Some(t)) => IntakeOp::RetryFailed {
                    job_type: t.clone(),
                    since_ms: since_secs.map_or(0, |s| {
                        gaffer_layout::intake::epoch_ms(std::time::SystemTime::now())
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
        Command::Signal {
            id,
            name,
            payload,
            wait,
        } => {
            let op = act::signal_op(id, name, payload)?;
            return act_on(store, op, ulid(), Some(id.clone()), wait, json).await;
        }
        Command::Cancel { id, workflow, wait } => {
            let op = if *workflow {
                IntakeOp::CancelWorkflow { id: id.clone() }
            } else {
                IntakeOp::Cancel { run_id: id.clone() }
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Pause {
            job_type,
            key: Some(key),
            wait,
        } => {
            let (header, value) = header_value(key)?;
            let op = IntakeOp::PauseValue {
                job_type: job_type.clone(),
                header,
                value,
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Resume {
            job_type,
            key: Some(key),
            wait,
        } => {
            let (header, value) = header_value(key)?;
            let op = IntakeOp::ResumeValue {
                job_type: job_type.clone(),
                header,
                value,
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Pause {
            job_type,
            key: None,
            wait,
        } => {
            let op = IntakeOp::Pause {
                job_type: job_type.clone(),
            };
            return act_on(store, op, ulid(), None, wait, json).await;
        }
        Command::Rekey { wait } => {
            return act_on(store, IntakeOp::Rekey, ulid(), None, wait, json).await;
        }
        // Answered in `run`, before any store is opened.
        Command::Keygen { .. } => {}
        Command::Resume {
            job_type,
            key: None,
            wait,
        } => {
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

/// `HEADER=VALUE` of `--key`, split at its first `=`.
fn header_value(key: &str) -> Result<(String, String), CliError> {
    match key.split_once('=') {
        Some((h, v)) if !h.is_empty() && !v.is_empty() => Ok((h.to_string(), v.to_string())),
        _ => Err(CliError::BadInput(format!(
            "--key `{key}`: give the header and the value as HEADER=VALUE (`tenant=acme`)"
        ))),
    }
}
