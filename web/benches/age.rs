//! Page time against store age: a live engine in process submits plain
//! jobs at a slow rate (writer at its default flush), and two dashboards
//! read its store, each from a thread and runtime of its own, each asked
//! for `/` and `/jobs` every 1.5 s (as one open tab), at the same time:
//!
//! - `before`: one reader opened at the start and following every second
//!   for the whole run (`WebConfig::from_stores`: the dashboard before #41
//!   §2), so its memtables grow with its age;
//! - `after`: `WebConfig::open`, whose reader is rebased every
//!   `REBASE_AFTER` (and closed when idle, which a tab never lets happen).
//!
//! Every minute it prints each page's p50 and p99 for both, the
//! unflushed WAL objects (`gaffer health`'s count, read flushed) and the
//! rebases so far. With `GAFFER_BIN` set (a release `gaffer`), it also
//! runs `gaffer --dir DIR stats` every second as a child and prints the
//! children's CPU against the engine's (the process's less the dashboards'
//! thread); with `STATS_WATCH=1` too, one `gaffer --dir DIR stats --watch
//! --every 1s` child for the whole run instead, its CPU read from
//! `/proc/PID/stat` before it is stopped.
//!
//! ```sh
//! cargo bench -p gaffer-web --bench age -- [MINUTES] [JOBS_PER_SEC]
//! GAFFER_BIN=target/release/gaffer cargo bench -p gaffer-web --bench age -- 15 4
//! STATS_WATCH=1 GAFFER_BIN=target/release/gaffer cargo bench -p gaffer-web --bench age -- 3 500
//! ```

mod common;
use common::{cpu_secs, get, pct};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Tick(u64);

impl Job for Tick {
    const NAME: &'static str = "tick";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0)
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let minutes: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(15);
    let rate: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(4);
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let engine = rt.block_on(async {
        Engine::builder()
            .store(gaffer::Store::local_dir(&path))
            .register::<Tick>()
            .start()
            .await
            .expect("the engine starts")
    });
    let stop = Arc::new(AtomicBool::new(false));
    let submitted = Arc::new(AtomicU64::new(0));
    // The producer: `rate` jobs a second, each joined in a task.
    let producer = {
        let (engine, stop, submitted) = (engine.clone(), stop.clone(), submitted.clone());
        rt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1) as u32);
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                let engine = engine.clone();
                tokio::spawn(async move {
                    if let Ok(h) = engine.submit(Tick(i)).await {
                        let _ = h.join().await;
                    }
                });
                i += 1;
                submitted.store(i, Ordering::SeqCst);
            }
        })
    };
    // `gaffer stats --watch`, one child for the run, when asked.
    let watch = std::env::var("STATS_WATCH").is_ok_and(|v| v == "1");
    let stats_watch = std::env::var("GAFFER_BIN")
        .ok()
        .filter(|_| watch)
        .map(|bin| {
            std::process::Command::new(bin)
                .arg("--dir")
                .arg(&path)
                .args(["stats", "--watch", "--every", "1s"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("gaffer stats --watch starts")
        });
    // `gaffer stats` every second, when a binary is given.
    let stats_loop = std::env::var("GAFFER_BIN")
        .ok()
        .filter(|_| !watch)
        .map(|bin| {
            let (stop, path) = (stop.clone(), path.clone());
            std::thread::spawn(move || {
                let mut runs = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let t = Instant::now();
                    let ok = std::process::Command::new(&bin)
                        .arg("--dir")
                        .arg(&path)
                        .arg("stats")
                        .stdout(std::process::Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success());
                    assert!(ok, "gaffer stats failed");
                    runs += 1;
                    std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
                }
                runs
            })
        });
    // Each dashboard's page times of the current minute, [page], and its
    // thread's CPU in centiseconds.
    let windows: [Arc<Mutex<[Vec<Duration>; 2]>>; 2] = Default::default();
    let dash_cpu: [Arc<AtomicU64>; 2] = Default::default();
    let rebases = Arc::new(AtomicU64::new(0));
    let process_cpu_at_start = cpu_secs("self", false);
    let started = Instant::now();
    let mut tabs = Vec::new();
    for d in 0..2 {
        let (stop, path, window, cpu, rebases) = (
            stop.clone(),
            path.clone(),
            windows[d].clone(),
            dash_cpu[d].clone(),
            rebases.clone(),
        );
        tabs.push(std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let named = gaffer::Store::local_dir(&path);
                let (app, state) = if d == 0 {
                    let store = gaffer_ops::Store::open_named(
                        &named,
                        "queue",
                        "jobs",
                        "bulk-items",
                        gaffer_ops::Reading::Following(Duration::from_secs(1)),
                    )
                    .await
                    .expect("opens");
                    let config = gaffer_web::WebConfig::from_stores(vec![(named.name(), store)]);
                    (gaffer_web::router(config), None)
                } else {
                    let config = gaffer_web::WebConfig::open(&named).await.expect("opens");
                    let state = config.reader_state(0).expect("one store");
                    (gaffer_web::router(config), Some(state))
                };
                let pages = ["/", "/jobs"];
                while !stop.load(Ordering::SeqCst) {
                    let next = tokio::time::Instant::now() + Duration::from_millis(1500);
                    for (p, page) in pages.iter().enumerate() {
                        let t = get(&app, page).await;
                        window.lock().unwrap_or_else(|e| e.into_inner())[p].push(t);
                    }
                    cpu.store(
                        (cpu_secs("thread-self", false) * 100.0) as u64,
                        Ordering::SeqCst,
                    );
                    if let Some(s) = &state {
                        rebases.store(s.borrow().rebases, Ordering::SeqCst);
                    }
                    tokio::time::sleep_until(next).await;
                }
            });
        }));
    }
    println!(
        "| min | jobs | unflushed WAL objects | before `/` p50 / p99 | before `/jobs` p50 / p99 | after `/` p50 / p99 | after `/jobs` p50 / p99 | rebases | CPU s: engine, before, after |"
    );
    println!("|---:|---:|---:|---|---|---|---|---:|---|");
    let named = gaffer::Store::local_dir(&path);
    for minute in 1..=minutes {
        std::thread::sleep(
            (started + Duration::from_secs(60 * minute)).saturating_duration_since(Instant::now()),
        );
        let wal = rt.block_on(async {
            let health = gaffer_ops::Store::open_named(
                &named,
                "queue",
                "jobs",
                "bulk-items",
                gaffer_ops::Reading::Flushed,
            )
            .await
            .ok()?;
            let wal = health
                .health()
                .await
                .ok()
                .and_then(|h| h.unflushed_wal_objects);
            health.close().await;
            wal
        });
        let mut cells = Vec::new();
        for w in &windows {
            let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
            for s in w.iter_mut() {
                s.sort();
                cells.push(format!("{:.1} / {:.1}", pct(s, 0.5), pct(s, 0.99)));
                s.clear();
            }
        }
        let cpu = |d: usize| dash_cpu[d].load(Ordering::SeqCst) as f64 / 100.0;
        let engine_cpu = cpu_secs("self", false) - process_cpu_at_start - cpu(0) - cpu(1);
        println!(
            "| {minute} | {} | {} | {} | {} | {} | {} | {} | {engine_cpu:.1}, {:.1}, {:.1} |",
            submitted.load(Ordering::SeqCst),
            wal.map_or("?".to_string(), |w| w.to_string()),
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            rebases.load(Ordering::SeqCst),
            cpu(0),
            cpu(1),
        );
    }
    stop.store(true, Ordering::SeqCst);
    for t in tabs {
        t.join().expect("a dashboard's thread");
    }
    let runs = stats_loop.map(|t| t.join().expect("the stats loop"));
    // The watch's CPU while it runs (it is not waited, so not a child's
    // time yet), then it is stopped.
    let watched = stats_watch.map(|mut child| {
        assert!(
            child.try_wait().expect("the watch's status").is_none(),
            "gaffer stats --watch ended early"
        );
        let cpu = cpu_secs(&child.id().to_string(), false);
        let _ = child.kill();
        let _ = child.wait();
        cpu
    });
    let process = cpu_secs("self", false) - process_cpu_at_start;
    let children = cpu_secs("self", true);
    let dash =
        (dash_cpu[0].load(Ordering::SeqCst) + dash_cpu[1].load(Ordering::SeqCst)) as f64 / 100.0;
    let engine_cpu = process - dash;
    if let Some(runs) = runs {
        println!(
            "`gaffer stats` every second: {runs} runs, {children:.2} CPU s = {:.1} % of the \
             engine's {engine_cpu:.2} CPU s ({:.1} ms per run)",
            children / engine_cpu.max(1e-9) * 100.0,
            children / runs.max(1) as f64 * 1000.0
        );
    }
    if let Some(cpu) = watched {
        println!(
            "`gaffer stats --watch --every 1s`: one child, {cpu:.2} CPU s = {:.1} % of the \
             engine's {engine_cpu:.2} CPU s",
            cpu / engine_cpu.max(1e-9) * 100.0,
        );
    }
    rt.block_on(async {
        producer.abort();
        engine.shutdown().await.expect("shut down");
    });
}
