//! Does a dashboard open on a live store slow its engine? Paired runs on
//! fresh local-disk stores: N keyed jobs submitted and joined (256 in
//! flight, 1 ms flush, the engine on a 2-worker runtime), once alone and
//! once with one dashboard tab's refresh traffic beside it: the overview's
//! live part (`/?fragment=1`, what the page's script fetches) every 1.5 s,
//! from the dashboard's router on a thread and runtime of its own, through
//! its one reader of the store. The order alternates per pair; prints each
//! pair's times and the median of the ratios (with / without).
//!
//! ```sh
//! cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]
//! TAB_EVERY_MS=600000 cargo bench -p gaffer-web --bench slowdown -- [N] [PAIRS]   # the open reader alone: one request at the start
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

/// One run: the seconds N keyed jobs took, and the dashboard's requests.
fn run(n: u64, dashboard: bool) -> (f64, u64) {
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
                let config = gaffer_web::WebConfig::open(&gaffer::Store::local_dir(&path))
                    .await
                    .expect("the dashboard opens the store");
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
    stop.store(true, Ordering::SeqCst);
    if let Some(t) = tab {
        t.join().expect("the tab's thread");
    }
    rt.block_on(async { engine.shutdown().await.expect("shut down") });
    (secs, requests.load(Ordering::SeqCst))
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
    for p in 0..pairs {
        let (alone, with, reqs) = if p % 2 == 0 {
            let a = run(n, false);
            let (w, r) = run(n, true);
            (a.0, w, r)
        } else {
            let (w, r) = run(n, true);
            let a = run(n, false);
            (a.0, w, r)
        };
        let ratio = with / alone;
        println!(
            "pair {p}: alone {alone:.2} s, with a tab {with:.2} s ({reqs} refreshes), ratio {ratio:.3}"
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median ratio (with / alone): {:.3}",
        ratios[ratios.len() / 2]
    );
}
