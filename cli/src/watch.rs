//! The commands that keep reading: `gaffer batch ID --watch` and `gaffer
//! stats --watch`.
//!
//! `batch ID --watch`: a progress bar over a batch's durable counts,
//! redrawn until nothing is outstanding. The wait ends: when the batch
//! settles (exit 0, its status printed), or when the engine's writer is no
//! longer alive while items are outstanding (exit 3): at once when it closed
//! or was superseded, after [`PATIENCE`] when its beat is stale or absent
//! (an engine that just started may not have beaten yet).
//!
//! `stats --watch`: each store (each shard of a set) opened once, read in
//! full, then each round only the WAL objects written since the last
//! (`gaffer_ops::queries::StatsWatch`), reopened every
//! [`REBASE_AFTER`] or when the watch asks for it. It ends on Ctrl-C (exit
//! 0) or when stdout is closed; a writer that stops changes nothing: the
//! counts stay as it left them.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use gaffer_ops::queries::{REBASE_AFTER, Round, StatsWatch};

use crate::args::Cli;
use crate::error::CliError;
use crate::read::Store;
use crate::report::{self, Render};

/// How long a stale or absent writer is waited for.
const PATIENCE: Duration = Duration::from_secs(15);

/// Watch batch `id` until it has no outstanding item; read every `every`.
pub async fn batch(
    store: &Store,
    id: &str,
    json: bool,
    every: Duration,
) -> Result<ExitCode, CliError> {
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:40}] {pos}/{len} settled · {per_sec} · {eta} left · {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(id.to_string());
    let mut unseen_since: Option<Instant> = None;
    loop {
        let row = store.batch(id).await?;
        let settled = row.succeeded + row.failed + row.cancelled;
        bar.set_length(row.total);
        bar.set_position(settled);
        bar.set_message(format!("{} failed", row.failed));
        if row.complete && row.outstanding == 0 {
            bar.finish_and_clear();
            report::print(json, &row)?;
            return Ok(ExitCode::SUCCESS);
        }
        let health = store.health().await?;
        let gone = match (health.alive, health.status) {
            (true, _) => {
                unseen_since = None;
                false
            }
            (false, "closed" | "superseded") => true,
            (false, _) => unseen_since.get_or_insert_with(Instant::now).elapsed() >= PATIENCE,
        };
        if gone {
            bar.abandon();
            report::err(&format!(
                "gaffer: the engine's writer is {} with {} items of batch `{id}` outstanding; \
                 the batch resumes when an engine runs it again",
                health.status, row.outstanding
            ));
            return Ok(ExitCode::from(3));
        }
        tokio::time::sleep(every).await;
    }
}

/// A store `stats --watch` reads.
pub enum Source {
    /// The store of `--dir` or `--url`.
    One,
    /// Shard `index` of a set of `count`, at `url`.
    Shard {
        /// Its index.
        index: usize,
        /// The set's shard count.
        count: usize,
        /// Its store URL.
        url: String,
    },
}

/// One store watched: its source, and while open, the store and its watch.
struct Watched {
    source: Source,
    open: Option<(Store, StatsWatch, Instant)>,
}

impl Watched {
    /// The stats now: a round of the watch, or, past `rebase_after` or when
    /// the watch asks, the store reopened and read in full. A round that
    /// fails is answered by a rebase too (a read of the base can fail on an
    /// SST the writer's GC deleted); a failed rebase is the error.
    async fn round(
        &mut self,
        cli: &Cli,
        rebase_after: Duration,
    ) -> Result<report::Stats, CliError> {
        if let Some((store, watch, since)) = &mut self.open
            && since.elapsed() < rebase_after
            && let Ok(Round::Stats(stats)) = store.watch_round(watch).await
        {
            return Ok(stats);
        }
        if let Some((store, _, _)) = self.open.take() {
            store.close().await;
        }
        let store = match &self.source {
            Source::One => crate::open(cli, cli.dir.as_deref(), cli.url.as_deref()).await?,
            Source::Shard { index, count, url } => {
                crate::shards::open_shard(cli, *index, *count, url).await?
            }
        };
        match store.watch_stats().await {
            Ok((watch, stats)) => {
                self.open = Some((store, watch, Instant::now()));
                Ok(stats)
            }
            Err(e) => {
                store.close().await;
                Err(e.into())
            }
        }
    }

    async fn close(&mut self) {
        if let Some((store, _, _)) = self.open.take() {
            store.close().await;
        }
    }
}

/// Watch the stats of `sources` (one store, or the shards of a set): a
/// round every `every`, each store reopened every `rebase_after` (default
/// [`REBASE_AFTER`]), until Ctrl-C or a closed stdout.
pub async fn stats(
    cli: &Cli,
    sources: Vec<Source>,
    every: Duration,
    rebase_after: Option<Duration>,
) -> Result<ExitCode, CliError> {
    use std::io::IsTerminal;
    let rebase_after = rebase_after.unwrap_or(REBASE_AFTER);
    let terminal = !cli.json && std::io::stdout().is_terminal();
    let mut watched: Vec<Watched> = sources
        .into_iter()
        .map(|source| Watched { source, open: None })
        .collect();
    // Ctrl-C, listened for from the start: one during a round is kept.
    let mut interrupted = tokio::spawn(async {
        let _ = tokio::signal::ctrl_c().await;
    });
    let result = async {
        loop {
            let next = tokio::time::Instant::now() + every;
            let mut parts = Vec::with_capacity(watched.len());
            for w in &mut watched {
                let stats = tokio::select! {
                    stats = w.round(cli, rebase_after) => stats?,
                    _ = &mut interrupted => return Ok(()),
                };
                parts.push(stats);
            }
            let text = round_text(cli, &watched, parts, terminal, every)?;
            if !write_round(&text)? {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = &mut interrupted => return Ok(()),
            }
        }
    }
    .await;
    interrupted.abort();
    for w in &mut watched {
        w.close().await;
    }
    result.map(|()| ExitCode::SUCCESS)
}

/// A round's output: one JSON line with `--json`, else the table(s) under
/// a line that says when, after a clear of the screen on a terminal.
fn round_text(
    cli: &Cli,
    watched: &[Watched],
    parts: Vec<report::Stats>,
    terminal: bool,
    every: Duration,
) -> Result<String, CliError> {
    let one = matches!(
        watched,
        [Watched {
            source: Source::One,
            ..
        }]
    );
    if one {
        let stats = parts.into_iter().next().unwrap_or_default();
        if cli.json {
            return json_line(&stats);
        }
        return Ok(framed(&stats.render(), terminal, every));
    }
    let mut total = report::Stats::default();
    let mut shards = Vec::with_capacity(parts.len());
    for (w, stats) in watched.iter().zip(parts) {
        total.add(&stats);
        let (index, url) = match &w.source {
            Source::Shard { index, url, .. } => (*index, url.clone()),
            Source::One => (0, String::new()),
        };
        shards.push(report::ShardPart::new(index, url, cli.json, &stats)?);
    }
    let set = report::Shards {
        shards,
        total: Some(total),
        all: None,
        all_text: None,
    };
    if cli.json {
        return json_line(&set);
    }
    Ok(framed(&set.render(), terminal, every))
}

/// `text` under a line with the time and the interval; on a terminal the
/// screen cleared first, else a blank line after.
fn framed(text: &str, terminal: bool, every: Duration) -> String {
    let now = gaffer_ops::format::time(gaffer_ops::format::now_ms());
    let head = format!("gaffer stats --watch: {now}, every {every:?} (Ctrl-C ends)");
    if terminal {
        format!("\x1b[H\x1b[2J{head}\n\n{text}")
    } else {
        format!("{head}\n{text}\n")
    }
}

/// Write a round's text and a newline; `false` when stdout was closed (a
/// reader that stopped reading: the watch ends).
fn write_round(text: &str) -> Result<bool, CliError> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(CliError::Output(e.to_string())),
    }
}

/// `value` as one JSON line.
fn json_line<T: serde::Serialize>(value: &T) -> Result<String, CliError> {
    serde_json::to_string(value).map_err(|e| CliError::Output(e.to_string()))
}
