//! Coordinator: one actor per running batch. Owns the run's counters, failed
//! keys, cost rollup, the sink, and the set of outstanding items (enqueued or
//! found running, not yet settled), which it keeps under a window so memory
//! does not grow with the batch.
//!
//! The settlement of each item is pushed to it (settle → Batches →
//! coordinator); it never polls. Items answered by an earlier run's marker are
//! counted and re-emitted from the marker without running.
//!
//! Item records reach the run's sink through a `SinkWriter`: a thread of its
//! own that writes them in order and flushes at the end, so a slow sink never
//! stalls an async worker of the runtime. The coordinator waits
//! for the writer only through a bounded channel (backpressure) and learns of
//! the flush by message. A sink that takes over (`TakeSink`, from a watcher
//! through the run's driver) gets every record counted after it arrives; the
//! writer switches in order, after the records counted before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::{EnqueueOptions, EnqueueRequest, SettlementEffects};
use tokio::time::Instant;
use tracing::warn;

use crate::batches::claims::Attach;
use crate::batches::data::output_of;
use crate::batches::lookups::{Found, look_up_all};
use crate::batches::manifest::read_chunk;
use crate::batches::registry::RegistryMessage;
use crate::batches::sink_writer::{OwnedRecord, SinkReport, SinkWriter};
use crate::batches::spec::RecordSink;
use crate::batches::spec::{BatchOutcome, BatchProgress, BatchReply, BatchSpec, SinkAttached};
use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::layout::keys;
use crate::layout::records::{BatchHead, ItemMarker, ItemStatus, ManifestItem, merge_cost};
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
    /// The sink's writer flushed the run's records.
    SinkFlushed(SinkReport),
    /// A sink takes over the records still to come: the records of the items
    /// counted from now on go to it. Answered with the items counted before.
    TakeSink(Attach),
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
    pub batches: ActorRef<RegistryMessage>,
}

/// State of a coordinator.
pub struct CoordinatorState {
    spec: BatchSpec,
    services: Arc<Services>,
    batches: ActorRef<RegistryMessage>,
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
    /// The sink's writer (`None` without a sink, and once flushing).
    sink: Option<SinkWriter>,
    /// Every item is counted: the run is flushing its sink and ending.
    finishing: bool,
    /// Items counted before the sink of now took over (0: it is the run's).
    before_sink: u64,
    /// Items this run enqueued (paced by `spec.max_rate`) since `paced_since`.
    enqueued: u64,
    paced_since: Instant,
    /// The run's `gaffer.batch` span: its events tell the run's progress.
    span: tracing::Span,
    /// Items counted when progress was last told (an event per tenth).
    told: u64,
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
    /// Count an item and hand its record to the sink. `output` is the
    /// succeeded item's output as read (only read when there is a sink).
    async fn record(
        &mut self,
        key: &str,
        marker: &ItemMarker,
        output: Option<std::result::Result<Vec<u8>, String>>,
    ) {
        merge_cost(&mut self.outcome.cost, &marker.cost);
        match marker.status {
            ItemStatus::Succeeded => self.outcome.succeeded += 1,
            ItemStatus::Cancelled => self.outcome.cancelled += 1,
            ItemStatus::Failed => {
                self.outcome.failed += 1;
                self.outcome.failed_keys.push(key.to_string());
            }
        }
        let Some(sink) = &self.sink else {
            return;
        };
        let record = match marker.status {
            ItemStatus::Succeeded => match output {
                Some(Ok(bytes)) => OwnedRecord::Succeeded(bytes),
                Some(Err(e)) => OwnedRecord::OutputUnavailable(e),
                None => OwnedRecord::OutputUnavailable("the item's output was not read".into()),
            },
            ItemStatus::Failed => {
                OwnedRecord::Failed(marker.error.clone().unwrap_or_else(|| "failed".into()))
            }
            ItemStatus::Cancelled => OwnedRecord::Cancelled,
        };
        if let OwnedRecord::OutputUnavailable(e) = &record {
            warn!(batch_id = %self.spec.batch_id, %key, error = %e, "a succeeded item's output could not be read; the sink gets an error record");
        }
        sink.write(key, record).await;
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
        if !self.has_more(&head) {
            return Ok(());
        }
        let room = match self.paced_room(myself) {
            Some(paced) => room.min(paced),
            None => return Ok(()),
        };
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
        if self.current.is_empty() && self.next_chunk < head.chunks {
            // The next manifest chunk is read while this feed's items are
            // checked and enqueued (one chunk more in memory at most).
            let (services, batch_id) = (self.services.clone(), self.spec.batch_id.clone());
            let index = self.next_chunk;
            let (fed, next) = tokio::join!(
                self.enqueue_items(&head, items),
                read_chunk(&services, &batch_id, index)
            );
            fed?;
            self.current = next?.items.into();
            self.next_chunk += 1;
        } else {
            self.enqueue_items(&head, items).await?;
        }
        if self.has_more(&head) && self.outstanding.len() < self.spec.window {
            self.feeding = true;
            let _ = myself.cast(CoordinatorMessage::FeedNext);
        }
        Ok(())
    }

    /// How many items the run's pace lets it enqueue now (all, without a
    /// `max_rate`): the rate times the time since the run began, plus a
    /// tenth of a second's worth, less what it enqueued. `None` when that is
    /// nothing: the next feed is then scheduled for when there is room.
    fn paced_room(&mut self, myself: &ActorRef<CoordinatorMessage>) -> Option<usize> {
        let Some(rate) = self.spec.max_rate else {
            return Some(usize::MAX);
        };
        let rate = u64::from(rate.max(1));
        let burst = (rate / 10).max(1);
        let elapsed_ms = self.paced_since.elapsed().as_millis() as u64;
        let allowed = (rate * elapsed_ms / 1000 + burst).saturating_sub(self.enqueued);
        if allowed > 0 {
            return Some(usize::try_from(allowed).unwrap_or(usize::MAX));
        }
        // Wait until a burst's worth is allowed again (at least 1 ms).
        let wait_ms = (burst * 1000).div_ceil(rate).max(1);
        self.feeding = true;
        myself.send_after(std::time::Duration::from_millis(wait_ms), || {
            CoordinatorMessage::FeedNext
        });
        None
    }

    async fn enqueue_items(&mut self, head: &BatchHead, items: Vec<ManifestItem>) -> Result<()> {
        let services = self.services.clone();
        let batch_id = self.spec.batch_id.clone();
        // On a batch's first generation nothing can exist yet; otherwise the
        // records of every item are read first (concurrently, order kept).
        let found = if self.fresh {
            items
                .into_iter()
                .map(|item| (item, Found::Absent))
                .collect()
        } else {
            look_up_all(&services, &batch_id, items, self.sink.is_some()).await?
        };
        let queue = services.queue()?;
        let item_queue = services.pipeline_queue(&head.pipeline)?.to_string();
        let mut fx = SettlementEffects::default();
        let mut answered = Vec::new();
        for (item, found) in found {
            match found {
                Found::Active(job_id) => {
                    // Still queued or running from an earlier run: wait for it.
                    self.outstanding.insert(item.key, job_id);
                    continue;
                }
                Found::Answered(marker, output) => {
                    answered.push((item.key, marker, output));
                    continue;
                }
                Found::Absent => {}
            }
            let job_id = queue.next_job_id();
            // No `gaffer.run`: an item's run id follows from its batch and
            // key (`keys::item_run_id`), and the queue stores these headers
            // twice per item (its pending and claimed records).
            let mut headers = head.headers.clone();
            headers.insert(keys::HEADER_TYPE.into(), head.pipeline.clone());
            headers.insert(keys::HEADER_BATCH.into(), batch_id.clone());
            headers.insert(keys::HEADER_KEY.into(), item.key.clone());
            if !self.fresh {
                // An earlier run may have left this item's memo entries.
                headers.insert(keys::HEADER_MEMO.into(), String::new());
            }
            fx = fx
                .kv_put(
                    keys::item_active_key(&batch_id, &item.key),
                    job_id.clone().into_bytes(),
                )
                .enqueue(EnqueueRequest {
                    queue: item_queue.clone(),
                    payload: item.input,
                    options: EnqueueOptions::default()
                        .headers(headers)
                        .id_override(job_id.clone())
                        // gaffer counts attempts (see `attempts`); an item
                        // has its queue's default limit.
                        .max_attempts(keys::QUEUE_ATTEMPTS),
                });
            self.outstanding.insert(item.key, job_id);
        }
        if !fx.enqueues.is_empty() {
            let count = fx.enqueues.len() as u64;
            queue.commit_effects(fx).await?;
            self.enqueued += count;
        }
        drop(queue);
        for (key, marker, output) in answered {
            self.record(&key, &marker, output).await;
        }
        Ok(())
    }

    async fn settled(&mut self, key: String, job_id: String, mut marker: ItemMarker) {
        if self.outstanding.get(&key) != Some(&job_id) {
            return;
        }
        self.outstanding.remove(&key);
        let output = if self.sink.is_some() && marker.status == ItemStatus::Succeeded {
            Some(output_of(&self.services, marker.output.take()).await)
        } else {
            None
        };
        self.record(&key, &marker, output).await;
    }

    /// Items counted so far.
    fn counted(&self) -> u64 {
        self.outcome.succeeded + self.outcome.failed + self.outcome.cancelled
    }

    /// `sink` takes over the records of the items counted from now on (the
    /// writer switches after the records before). Answers how many items
    /// were counted before it took over: the same sink again (a takeover
    /// asked again) keeps its place.
    async fn take_sink(&mut self, sink: Arc<dyn RecordSink>) -> SinkAttached {
        if self
            .spec
            .sink
            .as_ref()
            .is_some_and(|now| Arc::ptr_eq(now, &sink))
        {
            return SinkAttached {
                written: self.before_sink,
            };
        }
        let counted = self.counted();
        if self.finishing {
            // Every item is counted: no record is still to come.
            return SinkAttached { written: counted };
        }
        self.spec.sink = Some(sink.clone());
        self.before_sink = counted;
        match &self.sink {
            Some(writer) => writer.switch(sink).await,
            // Begun without a sink: the writer starts now. (Before `Begin`,
            // the spec's sink is the one it starts with.)
            None if self.head.is_some() => {
                self.sink = Some(SinkWriter::start(sink, self.spec.batch_id.clone()));
            }
            None => {}
        }
        SinkAttached { written: counted }
    }

    /// A debug event in the run's span at each tenth of the items counted.
    fn tell_progress(&mut self) {
        let total = self.head.as_ref().map(|h| h.total).unwrap_or(0);
        let done = self.counted();
        let step = (total / 10).max(1);
        let due = done >= self.told + step || (done == total && self.told < total);
        if total == 0 || !due {
            return;
        }
        self.told = done;
        tracing::debug!(
            parent: &self.span,
            done,
            total,
            succeeded = self.outcome.succeeded,
            failed = self.outcome.failed,
            cancelled = self.outcome.cancelled,
            "batch progress"
        );
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

    /// Done when every chunk is enqueued and nothing is outstanding: flush
    /// the sink (on its thread), then end the run.
    async fn maybe_finish(&mut self, myself: &ActorRef<CoordinatorMessage>) {
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
    async fn complete(&mut self, myself: &ActorRef<CoordinatorMessage>, sink: Option<SinkReport>) {
        let Some(head) = self.head.clone() else {
            return;
        };
        let mut outcome = std::mem::take(&mut self.outcome);
        outcome.total = head.total;
        outcome.elapsed = self.started.elapsed();
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
                fail(self, myself, e).await;
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
    fn end(&mut self, myself: &ActorRef<CoordinatorMessage>, result: Result<BatchOutcome>) {
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
    async fn final_commit(
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
        let span = tracing::info_span!(
            parent: &args.spec.parent,
            "gaffer.batch",
            pipeline = %args.spec.pipeline,
            batch_id = %args.spec.batch_id,
            generation = tracing::field::Empty,
            total = tracing::field::Empty,
        );
        Ok(CoordinatorState {
            span,
            told: 0,
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
            sink: None,
            finishing: false,
            before_sink: 0,
            enqueued: 0,
            paced_since: Instant::now(),
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
                state.span.record("generation", head.generation);
                state.span.record("total", head.total);
                tracing::debug!(parent: &state.span, total = head.total, generation = head.generation, "batch run started");
                state.sink = state
                    .spec
                    .sink
                    .clone()
                    .map(|sink| SinkWriter::start(sink, state.spec.batch_id.clone()));
                state.head = Some(*head);
                state.reply = Some(reply);
                // The pace counts from the first enqueue's chance.
                state.paced_since = Instant::now();
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
                state.tell_progress();
                state.maybe_finish(&myself).await;
            }
            CoordinatorMessage::GetProgress(reply) => {
                let _ = reply.send(state.progress());
            }
            CoordinatorMessage::SinkFlushed(report) => state.complete(&myself, Some(report)).await,
            CoordinatorMessage::TakeSink(Attach { sink, reply }) => {
                let _ = reply.send(Ok(state.take_sink(sink).await));
            }
        }
        Ok(())
    }
}

async fn fail(state: &mut CoordinatorState, myself: &ActorRef<CoordinatorMessage>, e: EngineError) {
    warn!(parent: &state.span, batch_id = %state.spec.batch_id, error = %e, "batch run failed; resume it to continue");
    state.end(myself, Err(e));
}
