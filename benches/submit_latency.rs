//! What a caller waits for: the latency of `engine.submit(job).await` (it
//! returns once the submission is durable, i.e. after the queue's next WAL
//! flush), with one submitter and with 64 concurrent ones, per store kind and
//! flush interval; with the throughput, the CPU per 1 000 jobs, the CPU an
//! idle engine burns, and (local disk) the files and bytes the store holds
//! after the run.
//!
//! Each configuration starts a fresh engine through the builder's own entry
//! points (`local_dir` on a temp dir, `in_memory`, `store_url`), so `default`
//! measures the default the builder picks for that store. One job type that
//! returns its input + 1 (16 workers, the default); every job is joined and
//! its result checked.
//!
//! - `1 submitter`: `--single` submissions one after another (the web
//!   handler that enqueues one job per request); the jobs run meanwhile, and
//!   all are joined at the end.
//! - `64 submitters`: `--concurrent` submissions from 64 tasks, each task
//!   submitting its next job as soon as the last submission returned, then
//!   joining its handles.
//!
//! Throughput is jobs/s from the phase's start until every job of the phase
//! has been joined (`submit/s`: until the last submission returned). CPU is
//! the process's user + system time over the phase (`/proc/self/stat`), so
//! it excludes an S3 server in another process. Idle CPU is measured over
//! `--idle` seconds after the last phase. Files and bytes are counted under
//! the store's directory after shutdown.
//!
//! ```sh
//! cargo bench --bench submit_latency                              # local disk and memory, default flush
//! cargo bench --bench submit_latency -- --store local --flush 1,2,5,10,20,100 --reps 3
//! cargo bench --features aws --bench submit_latency -- --store s3 --url s3://gaffer/bench   # AWS_* in the environment
//! ```
//!
//! Flags: `--store local,memory,s3` (default `local,memory`; `s3` needs
//! `--url`), `--flush default,1,5,…` (milliseconds or `default`; default
//! `default`), `--single N` (default 300), `--concurrent N` (default 5000),
//! `--idle SECS` (default 5), `--reps R` (default 1; medians are reported,
//! configurations interleaved within a repetition).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gaffer::{Engine, EngineBuilder, Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct AddOne(u64);

impl Job for AddOne {
    const NAME: &'static str = "add_one";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 + 1)
    }
}

/// Concurrent submitters of the second phase.
const SUBMITTERS: u64 = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum StoreKind {
    Local,
    Memory,
    S3,
}

impl StoreKind {
    fn label(self) -> &'static str {
        match self {
            StoreKind::Local => "local",
            StoreKind::Memory => "memory",
            StoreKind::S3 => "s3",
        }
    }
}

/// `None`: the builder's default for the store.
type Flush = Option<u64>;

fn flush_label(f: Flush) -> String {
    match f {
        None => "default".into(),
        Some(ms) => format!("{ms} ms"),
    }
}

struct Args {
    stores: Vec<StoreKind>,
    flushes: Vec<Flush>,
    url: Option<String>,
    single: u64,
    concurrent: u64,
    idle: u64,
    reps: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        stores: vec![StoreKind::Local, StoreKind::Memory],
        flushes: vec![None],
        url: None,
        single: 300,
        concurrent: 5_000,
        idle: 5,
        reps: 1,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--store" => {
                a.stores = value()
                    .split(',')
                    .map(|s| match s {
                        "local" => StoreKind::Local,
                        "memory" => StoreKind::Memory,
                        "s3" => StoreKind::S3,
                        other => panic!("unknown store {other} (local, memory, s3)"),
                    })
                    .collect()
            }
            "--flush" => {
                a.flushes = value()
                    .split(',')
                    .map(|f| match f {
                        "default" => None,
                        ms => Some(ms.trim_end_matches("ms").parse().expect("--flush: ms")),
                    })
                    .collect()
            }
            "--url" => a.url = Some(value()),
            "--single" => a.single = value().parse().expect("--single N"),
            "--concurrent" => a.concurrent = value().parse().expect("--concurrent N"),
            "--idle" => a.idle = value().parse().expect("--idle SECS"),
            "--reps" => a.reps = value().parse().expect("--reps R"),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        !a.stores.contains(&StoreKind::S3) || a.url.is_some(),
        "--store s3 needs --url s3://bucket/prefix (and the AWS_* variables)"
    );
    a
}

/// User + system CPU seconds of this process (`/proc/self/stat`, in
/// USER_HZ = 100 ticks).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) as f64 / 100.0,
        _ => 0.0,
    }
}

/// Files and bytes under `dir`.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let mut files = 0;
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                files += 1;
                bytes += meta.len();
            }
        }
    }
    (files, bytes)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One phase's figures.
#[derive(Clone, Debug)]
struct Phase {
    jobs: u64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    submit_per_s: f64,
    jobs_per_s: f64,
    cpu_per_1k: f64,
}

/// One configuration's figures.
#[derive(Clone, Debug)]
struct Run {
    single: Phase,
    many: Phase,
    /// CPU seconds per second while idle.
    idle_cpu: f64,
    /// Files and bytes under the store's directory after shutdown (local).
    disk: Option<(u64, u64)>,
}

fn summarize(jobs: u64, mut lat: Vec<Duration>, submit_wall: f64, wall: f64, cpu: f64) -> Phase {
    lat.sort();
    Phase {
        jobs,
        p50: percentile(&lat, 0.50),
        p99: percentile(&lat, 0.99),
        max: lat.last().copied().unwrap_or_default(),
        submit_per_s: jobs as f64 / submit_wall,
        jobs_per_s: jobs as f64 / wall,
        cpu_per_1k: cpu / jobs as f64 * 1000.0,
    }
}

/// One submitter: `n` submissions in a row, then every handle joined.
async fn one_submitter(engine: &Engine, n: u64) -> Phase {
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut lat = Vec::with_capacity(n as usize);
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        let s = Instant::now();
        let h = engine.submit(AddOne(i)).await.expect("submitted");
        lat.push(s.elapsed());
        handles.push((i, h));
    }
    let submit_wall = t0.elapsed().as_secs_f64();
    for (i, h) in handles {
        assert_eq!(h.join().await.expect("joined").expect("ran"), i + 1);
    }
    let wall = t0.elapsed().as_secs_f64();
    summarize(n, lat, submit_wall, wall, cpu_seconds() - cpu0)
}

/// `SUBMITTERS` tasks submitting `n` jobs between them, each joining its own.
async fn many_submitters(engine: &Engine, n: u64) -> Phase {
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..SUBMITTERS {
        let engine = engine.clone();
        let next = next.clone();
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut handles = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let s = Instant::now();
                let h = engine.submit(AddOne(i)).await.expect("submitted");
                lat.push(s.elapsed());
                handles.push((i, h));
            }
            let submitted = Instant::now();
            for (i, h) in handles {
                assert_eq!(h.join().await.expect("joined").expect("ran"), i + 1);
            }
            (lat, submitted)
        });
    }
    let mut lat = Vec::with_capacity(n as usize);
    let mut last_submit = t0;
    while let Some(done) = tasks.join_next().await {
        let (l, submitted) = done.expect("a submitter");
        lat.extend(l);
        last_submit = last_submit.max(submitted);
    }
    let wall = t0.elapsed().as_secs_f64();
    let submit_wall = (last_submit - t0).as_secs_f64();
    summarize(n, lat, submit_wall, wall, cpu_seconds() - cpu0)
}

async fn run_one(a: &Args, store: StoreKind, flush: Flush, tag: &str) -> Run {
    let dir = tempfile::Builder::new()
        .prefix("submit-latency-")
        .tempdir()
        .expect("a temp dir");
    let mut b: EngineBuilder = Engine::builder();
    b = match store {
        StoreKind::Local => b.store(gaffer::Store::local_dir(dir.path())),
        StoreKind::Memory => b.store(gaffer::Store::in_memory()),
        StoreKind::S3 => {
            let base = a.url.as_deref().expect("--url");
            b.store(gaffer::Store::url(format!(
                "{}/{tag}",
                base.trim_end_matches('/')
            )))
        }
    };
    if let Some(f) = flush {
        b = b.flush_interval(Duration::from_millis(f));
    }
    let engine = b
        .register::<AddOne>()
        .start()
        .await
        .expect("the engine starts");
    let single = one_submitter(&engine, a.single).await;
    let many = many_submitters(&engine, a.concurrent).await;
    // Let the last commits settle, then measure an idle second.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cpu0 = cpu_seconds();
    tokio::time::sleep(Duration::from_secs(a.idle)).await;
    let idle_cpu = (cpu_seconds() - cpu0) / a.idle.max(1) as f64;
    engine.shutdown().await.expect("shut down");
    let disk = (store == StoreKind::Local).then(|| disk_usage(dir.path()));
    Run {
        single,
        many,
        idle_cpu,
        disk,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn print_run(store: StoreKind, flush: Flush, rep: usize, r: &Run) {
    for (name, p) in [("1 submitter", &r.single), ("64 submitters", &r.many)] {
        println!(
            "raw: rep {rep} store {} flush {} | {name}: {} jobs, submit p50 {:.2} ms p99 {:.2} ms max {:.2} ms, {:.0} submit/s, {:.0} jobs/s, {:.3} CPU s/1k",
            store.label(),
            flush_label(flush),
            p.jobs,
            ms(p.p50),
            ms(p.p99),
            ms(p.max),
            p.submit_per_s,
            p.jobs_per_s,
            p.cpu_per_1k
        );
    }
    let disk = r
        .disk
        .map(|(f, b)| format!(", {f} files, {:.1} MiB on disk", b as f64 / 1048576.0))
        .unwrap_or_default();
    println!(
        "raw: rep {rep} store {} flush {} | idle {:.1} ms CPU/s{disk}",
        store.label(),
        flush_label(flush),
        r.idle_cpu * 1000.0
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = parse_args();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    println!(
        "submit_latency: stores {:?}, flush {:?} (None = the builder's default), 1 submitter × {}, {SUBMITTERS} submitters × {} jobs, idle {} s, reps {}",
        a.stores, a.flushes, a.single, a.concurrent, a.idle, a.reps
    );
    let mut runs: BTreeMap<(StoreKind, Flush), Vec<Run>> = BTreeMap::new();
    for rep in 1..=a.reps {
        for &store in &a.stores {
            for &flush in &a.flushes {
                let tag = format!("run-{stamp}-{rep}-{}-{}", store.label(), flush.unwrap_or(0));
                let r = run_one(&a, store, flush, &tag).await;
                print_run(store, flush, rep, &r);
                runs.entry((store, flush)).or_default().push(r);
            }
        }
    }
    println!();
    println!(
        "Medians of {} rep(s). Latency of `submit().await` in ms; jobs/s until every job was joined; CPU s per 1 000 jobs; idle CPU in ms per s; disk after shutdown.",
        a.reps
    );
    println!();
    println!(
        "| store | flush | 1 sub p50 | 1 sub p99 | 1 sub jobs/s | 64 sub p50 | 64 sub p99 | 64 sub jobs/s | CPU s/1k (64) | idle CPU ms/s | files | MiB on disk |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for ((store, flush), rs) in &runs {
        let m = |f: &dyn Fn(&Run) -> f64| median(rs.iter().map(f).collect());
        let disk = rs.iter().all(|r| r.disk.is_some());
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {:.0} | {:.3} | {:.1} | {} | {} |",
            store.label(),
            flush_label(*flush),
            m(&|r| ms(r.single.p50)),
            m(&|r| ms(r.single.p99)),
            m(&|r| r.single.jobs_per_s),
            m(&|r| ms(r.many.p50)),
            m(&|r| ms(r.many.p99)),
            m(&|r| r.many.jobs_per_s),
            m(&|r| r.many.cpu_per_1k),
            m(&|r| r.idle_cpu * 1000.0),
            if disk {
                format!("{:.0}", m(&|r| r.disk.map_or(0.0, |d| d.0 as f64)))
            } else {
                "–".into()
            },
            if disk {
                format!(
                    "{:.1}",
                    m(&|r| r.disk.map_or(0.0, |d| d.1 as f64 / 1048576.0))
                )
            } else {
                "–".into()
            },
        );
    }
}
