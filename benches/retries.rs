//! Retries: N jobs of one type, each failing on its first attempt and
//! succeeding on its retry, either by returning a transient error (the cost
//! of a retry's commit) or by panicking (`--panic`: a panic storm, with the
//! restart limit raised so the type is never paused: a panic is a bug in
//! one job, not a crash loop). Prints the wall time, jobs/s and the pool's
//! worker crashes; each job is joined, so every one ran to its success.
//!
//! The engine: 16 workers (the default), a 1 ms flush on a local directory,
//! the queue's retry backoff at zero (the retry's own wait is not what is
//! measured), `max_restarts` 1 000 000.
//!
//! ```sh
//! cargo bench --bench retries -- 2000            # transient failures
//! cargo bench --bench retries -- 500 --panic     # a panic storm
//! ```

use std::time::{Duration, Instant};

use gaffer::taquba::{OpenOptions, QueueConfig};
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
#[error("first attempts fail")]
struct FirstAttempt;

#[derive(Serialize, Deserialize)]
struct FailsOnce {
    n: u64,
    panic: bool,
}

impl Job for FailsOnce {
    const NAME: &'static str = "fails-once";
    type Output = u64;
    type Error = FirstAttempt;
    async fn run(&self, ctx: JobContext) -> Result<u64, FirstAttempt> {
        if ctx.attempt() == 1 {
            if self.panic {
                panic!("storm {}", self.n);
            }
            return Err(FirstAttempt);
        }
        Ok(self.n)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(2_000);
    let panic = args.iter().any(|a| a == "--panic");
    // The storm's own panics are expected: print none of them.
    std::panic::set_hook(Box::new(|_| {}));
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .open_options(
            OpenOptions::default()
                .flush_interval(Duration::from_millis(1))
                .default_queue_config(QueueConfig::default().retry_backoff_base(Duration::ZERO)),
        )
        .max_restarts(1_000_000)
        .register::<FailsOnce>()
        .start()
        .await
        .expect("the engine starts");
    let started = Instant::now();
    let mut handles = Vec::with_capacity(n as usize);
    for i in 0..n {
        let job = FailsOnce { n: i, panic };
        handles.push(engine.submit(job).await.expect("submitted"));
    }
    for (i, h) in handles.into_iter().enumerate() {
        let v = h.join().await.expect("joined");
        assert_eq!(v.expect("each job succeeds on its retry"), i as u64);
    }
    let took = started.elapsed();
    let crashes = engine
        .pool_stats()
        .await
        .expect("pool stats")
        .get(FailsOnce::NAME)
        .map_or(0, |s| s.crashes);
    let how = if panic { "panicking" } else { "failing" };
    println!(
        "{n} jobs, each {how} once: {:.2} s, {:.0} jobs/s, {crashes} worker crashes",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64()
    );
    engine.shutdown().await.expect("shutdown");
}
