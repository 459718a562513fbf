//! Throughput of 1, 2 and 4 engine processes, each the writer of its own
//! shard (a prefix of one bucket on a loopback S3 API, moto), with what an
//! object store costs injected in front of it (default 20 ms per put,
//! 10 ms per get, list and delete; `gaffer::testing::FaultyStore`), so one
//! engine is latency-bound rather than CPU-bound.
//!
//! Each engine process submits `JOBS` unkeyed jobs to its own shard with
//! `WINDOW` submissions in flight (each task: submit, then join), all
//! processes starting together; throughput is all jobs over the slowest
//! process's wall time. The engines flush every 100 ms (the default on an
//! object store). Prints one row per process count, and each process's
//! CPU.
//!
//! ```sh
//! cargo bench --features aws,testing --bench shard_scaling -- [JOBS] [WINDOW] [PUT_MS] [GET_MS]
//! ```

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaffer::taquba::object_store::prefix::PrefixStore;
use gaffer::testing::{FaultyStore, Op};
use gaffer::{Engine, Job, JobContext, remote::Placement, remote::ShardSet, remote::ShardedEngine};
use gaffer_testkit::s3;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Work(u64);

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0)
    }
}

#[derive(Clone, Copy)]
struct Params {
    jobs: u64,
    window: usize,
    put_ms: u64,
    get_ms: u64,
}

fn params() -> Params {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let n = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    Params {
        jobs: n(0, 2000),
        window: n(1, 64) as usize,
        put_ms: n(2, 20),
        get_ms: n(3, 10),
    }
}

/// User + system CPU seconds of this process.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// An engine process: the writer of shard `GAFFER_BENCH_SHARD` of
/// `GAFFER_BENCH_COUNT` at `GAFFER_BENCH_TEMPLATE`; says `ready`, waits for
/// a line on stdin, runs its jobs, says `done {jobs} {secs} {cpu}`.
async fn engine_process(p: Params) {
    let var = |n: &str| std::env::var(n).unwrap();
    let shard: usize = var("GAFFER_BENCH_SHARD").parse().unwrap();
    let count: usize = var("GAFFER_BENCH_COUNT").parse().unwrap();
    let set = ShardSet::from_template(&var("GAFFER_BENCH_TEMPLATE"), count).unwrap();
    let engines = ShardedEngine::start(set, &Placement::Listed(vec![shard]), move |_, url| {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let (s3, prefix) = gaffer::taquba::open_url(url, env).unwrap();
        let (store, faults) = FaultyStore::wrap(Arc::new(PrefixStore::new(s3, prefix)));
        faults.set_op_latency(Op::Put, Duration::from_millis(p.put_ms));
        faults.set_op_latency(Op::Multipart, Duration::from_millis(p.put_ms));
        for op in [Op::Get, Op::List, Op::Delete, Op::Copy] {
            faults.set_op_latency(op, Duration::from_millis(p.get_ms));
        }
        Engine::builder()
            .store(gaffer::Store::object_store(store))
            .flush_interval(Duration::from_millis(100))
            .register_with::<Work>(gaffer::JobOptions {
                concurrency: Some(p.window),
                ..Default::default()
            })
    })
    .await
    .unwrap();
    let engine = engines.engine(shard).unwrap();
    println!("ready");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..p.window)
        .map(|_| {
            let engine = engine.clone();
            let next = next.clone();
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= p.jobs {
                        return;
                    }
                    let h = engine.submit(Work(i)).await.unwrap();
                    assert_eq!(h.join().await.unwrap().unwrap(), i);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("done {} {secs:.3} {:.3}", p.jobs, cpu_secs() - cpu0);
    std::io::stdout().flush().unwrap();
    engines.shutdown().await;
}

fn main() {
    let p = params();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("GAFFER_BENCH_SHARD").is_ok() {
        runtime.block_on(engine_process(p));
        return;
    }
    let server = s3::S3Server::start();
    println!(
        "shard scaling: {} jobs per engine, {} in flight each, {} ms per put, {} ms per get/list/delete, 100 ms flush, moto on loopback",
        p.jobs, p.window, p.put_ms, p.get_ms
    );
    println!("engines  jobs  wall_s  jobs_per_s  vs_1  cpu_s_per_1000_jobs");
    let mut one = None;
    for n in [1usize, 2, 4] {
        let template = server.url(&format!("scale-{n}/shard-{{shard}}"));
        let mut children: Vec<_> = (0..n)
            .map(|shard| {
                Command::new(std::env::current_exe().unwrap())
                    .args(std::env::args().skip(1))
                    .env("GAFFER_BENCH_SHARD", shard.to_string())
                    .env("GAFFER_BENCH_COUNT", n.to_string())
                    .env("GAFFER_BENCH_TEMPLATE", &template)
                    .envs(server.env())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut outs: Vec<_> = children
            .iter_mut()
            .map(|c| BufReader::new(c.stdout.take().unwrap()))
            .collect();
        let mut line = String::new();
        for out in &mut outs {
            line.clear();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), "ready", "an engine process did not start");
        }
        for c in &mut children {
            writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
        }
        let (mut wall, mut cpu, mut jobs) = (0f64, 0f64, 0u64);
        for out in &mut outs {
            line.clear();
            out.read_line(&mut line).unwrap();
            let f: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(f.first(), Some(&"done"), "{line}");
            jobs += f[1].parse::<u64>().unwrap();
            wall = wall.max(f[2].parse().unwrap());
            cpu += f[3].parse::<f64>().unwrap();
        }
        for c in &mut children {
            c.wait().unwrap();
        }
        let rate = jobs as f64 / wall;
        let base = *one.get_or_insert(rate);
        println!(
            "{n:>7}  {jobs:>4}  {wall:>6.2}  {rate:>10.0}  {:>4.2}  {:>19.3}",
            rate / base,
            cpu / jobs as f64 * 1000.0
        );
    }
}
