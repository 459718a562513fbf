//! A child process: one workload group of one engine (`side-by-side child
//! ...`), its phases measured and printed as `RESULT` lines. One module per
//! engine: `gaffer`, `reference` (taquba-workflow 0.11.0), `raw` (taquba
//! 0.16 alone), `apalis` (apalis 1.0 on SQLite, Postgres and Redis),
//! `graphile` (graphile_worker, Postgres); `servers` the servers'
//! connections. effectum's child is its own binary (`effectum-child/`).

mod apalis;
mod gaffer;
mod graphile;
mod raw;
mod reference;
mod servers;

use std::io::Write;

use crate::ChildArgs;
use crate::kinds::Engine;
use crate::meter::{set_phase, spawn_progress_ticker};

pub type BoxErr = Box<dyn std::error::Error + Send + Sync>;

/// A child: one workload group of one engine, `RESULT` lines on stdout;
/// the exit code.
pub fn main(a: ChildArgs) -> i32 {
    spawn_progress_ticker();
    set_phase("startup");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let res = rt.block_on(async {
        match a.engine {
            Engine::Gaffer => gaffer::run(&a).await,
            Engine::Reference => reference::run(&a).await,
            Engine::Raw => raw::run(&a).await,
            Engine::Apalis | Engine::ApalisPostgres | Engine::ApalisRedis => {
                apalis::run(&a).await
            }
            Engine::Graphile | Engine::GraphileLocalQueue => graphile::run(&a).await,
            Engine::Effectum => {
                Err("effectum's child is its own binary (effectum-child/): its SQLite cannot link beside sqlx's".into())
            }
        }
    });
    set_phase("exit");
    match res {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("child error: {e}");
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "ERROR {}", e.to_string().replace('\n', " | "));
            let _ = out.flush();
            2
        }
    }
}

/// The child's temp dir (its local store), `sbs-{engine}-*`.
pub fn temp_dir(a: &ChildArgs) -> Result<tempfile::TempDir, BoxErr> {
    let prefix = format!("sbs-{}-", a.engine.label());
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix);
    Ok(match &a.tmp_dir {
        Some(d) => b.tempdir_in(d)?,
        None => b.tempdir()?,
    })
}

/// A fresh S3 URL for one child: `$SBS_S3_URL/{the child's temp dir name}`.
pub fn s3_url(dir: &tempfile::TempDir) -> Result<String, BoxErr> {
    let base = std::env::var("SBS_S3_URL").map_err(
        |_| "--store s3 needs SBS_S3_URL (e.g. s3://bucket/prefix) and the AWS_* variables",
    )?;
    let name = dir
        .path()
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("child");
    Ok(format!("{}/{name}", base.trim_end_matches('/')))
}
