//! Memo entries: a job's cached intermediate results, kept across its retries.
//!
//! An entry is an object under `{blob_prefix}/v1/memo/{run_id}/{sha256(key)}`,
//! written as soon as it is computed (it must survive the attempt that computed
//! it, so it cannot ride on that attempt's settlement). Removed with the run's
//! outcome by the retention sweeper.

use std::sync::Arc;

use futures_util::StreamExt;
use taquba::object_store::path::Path;
use taquba::object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::Result;
use crate::keys;

/// The memo of one run.
#[derive(Debug, Clone)]
pub struct Memo {
    store: Arc<dyn ObjectStore>,
    dir: Arc<str>,
}

impl Memo {
    /// The memo of job `run_id`: `{blob}/v1/memo/{run_id}/`.
    pub fn new(store: Arc<dyn ObjectStore>, blob_prefix: &str, run_id: &str) -> Self {
        Self {
            store,
            dir: keys::memo_dir(blob_prefix, run_id).into(),
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
            dir: format!(
                "{}memo/{run_id}/",
                keys::batch_blob_dir(blob_prefix, batch_id)
            )
            .into(),
        }
    }

    fn path(&self, key: &str) -> Path {
        Path::from(format!("{}{}", self.dir, keys::hex_sha256(key.as_bytes())))
    }

    /// The entry at `key`, if any. Any string is a valid key (keys are hashed).
    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.store.get(&self.path(key)).await {
            Ok(found) => Ok(Some(found.bytes().await?.to_vec())),
            Err(taquba::object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Write (or overwrite) the entry at `key`.
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<()> {
        self.store
            .put(&self.path(key), PutPayload::from(value))
            .await?;
        Ok(())
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
}
