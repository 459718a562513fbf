//! Submitting from other processes' clients: N jobs sent through the
//! store's inbox by P clients (each its own `Client`, as a separate process
//! would have; 64 submissions in flight in all), then every handle joined;
//! next to the same N submitted in-process. Also the round trip of one
//! client job alone (submit → its outcome visible to the client).
//!
//! The engine: 1 ms flush on a local directory, the default 100 ms on a
//! URL; 20 ms intake poll; clients poll every 20 ms.
//!
//! ```sh
//! cargo bench --bench client_submit -- 2000                 # local disk, 1 and 4 clients
//! AWS_ENDPOINT=http://127.0.0.1:PORT AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
//!   AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x \
//!   cargo bench --features aws --bench client_submit -- 500 --url s3://bucket/bench
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use gaffer::{Engine, EngineBuilder, Job, JobContext, remote::Client, remote::ClientBuilder};
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args.iter().find_map(|a| a.parse().ok()).unwrap_or(2_000);
    let url = args
        .iter()
        .position(|a| a == "--url")
        .and_then(|i| args.get(i + 1).cloned());
    let dir = tempfile::tempdir().expect("a temp dir");
    let (engine_b, client_b): (EngineBuilder, Box<dyn Fn() -> ClientBuilder>) = match &url {
        Some(url) => {
            let u = url.clone();
            (
                Engine::builder().store(gaffer::Store::url(url.clone())),
                Box::new(move || Client::builder().store(gaffer::Store::url(u.clone()))),
            )
        }
        None => {
            let d = dir.path().to_path_buf();
            (
                Engine::builder()
                    .store(gaffer::Store::local_dir(dir.path()))
                    .flush_interval(Duration::from_millis(1)),
                Box::new(move || Client::builder().store(gaffer::Store::local_dir(&d))),
            )
        }
    };
    let engine = engine_b
        .intake_poll(Duration::from_millis(20))
        .register::<Add>()
        .start()
        .await
        .expect("the engine starts");
    let store = url.as_deref().unwrap_or("local disk, 1 ms flush");
    println!("{n} jobs on {store}; 20 ms intake poll, clients poll every 20 ms");

    // In-process: 64 submissions in flight, each joined.
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
    println!(
        "in-process            {:>7.0} jobs/s",
        n as f64 / local.as_secs_f64()
    );

    for producers in [1u64, 4] {
        let mut clients = Vec::new();
        for _ in 0..producers {
            clients.push(Arc::new(
                client_b()
                    .poll_interval(Duration::from_millis(20))
                    .open()
                    .await
                    .expect("the client opens"),
            ));
        }
        let t0 = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (p, client) in clients.iter().enumerate() {
            let client = client.clone();
            let share = n / producers;
            let in_flight = (64 / producers) as usize;
            tasks.spawn(async move {
                let mut sends = tokio::task::JoinSet::new();
                let mut handles = Vec::new();
                let mut lat = Vec::new();
                for i in 0..share {
                    if sends.len() >= in_flight {
                        let (h, d) = sends.join_next().await.expect("a task").expect("sent");
                        handles.push(h);
                        lat.push(d);
                    }
                    let client = client.clone();
                    let x = p as u64 * 1_000_000 + i;
                    sends.spawn(async move {
                        let t = Instant::now();
                        let h = client.submit(Add(x)).await.expect("sent");
                        (h, t.elapsed())
                    });
                }
                while let Some(r) = sends.join_next().await {
                    let (h, d) = r.expect("sent");
                    handles.push(h);
                    lat.push(d);
                }
                for h in &handles {
                    h.join().await.expect("joined").expect("ran");
                }
                lat
            });
        }
        let mut lat = Vec::new();
        while let Some(r) = tasks.join_next().await {
            lat.extend(r.expect("a producer"));
        }
        let took = t0.elapsed();
        lat.sort();
        println!(
            "{producers} client(s)           {:>7.0} jobs/s = {:.2}x in-process; submit().await p50 {:.1} ms p99 {:.1} ms",
            (n / producers * producers) as f64 / took.as_secs_f64(),
            local.as_secs_f64() / took.as_secs_f64() * (n / producers * producers) as f64
                / n as f64,
            ms(pct(&lat, 0.5)),
            ms(pct(&lat, 0.99)),
        );
    }

    // One at a time: the round trip of a single client job.
    let client = client_b()
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .expect("the client opens");
    let mut trips = Vec::new();
    for i in 0..20u64 {
        let t = Instant::now();
        let h = client.submit(Add(i)).await.expect("sent");
        h.join().await.expect("joined").expect("ran");
        trips.push(t.elapsed());
    }
    trips.sort();
    println!(
        "one job alone, submit to outcome seen by the client: p50 {:.1} ms, max {:.1} ms",
        ms(pct(&trips, 0.5)),
        ms(trips[trips.len() - 1])
    );
    engine.shutdown().await.expect("shut down");
}
