//! Coordinator: one actor per running batch. Owns the run's counters, failed
//! keys, cost rollup, the sink, and the set of outstanding items (enqueued or
//! found running, not yet settled), which it keeps under a window so memory
//! does not grow with the batch.
//!
//! The settlement of each item is pushed to it (settle → Batches →
//! coordinator); it never polls. Items answered by an earlier run's marker are
//! counted and re-emitted from the marker without running.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::{EnqueueOptions, EnqueueRequest, SettlementEffects};
use tokio::time::Instant;
use tracing::warn;

use crate::batch::{BatchOutcome, BatchProgress, BatchReply, BatchSpec, output_of, read_chunk};
use crate::batches::BatchesMessage;
use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::keys;
use crate::records::{self, BatchHead, ItemMarker, ItemStatus, ManifestItem, merge_cost};
use crate::services::Services;

/// Messages of a coordinator.
#[derive(Debug)]
pub enum CoordinatorMessage {
    /// The manifest is complete: enqueue and count; answer when every item settled.
    Begin(Box<BatchHead>, BatchReply),
    /// Enqueue the next manifest chunk if the window allows.
    FeedNext,
    /// An item of this batch settled.
    ItemSettled {
        /// Item key.
        key: String,
        /// Job id of the delivery that settled it.
        job_id: String,
        /// Its marker.
        marker: Box<ItemMarker>,
    },
    /// Counters now.
    GetProgress(RpcReplyPort<BatchProgress>),
    /// The run's caller went away: stop (queued items keep running).
    Abandon,
}

/// The coordinator actor.
#[derive(Debug)]
pub struct Coordinator;

/// Arguments of a coordinator.
#[derive(Debug)]
pub struct CoordinatorArguments {
    /// The batch.
    pub spec: BatchSpec,
    /// Engine services.
    pub services: Arc<Services>,
    /// The registry, told before the run's caller is answered.
    pub batches: ActorRef<BatchesMessage>,
}

/// State of a coordinator.
pub struct CoordinatorState {
    spec: BatchSpec,
    services: Arc<Services>,
    batches: ActorRef<BatchesMessage>,
    head: Option<BatchHead>,
    reply: Option<BatchReply>,
    next_chunk: u32,
    /// Items of the loaded manifest chunk not yet enqueued.
    current: VecDeque<ManifestItem>,
    feeding: bool,
    outstanding: HashMap<String, String>,
    outcome: BatchOutcome,
    started: Instant,
    /// Reads are needed unless this run created the batch.
    fresh: bool,
}

impl std::fmt::Debug for CoordinatorState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorState")
            .field("batch_id", &self.spec.batch_id)
            .field("next_chunk", &self.next_chunk)
            .field("outstanding", &self.outstanding.len())
            .finish_non_exhaustive()
    }
}

impl CoordinatorState {
    fn record(&mut self, key: &str, marker: &ItemMarker, output: Option<Vec<u8>>) {
        merge_cost(&mut self.outcome.cost, &marker.cost);
        match marker.status {
            ItemStatus::Succeeded => self.outcome.succeeded += 1,
            ItemStatus::Cancelled => self.outcome.cancelled += 1,
            ItemStatus::Failed => {
                self.outcome.failed += 1;
                self.outcome.failed_keys.push(key.to_string());
            }
        }
        if let Some(sink) = &self.spec.sink
            && let Err(e) = sink.write(
                key,
                marker.status,
                output.as_deref(),
                marker.error.as_deref(),
            )
        {
            self.outcome.sink_errors += 1;
            warn!(batch_id = %self.spec.batch_id, %key, error = %e, "the sink rejected an item record");
        }
    }

    fn has_more(&self, head: &BatchHead) -> bool {
        !self.current.is_empty() || self.next_chunk < head.chunks
    }

    /// Enqueue as many items as the window has room for, reading the manifest
    /// a chunk at a time; re-arm itself while room remains so settlements
    /// interleave with enqueueing.
    async fn feed(&mut self, myself: &ActorRef<CoordinatorMessage>) -> Result<()> {
        self.feeding = false;
        let Some(head) = self.head.clone() else {
            return Ok(());
        };
        let room = self.spec.window.saturating_sub(self.outstanding.len());
        if room == 0 {
            return Ok(());
        }
        if self.current.is_empty() {
            if self.next_chunk >= head.chunks {
                return Ok(());
            }
            let chunk = read_chunk(&self.services, &self.spec.batch_id, self.next_chunk).await?;
            self.next_chunk += 1;
            self.current = chunk.items.into();
        }
        let take = room.min(self.current.len());
        let items: Vec<ManifestItem> = self.current.drain(..take).collect();
        self.enqueue_items(&head, items).await?;
        if self.has_more(&head) && self.outstanding.len() < self.spec.window {
            self.feeding = true;
            let _ = myself.cast(CoordinatorMessage::FeedNext);
        }
        Ok(())
    }

    async fn enqueue_items(&mut self, head: &BatchHead, items: Vec<ManifestItem>) -> Result<()> {
        let services = self.services.clone();
        let queue = services.queue()?;
        let batch_id = self.spec.batch_id.clone();
        let mut fx = SettlementEffects::default();
        let mut answered = Vec::new();
        for item in items {
            if !self.fresh {
                let active_key = keys::item_active_key(&batch_id, &item.key);
                if let Some(job_id) = queue.view().kv_get(&active_key).await? {
                    // Still queued or running from an earlier run: wait for it.
                    self.outstanding
                        .insert(item.key, String::from_utf8_lossy(&job_id).into_owned());
                    continue;
                }
                let marker_key = keys::item_marker_key(&batch_id, &item.key);
                if let Some(raw) = queue.view().kv_get(&marker_key).await?
                    && let Ok(marker) = records::decode::<ItemMarker>(&marker_key, &raw)
                    && marker.status == ItemStatus::Succeeded
                {
                    answered.push((item.key, marker));
                    continue;
                }
            }
            let job_id = queue.next_job_id();
            let run_id = keys::item_run_id(&batch_id, &item.key);
            let mut headers = head.headers.clone();
            headers.insert(keys::HEADER_TYPE.into(), head.pipeline.clone());
            headers.insert(keys::HEADER_RUN.into(), run_id);
            headers.insert(keys::HEADER_BATCH.into(), batch_id.clone());
            headers.insert(keys::HEADER_KEY.into(), item.key.clone());
            fx = fx
                .kv_put(
                    keys::item_active_key(&batch_id, &item.key),
                    job_id.clone().into_bytes(),
                )
                .enqueue(EnqueueRequest {
                    queue: services.settings().bulk_queue_name.clone(),
                    payload: item.input,
                    options: EnqueueOptions::default()
                        .headers(headers)
                        .id_override(job_id.clone()),
                });
            self.outstanding.insert(item.key, job_id);
        }
        if !fx.enqueues.is_empty() {
            queue.commit_effects(fx).await?;
        }
        drop(queue);
        for (key, marker) in answered {
            let output = output_of(&services, &marker).await;
            self.record(&key, &marker, output);
        }
        Ok(())
    }

    async fn settled(&mut self, key: String, job_id: String, marker: ItemMarker) {
        if self.outstanding.get(&key) != Some(&job_id) {
            return;
        }
        self.outstanding.remove(&key);
        let output = output_of(&self.services, &marker).await;
        self.record(&key, &marker, output);
    }

    fn progress(&self) -> BatchProgress {
        BatchProgress {
            total: self.head.as_ref().map(|h| h.total).unwrap_or(0),
            succeeded: self.outcome.succeeded,
            failed: self.outcome.failed,
            cancelled: self.outcome.cancelled,
            elapsed: self.started.elapsed(),
            cost: self.outcome.cost.clone(),
        }
    }

    /// Done when every chunk is enqueued and nothing is outstanding.
    async fn maybe_finish(&mut self, myself: &ActorRef<CoordinatorMessage>) {
        let Some(head) = &self.head else { return };
        let more = self.has_more(head);
        if more || !self.outstanding.is_empty() {
            if !self.feeding && more && self.outstanding.len() < self.spec.window / 2 + 1 {
                self.feeding = true;
                let _ = myself.cast(CoordinatorMessage::FeedNext);
            }
            return;
        }
        let mut outcome = std::mem::take(&mut self.outcome);
        outcome.total = head.total;
        outcome.elapsed = self.started.elapsed();
        if let Some(sink) = &self.spec.sink
            && let Err(e) = sink.flush()
        {
            warn!(batch_id = %self.spec.batch_id, error = %e, "flushing the batch's sink failed");
            self.release().await;
            if let Some(reply) = self.reply.take() {
                let _ = reply.send(Err(EngineError::ActorUnavailable(format!(
                    "sink flush failed: {e}"
                ))));
            }
            myself.stop(None);
            return;
        }
        if let Some(retention) = self.spec.retention
            && let Err(e) = self.write_expiry(head, retention).await
        {
            warn!(batch_id = %self.spec.batch_id, error = %e, "writing the batch's retention entry failed");
        }
        self.services.emit(EngineEvent::BatchCompleted {
            batch_id: self.spec.batch_id.clone(),
            succeeded: outcome.succeeded,
            failed: outcome.failed,
        });
        self.release().await;
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Ok(outcome));
        }
        myself.stop(None);
    }

    /// Leave the registry before answering the caller, so the caller's next
    /// run, resume or forget of this batch is not refused as running.
    async fn release(&self) {
        let _ = ractor::call!(
            self.batches,
            BatchesMessage::Release,
            self.spec.batch_id.clone()
        );
    }

    async fn write_expiry(&self, head: &BatchHead, retention: std::time::Duration) -> Result<()> {
        let queue = self.services.queue()?;
        let due = self
            .services
            .clock()
            .now_ms()
            .saturating_add(retention.as_millis() as u64);
        let suffix = format!("{:016x}{}", head.generation, self.spec.batch_id);
        let fx = SettlementEffects::default().expiry_entry(
            self.services.batch_expiry(),
            due,
            suffix.as_bytes(),
        );
        queue.commit_effects(fx).await?;
        Ok(())
    }
}

impl Actor for Coordinator {
    type Msg = CoordinatorMessage;
    type State = CoordinatorState;
    type Arguments = CoordinatorArguments;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: CoordinatorArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(CoordinatorState {
            spec: args.spec,
            services: args.services,
            batches: args.batches,
            head: None,
            reply: None,
            next_chunk: 0,
            current: VecDeque::new(),
            feeding: false,
            outstanding: HashMap::new(),
            outcome: BatchOutcome::default(),
            started: Instant::now(),
            fresh: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            CoordinatorMessage::Begin(head, reply) => {
                // A first generation with no item ever enqueued needs no reads.
                state.fresh = head.generation == 1;
                state.head = Some(*head);
                state.reply = Some(reply);
                if let Err(e) = state.feed(&myself).await {
                    fail(state, &myself, e).await;
                    return Ok(());
                }
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::FeedNext => {
                if let Err(e) = state.feed(&myself).await {
                    fail(state, &myself, e).await;
                    return Ok(());
                }
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::ItemSettled {
                key,
                job_id,
                marker,
            } => {
                state.settled(key, job_id, *marker).await;
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::GetProgress(reply) => {
                let _ = reply.send(state.progress());
            }
            CoordinatorMessage::Abandon => myself.stop(Some("abandoned".into())),
        }
        Ok(())
    }
}

async fn fail(state: &mut CoordinatorState, myself: &ActorRef<CoordinatorMessage>, e: EngineError) {
    warn!(batch_id = %state.spec.batch_id, error = %e, "batch run failed; resume it to continue");
    state.release().await;
    if let Some(reply) = state.reply.take() {
        let _ = reply.send(Err(e));
    }
    myself.stop(None);
}
