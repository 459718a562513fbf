//! The tail's fold across rounds, and its answer to WAL objects gone.

use std::sync::Arc;

use slatedb::{RowEntry, ValueDeletable};
use taquba::object_store::ObjectStore;

use super::*;
use crate::unflushed::{KEY_VERSION, PendingKey, TAG_PENDING, TAG_STATS};

fn row(key: Vec<u8>, value: ValueDeletable, seq: u64) -> RowEntry {
    RowEntry {
        key: key.into(),
        value,
        seq,
        create_ts: None,
        expire_ts: None,
    }
}

fn counter_key(queue: &str, metric: &str) -> Vec<u8> {
    let mut key = vec![TAG_STATS, KEY_VERSION, queue.len() as u8];
    key.extend_from_slice(queue.as_bytes());
    key.extend_from_slice(metric.as_bytes());
    key
}

fn merge(d: i64) -> ValueDeletable {
    ValueDeletable::Merge(d.to_le_bytes().to_vec().into())
}

fn put(v: i64) -> ValueDeletable {
    ValueDeletable::Value(v.to_le_bytes().to_vec().into())
}

fn pending_key(queue: &str, enqueued_at: u64, id: &str) -> Vec<u8> {
    let mut key = vec![TAG_PENDING, KEY_VERSION, queue.len() as u8];
    key.extend_from_slice(queue.as_bytes());
    key.extend_from_slice(&0u32.to_be_bytes());
    key.extend_from_slice(&enqueued_at.to_be_bytes());
    key.extend_from_slice(id.as_bytes());
    key
}

fn counter(tail: &Tail, metric: &str) -> Option<Counter> {
    tail.counters()
        .get(&("q".to_string(), metric.to_string()))
        .copied()
}

#[test]
fn a_change_then_another_composes_as_a_replay_applies_them() {
    use Counter::{Add, Set};
    assert_eq!(Add(2).then(Add(3)), Add(5));
    assert_eq!(Set(7).then(Add(3)), Set(10));
    assert_eq!(Add(2).then(Set(4)), Set(4));
    assert_eq!(Set(7).then(Set(4)), Set(4));
    // Over a flushed 10, each is what the rows in order give.
    assert_eq!(Set(7).then(Add(-2)).over(10), 5);
    assert_eq!(Add(-2).then(Add(5)).over(10), 13);
}

#[test]
fn rounds_fold_counters_in_commit_order_across_rounds() {
    let mut tail = Tail::new(1, 10);
    // Round 1: merges (out of order within the round), one at the base's
    // seq left out.
    let rows = vec![
        row(counter_key("q", "pending"), merge(2), 12),
        row(counter_key("q", "pending"), merge(1), 11),
        row(counter_key("q", "pending"), merge(100), 10),
        row(counter_key("q", "done"), put(40), 13),
    ];
    tail.fold_rows(rows, Some(13)).unwrap();
    assert_eq!(counter(&tail, "pending"), Some(Counter::Add(3)));
    assert_eq!(counter(&tail, "done"), Some(Counter::Set(40)));
    // Round 2: a merge on the put adds to it, a put replaces the merges;
    // rows at or below the seq folded (13) are left out, even in objects
    // read for the first time.
    let rows = vec![
        row(counter_key("q", "done"), merge(5), 14),
        row(counter_key("q", "done"), merge(1_000), 13),
        row(counter_key("q", "pending"), put(9), 15),
        row(counter_key("q", "pending"), merge(1), 16),
        row(counter_key("q", "dead"), merge(1_000), 12),
    ];
    tail.fold_rows(rows, Some(16)).unwrap();
    assert_eq!(counter(&tail, "done"), Some(Counter::Set(45)));
    assert_eq!(counter(&tail, "pending"), Some(Counter::Set(10)));
    assert_eq!(counter(&tail, "dead"), None);
    // Round 3: an object whose highest seq is the folded one adds nothing.
    tail.fold_rows(vec![row(counter_key("q", "done"), merge(1), 16)], Some(16))
        .unwrap();
    assert_eq!(counter(&tail, "done"), Some(Counter::Set(45)));
    // A delete sets 0, and merges after it add.
    let rows = vec![
        row(counter_key("q", "done"), ValueDeletable::Tombstone, 17),
        row(counter_key("q", "done"), merge(2), 18),
    ];
    tail.fold_rows(rows, Some(18)).unwrap();
    assert_eq!(counter(&tail, "done"), Some(Counter::Set(2)));
}

#[test]
fn rows_past_rows_with_no_counter_are_told_apart_by_the_objects_highest_seq() {
    let mut tail = Tail::new(1, 0);
    // An object whose rows kept are none, but that went up to seq 20.
    tail.fold_rows(Vec::new(), Some(20)).unwrap();
    tail.fold_rows(vec![row(counter_key("q", "done"), merge(1), 20)], Some(20))
        .unwrap();
    assert_eq!(counter(&tail, "done"), None);
    tail.fold_rows(vec![row(counter_key("q", "done"), merge(1), 21)], Some(21))
        .unwrap();
    assert_eq!(counter(&tail, "done"), Some(Counter::Add(1)));
}

#[test]
fn a_ready_jobs_last_change_wins_across_rounds() {
    let record = || ValueDeletable::Value(b"record".to_vec().into());
    let mut tail = Tail::new(1, 10);
    let rows = vec![
        row(pending_key("q", 5, "a"), record(), 11),
        row(pending_key("q", 6, "b"), record(), 12),
        row(
            pending_key("q", 1, "flushed"),
            ValueDeletable::Tombstone,
            13,
        ),
    ];
    tail.fold_rows(rows, Some(13)).unwrap();
    assert_eq!(tail.pending().len(), 3);
    let rows = vec![
        // Claimed: gone.
        row(pending_key("q", 5, "a"), ValueDeletable::Tombstone, 14),
        // Given back: there again.
        row(pending_key("q", 1, "flushed"), record(), 15),
        // At the folded seq: left out.
        row(pending_key("q", 6, "b"), ValueDeletable::Tombstone, 13),
    ];
    tail.fold_rows(rows, Some(15)).unwrap();
    let q: Vec<(PendingKey, bool)> = tail
        .pending()
        .of("q")
        .unwrap()
        .iter()
        .map(|(k, t)| (k.clone(), *t))
        .collect();
    let place = |at: u64, id: &str| PendingKey {
        priority: 0,
        enqueued_at: at,
        id: id.as_bytes().to_vec(),
    };
    assert_eq!(
        q,
        vec![
            (place(1, "flushed"), true),
            (place(5, "a"), false),
            (place(6, "b"), true)
        ]
    );
    assert_eq!(tail.kept(), 3);
}

async fn put_object(store: &Arc<dyn ObjectStore>, id: u64) {
    use taquba::object_store::path::Path;
    use taquba::object_store::{ObjectStoreExt, PutPayload};
    store
        .put(
            &Path::from(format!("q/wal/{id:020}.sst")),
            PutPayload::from_static(b"not an sst"),
        )
        .await
        .unwrap();
}

async fn delete_object(store: &Arc<dyn ObjectStore>, id: u64) {
    use taquba::object_store::ObjectStoreExt;
    use taquba::object_store::path::Path;
    store
        .delete(&Path::from(format!("q/wal/{id:020}.sst")))
        .await
        .unwrap();
}

/// A writer's GC deletes WAL objects once flushed and some minutes old: a
/// tail whose last object read is gone cannot tell "nothing new" from
/// "the new ones are gone too", and asks for a rebase, never counting
/// without them.
#[tokio::test]
async fn a_wal_object_the_tail_read_gone_is_a_rebase() {
    use taquba::object_store::memory::InMemory;
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for id in 1..=3 {
        put_object(&store, id).await;
    }
    let unflushed = Unflushed::find(store.clone(), "q", 0).await.unwrap();
    // As if objects 1 to 3 were read.
    let mut tail = Tail::new(1, 0);
    tail.next = 4;
    assert_eq!(
        unflushed.advance(&mut tail).await.unwrap(),
        Advance::Folded(0)
    );
    for id in 1..=3 {
        delete_object(&store, id).await;
    }
    assert_eq!(unflushed.advance(&mut tail).await.unwrap(), Advance::Rebase);
    // A tail that read nothing yet does not ask about the flushed object
    // before it (long gone, as a rule).
    let mut fresh = Tail::new(4, 0);
    assert_eq!(
        unflushed.advance(&mut fresh).await.unwrap(),
        Advance::Folded(0)
    );
    // A new object: read once, from the last one read on.
    put_object(&store, 4).await;
    assert_eq!(
        unflushed.advance(&mut fresh).await.unwrap(),
        Advance::Folded(1)
    );
    assert_eq!(
        unflushed.advance(&mut fresh).await.unwrap(),
        Advance::Folded(0)
    );
    put_object(&store, 5).await;
    put_object(&store, 6).await;
    assert_eq!(
        unflushed.advance(&mut fresh).await.unwrap(),
        Advance::Folded(2)
    );
}
