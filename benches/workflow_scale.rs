//! A workflow of N + 2 steps (one step fans out to N, one fans in and
//! reads every output) against N + 2 plain jobs of the same work, each in
//! a fresh child process on a local-disk store at the engine's defaults,
//! alternated: wall time from the first submit to the last join, steps
//! (jobs) per second, the workflow's submit alone, and peak RSS.
//!
//! ```sh
//! cargo bench --bench workflow_scale -- 10000        # N, then reps (3)
//! cargo bench --bench workflow_scale -- 10000 5
//! ```

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gaffer::workflow::Workflow;
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

#[path = "common/rss.rs"]
#[allow(dead_code)]
mod rss;

/// The fan-out's root: answers a seed.
#[derive(Serialize, Deserialize)]
struct Split;

impl Job for Split {
    const NAME: &'static str = "split";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        Ok(7)
    }
}

/// A leaf: in a workflow reads the root's output, else takes the seed.
#[derive(Serialize, Deserialize)]
struct Leaf(u64);

impl Job for Leaf {
    const NAME: &'static str = "leaf";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        let seed = match ctx.workflow_step() {
            Some(_) => ctx.dep::<Split>("split").await?,
            None => 7,
        };
        Ok(self.0 * seed)
    }
}

/// The fan-in: in a workflow sums every leaf's output.
#[derive(Serialize, Deserialize)]
struct Join(u64);

impl Job for Join {
    const NAME: &'static str = "join";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        if ctx.workflow_step().is_none() {
            return Ok(0);
        }
        let mut sum = 0;
        for n in 0..self.0 {
            sum += ctx.dep::<Leaf>(&format!("leaf-{n}")).await?;
        }
        Ok(sum)
    }
}

async fn engine(dir: &std::path::Path) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .register::<Split>()
        .register::<Leaf>()
        .register::<Join>()
        .start()
        .await
        .expect("the engine starts")
}

/// One measurement, in this (child) process.
async fn child(mode: &str, n: u64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = engine(dir.path()).await;
    let started = Instant::now();
    let submit_s;
    match mode {
        "workflow" => {
            let mut flow = Workflow::new("scale").step("split", Split);
            for i in 0..n {
                flow = flow.step_after(&format!("leaf-{i}"), Leaf(i), ["split"]);
            }
            flow = flow.step_after("join", Join(n), (0..n).map(|i| format!("leaf-{i}")));
            let handle = engine.submit_workflow(flow).await.expect("submitted");
            submit_s = started.elapsed().as_secs_f64();
            let outputs = handle.join().await.expect("joined").expect("succeeded");
            let sum = outputs.get::<Join>("join").await.expect("the sum");
            assert_eq!(sum, 7 * n * (n.saturating_sub(1)) / 2);
        }
        _ => {
            let split = engine.submit(Split).await.expect("submitted");
            let leaves: Vec<_> = futures_util::stream::iter(0..n)
                .map(|i| engine.submit(Leaf(i)))
                .buffer_unordered(64)
                .collect()
                .await;
            let join = engine.submit(Join(n)).await.expect("submitted");
            submit_s = started.elapsed().as_secs_f64();
            split.join().await.expect("joined").expect("ran");
            for leaf in leaves {
                leaf.expect("submitted")
                    .join()
                    .await
                    .expect("joined")
                    .expect("ran");
            }
            join.join().await.expect("joined").expect("ran");
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let (_, peak) = rss::rss_kib();
    println!(
        "RESULT mode={mode} n={n} wall_s={wall:.3} submit_s={submit_s:.3} per_s={:.0} peak_rss_mib={:.0}",
        (n + 2) as f64 / wall,
        rss::mib(peak)
    );
    engine.shutdown().await.expect("shut down");
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let (Ok(mode), Ok(n)) = (std::env::var("WF_BENCH_MODE"), std::env::var("WF_BENCH_N")) {
        child(&mode, n.parse().expect("N")).await;
        return;
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let me = std::env::current_exe().expect("this binary");
    println!("workflow_scale: N = {n}, {reps} reps, alternated, each in a fresh process");
    let mut results: Vec<(String, f64, f64, f64)> = Vec::new();
    for rep in 0..reps {
        let order = if rep % 2 == 0 {
            ["plain", "workflow"]
        } else {
            ["workflow", "plain"]
        };
        for mode in order {
            let out = std::process::Command::new(&me)
                .env("WF_BENCH_MODE", mode)
                .env("WF_BENCH_N", n.to_string())
                .output()
                .expect("the child runs");
            let text = String::from_utf8_lossy(&out.stdout);
            let Some(line) = text.lines().find(|l| l.starts_with("RESULT")) else {
                eprintln!(
                    "{mode}: no result\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::process::exit(1);
            };
            println!("rep {} {line} load {}", rep + 1, load());
            let field = |k: &str| -> f64 {
                line.split_whitespace()
                    .find_map(|f| f.strip_prefix(&format!("{k}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN)
            };
            results.push((
                mode.to_string(),
                field("wall_s"),
                field("per_s"),
                field("peak_rss_mib"),
            ));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let median = |mode: &str, pick: fn(&(String, f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = results.iter().filter(|r| r.0 == mode).map(pick).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    for mode in ["plain", "workflow"] {
        println!(
            "median {mode}: wall {:.2} s, {:.0} per s, peak RSS {:.0} MiB",
            median(mode, |r| r.1),
            median(mode, |r| r.2),
            median(mode, |r| r.3)
        );
    }
    println!(
        "workflow / plain steps per second: {:.2}",
        median("workflow", |r| r.2) / median("plain", |r| r.2)
    );
}
