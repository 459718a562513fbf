//! A shard kept by this process (its keeper and what the keeper
//! publishes): starting a keeper on a shard just opened, and shutting kept
//! shards down. Shared by `ShardedEngine` and the elastic placer.

use super::*;

/// Shard events buffered per subscriber before a slow one lags.
const SHARD_EVENTS: usize = 256;

/// An owned shard: its keeper, and what the keeper publishes.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(super) keeper: ActorRef<KeeperMessage>,
    pub(super) slot: watch::Receiver<keeper::Slot>,
}

/// Start the keeper of `shard`, whose engine `opened` just started.
pub(crate) async fn keep(
    shard: usize,
    set: &ShardSet,
    make: Arc<MakeFn>,
    supervision: Supervision,
    events: broadcast::Sender<ShardEvent>,
    opened: keeper::Opened,
    owner: Option<String>,
) -> Result<Kept> {
    let engine = opened.engine.clone();
    let (slot, slot_rx) = watch::channel(Slot {
        engine: Some(engine.clone()),
        status: ShardStatus::Up,
    });
    let args = KeeperArgs {
        shard,
        count: set.len(),
        url: set.urls[shard].clone(),
        make,
        supervision,
        events,
        slot,
        opened,
        owner,
    };
    match Actor::spawn(None, Keeper, args).await {
        Ok((keeper, _)) => Ok(Kept {
            keeper,
            slot: slot_rx,
        }),
        Err(e) => {
            let _ = engine.shutdown().await;
            Err(crate::Error::ActorUnavailable {
                actor: "shard keeper",
                reason: format!("shard {shard}'s keeper did not start: {e}"),
            })
        }
    }
}

/// The shards a process keeps now, as their owner publishes them.
pub(crate) type KeptShards = Arc<BTreeMap<usize, Kept>>;

/// Shard events buffered per subscriber before a slow one lags.
pub(crate) fn shard_events() -> broadcast::Sender<ShardEvent> {
    broadcast::channel(SHARD_EVENTS).0
}

/// Shut down every shard of `shards` (all at once): each shard's result.
pub(crate) async fn shut_down_kept(
    shards: &BTreeMap<usize, Kept>,
) -> Vec<(usize, Result<crate::protocol::ShutdownReport>)> {
    let all = shards
        .iter()
        .map(|(shard, kept)| async move { (*shard, shut_down(kept).await) });
    futures_util::future::join_all(all).await
}

/// Shut one kept shard's engine down (gracefully) and stop its keeper.
pub(crate) async fn shut_down(kept: &Kept) -> Result<crate::protocol::ShutdownReport> {
    // The keeper always answers: its shutdown task reports, also when it
    // panics; a keeper gone drops the port.
    let answer = kept.keeper.call(KeeperMessage::Shutdown, None).await;
    match answer {
        Ok(ractor::rpc::CallResult::Success(result)) => result,
        // A keeper that died (a bug) leaves the engine it last published:
        // shut that down here.
        _ => {
            let engine = kept.slot.borrow().engine.clone();
            match engine {
                Some(engine) => engine.shutdown().await,
                None => Err(crate::Error::ShutDown),
            }
        }
    }
}
