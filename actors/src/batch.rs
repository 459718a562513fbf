//! Batches, bytes-level: the manifest (written in chunks, created once),
//! status from the item markers, forgetting, and the driver that runs a batch
//! through its coordinator.
//!
//! A run has two phases. (1) The manifest: inputs are consumed as an iterator,
//! cut into chunks and written (or, for an existing batch, compared chunk by
//! chunk), so memory never holds more than a chunk; duplicate keys are found
//! here, before any item is enqueued. (2) The coordinator enqueues the items
//! chunk by chunk, many per transaction, keeping at most a window of items
//! outstanding, and counts their settlements as they are pushed to it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use ractor::{ActorRef, RpcReplyPort};
use sha2::{Digest, Sha256};
use taquba::{KvOrder, SettlementEffects};

use crate::batches::BatchesMessage;
use crate::coordinator::CoordinatorMessage;
use crate::error::{EngineError, Result};
use crate::keys;
use crate::memo::delete_prefix;
use crate::records::{
    self, BatchHead, Cost, ItemMarker, ItemStatus, ManifestChunk, ManifestItem, OutputRef,
    merge_cost,
};
use crate::services::Services;
use crate::{EngineMessage, EngineRef};

/// Items per manifest chunk (at most).
pub const CHUNK_ITEMS: usize = 1000;
/// Bytes per manifest chunk (about; a single larger item gets its own chunk).
pub const CHUNK_BYTES: usize = 192 * 1024;
/// Manifest chunks written per transaction.
const CHUNKS_PER_COMMIT: usize = 8;

/// One item's record, as a sink receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemRecord<'a> {
    /// The item succeeded with this encoded output.
    Succeeded {
        /// The encoded output.
        output: &'a [u8],
    },
    /// The item failed.
    Failed {
        /// Why.
        error: &'a str,
    },
    /// The item was cancelled.
    Cancelled,
    /// The item succeeded but its output could not be read (its blob is
    /// missing or the store failed): counted in
    /// [`BatchOutcome::sink_errors`] and named in
    /// [`BatchOutcome::sink_error_keys`]. A later run reads it again.
    OutputUnavailable {
        /// Why it could not be read.
        error: &'a str,
    },
}

/// Receives one record per item per run, in order, on a thread of the run's
/// own (writes may block: a slow disk holds up only the sink, never the
/// engine).
pub trait RecordSink: Send + Sync + 'static {
    /// One item's record. An `Err` is counted in
    /// [`BatchOutcome::sink_errors`], the key named in
    /// [`BatchOutcome::sink_error_keys`], and logged; the run goes on.
    fn write(&self, key: &str, record: ItemRecord<'_>) -> std::result::Result<(), String>;
    /// Called once when the run completes, after its last record.
    fn flush(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// How to run a batch.
#[derive(Clone)]
pub struct BatchSpec {
    /// Batch id.
    pub batch_id: String,
    /// Pipeline name.
    pub pipeline: String,
    /// Headers stored on every item (no `gaffer.` prefix).
    pub headers: HashMap<String, String>,
    /// Where item records go.
    pub sink: Option<Arc<dyn RecordSink>>,
    /// Remove the batch this long after it completes.
    pub retention: Option<Duration>,
    /// Items outstanding (enqueued, not yet settled) at most.
    pub window: usize,
}

impl std::fmt::Debug for BatchSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchSpec")
            .field("batch_id", &self.batch_id)
            .field("pipeline", &self.pipeline)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// What a completed run counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchOutcome {
    /// Items in the manifest.
    pub total: u64,
    /// Succeeded (in this run or answered from an earlier run's marker).
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Cost rollup.
    pub cost: Cost,
    /// Keys of failed items, in completion order.
    pub failed_keys: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Item records the sink rejected, or could not be given as they are
    /// (an output that could not be read).
    pub sink_errors: u64,
    /// Keys of those items, in order.
    pub sink_error_keys: Vec<String>,
}

/// The message an actor that ran a batch by `RunBatchAndTell`, or watches it
/// by `WatchBatch`, receives when the run ends.
#[derive(Debug, Clone)]
pub struct BatchFinished {
    /// The batch.
    pub batch_id: String,
    /// Its outcome, or why the run failed.
    pub result: std::result::Result<BatchOutcome, EngineError>,
}

/// A running batch's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchProgress {
    /// Items in the manifest (so far, while the manifest is written).
    pub total: u64,
    /// Succeeded.
    pub succeeded: u64,
    /// Failed.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Since the run started.
    pub elapsed: Duration,
    /// Cost rollup.
    pub cost: Cost,
}

/// What the markers of a batch say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchState {
    /// Items in the manifest.
    pub total: u64,
    /// Items whose latest marker is a success.
    pub succeeded: u64,
    /// Items whose latest marker is a failure.
    pub failed: u64,
    /// Items whose latest marker is a cancel.
    pub cancelled: u64,
    /// Items queued or running now.
    pub active: u64,
    /// Cost rollup of the markers.
    pub cost: Cost,
    /// Failed keys, in key order.
    pub failed_keys: Vec<String>,
}

/// Whether `id` is an acceptable batch id.
pub fn check_batch_id(id: &str) -> Result<()> {
    if keys::is_valid_id(id) {
        Ok(())
    } else {
        Err(EngineError::InvalidBatchId(id.to_string()))
    }
}

/// Whether `key` is an acceptable item key.
pub fn check_item_key(key: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(EngineError::InvalidItemKey {
            key: key.chars().take(64).collect(),
            reason: reason.into(),
        })
    };
    if key.is_empty() {
        return bad("an item key must not be empty");
    }
    if key.len() > keys::MAX_ITEM_KEY_LEN {
        return bad("an item key must be at most 1024 bytes");
    }
    if key.contains('\0') {
        return bad("an item key must not contain NUL");
    }
    Ok(())
}

async fn read_head(services: &Services, batch_id: &str) -> Result<Option<(BatchHead, Vec<u8>)>> {
    let key = keys::batch_head_key(batch_id);
    match services.queue()?.view().kv_get(&key).await? {
        Some(raw) => Ok(Some((records::decode(&key, &raw)?, raw.to_vec()))),
        None => Ok(None),
    }
}

/// The head of a batch, if it exists.
pub async fn batch_head(services: &Services, batch_id: &str) -> Result<Option<BatchHead>> {
    check_batch_id(batch_id)?;
    Ok(read_head(services, batch_id).await?.map(|(h, _)| h))
}

/// Read manifest chunk `index`.
pub async fn read_chunk(services: &Services, batch_id: &str, index: u32) -> Result<ManifestChunk> {
    with_chunk(services, batch_id, index, |key, raw| {
        records::decode(key, raw)
    })
    .await
}

/// Apply `f` to the key and stored bytes of manifest chunk `index`.
async fn with_chunk<T>(
    services: &Services,
    batch_id: &str,
    index: u32,
    f: impl FnOnce(&[u8], &[u8]) -> Result<T>,
) -> Result<T> {
    let key = keys::manifest_chunk_key(batch_id, index);
    match services.queue()?.view().kv_get(&key).await? {
        Some(raw) => f(&key, &raw),
        None => Err(EngineError::CorruptRecord {
            key: String::from_utf8_lossy(&key).into_owned(),
            reason: "manifest chunk missing".into(),
        }),
    }
}

/// Writes (fresh batch) or verifies (existing batch) a manifest from a stream
/// of items.
struct ManifestWriter<'a> {
    services: &'a Services,
    batch_id: &'a str,
    /// `Some(head)` when the batch exists complete: verify instead of write.
    existing: Option<(BatchHead, Vec<u8>)>,
    chunk: Vec<ManifestItem>,
    chunk_bytes: usize,
    index: u32,
    pending: Vec<(u32, Vec<u8>)>,
    digest: Sha256,
    total: u64,
    seen: HashSet<u128, BuildHasherDefault<KeyHashHasher>>,
}

/// The hasher of the duplicate-key set: its entries are the first 16 bytes of
/// a SHA-256 already, so their low 64 bits serve as the hash as they are.
#[derive(Default)]
struct KeyHashHasher(u64);

impl Hasher for KeyHashHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 ^= v as u64;
    }
}

impl ManifestWriter<'_> {
    async fn push(&mut self, key: String, input: Vec<u8>) -> Result<()> {
        check_item_key(&key)?;
        let h: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let mut short = [0u8; 16];
        short.copy_from_slice(&h[..16]);
        if !self.seen.insert(u128::from_le_bytes(short)) {
            return Err(EngineError::DuplicateItemKey(key));
        }
        self.digest.update((key.len() as u64).to_be_bytes());
        self.digest.update(key.as_bytes());
        self.digest.update((input.len() as u64).to_be_bytes());
        self.digest.update(&input);
        self.total += 1;
        let size = key.len() + input.len() + 16;
        if !self.chunk.is_empty()
            && (self.chunk.len() >= CHUNK_ITEMS || self.chunk_bytes + size > CHUNK_BYTES)
        {
            self.cut().await?;
        }
        self.chunk_bytes += size;
        self.chunk.push(ManifestItem { key, input });
        Ok(())
    }

    async fn cut(&mut self) -> Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        let chunk = ManifestChunk {
            items: std::mem::take(&mut self.chunk),
        };
        self.chunk_bytes = 0;
        let bytes = records::encode(&chunk)?;
        if bytes.len() > taquba::MAX_KV_VALUE_SIZE {
            return Err(EngineError::ValueTooLarge {
                size: bytes.len(),
                max: taquba::MAX_KV_VALUE_SIZE,
            });
        }
        let index = self.index;
        self.index += 1;
        if let Some((head, _)) = &self.existing {
            if index >= head.chunks {
                return Err(EngineError::BatchMismatch(self.batch_id.to_string()));
            }
            // Equal bytes are an equal chunk (the encoding is deterministic);
            // other bytes are decoded and compared, in case an equal chunk was
            // encoded differently.
            let same = with_chunk(self.services, self.batch_id, index, |key, stored| {
                Ok(stored == &bytes[..] || records::decode::<ManifestChunk>(key, stored)? == chunk)
            })
            .await?;
            if !same {
                return Err(EngineError::BatchMismatch(self.batch_id.to_string()));
            }
            return Ok(());
        }
        self.pending.push((index, bytes));
        if self.pending.len() >= CHUNKS_PER_COMMIT {
            self.commit().await?;
        }
        Ok(())
    }

    async fn commit(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut fx = SettlementEffects::default();
        for (index, bytes) in self.pending.drain(..) {
            fx = fx.kv_put(keys::manifest_chunk_key(self.batch_id, index), bytes);
        }
        self.services.queue()?.commit_effects(fx).await?;
        Ok(())
    }
}

/// Phase 1 of `run`: write (or verify) the manifest from `items`. Returns the
/// head, complete, with a new generation.
pub async fn write_manifest<I>(services: &Services, spec: &BatchSpec, items: I) -> Result<BatchHead>
where
    I: futures_util::Stream<Item = Result<(String, Vec<u8>)>> + Unpin,
{
    check_batch_id(&spec.batch_id)?;
    if let Some(h) = spec
        .headers
        .keys()
        .find(|h| h.starts_with(keys::RESERVED_HEADER_PREFIX))
    {
        return Err(EngineError::ReservedHeader(h.clone()));
    }
    let queue = services.queue()?;
    let head_key = keys::batch_head_key(&spec.batch_id);
    let existing = read_head(services, &spec.batch_id).await?;
    let existing = match existing {
        Some((head, raw)) if head.complete => {
            if head.pipeline != spec.pipeline {
                return Err(EngineError::BatchMismatch(spec.batch_id.clone()));
            }
            Some((head, raw))
        }
        // An interrupted first run: its manifest is rewritten (nothing of it was
        // enqueued: items are enqueued only once the manifest is complete).
        Some(_) => None,
        None => {
            let head = BatchHead {
                pipeline: spec.pipeline.clone(),
                complete: false,
                total: 0,
                chunks: 0,
                digest: [0; 32],
                generation: 0,
                headers: spec.headers.clone(),
            };
            let compares: [(&[u8], Option<&[u8]>); 1] = [(&head_key, None)];
            let fx = SettlementEffects::default().kv_put(head_key.clone(), records::encode(&head)?);
            if queue.kv_compare_commit(&compares, fx).await?.is_none() {
                // Created by someone else in between: only another process could,
                // and taquba fences it; report the race instead of guessing.
                return Err(EngineError::BatchRunning(spec.batch_id.clone()));
            }
            None
        }
    };
    // A re-run knows how many keys to expect (capped: the items may differ).
    let expected = existing
        .as_ref()
        .map_or(0, |(head, _)| head.total.min(1 << 20)) as usize;
    let mut w = ManifestWriter {
        services,
        batch_id: &spec.batch_id,
        existing,
        chunk: Vec::new(),
        chunk_bytes: 0,
        index: 0,
        pending: Vec::new(),
        digest: Sha256::new(),
        total: 0,
        seen: HashSet::with_capacity_and_hasher(expected, Default::default()),
    };
    let mut items = items;
    while let Some(item) = futures_util::StreamExt::next(&mut items).await {
        let (key, input) = item?;
        w.push(key, input).await?;
    }
    w.cut().await?;
    w.commit().await?;
    let digest: [u8; 32] = w.digest.finalize().into();
    let chunks = w.index;
    let (mut head, expected_raw) = match w.existing {
        Some((head, raw)) => {
            if head.total != w.total || head.chunks != chunks || head.digest != digest {
                return Err(EngineError::BatchMismatch(spec.batch_id.clone()));
            }
            (head, Some(raw))
        }
        None => {
            // Remove chunks of an interrupted earlier manifest beyond this one.
            let stale: Vec<(Vec<u8>, _)> = queue
                .view()
                .kv_entries(
                    &keys::manifest_prefix(&spec.batch_id),
                    ..,
                    KvOrder::Ascending,
                    256,
                )
                .try_collect()
                .await?;
            let keep: HashSet<Vec<u8>> = (0..chunks)
                .map(|i| keys::manifest_chunk_key(&spec.batch_id, i))
                .collect();
            let mut fx = SettlementEffects::default();
            for (k, _) in stale {
                if !keep.contains(&k) {
                    fx = fx.kv_delete(k);
                }
            }
            if !fx.kv_deletes.is_empty() {
                queue.commit_effects(fx).await?;
            }
            let raw = queue.view().kv_get(&head_key).await?.map(|b| b.to_vec());
            let head = BatchHead {
                pipeline: spec.pipeline.clone(),
                complete: true,
                total: w.total,
                chunks,
                digest,
                generation: 0,
                headers: spec.headers.clone(),
            };
            (head, raw)
        }
    };
    head.generation += 1;
    commit_head(services, &spec.batch_id, &head, expected_raw).await?;
    Ok(head)
}

async fn commit_head(
    services: &Services,
    batch_id: &str,
    head: &BatchHead,
    expected: Option<Vec<u8>>,
) -> Result<()> {
    let key = keys::batch_head_key(batch_id);
    let compares: [(&[u8], Option<&[u8]>); 1] = [(&key, expected.as_deref())];
    let fx = SettlementEffects::default().kv_put(key.clone(), records::encode(head)?);
    match services.queue()?.kv_compare_commit(&compares, fx).await? {
        Some(_) => Ok(()),
        None => Err(EngineError::BatchRunning(batch_id.to_string())),
    }
}

/// `resume`: the existing, complete manifest, with a new generation.
pub async fn reopen_manifest(services: &Services, batch_id: &str) -> Result<BatchHead> {
    check_batch_id(batch_id)?;
    let Some((mut head, raw)) = read_head(services, batch_id).await? else {
        return Err(EngineError::BatchNotFound(batch_id.to_string()));
    };
    if !head.complete {
        return Err(EngineError::BatchIncomplete(batch_id.to_string()));
    }
    head.generation += 1;
    commit_head(services, batch_id, &head, Some(raw)).await?;
    Ok(head)
}

/// What the durable records of a batch say (works without a run, after a restart).
pub async fn batch_state(services: &Services, batch_id: &str) -> Result<BatchState> {
    let Some(head) = batch_head(services, batch_id).await? else {
        return Err(EngineError::BatchNotFound(batch_id.to_string()));
    };
    let queue = services.queue()?;
    let mut state = BatchState {
        total: head.total,
        ..Default::default()
    };
    let prefix = keys::item_marker_prefix(batch_id);
    let mut markers = std::pin::pin!(queue.view().kv_entries(
        &prefix,
        ..,
        KvOrder::Ascending,
        1000
    ));
    while let Some((key, raw)) = markers.try_next().await? {
        let Ok(marker) = records::decode::<ItemMarker>(&key, &raw) else {
            tracing::warn!(key = %String::from_utf8_lossy(&key), "undecodable item marker skipped");
            continue;
        };
        merge_cost(&mut state.cost, &marker.cost);
        match marker.status {
            ItemStatus::Succeeded => state.succeeded += 1,
            ItemStatus::Cancelled => state.cancelled += 1,
            ItemStatus::Failed => {
                state.failed += 1;
                state
                    .failed_keys
                    .push(String::from_utf8_lossy(&key[prefix.len()..]).into_owned());
            }
        }
    }
    state.active = count_prefix(services, &keys::item_active_prefix(batch_id)).await? as u64;
    Ok(state)
}

async fn count_prefix(services: &Services, prefix: &[u8]) -> Result<usize> {
    let queue = services.queue()?;
    let mut n = 0;
    let mut entries = std::pin::pin!(
        queue
            .view()
            .kv_entries(prefix, .., KvOrder::Ascending, 1000)
    );
    while entries.try_next().await?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Remove everything a batch wrote: markers, manifest, head, memo entries and
/// output blobs. Refuses while items are queued or running. The caller holds
/// the batch's in-process lock.
pub async fn forget_batch_data(services: &Services, batch_id: &str) -> Result<bool> {
    check_batch_id(batch_id)?;
    let active = count_prefix(services, &keys::item_active_prefix(batch_id)).await?;
    if active > 0 {
        return Err(EngineError::BatchActive {
            batch_id: batch_id.to_string(),
            active,
        });
    }
    let queue = services.queue()?;
    let existed = queue
        .view()
        .kv_get(&keys::batch_head_key(batch_id))
        .await?
        .is_some();
    // Objects first: if this fails half way the KV records still say the batch
    // exists, and forgetting it again finishes the job.
    delete_prefix(
        services.store(),
        &keys::batch_blob_dir(&services.settings().blob_prefix, batch_id),
    )
    .await?;
    let prefix = keys::batch_prefix(batch_id);
    let head = keys::batch_head_key(batch_id);
    loop {
        let page = queue
            .view()
            .kv_scan(&prefix, .., KvOrder::Ascending, 1000)
            .await?;
        let mut fx = SettlementEffects::default();
        for (k, _) in &page.entries {
            if *k != head {
                fx = fx.kv_delete(k.clone());
            }
        }
        if fx.kv_deletes.is_empty() {
            break;
        }
        queue.commit_effects(fx).await?;
    }
    queue.kv_delete(&head).await?;
    Ok(existed)
}

/// The bytes of a succeeded item's output (taken from its marker): inline
/// bytes as they are, a blob fetched. An error says why they cannot be had.
pub(crate) async fn output_of(
    services: &Services,
    output: Option<OutputRef>,
) -> std::result::Result<Vec<u8>, String> {
    match output {
        Some(OutputRef::Inline(b)) => Ok(b),
        Some(out @ OutputRef::Blob(_)) => services
            .output_bytes(&out)
            .await
            .map_err(|e| format!("the item's output could not be read: {e}")),
        None => Err("the item's marker holds no output".into()),
    }
}

/// Run (inputs given) or resume (inputs `None`) a batch to completion: the
/// driver of both the typed API and the `RunBatch` message.
pub async fn drive_batch<I>(
    engine: &EngineRef,
    spec: BatchSpec,
    items: Option<I>,
) -> Result<BatchOutcome>
where
    I: futures_util::Stream<Item = Result<(String, Vec<u8>)>> + Unpin,
{
    check_batch_id(&spec.batch_id)?;
    let coordinator = start_coordinator(engine, spec.clone(), None).await?;
    // Dropping this future (or an error below) ends the run: the coordinator
    // stops; queued items keep running and `resume` completes them.
    let mut run = Run {
        engine: engine.actor().clone(),
        batch_id: spec.batch_id.clone(),
        coordinator: Some(coordinator.clone()),
    };
    let services = engine.services();
    let head = match items {
        Some(items) => write_manifest(services, &spec, items).await,
        None => reopen_manifest(services, &spec.batch_id).await,
    };
    let mut head = match head {
        Ok(head) => head,
        // Deregister before answering, so the caller can retry at once.
        Err(e) => return Err(run.end(e).await),
    };
    let mut coordinator = coordinator;
    let mut restarts = 0;
    loop {
        match ractor::call!(
            coordinator,
            CoordinatorMessage::Begin,
            Box::new(head.clone())
        ) {
            Ok(outcome) => {
                // The coordinator answered, so it finished (or failed) on its
                // own and left the registry.
                run.coordinator = None;
                return outcome;
            }
            Err(e) if restarts < MAX_COORDINATOR_RESTARTS => {
                // The coordinator died (it failed, or its registry restarted):
                // a new one rebuilds the counts from the markers, as a resume
                // does. The sink may see some items twice (consumers dedupe on
                // key, as for every re-run).
                restarts += 1;
                tracing::warn!(batch_id = %spec.batch_id, error = %e, restarts, "batch coordinator died; resuming the run with a new one");
                let dead = coordinator.get_id();
                coordinator = match start_coordinator(engine, spec.clone(), Some(dead)).await {
                    Ok(c) => c,
                    Err(e) => {
                        run.coordinator = None;
                        return Err(run.end(e).await);
                    }
                };
                run.coordinator = Some(coordinator.clone());
                head = match reopen_manifest(services, &spec.batch_id).await {
                    Ok(h) => h,
                    Err(e) => return Err(run.end(e).await),
                };
            }
            Err(e) => {
                let e = EngineError::ActorUnavailable(format!("batch coordinator: {e}"));
                return Err(run.end(e).await);
            }
        }
    }
}

/// Resume a batch from its manifest to completion.
pub async fn resume_batch(engine: &EngineRef, spec: BatchSpec) -> Result<BatchOutcome> {
    drive_batch(engine, spec, None::<futures_util::stream::Empty<_>>).await
}

/// Times a run replaces a coordinator that died under it.
const MAX_COORDINATOR_RESTARTS: usize = 3;

/// A run in progress: while its coordinator is set, dropping it ends the run
/// as abandoned (the coordinator stops, the batch's watchers are told).
struct Run {
    engine: ActorRef<EngineMessage>,
    batch_id: String,
    coordinator: Option<ActorRef<CoordinatorMessage>>,
}

impl Run {
    /// End the run with `error` (its coordinator leaves the registry and the
    /// batch's watchers are told) and return the error.
    async fn end(&mut self, error: EngineError) -> EngineError {
        let coordinator = self.coordinator.take().map(|c| c.get_id());
        let _ = ractor::call!(
            self.engine,
            EngineMessage::ReleaseBatch,
            self.batch_id.clone(),
            coordinator,
            error.clone()
        );
        error
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(c) = self.coordinator.take() {
            let (reply, _) = tokio::sync::oneshot::channel::<()>();
            let _ = self.engine.cast(EngineMessage::ReleaseBatch(
                self.batch_id.clone(),
                Some(c.get_id()),
                EngineError::BatchAbandoned(self.batch_id.clone()),
                reply.into(),
            ));
        }
    }
}

/// Start a coordinator for a run of `spec`; `replacing` names a coordinator
/// of this run that died (the new one starts once the registry saw it go).
async fn start_coordinator(
    engine: &EngineRef,
    spec: BatchSpec,
    replacing: Option<ractor::ActorId>,
) -> Result<ActorRef<CoordinatorMessage>> {
    ractor::call!(
        engine.actor(),
        EngineMessage::StartBatch,
        Box::new(spec),
        replacing
    )
    .map_err(|e| {
        if engine.actor().get_status() == ractor::ActorStatus::Running {
            EngineError::ActorUnavailable(format!("the batches registry: {e}"))
        } else {
            EngineError::ShutDown
        }
    })?
}

/// Forget a batch under its in-process lock (no run may start meanwhile).
pub async fn forget(
    services: &Services,
    batches: &ActorRef<BatchesMessage>,
    batch_id: &str,
) -> Result<bool> {
    check_batch_id(batch_id)?;
    let locked = ractor::call!(batches, BatchesMessage::Lock, batch_id.to_string())
        .map_err(|e| EngineError::ActorUnavailable(e.to_string()))?;
    if !locked {
        return Err(EngineError::BatchRunning(batch_id.to_string()));
    }
    let result = forget_batch_data(services, batch_id).await;
    let _ = batches.cast(BatchesMessage::Unlock(batch_id.to_string()));
    result
}

/// A reply port for batch results (re-exported for the protocol).
pub type BatchReply = RpcReplyPort<Result<BatchOutcome>>;
