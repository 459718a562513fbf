//! gaffer's metrics on a Prometheus scrape endpoint.
//!
//! Run: `cargo run --example metrics` (then open
//! <http://127.0.0.1:9464/metrics>; Ctrl-C ends it). Options:
//! `-- --port N` (default 9464), `--jobs N` (default 20: every fifth fails
//! for good, every third fails once then succeeds).
//!
//! In your service: build gaffer with `features = ["metrics"]`, install a
//! recorder once at start (here `metrics-exporter-prometheus`, serving its
//! own HTTP listener), then start the engine. The metrics are listed in
//! docs/guide/telemetry.md; taquba's queue and storage metrics come with them.

use std::net::SocketAddr;

use gaffer::{Engine, Job, JobContext, job::FailureKind};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Thumbnail {
    n: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ThumbnailError(&'static str);

impl Job for Thumbnail {
    const NAME: &'static str = "thumbnail";
    type Output = u32;
    type Error = ThumbnailError;

    async fn run(&self, ctx: JobContext) -> Result<u32, ThumbnailError> {
        if self.n.is_multiple_of(5) {
            return Err(ThumbnailError("not an image"));
        }
        if self.n.is_multiple_of(3) && ctx.attempt() == 1 {
            return Err(ThumbnailError("store busy"));
        }
        Ok(self.n * 2)
    }

    fn classify(&self, e: &ThumbnailError) -> FailureKind {
        if e.0 == "not an image" {
            FailureKind::Permanent
        } else {
            FailureKind::Transient
        }
    }
}

/// The value after `--name` on the command line, or `default`.
fn arg(name: &str, default: u32) -> Result<u32, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} takes a number")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port = u16::try_from(arg("--port", 9464)?)?;
    let jobs = arg("--jobs", 20)?;

    // The recorder first: metrics recorded before it is installed are lost.
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;

    let dir = std::env::temp_dir().join(format!("gaffer-metrics-{}", std::process::id()));
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(&dir))
        .register::<Thumbnail>()
        .start()
        .await?;
    let mut handles = Vec::new();
    for n in 1..=jobs {
        handles.push(engine.submit(Thumbnail { n }).await?);
    }
    let (mut ok, mut failed) = (0, 0);
    for h in handles {
        match h.join().await? {
            Ok(_) => ok += 1,
            Err(_) => failed += 1,
        }
    }
    println!("{ok} jobs succeeded, {failed} failed");
    println!("ready: http://{addr}/metrics");

    tokio::signal::ctrl_c().await?;
    engine.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
