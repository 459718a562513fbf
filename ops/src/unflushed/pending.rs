//! The WAL's changes to a queue's ready (pending) jobs: taquba 0.16's
//! pending keys read in claim order, folded over the unflushed objects.

use std::collections::BTreeMap;

use slatedb::{RowEntry, ValueDeletable};

use super::{KEY_VERSION, TAG_PENDING};

/// A ready job's place in its queue's claim order, as taquba 0.16's
/// pending key orders it: priority (lower first), then enqueue time, then
/// id (the derived order is the key's byte order).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PendingKey {
    /// Its priority bucket.
    pub priority: u32,
    /// When it was enqueued (epoch ms, the queue's clock).
    pub enqueued_at: u64,
    /// Its id.
    pub id: Vec<u8>,
}

impl PendingKey {
    /// The place of a ready job read from the store.
    pub fn of(job: &taquba::JobRecord) -> Self {
        Self {
            priority: job.priority,
            enqueued_at: job.enqueued_at,
            id: job.id.as_bytes().to_vec(),
        }
    }
}

/// The WAL's changes to the ready jobs past the flushed state: per queue,
/// each entry changed and whether it is there after its last change (a
/// put: enqueued, promoted, given back) or gone (a delete: claimed,
/// cancelled, removed).
#[derive(Debug, Clone, Default)]
pub struct PendingChanges(BTreeMap<String, BTreeMap<PendingKey, bool>>);

impl PendingChanges {
    /// The changes to `queue`'s ready jobs, in claim order (`None`: none).
    pub fn of(&self, queue: &str) -> Option<&BTreeMap<PendingKey, bool>> {
        self.0.get(queue)
    }

    /// How many entries changed, over every queue.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeMap::len).sum()
    }

    /// `later`'s changes over these (each entry's last change wins).
    pub fn extend(&mut self, later: PendingChanges) {
        for (queue, entries) in later.0 {
            self.0.entry(queue).or_default().extend(entries);
        }
    }
}

/// Pending rows above `above_seq`, folded per queue and entry in commit
/// order (a row whose key does not parse is left out).
pub(super) fn fold_pending(mut rows: Vec<RowEntry>, above_seq: u64) -> PendingChanges {
    rows.retain(|r| r.seq > above_seq);
    rows.sort_by_key(|r| r.seq);
    let mut out = PendingChanges::default();
    for row in rows {
        let Some((queue, key)) = pending_entry(&row.key) else {
            continue;
        };
        let there = match row.value {
            ValueDeletable::Value(_) => true,
            ValueDeletable::Tombstone => false,
            // taquba writes a pending key and deletes it; never merges.
            ValueDeletable::Merge(_) => continue,
        };
        out.0.entry(queue).or_default().insert(key, there);
    }
    out
}

pub(super) fn is_pending(row: &RowEntry) -> bool {
    row.key.starts_with(&[TAG_PENDING, KEY_VERSION])
}

/// The queue and the place in claim order of a pending key.
pub(super) fn pending_entry(key: &[u8]) -> Option<(String, PendingKey)> {
    let rest = key.strip_prefix(&[TAG_PENDING, KEY_VERSION])?;
    let (&len, rest) = rest.split_first()?;
    let queue = rest.get(..len as usize)?;
    let rest = rest.get(len as usize..)?;
    let priority = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let enqueued_at = u64::from_be_bytes(rest.get(4..12)?.try_into().ok()?);
    Some((
        String::from_utf8(queue.to_vec()).ok()?,
        PendingKey {
            priority,
            enqueued_at,
            id: rest.get(12..)?.to_vec(),
        },
    ))
}
