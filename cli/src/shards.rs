//! A command on a shard set (`--shards`): fanned out to every shard and
//! merged into one document, or sent to the one shard of an id or of
//! `--shard`.

use std::process::ExitCode;

use crate::args::{Cli, Command};
use crate::error::CliError;
use crate::{command, open, read, report, watch};

/// A command on a shard set: `stats` and `health` on every shard (or the
/// `--shard`), one document with a part per shard; a command on an id on
/// the id's shard; any other on the `--shard`.
pub async fn run_on_shards(template: &str, cli: &Cli) -> Result<ExitCode, CliError> {
    let count = cli.shard_count.unwrap_or(0);
    if count == 0 || count > gaffer_layout::keys::MAX_SHARDS || !template.contains("{shard}") {
        return Err(CliError::BadInput(format!(
            "--shards needs a template with `{{shard}}` and --shard-count 1 to {}",
            gaffer_layout::keys::MAX_SHARDS
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
    let url = |shard: usize| gaffer_layout::keys::shard_url(template, shard, count);
    if let Command::Stats {
        watch: true,
        every,
        rebase_every,
        ..
    } = &cli.command
    {
        // Each shard keeps its own watch; a round prints them all.
        let shards = match cli.shard {
            Some(s) => vec![s],
            None => (0..count).collect(),
        };
        let sources = shards
            .into_iter()
            .map(|index| watch::Source::Shard {
                index,
                count,
                url: url(index),
            })
            .collect();
        return watch::stats(cli, sources, *every, *rebase_every).await;
    }
    let by_id = match &cli.command {
        Command::Job { id }
        | Command::Item { batch: id, .. }
        | Command::Batch { id, .. }
        | Command::Cancel { id, .. }
        | Command::Signal { id, .. }
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
                | Command::Workflows { after: None, .. }
                | Command::Periodic
        );
    if !every {
        let shard = match (by_id, cli.shard) {
            (Some(id), _) => gaffer_layout::keys::shard_of(id, count),
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
        // A batch item's delivery is named by a queue job id, which says
        // nothing of its shard (its batch's does): look on the others.
        if let (Command::Job { .. }, Err(CliError::Ops(gaffer_ops::OpsError::JobNotFound(_)))) =
            (&cli.command, &result)
            && cli.shard.is_none()
        {
            for other in (0..count).filter(|s| *s != shard) {
                let store = open_shard(cli, other, count, &url(other)).await?;
                let found = command(&store, cli).await;
                store.close().await;
                if !matches!(
                    found,
                    Err(CliError::Ops(gaffer_ops::OpsError::JobNotFound(_)))
                ) {
                    return found;
                }
            }
        }
        return result;
    }
    let mut parts = Vec::new();
    let mut over = OverSet {
        code: ExitCode::SUCCESS,
        total: matches!(cli.command, Command::Stats { job_type: None, .. })
            .then(report::Stats::default),
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
        let mut jobs = std::mem::take(&mut self.jobs);
        jobs.sort_by(report::JobRow::merged_order);
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
pub(crate) async fn open_shard(
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
            tag,
            ..
        } => {
            let jobs = match tag {
                Some(tag) => store.jobs_by_tag(tag, *limit, None).await?,
                None => {
                    store
                        .jobs(state.map(Into::into), job_type.as_deref(), *limit, None)
                        .await?
                }
            };
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
        Command::Workflows { limit, .. } => {
            report::ShardPart::new(shard, url, json, &store.workflows(None, *limit).await?)
        }
        Command::Periodic => report::ShardPart::new(shard, url, json, &store.periodic().await?),
        Command::Stats {
            job_type: Some(t),
            top,
            ..
        } => report::ShardPart::new(
            shard,
            url,
            json,
            &store.tenants(t, usize::from(*top)).await?,
        ),
        _ => {
            let exact = matches!(cli.command, Command::Stats { exact: true, .. });
            let stats = store.stats(exact).await?;
            if let Some(total) = &mut over.total {
                total.add(&stats);
            }
            report::ShardPart::new(shard, url, json, &stats)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: &str, at_ms: u64, shard: usize) -> report::JobRow {
        report::JobRow {
            id: format!("{state}-{at_ms}"),
            job_type: "t".into(),
            state: state.parse().expect("a state"),
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
            workflow: None,
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
