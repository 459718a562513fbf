//! The gaffer child: gaffer (`path = "../.."`) on the chosen store, its
//! phases run by the shared plan.
//!
//! The engine's API changed with issue #27; with the feature `pre-27-api`
//! this child builds against the engine before it (commit `ca81425`: the
//! builder's own store setters, `pipeline_with_concurrency`,
//! `gaffer::ItemError`, `gaffer::JoinError`) for a paired before/after run
//! (benches/README.md, "Structure II (#27)"). Everything else is the same
//! source.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ChildArgs;
use crate::child::{BoxErr, s3_url, temp_dir};
use crate::kinds::{FlushKind, Group, StoreKind};
use crate::meter::RUNS;
use crate::plan::{self, BulkBatch, JobsEngine, Keyed, Plain, Tally};

/// The engine API the child is built against: today's.
#[cfg(not(feature = "pre-27-api"))]
mod api {
    use std::sync::Arc;

    use gaffer::EngineBuilder;
    use gaffer::taquba::object_store::ObjectStore;

    pub use gaffer::bulk::ItemError;
    pub use gaffer::job::JoinError;

    pub fn local_dir(b: EngineBuilder, dir: &std::path::Path) -> EngineBuilder {
        b.store(gaffer::Store::local_dir(dir))
    }
    pub fn object_store(b: EngineBuilder, store: Arc<dyn ObjectStore>) -> EngineBuilder {
        b.store(gaffer::Store::object_store(store))
    }
    pub fn store_url(b: EngineBuilder, url: String) -> EngineBuilder {
        b.store(gaffer::Store::url(url))
    }
    pub fn pipeline<P: gaffer::Pipeline>(b: EngineBuilder, p: P, conc: usize) -> EngineBuilder {
        let options = gaffer::JobOptions {
            concurrency: Some(conc),
            ..Default::default()
        };
        b.pipeline_with(p, options)
    }
}

/// The engine API the child is built against: the one before issue #27
/// (commit `ca81425`).
#[cfg(feature = "pre-27-api")]
mod api {
    use std::sync::Arc;

    use gaffer::EngineBuilder;
    use gaffer::taquba::object_store::ObjectStore;

    pub use gaffer::{ItemError, JoinError};

    pub fn local_dir(b: EngineBuilder, dir: &std::path::Path) -> EngineBuilder {
        b.local_dir(dir)
    }
    pub fn object_store(b: EngineBuilder, store: Arc<dyn ObjectStore>) -> EngineBuilder {
        b.object_store(store)
    }
    pub fn store_url(b: EngineBuilder, url: String) -> EngineBuilder {
        b.store_url(url)
    }
    pub fn pipeline<P: gaffer::Pipeline>(b: EngineBuilder, p: P, conc: usize) -> EngineBuilder {
        b.pipeline_with_concurrency(p, conc)
    }
}

pub async fn run(a: &ChildArgs) -> Result<(), BoxErr> {
    use gaffer::taquba::object_store::memory::InMemory;
    install_telemetry(a)?;
    let dir = temp_dir(a)?;
    let mut b = gaffer::Engine::builder();
    b = match a.store {
        StoreKind::Local => api::local_dir(b, dir.path()),
        StoreKind::Memory => api::object_store(b, Arc::new(InMemory::new())),
        StoreKind::S3 => api::store_url(b, s3_url(&dir)?),
        StoreKind::LocalFsync => {
            use gaffer::taquba::object_store::local::LocalFileSystem;
            let fs = LocalFileSystem::new_with_prefix(dir.path())?.with_fsync(true);
            // A given store defaults to the object-store flush (100 ms): set
            // the local directory's default (2 ms) unless told.
            if a.flush == FlushKind::Default {
                b = b.flush_interval(Duration::from_millis(2));
            }
            api::object_store(b, Arc::new(fs))
        }
    };
    if let Some(f) = a.flush.interval() {
        b = b.flush_interval(f);
    }
    // SBS_RETENTION_MS=d: outcome records removed d ms after each job ends
    // (#13 §4: what retention does to the cost as the store grows).
    if let Ok(ms) = std::env::var("SBS_RETENTION_MS") {
        let ms: u64 = ms
            .parse()
            .map_err(|_| format!("SBS_RETENTION_MS={ms}: not a number of milliseconds"))?;
        b = b.retention(Duration::from_millis(ms));
    }
    match a.group {
        Group::JobsKeyed | Group::JobsPlain => {
            let engine = b
                .max_concurrent_jobs(a.job_workers)
                .register::<Keyed>()
                .register::<Plain>()
                .start()
                .await?;
            // SBS_FIRST_PHASE_ONLY=1: jobs_keyed without its jobs_resubmit
            // (to profile the first phase alone).
            let phases = match std::env::var_os("SBS_FIRST_PHASE_ONLY") {
                Some(_) => &a.group.phases()[..1],
                None => a.group.phases(),
            };
            plan::jobs_phases(a, phases, &Jobs(&engine)).await?;
            plan::shutdown(async {
                engine.shutdown().await?;
                Ok(())
            })
            .await?;
        }
        Group::Bulk => {
            let engine = api::pipeline(b, GPipe, a.conc).start().await?;
            let batch = engine.batch::<GPipe>("bench")?;
            plan::bulk_phases(a, a.group.phases(), &batch).await?;
            plan::shutdown(async {
                engine.shutdown().await?;
                Ok(())
            })
            .await?;
        }
        Group::Raw => unreachable!("raw runs on the raw engine"),
    }
    drop(dir);
    Ok(())
}

/// gaffer's jobs, as the plan submits them.
struct Jobs<'a>(&'a gaffer::Engine);

impl JobsEngine for Jobs<'_> {
    type SubmitError = gaffer::Error;
    type JoinError = api::JoinError;
    type KeyedHandle = gaffer::JobHandle<Keyed>;
    type PlainHandle = gaffer::JobHandle<Plain>;

    async fn submit_keyed(&self, job: Keyed) -> Result<(Self::KeyedHandle, bool), gaffer::Error> {
        self.0.submit(job).await.map(|h| {
            let new = h.newly_submitted();
            (h, new)
        })
    }

    async fn submit_plain(&self, job: Plain) -> Result<(Self::PlainHandle, bool), gaffer::Error> {
        self.0.submit(job).await.map(|h| {
            let new = h.newly_submitted();
            (h, new)
        })
    }
}

impl BulkBatch for gaffer::Batch<GPipe> {
    async fn run(&self, n: usize) -> Result<Tally, BoxErr> {
        let report = gaffer::Batch::run(self, 0..n as u64).await?;
        Ok(Tally {
            succeeded: report.succeeded as usize,
            failed: report.failed as usize,
            total: report.total as usize,
        })
    }

    async fn completed(&self) -> Option<usize> {
        self.progress().await.map(|p| p.completed as usize)
    }
}

// ---------------------------------------------------------------- the job and the pipeline

impl gaffer::Job for Keyed {
    const NAME: &'static str = "bench.add_one_keyed";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: gaffer::JobContext) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(format!("k-{}", self.x))
    }
}

impl gaffer::Job for Plain {
    const NAME: &'static str = "bench.add_one";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: gaffer::JobContext) -> Result<u64, Self::Error> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        Ok(self.x + 1)
    }
}

/// Three memoized phases that do no work.
struct GPipe;

impl gaffer::Pipeline for GPipe {
    const NAME: &'static str = "bench.three_phases";
    type Input = u64;
    type Output = u64;
    type Error = api::ItemError;
    async fn run(&self, ctx: &gaffer::BulkCtx<u64>) -> Result<u64, api::ItemError> {
        RUNS.fetch_add(1, Ordering::Relaxed);
        let memo = ctx.memo();
        let x = ctx.input;
        let a: u64 = memo
            .memoized("parse", || async { Ok::<_, gaffer::Error>(x) })
            .await?;
        let b: u64 = memo
            .memoized("enrich", || async { Ok::<_, gaffer::Error>(a) })
            .await?;
        let c: u64 = memo
            .memoized("score", || async { Ok::<_, gaffer::Error>(b) })
            .await?;
        Ok(c)
    }
}

/// `--telemetry`: what an operator runs gaffer under.
fn install_telemetry(a: &ChildArgs) -> Result<(), BoxErr> {
    if !a.telemetry {
        return Ok(());
    }
    #[cfg(feature = "telemetry")]
    {
        // `SBS_TELEMETRY=fmt` or `prom` installs only that one (to tell
        // their costs apart); unset, both.
        let only = std::env::var("SBS_TELEMETRY").unwrap_or_default();
        if only != "prom" {
            // `SBS_FILTER=level`: a plain level filter at `info`
            // (`with_max_level(Level::INFO)`); unset, an `EnvFilter` of
            // `info`, or of `RUST_LOG` when set. Both pass the same spans
            // and events; an `EnvFilter` also takes a lock on each span
            // enter, exit and close.
            // `SBS_ANSI=0`: no ANSI styling (`with_ansi(false)`), as for
            // logs written to a file; unset, the default (styled).
            let ansi = std::env::var("SBS_ANSI").map_or(true, |v| v != "0");
            let fmt = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_ansi(ansi);
            if std::env::var("SBS_FILTER").is_ok_and(|f| f == "level") {
                fmt.with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
                    .init();
            } else {
                let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
                fmt.with_env_filter(filter).init();
            }
        }
        if only != "fmt" {
            metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
        }
        Ok(())
    }
    #[cfg(not(feature = "telemetry"))]
    Err("--telemetry needs a build with `--features telemetry`".into())
}
