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
//! `side-by-side peers` runs gaffer (at each `--gaffer-flush`) and apalis
//! (`apalis` 1.0 + `apalis-sqlite` 1.0, a SQLite file in the child's temp
//! dir) back to back on jobs_plain (and jobs_keyed), for each N, local disk
//! only; see `apalis_child` for what the apalis side does and lacks.
//!
//! Run `side-by-side --help` (and `side-by-side peers --help`) for the flags.
//! Child options by environment (benches/README.md): `SBS_FIRST_PHASE_ONLY`,
//! `SBS_JOIN_EACH` (each task submits a job and joins it before the next),
//! `SBS_RETENTION_MS` (gaffer's retention), `SBS_RAW_KEYED` (the raw queue
//! commits each job as a keyed gaffer submission does), `SBS_TELEMETRY`,
//! `SBS_FILTER`, `SBS_ANSI`, `SBS_S3_URL`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// Submissions (and awaits) in flight at once.
const IN_FLIGHT: usize = 64;

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
    /// gaffer vs apalis 1.0 (SQLite) on the jobs workloads, local disk, back
    /// to back, for each N; medians of the repetitions.
    Peers(PeersArgs),
}

#[derive(clap::Args, Debug, Clone)]
struct PeersArgs {
    /// Job counts.
    #[arg(long, value_delimiter = ',', default_values = ["2000", "10000", "100000"])]
    n: Vec<usize>,
    /// apalis runs only at N up to this.
    #[arg(long, default_value_t = 10_000)]
    apalis_max_n: usize,
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
    /// Worker count of both engines.
    #[arg(long, default_value_t = 16)]
    job_workers: usize,
    /// Parent of the children's temp directories (default: $TMPDIR or /tmp).
    #[arg(long)]
    tmp_dir: Option<std::path::PathBuf>,
    /// A child whose progress has not moved for this long is killed (HUNG).
    #[arg(long, default_value_t = 120)]
    hang_secs: u64,
}

#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
struct ChildArgs {
    #[arg(long)]
    engine: Engine,
    #[arg(long)]
    group: Group,
    #[arg(long)]
    store: StoreKind,
    #[arg(long)]
    flush: FlushKind,
    #[arg(long)]
    n: usize,
    #[arg(long)]
    conc: usize,
    #[arg(long)]
    job_workers: usize,
    #[arg(long)]
    tmp_dir: Option<std::path::PathBuf>,
    /// gaffer only, built with `--features telemetry`: a fmt subscriber at
    /// `info` (to stderr) and a Prometheus recorder, installed before the
    /// engine starts.
    #[arg(long)]
    #[serde(default)]
    telemetry: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StoreKind {
    Local,
    /// A local directory whose writes are fsynced (object_store's
    /// `LocalFileSystem::with_fsync(true)`, given to gaffer as an object
    /// store, at the flush of a local directory, 2 ms, unless told), for
    /// durability across power loss (gaffer and the raw queue only).
    LocalFsync,
    Memory,
    /// An S3 API: the URL in `SBS_S3_URL` (e.g. `s3://gaffer/sbs`), a fresh
    /// prefix under it per child, configured by the `AWS_*` variables
    /// (gaffer and the raw queue only).
    S3,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FlushKind {
    Default,
    #[value(name = "1ms")]
    #[serde(rename = "1ms")]
    OneMs,
}

impl FlushKind {
    fn interval(self) -> Option<Duration> {
        match self {
            FlushKind::Default => None,
            FlushKind::OneMs => Some(Duration::from_millis(1)),
        }
    }
    fn label(self) -> &'static str {
        match self {
            FlushKind::Default => "default",
            FlushKind::OneMs => "1ms",
        }
    }
}

impl StoreKind {
    fn label(self) -> &'static str {
        match self {
            StoreKind::Local => "local",
            StoreKind::LocalFsync => "local-fsync",
            StoreKind::Memory => "memory",
            StoreKind::S3 => "s3",
        }
    }
}

/// A fresh S3 URL for one child: `$SBS_S3_URL/{the child's temp dir name}`.
fn s3_url(dir: &tempfile::TempDir) -> Result<String, BoxErr> {
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

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Engine {
    Gaffer,
    Reference,
    Raw,
    /// apalis 1.0 on apalis-sqlite 1.0.
    Apalis,
}

impl Engine {
    fn label(self) -> &'static str {
        match self {
            Engine::Gaffer => "gaffer",
            Engine::Reference => "reference",
            Engine::Raw => "raw",
            Engine::Apalis => "apalis",
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
enum Workload {
    JobsKeyed,
    JobsResubmit,
    JobsPlain,
    BulkItems,
    BulkRerun,
    RawQueue,
}

impl Workload {
    fn label(self) -> &'static str {
        match self {
            Workload::JobsKeyed => "jobs_keyed",
            Workload::JobsResubmit => "jobs_resubmit",
            Workload::JobsPlain => "jobs_plain",
            Workload::BulkItems => "bulk_items",
            Workload::BulkRerun => "bulk_rerun",
            Workload::RawQueue => "raw_queue",
        }
    }
    fn group(self) -> Group {
        match self {
            Workload::JobsKeyed | Workload::JobsResubmit => Group::JobsKeyed,
            Workload::JobsPlain => Group::JobsPlain,
            Workload::BulkItems | Workload::BulkRerun => Group::Bulk,
            Workload::RawQueue => Group::Raw,
        }
    }
    fn uses_conc(self) -> bool {
        matches!(
            self,
            Workload::BulkItems | Workload::BulkRerun | Workload::RawQueue
        )
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Group {
    JobsKeyed,
    JobsPlain,
    Bulk,
    Raw,
}

impl Group {
    fn label(self) -> &'static str {
        match self {
            Group::JobsKeyed => "jobs-keyed",
            Group::JobsPlain => "jobs-plain",
            Group::Bulk => "bulk",
            Group::Raw => "raw",
        }
    }
    fn phases(self) -> &'static [Workload] {
        match self {
            Group::JobsKeyed => &[Workload::JobsKeyed, Workload::JobsResubmit],
            Group::JobsPlain => &[Workload::JobsPlain],
            Group::Bulk => &[Workload::BulkItems, Workload::BulkRerun],
            Group::Raw => &[Workload::RawQueue],
        }
    }
}

/// One measured phase, as a child reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PhaseResult {
    /// Repetition (1-based), set by the parent.
    #[serde(default)]
    rep: usize,
    workload: Workload,
    engine: Engine,
    store: StoreKind,
    flush: FlushKind,
    n: usize,
    conc: usize,
    wall_s: f64,
    items_per_s: f64,
    cpu_s: f64,
    peak_rss_kib: u64,
    /// Handler / pipeline executions during the phase.
    runs: usize,
    ok: bool,
    note: String,
    /// raw_queue only: the enqueue and claim+ack halves.
    enqueue_s: Option<f64>,
    drain_s: Option<f64>,
}

// ---------------------------------------------------------------- process metrics

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Reset VmHWM to the current RSS (Linux: `echo 5 > /proc/self/clear_refs`).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

// ---------------------------------------------------------------- progress

static PHASE: Mutex<String> = Mutex::new(String::new());
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Handler / pipeline executions, across engines.
static RUNS: AtomicUsize = AtomicUsize::new(0);

fn set_phase(p: &str) {
    *PHASE.lock().unwrap() = p.to_string();
    COUNT.store(0, Ordering::SeqCst);
}

fn spawn_progress_ticker() {
    std::thread::spawn(|| {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let phase = PHASE.lock().unwrap().clone();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "PROGRESS {} {} {}",
                phase,
                COUNT.load(Ordering::SeqCst),
                RUNS.load(Ordering::SeqCst)
            );
            let _ = out.flush();
        }
    });
}

struct Meter {
    start: Instant,
    cpu0: f64,
    runs0: usize,
    hwm_reset: bool,
}

impl Meter {
    fn start(phase: &str) -> Self {
        set_phase(phase);
        let hwm_reset = reset_peak_rss();
        Meter {
            start: Instant::now(),
            cpu0: cpu_seconds(),
            runs0: RUNS.load(Ordering::SeqCst),
            hwm_reset,
        }
    }

    fn finish(&self, a: &ChildArgs, workload: Workload, ok: bool, note: String) -> PhaseResult {
        let wall = self.start.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu0;
        let mut note = note;
        if !self.hwm_reset {
            note.push_str(" (VmHWM not reset: peak is the process's)");
        }
        PhaseResult {
            rep: 0,
            workload,
            engine: a.engine,
            store: a.store,
            flush: a.flush,
            n: a.n,
            conc: if workload.uses_conc() {
                a.conc
            } else {
                a.job_workers
            },
            wall_s: wall,
            items_per_s: a.n as f64 / wall,
            cpu_s: cpu,
            peak_rss_kib: proc_status_kib("VmHWM:"),
            runs: RUNS.load(Ordering::SeqCst) - self.runs0,
            ok,
            note: note.trim().to_string(),
            enqueue_s: None,
            drain_s: None,
        }
    }
}

fn emit(r: &PhaseResult) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "RESULT {}", serde_json::to_string(r).unwrap());
    let _ = out.flush();
}

// ---------------------------------------------------------------- the job

/// One job type returning input + 1, with an idempotency key.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Keyed {
    x: u64,
}

/// The same job without a key.
#[derive(Serialize, Deserialize, Clone, Copy)]
struct Plain {
    x: u64,
}

impl gaffer::Job for Keyed {
    const NAME: &'static str = "bench.add_one_keyed";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: gaffer::JobContext) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("k-{}", self.x))
    }
}

impl gaffer::Job for Plain {
    const NAME: &'static str = "bench.add_one";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: gaffer::JobContext) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
}

impl taquba_workflow::jobs::Job for Keyed {
    const NAME: &'static str = "bench.add_one_keyed";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: taquba_workflow::jobs::JobContext<'_>) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("k-{}", self.x))
    }
}

impl taquba_workflow::jobs::Job for Plain {
    const NAME: &'static str = "bench.add_one";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: taquba_workflow::jobs::JobContext<'_>) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
}

// ---------------------------------------------------------------- the pipeline

/// Three memoized phases that do no work.
struct GPipe;

impl gaffer::Pipeline for GPipe {
    const NAME: &'static str = "bench.three_phases";
    type Input = u64;
    type Output = u64;
    type Error = gaffer::ItemError;
    async fn run(&self, ctx: &gaffer::BulkCtx<u64>) -> Result<u64, gaffer::ItemError> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        let memo = ctx.memo();
        let x = ctx.input;
        let a: u64 = memo
            .memoized("parse", || async { Ok::<_, gaffer::Error>(x) })
            .await?;
        let b: u64 = memo
            .memoized("enrich", || async { Ok::<_, gaffer::Error>(a) })
            .await?;
        let c: u64 = memo
            .memoized("score", || async { Ok::<_, gaffer::Error>(b) })
            .await?;
        Ok(c)
    }
}

struct RPipe;

impl taquba_workflow::bulk::Pipeline for RPipe {
    type Input = u64;
    type Output = u64;
    type Error = taquba_workflow::StepError;
    async fn run(
        &self,
        ctx: &taquba_workflow::bulk::BulkCtx<u64>,
    ) -> Result<u64, taquba_workflow::StepError> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        let memo = ctx.memo();
        let x = ctx.input;
        let a: u64 = memo
            .memoized("parse", async { Ok::<_, taquba_workflow::StepError>(x) })
            .await?;
        let b: u64 = memo
            .memoized("enrich", async { Ok::<_, taquba_workflow::StepError>(a) })
            .await?;
        let c: u64 = memo
            .memoized("score", async { Ok::<_, taquba_workflow::StepError>(b) })
            .await?;
        Ok(c)
    }
}

// ---------------------------------------------------------------- child

type BoxErr = Box<dyn std::error::Error + Send + Sync>;

fn child_main(a: ChildArgs) -> i32 {
    spawn_progress_ticker();
    set_phase("startup");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let res = rt.block_on(async {
        match a.engine {
            Engine::Gaffer => gaffer_child(&a).await,
            Engine::Reference => reference_child(&a).await,
            Engine::Raw => raw_child(&a).await,
            Engine::Apalis => apalis_child(&a).await,
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

fn temp_dir(a: &ChildArgs) -> Result<tempfile::TempDir, BoxErr> {
    let prefix = format!("sbs-{}-", a.engine.label());
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix);
    Ok(match &a.tmp_dir {
        Some(d) => b.tempdir_in(d)?,
        None => b.tempdir()?,
    })
}

/// Submit `n` jobs (at most IN_FLIGHT submissions in flight), then await every
/// handle (IN_FLIGHT awaits in flight). Returns (all results == x+1, how many
/// handles said "newly submitted").
async fn drive_jobs<H, Fut, S, SFut, E1, E2>(n: usize, submit: S) -> Result<(bool, usize), BoxErr>
where
    S: Fn(u64) -> SFut,
    SFut: std::future::Future<Output = Result<(H, bool), E1>>,
    H: std::future::IntoFuture<Output = Result<u64, E2>, IntoFuture = Fut>,
    Fut: std::future::Future<Output = Result<u64, E2>>,
    E1: std::fmt::Display,
    E2: std::fmt::Display,
{
    // `SBS_JOIN_EACH=1`: each of IN_FLIGHT tasks submits a job and awaits
    // it before the next, so the backlog stays at most IN_FLIGHT and each
    // join reads a record written moments before (as a service that awaits
    // what it submits does; #13 §4).
    if std::env::var_os("SBS_JOIN_EACH").is_some() {
        let results: Vec<Result<(bool, bool), String>> = futures::stream::iter(0..n as u64)
            .map(|x| {
                let f = submit(x);
                async move {
                    let (h, new) = f.await.map_err(|e| format!("submit failed: {e}"))?;
                    let v = h
                        .into_future()
                        .await
                        .map_err(|e| format!("job {x} failed: {e}"))?;
                    COUNT.fetch_add(1, Ordering::Relaxed);
                    Ok((v == x + 1, new))
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let mut all_ok = true;
        let mut newly = 0;
        for r in results {
            let (ok, new) = r?;
            all_ok &= ok;
            newly += new as usize;
        }
        return Ok((all_ok, newly));
    }
    let submitted: Vec<Result<(u64, H, bool), String>> = futures::stream::iter(0..n as u64)
        .map(|x| {
            let f = submit(x);
            async move {
                let r = f
                    .await
                    .map(|(h, new)| (x, h, new))
                    .map_err(|e| e.to_string());
                COUNT.fetch_add(1, Ordering::Relaxed);
                r
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut handles = Vec::with_capacity(n);
    let mut newly = 0;
    for s in submitted {
        let (x, h, new) = s.map_err(|e| format!("submit failed: {e}"))?;
        newly += new as usize;
        handles.push((x, h));
    }
    let results: Vec<Result<bool, String>> = futures::stream::iter(handles)
        .map(|(x, h)| async move {
            let r = h.into_future().await;
            COUNT.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok(v) => Ok(v == x + 1),
                Err(e) => Err(format!("job {x} failed: {e}")),
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut all_ok = true;
    for r in results {
        all_ok &= r?;
    }
    Ok((all_ok, newly))
}

fn jobs_note(w: Workload, n: usize, correct: bool, newly: usize, runs: usize) -> (bool, String) {
    let mut ok = correct;
    let mut note = String::new();
    if !correct {
        note.push_str("WRONG RESULTS; ");
    }
    match w {
        Workload::JobsResubmit => {
            if runs != 0 {
                ok = false;
                note.push_str(&format!("{runs} jobs RAN on resubmit; "));
            }
            if newly != 0 {
                ok = false;
                note.push_str(&format!("{newly} handles newly_submitted; "));
            }
            if ok {
                note.push_str("none ran, all answered from records");
            }
        }
        _ => {
            if runs != n {
                note.push_str(&format!("{runs} runs for {n} jobs; "));
            }
        }
    }
    (ok, note)
}

/// `--telemetry`: what an operator runs gaffer under.
fn install_telemetry(a: &ChildArgs) -> Result<(), BoxErr> {
    if !a.telemetry {
        return Ok(());
    }
    #[cfg(feature = "telemetry")]
    {
        // `SBS_TELEMETRY=fmt` or `prom` installs only that one (to tell
        // their costs apart); unset, both.
        let only = std::env::var("SBS_TELEMETRY").unwrap_or_default();
        if only != "prom" {
            // `SBS_FILTER=level`: a plain level filter at `info`
            // (`with_max_level(Level::INFO)`); unset, an `EnvFilter` of
            // `info`, or of `RUST_LOG` when set. Both pass the same spans
            // and events; an `EnvFilter` also takes a lock on each span
            // enter, exit and close.
            // `SBS_ANSI=0`: no ANSI styling (`with_ansi(false)`), as for
            // logs written to a file; unset, the default (styled).
            let ansi = std::env::var("SBS_ANSI").map_or(true, |v| v != "0");
            let fmt = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_ansi(ansi);
            if std::env::var("SBS_FILTER").is_ok_and(|f| f == "level") {
                fmt.with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
                    .init();
            } else {
                let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
                fmt.with_env_filter(filter).init();
            }
        }
        if only != "fmt" {
            metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        }
        Ok(())
    }
    #[cfg(not(feature = "telemetry"))]
    Err("--telemetry needs a build with `--features telemetry`".into())
}

async fn gaffer_child(a: &ChildArgs) -> Result<(), BoxErr> {
    use gaffer::taquba::object_store::memory::InMemory;
    install_telemetry(a)?;
    let dir = temp_dir(a)?;
    let mut b = gaffer::Engine::builder();
    b = match a.store {
        StoreKind::Local => b.local_dir(dir.path()),
        StoreKind::Memory => b.object_store(Arc::new(InMemory::new())),
        StoreKind::S3 => b.store_url(s3_url(&dir)?),
        StoreKind::LocalFsync => {
            use gaffer::taquba::object_store::local::LocalFileSystem;
            let fs = LocalFileSystem::new_with_prefix(dir.path())?.with_fsync(true);
            // A given store defaults to the object-store flush (100 ms): set
            // the local directory's default (2 ms) unless told.
            if a.flush == FlushKind::Default {
                b = b.flush_interval(Duration::from_millis(2));
            }
            b.object_store(Arc::new(fs))
        }
    };
    if let Some(f) = a.flush.interval() {
        b = b.flush_interval(f);
    }
    // SBS_RETENTION_MS=d: outcome records removed d ms after each job ends
    // (#13 §4: what retention does to the cost as the store grows).
    if let Ok(ms) = std::env::var("SBS_RETENTION_MS") {
        let ms: u64 = ms
            .parse()
            .map_err(|_| format!("SBS_RETENTION_MS={ms}: not a number of milliseconds"))?;
        b = b.retention(Duration::from_millis(ms));
    }
    match a.group {
        Group::JobsKeyed | Group::JobsPlain => {
            let engine = b
                .max_concurrent_jobs(a.job_workers)
                .register::<Keyed>()
                .register::<Plain>()
                .start()
                .await?;
            // SBS_FIRST_PHASE_ONLY=1: jobs_keyed without its jobs_resubmit
            // (to profile the first phase alone).
            let phases = match std::env::var_os("SBS_FIRST_PHASE_ONLY") {
                Some(_) => &a.group.phases()[..1],
                None => a.group.phases(),
            };
            for &w in phases {
                let m = Meter::start(w.label());
                let (correct, newly) = if w == Workload::JobsPlain {
                    drive_jobs(a.n, |x| {
                        let e = &engine;
                        async move {
                            e.submit(Plain { x }).await.map(|h| {
                                let new = h.newly_submitted();
                                (h, new)
                            })
                        }
                    })
                    .await?
                } else {
                    drive_jobs(a.n, |x| {
                        let e = &engine;
                        async move {
                            e.submit(Keyed { x }).await.map(|h| {
                                let new = h.newly_submitted();
                                (h, new)
                            })
                        }
                    })
                    .await?
                };
                let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
                let (ok, note) = jobs_note(w, a.n, correct, newly, runs);
                emit(&m.finish(a, w, ok, note));
            }
            set_phase("shutdown");
            engine.shutdown().await?;
            // The temp dir's removal, apart from the engine's shutdown
            // (on a discard-mounted disk, a 1M-job store takes minutes).
            set_phase("cleanup");
        }
        Group::Bulk => {
            let engine = b.pipeline_with_concurrency(GPipe, a.conc).start().await?;
            let batch = engine.batch::<GPipe>("bench")?;
            for &w in a.group.phases() {
                let m = Meter::start(w.label());
                let run = batch.run(0..a.n as u64);
                tokio::pin!(run);
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                let report = loop {
                    tokio::select! {
                        r = &mut run => break r,
                        _ = tick.tick() => {
                            if let Some(p) = batch.progress().await {
                                COUNT.store(p.completed as usize, Ordering::SeqCst);
                            }
                        }
                    }
                };
                let report = report?;
                let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
                let (ok, note) = bulk_note(
                    w,
                    a.n,
                    report.succeeded as usize,
                    report.failed as usize,
                    report.total as usize,
                    runs,
                );
                emit(&m.finish(a, w, ok, note));
            }
            set_phase("shutdown");
            engine.shutdown().await?;
            // The temp dir's removal, apart from the engine's shutdown
            // (on a discard-mounted disk, a 1M-job store takes minutes).
            set_phase("cleanup");
        }
        Group::Raw => unreachable!("raw runs on the raw engine"),
    }
    drop(dir);
    Ok(())
}

fn bulk_note(
    w: Workload,
    n: usize,
    succeeded: usize,
    failed: usize,
    total: usize,
    runs: usize,
) -> (bool, String) {
    let mut ok = succeeded == n && failed == 0 && total == n;
    let mut note = String::new();
    if !ok {
        note.push_str(&format!(
            "report total {total} succeeded {succeeded} failed {failed}; "
        ));
    }
    if w == Workload::BulkRerun {
        if runs != 0 {
            ok = false;
            note.push_str(&format!("{runs} pipelines RAN on rerun; "));
        } else if ok {
            note.push_str("no pipeline ran, all answered from records");
        }
    } else if runs != n {
        note.push_str(&format!("{runs} runs for {n} items; "));
    }
    (ok, note)
}

async fn reference_child(a: &ChildArgs) -> Result<(), BoxErr> {
    use taquba012::object_store::{ObjectStore, local::LocalFileSystem, memory::InMemory};
    let dir = temp_dir(a)?;
    let store: Arc<dyn ObjectStore> = match a.store {
        StoreKind::Local => Arc::new(LocalFileSystem::new_with_prefix(dir.path())?),
        StoreKind::Memory => Arc::new(InMemory::new()),
        StoreKind::S3 | StoreKind::LocalFsync => {
            return Err("the reference runs on --store local and memory only here".into());
        }
    };
    let mut opts = taquba012::OpenOptions::default();
    if let Some(f) = a.flush.interval() {
        opts = opts.flush_interval(f);
    }
    let queue = Arc::new(taquba012::Queue::open_with_options(store.clone(), "queue", opts).await?);
    match a.group {
        Group::JobsKeyed | Group::JobsPlain => {
            use taquba_workflow::jobs::JobRunner;
            let mut runner = JobRunner::builder(queue, store)
                .max_concurrent_jobs(a.job_workers)
                .register::<Keyed>()
                .register::<Plain>()
                .build();
            let worker = runner.spawn(std::future::pending::<()>());
            for &w in a.group.phases() {
                let m = Meter::start(w.label());
                let (correct, newly) = if w == Workload::JobsPlain {
                    drive_jobs(a.n, |x| {
                        let r = &runner;
                        async move {
                            r.submit(Plain { x }).await.map(|h| {
                                let new = h.newly_submitted();
                                (h, new)
                            })
                        }
                    })
                    .await?
                } else {
                    drive_jobs(a.n, |x| {
                        let r = &runner;
                        async move {
                            r.submit(Keyed { x }).await.map(|h| {
                                let new = h.newly_submitted();
                                (h, new)
                            })
                        }
                    })
                    .await?
                };
                let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
                let (ok, note) = jobs_note(w, a.n, correct, newly, runs);
                emit(&m.finish(a, w, ok, note));
            }
            set_phase("shutdown");
            worker.shutdown().await?;
            // The temp dir's removal, apart from the engine's shutdown
            // (on a discard-mounted disk, a 1M-job store takes minutes).
            set_phase("cleanup");
        }
        Group::Bulk => {
            use taquba_workflow::bulk::Bulk;
            let mut bulk = Bulk::builder(queue, store, RPipe)
                .max_concurrent(a.conc)
                .build();
            let worker = bulk.spawn(std::future::pending::<()>());
            {
                let batch = bulk.batch("bench")?;
                for &w in a.group.phases() {
                    let m = Meter::start(w.label());
                    let run = batch.run(0..a.n as u64);
                    tokio::pin!(run);
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    let report = loop {
                        tokio::select! {
                            r = &mut run => break r,
                            _ = tick.tick() => {
                                if let Some(p) = batch.progress() {
                                    COUNT.store(p.completed, Ordering::SeqCst);
                                }
                            }
                        }
                    };
                    let report = report?;
                    let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
                    let (ok, note) =
                        bulk_note(w, a.n, report.succeeded, report.failed, report.total, runs);
                    emit(&m.finish(a, w, ok, note));
                }
            }
            set_phase("shutdown");
            worker.shutdown().await?;
            // The temp dir's removal, apart from the engine's shutdown
            // (on a discard-mounted disk, a 1M-job store takes minutes).
            set_phase("cleanup");
        }
        Group::Raw => unreachable!("raw runs on the raw engine"),
    }
    drop(dir);
    Ok(())
}

/// The raw queue's worker: count, then let the loop ack.
struct Acker {
    done: AtomicUsize,
    n: usize,
    all_done: tokio::sync::Notify,
}

impl taquba::Worker for Acker {
    async fn process(
        &self,
        _job: &taquba::JobRecord,
        _lease: &taquba::LeaseHandle,
    ) -> Result<(), taquba::WorkerError> {
        let d = self.done.fetch_add(1, Ordering::SeqCst) + 1;
        COUNT.store(d, Ordering::Relaxed);
        if d == self.n {
            self.all_done.notify_one();
        }
        Ok(())
    }
}

async fn raw_child(a: &ChildArgs) -> Result<(), BoxErr> {
    use taquba::object_store::{ObjectStore, local::LocalFileSystem, memory::InMemory};
    let dir = temp_dir(a)?;
    let (store, path): (Arc<dyn ObjectStore>, String) = match a.store {
        StoreKind::Local => (
            Arc::new(LocalFileSystem::new_with_prefix(dir.path())?),
            "queue".into(),
        ),
        StoreKind::LocalFsync => (
            Arc::new(LocalFileSystem::new_with_prefix(dir.path())?.with_fsync(true)),
            "queue".into(),
        ),
        StoreKind::Memory => (Arc::new(InMemory::new()), "queue".into()),
        StoreKind::S3 => {
            let (store, path) = taquba::open_url(&s3_url(&dir)?, std::env::vars())?;
            (store, format!("{path}/queue"))
        }
    };
    let mut opts = taquba::OpenOptions::default();
    if let Some(f) = a.flush.interval() {
        opts = opts.flush_interval(f);
    }
    let queue = Arc::new(taquba::Queue::open_with_options(store, &path, opts).await?);
    if std::env::var_os("SBS_JOIN_EACH").is_some() {
        raw_join_each(a, queue).await?;
        set_phase("cleanup");
        drop(dir);
        return Ok(());
    }
    let m = Meter::start("raw_queue");
    // Enqueue N 64-byte payloads, 64 in flight.
    let enq: Vec<Result<String, taquba::Error>> = futures::stream::iter(0..a.n)
        .map(|i| {
            let q = &queue;
            async move {
                let payload = raw_payload(i);
                let r = q.enqueue("bench", payload).await;
                COUNT.fetch_add(1, Ordering::Relaxed);
                r
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for r in enq {
        r?;
    }
    let enqueue_s = m.start.elapsed().as_secs_f64();
    // Claim and ack them, `conc` at a time.
    let drain_start = Instant::now();
    let acker = Arc::new(Acker {
        done: AtomicUsize::new(0),
        n: a.n,
        all_done: tokio::sync::Notify::new(),
    });
    let stop = acker.clone();
    taquba::run_worker_concurrent(
        &queue,
        "bench",
        acker.clone(),
        a.conc,
        Duration::from_millis(100),
        async move { stop.all_done.notified().await },
    )
    .await?;
    let drain_s = drain_start.elapsed().as_secs_f64();
    let stats_ok = acker.done.load(Ordering::SeqCst) == a.n;
    let mut r = m.finish(
        a,
        Workload::RawQueue,
        stats_ok,
        if stats_ok {
            String::new()
        } else {
            format!("{} of {} processed", acker.done.load(Ordering::SeqCst), a.n)
        },
    );
    r.runs = acker.done.load(Ordering::SeqCst);
    r.enqueue_s = Some(enqueue_s);
    r.drain_s = Some(drain_s);
    emit(&r);
    set_phase("shutdown");
    match Arc::try_unwrap(queue) {
        Ok(q) => q.close().await?,
        Err(_) => eprintln!("queue still shared at close; dropped"),
    }
    set_phase("cleanup");
    drop(dir);
    Ok(())
}

/// The raw queue's job `i`: 64 bytes, `i` first.
fn raw_payload(i: usize) -> Vec<u8> {
    let mut payload = vec![0u8; 64];
    payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
    payload
}

/// `SBS_JOIN_EACH=1` on the raw queue: `conc` workers claim and ack while
/// IN_FLIGHT tasks each enqueue a job and wait for its completion before the
/// next (the raw counterpart of gaffer's join-each keyed run, #13 §4).
async fn raw_join_each(a: &ChildArgs, queue: Arc<taquba::Queue>) -> Result<(), BoxErr> {
    let m = Meter::start("raw_queue");
    let acker = Arc::new(Acker {
        done: AtomicUsize::new(0),
        n: a.n,
        all_done: tokio::sync::Notify::new(),
    });
    let stop = acker.clone();
    let worker = {
        let queue = queue.clone();
        let acker = acker.clone();
        let conc = a.conc;
        tokio::spawn(async move {
            taquba::run_worker_concurrent(
                &queue,
                "bench",
                acker,
                conc,
                Duration::from_millis(100),
                async move { stop.all_done.notified().await },
            )
            .await
        })
    };
    let keyed = std::env::var_os("SBS_RAW_KEYED").is_some();
    let waited: Vec<Result<bool, taquba::Error>> = futures::stream::iter(0..a.n)
        .map(|i| {
            let q = &queue;
            async move {
                let payload = raw_payload(i);
                let id = if keyed {
                    // SBS_RAW_KEYED=1: as a keyed gaffer submission commits
                    // (a compare that a fresh key is absent, a record put
                    // there and kept, a caller-chosen job id), with none of
                    // gaffer's other work.
                    let id = q.next_job_id();
                    let key = format!("bench/{i}").into_bytes();
                    let fx = taquba::SettlementEffects::default()
                        .kv_put(key.clone(), vec![0u8; 64])
                        .enqueue(taquba::EnqueueRequest {
                            queue: "bench".into(),
                            payload,
                            options: taquba::EnqueueOptions::default().id_override(id.clone()),
                        });
                    if q.kv_compare_commit(&[(&key, None)], fx).await?.is_none() {
                        return Ok(false);
                    }
                    id
                } else {
                    q.enqueue("bench", payload).await?
                };
                let done = matches!(
                    q.wait_for_completion(&id).await?,
                    taquba::WaitOutcome::Done(_) | taquba::WaitOutcome::NotFound
                );
                Ok(done)
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let all = waited
        .into_iter()
        .try_fold(true, |all, w| w.map(|done| all && done))?;
    worker.await??;
    let ok = all && acker.done.load(Ordering::SeqCst) == a.n;
    let mut r = m.finish(a, Workload::RawQueue, ok, String::new());
    r.runs = acker.done.load(Ordering::SeqCst);
    emit(&r);
    set_phase("shutdown");
    match Arc::try_unwrap(queue) {
        Ok(q) => q.close().await?,
        Err(_) => eprintln!("queue still shared at close; dropped"),
    }
    Ok(())
}

// ---------------------------------------------------------------- apalis

/// The job's input, for the apalis side (one handler for both job types).
trait HasX {
    fn x(&self) -> u64;
}

impl HasX for Plain {
    fn x(&self) -> u64 {
        self.x
    }
}

impl HasX for Keyed {
    fn x(&self) -> u64 {
        self.x
    }
}

/// apalis's handler: input + 1.
async fn apalis_add_one<T: HasX>(job: T) -> Result<u64, apalis::prelude::BoxDynError> {
    RUNS.fetch_add(1, Ordering::Relaxed);
    Ok(job.x() + 1)
}

fn push_note(note: &mut String, more: &str) {
    if !note.is_empty() {
        note.push_str("; ");
    }
    note.push_str(more);
}

/// `PRAGMA synchronous` on each of the pool's connections, opened at once:
/// apalis-sqlite's `setup` sets it to OFF on the connection that runs it
/// (the setting is per connection); a connection opened later has SQLite's
/// default (2 = FULL).
async fn apalis_synchronous(pool: &apalis_sqlite::SqlitePool) -> String {
    let mut conns = Vec::new();
    let mut modes = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        match tokio::time::timeout(Duration::from_secs(1), pool.acquire()).await {
            Ok(Ok(mut c)) => {
                let m: Result<(i64,), _> = sqlx::query_as("PRAGMA synchronous")
                    .fetch_one(&mut *c)
                    .await;
                modes.push(
                    m.map(|m| m.0.to_string())
                        .unwrap_or_else(|e| format!("?{e}")),
                );
                conns.push(c);
            }
            _ => break,
        }
    }
    format!(
        "PRAGMA synchronous per pool connection [{}] (0 = OFF, 2 = FULL)",
        modes.join(",")
    )
}

/// Push `n` jobs, `IN_FLIGHT` pushes in flight, each with a task id of ours
/// (apalis's `push` returns no id) and, keyed, an idempotency key. Returns
/// (task id, x) for each push.
async fn apalis_push<T>(
    storage: &apalis_sqlite::SqliteStorage<T>,
    n: usize,
    keyed: bool,
    make: fn(u64) -> T,
) -> Result<Vec<(String, u64)>, BoxErr>
where
    T: Serialize + serde::de::DeserializeOwned + Send + Sync + Unpin + 'static,
{
    use apalis::prelude::{TaskBuilder, TaskId, TaskSink};
    let pushed: Vec<Result<(String, u64), String>> = futures::stream::iter(0..n as u64)
        .map(|x| {
            let mut s = storage.clone();
            async move {
                let id = TaskId::from_ulid(ulid::Ulid::generate());
                let mut b = TaskBuilder::new(make(x)).task_id(id.clone());
                if keyed {
                    b = b.idempotency_key(format!("k-{x}"));
                }
                let r = s.push_task(b.build()).await;
                COUNT.fetch_add(1, Ordering::Relaxed);
                r.map(|()| (id.to_string(), x))
                    .map_err(|e| format!("push of {x} failed: {e}"))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    Ok(pushed.into_iter().collect::<Result<Vec<_>, String>>()?)
}

/// Wait for every pushed job's result through apalis's `wait_for` (one
/// stream over all the ids: it polls the table, sleeping 500 ms whenever a
/// poll finds nothing new) and check each is Done with x + 1. Returns
/// whether all were correct.
async fn apalis_await<T>(
    storage: &apalis_sqlite::SqliteStorage<T>,
    pushed: &[(String, u64)],
) -> Result<bool, BoxErr> {
    use apalis::prelude::{Status, TaskId, WaitForCompletion};
    let want: std::collections::HashMap<&str, u64> =
        pushed.iter().map(|(id, x)| (id.as_str(), *x)).collect();
    let ids: Vec<TaskId> = pushed
        .iter()
        .map(|(id, _)| id.parse::<TaskId>())
        .collect::<Result<_, _>>()?;
    let mut s = storage.clone();
    let mut results = WaitForCompletion::<u64>::wait_for(&mut s, ids);
    let mut seen = 0usize;
    let mut correct = true;
    while let Some(r) = results.next().await {
        let r = r?;
        seen += 1;
        COUNT.fetch_add(1, Ordering::Relaxed);
        let x = want.get(r.task_id.to_string().as_str()).copied();
        correct &= r.status == Status::Done && x.is_some_and(|x| r.result == Ok(x + 1));
    }
    if seen != pushed.len() {
        return Err(format!(
            "wait_for ended after {seen} of {} results (apalis's stream ends silently when a poll fails)",
            pushed.len()
        )
        .into());
    }
    Ok(correct)
}

/// apalis 1.0 on apalis-sqlite 1.0: a SQLite file in the temp dir, set up
/// as apalis-sqlite's README's event-driven worker
/// (`SqliteStorage::connect_with_callback`, `SqliteStorage::setup`: WAL
/// journal, `synchronous = OFF` on the connection that runs it; a poll
/// strategy woken by SQLite's insert hook, with a 500 ms interval beside
/// it), one worker with `concurrency(job_workers)` and
/// `parallelize(tokio::spawn)` (apalis's README), default `Config` (fetch
/// batches of 10, results persisted). Its basic polling worker (no
/// strategy) is no option here: after a fetch finds nothing it sleeps until
/// its next heartbeat, 30 s.
///
/// The same shape as gaffer's jobs workloads: N pushes with 64 in flight,
/// then every result awaited and checked. apalis's `push` returns no task
/// id, so each task is built with an id of ours; results are awaited through
/// `WaitForCompletion::wait_for`, which polls. Keyed: the task carries
/// `idempotency_key("k-{x}")` (unique per queue; a duplicate insert is
/// `ON CONFLICT DO NOTHING`). jobs_resubmit pushes the same N keyed tasks
/// again: apalis answers each with `Ok(())` and inserts nothing, but tells
/// the caller neither that it was a duplicate nor the original's id, so
/// there is no result to await: the phase times the pushes only and checks,
/// after a 1 s pause outside the timing, that none ran.
async fn apalis_child(a: &ChildArgs) -> Result<(), BoxErr> {
    use apalis::prelude::{BackendExt, ParallelizeExt, Strategy, WorkerBuilder, WorkerBuilderExt};
    use apalis_sqlite::{Config, SqliteStorage};
    if a.store != StoreKind::Local {
        return Err("apalis runs on --store local only (a SQLite file)".into());
    }
    let dir = temp_dir(a)?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("apalis.db").display()
    );
    let (pool, listener) = SqliteStorage::connect_with_callback(&url)?;
    SqliteStorage::setup(&pool).await?;
    let durability = apalis_synchronous(&pool).await;
    let strategy = Strategy::new()
        .stream(listener.ready_chunks(Config::default().batch_size))
        .interval(Duration::from_millis(500));
    match a.group {
        Group::JobsPlain => {
            let storage = SqliteStorage::<Plain>::new(&pool);
            let worker = WorkerBuilder::new("bench-plain")
                .backend(storage.clone().poll_with_strategy(strategy))
                .concurrency(a.job_workers)
                .parallelize(tokio::spawn)
                .build(apalis_add_one::<Plain>);
            let running = tokio::spawn(worker.run());
            let m = Meter::start(Workload::JobsPlain.label());
            let pushed = apalis_push(&storage, a.n, false, |x| Plain { x }).await?;
            let correct = apalis_await(&storage, &pushed).await?;
            let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
            let (ok, mut note) = jobs_note(Workload::JobsPlain, a.n, correct, a.n, runs);
            push_note(&mut note, &durability);
            emit(&m.finish(a, Workload::JobsPlain, ok, note));
            running.abort();
        }
        Group::JobsKeyed => {
            let storage = SqliteStorage::<Keyed>::new(&pool);
            let worker = WorkerBuilder::new("bench-keyed")
                .backend(storage.clone().poll_with_strategy(strategy))
                .concurrency(a.job_workers)
                .parallelize(tokio::spawn)
                .build(apalis_add_one::<Keyed>);
            let running = tokio::spawn(worker.run());
            let m = Meter::start(Workload::JobsKeyed.label());
            let pushed = apalis_push(&storage, a.n, true, |x| Keyed { x }).await?;
            let correct = apalis_await(&storage, &pushed).await?;
            let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
            let (ok, mut note) = jobs_note(Workload::JobsKeyed, a.n, correct, a.n, runs);
            push_note(&mut note, &durability);
            emit(&m.finish(a, Workload::JobsKeyed, ok, note));

            let m = Meter::start(Workload::JobsResubmit.label());
            apalis_push(&storage, a.n, true, |x| Keyed { x }).await?;
            let mut r = m.finish(a, Workload::JobsResubmit, true, String::new());
            tokio::time::sleep(Duration::from_secs(1)).await;
            let runs = RUNS.load(Ordering::SeqCst) - m.runs0;
            r.runs = runs;
            r.ok = runs == 0;
            r.note = format!(
                "pushes only: apalis answers a duplicate with Ok(()), no id, no result to await; {runs} ran within 1 s"
            );
            emit(&r);
            running.abort();
        }
        Group::Bulk | Group::Raw => {
            return Err("apalis runs the jobs workloads only".into());
        }
    }
    pool.close().await;
    drop(dir);
    Ok(())
}

// ---------------------------------------------------------------- parent

/// What happened to one child.
#[derive(Debug)]
enum ChildFate {
    Done,
    Failed(String),
    Hung(String),
}

fn run_child(hang_secs: u64, ca: &ChildArgs) -> (Vec<PhaseResult>, ChildFate) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.arg("child")
        .args(["--engine", ca.engine.label()])
        .args(["--group", ca.group.label()])
        .args(["--store", ca.store.label()])
        .args(["--flush", ca.flush.label()])
        .args(["--n", &ca.n.to_string()])
        .args(["--conc", &ca.conc.to_string()])
        .args(["--job-workers", &ca.job_workers.to_string()]);
    if let Some(d) = &ca.tmp_dir {
        cmd.arg("--tmp-dir").arg(d);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (vec![], ChildFate::Failed(format!("spawn: {e}"))),
    };
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let err_buf = Arc::new(Mutex::new(Vec::<String>::new()));
    let eb = err_buf.clone();
    let err_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let mut b = eb.lock().unwrap();
            b.push(line);
            if b.len() > 40 {
                b.remove(0);
            }
        }
    });
    let hang = Duration::from_secs(hang_secs);
    let mut results = Vec::new();
    let mut last_progress = String::new();
    let mut last_change = Instant::now();
    let mut error_line = None;
    let fate = loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                if let Some(j) = line.strip_prefix("RESULT ") {
                    match serde_json::from_str::<PhaseResult>(j) {
                        Ok(r) => results.push(r),
                        Err(e) => println!("  unparsable RESULT ({e}): {j}"),
                    }
                    last_change = Instant::now();
                } else if let Some(p) = line.strip_prefix("PROGRESS ") {
                    // "phase count runs": any change is progress.
                    if p != last_progress {
                        last_progress = p.to_string();
                        last_change = Instant::now();
                    }
                } else if let Some(e) = line.strip_prefix("ERROR ") {
                    error_line = Some(e.to_string());
                } else {
                    println!("  child: {line}");
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait();
                let _ = err_thread.join();
                break match status {
                    Ok(s) if s.success() => ChildFate::Done,
                    Ok(s) => {
                        let tail = err_buf.lock().unwrap().join(" | ");
                        ChildFate::Failed(format!(
                            "exit {s}; error: {}; stderr tail: {}",
                            error_line.clone().unwrap_or_default(),
                            truncate(&tail, 1500)
                        ))
                    }
                    Err(e) => ChildFate::Failed(format!("wait: {e}")),
                };
            }
        }
        if last_change.elapsed() > hang {
            let _ = child.kill();
            let _ = child.wait();
            let tail = err_buf.lock().unwrap().join(" | ");
            break ChildFate::Hung(format!(
                "no progress for {} s; last progress `{}` (phase, count, runs); stderr tail: {}",
                hang_secs,
                last_progress,
                truncate(&tail, 1000)
            ));
        }
    };
    (results, fate)
}

fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut i = s.len() - n;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        format!("…{}", &s[i..])
    }
}

#[derive(Serialize, Deserialize)]
struct ProblemLine {
    workload: Workload,
    store: StoreKind,
    flush: FlushKind,
    conc: usize,
    engine: Engine,
    text: String,
}

/// Rebuild the cells from a saved raw output.
fn report_main(cli: Cli, path: &std::path::Path) {
    let text = std::fs::read_to_string(path).expect("read the raw output");
    let mut cells: BTreeMap<Key, Cell> = BTreeMap::new();
    let mut rep = 0usize;
    for line in text.lines() {
        if line.starts_with('[') {
            // "[  1/120] t+0s rep 1 ...": older outputs carry the rep only here.
            if let Some(r) = line
                .split_whitespace()
                .skip_while(|w| *w != "rep")
                .nth(1)
                .and_then(|r| r.parse().ok())
            {
                rep = r;
            }
        } else if let Some(j) = line.strip_prefix("  raw: ") {
            let mut r: PhaseResult = serde_json::from_str(j).expect("a raw line");
            if r.rep == 0 {
                r.rep = rep;
            }
            if cli.workload.contains(&r.workload) {
                cells
                    .entry((r.workload, r.store, r.flush, r.conc, r.engine))
                    .or_default()
                    .runs
                    .push(r);
            }
        } else if let Some(j) = line.strip_prefix("  problem: ") {
            let p: ProblemLine = serde_json::from_str(j).expect("a problem line");
            cells
                .entry((p.workload, p.store, p.flush, p.conc, p.engine))
                .or_default()
                .problems
                .push(p.text);
        }
    }
    println!("(tables re-rendered from {})", path.display());
    println!();
    let workloads = cli.workload.clone();
    print_tables(&cli, &cells, &workloads);
}

/// Median over the repetitions of gaffer's items/s ÷ the reference's in the
/// same repetition (adjacent runs, so load drift between repetitions cancels).
fn paired_ratio(g: Option<&Cell>, r: Option<&Cell>) -> Option<f64> {
    let (g, r) = (g?, r?);
    let v: Vec<f64> = g
        .runs
        .iter()
        .filter_map(|gr| {
            r.runs
                .iter()
                .find(|rr| rr.rep == gr.rep)
                .map(|rr| gr.items_per_s / rr.items_per_s)
        })
        .collect();
    median(v)
}

fn per_rep(c: Option<&Cell>) -> String {
    match c {
        Some(c) if !c.runs.is_empty() => {
            let mut runs: Vec<&PhaseResult> = c.runs.iter().collect();
            runs.sort_by_key(|r| r.rep);
            runs.iter()
                .map(|r| format!("{:.0}", r.items_per_s))
                .collect::<Vec<_>>()
                .join(" / ")
        }
        _ => "–".into(),
    }
}

/// (workload, store, flush, conc, engine)
type Key = (Workload, StoreKind, FlushKind, usize, Engine);

#[derive(Default)]
struct Cell {
    runs: Vec<PhaseResult>,
    problems: Vec<String>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

struct Med {
    n: usize,
    reps: usize,
    items_s: f64,
    wall_s: f64,
    cpu_s: f64,
    rss_mib: f64,
    enqueue_s: Option<f64>,
    drain_s: Option<f64>,
}

fn med(cell: Option<&Cell>) -> Option<Med> {
    let c = cell?;
    let ok: Vec<&PhaseResult> = c.runs.iter().collect();
    if ok.is_empty() {
        return None;
    }
    Some(Med {
        n: ok[0].n,
        reps: ok.len(),
        items_s: median(ok.iter().map(|r| r.items_per_s).collect())?,
        wall_s: median(ok.iter().map(|r| r.wall_s).collect())?,
        cpu_s: median(ok.iter().map(|r| r.cpu_s).collect())?,
        rss_mib: median(ok.iter().map(|r| r.peak_rss_kib as f64 / 1024.0).collect())?,
        enqueue_s: median(ok.iter().filter_map(|r| r.enqueue_s).collect()),
        drain_s: median(ok.iter().filter_map(|r| r.drain_s).collect()),
    })
}

fn status_of(cell: Option<&Cell>) -> String {
    let Some(c) = cell else {
        return "not run".into();
    };
    let mut s: Vec<String> = c.problems.clone();
    for r in &c.runs {
        if !r.ok {
            s.push(format!("FAILED CHECK: {}", r.note));
        }
    }
    if s.is_empty() {
        let notes: Vec<&str> = c
            .runs
            .iter()
            .map(|r| r.note.as_str())
            .filter(|n| !n.is_empty())
            .collect();
        let mut notes = notes;
        notes.dedup();
        if notes.is_empty() {
            "ok".into()
        } else {
            format!("ok ({})", notes.join("; "))
        }
    } else {
        s.dedup();
        s.join("; ")
    }
}

fn fmt_f(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(x) => format!("{x:.digits$}"),
        None => "–".into(),
    }
}

fn parent_main(cli: Cli) {
    let workloads: Vec<Workload> = cli.workload.clone();
    let mut groups: Vec<Group> = workloads.iter().map(|w| w.group()).collect();
    groups.sort();
    groups.dedup();
    let engines: Vec<Engine> = cli
        .engine
        .iter()
        .copied()
        .filter(|e| *e != Engine::Raw)
        .filter(|e| {
            let peer = *e == Engine::Apalis;
            if peer {
                println!("(apalis runs in `side-by-side peers`, not in this matrix)");
            }
            !peer
        })
        .collect();
    let n_of = |f: FlushKind| match f {
        FlushKind::Default => cli.n_default,
        FlushKind::OneMs => cli.n_1ms,
    };

    // The child runs, in matrix order.
    let mut plan: Vec<(usize, ChildArgs)> = Vec::new();
    for rep in 0..cli.reps {
        for &flush in &cli.flush {
            for &store in &cli.store {
                for &group in &groups {
                    let concs: Vec<usize> = match group {
                        Group::Bulk | Group::Raw => cli.conc.clone(),
                        _ => vec![cli.job_workers],
                    };
                    for conc in concs {
                        let mut es: Vec<Engine> = if group == Group::Raw {
                            vec![Engine::Raw]
                        } else {
                            engines.clone()
                        };
                        // Alternate which engine goes first.
                        if rep % 2 == 1 {
                            es.reverse();
                        }
                        for engine in es {
                            plan.push((
                                rep,
                                ChildArgs {
                                    engine,
                                    group,
                                    store,
                                    flush,
                                    n: n_of(flush),
                                    conc,
                                    job_workers: cli.job_workers,
                                    tmp_dir: cli.tmp_dir.clone(),
                                    telemetry: false,
                                },
                            ));
                        }
                    }
                }
            }
        }
    }

    println!("# side-by-side raw output");
    println!();
    println!(
        "children: {}, reps {}, stores {:?}, flush {:?}, workloads {:?}, engines {:?}, conc {:?}, N default {} / 1ms {}, job workers {}",
        plan.len(),
        cli.reps,
        cli.store,
        cli.flush,
        cli.workload,
        engines,
        cli.conc,
        cli.n_default,
        cli.n_1ms,
        cli.job_workers
    );
    println!();
    let t0 = Instant::now();
    let mut cells: BTreeMap<Key, Cell> = BTreeMap::new();
    for (i, (rep, ca)) in plan.iter().enumerate() {
        println!(
            "[{:>3}/{}] t+{:.0}s rep {} {} {} {} flush={} n={} conc={} load: {}",
            i + 1,
            plan.len(),
            t0.elapsed().as_secs_f64(),
            rep + 1,
            ca.engine.label(),
            ca.group.label(),
            ca.store.label(),
            ca.flush.label(),
            ca.n,
            ca.conc,
            loadavg()
        );
        let _ = std::io::stdout().flush();
        let (mut results, fate) = run_child(cli.hang_secs, ca);
        for r in results.iter_mut() {
            r.rep = rep + 1;
            println!("  raw: {}", serde_json::to_string(r).unwrap());
        }
        let conc_of = |w: Workload| {
            if w.uses_conc() {
                ca.conc
            } else {
                ca.job_workers
            }
        };
        for r in results.iter() {
            if !workloads.contains(&r.workload) {
                continue;
            }
            let key = (r.workload, r.store, r.flush, r.conc, r.engine);
            cells.entry(key).or_default().runs.push(r.clone());
        }
        let problem = match &fate {
            ChildFate::Done => None,
            ChildFate::Failed(d) => Some(format!("FAILED (rep {}): {d}", rep + 1)),
            ChildFate::Hung(d) => Some(format!("HUNG (rep {}): {d}", rep + 1)),
        };
        if let Some(p) = problem {
            println!("  !! {p}");
            // Charge the problem to every phase of the group that did not report.
            for &w in ca.group.phases() {
                if !workloads.contains(&w) {
                    continue;
                }
                let reported = results.iter().any(|r| r.workload == w);
                let key = (w, ca.store, ca.flush, conc_of(w), ca.engine);
                let text = if reported {
                    format!("after this phase reported: {p}")
                } else {
                    p.clone()
                };
                println!(
                    "  problem: {}",
                    serde_json::to_string(&ProblemLine {
                        workload: w,
                        store: ca.store,
                        flush: ca.flush,
                        conc: conc_of(w),
                        engine: ca.engine,
                        text: text.clone(),
                    })
                    .unwrap()
                );
                cells.entry(key).or_default().problems.push(text);
            }
        }
    }
    println!();
    println!("total matrix time: {:.0} s", t0.elapsed().as_secs_f64());
    println!();
    print_tables(&cli, &cells, &workloads);
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn print_tables(cli: &Cli, cells: &BTreeMap<Key, Cell>, workloads: &[Workload]) {
    let get = |w, s, f, c, e| cells.get(&(w, s, f, c, e));
    let raw = |s, f, c| med(get(Workload::RawQueue, s, f, c, Engine::Raw));
    println!("## Medians");
    println!();
    println!(
        "Throughput ratios are items/s ÷ items/s (higher = gaffer faster); `gaffer ÷ ref` divides the two medians, `paired g÷r` is the median over repetitions of the ratio within one repetition (the two engines ran back to back, so load drift between repetitions cancels); CPU and RSS ratios are gaffer ÷ reference (lower = gaffer leaner). ÷raw(c) compares with raw_queue at claim/ack concurrency c on the same store and flush. Jobs run with {} workers in both engines.",
        cli.job_workers
    );
    println!();
    println!(
        "| workload | store | flush | N | gaffer items/s | reference items/s | gaffer ÷ ref | paired g÷r | gaffer ÷ raw(16) | gaffer ÷ raw(200) | gaffer CPU s | ref CPU s | CPU g÷r | gaffer CPU s/1k | gaffer peak RSS MiB | ref peak RSS MiB | RSS g÷r | reps g/r | status gaffer | status reference |"
    );
    println!(
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
    );
    let engine_workloads: Vec<Workload> = workloads
        .iter()
        .copied()
        .filter(|w| *w != Workload::RawQueue)
        .collect();
    for &flush in &cli.flush {
        for &store in &cli.store {
            for &w in &engine_workloads {
                let concs: Vec<usize> = if w.uses_conc() {
                    cli.conc.clone()
                } else {
                    vec![cli.job_workers]
                };
                for c in concs {
                    let g = med(get(w, store, flush, c, Engine::Gaffer));
                    let r = med(get(w, store, flush, c, Engine::Reference));
                    let name = if w.uses_conc() {
                        format!("{}({c})", w.label())
                    } else {
                        w.label().to_string()
                    };
                    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                        _ => None,
                    };
                    let gi = g.as_ref().map(|m| m.items_s);
                    let ri = r.as_ref().map(|m| m.items_s);
                    let r16 = raw(store, flush, 16).map(|m| m.items_s);
                    let r200 = raw(store, flush, 200).map(|m| m.items_s);
                    println!(
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} | {} |",
                        name,
                        store.label(),
                        flush.label(),
                        g.as_ref()
                            .or(r.as_ref())
                            .map(|m| m.n.to_string())
                            .unwrap_or("–".into()),
                        fmt_f(gi, 0),
                        fmt_f(ri, 0),
                        fmt_f(ratio(gi, ri), 2),
                        fmt_f(
                            paired_ratio(
                                get(w, store, flush, c, Engine::Gaffer),
                                get(w, store, flush, c, Engine::Reference)
                            ),
                            2
                        ),
                        fmt_f(ratio(gi, r16), 2),
                        fmt_f(ratio(gi, r200), 2),
                        fmt_f(g.as_ref().map(|m| m.cpu_s), 2),
                        fmt_f(r.as_ref().map(|m| m.cpu_s), 2),
                        fmt_f(
                            ratio(g.as_ref().map(|m| m.cpu_s), r.as_ref().map(|m| m.cpu_s)),
                            2
                        ),
                        fmt_f(g.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                        fmt_f(g.as_ref().map(|m| m.rss_mib), 1),
                        fmt_f(r.as_ref().map(|m| m.rss_mib), 1),
                        fmt_f(
                            ratio(g.as_ref().map(|m| m.rss_mib), r.as_ref().map(|m| m.rss_mib)),
                            2
                        ),
                        g.as_ref().map(|m| m.reps).unwrap_or(0),
                        r.as_ref().map(|m| m.reps).unwrap_or(0),
                        status_of(get(w, store, flush, c, Engine::Gaffer)),
                        status_of(get(w, store, flush, c, Engine::Reference)),
                    );
                }
            }
        }
    }
    println!();
    println!("### items/s per repetition (rep 1 / rep 2 / …)");
    println!();
    println!("| workload | store | flush | gaffer | reference |");
    println!("|---|---|---|---|---|");
    for &flush in &cli.flush {
        for &store in &cli.store {
            for &w in &engine_workloads {
                let concs: Vec<usize> = if w.uses_conc() {
                    cli.conc.clone()
                } else {
                    vec![cli.job_workers]
                };
                for c in concs {
                    let name = if w.uses_conc() {
                        format!("{}({c})", w.label())
                    } else {
                        w.label().to_string()
                    };
                    println!(
                        "| {} | {} | {} | {} | {} |",
                        name,
                        store.label(),
                        flush.label(),
                        per_rep(get(w, store, flush, c, Engine::Gaffer)),
                        per_rep(get(w, store, flush, c, Engine::Reference)),
                    );
                }
            }
        }
    }
    if workloads.contains(&Workload::RawQueue) {
        println!();
        println!(
            "### raw_queue (taquba 0.16: enqueue N × 64 B with 64 in flight, then claim + ack)"
        );
        println!();
        println!(
            "| store | flush | N | conc | items/s (total) | wall s | enqueue s | claim+ack s | CPU s | CPU s/1k | peak RSS MiB | reps | items/s per rep | status |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        for &flush in &cli.flush {
            for &store in &cli.store {
                for &c in &cli.conc {
                    let cell = get(Workload::RawQueue, store, flush, c, Engine::Raw);
                    let m = med(cell);
                    println!(
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        store.label(),
                        flush.label(),
                        m.as_ref().map(|m| m.n.to_string()).unwrap_or("–".into()),
                        c,
                        fmt_f(m.as_ref().map(|m| m.items_s), 0),
                        fmt_f(m.as_ref().map(|m| m.wall_s), 2),
                        fmt_f(m.as_ref().and_then(|m| m.enqueue_s), 2),
                        fmt_f(m.as_ref().and_then(|m| m.drain_s), 2),
                        fmt_f(m.as_ref().map(|m| m.cpu_s), 2),
                        fmt_f(m.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                        fmt_f(m.as_ref().map(|m| m.rss_mib), 1),
                        m.as_ref().map(|m| m.reps).unwrap_or(0),
                        per_rep(cell),
                        status_of(cell),
                    );
                }
            }
        }
    }
    println!();
    print_targets(cli, cells);
}

fn print_targets(cli: &Cli, cells: &BTreeMap<Key, Cell>) {
    let jw = cli.job_workers;
    let get = |w, s, f, c, e| med(cells.get(&(w, s, f, c, e)));
    let clean = |w, s, f, c, e| {
        let st = status_of(cells.get(&(w, s, f, c, e)));
        st.starts_with("ok")
    };
    println!("## Targets (per store; a target holds only where both engines ran clean)");
    println!();
    println!("| target | store | measured | holds |");
    println!("|---|---|---|---|");
    let verdict = |b: Option<bool>| match b {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "n/a",
    };
    for &store in &cli.store {
        let speed = |w: Workload, f: FlushKind, c: usize| -> Option<(f64, f64, bool)> {
            let g = get(w, store, f, c, Engine::Gaffer)?;
            let r = get(w, store, f, c, Engine::Reference)?;
            let clean =
                clean(w, store, f, c, Engine::Gaffer) && clean(w, store, f, c, Engine::Reference);
            let paired = paired_ratio(
                cells.get(&(w, store, f, c, Engine::Gaffer)),
                cells.get(&(w, store, f, c, Engine::Reference)),
            )
            .unwrap_or(f64::NAN);
            Some((g.items_s / r.items_s, paired, clean))
        };
        let row = |name: &str, w: Workload, f: FlushKind, c: usize, min: f64| {
            let s = speed(w, f, c);
            let holds = s.map(|(x, _, cl)| x >= min && cl);
            let paired_holds = s.map(|(_, p, cl)| p >= min && cl);
            let mut v = verdict(holds).to_string();
            if paired_holds != holds {
                v.push_str(&format!(" (paired: {})", verdict(paired_holds)));
            }
            println!(
                "| {} | {} | {} | {} |",
                name,
                store.label(),
                s.map(|(x, p, _)| format!("{x:.2}× reference (paired {p:.2}×)"))
                    .unwrap_or("–".into()),
                v
            );
        };
        row(
            "jobs_keyed default flush ≥ 3× reference",
            Workload::JobsKeyed,
            FlushKind::Default,
            jw,
            3.0,
        );
        row(
            "jobs_keyed 1 ms ≥ 2× reference",
            Workload::JobsKeyed,
            FlushKind::OneMs,
            jw,
            2.0,
        );
        {
            let g = get(
                Workload::JobsKeyed,
                store,
                FlushKind::OneMs,
                jw,
                Engine::Gaffer,
            );
            let raw = get(
                Workload::RawQueue,
                store,
                FlushKind::OneMs,
                200,
                Engine::Raw,
            );
            let v = match (&g, &raw) {
                (Some(g), Some(r)) => Some(g.items_s / r.items_s),
                _ => None,
            };
            println!(
                "| jobs_keyed 1 ms ≥ 60% of raw_queue(200) | {} | {} | {} |",
                store.label(),
                v.map(|x| format!("{:.1}% of raw(200)", x * 100.0))
                    .unwrap_or("–".into()),
                verdict(v.map(|x| x >= 0.6
                    && clean(
                        Workload::JobsKeyed,
                        store,
                        FlushKind::OneMs,
                        jw,
                        Engine::Gaffer
                    )))
            );
        }
        row(
            "jobs_resubmit 1 ms ≥ 3×",
            Workload::JobsResubmit,
            FlushKind::OneMs,
            jw,
            3.0,
        );
        row(
            "bulk_items(16) default ≥ 10×",
            Workload::BulkItems,
            FlushKind::Default,
            16,
            10.0,
        );
        row(
            "bulk_items(16) 1 ms ≥ 5×",
            Workload::BulkItems,
            FlushKind::OneMs,
            16,
            5.0,
        );
        row(
            "bulk_rerun 1 ms ≥ 3× (at 16)",
            Workload::BulkRerun,
            FlushKind::OneMs,
            16,
            3.0,
        );
        row(
            "bulk_rerun 1 ms ≥ 3× (at 200)",
            Workload::BulkRerun,
            FlushKind::OneMs,
            200,
            3.0,
        );
        {
            let g = get(
                Workload::JobsKeyed,
                store,
                FlushKind::Default,
                jw,
                Engine::Gaffer,
            );
            for c in [16usize, 200] {
                let raw = get(
                    Workload::RawQueue,
                    store,
                    FlushKind::Default,
                    c,
                    Engine::Raw,
                );
                let v = match (&g, &raw) {
                    (Some(g), Some(r)) => {
                        Some((g.cpu_s / g.n as f64 * 1000.0, r.cpu_s / r.n as f64 * 1000.0))
                    }
                    _ => None,
                };
                println!(
                    "| CPU per 1,000 jobs_keyed default ≤ 2× raw_queue({c})'s | {} | {} | {} |",
                    store.label(),
                    v.map(|(g, r)| format!("{g:.3} s vs raw {r:.3} s = {:.2}×", g / r))
                        .unwrap_or("–".into()),
                    verdict(v.map(|(g, r)| g <= 2.0 * r))
                );
            }
        }
        {
            let g = get(
                Workload::JobsKeyed,
                store,
                FlushKind::OneMs,
                jw,
                Engine::Gaffer,
            );
            let r = get(
                Workload::JobsKeyed,
                store,
                FlushKind::OneMs,
                jw,
                Engine::Reference,
            );
            let v = match (&g, &r) {
                (Some(g), Some(r)) => Some((g.rss_mib, r.rss_mib, g.n)),
                _ => None,
            };
            println!(
                "| peak RSS jobs_keyed {} 1 ms ≤ half the reference's | {} | {} | {} |",
                v.map(|(_, _, n)| n.to_string()).unwrap_or("N".into()),
                store.label(),
                v.map(|(g, r, _)| format!("{g:.1} MiB vs {r:.1} MiB = {:.2}×", g / r))
                    .unwrap_or("–".into()),
                verdict(v.map(|(g, r, _)| g <= 0.5 * r))
            );
        }
    }
}

fn main() {
    let cli = Cli::parse();
    match cli.child {
        Some(ChildCmd::Child(a)) => std::process::exit(child_main(a)),
        Some(ChildCmd::Peers(p)) => peers_main(p),
        None => match cli.report.clone() {
            Some(path) => report_main(cli, &path),
            None => parent_main(cli),
        },
    }
}

// ---------------------------------------------------------------- peers

/// (workload, N, engine, store, flush)
type PeerKey = (Workload, usize, Engine, StoreKind, FlushKind);

/// The engine configurations of a peers run, in their order.
fn peer_configs(p: &PeersArgs) -> Vec<(Engine, StoreKind, FlushKind)> {
    let mut c: Vec<(Engine, StoreKind, FlushKind)> = p
        .gaffer_flush
        .iter()
        .map(|&f| (Engine::Gaffer, StoreKind::Local, f))
        .collect();
    if p.gaffer_fsync {
        c.push((Engine::Gaffer, StoreKind::LocalFsync, FlushKind::Default));
    }
    c.push((Engine::Apalis, StoreKind::Local, FlushKind::Default));
    c
}

fn peers_main(p: PeersArgs) {
    // The child runs: per repetition, per N, per group, gaffer at each flush
    // and apalis, back to back (order reversed every other repetition).
    let mut plan: Vec<(usize, ChildArgs)> = Vec::new();
    for rep in 0..p.reps {
        for &n in &p.n {
            for &group in &p.group {
                let mut runs: Vec<(Engine, StoreKind, FlushKind)> = peer_configs(&p)
                    .into_iter()
                    .filter(|&(e, _, _)| e != Engine::Apalis || n <= p.apalis_max_n)
                    .collect();
                if rep % 2 == 1 {
                    runs.reverse();
                }
                for (engine, store, flush) in runs {
                    plan.push((
                        rep,
                        ChildArgs {
                            engine,
                            group,
                            store,
                            flush,
                            n,
                            conc: p.job_workers,
                            job_workers: p.job_workers,
                            tmp_dir: p.tmp_dir.clone(),
                            telemetry: false,
                        },
                    ));
                }
            }
        }
    }
    println!("# side-by-side peers raw output");
    println!();
    println!(
        "children: {}, reps {}, N {:?} (apalis up to {}), configs {:?}, groups {:?}, job workers {}",
        plan.len(),
        p.reps,
        p.n,
        p.apalis_max_n,
        peer_configs(&p),
        p.group,
        p.job_workers
    );
    println!();
    let t0 = Instant::now();
    let mut cells: BTreeMap<PeerKey, Cell> = BTreeMap::new();
    for (i, (rep, ca)) in plan.iter().enumerate() {
        println!(
            "[{:>3}/{}] t+{:.0}s rep {} {} {} {} flush={} n={} load: {}",
            i + 1,
            plan.len(),
            t0.elapsed().as_secs_f64(),
            rep + 1,
            ca.engine.label(),
            ca.group.label(),
            ca.store.label(),
            ca.flush.label(),
            ca.n,
            loadavg()
        );
        let _ = std::io::stdout().flush();
        let (mut results, fate) = run_child(p.hang_secs, ca);
        for r in results.iter_mut() {
            r.rep = rep + 1;
            println!("  raw: {}", serde_json::to_string(r).unwrap());
            cells
                .entry((r.workload, r.n, r.engine, r.store, r.flush))
                .or_default()
                .runs
                .push(r.clone());
        }
        let problem = match &fate {
            ChildFate::Done => None,
            ChildFate::Failed(d) => Some(format!("FAILED (rep {}): {d}", rep + 1)),
            ChildFate::Hung(d) => Some(format!("HUNG (rep {}): {d}", rep + 1)),
        };
        if let Some(text) = problem {
            println!("  !! {text}");
            for &w in ca.group.phases() {
                if !results.iter().any(|r| r.workload == w) {
                    cells
                        .entry((w, ca.n, ca.engine, ca.store, ca.flush))
                        .or_default()
                        .problems
                        .push(text.clone());
                }
            }
        }
    }
    println!();
    println!("total time: {:.0} s", t0.elapsed().as_secs_f64());
    println!();
    print_peer_tables(&p, &cells);
}

fn print_peer_tables(p: &PeersArgs, cells: &BTreeMap<PeerKey, Cell>) {
    let gaffer_default = FlushKind::Default;
    println!("## Medians (local disk; medians over the repetitions that reported)");
    println!();
    println!(
        "`÷ apalis` divides items/s medians; `paired` is the median over repetitions of the ratio within one repetition (the engines ran back to back). `ok/reps`: repetitions that reported and passed their checks, of those run."
    );
    println!();
    println!(
        "| workload | N | engine | store | flush | items/s | per rep | ÷ apalis | paired | CPU s/1k | peak RSS MiB | ok/reps | status |"
    );
    println!("|---|---:|---|---|---|---:|---|---:|---:|---:|---:|---:|---|");
    let mut workloads: Vec<Workload> = p.group.iter().flat_map(|g| g.phases().to_vec()).collect();
    workloads.sort();
    workloads.dedup();
    let engines = peer_configs(p);
    let apalis_key = |w, n| (w, n, Engine::Apalis, StoreKind::Local, FlushKind::Default);
    for &w in &workloads {
        for &n in &p.n {
            let apalis = cells.get(&apalis_key(w, n));
            for &(e, st, f) in &engines {
                let Some(cell) = cells.get(&(w, n, e, st, f)) else {
                    continue;
                };
                let m = med(Some(cell));
                let a = med(apalis);
                let ok = cell.runs.iter().filter(|r| r.ok).count();
                let tried = cell.runs.len() + cell.problems.len();
                let ratio = match (&m, &a, e) {
                    (Some(m), Some(a), Engine::Gaffer) => fmt_f(Some(m.items_s / a.items_s), 2),
                    _ => "–".into(),
                };
                let paired = match e {
                    Engine::Gaffer => fmt_f(paired_ratio(Some(cell), apalis), 2),
                    _ => "–".into(),
                };
                println!(
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} |",
                    w.label(),
                    n,
                    e.label(),
                    st.label(),
                    if e == Engine::Apalis {
                        "–"
                    } else {
                        f.label()
                    },
                    fmt_f(m.as_ref().map(|m| m.items_s), 0),
                    per_rep(Some(cell)),
                    ratio,
                    paired,
                    fmt_f(m.as_ref().map(|m| m.cpu_s / m.n as f64 * 1000.0), 3),
                    fmt_f(m.as_ref().map(|m| m.rss_mib), 1),
                    ok,
                    tried,
                    truncate(&status_of(Some(cell)), 400),
                );
            }
        }
    }
    println!();
    println!("## Targets (issue #13 §3)");
    println!();
    println!("| target | measured | holds |");
    println!("|---|---|---|");
    let w = Workload::JobsPlain;
    for (n, min) in [(2_000usize, 3.0), (10_000, 20.0)] {
        let g_cell = cells.get(&(w, n, Engine::Gaffer, StoreKind::Local, gaffer_default));
        let a_cell = cells.get(&apalis_key(w, n));
        let (gm, am) = (med(g_cell), med(a_cell));
        let a_clean = a_cell.is_some_and(|c| c.problems.is_empty() && c.runs.iter().all(|r| r.ok));
        let measured = match (&gm, &am) {
            (Some(g), Some(a)) => format!(
                "{:.2}× (paired {}), apalis over {} of {} reps",
                g.items_s / a.items_s,
                fmt_f(paired_ratio(g_cell, a_cell), 2),
                a.reps,
                a.reps + a_cell.map_or(0, |c| c.problems.len())
            ),
            (Some(_), None) => "apalis never finished".into(),
            _ => "–".into(),
        };
        let holds = match (&gm, &am) {
            (Some(g), Some(a)) if g.items_s / a.items_s >= min => {
                if a_clean {
                    "yes"
                } else {
                    "yes (apalis not clean in every rep)"
                }
            }
            (Some(_), Some(_)) => "NO",
            (Some(_), None) => "n/a (no apalis figure)",
            _ => "n/a",
        };
        println!("| jobs_plain gaffer default ≥ {min}× apalis at N = {n} | {measured} | {holds} |");
    }
    let small = p.n.iter().min().copied();
    let large = p.n.iter().max().copied();
    if let (Some(small), Some(large)) = (small, large)
        && small < large
    {
        for &f in &p.gaffer_flush {
            let per_job = |n| {
                med(cells.get(&(w, n, Engine::Gaffer, StoreKind::Local, f)))
                    .map(|m| (m.cpu_s / m.n as f64 * 1000.0, m.items_s))
            };
            if let (Some((c_s, i_s)), Some((c_l, i_l))) = (per_job(small), per_job(large)) {
                println!(
                    "| gaffer {} cost per job flat, N = {small} → {large} | CPU s/1k {c_s:.3} → {c_l:.3} ({:.2}×); items/s {i_s:.0} → {i_l:.0} ({:.2}×) | {} |",
                    f.label(),
                    c_l / c_s,
                    i_l / i_s,
                    if c_l / c_s <= 1.25 {
                        "yes (within 1.25×)"
                    } else {
                        "NO (over 1.25×)"
                    }
                );
            }
        }
    }
}
