//! Peak RSS of taquba 0.16 alone, with no engine on it: the memory floor under
//! gaffer's bulk runs on the same store.
//!
//! Run: `cargo bench --bench raw_rss -- 600000` (N jobs; default 100 000).
//! A producer enqueues N 64-byte payloads, 64 in flight, and keeps at most
//! 2 000 enqueued and not yet acknowledged, so the queue holds a small backlog
//! as in a windowed batch; `run_worker_concurrent` claims and acks them with
//! 16 slots (`--conc C` to change). The store is a fresh local-disk temp dir;
//! the queue flushes every 1 ms (`--default-flush` keeps taquba's 100 ms,
//! where each ack waits a flush: about 160 jobs/s with 16 slots). A progress
//! line every 50 000 jobs shows VmRSS, so the trend is visible; the result
//! line gives VmHWM. With `RUST_LOG` set the log goes to stderr.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use taquba::object_store::{ObjectStore, local::LocalFileSystem};

#[path = "common/rss.rs"]
mod rss;
use rss::{disk_usage, mib, rss_kib};
#[path = "common/store_metrics.rs"]
#[allow(dead_code)]
mod store_metrics;

/// Enqueued and not yet acknowledged, at most.
const BACKLOG: u64 = 2_000;
const IN_FLIGHT: usize = 64;

struct Ack {
    done: Arc<AtomicU64>,
}

impl taquba::Worker for Ack {
    async fn process(
        &self,
        _job: &taquba::JobRecord,
        _lease: &taquba::LeaseHandle,
    ) -> Result<(), taquba::WorkerError> {
        self.done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rss::init_log();
    let metrics = store_metrics::install();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let default_flush = args.iter().any(|a| a == "--default-flush");
    let conc_at = args.iter().position(|a| a == "--conc");
    let conc: usize = conc_at
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    // N: the first number that is not the value of `--conc`.
    let n: u64 = args
        .iter()
        .enumerate()
        .filter(|&(i, _)| conc_at.is_none_or(|c| i != c + 1))
        .find_map(|(_, a)| a.replace('_', "").parse().ok())
        .unwrap_or(100_000);

    let dir = tempfile::Builder::new()
        .prefix("gaffer-raw-rss-")
        .tempdir()?;
    let store: Arc<dyn ObjectStore> = Arc::new(LocalFileSystem::new_with_prefix(dir.path())?);
    let mut options = taquba::OpenOptions::default();
    if !default_flush {
        options = options.flush_interval(Duration::from_millis(1));
    }
    let queue = Arc::new(taquba::Queue::open_with_options(store, "queue", options).await?);
    println!(
        "raw_rss: N={n} conc={conc} backlog<={BACKLOG} flush={}",
        if default_flush { "default" } else { "1ms" }
    );

    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(tokio::sync::Notify::new());
    let worker = {
        let queue = queue.clone();
        let ack = Arc::new(Ack { done: done.clone() });
        let stop = stop.clone();
        tokio::spawn(async move {
            taquba::run_worker_concurrent(
                &queue,
                "bench",
                ack,
                conc,
                Duration::from_millis(100),
                async move { stop.notified().await },
            )
            .await
        })
    };

    let started = Instant::now();
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut enqueues = tokio::task::JoinSet::new();
    for i in 0..n {
        while i.saturating_sub(done.load(Ordering::Relaxed)) >= BACKLOG {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let slot = slots.clone().acquire_owned().await?;
        let queue = queue.clone();
        enqueues.spawn(async move {
            let r = queue.enqueue("bench", vec![0u8; 64]).await;
            drop(slot);
            r
        });
        while let Some(r) = enqueues.try_join_next() {
            r??;
        }
        if i > 0 && i % 50_000 == 0 {
            let (now, hwm) = rss_kib();
            println!(
                "  {:>7.1}s  enqueued {i:>9}  acked {:>9}  VmRSS {:>7.1} MiB  VmHWM {:>7.1} MiB  {}",
                started.elapsed().as_secs_f64(),
                done.load(Ordering::Relaxed),
                mib(now),
                mib(hwm),
                store_metrics::brief(metrics),
            );
        }
    }
    while let Some(r) = enqueues.join_next().await {
        r??;
    }
    while done.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    let (rss_end, hwm) = rss_kib();
    stop.notify_one();
    worker.await??;
    let (bytes, files) = disk_usage(dir.path());
    println!(
        "result: N={n} conc={conc} wall={:.2}s jobs/s={:.0} peak_rss(VmHWM)={:.1}MiB rss_end={:.1}MiB store={:.1}MiB/{files} files",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64(),
        mib(hwm),
        mib(rss_end),
        bytes as f64 / (1024.0 * 1024.0),
    );
    println!("{}", store_metrics::summary(metrics, n));
    match Arc::try_unwrap(queue) {
        Ok(queue) => queue.close().await?,
        Err(_) => eprintln!("the queue is still shared at the end; dropped without close"),
    }
    Ok(())
}
