//! Memo entries: a job's cached intermediate results, kept across its retries.
//!
//! An entry is an object under `{blob_prefix}/v1/memo/{run_id}/{sha256(key)}`
//! (a bulk item's under its batch's directory). When it reaches the store
//! depends on [`MemoWrites`]: by default the attempt keeps its new entries in
//! memory and the handler pool writes them only when the attempt does not
//! succeed ([`Memo::take_unwritten`] then [`UnwrittenEntries::write`]), so a successful
//! attempt costs no object write; with [`MemoWrites::Immediate`] each `put`
//! writes at once. Removed with the run's outcome by the retention sweeper.
//!
//! Clones of one attempt's memo share its unwritten entries: like the staged
//! effects, that buffer is attempt-local (see ARCHITECTURE.md, "Shared
//! state").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use taquba::object_store::path::Path;
use taquba::object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::Result;
use crate::layout::keys;
use crate::settings::MemoWrites;

#[derive(Debug, Default)]
struct Buffer {
    /// Entries put by this attempt and not yet written, by key (their
    /// object paths are made only when they are written: a successful
    /// attempt's never are).
    entries: BTreeMap<String, Vec<u8>>,
    /// Taken by the pool (the attempt ended): later puts write at once.
    taken: bool,
}

/// The memo of one run, as one attempt sees it.
#[derive(Debug, Clone)]
pub struct Memo {
    store: Arc<dyn ObjectStore>,
    dir: Arc<str>,
    /// `None`: every put writes at once ([`MemoWrites::Immediate`]).
    unwritten: Option<Arc<Mutex<Buffer>>>,
    /// No earlier delivery of this run can have stored an entry: a lookup
    /// this attempt's buffer misses is a miss, without a store read.
    nothing_stored: bool,
}

impl Memo {
    /// The memo of job `run_id`: `{blob}/v1/memo/{run_id}/`; entries written
    /// immediately (use [`with_writes`](Self::with_writes) to buffer them).
    pub fn new(store: Arc<dyn ObjectStore>, blob_prefix: &str, run_id: &str) -> Self {
        Self {
            store,
            dir: keys::memo_dir(blob_prefix, run_id).into(),
            unwritten: None,
            nothing_stored: false,
        }
    }

    /// The memo of a bulk item: `{blob}/v1/batches/{batch_id}/memo/{item_run_id}/`,
    /// so forgetting a batch removes one prefix.
    pub fn for_item(
        store: Arc<dyn ObjectStore>,
        blob_prefix: &str,
        batch_id: &str,
        run_id: &str,
    ) -> Self {
        Self {
            store,
            dir: keys::item_memo_dir(blob_prefix, batch_id, run_id).into(),
            unwritten: None,
            nothing_stored: false,
        }
    }

    /// This memo with the given write policy.
    pub fn with_writes(mut self, writes: MemoWrites) -> Self {
        self.unwritten = match writes {
            MemoWrites::Immediate => None,
            MemoWrites::OnFailure => Some(Arc::default()),
        };
        self
    }

    /// This memo, told whether an earlier delivery of its run may have
    /// stored entries. When none can have (`false`: the run's first claim,
    /// not a batch re-run's re-enqueue, see [`keys::HEADER_MEMO`]) and puts
    /// are buffered ([`MemoWrites::OnFailure`]), a lookup looks only in this
    /// attempt's buffer: on an object store that saves a request per
    /// lookup (a GET answered 404). With immediate writes this attempt's own
    /// entries are in the store, so lookups always read it.
    pub fn earlier_entries(mut self, possible: bool) -> Self {
        self.nothing_stored = !possible;
        self
    }

    fn path(&self, key: &str) -> Path {
        Path::from(keys::memo_entry_path(&self.dir, key))
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, Buffer>> {
        // A poisoned lock only means a clone panicked mid-insert; the map is
        // still a valid map.
        self.unwritten
            .as_ref()
            .map(|u| u.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The entry at `key`, if any: this attempt's own unwritten entry first,
    /// then the store. Any string is a valid key (keys are hashed).
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if let Some(unwritten) = self.lock() {
            if let Some(value) = unwritten.entries.get(key) {
                return Ok(Some(value.clone()));
            }
            // Until the attempt ends, every entry it put is in the buffer.
            if self.nothing_stored && !unwritten.taken {
                return Ok(None);
            }
        }
        match self.store.get(&self.path(key)).await {
            Ok(found) => Ok(Some(found.bytes().await?.to_vec())),
            Err(taquba::object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Put (or overwrite) the entry at `key`: kept for the attempt's end, or
    /// written now (immediate writes, or the attempt already ended).
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<()> {
        if let Some(mut unwritten) = self.lock()
            && !unwritten.taken
        {
            unwritten.entries.insert(key.to_string(), value);
            return Ok(());
        }
        self.store
            .put(&self.path(key), PutPayload::from(value))
            .await?;
        Ok(())
    }

    /// Take the entries this attempt put and did not write (the attempt has
    /// ended); puts from now on write at once.
    pub fn take_unwritten(&self) -> UnwrittenEntries {
        let entries = match self.lock() {
            Some(mut unwritten) => {
                unwritten.taken = true;
                std::mem::take(&mut unwritten.entries)
            }
            None => BTreeMap::new(),
        };
        UnwrittenEntries {
            store: self.store.clone(),
            dir: self.dir.clone(),
            entries,
        }
    }
}

/// Entries an ended attempt put and did not write.
#[derive(Debug)]
pub struct UnwrittenEntries {
    store: Arc<dyn ObjectStore>,
    /// The memo's directory: an entry's path is made from it and its key.
    dir: Arc<str>,
    entries: BTreeMap<String, Vec<u8>>,
}

impl UnwrittenEntries {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Write every entry, a few at a time. Returns the first error; the
    /// entries that failed are lost (the next attempt computes them again).
    pub async fn write(self) -> Result<()> {
        let (store, dir) = (self.store, self.dir);
        let mut writes = futures_util::stream::iter(self.entries)
            .map(|(key, value)| {
                let store = store.clone();
                let path = Path::from(keys::memo_entry_path(&dir, &key));
                async move { store.put(&path, PutPayload::from(value)).await }
            })
            .buffer_unordered(8);
        let mut first_error = None;
        while let Some(result) = writes.next().await {
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}
/// Delete every object under `prefix`; returns how many were deleted.
pub async fn delete_prefix(store: &Arc<dyn ObjectStore>, prefix: &str) -> Result<usize> {
    let prefix = Path::from(prefix);
    let mut listing = store.list(Some(&prefix));
    let mut paths = Vec::new();
    while let Some(meta) = listing.next().await {
        paths.push(meta?.location);
    }
    for path in &paths {
        match store.delete(path).await {
            Ok(()) | Err(taquba::object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(paths.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use taquba::object_store::memory::InMemory;

    #[tokio::test]
    async fn awkward_keys_round_trip_and_runs_are_isolated() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = Memo::new(store.clone(), "b", "run");
        let b = Memo::new(store.clone(), "b", "run-suffix");
        let long = "x".repeat(10_000);
        for key in ["", "a/b", "with space", "ünï", long.as_str()] {
            a.put(key, key.as_bytes().to_vec()).await.unwrap();
            assert_eq!(a.get(key).await.unwrap().as_deref(), Some(key.as_bytes()));
            assert_eq!(b.get(key).await.unwrap(), None);
        }
        b.put("k", vec![1]).await.unwrap();
        assert_eq!(
            delete_prefix(&store, &keys::memo_dir("b", "run"))
                .await
                .unwrap(),
            5
        );
        assert_eq!(b.get("k").await.unwrap(), Some(vec![1]));
    }

    #[tokio::test]
    async fn a_first_delivery_reads_the_store_only_when_its_own_puts_are_there() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        // An entry an earlier delivery left.
        Memo::new(store.clone(), "b", "run")
            .put("old", vec![1])
            .await
            .unwrap();
        let buffered = Memo::new(store.clone(), "b", "run")
            .with_writes(MemoWrites::OnFailure)
            .earlier_entries(false);
        assert_eq!(buffered.get("old").await.unwrap(), None, "no store read");
        buffered.put("new", vec![2]).await.unwrap();
        assert_eq!(buffered.get("new").await.unwrap(), Some(vec![2]));
        // Once the attempt ended, puts go to the store: reads do too.
        let _ = buffered.take_unwritten();
        assert_eq!(buffered.get("old").await.unwrap(), Some(vec![1]));

        let told = Memo::new(store.clone(), "b", "run")
            .with_writes(MemoWrites::OnFailure)
            .earlier_entries(true);
        assert_eq!(told.get("old").await.unwrap(), Some(vec![1]));
        // Immediate writes put this attempt's entries in the store itself.
        let immediate = Memo::new(store, "b", "run")
            .with_writes(MemoWrites::Immediate)
            .earlier_entries(false);
        immediate.put("now", vec![3]).await.unwrap();
        assert_eq!(immediate.get("now").await.unwrap(), Some(vec![3]));
    }
}
