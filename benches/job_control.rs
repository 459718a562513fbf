//! Job control's cost on the submit and claim paths, paired: each round
//! runs every variant once, in a rotated order, each on a fresh engine on
//! a fresh local directory (the builder's defaults: a 2 ms flush on a local
//! directory, 16 workers).
//!
//! - **submit**: N submissions from 32 concurrent tasks, of a paused type
//!   (nothing runs meanwhile): plain; unique for an hour (distinct
//!   payloads); debounced by N distinct keys (a burst each: its record, run
//!   record and timer); debounced by one key (one burst: the line commits
//!   its submissions in batches).
//! - **claim**: N jobs, submitted while their type is paused, run from its
//!   resume to their end and joined: plain; each snoozing once for 1 ms;
//!   each sleeping once for 1 ms (a pause is one more settlement and one
//!   more claim, through the scheduler).
//!
//! Prints each round's times and, per variant, the median of its ratio to
//! the plain variant of the same round (with the lowest and highest).
//!
//! ```sh
//! cargo bench --bench job_control -- 2000 7
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use gaffer::{Engine, Job, JobContext, SubmitOptions};
use serde::{Deserialize, Serialize};

const HOUR: Duration = Duration::from_secs(3600);

#[derive(Serialize, Deserialize)]
struct Work {
    n: u64,
    /// 0: return; 1: snooze once; 2: sleep once.
    pause: u8,
}

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> gaffer::Result<u64> {
        match self.pause {
            1 if ctx.snoozes() == 0 => ctx.snooze(Duration::from_millis(1)).await,
            2 => ctx.sleep(Duration::from_millis(1)).await,
            _ => {}
        }
        Ok(self.n)
    }
}

const SUBMITS: [&str; 4] = ["plain", "unique_for", "debounce-keys", "debounce-1key"];
const CLAIMS: [&str; 3] = ["plain", "snooze", "sleep"];

async fn engine(dir: &std::path::Path) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .register::<Work>()
        .start()
        .await
        .expect("engine starts")
}

/// Seconds to submit `n` jobs of `variant`, 32 at a time, the type paused.
async fn submit(variant: &str, n: u64) -> f64 {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Arc::new(engine(tmp.path()).await);
    engine.pause(Work::NAME).await.unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..32u64)
        .map(|t| {
            let engine = engine.clone();
            let variant = variant.to_string();
            tokio::spawn(async move {
                for n in (t..n).step_by(32) {
                    let opts = match variant.as_str() {
                        "unique_for" => SubmitOptions::default().unique_for(HOUR),
                        "debounce-keys" => SubmitOptions::default().debounce(format!("k{n}"), HOUR),
                        "debounce-1key" => SubmitOptions::default().debounce("one", HOUR),
                        _ => SubmitOptions::default(),
                    };
                    engine
                        .submit_with(Work { n, pause: 0 }, opts)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    Arc::try_unwrap(engine).unwrap().shutdown().await.unwrap();
    secs
}

/// Seconds to run `n` jobs of `variant` to their end: submitted while the
/// type is paused, timed from its resume to the last join.
async fn claim(variant: &str, n: u64) -> f64 {
    let tmp = tempfile::tempdir().unwrap();
    let engine = Arc::new(engine(tmp.path()).await);
    engine.pause(Work::NAME).await.unwrap();
    let pause = match variant {
        "snooze" => 1,
        "sleep" => 2,
        _ => 0,
    };
    let tasks: Vec<_> = (0..32u64)
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut handles = Vec::new();
                for n in (t..n).step_by(32) {
                    handles.push(engine.submit(Work { n, pause }).await.unwrap());
                }
                handles
            })
        })
        .collect();
    let mut handles = Vec::with_capacity(n as usize);
    for t in tasks {
        handles.extend(t.await.unwrap());
    }
    let started = Instant::now();
    engine.resume(Work::NAME).await.unwrap();
    for h in handles {
        h.join().await.unwrap().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    Arc::try_unwrap(engine).unwrap().shutdown().await.unwrap();
    secs
}

fn median_and_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    println!("job_control: N = {n}, {rounds} rounds");
    for (path, variants) in [("submit", &SUBMITS[..]), ("claim", &CLAIMS[..])] {
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
        for round in 0..rounds {
            let mut secs = vec![0.0; variants.len()];
            for k in 0..variants.len() {
                let i = (k + round) % variants.len();
                secs[i] = match path {
                    "submit" => submit(variants[i], n).await,
                    _ => claim(variants[i], n).await,
                };
            }
            let line: Vec<String> = variants
                .iter()
                .zip(&secs)
                .map(|(v, s)| format!("{v} {s:.3} s ({:.0}/s)", n as f64 / s))
                .collect();
            println!("{path} round {round}: {}", line.join(", "));
            for i in 0..variants.len() {
                ratios[i].push(secs[i] / secs[0]);
            }
        }
        for (i, v) in variants.iter().enumerate().skip(1) {
            let (m, lo, hi) = median_and_range(ratios[i].clone());
            println!("{path} {v} / plain: median {m:.3} (range {lo:.3}–{hi:.3})");
        }
    }
}
