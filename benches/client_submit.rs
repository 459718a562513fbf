//! Submitting from another process: N jobs sent by a `Client` through the
//! store's inbox (64 submissions in flight), then every handle joined, next
//! to the same N submitted in-process, on one local-disk store (1 ms flush,
//! 20 ms intake poll). Prints jobs/s of each and the ratio, and the latency
//! of one client submission (its `submit().await`: the inbox writes) and of
//! one round trip (submit → join).
//!
//! ```sh
//! cargo bench --bench client_submit -- 2000
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use gaffer::{Client, Engine, Job, JobContext};
use serde::{Deserialize, Serialize};

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

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(2_000);
    let dir = tempfile::tempdir().expect("a temp dir");
    let engine = Engine::builder()
        .local_dir(dir.path())
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Add>()
        .start()
        .await
        .expect("the engine starts");
    let client = Arc::new(
        Client::builder()
            .local_dir(dir.path())
            .poll_interval(Duration::from_millis(20))
            .open()
            .await
            .expect("the client opens"),
    );

    // In-process: 64 submissions in flight, then every join.
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        if set.len() >= 64 {
            set.join_next().await.expect("a task").expect("joined");
        }
        let engine = engine.clone();
        set.spawn(async move {
            let h = engine.submit(Add(i)).await.expect("submitted");
            assert_eq!(h.join().await.expect("joined").expect("ran"), i + 1);
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("joined");
    }
    let local = t0.elapsed();

    // Through the client: every submission first (64 in flight), then joins.
    let t0 = Instant::now();
    let mut sends = tokio::task::JoinSet::new();
    let mut handles = Vec::new();
    let mut send_lat = Vec::new();
    for i in 0..n {
        if sends.len() >= 64 {
            let (h, d) = sends.join_next().await.expect("a task").expect("sent");
            handles.push(h);
            send_lat.push(d);
        }
        let client = client.clone();
        sends.spawn(async move {
            let t = Instant::now();
            let h = client.submit(Add(i)).await.expect("sent");
            (h, t.elapsed())
        });
    }
    while let Some(r) = sends.join_next().await {
        let (h, d) = r.expect("sent");
        handles.push(h);
        send_lat.push(d);
    }
    let sent = t0.elapsed();
    for h in &handles {
        h.join().await.expect("joined").expect("ran");
    }
    let remote = t0.elapsed();

    // One at a time: the round trip of a single client job.
    let mut trips = Vec::new();
    for i in 0..20u64 {
        let t = Instant::now();
        let h = client.submit(Add(n + i)).await.expect("sent");
        h.join().await.expect("joined").expect("ran");
        trips.push(t.elapsed());
    }
    send_lat.sort();
    trips.sort();
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!("{n} jobs, local disk, 1 ms flush, 20 ms intake poll");
    println!(
        "in-process submit+join: {:>8.0} jobs/s ({:.2} s)",
        rate(local),
        local.as_secs_f64()
    );
    println!(
        "client submit+join:     {:>8.0} jobs/s ({:.2} s; all sent after {:.2} s)  = {:.2}x in-process",
        rate(remote),
        remote.as_secs_f64(),
        sent.as_secs_f64(),
        local.as_secs_f64() / remote.as_secs_f64()
    );
    println!(
        "client submit().await (64 in flight): p50 {:?} p99 {:?}",
        pct(&send_lat, 0.5),
        pct(&send_lat, 0.99)
    );
    println!(
        "one client job, submit to joined (alone): p50 {:?} max {:?}",
        pct(&trips, 0.5),
        trips[trips.len() - 1]
    );
    engine.shutdown().await.expect("shut down");
}
