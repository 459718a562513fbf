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
//! `--rate R` paces the batch (`Batch::max_rate`, items per second).
//! `--budget off` turns the engine's memory budget off
//! (`EngineBuilder::memory_budget(None)`, as before issue #30), `--budget M`
//! sets it to M MiB; without it the engine's default applies. The header
//! line prints the machine's load average (`/proc/loadavg`) at the start,
//! the result line at the end.
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

use gaffer::{BulkCtx, Engine, Pipeline, bulk::ItemError};

#[path = "common/rss.rs"]
mod rss;
use rss::{disk_usage, mib, rss_kib};
#[path = "common/store_metrics.rs"]
mod store_metrics;
use store_metrics::{Row, taquba_keys};

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
    let metrics = store_metrics::install();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let memo = args.iter().any(|a| a == "--memo");
    let keep = args.iter().any(|a| a == "--keep");
    let memo_immediate = args.iter().any(|a| a == "--memo-immediate");
    let default_flush = args.iter().any(|a| a == "--default-flush");
    // `--rate R`: the batch's `max_rate` (items enqueued per second at most).
    let rate_at = args.iter().position(|a| a == "--rate");
    let rate: Option<u32> = rate_at
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.replace('_', "").parse().ok());
    // `--budget off|MIB`: the engine's memory budget (default: the engine's).
    let budget_at = args.iter().position(|a| a == "--budget");
    let budget: Option<Option<u64>> = budget_at.and_then(|i| args.get(i + 1)).map(|v| {
        if v == "off" {
            None
        } else {
            Some(v.parse::<u64>().expect("--budget off|MIB") << 20)
        }
    });
    let n: u64 = match args
        .iter()
        .enumerate()
        .filter(|&(i, _)| rate_at.is_none_or(|r| i != r + 1))
        .filter(|&(i, _)| budget_at.is_none_or(|b| i != b + 1))
        .find_map(|(_, a)| a.replace('_', "").parse().ok())
    {
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
        "bulk_rss: N={n} pipeline={} store={} flush={} max_rate={} budget={} load={}",
        match (memo, memo_immediate) {
            (false, _) => "no memo",
            (true, false) => "3 memoized phases (written on failure)",
            (true, true) => "3 memoized phases (written at once)",
        },
        dir.path().display(),
        if default_flush { "default" } else { "1ms" },
        rate.map_or("none".to_string(), |r| format!("{r}/s")),
        match budget {
            None => "default".to_string(),
            Some(None) => "off".to_string(),
            Some(Some(b)) => format!("{}MiB", b >> 20),
        },
        loadavg(),
    );

    let runs = Arc::new(AtomicU64::new(0));
    let mut builder = Engine::builder().store(gaffer::Store::local_dir(dir.path()));
    if !default_flush {
        builder = builder.flush_interval(Duration::from_millis(1));
    }
    if let Some(budget) = budget {
        builder = builder.memory_budget(budget);
    }
    if memo_immediate {
        builder = builder.memo_writes(gaffer::job::MemoWrites::Immediate);
    }
    let engine = builder
        .pipeline(Trivial {
            memo,
            runs: runs.clone(),
        })
        .start()
        .await?;
    let (rss_started, _) = rss_kib();
    let mut batch = engine.batch::<Trivial>("bulk-rss")?;
    if let Some(rate) = rate {
        batch = batch.max_rate(rate);
    }
    let sampler = tokio::spawn(sample_live_item(engine.clone()));

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
                        "  {:>7.1}s  ran {:>9}  counted {:>9}  {:>8.0} items/s  VmRSS {:>7.1} MiB  VmHWM {:>7.1} MiB  {}",
                        secs,
                        runs.load(Ordering::Relaxed),
                        done,
                        runs.load(Ordering::Relaxed) as f64 / secs,
                        mib(rss),
                        mib(hwm),
                        store_metrics::brief(metrics),
                    );
                }
            }
        }
    };
    let elapsed = started.elapsed();
    let (rss_end, hwm) = rss_kib();
    let live = sampler.await.ok().flatten();
    let settled = sample_settled_item(&engine).await;
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
         runs={} store={:.1}MiB/{files} files load={}",
        elapsed.as_secs_f64(),
        mib(hwm),
        mib(rss0),
        mib(rss_started),
        mib(rss_end),
        runs.load(Ordering::Relaxed),
        bytes as f64 / (1024.0 * 1024.0),
        loadavg(),
    );
    println!("{}", store_metrics::summary(metrics, n));
    if let (Some(live), Some(settled)) = (live, settled) {
        print_accounting(&live, &settled);
    }
    if keep {
        let kept = dir.keep();
        println!("store kept at {}", kept.display());
    }
    Ok(())
}

const BATCH_ID: &str = "bulk-rss";

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` says them.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join("/"))
        .unwrap_or_else(|_| "?".into())
}

/// The stored sizes of one item in flight, read from the store mid-run.
struct LiveItem {
    queue: String,
    job_id: String,
    /// The queue job's record as taquba stores it (pending; the claimed copy
    /// adds `claimed_at`).
    pending_record: usize,
    claimed_record: usize,
    headers: usize,
    /// Extra KV records gaffer writes with the enqueue, `(key, value)` sizes.
    extra: Vec<(&'static str, usize, usize)>,
}

/// The stored sizes of a settled item and the manifest.
struct SettledItem {
    /// Records gaffer writes with the terminal settlement (or leaves), `(kind, op, key, value)`.
    writes: Vec<(&'static str, &'static str, usize, usize)>,
    /// Manifest bytes per item (key and value of chunk 0 over its items).
    manifest_per_item: f64,
}

/// Poll the pipeline's queue until a pending item shows up, and size it.
async fn sample_live_item(engine: gaffer::Engine) -> Option<LiveItem> {
    let services = gaffer::testing::services(&engine);
    let queue_name = services.pipeline_queue(Trivial::NAME).ok()?.to_string();
    for _ in 0..2_000 {
        let queue = services.raw_queue().ok()?;
        let page = queue
            .view()
            .list_jobs(&queue_name, taquba::JobStatus::Pending, None, 1)
            .await
            .ok()?;
        if let Some(mut job) = page.jobs.into_iter().next() {
            let pending_record = rmp_serde::to_vec_named(&job).ok()?.len();
            job.claimed_at = Some(job.enqueued_at);
            job.attempts += 1;
            let claimed_record = rmp_serde::to_vec_named(&job).ok()?.len();
            let headers = rmp_serde::to_vec(&job.headers).ok()?.len();
            let mut extra = Vec::new();
            if let Some(key) = job.headers.get(gaffer::testing::layout::keys::HEADER_KEY) {
                let active = gaffer::testing::layout::keys::item_active_key(BATCH_ID, key);
                if let Ok(Some(v)) = queue.view().kv_get(&active).await {
                    extra.push(("active record", taquba_keys::user(&active), v.len()));
                }
            }
            return Some(LiveItem {
                queue: queue_name,
                job_id: job.id,
                pending_record,
                claimed_record,
                headers,
                extra,
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// Size the marker of item 0 and the first manifest chunk.
async fn sample_settled_item(engine: &gaffer::Engine) -> Option<SettledItem> {
    let services = gaffer::testing::services(engine);
    let queue = services.raw_queue().ok()?;
    let view = queue.view();
    let mut writes = Vec::new();
    let marker = gaffer::testing::layout::keys::item_marker_key(BATCH_ID, "item-0");
    let value = view.kv_get(&marker).await.ok()??;
    writes.push((
        "item marker",
        "put",
        taquba_keys::user(&marker),
        value.len(),
    ));
    let active = gaffer::testing::layout::keys::item_active_key(BATCH_ID, "item-0");
    writes.push(("active record", "delete", taquba_keys::user(&active), 0));
    let chunk = gaffer::testing::layout::keys::manifest_chunk_key(BATCH_ID, 0);
    let raw = view.kv_get(&chunk).await.ok()??;
    let items: gaffer::testing::layout::records::ManifestChunk =
        rmp_serde::from_slice(&raw).ok()?;
    let manifest_per_item =
        (taquba_keys::user(&chunk) + raw.len()) as f64 / items.items.len().max(1) as f64;
    Some(SettledItem {
        writes,
        manifest_per_item,
    })
}

/// Print what one item costs the store, by kind: taquba's writes (from its
/// key layout and the record read mid-run) and gaffer's own (read back).
fn print_accounting(live: &LiveItem, settled: &SettledItem) {
    let q = live.queue.as_str();
    let id = live.job_id.as_str();
    let window_txn = 1.0 / 10_000.0;
    let mut rows = vec![
        Row {
            stage: "manifest",
            kind: "manifest chunk (per item)",
            op: "put",
            entries: 0.001,
            key: 0,
            value: (settled.manifest_per_item * 1000.0) as usize,
        },
        Row {
            stage: "enqueue",
            kind: "job record (pending)",
            op: "put",
            entries: 1.0,
            key: taquba_keys::pending(q, id),
            value: live.pending_record,
        },
        Row {
            stage: "enqueue",
            kind: "job index",
            op: "put",
            entries: 1.0,
            key: taquba_keys::by_id(id),
            value: taquba_keys::pending(q, id),
        },
    ];
    for (kind, key, value) in &live.extra {
        rows.push(Row {
            stage: "enqueue",
            kind,
            op: "put",
            entries: 1.0,
            key: *key,
            value: *value,
        });
    }
    rows.extend([
        Row {
            stage: "enqueue",
            kind: "queue stats (per txn)",
            op: "merge",
            entries: window_txn,
            key: taquba_keys::stats(q),
            value: 8,
        },
        Row {
            stage: "claim",
            kind: "job record (pending)",
            op: "delete",
            entries: 1.0,
            key: taquba_keys::pending(q, id),
            value: 0,
        },
        Row {
            stage: "claim",
            kind: "job record (claimed)",
            op: "put",
            entries: 1.0,
            key: taquba_keys::claimed(q, id),
            value: live.claimed_record,
        },
        Row {
            stage: "claim",
            kind: "job index",
            op: "put",
            entries: 1.0,
            key: taquba_keys::by_id(id),
            value: taquba_keys::claimed(q, id),
        },
        Row {
            stage: "settle",
            kind: "job record (claimed)",
            op: "delete",
            entries: 1.0,
            key: taquba_keys::claimed(q, id),
            value: 0,
        },
        Row {
            stage: "settle",
            kind: "job index",
            op: "delete",
            entries: 1.0,
            key: taquba_keys::by_id(id),
            value: 0,
        },
        Row {
            stage: "settle",
            kind: "attempt history",
            op: "delete",
            entries: 1.0,
            key: taquba_keys::by_id(id),
            value: 0,
        },
        Row {
            stage: "settle",
            kind: "queue stats (claimed -1, done +1)",
            op: "merge",
            entries: 2.0,
            key: taquba_keys::stats(q),
            value: 8,
        },
    ]);
    for (kind, op, key, value) in &settled.writes {
        rows.push(Row {
            stage: "settle",
            kind,
            op,
            entries: 1.0,
            key: *key,
            value: *value,
        });
    }
    store_metrics::print_rows(
        &format!(
            "per item, by kind (job record {} B pending / {} B claimed, of which headers {} B; \
             claims amortize their stats merges over up to 200 jobs, not listed):",
            live.pending_record, live.claimed_record, live.headers
        ),
        &rows,
    );
}
