//! A handler worker: one slot of a pool. It runs the user's code for one job
//! at a time inside its `handle`, within the slot's parking scope, so a panic
//! in user code fails this actor only (its pool settles the attempt as
//! failed and replaces it), and reports the verdict to its pool.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::erased::{Delivery, ErasedHandler, Verdict};
use crate::events::EngineEvent;
use crate::exec::parking;
use crate::exec::pool::{PoolMessage, SlotId};
use crate::services::Services;
use crate::telemetry::TypeMetrics;

/// Messages of a handler worker.
#[derive(Debug)]
pub(crate) enum WorkerMessage {
    /// Run this delivery.
    Run(Box<Delivery>),
}

/// A handler worker: runs the user's code for one job at a time, inside
/// `handle`, so a panic fails this actor only.
pub(crate) struct HandlerWorker {
    pub(crate) handler: Arc<dyn ErasedHandler>,
    pub(crate) pool: ActorRef<PoolMessage>,
    pub(crate) slot: SlotId,
    pub(crate) services: Arc<Services>,
    /// Its type's metrics (`gaffer_jobs_running`, `gaffer_job_run_seconds`).
    pub(crate) metrics: TypeMetrics,
}

impl std::fmt::Debug for HandlerWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerWorker")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Actor for HandlerWorker {
    type Msg = WorkerMessage;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        _state: &mut (),
    ) -> Result<(), ActorProcessingErr> {
        let WorkerMessage::Run(delivery) = message;
        if delivery.item.is_none() {
            self.services.emit_with(|| EngineEvent::JobStarted {
                run_id: delivery.run_id.clone(),
                job_type: delivery.job_type.clone(),
                attempt: delivery.attempt,
            });
        }
        let effects = delivery.effects.clone();
        let cost = delivery.cost.clone();
        let parking = delivery.parking.clone();
        // Counted down on every way out of the run, a panic included.
        let running = self.metrics.running(&delivery.job_type);
        let span = delivery.span.clone();
        let suspend = delivery.suspend.clone();
        let (timeout, cancel) = (delivery.timeout, delivery.cancel.clone());
        // One instrumented future: the span is entered on each of its polls
        // (its first one logs the start), not also around the set-up above.
        // A pause (a wait for a signal that has not come, a sleep, a
        // snooze) suspends the attempt: the user's future is dropped there,
        // and the attempt ends paused.
        let run = tracing::Instrument::instrument(
            async move {
                tracing::debug!("attempt started");
                tokio::select! {
                    biased;
                    verdict = self.handler.run(*delivery) => verdict,
                    pause = suspend.suspended() => Verdict::Pause(pause),
                    () = past(timeout) => {
                        // Its token tells what the job spawned; its own
                        // future is dropped here, so the attempt ends now.
                        cancel.cancel();
                        tracing::warn!(?timeout, "the attempt ran past its timeout; cancelled");
                        Verdict::transient(timed_out(timeout))
                    }
                }
            },
            span,
        );
        let verdict = parking::scope(parking, run).await;
        running.ended();
        let effects = effects.seal();
        let _ = self.pool.cast(PoolMessage::WorkerDone {
            slot: self.slot,
            verdict,
            effects,
            cost: cost.snapshot(),
        });
        Ok(())
    }
}

/// Ends after `timeout`; never without one.
async fn past(timeout: Option<std::time::Duration>) {
    match timeout {
        Some(timeout) => tokio::time::sleep(timeout).await,
        None => std::future::pending().await,
    }
}

/// The failure of an attempt cancelled at its timeout.
pub(crate) fn timed_out(timeout: Option<std::time::Duration>) -> String {
    let limit = timeout.map_or_else(String::new, |t| format!(" of {t:?}"));
    format!("timed out: the attempt ran past its timeout{limit} and was cancelled")
}
