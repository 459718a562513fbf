//! What a store holds past its writer's last memtable flush, read straight
//! from the WAL objects instead of replayed.
//!
//! A `QueueReader` that replays the WAL rebuilds, at every open, a memtable
//! from every WAL object written since the writer's last memtable flush.
//! SlateDB flushes the memtable once it holds 64 MiB or after 4 096 WAL
//! flushes (`l0_sst_size_bytes`, `max_wal_flushes_before_l0_flush`; taquba
//! 0.16 sets neither), so beside a live engine that is up to thousands of
//! objects, about a millisecond of CPU each, whatever the command. `health`
//! and `stats` need three things of them: the newest liveness beat, the
//! job counters' changes and, for a queue with ready jobs, the changes to
//! its ready (pending) jobs, whose first is its oldest ready job. Those
//! commands open the reader without the replay (it then sees the flushed
//! state) and read them here through SlateDB's [`WalReader`]: `health` the
//! newest objects back to the first with a beat (a live writer beats every
//! few seconds), `stats` every unflushed object, several at once, keeping
//! only the counter rows and the pending rows.
//!
//! They mirror taquba 0.16's private layout (the heartbeat key and its
//! MessagePack record, the stats keys and their i64 counters, summed by
//! merge, the pending keys in claim order). `cli/tests/cli.rs` compares
//! what they give with a replaying `QueueReader`'s answer on a live engine,
//! so a taquba that moves them fails there.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use gaffer_layout::records;
use serde::Deserialize;
use slatedb::{RowEntry, ValueDeletable, WalReader};
use taquba::WriterHeartbeat;
use taquba::object_store::ObjectStore;
use tokio::task::JoinSet;

use crate::error::OpsError;

mod pending;
pub use pending::{PendingChanges, PendingKey};
use pending::{fold_pending, is_pending};
mod start;
pub use start::AtStart;
mod watch;
pub use watch::{Advance, Tail};

/// taquba 0.16's key version byte (`keys::KEY_VERSION`).
const KEY_VERSION: u8 = 1;
/// taquba 0.16's pending key tag: `[tag, ver, qlen, queue, priority (u32
/// BE), enqueued_at (u64 BE), id]`, so in claim order within a queue; the
/// value is the job's record (not read here).
const TAG_PENDING: u8 = 0x01;
/// taquba 0.16's stats key tag: `[tag, ver, qlen, queue, metric]`, an i64
/// (little-endian) that merges add to.
const TAG_STATS: u8 = 0x09;
/// taquba 0.16's heartbeat key tag: `[tag, ver]`, one key per store.
const TAG_HEARTBEAT: u8 = 0x0B;
/// taquba 0.16's user KV tag: `[tag, caller's key]`, no version byte.
const TAG_USER: u8 = 0xFF;

/// WAL objects read at once.
const PARALLEL_READS: usize = 16;

/// taquba 0.16's stored beat (`liveness::HeartbeatRecord`).
#[derive(Deserialize)]
struct BeatRecord {
    counter: u64,
    at_ms: u64,
    interval_ms: u64,
    writer_epoch: u64,
    closed: bool,
}

/// The WAL objects past the last memtable flush of the manifest read.
pub struct Unflushed {
    wal: Arc<WalReader>,
    /// The store and the queue's path in it (the WAL objects' listing).
    store: Arc<dyn ObjectStore>,
    path: String,
    /// Their ids: after the manifest's `replay_after_wal_id`, through the
    /// newest that existed when looked for.
    ids: Range<u64>,
}

/// A beat found in the WAL.
pub struct Beat {
    /// Its commit's sequence number.
    pub seq: u64,
    /// The beat (`None`: deleted).
    pub beat: Option<WriterHeartbeat>,
}

/// What the WAL holds for a counter past the flushed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Merges to add to the flushed value.
    Add(i64),
    /// Written over (a put, or a delete as 0), then merges added.
    Set(i64),
}

impl Counter {
    /// The counter's value over its flushed value.
    pub fn over(self, flushed: i64) -> i64 {
        match self {
            Self::Add(d) => flushed.saturating_add(d),
            Self::Set(v) => v,
        }
    }
}

impl Unflushed {
    /// The unflushed WAL of the queue at `path`, which the manifest read
    /// last says follows WAL object `after`. Finds the newest object by
    /// probing ids (WAL ids are consecutive), not by listing: the WAL
    /// directory keeps flushed objects for minutes after their flush.
    pub async fn find(
        store: Arc<dyn ObjectStore>,
        path: &str,
        after: u64,
    ) -> Result<Self, OpsError> {
        let wal = Arc::new(WalReader::new(path, store.clone()));
        let newest = newest_id(&wal, after).await?;
        Ok(Self {
            wal,
            store,
            path: path.to_string(),
            ids: after + 1..newest + 1,
        })
    }

    /// How many WAL objects a replay would read.
    pub fn objects(&self) -> u64 {
        self.ids.end - self.ids.start
    }

    /// The newest beat in the WAL, and the highest sequence number the WAL
    /// holds (`None` when it holds no row): the newest objects are read
    /// first, back to the first that holds a beat (one, then twice as many
    /// at once each round, up to [`PARALLEL_READS`]: beside an idle writer
    /// the newest object is its beat).
    pub async fn newest_beat(&self) -> Result<(Option<Beat>, Option<u64>), OpsError> {
        let mut newest_seq = None;
        let mut end = self.ids.end;
        let mut chunk = 1u64;
        while end > self.ids.start {
            let start = end.saturating_sub(chunk).max(self.ids.start);
            chunk = (chunk * 2).min(PARALLEL_READS as u64);
            let read = self.read(start..end, is_beat).await?;
            // Newest object first: the first seq found is the durable one.
            newest_seq = newest_seq.or_else(|| read.iter().find_map(|r| r.max_seq));
            let beat = read.into_iter().flat_map(|r| r.rows).max_by_key(|r| r.seq);
            if let Some(row) = beat {
                let beat = match &row.value {
                    ValueDeletable::Value(bytes) => {
                        let r: BeatRecord = records::from_msgpack(bytes)
                            .map_err(|e| OpsError::BadRecord(format!("the heartbeat: {e}")))?;
                        Some(WriterHeartbeat {
                            counter: r.counter,
                            at_ms: r.at_ms,
                            interval: std::time::Duration::from_millis(r.interval_ms),
                            writer_epoch: r.writer_epoch,
                            closed: r.closed,
                        })
                    }
                    // Deleted: no beat, as a replay would find.
                    _ => None,
                };
                let seq = row.seq;
                return Ok((Some(Beat { seq, beat }), newest_seq));
            }
            end = start;
        }
        Ok((None, newest_seq))
    }

    /// The value the WAL holds for the user KV key `key` (`None`: none),
    /// for a marker written once and never changed (gaffer's layout and
    /// shard markers, written at the store's first start): the oldest
    /// objects are read first, a few at once, up to the first that holds
    /// it.
    pub async fn marker(&self, key: &[u8]) -> Result<Option<Vec<u8>>, OpsError> {
        let mut user_key = vec![TAG_USER];
        user_key.extend_from_slice(key);
        let user_key: Arc<[u8]> = user_key.into();
        let mut start = self.ids.start;
        while start < self.ids.end {
            let end = start
                .saturating_add(PARALLEL_READS as u64)
                .min(self.ids.end);
            let wanted = user_key.clone();
            let read = self
                .read(start..end, move |r| r.key.as_ref() == &wanted[..])
                .await?;
            if let Some(row) = read.into_iter().flat_map(|r| r.rows).max_by_key(|r| r.seq) {
                return Ok(match row.value {
                    ValueDeletable::Value(v) => Some(v.to_vec()),
                    _ => None,
                });
            }
            start = end;
        }
        Ok(None)
    }

    /// The newest value the WAL holds for the user KV key `key`, if it was
    /// written since the last memtable flush, with the counter changes
    /// committed after it: the newest objects are read first, back to the
    /// first that holds the key. When none does, every object was read, and
    /// the counter and pending changes are all those above `above_seq` (as
    /// [`Self::changes`] gives them, without a second read).
    pub async fn newest_or_counters(&self, key: &[u8], above_seq: u64) -> Result<Newest, OpsError> {
        let mut user_key = vec![TAG_USER];
        user_key.extend_from_slice(key);
        let user_key: Arc<[u8]> = user_key.into();
        let mut rows = Vec::new();
        let mut end = self.ids.end;
        let mut chunk = 1u64;
        while end > self.ids.start {
            let start = end.saturating_sub(chunk).max(self.ids.start);
            chunk = (chunk * 4).min(4 * PARALLEL_READS as u64);
            let wanted = user_key.clone();
            let read = self
                .read(start..end, move |r| {
                    r.key.as_ref() == &wanted[..] || is_counter(r) || is_pending(r)
                })
                .await?;
            let (found, rest): (Vec<RowEntry>, Vec<RowEntry>) = read
                .into_iter()
                .flat_map(|o| o.rows)
                .partition(|r| r.key.as_ref() == &user_key[..]);
            rows.extend(rest);
            if let Some(row) = found.into_iter().max_by_key(|r| r.seq)
                && let ValueDeletable::Value(v) = row.value
            {
                rows.retain(is_counter);
                return Ok(Newest::Found {
                    value: v.to_vec(),
                    since: fold_counters(rows, row.seq)?,
                });
            }
            end = start;
        }
        let (counters, pending) = rows.into_iter().partition(is_counter);
        Ok(Newest::Counters(
            fold_counters(counters, above_seq)?,
            fold_pending(pending, above_seq),
        ))
    }

    /// Every counter row the WAL holds above `above_seq` (the flushed
    /// state's sequence number), folded per `(queue, metric)` in commit
    /// order, and every pending row, as [`Self::pending`] folds them: one
    /// read.
    pub async fn changes(
        &self,
        above_seq: u64,
    ) -> Result<(BTreeMap<(String, String), Counter>, PendingChanges), OpsError> {
        let (counters, pending): (Vec<RowEntry>, Vec<RowEntry>) = self
            .read(self.ids.clone(), |r| is_counter(r) || is_pending(r))
            .await?
            .into_iter()
            .flat_map(|r| r.rows)
            .partition(is_counter);
        Ok((
            fold_counters(counters, above_seq)?,
            fold_pending(pending, above_seq),
        ))
    }

    /// Every pending row the WAL holds above `above_seq`, folded per queue
    /// and entry in commit order: which ready jobs were added and which
    /// left (claimed, cancelled, removed) since the flushed state.
    pub async fn pending(&self, above_seq: u64) -> Result<PendingChanges, OpsError> {
        let rows: Vec<RowEntry> = self
            .read(self.ids.clone(), is_pending)
            .await?
            .into_iter()
            .flat_map(|r| r.rows)
            .collect();
        Ok(fold_pending(rows, above_seq))
    }

    /// The objects of `ids`, each with the rows `keep` keeps, several read
    /// at once; newest object first.
    async fn read<K>(&self, ids: Range<u64>, keep: K) -> Result<Vec<Object>, OpsError>
    where
        K: Fn(&RowEntry) -> bool + Clone + Send + 'static,
    {
        self.read_objects(ids, keep).await.map_err(|e| match e {
            ReadFailed::Missing(e) => taquba::Error::from(e).into(),
            ReadFailed::Other(e) => e,
        })
    }

    /// [`Self::read`], telling a missing object (deleted since it was
    /// found) from other failures.
    async fn read_objects<K>(&self, ids: Range<u64>, keep: K) -> Result<Vec<Object>, ReadFailed>
    where
        K: Fn(&RowEntry) -> bool + Clone + Send + 'static,
    {
        // Not by the range: it is as long as the object names a store
        // holds make it (a run faked out to 2^62 ids asked for that much).
        let span = usize::try_from(ids.end - ids.start).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(span.min(1024));
        let mut next = ids.start;
        let mut reads = JoinSet::new();
        loop {
            while next < ids.end && reads.len() < PARALLEL_READS {
                let file = self.wal.get(next);
                let keep = keep.clone();
                reads.spawn(async move {
                    let mut iter = file.iterator().await?;
                    let mut object = Object {
                        id: file.id,
                        max_seq: None,
                        rows: Vec::new(),
                    };
                    while let Some(row) = iter.next().await? {
                        object.max_seq = object.max_seq.max(Some(row.seq));
                        if keep(&row) {
                            object.rows.push(row);
                        }
                    }
                    Ok::<_, slatedb::Error>(object)
                });
                next += 1;
            }
            match reads.join_next().await {
                None => break,
                Some(Ok(Ok(read))) => out.push(read),
                Some(Ok(Err(e))) if is_not_found(&e) => return Err(ReadFailed::Missing(e)),
                Some(Ok(Err(e))) => {
                    return Err(ReadFailed::Other(taquba::Error::from(e).into()));
                }
                Some(Err(e)) => {
                    return Err(ReadFailed::Other(OpsError::BadRecord(format!(
                        "a WAL object's read failed: {e}"
                    ))));
                }
            }
        }
        out.sort_by_key(|o| std::cmp::Reverse(o.id));
        Ok(out)
    }
}

/// What [`Unflushed::newest_or_counters`] found.
pub enum Newest {
    /// The key's newest value, and the counter changes committed after it.
    Found {
        /// The value.
        value: Vec<u8>,
        /// The counters' changes since, per `(queue, metric)`.
        since: BTreeMap<(String, String), Counter>,
    },
    /// The key is not in the WAL: every counter change it holds, and every
    /// change to the ready jobs.
    Counters(BTreeMap<(String, String), Counter>, PendingChanges),
}

/// Counter rows above `above_seq` (the flushed state's sequence number),
/// folded per `(queue, metric)` in commit order.
fn fold_counters(
    mut rows: Vec<RowEntry>,
    above_seq: u64,
) -> Result<BTreeMap<(String, String), Counter>, OpsError> {
    rows.retain(|r| r.seq > above_seq);
    rows.sort_by_key(|r| r.seq);
    let mut out = BTreeMap::new();
    for row in rows {
        let Some(name) = counter_name(&row.key) else {
            continue;
        };
        let now = out.get(&name).copied();
        let next = match (&row.value, now) {
            (ValueDeletable::Merge(op), now) => {
                let d = read_i64(op)?;
                match now {
                    None => Counter::Add(d),
                    Some(Counter::Add(a)) => Counter::Add(a.saturating_add(d)),
                    Some(Counter::Set(v)) => Counter::Set(v.saturating_add(d)),
                }
            }
            (ValueDeletable::Value(v), _) => Counter::Set(read_i64(v)?),
            (ValueDeletable::Tombstone, _) => Counter::Set(0),
        };
        out.insert(name, next);
    }
    Ok(out)
}

/// Why [`Unflushed::read_objects`] failed.
enum ReadFailed {
    /// An object was not found.
    Missing(slatedb::Error),
    /// Any other failure.
    Other(OpsError),
}

/// One WAL object read.
struct Object {
    id: u64,
    /// Its highest sequence number (`None`: no row, a fencing marker).
    max_seq: Option<u64>,
    /// The rows kept.
    rows: Vec<RowEntry>,
}

fn is_beat(row: &RowEntry) -> bool {
    row.key.as_ref() == [TAG_HEARTBEAT, KEY_VERSION]
}

fn is_counter(row: &RowEntry) -> bool {
    row.key.starts_with(&[TAG_STATS, KEY_VERSION])
}

/// `(queue, metric)` of a stats key.
fn counter_name(key: &[u8]) -> Option<(String, String)> {
    let rest = key.strip_prefix(&[TAG_STATS, KEY_VERSION])?;
    let (&len, rest) = rest.split_first()?;
    let queue = rest.get(..len as usize)?;
    let metric = rest.get(len as usize..)?;
    Some((
        String::from_utf8(queue.to_vec()).ok()?,
        String::from_utf8(metric.to_vec()).ok()?,
    ))
}

fn read_i64(bytes: &[u8]) -> Result<i64, OpsError> {
    bytes
        .try_into()
        .map(i64::from_le_bytes)
        .map_err(|_| OpsError::BadRecord(format!("a counter of {} bytes, not 8", bytes.len())))
}

/// Whether each WAL object of `ids` exists, all asked at once.
async fn exist(wal: &WalReader, ids: &[u64]) -> Result<Vec<bool>, OpsError> {
    let mut asks = JoinSet::new();
    for (i, &id) in ids.iter().enumerate() {
        let file = wal.get(id);
        asks.spawn(async move { (i, file.metadata().await) });
    }
    let mut out = vec![false; ids.len()];
    while let Some(asked) = asks.join_next().await {
        let (i, found) =
            asked.map_err(|e| OpsError::BadRecord(format!("a WAL probe failed: {e}")))?;
        out[i] = match found {
            Ok(_) => true,
            Err(e) if is_not_found(&e) => false,
            Err(e) => return Err(taquba::Error::from(e).into()),
        };
    }
    Ok(out)
}

/// Whether `e` is an object store's "not found" (SlateDB keeps it as the
/// source, shared in an `Arc`).
fn is_not_found(e: &slatedb::Error) -> bool {
    use taquba::object_store::Error as StoreError;
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        let found = s
            .downcast_ref::<Arc<StoreError>>()
            .map(|e| e.as_ref())
            .or_else(|| s.downcast_ref::<StoreError>());
        if let Some(StoreError::NotFound { .. }) = found {
            return true;
        }
        source = s.source();
    }
    false
}

/// Probes asked at once.
const PROBES: u64 = 16;

/// The newest WAL object after `after` (`after` itself when there is
/// none). WAL ids are consecutive, so the objects present are a run from
/// `after + 1`: ids `after + 2^k` are asked, [`PROBES`] at once, until one
/// is missing; then the gap between the last found and the first missing
/// is cut in [`PROBES`] parts each round. A few round trips where one per
/// id would be dozens on an object store.
async fn newest_id(wal: &WalReader, after: u64) -> Result<u64, OpsError> {
    let mut found = after;
    let mut missing = None;
    let mut exp = 0u32;
    while missing.is_none() {
        let ids: Vec<u64> = (exp..exp + PROBES as u32)
            .filter_map(|e| 1u64.checked_shl(e))
            .filter_map(|step| after.checked_add(step))
            .collect();
        if ids.is_empty() {
            return Ok(found);
        }
        (found, missing) = first_gap(&ids, &exist(wal, &ids).await?, found);
        exp += PROBES as u32;
    }
    let mut missing = missing.unwrap_or(found);
    while missing - found > 1 {
        let step = ((missing - found) / PROBES).max(1);
        let ids: Vec<u64> = (1..PROBES)
            .map(|i| found + i * step)
            .filter(|&id| id < missing)
            .collect();
        let (f, m) = first_gap(&ids, &exist(wal, &ids).await?, found);
        found = f;
        missing = m.unwrap_or(missing);
    }
    Ok(found)
}

/// Of ascending `ids` and whether each exists: the last found before the
/// first missing (`found` if none), and the first missing.
fn first_gap(ids: &[u64], present: &[bool], mut found: u64) -> (u64, Option<u64>) {
    for (&id, &here) in ids.iter().zip(present) {
        if !here {
            return (found, Some(id));
        }
        found = id;
    }
    (found, None)
}

#[cfg(test)]
mod tests;
