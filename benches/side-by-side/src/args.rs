//! A child's arguments (`side-by-side child ...`): which engine runs which
//! workload group, on which store, at which N. Its own file so that the
//! effectum child (`effectum-child/`, its own workspace: effectum's SQLite
//! cannot link beside sqlx's) parses the same arguments from the same
//! source.

use serde::{Deserialize, Serialize};

use crate::kinds::{Engine, FlushKind, Group, StoreKind};

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct ChildArgs {
    #[arg(long)]
    pub engine: Engine,
    #[arg(long)]
    pub group: Group,
    #[arg(long)]
    pub store: StoreKind,
    #[arg(long)]
    pub flush: FlushKind,
    #[arg(long)]
    pub n: usize,
    #[arg(long)]
    pub conc: usize,
    #[arg(long)]
    pub job_workers: usize,
    #[arg(long)]
    pub tmp_dir: Option<std::path::PathBuf>,
    /// gaffer only, built with `--features telemetry`: a fmt subscriber at
    /// `info` (to stderr) and a Prometheus recorder, installed before the
    /// engine starts.
    #[arg(long)]
    #[serde(default)]
    pub telemetry: bool,
}
