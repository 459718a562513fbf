//! `gaffer batch ID --watch`: a progress bar over a batch's durable counts,
//! redrawn until nothing is outstanding. The wait ends: when the batch
//! settles (exit 0, its status printed), or when the engine's writer is no
//! longer alive while items are outstanding (exit 3): at once when it closed
//! or was superseded, after [`PATIENCE`] when its beat is stale or absent
//! (an engine that just started may not have beaten yet).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::CliError;
use crate::read::Store;
use crate::report;

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
