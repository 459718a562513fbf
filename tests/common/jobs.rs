//! Fixtures of the jobs runner's tests (`jobs_*.rs`, `idempotency.rs`): a
//! per-engine [`Probe`],
//! the jobs more than one of those files runs, and joins and event waits
//! bounded by [`LIMIT`].

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gaffer::{EngineEvent, Error, Job, JobContext, JobHandle, job::FailureKind, job::JobError};
use serde::{Deserialize, Serialize};

use super::{Gate, LIMIT};

/// Per-engine probe: counts handler runs and memo computations, and holds the
/// gate blocking jobs wait on.
pub struct Probe {
    pub runs: AtomicUsize,
    pub computes: AtomicUsize,
    pub gate: Gate,
}

impl Probe {
    pub fn new(gate: Gate) -> Arc<Self> {
        Arc::new(Self {
            runs: AtomicUsize::new(0),
            computes: AtomicUsize::new(0),
            gate,
        })
    }

    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub fn computes(&self) -> usize {
        self.computes.load(Ordering::SeqCst)
    }
}

/// The error of the test jobs.
#[derive(Debug, thiserror::Error)]
pub enum Fail {
    #[error("{0}")]
    Msg(String),
    #[error(transparent)]
    Gaffer(#[from] Error),
}

/// `UNIX_EPOCH + ms`.
pub fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Join with a bound, so a job that never ends fails the test instead of
/// hanging it. Infrastructure errors fail the test too.
pub async fn join<J: Job>(handle: &JobHandle<J>) -> Result<J::Output, JobError> {
    handle
        .join_timeout(LIMIT)
        .await
        .unwrap_or_else(|e| panic!("joining {handle:?} failed: {e}"))
        .unwrap_or_else(|| panic!("{handle:?} did not end within {LIMIT:?}"))
}

/// Wait for attempt `n` of run `id` to start.
pub async fn wait_started(
    rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    id: &str,
    n: u32,
) {
    super::wait_event(rx, LIMIT, |ev| {
        matches!(ev, EngineEvent::JobStarted { run_id, attempt, .. } if run_id == id && *attempt == n)
    })
    .await;
}

/// Application state of [`Scale`].
pub struct Factor(pub i64);

/// Multiplies its input by the registered [`Factor`].
#[derive(Serialize, Deserialize)]
pub struct Scale {
    pub x: i64,
}

impl Job for Scale {
    const NAME: &'static str = "scale";
    type Output = i64;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<i64, Self::Error> {
        Ok(self.x * ctx.state::<Factor>().0)
    }
}

/// Always fails with `message`, permanently or transiently; counts its runs.
/// Keyed when `key` is set.
#[derive(Serialize, Deserialize)]
pub struct AlwaysFails {
    pub key: Option<String>,
    pub message: String,
    pub permanent: bool,
}

impl Job for AlwaysFails {
    const NAME: &'static str = "always-fails";
    type Output = ();
    type Error = Fail;
    async fn run(&self, ctx: JobContext) -> Result<(), Fail> {
        ctx.state::<Arc<Probe>>()
            .runs
            .fetch_add(1, Ordering::SeqCst);
        Err(Fail::Msg(self.message.clone()))
    }
    fn classify(&self, _error: &Fail) -> FailureKind {
        if self.permanent {
            FailureKind::Permanent
        } else {
            FailureKind::Transient
        }
    }
    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}
