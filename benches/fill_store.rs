//! A store full of finished jobs, for timing the `gaffer` command on it:
//! N jobs submitted and joined (256 in flight, 1 ms flush) on a local
//! directory, of two types: `work` succeeds, and every 1 000th job is a
//! `rare` that fails for good. The engine then shuts down and the directory
//! is kept.
//!
//! With `--hold` the engine stays up after the fill (beating, idle) until
//! standard input closes, then shuts down: the store a `gaffer` command meets
//! beside a live engine, whose writes since the last memtable flush are still
//! only in the WAL (a clean shutdown flushes them, a `kill -9` of the holding
//! process leaves them, as a crash does). With `--backlog K` as well, `work`
//! is paused after the fill and K more `work` jobs are submitted: they stay
//! ready (a backlog whose oldest job `gaffer stats` shows).
//!
//! ```sh
//! cargo bench --bench fill_store -- /tmp/store-100k 100000
//! cargo build --release -p gaffer-cli
//! /usr/bin/time -f '%e s %M KiB' target/release/gaffer --dir /tmp/store-100k jobs --limit 20
//! # beside a live engine:
//! sleep infinity | cargo bench --bench fill_store -- /tmp/store-live 100000 --hold &
//! ```

use std::time::{Duration, Instant};

use gaffer::{Engine, Job, JobContext, job::FailureKind};
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

#[derive(Debug, thiserror::Error)]
#[error("rare job {0} fails")]
struct Rare(u64);

#[derive(Serialize, Deserialize)]
struct RareJob(u64);

impl Job for RareJob {
    const NAME: &'static str = "rare";
    type Output = ();
    type Error = Rare;
    async fn run(&self, _ctx: JobContext) -> Result<(), Rare> {
        Err(Rare(self.0))
    }
    fn classify(&self, _: &Rare) -> FailureKind {
        FailureKind::Permanent
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let hold = args.iter().any(|a| a == "--hold");
    let mut backlog = 0u64;
    let mut positional: Vec<&String> = Vec::new();
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--hold" => {}
            "--backlog" => backlog = rest.next().and_then(|k| k.parse().ok()).unwrap_or(0),
            _ => positional.push(a),
        }
    }
    let args = positional;
    let Some(dir) = args.first() else {
        eprintln!("usage: cargo bench --bench fill_store -- DIR [N] [--hold] [--backlog K]");
        std::process::exit(2);
    };
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    std::fs::create_dir_all(dir).expect("the directory");
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Work>()
        .register::<RareJob>()
        .start()
        .await
        .expect("the engine starts");
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        if set.len() >= 256 {
            set.join_next().await.expect("a task").expect("joined");
        }
        let engine = engine.clone();
        set.spawn(async move {
            if i % 1000 == 999 {
                let h = engine.submit(RareJob(i)).await.expect("submitted");
                assert!(h.join().await.expect("joined").is_err());
            } else {
                let h = engine.submit(Work(i)).await.expect("submitted");
                assert_eq!(h.join().await.expect("joined").expect("ran"), i + 1);
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("joined");
    }
    println!(
        "{n} jobs ({} rare failures) in {:.1} s into {dir}",
        n / 1000,
        t0.elapsed().as_secs_f64()
    );
    if backlog > 0 {
        engine.pause(Work::NAME).await.expect("paused");
        for i in 0..backlog {
            engine.submit(Work(n + i)).await.expect("submitted");
        }
        println!("{backlog} more `work` jobs ready, the type paused");
    }
    if hold {
        println!("holding: the engine stays up until standard input closes");
        // Blocking reads on a thread of their own: the engine's tasks keep
        // both runtime workers.
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        })
        .await
        .expect("standard input read");
    }
    engine.shutdown().await.expect("shut down");
}
