//! Peak RSS of one bulk batch of N items on a local-disk store.
//!
//! Run: `cargo bench --bench bulk_rss -- 10000` (N as the first number given,
//! or the `BULK_N` env var; default 10 000). Add `--memo` to wrap the item in
//! three memoized phases that do no work (with the default
//! `MemoWrites::OnFailure` a successful item writes no memo object; add
//! `--memo-immediate` to write all three per item: far more disk, the store
//! grows by ~12 KiB per item); without `--memo` the pipeline is a bare
//! `Ok(input)`, so the figures are the engine's own overhead. The queue
//! flushes every 1 ms; `--default-flush` keeps the builder's default for a
//! local directory (2 ms since issue #13; taquba's 100 ms before).
//!
//! One batch per process: peak RSS is VmHWM from /proc/self/status, which is
//! per process. Inputs are the range `0..N`, consumed lazily by the engine.
//! The store is a fresh temp dir (removed at the end unless `--keep`), with a
//! 1 ms WAL flush. Every `BULK_REPORT_SECS` (default 10) a progress line shows
//! items done, rate, VmRSS and VmHWM, so a long run shows its memory trend.
//! With `RUST_LOG` set (say `RUST_LOG=slatedb=debug`) the log goes to stderr.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gaffer::{BulkCtx, Engine, ItemError, Pipeline};

#[path = "common/rss.rs"]
mod rss;
use rss::{disk_usage, mib, rss_kib};

struct Trivial {
    memo: bool,
    runs: Arc<AtomicU64>,
}

impl Pipeline for Trivial {
    const NAME: &'static str = "trivial";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        self.runs.fetch_add(1, Ordering::Relaxed);
        if !self.memo {
            return Ok(ctx.input);
        }
        let memo = ctx.memo();
        let a: u64 = memo
            .memoized("parse", || async { Ok::<_, gaffer::Error>(ctx.input) })
            .await?;
        let b: u64 = memo
            .memoized("enrich", || async { Ok::<_, gaffer::Error>(a) })
            .await?;
        let c: u64 = memo
            .memoized("score", || async { Ok::<_, gaffer::Error>(b) })
            .await?;
        Ok(c)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    rss::init_log();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let memo = args.iter().any(|a| a == "--memo");
    let keep = args.iter().any(|a| a == "--keep");
    let memo_immediate = args.iter().any(|a| a == "--memo-immediate");
    let default_flush = args.iter().any(|a| a == "--default-flush");
    let n: u64 = match args.iter().find_map(|a| a.replace('_', "").parse().ok()) {
        Some(n) => n,
        None => std::env::var("BULK_N")
            .ok()
            .and_then(|v| v.replace('_', "").parse().ok())
            .unwrap_or(10_000),
    };
    let every = Duration::from_secs(
        std::env::var("BULK_REPORT_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10),
    );

    let dir = tempfile::Builder::new()
        .prefix("gaffer-bulk-rss-")
        .tempdir()?;
    let (rss0, _) = rss_kib();
    println!(
        "bulk_rss: N={n} pipeline={} store={} flush={}",
        match (memo, memo_immediate) {
            (false, _) => "no memo",
            (true, false) => "3 memoized phases (written on failure)",
            (true, true) => "3 memoized phases (written at once)",
        },
        dir.path().display(),
        if default_flush { "default" } else { "1ms" },
    );

    let runs = Arc::new(AtomicU64::new(0));
    let mut builder = Engine::builder().local_dir(dir.path());
    if !default_flush {
        builder = builder.flush_interval(Duration::from_millis(1));
    }
    if memo_immediate {
        builder = builder.memo_writes(gaffer::MemoWrites::Immediate);
    }
    let engine = builder
        .pipeline(Trivial {
            memo,
            runs: runs.clone(),
        })
        .start()
        .await?;
    let (rss_started, _) = rss_kib();
    let batch = engine.batch::<Trivial>("bulk-rss")?;

    let started = Instant::now();
    let report = {
        let run = batch.run(0..n);
        tokio::pin!(run);
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tokio::select! {
                r = &mut run => break r?,
                _ = tick.tick() => {
                    let (rss, hwm) = rss_kib();
                    let done = batch.progress().await.map(|p| p.completed).unwrap_or(0);
                    let secs = started.elapsed().as_secs_f64();
                    println!(
                        "  {:>7.1}s  ran {:>9}  counted {:>9}  {:>8.0} items/s  VmRSS {:>7.1} MiB  VmHWM {:>7.1} MiB",
                        secs,
                        runs.load(Ordering::Relaxed),
                        done,
                        runs.load(Ordering::Relaxed) as f64 / secs,
                        mib(rss),
                        mib(hwm),
                    );
                }
            }
        }
    };
    let elapsed = started.elapsed();
    let (rss_end, hwm) = rss_kib();
    engine.shutdown().await?;

    assert_eq!(
        (report.total, report.succeeded, report.failed),
        (n, n, 0),
        "wrong counts: {report:?}"
    );
    let (bytes, files) = disk_usage(dir.path());
    let rate = n as f64 / elapsed.as_secs_f64();
    println!(
        "result: N={n} memo={memo} wall={:.2}s items/s={rate:.0} peak_rss(VmHWM)={:.1}MiB \
         rss_before_engine={:.1}MiB rss_after_start={:.1}MiB rss_end={:.1}MiB \
         runs={} store={:.1}MiB/{files} files",
        elapsed.as_secs_f64(),
        mib(hwm),
        mib(rss0),
        mib(rss_started),
        mib(rss_end),
        runs.load(Ordering::Relaxed),
        bytes as f64 / (1024.0 * 1024.0),
    );
    if keep {
        let kept = dir.keep();
        println!("store kept at {}", kept.display());
    }
    Ok(())
}
