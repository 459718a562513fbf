//! Completion: when every item is counted, the sink flushed, the run's
//! final transaction (head, retention entry, completion job) committed, and
//! the registry told (which answers the caller and the watchers).

use ractor::ActorRef;
use taquba::SettlementEffects;
use tracing::warn;

use super::{CoordinatorMessage, CoordinatorState};
use crate::batches::registry::RegistryMessage;
use crate::batches::sink_writer::SinkReport;
use crate::batches::spec::BatchOutcome;
use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::layout::records::BatchHead;

impl CoordinatorState {
    /// Done when every chunk is enqueued and nothing is outstanding: flush
    /// the sink (on its thread), then end the run.
    pub(super) async fn maybe_finish(&mut self, myself: &ActorRef<CoordinatorMessage>) {
        let Some(head) = &self.head else { return };
        if self.finishing {
            return;
        }
        let more = self.has_more(head);
        if more || !self.outstanding.is_empty() {
            if !self.feeding && more && self.outstanding.len() < self.spec.window / 2 + 1 {
                self.feeding = true;
                let _ = myself.cast(CoordinatorMessage::FeedNext);
            }
            return;
        }
        self.finishing = true;
        match self.sink.take() {
            Some(writer) => {
                let myself = myself.clone();
                crate::task::spawn_reported(writer.flush(), move |ended| {
                    let report = ended.unwrap_or_else(|e| SinkReport::failed(e.to_string()));
                    let _ = myself.cast(CoordinatorMessage::SinkFlushed(report));
                });
            }
            None => self.complete(myself, None).await,
        }
    }

    /// End the run: its retention entry, the event, and the registry (which
    /// answers the caller and the watchers).
    pub(super) async fn complete(
        &mut self,
        myself: &ActorRef<CoordinatorMessage>,
        sink: Option<SinkReport>,
    ) {
        let Some(head) = self.head.clone() else {
            return;
        };
        let mut outcome = std::mem::take(&mut self.outcome);
        outcome.total = head.total;
        outcome.elapsed = self.started.elapsed();
        if self.pacer.waits() > 0 {
            tracing::debug!(parent: &self.span, budget_waits = self.pacer.waits(), "the memory budget paced the run's feeding");
        }
        let mut flushed = Ok(());
        if let Some(report) = sink {
            outcome.sink_errors += report.errors;
            outcome.sink_error_keys.extend(report.error_keys);
            flushed = report.flushed;
        }
        if let Err(e) = flushed {
            warn!(batch_id = %self.spec.batch_id, error = %e, "flushing the batch's sink failed");
            self.end(
                myself,
                Err(EngineError::SinkFailed {
                    batch_id: self.spec.batch_id.clone(),
                    reason: e.to_string(),
                }),
            );
            return;
        }
        match self.final_commit(&head, &outcome).await {
            Ok(completion) => outcome.on_complete = completion,
            // Without a completion job only the retention entry is lost:
            // the run still completes.
            Err(e) if self.spec.on_complete.is_none() => {
                warn!(batch_id = %self.spec.batch_id, error = %e, "writing the batch's retention entry failed");
            }
            // Its completion job must exist once the run is reported
            // complete: fail the run (a resume completes it again).
            Err(e) => {
                self.fail(myself, e).await;
                return;
            }
        }
        tracing::info!(
            parent: &self.span,
            succeeded = outcome.succeeded,
            failed = outcome.failed,
            cancelled = outcome.cancelled,
            elapsed_ms = outcome.elapsed.as_millis() as u64,
            "batch run completed"
        );
        self.services.emit(EngineEvent::BatchCompleted {
            batch_id: self.spec.batch_id.clone(),
            succeeded: outcome.succeeded,
            failed: outcome.failed,
        });
        self.end(myself, Ok(outcome));
    }

    /// Leave the registry with the run's result: the registry answers the
    /// caller (so the caller's next run, resume or forget of this batch is
    /// not refused as running) and the watchers. Then stop.
    pub(super) fn end(
        &mut self,
        myself: &ActorRef<CoordinatorMessage>,
        result: Result<BatchOutcome>,
    ) {
        let _ = self.batches.cast(RegistryMessage::Release {
            batch_id: self.spec.batch_id.clone(),
            coordinator: Some(myself.get_id()),
            reply: self.reply.take().map(|reply| (reply, result)),
            done: None,
        });
        myself.stop(None);
    }

    /// The run's final transaction: its retention entry (with
    /// `spec.retention`) and its completion job (with `spec.on_complete`),
    /// in one commit. The completion job is created only if its run id (of
    /// this batch and generation) has neither a run nor an outcome record,
    /// so a run completes with one completion job at most. Answers its id.
    pub(super) async fn final_commit(
        &self,
        head: &BatchHead,
        outcome: &BatchOutcome,
    ) -> Result<Option<String>> {
        let queue = self.services.queue()?;
        let mut fx = SettlementEffects::default();
        if let Some(retention) = self.spec.retention {
            let due = self
                .services
                .clock()
                .now_ms()
                .saturating_add(retention.as_millis() as u64);
            let suffix = format!("{:016x}{}", head.generation, self.spec.batch_id);
            fx = fx.expiry_entry(self.services.batch_expiry(), due, suffix.as_bytes());
        }
        let Some(request) = &self.spec.on_complete else {
            if self.spec.retention.is_some() {
                queue.commit_effects(fx).await?;
            }
            return Ok(None);
        };
        let run_id = crate::layout::keys::completion_run_id(&self.spec.batch_id, head.generation);
        let mut request = request.clone();
        request.headers.insert(
            crate::layout::keys::HEADER_COMPLETES.to_string(),
            crate::erased::CompletedBatch {
                batch_id: self.spec.batch_id.clone(),
                generation: head.generation,
                total: head.total,
                succeeded: outcome.succeeded,
                failed: outcome.failed,
                cancelled: outcome.cancelled,
            }
            .encode(),
        );
        let with_job = self
            .services
            .creation_effects(fx.clone(), &request, &run_id)?;
        let run_key = crate::layout::keys::run_key(&run_id);
        let outcome_key = crate::layout::keys::outcome_key(&run_id);
        let compares: [(&[u8], Option<&[u8]>); 2] = [(&run_key, None), (&outcome_key, None)];
        if queue
            .kv_compare_commit(&compares, with_job)
            .await?
            .is_none()
        {
            // Created already (this generation's completion committed, then
            // the run was driven again): keep that one.
            if self.spec.retention.is_some() {
                queue.commit_effects(fx).await?;
            }
        }
        Ok(Some(run_id))
    }

    pub(super) async fn fail(&mut self, myself: &ActorRef<CoordinatorMessage>, e: EngineError) {
        warn!(parent: &self.span, batch_id = %self.spec.batch_id, error = %e, "batch run failed; resume it to continue");
        self.end(myself, Err(e));
    }
}
