//! The cost of encryption at rest per job: N keyed jobs (a 1 KiB payload,
//! a 1 KiB output), 64 callers each submitting and joining one at a time,
//! on a fresh local-disk store at the engine's defaults, with and without
//! a keyring, the two alternated in one process (the order swapped each
//! rep). Prints each run (jobs/s, CPU ms per 1 000 jobs) and, per rep,
//! the ratio encrypted ÷ plain; then the median of the ratios.
//!
//! ```sh
//! cargo bench --bench encryption -- 20000 7      # N, then reps
//! ```

use std::time::Instant;

#[allow(dead_code)]
#[path = "common/rss.rs"]
mod rss;

use futures_util::StreamExt;
use gaffer::encryption::Keyring;
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Work {
    key: u64,
    body: String,
}

impl Job for Work {
    const NAME: &'static str = "work";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<String, Self::Error> {
        Ok(self.body.to_uppercase())
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("work-{}", self.key))
    }
}

/// CPU time of this process so far (user + system), in ms.
fn cpu_ms() -> u64 {
    (rss::cpu_secs() * 1000.0).round() as u64
}

/// One run: jobs/s and CPU ms per 1 000 jobs.
async fn run(n: u64, keyring: Keyring) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .register::<Work>()
        .encryption(keyring)
        .start()
        .await
        .expect("the engine starts");
    let body = "a kilobyte of payload ".repeat(47);
    let cpu = cpu_ms();
    let started = Instant::now();
    futures_util::stream::iter(0..n)
        .map(|key| {
            let engine = engine.clone();
            let body = body.clone();
            async move {
                let handle = engine.submit(Work { key, body }).await.expect("submitted");
                handle.await.expect("joined");
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu_ms() - cpu;
    engine.shutdown().await.expect("shut down");
    (n as f64 / secs, cpu as f64 * 1000.0 / n as f64)
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

/// Microseconds per seal and per open of a 1 KiB value, on one thread
/// (what a job's payload and output cost on top of the engine's work,
/// without the store's noise).
fn seal_and_open(keyring: &Keyring) -> (f64, f64) {
    let value = vec![7u8; 1024];
    let rounds = 100_000;
    let started = Instant::now();
    let mut sealed = Vec::new();
    for _ in 0..rounds {
        sealed = keyring.seal(&value).expect("sealed");
    }
    let seal = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    let started = Instant::now();
    for _ in 0..rounds {
        let opened = keyring.open(&sealed).expect("opened");
        assert_eq!(opened.len(), value.len());
    }
    let open = started.elapsed().as_secs_f64() * 1e6 / f64::from(rounds);
    (seal, open)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let keyring = Keyring::new()
        .with_key("bench", [42; 32])
        .expect("a valid key");
    let (seal, open) = seal_and_open(&keyring);
    println!("a 1 KiB value: {seal:.2} µs to seal, {open:.2} µs to open");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    println!(
        "rep  first  plain jobs/s  sealed jobs/s  ratio  plain cpu/1k  sealed cpu/1k  cpu ratio"
    );
    for rep in 0..reps {
        let sealed_first = rep % 2 == 1;
        let (plain, sealed) = rt.block_on(async {
            if sealed_first {
                let s = run(n, keyring.clone()).await;
                let p = run(n, Keyring::new()).await;
                (p, s)
            } else {
                let p = run(n, Keyring::new()).await;
                let s = run(n, keyring.clone()).await;
                (p, s)
            }
        });
        let (ratio, cpu_ratio) = (sealed.0 / plain.0, sealed.1 / plain.1);
        rates.push(ratio);
        cpus.push(cpu_ratio);
        println!(
            "{rep:>3}  {:>6}  {:>12.0}  {:>13.0}  {ratio:>5.3}  {:>12.1}  {:>13.1}  {cpu_ratio:>9.3}",
            if sealed_first { "sealed" } else { "plain" },
            plain.0,
            sealed.0,
            plain.1,
            sealed.1,
        );
    }
    println!(
        "median of {reps}: throughput sealed/plain {:.3}, CPU per job sealed/plain {:.3} (N {n})",
        median(rates),
        median(cpus)
    );
}
