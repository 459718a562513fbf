//! A live engine and its dashboard, to look around in a browser.
//!
//! ```sh
//! cargo run --example demo              # a store in the temp dir (printed)
//! cargo run --example demo -- DIR       # or on DIR; run it again to resume
//! ```
//!
//! Then open the URL it prints. It keeps an engine running on the
//! directory with a few job types that do work (some fail: a transient
//! failure that a retry fixes, a permanent one to retry by hand from the
//! Failed page), a batch with a few failed items, two workflows (one
//! whose step fails), a periodic job, and an order waiting for the signal
//! `approval` (send it from its page, or `gaffer signal`). New work
//! arrives every second so the charts move. The dashboard is served beside
//! it, as a service would nest it (`gaffer_web::router`). Ctrl-C stops
//! both.
//!
//! `ADDR` sets the address (default `127.0.0.1:8080`; a free port when
//! that one is taken); `GAFFER_DEMO_SECONDS=N` stops it after N seconds
//! (what `tests/demo_example.rs` does).

use std::time::Duration;

use gaffer::bulk::ItemError;
use gaffer::job::FailureKind;
use gaffer::periodic::Schedule;
use gaffer::workflow::Workflow;
use gaffer::{BulkCtx, Engine, Job, JobContext, JobOptions, Pipeline, Store};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Failure(String);

/// Sends an email: every fifth address's server is busy at the first
/// attempt (a transient failure, retried).
#[derive(Debug, Serialize, Deserialize)]
struct SendEmail {
    to: String,
    n: u64,
}

impl Job for SendEmail {
    const NAME: &'static str = "send-email";
    type Output = String;
    type Error = Failure;

    async fn run(&self, ctx: JobContext) -> Result<String, Failure> {
        tokio::time::sleep(Duration::from_millis(150)).await;
        if self.n.is_multiple_of(5) && ctx.attempt() == 1 {
            return Err(Failure(format!("{}: mail server busy, try later", self.to)));
        }
        Ok(format!("sent to {}", self.to))
    }
}

/// Charges a card, once per order (keyed): a charge over $500 is
/// declined for good.
#[derive(Debug, Serialize, Deserialize)]
struct ChargeCard {
    order: u64,
    cents: u64,
}

impl Job for ChargeCard {
    const NAME: &'static str = "charge-card";
    type Output = String;
    type Error = Failure;

    async fn run(&self, _ctx: JobContext) -> Result<String, Failure> {
        tokio::time::sleep(Duration::from_millis(80)).await;
        if self.cents > 50_000 {
            return Err(Failure(format!(
                "order {}: card declined (limit exceeded)",
                self.order
            )));
        }
        Ok(format!(
            "charged {}.{:02}",
            self.cents / 100,
            self.cents % 100
        ))
    }

    fn classify(&self, _: &Failure) -> FailureKind {
        FailureKind::Permanent
    }

    fn idempotency_key(&self) -> Option<String> {
        Some(format!("charge:{}", self.order))
    }
}

/// Waits for someone to approve the order (the signal `approval`, a day at
/// most).
#[derive(Debug, Serialize, Deserialize)]
struct ApproveOrder {
    order: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Approval {
    by: String,
}

impl Job for ApproveOrder {
    const NAME: &'static str = "approve-order";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        let approval: Approval = ctx
            .wait_signal("approval", Duration::from_secs(24 * 3600))
            .await?;
        Ok(format!("order {} approved by {}", self.order, approval.by))
    }
}

/// Fetches a region's sales (a workflow step); the region `mars` is
/// unreachable.
#[derive(Debug, Serialize, Deserialize)]
struct Fetch {
    region: String,
}

impl Job for Fetch {
    const NAME: &'static str = "fetch-sales";
    type Output = u64;
    type Error = Failure;

    async fn run(&self, _ctx: JobContext) -> Result<u64, Failure> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        if self.region == "mars" {
            return Err(Failure("mars: no route to the region's database".into()));
        }
        Ok(self.region.len() as u64 * 1000)
    }

    fn classify(&self, _: &Failure) -> FailureKind {
        FailureKind::Permanent
    }
}

/// Adds up the regions it needs (a fan-in step).
#[derive(Debug, Serialize, Deserialize)]
struct Merge {
    regions: Vec<String>,
}

impl Job for Merge {
    const NAME: &'static str = "merge-sales";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        let mut total = 0;
        for r in &self.regions {
            total += ctx.dep::<Fetch>(&format!("fetch-{r}")).await?;
        }
        Ok(total)
    }
}

/// Says how the report went (a cleanup step: it runs however `merge` ends).
#[derive(Debug, Serialize, Deserialize)]
struct Notify;

impl Job for Notify {
    const NAME: &'static str = "notify";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        Ok(match ctx.dep::<Merge>("merge").await {
            Ok(total) => format!("report ready: {total}"),
            Err(e) => format!("report failed: {e}"),
        })
    }
}

/// The periodic job's: a tick's work.
#[derive(Debug, Serialize, Deserialize)]
struct Cleanup {
    at_ms: u64,
}

impl Job for Cleanup {
    const NAME: &'static str = "nightly-cleanup";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        Ok(self.at_ms)
    }
}

/// Makes a thumbnail of an image (a batch item): a few images are corrupt.
struct Thumbnail;

impl Pipeline for Thumbnail {
    const NAME: &'static str = "thumbnail";
    type Input = String;
    type Output = String;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<String>) -> Result<String, ItemError> {
        tokio::time::sleep(Duration::from_millis(100)).await;
        ctx.record_cost("usd", 0.0004);
        if ctx.input.ends_with("7.png") {
            return Err(ItemError::permanent(format!(
                "{}: not a PNG (bad header)",
                ctx.input
            )));
        }
        Ok(format!("thumbs/{}", ctx.input))
    }
}

/// A report's workflow over `regions`, keyed by `name`.
fn report(name: &str, regions: &[&str]) -> Workflow {
    let mut flow = Workflow::new(name).key(format!("report:{name}"));
    for r in regions {
        flow = flow.step(
            &format!("fetch-{r}"),
            Fetch {
                region: r.to_string(),
            },
        );
    }
    let deps: Vec<String> = regions.iter().map(|r| format!("fetch-{r}")).collect();
    flow.step_after(
        "merge",
        Merge {
            regions: regions.iter().map(|r| r.to_string()).collect(),
        },
        deps,
    )
    .cleanup_after("notify", Notify, ["merge"])
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join("gaffer-demo"),
    };

    let engine = Engine::builder()
        .store(Store::local_dir(&dir))
        .register::<SendEmail>()
        .register::<ChargeCard>()
        .register::<ApproveOrder>()
        .register::<Fetch>()
        .register::<Merge>()
        .register::<Notify>()
        .register::<Cleanup>()
        .pipeline_with(
            Thumbnail,
            JobOptions {
                concurrency: Some(2),
                ..Default::default()
            },
        )
        .periodic(
            "cleanup-every-30s",
            Schedule::every(Duration::from_secs(30)),
            |tick| Cleanup { at_ms: tick.at_ms },
        )
        .start()
        .await?;

    // Work that waits, fails or takes a while (keyed or fixed ids: a run
    // on the same directory again finds them instead of adding more).
    engine
        .submit(ChargeCard {
            order: 1001,
            cents: 129_900,
        })
        .await?;
    engine
        .submit(ChargeCard {
            order: 1002,
            cents: 4_250,
        })
        .await?;
    let approval = engine.submit(ApproveOrder { order: 1003 }).await?;
    engine
        .submit_workflow(report("sales-earth", &["eu", "us", "asia"]))
        .await?;
    engine
        .submit_workflow(report("sales-solar", &["eu", "mars"]))
        .await?;
    let batch = engine.batch::<Thumbnail>("thumbnails-2026-12")?;
    let batch_run = tokio::spawn(async move {
        batch
            .run((0..2000).map(|i| format!("photo-{i:04}.png")))
            .await
    });

    // The dashboard beside it, reading through the engine's own view (no
    // reader of its own).
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:8080".into());
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(l) => l,
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    };
    let local = listener.local_addr()?;
    let dashboard = gaffer_web::router(
        gaffer_web::WebConfig::live(&engine.live_store()?)
            .await?
            .listening_on(local),
    );
    let server = tokio::spawn(async move { axum::serve(listener, dashboard).await });
    println!("store: {}", dir.display());
    println!("dashboard: http://{local}/");
    println!(
        "an order waits for its approval: http://{local}/jobs/{} (or: cargo run -p gaffer-cli -- --dir {} signal {} approval '{{\"by\":\"you\"}}')",
        approval.id(),
        dir.display(),
        approval.id()
    );
    println!("Ctrl-C stops it.");

    // New work every second, so the charts move.
    let feeder = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut n: u64 = 0;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                n += 1;
                let to = format!("user{n}@example.com");
                if engine.submit(SendEmail { to, n }).await.is_err() {
                    return;
                }
            }
        })
    };

    let stop_after = std::env::var("GAFFER_DEMO_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    match stop_after {
        Some(secs) => {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(secs)) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        None => {
            tokio::signal::ctrl_c().await?;
        }
    }
    println!("stopping");
    feeder.abort();
    server.abort();
    engine.shutdown().await?;
    // The batch's run ends with the engine (its items resume at the next run).
    let _ = batch_run.await;
    Ok(())
}
