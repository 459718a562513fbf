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
//! the flush by message.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::{EnqueueOptions, EnqueueRequest, KvOrder, SettlementEffects};
use tokio::time::Instant;
use tracing::warn;

use crate::batch::{
    BatchOutcome, BatchProgress, BatchReply, BatchSpec, ItemRecord, RecordSink, output_of,
    read_chunk,
};
use crate::batches::BatchesMessage;
use crate::error::{EngineError, Result};
use crate::events::EngineEvent;
use crate::keys;
use crate::records::{self, BatchHead, ItemMarker, ItemStatus, ManifestItem, merge_cost};
use crate::services::Services;

/// An item's record, owned, on its way to the sink's thread.
#[derive(Debug)]
enum OwnedRecord {
    Succeeded(Vec<u8>),
    Failed(String),
    Cancelled,
    OutputUnavailable(String),
}

impl OwnedRecord {
    fn as_record(&self) -> ItemRecord<'_> {
        match self {
            Self::Succeeded(output) => ItemRecord::Succeeded { output },
            Self::Failed(error) => ItemRecord::Failed { error },
            Self::Cancelled => ItemRecord::Cancelled,
            Self::OutputUnavailable(error) => ItemRecord::OutputUnavailable { error },
        }
    }
}

enum SinkOp {
    Write(String, OwnedRecord),
    Flush(tokio::sync::oneshot::Sender<SinkReport>),
}

/// What the sink's thread reports when the run's records are flushed.
#[derive(Debug)]
pub struct SinkReport {
    errors: u64,
    error_keys: Vec<String>,
    flushed: std::result::Result<(), String>,
}

/// Records in flight to a sink's thread, at most (then the coordinator waits).
const SINK_BUFFER: usize = 1024;

/// The writer of one run's sink: a thread fed in order.
struct SinkWriter {
    tx: tokio::sync::mpsc::Sender<SinkOp>,
}

impl SinkWriter {
    fn start(sink: Arc<dyn RecordSink>, batch_id: String) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<SinkOp>(SINK_BUFFER);
        // A thread of its own, not the runtime's blocking pool: it lives for
        // the whole run, mostly waiting for records.
        let name = format!("gaffer-sink-{batch_id}");
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let mut report = SinkReport {
                errors: 0,
                error_keys: Vec::new(),
                flushed: Ok(()),
            };
            while let Some(op) = rx.blocking_recv() {
                match op {
                    SinkOp::Write(key, record) => {
                        let written = sink.write(&key, record.as_record());
                        if let Err(e) = &written {
                            warn!(%batch_id, %key, error = %e, "the sink rejected an item record");
                        }
                        if written.is_err() || matches!(record, OwnedRecord::OutputUnavailable(_)) {
                            report.errors += 1;
                            report.error_keys.push(key);
                        }
                    }
                    SinkOp::Flush(done) => {
                        report.flushed = sink.flush();
                        let _ = done.send(report);
                        return;
                    }
                }
            }
            // The run stopped without finishing: no flush.
        });
        if let Err(e) = spawned {
            // The receiver was dropped with the closure: the flush reports it.
            warn!(error = %e, "the sink's writer thread could not start");
        }
        Self { tx }
    }

    async fn write(&self, key: &str, record: OwnedRecord) {
        // A closed channel means the thread is gone (the sink panicked): the
        // flush reports it.
        let _ = self.tx.send(SinkOp::Write(key.to_string(), record)).await;
    }

    /// Flush after the last record; the report arrives on the receiver.
    async fn flush(self) -> SinkReport {
        let (done, report) = tokio::sync::oneshot::channel();
        if self.tx.send(SinkOp::Flush(done)).await.is_err() {
            return sink_gone();
        }
        report.await.unwrap_or_else(|_| sink_gone())
    }
}

fn sink_gone() -> SinkReport {
    SinkReport {
        errors: 0,
        error_keys: Vec::new(),
        flushed: Err(
            "the sink's writer thread stopped (it could not start, or the sink panicked)".into(),
        ),
    }
}

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
    /// The sink's writer (`None` without a sink, and once flushing).
    sink: Option<SinkWriter>,
    /// Every item is counted: the run is flushing its sink and ending.
    finishing: bool,
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
            queue.commit_effects(fx).await?;
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
                tokio::spawn(async move {
                    let report = writer.flush().await;
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
                Err(EngineError::ActorUnavailable(format!(
                    "sink flush failed: {e}"
                ))),
            );
            return;
        }
        if let Some(retention) = self.spec.retention
            && let Err(e) = self.write_expiry(&head, retention).await
        {
            warn!(batch_id = %self.spec.batch_id, error = %e, "writing the batch's retention entry failed");
        }
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
        let _ = self.batches.cast(BatchesMessage::Release {
            batch_id: self.spec.batch_id.clone(),
            coordinator: Some(myself.get_id()),
            result,
            reply: self.reply.take(),
            done: None,
        });
        myself.stop(None);
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

/// An item's output as read for its sink (`None`: no sink, not read).
type ReadOutput = Option<std::result::Result<Vec<u8>, String>>;

/// What the records say about an item of a re-run or resume.
enum Found {
    /// A success marker answers it (with its output, fetched if a blob, when
    /// the run has a sink).
    Answered(ItemMarker, ReadOutput),
    /// Still queued or running from an earlier run: the job id of its delivery.
    Active(String),
    /// Neither: enqueue it.
    Absent,
}

/// Groups of fewer items read their markers one by one, without a scan.
const SCAN_MIN_ITEMS: usize = 32;
/// A scan stops once the entries it passed outnumber twice the group's items
/// among them plus this many: the group's keys are not neighbours in the
/// store, and reading its items one by one is cheaper.
const SCAN_SLACK: usize = 32;
/// Entries per page of a marker scan (bounds what one page holds, and what a
/// scan that stops early read in vain).
const SCAN_PAGE: usize = 64;
/// Items per task (at least; a feed of fewer items is read in one group).
const LOOKUPS_PER_TASK: usize = 64;
/// Tasks reading one feed's items at once.
const LOOKUP_TASKS: usize = 4;
/// Point reads in flight within one task (they overlap only on store I/O).
const LOOKUPS_IN_FLIGHT: usize = 8;

/// Read the records of `items`; the answer is in their order. The items are
/// sorted by key and cut into a few groups of neighbours, each read by its own
/// task (so the reads use every core): a scan of the group's key range finds
/// the success markers, and the items it does not answer are read one by one
/// (`look_up_group`).
async fn look_up_all(
    services: &Arc<Services>,
    batch_id: &str,
    items: Vec<ManifestItem>,
    want_output: bool,
) -> Result<Vec<(ManifestItem, Found)>> {
    let n = items.len();
    let mut sorted: Vec<(usize, ManifestItem)> = items.into_iter().enumerate().collect();
    sorted.sort_unstable_by(|a, b| a.1.key.cmp(&b.1.key));
    let tasks = n.div_ceil(LOOKUPS_PER_TASK).min(LOOKUP_TASKS);
    let mut found = Vec::with_capacity(n);
    if tasks <= 1 {
        found = look_up_group(services.clone(), batch_id.to_string(), sorted, want_output).await?;
    } else {
        let per_task = n.div_ceil(tasks);
        let mut set = tokio::task::JoinSet::new();
        while !sorted.is_empty() {
            let rest = sorted.split_off(per_task.min(sorted.len()));
            let group = std::mem::replace(&mut sorted, rest);
            let (services, batch_id) = (services.clone(), batch_id.to_string());
            set.spawn(look_up_group(services, batch_id, group, want_output));
        }
        // Dropping the set (an error, or the coordinator stopping) aborts the rest.
        while let Some(joined) = set.join_next().await {
            found.extend(joined.map_err(|e| {
                EngineError::ActorUnavailable(format!("reading the batch's item records: {e}"))
            })??);
        }
    }
    found.sort_unstable_by_key(|(i, _, _)| *i);
    if found.len() != n {
        return Err(EngineError::ActorUnavailable(format!(
            "reading the batch's item records: {} of {n} items answered",
            found.len()
        )));
    }
    Ok(found
        .into_iter()
        .map(|(_, item, found)| (item, found))
        .collect())
}

/// The records of a group of items sorted by key (with their positions in the
/// feed). The success markers are found by one scan (`scan_markers`); every
/// item it does not answer is read by `look_up`, a few at a time.
async fn look_up_group(
    services: Arc<Services>,
    batch_id: String,
    items: Vec<(usize, ManifestItem)>,
    want_output: bool,
) -> Result<Vec<(usize, ManifestItem, Found)>> {
    let (services, batch_id) = (&services, batch_id.as_str());
    let mut scanned = if items.len() >= SCAN_MIN_ITEMS {
        scan_markers(services, batch_id, &items).await?
    } else {
        Vec::new()
    };
    scanned.resize_with(items.len(), || None);
    // A scanned success marker answers without a read (unless its output is a
    // blob to fetch); every other item is read.
    futures_util::stream::iter(items.into_iter().zip(scanned))
        .map(|((i, item), scanned)| async move {
            let found = match scanned {
                Some(marker) => answer(services, marker, want_output).await,
                None => look_up(services, batch_id, &item.key, want_output).await?,
            };
            Ok::<_, EngineError>((i, item, found))
        })
        .buffered(LOOKUPS_IN_FLIGHT)
        .try_collect()
        .await
}

/// The success markers of `items` (sorted by key), by position, found by one
/// scan of the marker keys from the first item's key to the last's. The scan
/// stops early when most entries it passes are other items' markers (keys
/// that sort together need not be neighbours in the store: `item-0`..
/// `item-999` span every `item-1…` key), so it passes at most about twice as
/// many entries as the group has items, and an item may be missed; the caller
/// reads every item without a success marker here one by one. A success
/// marker is final whenever the scan saw it (see `look_up`).
async fn scan_markers(
    services: &Services,
    batch_id: &str,
    items: &[(usize, ManifestItem)],
) -> Result<Vec<Option<ItemMarker>>> {
    let mut found: Vec<Option<ItemMarker>> = (0..items.len()).map(|_| None).collect();
    let (Some((_, first)), Some((_, last))) = (items.first(), items.last()) else {
        return Ok(found);
    };
    let index: HashMap<&[u8], usize> = items
        .iter()
        .enumerate()
        .map(|(at, (_, item))| (item.key.as_bytes(), at))
        .collect();
    let prefix = keys::item_marker_prefix(batch_id);
    let range =
        keys::item_marker_key(batch_id, &first.key)..=keys::item_marker_key(batch_id, &last.key);

    let queue = services.queue()?;
    let mut entries = std::pin::pin!(queue.view().kv_entries(
        &prefix,
        range,
        KvOrder::Ascending,
        SCAN_PAGE
    ));
    let (mut passed, mut ours) = (0, 0);
    while let Some((key, raw)) = entries.try_next().await? {
        passed += 1;
        if let Some(&at) = index.get(&key[prefix.len()..]) {
            ours += 1;
            found[at] = succeeded(&key, Some(&raw));
        }
        if passed > 2 * ours + SCAN_SLACK {
            break;
        }
    }
    Ok(found)
}

/// The records of one item. The marker is read first: a success marker is
/// final (an item with one is never enqueued again, and its terminal
/// transaction deleted its active record), so a finished item costs one read.
/// Otherwise the active record: present, the item's job is still queued or
/// running. Absent, no job of the item is live, but one may have ended between
/// the two reads (its marker is written in the transaction that deletes its
/// active record), so the marker is read again: only a success there answers;
/// anything else is enqueued.
async fn look_up(
    services: &Services,
    batch_id: &str,
    key: &str,
    want_output: bool,
) -> Result<Found> {
    let queue = services.queue()?;
    let marker_key = keys::item_marker_key(batch_id, key);
    if let Some(marker) = succeeded(
        &marker_key,
        queue.view().kv_get(&marker_key).await?.as_deref(),
    ) {
        return Ok(answer(services, marker, want_output).await);
    }
    let active_key = keys::item_active_key(batch_id, key);
    if let Some(job_id) = queue.view().kv_get(&active_key).await? {
        return Ok(Found::Active(String::from_utf8_lossy(&job_id).into_owned()));
    }
    match succeeded(
        &marker_key,
        queue.view().kv_get(&marker_key).await?.as_deref(),
    ) {
        Some(marker) => Ok(answer(services, marker, want_output).await),
        None => Ok(Found::Absent),
    }
}

/// A marker that answers its item: decodable and a success.
fn succeeded(key: &[u8], raw: Option<&[u8]>) -> Option<ItemMarker> {
    let marker = records::decode::<ItemMarker>(key, raw?).ok()?;
    (marker.status == ItemStatus::Succeeded).then_some(marker)
}

/// An item answered by its success marker, with its output's bytes when the
/// run has a sink.
async fn answer(services: &Services, mut marker: ItemMarker, want_output: bool) -> Found {
    let output = if want_output {
        Some(output_of(services, marker.output.take()).await)
    } else {
        None
    };
    Found::Answered(marker, output)
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
            sink: None,
            finishing: false,
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
                state.sink = state
                    .spec
                    .sink
                    .clone()
                    .map(|sink| SinkWriter::start(sink, state.spec.batch_id.clone()));
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
            CoordinatorMessage::SinkFlushed(report) => state.complete(&myself, Some(report)).await,
        }
        Ok(())
    }
}

async fn fail(state: &mut CoordinatorState, myself: &ActorRef<CoordinatorMessage>, e: EngineError) {
    warn!(batch_id = %state.spec.batch_id, error = %e, "batch run failed; resume it to continue");
    state.end(myself, Err(e));
}
