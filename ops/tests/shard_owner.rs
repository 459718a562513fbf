//! `health`'s shard owner read the way `gaffer health` reads it (the
//! flushed state, and of the WAL past it only what the newest writer wrote
//! at its start), on a store whose writers took it over from each other
//! without a flush between them: each health shows the newest writer's
//! owner record, never an earlier writer's still in the WAL, as a
//! replaying reader does (and none when the newest writer wrote none,
//! where a replay shows the record stored, an earlier writer's).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gaffer_layout::keys;
use gaffer_layout::records::{self, ShardOwnerRecord};
use gaffer_ops::{Reading, Store};
use taquba::object_store::local::LocalFileSystem;
use taquba::{OpenOptions, Queue, SettlementEffects};

/// Open the store in `dir` as its writer (fencing the one before, which
/// is left as a crash leaves it) and do what a shard's start does: the
/// layout and shard markers, and the owner record named `owner` (none: a
/// writer that writes no record, a build before it).
async fn start(dir: &Path, owner: Option<&str>) -> Queue {
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir).expect("the directory"));
    let options = OpenOptions::default().flush_interval(Duration::from_millis(1));
    let queue = Queue::open_with_options(store, "queue", options)
        .await
        .expect("the writer opens");
    let mut fx = SettlementEffects::default()
        .kv_put(keys::LAYOUT_KEY, keys::LAYOUT_VERSION.as_bytes().to_vec())
        .kv_put(keys::SHARD_KEY, keys::shard_marker(0, 1).into_bytes());
    if let Some(owner) = owner {
        let record = ShardOwnerRecord {
            owner: owner.into(),
            host: "node".into(),
            pid: 7,
            since_ms: 1,
        };
        fx = fx.kv_put(
            keys::SHARD_OWNER_KEY,
            records::encode(&record).expect("encodes"),
        );
    }
    queue.commit_effects(fx).await.expect("the start's commit");
    // A few commits after the start, as a live engine makes.
    for i in 0..3u8 {
        let fx = SettlementEffects::default().kv_put(b"gaffer/v1/test", vec![i]);
        queue.commit_effects(fx).await.expect("a commit");
    }
    queue
}

/// The owner `health` shows, read as `reading`.
async fn owner(dir: &Path, reading: Reading) -> Option<String> {
    let store = Store::open(Some(dir), None, "queue", "jobs", "bulk", reading)
        .await
        .expect("the store opens");
    let health = store.health().await.expect("health");
    store.close().await;
    health.shard_owner.map(|o| o.owner)
}

/// Both readings' answer, which must agree.
async fn shown(dir: &Path) -> Option<String> {
    let flushed = owner(dir, Reading::Flushed).await;
    let replayed = owner(dir, Reading::Replay).await;
    assert_eq!(flushed, replayed, "the flushed reading and a replay");
    flushed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_shows_the_newest_writers_owner_whatever_the_wal_holds() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let dir = tmp.path();
    let a = start(dir, Some("a")).await;
    assert_eq!(shown(dir).await.as_deref(), Some("a"));
    // Taken over before any flush: a's record is still in the WAL, before
    // b's start.
    let b = start(dir, Some("b")).await;
    assert_eq!(shown(dir).await.as_deref(), Some("b"));
    // A writer that wrote none (a build before the record, an engine still
    // starting): read flushed, neither earlier writer's is its owner; a
    // replay shows the record stored, b's.
    let c = start(dir, None).await;
    assert_eq!(owner(dir, Reading::Flushed).await, None);
    assert_eq!(owner(dir, Reading::Replay).await.as_deref(), Some("b"));
    // Closed cleanly, so flushed: the flushed state has the newest.
    let d = start(dir, Some("d")).await;
    d.close().await.expect("a clean close");
    assert_eq!(shown(dir).await.as_deref(), Some("d"));
    // And a start after the flush, in the WAL past it.
    let e = start(dir, Some("e")).await;
    assert_eq!(shown(dir).await.as_deref(), Some("e"));
    e.close().await.expect("a clean close");
    for fenced in [a, b, c] {
        let _ = fenced.close().await;
    }
}
