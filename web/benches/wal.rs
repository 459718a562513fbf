//! Page time on a freshly opened reader against the writer's unflushed
//! WAL, deterministic and fast: an engine on a local directory runs plain
//! jobs one at a time (submit, join: a few WAL objects each, the writer
//! at its default flush, so no memtable flush until SlateDB's 4 096 WAL
//! flushes), and at each target count of unflushed WAL objects (`gaffer
//! health`'s count) it stops submitting, opens a fresh dashboard
//! (`WebConfig::open`) and a fresh replaying `gaffer_ops::Store`, and
//! times each page and each ops call under them `REPS` times, with one
//! job running and two queued meanwhile (the type runs one at a time, and
//! the first of them waits to be let go): so the live listings and the
//! oldest ready job have rows to find among the settled jobs' keys.
//!
//! ```sh
//! cargo bench -p gaffer-web --bench wal -- [TARGETS] [REPS]
//! cargo bench -p gaffer-web --bench wal -- 500,2000,4000 30
//! ```
//!
//! It prints one table row per (target, page or call): p50 and p99 in ms.

mod common;
use common::{get, pct};

use std::time::{Duration, Instant};

use gaffer::{Engine, Job, JobContext};
use gaffer_ops::{Reading, StateFilter};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Tick(u64, bool);

/// What a held job (`Tick(_, true)`) waits for.
static HOLD: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

impl Job for Tick {
    const NAME: &'static str = "tick";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        if self.1 {
            HOLD.acquire().await.expect("open").forget();
        }
        Ok(self.0)
    }
}

async fn unflushed(named: &gaffer::Store) -> u64 {
    let s = gaffer_ops::Store::open_named(named, "queue", "jobs", "bulk-items", Reading::Flushed)
        .await
        .expect("opens");
    let n = s
        .health()
        .await
        .expect("health")
        .unflushed_wal_objects
        .unwrap_or(0);
    s.close().await;
    n
}

/// `reps` timings of `f`, as p50 / p99.
async fn time<F, Fut>(reps: usize, mut f: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f().await;
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f().await;
        ts.push(t.elapsed());
    }
    ts.sort();
    (pct(&ts, 0.5), pct(&ts, 0.99))
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let targets: Vec<u64> = args
        .first()
        .map(|a| a.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![500, 2000, 4000]);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    let dir = match std::env::var("WAL_BENCH_DIR") {
        Ok(d) => tempfile::TempDir::new_in(d),
        Err(_) => tempfile::tempdir(),
    }
    .expect("a temp dir");
    let path = dir.path().to_path_buf();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {
        let named = gaffer::Store::local_dir(&path);
        let engine = Engine::builder()
            .store(named.clone())
            .register_with::<Tick>(gaffer::JobOptions {
                concurrency: Some(1),
                ..Default::default()
            })
            .start()
            .await
            .expect("the engine starts");
        println!("| WAL objects | jobs | what | p50 ms | p99 ms |");
        println!("|---:|---:|---|---:|---:|");
        let mut i = 0u64;
        for target in targets {
            loop {
                let n = unflushed(&named).await;
                if n >= target {
                    break;
                }
                // About 2 WAL objects a job: close in, then step finer.
                let batch = ((target - n) / 3).clamp(1, 200);
                for _ in 0..batch {
                    let h = engine.submit(Tick(i, false)).await.expect("submits");
                    let _ = h.join().await.expect("joins");
                    i += 1;
                }
            }
            // One running (held), two queued behind it.
            let mut live = Vec::new();
            for hold in [true, false, false] {
                live.push(engine.submit(Tick(i, hold)).await.expect("submits"));
                i += 1;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
            let wal = unflushed(&named).await;
            let config = gaffer_web::WebConfig::open(&named).await.expect("opens");
            let app = gaffer_web::router(config);
            let store = gaffer_ops::Store::open_named(
                &named,
                "queue",
                "jobs",
                "bulk-items",
                Reading::Replay,
            )
            .await
            .expect("opens");
            let row = |what: &str, (p50, p99): (f64, f64)| {
                println!("| {wal} | {i} | {what} | {p50:.1} | {p99:.1} |");
            };
            for page in [
                "/",
                "/jobs",
                "/jobs?state=running",
                "/jobs?state=queued",
                "/jobs?state=succeeded",
                "/queues",
            ] {
                row(
                    &format!("`{page}`"),
                    time(reps, || async {
                        get(&app, page).await;
                    })
                    .await,
                );
            }
            let s = &store;
            row(
                "stats",
                time(reps, || async {
                    s.stats(false).await.unwrap();
                })
                .await,
            );
            row(
                "paused",
                time(reps, || async {
                    s.paused().await.unwrap();
                })
                .await,
            );
            row(
                "health",
                time(reps, || async {
                    s.health().await.unwrap();
                })
                .await,
            );
            row(
                "ended_types",
                time(reps, || async {
                    s.ended_types().await.unwrap();
                })
                .await,
            );
            row(
                "count_ended ×3",
                time(reps, || async {
                    for f in [
                        StateFilter::Succeeded,
                        StateFilter::Failed,
                        StateFilter::Cancelled,
                    ] {
                        s.count_ended(None, f, 1000).await.unwrap();
                    }
                })
                .await,
            );
            row(
                "jobs(all, 50)",
                time(reps, || async {
                    s.jobs(None, None, 50, None).await.unwrap();
                })
                .await,
            );
            row(
                "jobs(running, 50)",
                time(reps, || async {
                    s.jobs(Some(StateFilter::Running), None, 50, None)
                        .await
                        .unwrap();
                })
                .await,
            );
            row(
                "scan_ended(hour)",
                time(reps, || async {
                    let from = gaffer_ops::format::now_ms().saturating_sub(3_600_000);
                    for seg in s.ended_types().await.unwrap() {
                        s.scan_ended(&seg, "succeeded", from, None, 1000)
                            .await
                            .unwrap();
                    }
                })
                .await,
            );
            let queue = s
                .view()
                .list_queues()
                .await
                .unwrap()
                .into_iter()
                .find(|q| q.ends_with("tick"))
                .expect("the tick queue");
            row(
                "list_queues",
                time(reps, || async {
                    s.view().list_queues().await.unwrap();
                })
                .await,
            );
            row(
                "view.stats(tick)",
                time(reps, || async {
                    s.view().stats(&queue).await.unwrap();
                })
                .await,
            );
            for status in [taquba::JobStatus::Claimed, taquba::JobStatus::Pending] {
                row(
                    &format!("list_jobs(tick, {status:?}, 50)"),
                    time(reps, || async {
                        s.view().list_jobs(&queue, status, None, 50).await.unwrap();
                    })
                    .await,
                );
            }
            store.close().await;
            HOLD.add_permits(1);
            for h in live {
                let _ = h.join().await.expect("joins");
            }
        }
        engine.shutdown().await.expect("shut down");
    });
}
