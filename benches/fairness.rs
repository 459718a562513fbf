//! Tenants (#37): what fairness buys a small tenant, what it costs a busy
//! type, and what a million tenants seen over time leave in memory.
//!
//! Every engine runs on a fresh local directory at the builder's defaults
//! (16 workers, the default flush), except where a mode says otherwise.
//!
//! ```sh
//! cargo bench --bench fairness -- pickup 10000 100000   # small tenant's pickup, plain vs fair
//! cargo bench --bench fairness -- throughput 20000 5    # fair type with 1/100/1000/10000 values vs plain, 5 alternated rounds
//! cargo bench --bench fairness -- values 1000000        # RSS and known queues over 1M values seen
//! cargo bench --bench fairness -- pickup-fair 100000     # the fair rows of `pickup` alone
//! cargo bench --bench fairness -- one 20000 1000        # one shape alone (for a profiler; 0 values: plain)
//! ```
//!
//! - `pickup BIG...`: one type, jobs of 10 ms. Tenant "big" queues BIG jobs
//!   (the type paused while they are queued, then resumed), then tenant
//!   "small" submits `SMALL_JOBS` jobs (default 100), one every 50 ms; each
//!   small job's pickup is from the call to its submit to its start (so it
//!   includes the submit's own durable commit, printed apart). Plain (no
//!   fairness, the engine as it was before #37) and fair
//!   (`Fairness::header("tenant")`), one after the other for each BIG.
//!   Prints p50, p99 and max of the pickups. `pickup-fair` and
//!   `pickup-plain` run one kind alone.
//!
//!   Environment: `SMALL_AFTER_MS` (small starts that long after the
//!   resume: big's backlog in its steady state rather than just written),
//!   `RESUME_AFTER_MS` (the store left that long after the burst before the
//!   resume), `PICKUPS=1` (print each pickup and commit in order),
//!   `FAIR_TURN` (the fair type's `Fairness::turn`), `FORGET_S`
//!   (`forget_drained_after` in seconds; every mode but `values` runs at
//!   the default 60 s, `values` at 2 s).
//! - `throughput N ROUNDS [V...]`: N trivial jobs queued while the type is paused,
//!   then resumed; jobs/s from the resume to the last one done. Each round
//!   runs fair with 1, 100, 1000 and 10000 values (or the Vs given; jobs spread round robin
//!   over the values), each beside a plain run of its own (plain first in
//!   even rounds, fair first in odd ones), each on its own store. Prints
//!   each round's rates and CPU per job (the process's user and system
//!   time from the resume to the last job, over N), and the median ratio
//!   of each fair shape to its plain runs, for both.
//! - `values V` (`values-plain V`: the same jobs to a plain type): V values, one trivial job each, submitted in waves of
//!   10 000 (each wave joined) to a fair type with `forget_drained_after`
//!   at 2 s. After each wave: RSS and the queues the pool knows. After the
//!   last: wait for the pool to forget, then RSS and queues again.

#[allow(dead_code)]
#[path = "common/rss.rs"]
mod rss;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gaffer::{Engine, Fairness, Job, JobContext, JobOptions};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Work {
    sleep_ms: u64,
    /// Submitted at (ms since the bench's epoch); 0 for big's jobs.
    sent_us: u64,
}

/// Where small's pickups go, and how many jobs ended.
#[derive(Clone, Default)]
struct Pickups(
    Arc<std::sync::Mutex<Vec<Duration>>>,
    Arc<std::sync::atomic::AtomicU64>,
);

static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn now_us() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, ctx: JobContext) -> Result<(), std::io::Error> {
        if self.sent_us > 0 {
            let waited = now_us().saturating_sub(self.sent_us);
            ctx.state::<Pickups>()
                .0
                .lock()
                .unwrap()
                .push(Duration::from_micros(waited));
        }
        if self.sleep_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        }
        ctx.state::<Pickups>()
            .1
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

fn tenant(name: &str) -> gaffer::SubmitOptions {
    let mut opts = gaffer::SubmitOptions::default();
    opts.headers.insert("tenant".into(), name.into());
    opts
}

fn options(fair: bool) -> JobOptions {
    JobOptions {
        fair_by: fair.then(|| {
            let turn = std::env::var("FAIR_TURN").ok().and_then(|t| t.parse().ok());
            turn.map_or(Fairness::header("tenant"), |t| {
                Fairness::header("tenant").turn(t)
            })
        }),
        ..Default::default()
    }
}

/// An engine at the builder's defaults, but for `forget_drained_after`:
/// `FORGET_S` seconds if set, else `forget_s` (`None`: the default 60 s).
async fn engine_forgetting(
    dir: &std::path::Path,
    fair: bool,
    pickups: Pickups,
    forget_s: Option<u64>,
) -> Engine {
    let forget = std::env::var("FORGET_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .or(forget_s);
    let mut builder = Engine::builder().store(gaffer::Store::local_dir(dir));
    if let Some(s) = forget {
        builder = builder.forget_drained_after(Duration::from_secs(s));
    }
    builder
        .register_with::<Work>(options(fair))
        .state(pickups)
        .start()
        .await
        .expect("the engine starts")
}

/// An engine at the builder's defaults (`forget_drained_after` too,
/// unless `FORGET_S` says).
async fn engine(dir: &std::path::Path, fair: bool, pickups: Pickups) -> Engine {
    engine_forgetting(dir, fair, pickups, None).await
}

/// Submit `n` jobs, spread round robin over `values` tenants (0: no
/// header), 64 at a time.
async fn queue_jobs(engine: &Engine, n: usize, values: usize, sleep_ms: u64, prefix: &str) {
    let mut i = 0;
    while i < n {
        let chunk = (n - i).min(64);
        let mut sends = Vec::with_capacity(chunk);
        for k in i..i + chunk {
            let opts = if values == 0 {
                gaffer::SubmitOptions::default()
            } else {
                tenant(&format!("{prefix}{}", k % values))
            };
            sends.push(engine.submit_with(
                Work {
                    sleep_ms,
                    sent_us: 0,
                },
                opts,
            ));
        }
        for s in futures_util::future::join_all(sends).await {
            s.expect("submitted");
        }
        i += chunk;
    }
}

fn ended(pickups: &Pickups) -> u64 {
    pickups.1.load(std::sync::atomic::Ordering::Relaxed)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn pickup(big: usize, fair: bool) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pickups = Pickups::default();
    let engine = engine(dir.path(), fair, pickups.clone()).await;
    engine.pause(Work::NAME).await.expect("paused");
    let t0 = Instant::now();
    queue_jobs(&engine, big, 1, 10, "big").await;
    let queued = t0.elapsed();
    if let Some(ms) = std::env::var("RESUME_AFTER_MS")
        .ok()
        .and_then(|m| m.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    engine.resume(Work::NAME).await.expect("resumed");
    if let Some(ms) = std::env::var("SMALL_AFTER_MS")
        .ok()
        .and_then(|m| m.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut handles = Vec::new();
    let mut submits = Vec::new();
    let small: usize = std::env::var("SMALL_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    for _ in 0..small {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = Instant::now();
        let h = engine
            .submit_with(
                Work {
                    sleep_ms: 10,
                    sent_us: now_us().max(1),
                },
                tenant("small"),
            )
            .await
            .expect("submitted");
        submits.push(sent.elapsed());
        handles.push(h);
    }
    if std::env::var_os("PICKUPS").is_some() {
        println!(
            "submit commits in order (ms): {:?}",
            submits.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
        );
    }
    submits.sort();
    for h in handles {
        h.join().await.expect("joined").expect("succeeded");
    }
    let big_done = ended(&pickups).saturating_sub(small as u64);
    let mut p = pickups.0.lock().unwrap().clone();
    if std::env::var_os("PICKUPS").is_some() {
        println!(
            "pickups in order (ms): {:?}",
            p.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
        );
    }
    p.sort();
    println!(
        "pickup {:>5} big={big:>6} (queued in {:.1} s): small p50 {:>8.1} ms  p99 {:>8.1} ms  max {:>8.1} ms (of which its submit's commit: p50 {:.1} ms, max {:.1} ms); big done meanwhile {big_done}",
        if fair { "fair" } else { "plain" },
        queued.as_secs_f64(),
        quantile(&p, 0.5).as_secs_f64() * 1e3,
        quantile(&p, 0.99).as_secs_f64() * 1e3,
        p.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        quantile(&submits, 0.5).as_secs_f64() * 1e3,
        submits.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    // Not waiting for big's backlog: the engine stops (its jobs stay queued).
    engine.shutdown().await.expect("shut down");
}

/// Jobs/s of `n` queued jobs over `values` values (`None`: plain type).
/// Jobs/s and CPU microseconds per job (the whole process, from the resume
/// to the last job done): the CPU figure moves less than the rate on a
/// shared machine.
async fn throughput(n: usize, values: Option<usize>) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let pickups = Pickups::default();
    let engine = engine(dir.path(), values.is_some(), pickups.clone()).await;
    engine.pause(Work::NAME).await.expect("paused");
    queue_jobs(&engine, n, values.unwrap_or(0), 0, "v").await;
    let t0 = Instant::now();
    let cpu0 = rss::cpu_secs();
    engine.resume(Work::NAME).await.expect("resumed");
    while ended(&pickups) < n as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = n as f64 / t0.elapsed().as_secs_f64();
    let cpu_us = (rss::cpu_secs() - cpu0) * 1e6 / n as f64;
    engine.shutdown().await.expect("shut down");
    (rate, cpu_us)
}

async fn values(v: usize, fair: bool) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = engine_forgetting(dir.path(), fair, Pickups::default(), Some(2)).await;
    let (rss0, _) = rss::rss_kib();
    println!("start: RSS {:.1} MiB", rss::mib(rss0));
    let t0 = Instant::now();
    let mut seen = 0;
    while seen < v {
        let wave = (v - seen).min(10_000);
        // 64 submissions at once, each to a value of its own.
        let mut handles = Vec::with_capacity(wave);
        for chunk in (seen..seen + wave).collect::<Vec<_>>().chunks(64) {
            let sends = chunk.iter().map(|k| {
                engine.submit_with(
                    Work {
                        sleep_ms: 0,
                        sent_us: 0,
                    },
                    tenant(&format!("t{k}")),
                )
            });
            for h in futures_util::future::join_all(sends).await {
                handles.push(h.expect("submitted"));
            }
        }
        for h in handles {
            h.join().await.expect("joined").expect("succeeded");
        }
        seen += wave;
        let stats = engine.pool_stats().await.expect("pool stats")[Work::NAME];
        let (rss, hwm) = rss::rss_kib();
        println!(
            "{seen:>8} values seen ({:.0} s): RSS {:.1} MiB (peak {:.1}), pool knows {} queues, {} in its ring",
            t0.elapsed().as_secs_f64(),
            rss::mib(rss),
            rss::mib(hwm),
            stats.queues,
            stats.ready_values
        );
    }
    let t1 = Instant::now();
    loop {
        let stats = engine.pool_stats().await.expect("pool stats")[Work::NAME];
        if stats.queues == 1 || t1.elapsed() > Duration::from_secs(600) {
            let (rss, hwm) = rss::rss_kib();
            println!(
                "after {:.0} s idle: RSS {:.1} MiB (peak {:.1}), pool knows {} queues",
                t1.elapsed().as_secs_f64(),
                rss::mib(rss),
                rss::mib(hwm),
                stats.queues
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    engine.shutdown().await.expect("shut down");
    let engine = engine_again(dir.path(), fair).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stats = engine.pool_stats().await.expect("pool stats")[Work::NAME];
    let (rss, _) = rss::rss_kib();
    println!(
        "restarted: pool knows {} queues, RSS {:.1} MiB",
        stats.queues,
        rss::mib(rss)
    );
    engine.shutdown().await.expect("shut down");
}

async fn engine_again(dir: &std::path::Path, fair: bool) -> Engine {
    engine_forgetting(dir, fair, Pickups::default(), Some(2)).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    EPOCH.get_or_init(Instant::now);
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mode = args.first().map(String::as_str).unwrap_or("pickup");
    let nums: Vec<usize> = args[1.min(args.len())..]
        .iter()
        .filter_map(|a| a.parse().ok())
        .collect();
    match mode {
        "pickup" => {
            let bigs = if nums.is_empty() {
                vec![10_000, 100_000]
            } else {
                nums
            };
            for big in bigs {
                pickup(big, false).await;
                pickup(big, true).await;
            }
        }
        "pickup-fair" | "pickup-plain" => {
            // One kind's rows alone (plain's 100 000 take minutes).
            for big in nums {
                pickup(big, mode == "pickup-fair").await;
            }
        }
        "throughput" => {
            let n = nums.first().copied().unwrap_or(20_000);
            let rounds = nums.get(1).copied().unwrap_or(3);
            let shapes = if nums.len() > 2 {
                nums[2..].to_vec()
            } else {
                vec![1, 100, 1000, 10_000]
            };
            let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
            let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); shapes.len()];
            for round in 0..rounds {
                let mut row = Vec::new();
                for (i, &v) in shapes.iter().enumerate() {
                    // Each fair run beside a plain run of its own, their
                    // order swapped every round (the machine drifts).
                    let (plain, fair) = if round % 2 == 0 {
                        let plain = throughput(n, None).await;
                        (plain, throughput(n, Some(v)).await)
                    } else {
                        let fair = throughput(n, Some(v)).await;
                        (throughput(n, None).await, fair)
                    };
                    ratios[i].push(fair.0 / plain.0);
                    cpu[i].push(fair.1 / plain.1);
                    row.push(format!(
                        "×{v}: {:.0}/{:.0} jobs/s ({:.2}), {:.0}/{:.0} µs CPU/job ({:.2})",
                        fair.0,
                        plain.0,
                        fair.0 / plain.0,
                        fair.1,
                        plain.1,
                        fair.1 / plain.1
                    ));
                }
                println!("round {round} (fair/plain): {}", row.join("  "));
            }
            for ((v, r), c) in shapes.iter().zip(ratios.iter_mut()).zip(cpu.iter_mut()) {
                r.sort_by(f64::total_cmp);
                c.sort_by(f64::total_cmp);
                println!(
                    "fair with {v} values: jobs/s median {:.2}× plain (min {:.2}, max {:.2}); CPU per job median {:.2}× plain (min {:.2}, max {:.2})",
                    r[r.len() / 2],
                    r[0],
                    r[r.len() - 1],
                    c[c.len() / 2],
                    c[0],
                    c[c.len() - 1]
                );
            }
        }
        "one" => {
            // One shape alone (for a profiler): `one N V`, V = 0 for plain.
            let n = nums.first().copied().unwrap_or(20_000);
            let v = nums.get(1).copied().unwrap_or(0);
            let (rate, cpu) = throughput(n, (v > 0).then_some(v)).await;
            println!("{v} values: {rate:.0} jobs/s, {cpu:.0} µs CPU/job");
        }
        "values" => values(nums.first().copied().unwrap_or(100_000), true).await,
        // The same jobs, headers and all, to a plain type: what the store,
        // taquba and the allocator keep without any partition queue.
        "values-plain" => values(nums.first().copied().unwrap_or(100_000), false).await,
        other => eprintln!("unknown mode `{other}`: pickup, throughput, one or values"),
    }
}
