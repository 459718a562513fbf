//! The commands that act: `submit`, `retry`, `signal`, `cancel`, `pause`,
//! `resume`.
//! Each writes one request to the store's inbox (never as the store's
//! writer) and, unless `--no-wait`, reads the store until the engine applied
//! or refused it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gaffer_layout::intake::{IntakeOp, RequestProgress};
use gaffer_ops::act;

use crate::error::CliError;
use crate::read::Store;
use crate::report::{self, RequestReport};

/// How often a waiting command reads the store.
const EVERY: Duration = Duration::from_millis(100);

pub use gaffer_ops::act::submit_op;

/// The request of `gaffer signal ID NAME JSON`.
pub fn signal_op(run_id: &str, name: &str, json: &str) -> Result<IntakeOp, CliError> {
    Ok(act::signal_op(run_id, name, json)?)
}

/// Send `op` (as `request_id`, a fresh ULID) and report what became of it.
/// Exit status: 0 applied (or sent, with `no_wait`), 1 refused, 3 not
/// applied within `wait`.
pub async fn send(
    store: &Store,
    op: IntakeOp,
    request_id: String,
    job: Option<String>,
    no_wait: bool,
    wait: Duration,
    json: bool,
) -> Result<ExitCode, CliError> {
    act::send(store, &op, &request_id).await?;
    let mut out = RequestReport {
        request: request_id.clone(),
        job: job.clone(),
        status: "sent",
        result: None,
        reason: None,
        job_state: None,
    };
    if no_wait {
        report::print(json, &out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + wait;
    let code = loop {
        match act::progress(store, &request_id).await? {
            RequestProgress::Sent if Instant::now() < deadline => {
                tokio::time::sleep(EVERY).await;
                continue;
            }
            RequestProgress::Sent => break 3,
            RequestProgress::Refused(reason) => {
                out.status = "refused";
                out.reason = Some(reason);
                break 1;
            }
            RequestProgress::Applied(result) => {
                out.status = "applied";
                out.result = result;
                if let Some(run_id) = &job {
                    out.job_state = act::job_state(store, run_id).await?;
                }
                break 0;
            }
        }
    };
    report::print(json, &out)?;
    Ok(ExitCode::from(code))
}
