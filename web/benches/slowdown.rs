//! Does a dashboard open on a live store slow its engine? Paired runs on
//! fresh local-disk stores: N keyed jobs submitted and joined (256 in
//! flight, 1 ms flush, the engine on a 2-worker runtime), once alone and
//! once with one dashboard tab's refresh traffic beside it: the overview's
//! live part (`/?fragment=1`, what the page's script fetches) every 1.5 s,
//! from the dashboard's router on a thread and runtime of its own, through
//! its one reader of the store. The order alternates per pair; prints each
//! pair's times and the median of the ratios (with / without).
//!
//! Wall time on a shared 2-core machine moves by tens of percent between
//! runs, more than the cost measured; so each run with a tab also reports
//! the CPU time of the tab's thread (its reader follows the writer there,
//! and its pages render there) against the CPU time of the rest of the
//! process (the engine): a ratio that does not depend on the machine's
//! other load.
//!
//! ```sh
//! cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]
//! TAB_EVERY_MS=600000 cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # the open reader alone: one request at the start
//! FOLLOW_MS=100 cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # the reader following every 100 ms (before 2026-12-05)
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};
use tower::ServiceExt;

#[derive(Serialize, Deserialize)]
struct Keyed(u64);

impl Job for Keyed {
    const NAME: &'static str = "keyed";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("k{}", self.0))
    }
}

/// The CPU seconds (user + system) of `/proc/{what}/stat`: `self` for the
/// process, `thread-self` for the calling thread.
fn cpu_secs(what: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{what}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 12th and 13th of them, in clock ticks (100 a second).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// One run: the seconds N keyed jobs took, the dashboard's requests, the
/// tab thread's CPU seconds and the process's.
fn run(n: u64, dashboard: bool) -> (f64, u64, f64, f64) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let engine = rt.block_on(async {
        Engine::builder()
            .store(gaffer::Store::local_dir(dir.path()))
            .flush_interval(Duration::from_millis(1))
            .register::<Keyed>()
            .start()
            .await
            .expect("the engine starts")
    });
    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicU64::new(0));
    let cpu_at_start = cpu_secs("self");
    let tab = dashboard.then(|| {
        let (stop, requests) = (stop.clone(), requests.clone());
        let path = dir.path().to_path_buf();
        let every = Duration::from_millis(
            std::env::var("TAB_EVERY_MS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1500),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let named = gaffer::Store::local_dir(&path);
                let config = match std::env::var("FOLLOW_MS").ok().and_then(|v| v.parse().ok()) {
                    None => gaffer_web::WebConfig::open(&named)
                        .await
                        .expect("the dashboard opens the store"),
                    Some(ms) => {
                        let reading = gaffer_ops::Reading::Following(Duration::from_millis(ms));
                        let store = gaffer_ops::Store::open_named(
                            &named,
                            "queue",
                            "jobs",
                            "bulk-items",
                            reading,
                        )
                        .await
                        .expect("the dashboard opens the store");
                        gaffer_web::WebConfig::from_stores(vec![(named.name(), store)])
                    }
                };
                let app = gaffer_web::router(config);
                while !stop.load(Ordering::SeqCst) {
                    let res = app
                        .clone()
                        .oneshot(Request::get("/?fragment=1").body(Body::empty()).unwrap())
                        .await
                        .unwrap();
                    assert!(res.status().is_success());
                    let _ = axum::body::to_bytes(res.into_body(), 16 << 20).await;
                    requests.fetch_add(1, Ordering::SeqCst);
                    let next = tokio::time::Instant::now() + every;
                    while !stop.load(Ordering::SeqCst) && tokio::time::Instant::now() < next {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            });
            // The reader's follow ran on this runtime: its CPU is this
            // thread's.
            drop(rt);
            cpu_secs("thread-self")
        })
    });
    let secs = rt.block_on(async {
        let t0 = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            if set.len() >= 256 {
                set.join_next().await.expect("a task").expect("joined");
            }
            let engine = engine.clone();
            set.spawn(async move {
                let h = engine.submit(Keyed(i)).await.expect("submitted");
                assert_eq!(h.join().await.expect("joined").expect("ran"), i + 1);
            });
        }
        while let Some(r) = set.join_next().await {
            r.expect("joined");
        }
        t0.elapsed().as_secs_f64()
    });
    let cpu_at_end = cpu_secs("self");
    stop.store(true, Ordering::SeqCst);
    let tab_cpu = tab.map_or(0.0, |t| t.join().expect("the tab's thread"));
    rt.block_on(async { engine.shutdown().await.expect("shut down") });
    (
        secs,
        requests.load(Ordering::SeqCst),
        tab_cpu,
        cpu_at_end - cpu_at_start,
    )
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(5000);
    let pairs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    println!("{n} keyed jobs per run, {pairs} pairs");
    let mut ratios = Vec::new();
    let mut shares = Vec::new();
    for p in 0..pairs {
        let (alone, with) = if p % 2 == 0 {
            let a = run(n, false);
            (a, run(n, true))
        } else {
            let w = run(n, true);
            (run(n, false), w)
        };
        let ratio = with.0 / alone.0;
        // The tab's CPU against the engine's (the rest of the process).
        let share = with.2 / (with.3 - with.2).max(1e-9);
        println!(
            "pair {p}: alone {:.2} s, with a tab {:.2} s ({} refreshes), ratio {ratio:.3}; \
             the tab's thread {:.2} CPU s = {:.1} % of the engine's {:.2}",
            alone.0,
            with.0,
            with.1,
            with.2,
            share * 100.0,
            with.3 - with.2
        );
        ratios.push(ratio);
        shares.push(share);
    }
    ratios.sort_by(f64::total_cmp);
    shares.sort_by(f64::total_cmp);
    println!(
        "median ratio (with / alone): {:.3} ({:.3}–{:.3}); the tab's CPU: median {:.1} % of the \
         engine's ({:.1}–{:.1} %)",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
        shares[shares.len() / 2] * 100.0,
        shares[0] * 100.0,
        shares[shares.len() - 1] * 100.0
    );
}
