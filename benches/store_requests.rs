//! What durable work costs in object-store requests: N jobs (submit, run,
//! ack with their outcome record) on a local-disk store wrapped in the
//! counting store of the `testing` feature, with the flush interval given
//! (100 ms unless told: the default on an object store, where these
//! requests are billed). Prints the requests by kind, per
//! job and per second of the run, then over 10 idle seconds: on S3 each is
//! a billed request.
//!
//! ```sh
//! cargo bench --bench store_requests -- 2000          # 2 000 jobs, 100 ms flush (the object-store default)
//! cargo bench --bench store_requests -- 2000 10       # 10 ms flush
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use gaffer::testing::{FaultyStore, Op};
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};
use taquba::object_store::local::LocalFileSystem;

#[derive(Serialize, Deserialize)]
struct Add(u64);

impl Job for Add {
    const NAME: &'static str = "add";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 + 1)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(2_000);
    let flush_ms: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let dir = tempfile::tempdir().expect("a temp dir");
    let local = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).expect("a local store"));
    let (store, control) = FaultyStore::wrap(local);
    let engine = Engine::builder()
        .store(gaffer::Store::object_store(store))
        .flush_interval(Duration::from_millis(flush_ms))
        .register::<Add>()
        .start()
        .await
        .expect("the engine starts");
    let started = control.stats();
    let t0 = Instant::now();
    // 64 submitters at a time, each joining its job.
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        if set.len() >= 64 {
            set.join_next().await.expect("a task").expect("joined");
        }
        let engine = engine.clone();
        set.spawn(async move {
            let h = engine.submit(Add(i)).await.expect("submitted");
            assert_eq!(h.join().await.expect("joined").expect("succeeded"), i + 1);
        });
    }
    while let Some(done) = set.join_next().await {
        done.expect("joined");
    }
    let wall = t0.elapsed().as_secs_f64();
    let ended = control.stats();
    // Then 10 s with nothing to do: what an idle engine costs.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = control.stats();
    engine.shutdown().await.expect("shut down");
    println!(
        "{n} jobs, flush {flush_ms} ms, {wall:.2} s, {:.0} jobs/s",
        n as f64 / wall
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "request", "count", "per job", "per s"
    );
    let mut total = 0;
    for op in Op::ALL {
        let count = ended.of(op).0 - started.of(op).0;
        total += count;
        println!(
            "{:<10} {:>10} {:>10.3} {:>10.1}",
            op.name(),
            count,
            count as f64 / n as f64,
            count as f64 / wall
        );
    }
    println!(
        "{:<10} {:>10} {:>10.3} {:>10.1}",
        "all",
        total,
        total as f64 / n as f64,
        total as f64 / wall
    );
    let idle_ops: u64 = Op::ALL
        .iter()
        .map(|&op| idle.of(op).0 - ended.of(op).0)
        .sum();
    let idle_puts = idle.of(Op::Put).0 - ended.of(Op::Put).0;
    let by_kind: Vec<String> = Op::ALL
        .iter()
        .map(|&op| (op, idle.of(op).0 - ended.of(op).0))
        .filter(|&(_, count)| count > 0)
        .map(|(op, count)| format!("{count} {}", op.name()))
        .collect();
    println!(
        "idle 10 s: {idle_ops} requests ({idle_puts} put), {:.1} per s: {}",
        idle_ops as f64 / 10.0,
        by_kind.join(", ")
    );
}
