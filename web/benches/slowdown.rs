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
//! With `AB=1` each pair is two runs with a tab instead, the dashboard as
//! `WebConfig::open` makes it (its reader closed after `IDLE_CLOSE` without
//! a request, rebased when old) and as it was before #41 §2 (a reader
//! opened once and following every second for the dashboard's life), the
//! order alternating; the ratio printed is then the tab's CPU, before ÷
//! after. `IDLE_FIRST_S=S` waits S seconds after the tab's first request
//! before the jobs start (the tab's CPU is counted from there): a
//! dashboard looked at once and left open beside an engine that then gets
//! busy. With `AB=live` each pair is a tab through the engine's own view
//! (`WebConfig::live`: no reader) and one through a reader
//! (`WebConfig::open`), the ratio printed the tab's CPU, reader ÷ live.
//!
//! ```sh
//! cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]
//! TAB_EVERY_MS=600000 cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # the open reader alone: one request at the start
//! FOLLOW_MS=100 cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # a reader held open following every 100 ms (before 2026-12-05)
//! AB=1 IDLE_FIRST_S=50 TAB_EVERY_MS=600000 cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # the idle close against a reader held open
//! TAB_PATH=/queues AB=live cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # another page than the overview's live part
//! AB=live cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # a tab through the engine's own view (`WebConfig::live`) against one through a reader
//! ```

mod common;
use common::cpu_secs;

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

/// The tab's dashboard: none, as `WebConfig::open` makes it, a reader
/// held open following every `ms` (`from_stores`), or through the
/// engine's own view (`WebConfig::live`).
#[derive(Clone, Copy, PartialEq)]
enum Tab {
    None,
    Open,
    Held(u64),
    Live,
}

/// One run: the seconds N keyed jobs took, the dashboard's requests, the
/// tab thread's CPU seconds and the process's, both while the jobs ran.
fn run(n: u64, tab: Tab) -> (f64, u64, f64, f64) {
    let dashboard = tab != Tab::None;
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
    // The tab thread's CPU, in µs, updated every 20 ms.
    let tab_cpu_now = Arc::new(AtomicU64::new(0));
    let tab = dashboard.then(|| {
        let (stop, requests, tab_cpu_now) = (stop.clone(), requests.clone(), tab_cpu_now.clone());
        let path = dir.path().to_path_buf();
        let live = engine.live_store().expect("the engine runs");
        let tab_path = std::env::var("TAB_PATH").unwrap_or_else(|_| "/?fragment=1".into());
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
                let config = match tab {
                    Tab::Live => gaffer_web::WebConfig::live(&live)
                        .await
                        .expect("the dashboard reads the engine's view"),
                    Tab::None | Tab::Open => gaffer_web::WebConfig::open(&named)
                        .await
                        .expect("the dashboard opens the store"),
                    Tab::Held(ms) => {
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
                        .oneshot(Request::get(&tab_path).body(Body::empty()).unwrap())
                        .await
                        .unwrap();
                    assert!(res.status().is_success());
                    let _ = axum::body::to_bytes(res.into_body(), 16 << 20).await;
                    requests.fetch_add(1, Ordering::SeqCst);
                    let next = tokio::time::Instant::now() + every;
                    while !stop.load(Ordering::SeqCst) && tokio::time::Instant::now() < next {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        tab_cpu_now.store(
                            (cpu_secs("thread-self", false) * 1e6) as u64,
                            Ordering::SeqCst,
                        );
                    }
                }
            });
            // The reader's follow ran on this runtime: its CPU is this
            // thread's.
            drop(rt);
        })
    });
    if dashboard {
        // The tab's first page, then maybe the dashboard left idle.
        while requests.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let idle_first: u64 = std::env::var("IDLE_FIRST_S")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        std::thread::sleep(Duration::from_secs(idle_first) + Duration::from_millis(50));
    }
    let cpu_at_start = cpu_secs("self", false);
    let tab_cpu_at_start = tab_cpu_now.load(Ordering::SeqCst) as f64 / 1e6;
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
    let cpu_at_end = cpu_secs("self", false);
    let tab_cpu_at_end = tab_cpu_now.load(Ordering::SeqCst) as f64 / 1e6;
    stop.store(true, Ordering::SeqCst);
    if let Some(t) = tab {
        t.join().expect("the tab's thread");
    }
    let tab_cpu = (tab_cpu_at_end - tab_cpu_at_start).max(0.0);
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
    let held = std::env::var("FOLLOW_MS").ok().and_then(|v| v.parse().ok());
    let ab_live = std::env::var("AB").is_ok_and(|v| v == "live");
    let ab = ab_live || std::env::var("AB").is_ok_and(|v| v == "1");
    // The two sides of a pair: (a, b), the ratio b ÷ a.
    let (a_side, b_side) = if ab_live {
        (Tab::Live, Tab::Open)
    } else if ab {
        (Tab::Open, Tab::Held(held.unwrap_or(1000)))
    } else {
        (Tab::None, held.map_or(Tab::Open, Tab::Held))
    };
    let mut ratios = Vec::new();
    let mut shares = Vec::new();
    let mut a_shares = Vec::new();
    for p in 0..pairs {
        let (a, b) = if p % 2 == 0 {
            let a = run(n, a_side);
            (a, run(n, b_side))
        } else {
            let b = run(n, b_side);
            (run(n, a_side), b)
        };
        // The tab's CPU against the engine's (the rest of the process).
        let share = |r: (f64, u64, f64, f64)| r.2 / (r.3 - r.2).max(1e-9);
        if ab {
            let names = if ab_live {
                ("live", "reader")
            } else {
                ("idle-closing", "held open")
            };
            println!(
                "pair {p}: the tab's CPU, {} {:.3} s = {:.2} % of the engine's \
                 ({:.2} s, {} refreshes); {} {:.3} s = {:.2} % ({:.2} s); wall {:.2} / {:.2} s",
                names.0,
                a.2,
                share(a) * 100.0,
                a.3 - a.2,
                a.1,
                names.1,
                b.2,
                share(b) * 100.0,
                b.3 - b.2,
                a.0,
                b.0
            );
            a_shares.push(share(a));
            shares.push(share(b));
            continue;
        }
        let (alone, with) = (a, b);
        let ratio = with.0 / alone.0;
        println!(
            "pair {p}: alone {:.2} s, with a tab {:.2} s ({} refreshes), ratio {ratio:.3}; \
             the tab's thread {:.2} CPU s = {:.1} % of the engine's {:.2}",
            alone.0,
            with.0,
            with.1,
            with.2,
            share(with) * 100.0,
            with.3 - with.2
        );
        ratios.push(ratio);
        shares.push(share(with));
    }
    let sorted = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v
    };
    let shares = sorted(shares);
    let mid = |v: &[f64]| {
        format!(
            "median {:.2} % ({:.2}–{:.2} %)",
            v[v.len() / 2] * 100.0,
            v[0] * 100.0,
            v[v.len() - 1] * 100.0
        )
    };
    if ab {
        let a_shares = sorted(a_shares);
        let names = if ab_live {
            ("through the engine's view", "through a reader")
        } else {
            ("idle-closing", "held open")
        };
        println!(
            "the tab's CPU against the engine's: {} {}; {} {}",
            names.0,
            mid(&a_shares),
            names.1,
            mid(&shares)
        );
        return;
    }
    let ratios = sorted(ratios);
    println!(
        "median ratio (with / alone): {:.3} ({:.3}–{:.3}); the tab's CPU: {} of the engine's",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1],
        mid(&shares)
    );
}
