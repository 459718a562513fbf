//! A sample of the type's ready jobs for its metrics (feature `metrics`):
//! every [`SAMPLE_EVERY`], a task reads the counters of the type's queues
//! that may hold ready jobs (at most [`MAX_SAMPLED`]) and the first ready
//! job of each that has one, and sets `gaffer_jobs_ready` and
//! `gaffer_oldest_ready_seconds` for the type: one series each per type,
//! whatever the number of values (docs/guide/telemetry.md).

use std::time::Duration;

use ractor::ActorRef;
use tracing::debug;

use super::{PoolMessage, PoolState};

/// How often a pool samples its ready jobs (taquba's own sampler's
/// default interval).
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// The most queues one sample reads: with more values that may hold ready
/// jobs, the gauges count these only (an undercount).
pub(crate) const MAX_SAMPLED: usize = 1_000;

/// What one sample found: ready jobs, and the oldest ready one's enqueue
/// (epoch ms, queue clock).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) ready: i64,
    pub(crate) oldest_ms: Option<u64>,
}

impl PoolState {
    /// Start a sample (its task reports, and the next is due
    /// [`SAMPLE_EVERY`] after it ends); none while draining or closed.
    pub(super) fn sample_ready(&mut self, myself: &ActorRef<PoolMessage>) {
        if self.draining || self.closed {
            return;
        }
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        let queues = self.limiter.sample_queues(MAX_SAMPLED);
        let metrics = self.metrics.clone();
        let clock = self.args.services.clock().clone();
        let me = myself.clone();
        let work = async move {
            let sample = read(&queue, &queues).await?;
            let now = clock.now_ms();
            let oldest = sample
                .oldest_ms
                .map_or(0.0, |at| now.saturating_sub(at) as f64 / 1000.0);
            metrics.ready(sample.ready, oldest);
            Ok::<_, taquba::Error>(())
        };
        crate::task::spawn_reported(work, move |ended| {
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(error = %e, "sampling the ready jobs failed; trying again at the next sample");
                }
                Err(e) => {
                    debug!(error = %e, "sampling the ready jobs ended early; trying again at the next sample");
                }
            }
            me.send_after(SAMPLE_EVERY, || PoolMessage::SampleReady);
        });
    }
}

/// The ready jobs of `queues` and the enqueue of the first ready job (claim
/// order: priority, then enqueue order) of each, the oldest of those.
pub(crate) async fn read(queue: &taquba::Queue, queues: &[String]) -> taquba::Result<Sample> {
    let view = queue.view();
    let mut sample = Sample::default();
    for q in queues {
        let pending = view.stats(q).await?.pending;
        if pending <= 0 {
            continue;
        }
        sample.ready += pending;
        let page = view
            .list_jobs(q, taquba::JobStatus::Pending, None, 1)
            .await?;
        if let Some(job) = page.jobs.first() {
            sample.oldest_ms = Some(
                sample
                    .oldest_ms
                    .map_or(job.enqueued_at, |o| o.min(job.enqueued_at)),
            );
        }
    }
    Ok(sample)
}
