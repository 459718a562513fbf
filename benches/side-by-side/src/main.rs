//! Side-by-side benchmark: gaffer vs the reference (`taquba-workflow` 0.11.0)
//! vs the raw queue (`taquba` 0.16, gaffer's queue), on identical workloads;
//! and gaffer vs its peer, apalis 1.0 on its SQLite backend (`side-by-side
//! peers`).
//!
//! The parent process runs the matrix: for every repetition, store, flush
//! setting and workload group it spawns one child process of this same binary
//! per engine (engines alternate order between repetitions), so CPU time
//! (getrusage RUSAGE_SELF delta) and peak RSS (VmHWM, reset through
//! /proc/self/clear_refs at each phase start) are per workload. A child prints
//! `PROGRESS` lines every second and one `RESULT {json}` line per measured
//! phase; the parent kills a child whose progress has not moved for
//! `--hang-secs` (default 120) and records it as HUNG.
//!
//! Workload groups (one child each):
//! - `jobs-keyed`: jobs_keyed, then jobs_resubmit (the identical N again).
//! - `jobs-plain`: jobs_plain.
//! - `bulk` (per concurrency): bulk_items, then bulk_rerun (same batch).
//! - `raw` (per concurrency): raw_queue = enqueue N, then claim + ack them.
//!
//! `side-by-side peers` runs gaffer (at each `--gaffer-flush`) and its
//! peers (`--peers`: apalis 1.0 on `apalis-sqlite`, a SQLite file in the
//! child's temp dir; on `apalis-postgres` and `apalis-redis`, and
//! graphile_worker, on the servers `servers.sh` starts on loopback;
//! effectum, embedded SQLite, its own binary in `effectum-child/`) back to
//! back on jobs_plain (and jobs_keyed), for each N, gaffer on local disk;
//! see `child::apalis`, `child::graphile` and `effectum-child` for what
//! each peer does and lacks.
//!
//! Run `side-by-side --help` (and `side-by-side peers --help`) for the flags.
//! Child options by environment (benches/README.md): `SBS_FIRST_PHASE_ONLY`,
//! `SBS_JOIN_EACH` (each task submits a job and joins it before the next),
//! `SBS_RETENTION_MS` (gaffer's retention), `SBS_RAW_KEYED` (the raw queue
//! commits each job as a keyed gaffer submission does), `SBS_TELEMETRY`,
//! `SBS_FILTER`, `SBS_ANSI`, `SBS_S3_URL`.
//!
//! Files: `main.rs` the flags and the dispatch; `matrix.rs` (and
//! `matrix/tables.rs`) the parent's runs: which engines × workloads, in
//! which order, their medians and tables; `peers.rs` the peers run;
//! `supervise.rs` one child process watched from the parent; `child.rs` a
//! child's entry, with one module per engine under `child/`; `plan.rs` the
//! phases a child runs (the jobs and bulk loops, shared by the gaffer and
//! the reference children); `meter.rs` what a phase measures (CPU, peak RSS,
//! progress); `kinds.rs` the names of stores, flushes, engines, workloads.

mod args;
mod child;
mod kinds;
mod matrix;
mod meter;
mod peers;
mod plan;
mod supervise;

use args::ChildArgs;
use clap::{Parser, Subcommand};
use kinds::{Engine, FlushKind, Group, StoreKind, Workload};

// ---------------------------------------------------------------- CLI

#[derive(Parser, Debug)]
#[command(
    name = "side-by-side",
    about = "gaffer vs taquba-workflow 0.11.0 vs raw taquba 0.16"
)]
struct Cli {
    #[command(subcommand)]
    child: Option<ChildCmd>,

    /// Stores to run on.
    #[arg(long, value_delimiter = ',', default_values = ["local", "memory"])]
    store: Vec<StoreKind>,
    /// Queue flush settings: `default` (each engine's own: gaffer's follows
    /// the store since issue #13, 2 ms on local disk, 1 ms in memory, 100 ms
    /// on S3; taquba-workflow's and the raw queue's is taquba's 100 ms) and
    /// `1ms`.
    #[arg(long, value_delimiter = ',', default_values = ["default", "1ms"])]
    flush: Vec<FlushKind>,
    /// Workloads. jobs_keyed and jobs_resubmit share one child (the resubmit
    /// needs the keyed run's records), as do bulk_items and bulk_rerun.
    #[arg(long, value_delimiter = ',',
          default_values = ["jobs_keyed", "jobs_resubmit", "jobs_plain", "bulk_items", "bulk_rerun", "raw_queue"])]
    workload: Vec<Workload>,
    /// Engines (raw_queue always runs on the raw queue; apalis runs in
    /// `side-by-side peers`).
    #[arg(long, value_delimiter = ',', default_values = ["gaffer", "reference"])]
    engine: Vec<Engine>,
    /// Concurrency of the bulk pipeline and of the raw queue's claim/ack.
    #[arg(long, value_delimiter = ',', default_values = ["16", "200"])]
    conc: Vec<usize>,
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// N under the `default` flush.
    #[arg(long, default_value_t = 2_000)]
    n_default: usize,
    /// N under the 1 ms flush.
    #[arg(long, default_value_t = 10_000)]
    n_1ms: usize,
    /// Worker count of the jobs workloads (both engines' default is 16).
    #[arg(long, default_value_t = 16)]
    job_workers: usize,
    /// Parent of the local-disk stores' temp directories (default: $TMPDIR or /tmp).
    #[arg(long)]
    tmp_dir: Option<std::path::PathBuf>,
    /// A child whose progress has not moved for this long is killed (HUNG).
    #[arg(long, default_value_t = 120)]
    hang_secs: u64,
    /// Print no run: re-render the tables from a saved raw output (its
    /// `  raw:` and `  problem:` lines) of an earlier run with the same flags.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
}

#[derive(Subcommand, Debug)]
enum ChildCmd {
    /// (internal) run one workload group of one engine and print RESULT lines.
    #[command(hide = true)]
    Child(ChildArgs),
    /// gaffer vs its peers (apalis 1.0 on SQLite, Postgres, Redis;
    /// graphile_worker; effectum) on the jobs workloads, gaffer on local
    /// disk, back to back, for each N; medians of the repetitions.
    Peers(PeersArgs),
}

#[derive(clap::Args, Debug, Clone)]
struct PeersArgs {
    /// Job counts.
    #[arg(long, value_delimiter = ',', default_values = ["2000", "10000", "100000"])]
    n: Vec<usize>,
    /// The peers: `apalis` (apalis-sqlite), `apalis-postgres`,
    /// `apalis-redis`, `graphile` (the three on the servers `servers.sh`
    /// starts: `SBS_PG_URL`, `SBS_REDIS_URL`), `effectum` (its own binary,
    /// `effectum-child/`).
    #[arg(long, value_delimiter = ',', default_values = ["apalis"])]
    peers: Vec<Engine>,
    /// The peers run only at N up to this.
    #[arg(long, alias = "apalis-max-n", default_value_t = 10_000)]
    peer_max_n: usize,
    /// gaffer's flush settings (`default`: its default for a local dir).
    #[arg(long, value_delimiter = ',', default_values = ["default", "1ms"])]
    gaffer_flush: Vec<FlushKind>,
    /// Also run gaffer on an fsyncing local directory (`local-fsync`) at its
    /// local default flush.
    #[arg(long)]
    gaffer_fsync: bool,
    /// Workload groups: jobs-plain, jobs-keyed.
    #[arg(long, value_delimiter = ',', default_values = ["jobs-plain"])]
    group: Vec<Group>,
    /// Repetitions (medians are reported).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Worker count of every engine.
    #[arg(long, default_value_t = 16)]
    job_workers: usize,
    /// Parent of the children's temp directories (default: $TMPDIR or /tmp).
    #[arg(long)]
    tmp_dir: Option<std::path::PathBuf>,
    /// A child whose progress has not moved for this long is killed (HUNG).
    #[arg(long, default_value_t = 120)]
    hang_secs: u64,
}

fn main() {
    let cli = Cli::parse();
    match cli.child {
        Some(ChildCmd::Child(a)) => std::process::exit(child::main(a)),
        Some(ChildCmd::Peers(p)) => peers::main(p),
        None => match cli.report.clone() {
            Some(path) => matrix::report(cli, &path),
            None => matrix::main(cli),
        },
    }
}
