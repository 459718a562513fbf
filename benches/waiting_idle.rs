//! What jobs waiting for a signal cost while they wait: object-store
//! requests per second of an idle engine with N jobs waiting
//! (`ctx.wait_signal`, a week's timeout) against the same engine with
//! none, on a local-disk store wrapped in the counting store of the
//! `testing` feature, at the object-store default flush (100 ms). Then
//! every waiting job is signalled and joined, to show they all run on.
//!
//! ```sh
//! cargo bench --bench waiting_idle -- 10000          # N, then idle seconds (30)
//! cargo bench --bench waiting_idle -- 10000 60
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gaffer::testing::{FaultControl, FaultyStore, Op};
use gaffer::{Engine, EngineEvent, Job, JobContext};
use serde::{Deserialize, Serialize};
use taquba::object_store::local::LocalFileSystem;

#[derive(Serialize, Deserialize)]
struct Approve(u64);

impl Job for Approve {
    const NAME: &'static str = "approve";
    type Output = u64;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        let by: u64 = ctx
            .wait_signal("approval", Duration::from_secs(7 * 24 * 3600))
            .await?;
        Ok(self.0 + by)
    }
}

/// Requests of every kind between two counts.
fn requests(control: &FaultControl, from: &gaffer::testing::FaultStats) -> (u64, u64) {
    let now = control.stats();
    let all = Op::ALL.iter().map(|&op| now.of(op).0 - from.of(op).0).sum();
    let puts = now.of(Op::Put).0 - from.of(Op::Put).0;
    (all, puts)
}

async fn idle_for(control: &FaultControl, secs: u64) -> (u64, u64) {
    let from = control.stats();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    requests(control, &from)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let idle_secs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    let dir = tempfile::tempdir().expect("a temp dir");
    let local = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).expect("a local store"));
    let (store, control) = FaultyStore::wrap(local);
    let engine = Engine::builder()
        .store(gaffer::Store::object_store(store))
        .register::<Approve>()
        .start()
        .await
        .expect("the engine starts");
    // Let the start settle, then the baseline: nothing waiting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (base, base_puts) = idle_for(&control, idle_secs).await;

    let mut events = engine.subscribe();
    let t0 = Instant::now();
    // Submitted 256 at a time: each submit waits for its commit's flush.
    let ids: Vec<String> = futures_util::stream::iter(0..n)
        .map(|i| {
            let engine = &engine;
            async move {
                engine
                    .submit(Approve(i))
                    .await
                    .expect("submitted")
                    .id()
                    .to_string()
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    let mut waiting = 0;
    while waiting < n {
        match events.recv().await {
            Ok(EngineEvent::JobWaiting { .. }) => waiting += 1,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                // Count them in the store instead.
                let mut w = 0;
                for id in &ids {
                    if engine.status(id).await.ok() == Some(gaffer::job::JobState::Waiting) {
                        w += 1;
                    }
                }
                waiting = w;
            }
            Err(e) => panic!("the event stream ended: {e}"),
        }
    }
    let to_wait = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (with, with_puts) = idle_for(&control, idle_secs).await;

    let t1 = Instant::now();
    futures_util::stream::iter(ids.iter())
        .for_each_concurrent(256, |id| {
            let engine = &engine;
            async move {
                engine
                    .signal(id, "approval", &1u64)
                    .await
                    .unwrap_or_else(|e| panic!("signal {id}: {e}"));
                engine
                    .join::<Approve>(id)
                    .await
                    .expect("joined")
                    .expect("it ran on");
            }
        })
        .await;
    let to_end = t1.elapsed();
    println!(
        "idle {idle_secs} s, nothing waiting: {base} requests ({base_puts} put), {:.2} per s",
        base as f64 / idle_secs as f64
    );
    println!(
        "idle {idle_secs} s, {n} jobs waiting: {with} requests ({with_puts} put), {:.2} per s",
        with as f64 / idle_secs as f64
    );
    println!(
        "{n} jobs to waiting: {:.1} s; signalled and joined: {:.1} s ({:.0} jobs/s)",
        to_wait.as_secs_f64(),
        to_end.as_secs_f64(),
        n as f64 / to_end.as_secs_f64()
    );
    engine.shutdown().await.expect("shut down");
}
