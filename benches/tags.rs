//! The cost of a tagged submit (`SubmitOptions::tags`): N unkeyed jobs
//! submitted by 64 tasks, each submitting its next job as soon as the last
//! submission returned, on a fresh local-disk store at the engine's
//! defaults, without tags and with two (`order:{i}`, `customer:acme`: two
//! index entries in the submission's transaction and the tags on its run
//! record), the two alternated in one process (the order swapped each
//! rep). Times the submissions (until the last returned: each is durable
//! then), then joins every job, untimed. Prints each run (submits/s, CPU ms
//! per 1 000 submits, submission latency p50 and p99) and, per rep, the
//! ratio tagged ÷ untagged; then the medians of the ratios.
//!
//! ```sh
//! cargo bench --bench tags -- 20000 9      # N, then reps
//! ```

use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "common/rss.rs"]
mod rss;

use futures_util::StreamExt;
use gaffer::{Engine, Job, JobContext, SubmitOptions};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Work(u64);

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 + 1)
    }
}

/// CPU time of this process so far (user + system), in ms.
fn cpu_ms() -> u64 {
    (rss::cpu_secs() * 1000.0).round() as u64
}

/// One run's figures.
struct Run {
    /// Submissions per second.
    rate: f64,
    /// CPU ms per 1 000 submissions (the engine runs the jobs meanwhile).
    cpu: f64,
    p50: Duration,
    p99: Duration,
}

async fn run(n: u64, tagged: bool) -> Run {
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .register::<Work>()
        .start()
        .await
        .expect("the engine starts");
    let cpu = cpu_ms();
    let started = Instant::now();
    let submitted: Vec<_> = futures_util::stream::iter(0..n)
        .map(|i| {
            let engine = engine.clone();
            async move {
                let opts = if tagged {
                    SubmitOptions::default().tags([format!("order:{i}"), "customer:acme".into()])
                } else {
                    SubmitOptions::default()
                };
                let at = Instant::now();
                let handle = engine.submit_with(Work(i), opts).await.expect("submitted");
                (handle, at.elapsed())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_ms() - cpu;
    let mut latencies: Vec<Duration> = submitted.iter().map(|(_, d)| *d).collect();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    let (p50, p99) = (at(0.5), at(0.99));
    for (handle, _) in submitted {
        handle.await.expect("joined");
    }
    engine.shutdown().await.expect("shut down");
    Run {
        rate: n as f64 / secs,
        cpu: cpu as f64 * 1000.0 / n as f64,
        p50,
        p99,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (mut rates, mut cpus, mut p50s) = (Vec::new(), Vec::new(), Vec::new());
    println!(
        "rep  first     plain/s  tagged/s  ratio  plain cpu/1k  tagged cpu/1k  cpu ratio  plain p50/p99 ms  tagged p50/p99 ms"
    );
    for rep in 0..reps {
        let tagged_first = rep % 2 == 1;
        let (plain, tagged) = rt.block_on(async {
            if tagged_first {
                let t = run(n, true).await;
                let p = run(n, false).await;
                (p, t)
            } else {
                let p = run(n, false).await;
                let t = run(n, true).await;
                (p, t)
            }
        });
        let ratio = tagged.rate / plain.rate;
        let cpu_ratio = tagged.cpu / plain.cpu;
        let p50_ratio = tagged.p50.as_secs_f64() / plain.p50.as_secs_f64();
        println!(
            "{rep:>3}  {:<7}  {:>8.0}  {:>8.0}  {ratio:>5.3}  {:>12.1}  {:>13.1}  {cpu_ratio:>9.3}  {:>7.2}/{:<7.2}  {:>7.2}/{:<7.2}",
            if tagged_first { "tagged" } else { "plain" },
            plain.rate,
            tagged.rate,
            plain.cpu,
            tagged.cpu,
            plain.p50.as_secs_f64() * 1e3,
            plain.p99.as_secs_f64() * 1e3,
            tagged.p50.as_secs_f64() * 1e3,
            tagged.p99.as_secs_f64() * 1e3,
        );
        rates.push(ratio);
        cpus.push(cpu_ratio);
        p50s.push(p50_ratio);
    }
    println!(
        "median of {reps}: submits/s tagged ÷ plain {:.3}, CPU per submit {:.3}, p50 latency {:.3}",
        median(rates),
        median(cpus),
        median(p50s)
    );
}
