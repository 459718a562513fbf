//! The manifest of a batch: its items, written once in chunks (or, for a
//! batch that exists, compared chunk by chunk), and its head.
//!
//! Inputs are consumed as a stream and cut into chunks, so memory never holds
//! more than a chunk (plus 16 bytes per key while duplicates are looked for);
//! duplicate keys are found here, before any item is enqueued. No item is
//! enqueued before the manifest is complete.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use taquba::{KvOrder, SettlementEffects};

use crate::batches::spec::BatchSpec;
use crate::error::{EngineError, Result};
use crate::layout::keys;
use crate::layout::keys::{check_batch_id, check_item_key};
use crate::layout::records::{self, BatchHead, ManifestChunk, ManifestItem};
use crate::services::Services;

/// Items per manifest chunk (at most).
pub(crate) const CHUNK_ITEMS: usize = 1000;
/// Bytes per manifest chunk (about; a single larger item gets its own chunk).
pub(crate) const CHUNK_BYTES: usize = 192 * 1024;
/// Manifest chunks written per transaction.
const CHUNKS_PER_COMMIT: usize = 8;

async fn read_head(services: &Services, batch_id: &str) -> Result<Option<(BatchHead, Vec<u8>)>> {
    let key = keys::batch_head_key(batch_id);
    match services.queue()?.view().kv_get(&key).await? {
        Some(raw) => Ok(Some((records::decode(&key, &raw)?, raw.to_vec()))),
        None => Ok(None),
    }
}

/// Read manifest chunk `index`, its inputs as stored (sealed under the
/// engine's keyring): an item's queue job takes its input as it is.
pub(crate) async fn read_chunk(
    services: &Services,
    batch_id: &str,
    index: u32,
) -> Result<ManifestChunk> {
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
            reason: crate::layout::error::cause("manifest chunk missing"),
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
        let keyring = self.services.keyring();
        let bytes = records::encode(&chunk.clone().sealed(keyring)?)?;
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
            // encoded differently (or sealed: each seal has its own nonce).
            let same = with_chunk(self.services, self.batch_id, index, |key, stored| {
                Ok(stored == &bytes[..]
                    || records::decode::<ManifestChunk>(key, stored)?.opened(keyring)? == chunk)
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
pub(crate) async fn write_manifest<I>(
    services: &Services,
    spec: &BatchSpec,
    items: I,
) -> Result<BatchHead>
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
                return Err(EngineError::ConcurrentWriter(spec.batch_id.clone()));
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
        None => Err(EngineError::ConcurrentWriter(batch_id.to_string())),
    }
}

/// `resume`: the existing, complete manifest, with a new generation.
pub(crate) async fn reopen_manifest(services: &Services, batch_id: &str) -> Result<BatchHead> {
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
