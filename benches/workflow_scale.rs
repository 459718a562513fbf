//! A workflow of N + 2 steps (one step fans out to N, one fans in and
//! reads every output) against N + 2 plain jobs of the same work, each in
//! a fresh child process on a local-disk store at the engine's defaults,
//! alternated: wall time from the first submit to the last join, steps
//! (jobs) per second, the workflow's submit alone, and peak RSS.
//!
//! The second shape (`many`): W workflows of ten steps at once, half a
//! diamond (a → {b..i} → j), half a chain of ten, each step reading its
//! dependencies' outputs, against the same 10 W jobs plain; and the state
//! the gates keep for W running workflows (`benches/workflow_scale/many.rs`).
//!
//! ```sh
//! cargo bench --bench workflow_scale -- 10000        # N, then reps (3)
//! cargo bench --bench workflow_scale -- 10000 5
//! cargo bench --bench workflow_scale -- many 1000 3  # W workflows, reps
//! ```
//!
//! For a breakdown, `WF_BENCH_DEPS=0` runs the workflows without reading
//! any dependency's output, and `WF_BENCH_ONE_BY_ONE=1` reads them one
//! `ctx.dep` at a time rather than with `ctx.deps`.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gaffer::workflow::Workflow;
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

#[path = "common/rss.rs"]
#[allow(dead_code)]
mod rss;

#[path = "workflow_scale/many.rs"]
mod many;

/// When the child's clock started, and its phases (µs after it; for the
/// breakdown): the root ran, the first and last leaf ran, the fan-in
/// started and had read every output.
static STARTED: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
static PHASES: [std::sync::atomic::AtomicU64; 5] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 5];
const SPLIT_RAN: usize = 0;
const LEAF_FIRST: usize = 1;
const LEAF_LAST: usize = 2;
const JOIN_START: usize = 3;
const JOIN_READ: usize = 4;

fn mark(phase: usize) {
    use std::sync::atomic::Ordering::Relaxed;
    let Some(t0) = STARTED.get() else { return };
    let us = u64::try_from(t0.elapsed().as_micros())
        .unwrap_or(u64::MAX)
        .max(1);
    match phase {
        LEAF_FIRST => {
            let _ = PHASES[phase].compare_exchange(0, us, Relaxed, Relaxed);
        }
        LEAF_LAST => {
            PHASES[phase].fetch_max(us, Relaxed);
        }
        _ => PHASES[phase].store(us, Relaxed),
    }
}

fn phases() -> String {
    let s = |i: usize| PHASES[i].load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6;
    format!(
        "split_ran={:.3} leaf_first={:.3} leaf_last={:.3} join_start={:.3} join_read={:.3}",
        s(SPLIT_RAN),
        s(LEAF_FIRST),
        s(LEAF_LAST),
        s(JOIN_START),
        s(JOIN_READ)
    )
}

/// Whether workflow steps read their dependencies' outputs (the default).
fn read_deps() -> bool {
    !std::env::var("WF_BENCH_DEPS").is_ok_and(|v| v == "0")
}

/// The outputs of `names`, all read at once (or one by one).
async fn read_all<J: Job>(
    ctx: &JobContext,
    names: &[String],
) -> Result<Vec<J::Output>, gaffer::Error> {
    if std::env::var("WF_BENCH_ONE_BY_ONE").is_ok_and(|v| v == "1") {
        let mut outputs = Vec::with_capacity(names.len());
        for name in names {
            outputs.push(ctx.dep::<J>(name).await?);
        }
        return Ok(outputs);
    }
    ctx.deps::<J, _>(names).await
}

/// The fan-out's root: answers a seed.
#[derive(Serialize, Deserialize)]
struct Split;

impl Job for Split {
    const NAME: &'static str = "split";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        mark(SPLIT_RAN);
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
        mark(LEAF_FIRST);
        mark(LEAF_LAST);
        let seed = match ctx.workflow_step() {
            Some(_) if read_deps() => ctx.dep::<Split>("split").await?,
            _ => 7,
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
        if ctx.workflow_step().is_none() || !read_deps() {
            return Ok(0);
        }
        mark(JOIN_START);
        let names: Vec<String> = (0..self.0).map(|n| format!("leaf-{n}")).collect();
        let sum = read_all::<Leaf>(&ctx, &names).await?.iter().sum();
        mark(JOIN_READ);
        Ok(sum)
    }
}

async fn engine(dir: &std::path::Path) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .register::<Split>()
        .register::<Leaf>()
        .register::<Join>()
        .register::<many::Node>()
        .start()
        .await
        .expect("the engine starts")
}

/// One measurement, in this (child) process.
async fn child(mode: &str, n: u64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = engine(dir.path()).await;
    let started = *STARTED.get_or_init(Instant::now);
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
            if read_deps() {
                assert_eq!(sum, 7 * n * (n.saturating_sub(1)) / 2);
            }
        }
        "many" | "plain10" => {
            submit_s = if mode == "many" {
                many::workflows(&engine, n, started).await
            } else {
                many::plain(&engine, n, started).await
            };
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
    let steps = if mode == "many" || mode == "plain10" {
        10 * n
    } else {
        n + 2
    };
    println!(
        "RESULT mode={mode} n={n} wall_s={wall:.3} submit_s={submit_s:.3} per_s={:.0} peak_rss_mib={:.0} cpu_s={:.2} {}",
        steps as f64 / wall,
        rss::mib(peak),
        rss::cpu_secs(),
        if mode == "workflow" {
            phases()
        } else {
            String::new()
        }
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
        if mode == "gates" {
            let n = n.parse().expect("W");
            let (kib, kept) = many::gates_kib(n);
            println!(
                "RESULT mode=gates workflows={kept} rss_kib={kib} per_workflow_b={}",
                kib * 1024 / (kept as u64).max(1)
            );
            return;
        }
        child(&mode, n.parse().expect("N")).await;
        return;
    }
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let shape_many = args.first().is_some_and(|a| a == "many");
    if shape_many {
        args.remove(0);
    }
    let default_n = if shape_many { 1_000 } else { 10_000 };
    let n: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(default_n);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let me = std::env::current_exe().expect("this binary");
    let (base, flows) = if shape_many {
        ("plain10", "many")
    } else {
        ("plain", "workflow")
    };
    if shape_many {
        println!(
            "workflow_scale: {n} workflows of 10 steps (half diamonds, half chains) against {} plain jobs, {reps} reps, alternated, each in a fresh process",
            10 * n
        );
        let out = std::process::Command::new(&me)
            .env("WF_BENCH_MODE", "gates")
            .env("WF_BENCH_N", n.to_string())
            .output()
            .expect("the child runs");
        print!("{}", String::from_utf8_lossy(&out.stdout));
    } else {
        println!("workflow_scale: N = {n}, {reps} reps, alternated, each in a fresh process");
    }
    let mut results: Vec<(String, f64, f64, f64)> = Vec::new();
    for rep in 0..reps {
        let order = if rep % 2 == 0 {
            [base, flows]
        } else {
            [flows, base]
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
    for mode in [base, flows] {
        println!(
            "median {mode}: wall {:.2} s, {:.0} per s, peak RSS {:.0} MiB",
            median(mode, |r| r.1),
            median(mode, |r| r.2),
            median(mode, |r| r.3)
        );
    }
    println!(
        "workflow / plain steps per second: {:.2}",
        median(flows, |r| r.2) / median(base, |r| r.2)
    );
}
