//! What the newest writer wrote at its start, read from the unflushed WAL
//! without reading all of it: the shard's owner record
//! (`gaffer/v1/shard/owner`), which every start of a sharded engine writes
//! among its first commits and which no one else writes.
//!
//! A writer's start leaves a mark in the WAL: SlateDB fences the writer
//! before it by writing an empty WAL object (a zero-byte "fencing
//! marker"), and every row the new writer commits comes after it. So the
//! objects' listing (sizes only, one request per thousand objects) tells
//! whether the newest writer started within the unflushed WAL, and where:
//!
//! - no empty object past the flushed state: the newest writer's start,
//!   and the commits that followed it, are in the flushed state (a flush
//!   covers a prefix of the WAL), so the flushed value is the one it wrote;
//! - else the newest empty object is its start: the value is in the first
//!   objects after it, read oldest first, a few at once, up to
//!   [`START_OBJECTS`] (a writer that wrote none by then, an engine that is
//!   no shard or that is still starting, has none to show).
//!
//! Either way `health` reads a bounded number of objects, however long the
//! unflushed WAL. Like the rest of this module it mirrors a private layout,
//! SlateDB 0.17's WAL objects (`{path}/wal/{id:020}.sst`, a fence empty);
//! `cli/tests/cli.rs` checks it on a store whose writer was fenced by a new
//! one before any flush.

use futures_util::StreamExt;
use slatedb::ValueDeletable;
use taquba::object_store::path::Path;

use super::{PARALLEL_READS, TAG_USER, Unflushed};
use crate::error::OpsError;

/// Objects read after the newest writer's fence before its start is taken
/// as over: its first commits (its first beat, the layout check, the shard
/// check) fit many times over.
pub const START_OBJECTS: u64 = 256;

/// What the unflushed WAL says of a key its writer puts at its start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AtStart {
    /// The newest writer started before the flushed state: the flushed
    /// value is the one it wrote (if any).
    Flushed,
    /// The newest writer started within the unflushed WAL and wrote this
    /// value in its first objects (`None`: it wrote none there, or deleted
    /// it): an older value, flushed or not, is an earlier writer's.
    Written(Option<Vec<u8>>),
}

impl Unflushed {
    /// The value the newest writer put at `key` at its start (see the
    /// module's documentation).
    pub async fn written_at_start(&self, key: &[u8]) -> Result<AtStart, OpsError> {
        let Some(fence) = self.newest_fence().await? else {
            return Ok(AtStart::Flushed);
        };
        let mut user_key = vec![TAG_USER];
        user_key.extend_from_slice(key);
        let user_key: std::sync::Arc<[u8]> = user_key.into();
        let last = fence.saturating_add(START_OBJECTS).min(self.ids.end);
        let mut start = fence + 1;
        while start < last {
            let end = start.saturating_add(PARALLEL_READS as u64).min(last);
            let wanted = user_key.clone();
            let read = self
                .read(start..end, move |r| r.key.as_ref() == &wanted[..])
                .await?;
            if let Some(row) = read.into_iter().flat_map(|o| o.rows).max_by_key(|r| r.seq) {
                return Ok(AtStart::Written(match row.value {
                    ValueDeletable::Value(v) => Some(v.to_vec()),
                    _ => None,
                }));
            }
            start = end;
        }
        Ok(AtStart::Written(None))
    }

    /// The id of the newest empty WAL object past the flushed state (a
    /// writer's fence: where the newest writer started), from the listing
    /// of the WAL objects from the first unflushed one on.
    async fn newest_fence(&self) -> Result<Option<u64>, OpsError> {
        if self.ids.is_empty() {
            return Ok(None);
        }
        let dir = Path::from(format!("{}/wal", self.path.trim_end_matches('/')));
        // Listed after this name: the first unflushed object and those after.
        let offset = Path::from(format!(
            "{}/wal/{:020}",
            self.path.trim_end_matches('/'),
            self.ids.start.saturating_sub(1)
        ));
        let mut listed = self.store.list_with_offset(Some(&dir), &offset);
        let mut fence = None;
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(taquba::Error::from)?;
            let id = meta
                .location
                .filename()
                .and_then(|name| name.strip_suffix(".sst"))
                .and_then(|id| id.parse::<u64>().ok());
            if let Some(id) = id
                && self.ids.contains(&id)
                && meta.size == 0
            {
                fence = fence.max(Some(id));
            }
        }
        Ok(fence)
    }
}
