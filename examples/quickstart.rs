//! gaffer end to end on the embedded default: a local-disk store.
//!
//! Run: `cargo run --example quickstart`
//!
//! Registers two job types, submits plain, keyed, failing and child-spawning
//! jobs, awaits them, shows that a duplicate of a finished keyed job is
//! answered from its record, then shuts down, reopens the same directory and
//! shows the records are still there.

use gaffer::{Engine, Job, JobContext, SubmitOptions, job::FailureKind};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Resize {
    image: String,
    width: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ResizeError(String);

impl Job for Resize {
    const NAME: &'static str = "resize";
    type Output = String;
    type Error = ResizeError;

    async fn run(&self, ctx: JobContext) -> Result<String, ResizeError> {
        if self.width == 0 {
            return Err(ResizeError("width must be positive".into()));
        }
        // An expensive step, kept across retries.
        let thumb: String = ctx
            .memo()
            .memoized("thumb", || async {
                Ok::<_, gaffer::Error>(format!("{}@{}px", self.image, self.width))
            })
            .await
            .map_err(|e| ResizeError(e.to_string()))?;
        Ok(thumb)
    }

    fn classify(&self, _: &ResizeError) -> FailureKind {
        FailureKind::Permanent
    }

    fn idempotency_key(&self) -> Option<String> {
        Some(format!("resize:{}:{}", self.image, self.width))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Gallery {
    images: Vec<String>,
}

impl Job for Gallery {
    const NAME: &'static str = "gallery";
    type Output = usize;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<usize, gaffer::Error> {
        for image in &self.images {
            ctx.submit(Resize {
                image: image.clone(),
                width: 128,
            })
            .await?;
        }
        Ok(self.images.len())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("gaffer-quickstart-{}", std::process::id()));
    println!("store: {}", dir.display());
    let start = |dir: std::path::PathBuf| {
        Engine::builder()
            .store(gaffer::Store::local_dir(dir))
            .register::<Resize>()
            .register::<Gallery>()
            .start()
    };

    let engine = start(dir.clone()).await?;
    let a = engine
        .submit(Resize {
            image: "cat.png".into(),
            width: 64,
        })
        .await?;
    let b = engine
        .submit(Resize {
            image: "dog.png".into(),
            width: 0,
        })
        .await?;
    let g = engine
        .submit_with(
            Gallery {
                images: vec!["x.png".into(), "y.png".into()],
            },
            SubmitOptions {
                priority: Some(taquba::PRIORITY_HIGH),
                ..Default::default()
            },
        )
        .await?;
    println!("resize cat  -> {:?}", a.clone().await);
    println!("resize dog  -> {:?}", b.join().await?);
    println!("gallery     -> {:?}", g.clone().await);

    let again = engine
        .submit(Resize {
            image: "cat.png".into(),
            width: 64,
        })
        .await?;
    println!(
        "duplicate   -> same id: {}, newly submitted: {}, result {:?}",
        again.id() == a.id(),
        again.newly_submitted(),
        again.join().await?
    );
    let report = engine.shutdown().await?;
    println!("shutdown    -> queue closed: {}", report.queue_closed);

    let engine = start(dir.clone()).await?;
    let after = engine.handle::<Resize>(a.id())?;
    println!(
        "after reopen: status {:?}, result {:?}",
        after.status().await?,
        after.outcome().await?
    );
    engine.shutdown().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
