//! The builder's place in a shard set: the owner record a shard's engine
//! writes at its start, with the owner its placement named and without.

use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::layout::keys;
use gaffer_actors::layout::records::{self, ShardOwnerRecord};
use taquba::MockClock;
use taquba::object_store::local::LocalFileSystem;

use crate::{Engine, Store};

/// Start an engine as shard 1 of 2 on `dir` at the clock's time, named
/// `owner` or not, shut it down, and read the shard's owner record.
async fn started(dir: &std::path::Path, at_ms: u64, owner: Option<&str>) -> ShardOwnerRecord {
    let url = format!("file://{}", dir.display());
    let builder = Engine::builder()
        .store(Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .clock(Arc::new(MockClock::new(at_ms)))
        .in_shard(1, 2, &url);
    let builder = match owner {
        Some(owner) => builder.shard_owner(owner),
        None => builder,
    };
    let engine = builder.start().await.expect("the shard's engine starts");
    engine.shutdown().await.expect("a clean shutdown");
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir).expect("the directory"));
    let reader = taquba::QueueReader::open(store, "queue")
        .await
        .expect("a reader");
    let raw = reader
        .view()
        .kv_get(keys::SHARD_OWNER_KEY)
        .await
        .expect("a read")
        .expect("an owner record");
    let marker = reader.view().kv_get(keys::SHARD_KEY).await.expect("a read");
    assert_eq!(marker.as_deref(), Some(&b"1/2"[..]), "the shard marker");
    reader.close().await.expect("the reader closes");
    records::decode(keys::SHARD_OWNER_KEY, &raw).expect("an owner record decodes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shards_engine_writes_its_owner_at_every_start() {
    let tmp = tempfile::tempdir().expect("a temp dir");
    let pid = std::process::id();
    // The first start: the marker and the record, named by the placement.
    let named = started(tmp.path(), 1_700_000_000_000, Some("member-7")).await;
    assert_eq!(named.owner, "member-7");
    assert_eq!(named.pid, pid);
    assert!(!named.host.is_empty());
    assert_eq!(named.since_ms, 1_700_000_000_000, "the queue's clock");
    // A later start, unnamed: `{host}/{pid}`, rewritten at its own time.
    let unnamed = started(tmp.path(), 1_700_000_360_000, None).await;
    assert_eq!(unnamed.owner, format!("{}/{pid}", unnamed.host));
    assert_eq!(unnamed.host, named.host);
    assert_eq!(unnamed.since_ms, 1_700_000_360_000);
}

#[test]
fn an_owner_is_set_only_on_a_shard() {
    let plain = Engine::builder().shard_owner("member-1");
    assert!(plain.shard.is_none(), "not a shard: nothing to name");
    let named = Engine::builder()
        .in_shard(0, 3, "file:///s-00")
        .shard_owner("member-1");
    assert_eq!(
        named.shard.as_ref().and_then(|p| p.owner.as_deref()),
        Some("member-1")
    );
    // Placed again (the same builder, another shard): the name stays.
    let moved = named.in_shard(2, 3, "file:///s-02");
    let place = moved.shard.expect("a shard");
    assert_eq!((place.index, place.owner.as_deref()), (2, Some("member-1")));
}
