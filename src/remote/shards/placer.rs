//! Elastic placement: the placer, an actor that holds this process's etcd
//! lease and its shards' keys, and takes, drains and releases shards as the
//! live members change (docs/guide/shards.md, *Elastic placement on etcd*).
//!
//! Every tick it renews the lease (every fifth of its TTL) and reads the
//! members and the owners (every poll interval), then compares the
//! assignment over the live members ([`assign`]) with what it holds:
//!
//! - a shard the assignment gives this process and nobody holds is taken
//!   (its key created under the lease, in a transaction that succeeds only
//!   if the key is absent), then its store opened (which fences whichever
//!   process wrote it last) and a keeper started;
//! - a shard it holds that the assignment gives another live member is
//!   drained (its engine's graceful shutdown), then its key deleted;
//! - a shard it holds whose key names another member, or is gone, is
//!   stopped at once.
//!
//! The lease bounds what a cut-off process may do: the lease is valid until
//! at least the time the last successful renewal was *sent* plus its TTL
//! (etcd counts from its receipt, later). When that time, less the stop
//! margin, comes without a renewal, the placer stops every shard (a
//! graceful shutdown given half the margin, then a kill), so it writes none
//! once another process may have taken them. taquba's writer fencing stays
//! underneath: a store opened by its new owner refuses the old one's
//! commits whatever the timing.
//!
//! Every etcd call and every shard's start and stop runs as a task that
//! reports to the placer by message ([`spawn_reported`]), also when it
//! panics; etcd calls are bounded in time.

mod assign;
mod etcd;
mod lease;
mod moves;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;
use gaffer_actors::task::spawn_reported;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use etcd::EtcdPlacement;
use etcd::{Failed, Keys, View};

use super::keeper::{MakeFn, Opened, Supervision, open};
use super::kept::{Kept, KeptShards, keep, shut_down, shut_down_kept};
use super::{MoveReason, ShardError, ShardEvent, ShardSet};
use crate::error::Result;
use crate::protocol::ShutdownReport;

/// What a shard's shutdown came to, per shard.
type Reports = Vec<(usize, Result<ShutdownReport>)>;

/// Messages of the placer.
pub(crate) enum PlacerMessage {
    /// Renew, read, or check the lease's deadline (a timer).
    Tick,
    /// A join (connect, lease, member key) ended.
    Joined {
        sent: Instant,
        result: std::result::Result<Box<(Client, i64, Duration)>, Failed>,
    },
    /// A renewal of `lease` sent at `sent` ended: its TTL from then.
    Renewed {
        lease: i64,
        sent: Instant,
        result: std::result::Result<Duration, Failed>,
    },
    /// A read of the members and owners ended.
    Read(std::result::Result<View, Failed>),
    /// A take of `shard` ended.
    Took {
        shard: usize,
        reason: MoveReason,
        result: Taken,
    },
    /// A shard's stop (a drain and release, or a stop at once) ended; the
    /// revision of the release, if it made one.
    Dropped {
        shard: usize,
        reason: MoveReason,
        result: Result<ShutdownReport>,
        released: Option<i64>,
    },
    /// A release of a key without an engine ended (its revision).
    Wrote(Option<i64>),
    /// Drain every shard, release the keys, revoke the lease, stop.
    Shutdown(RpcReplyPort<Reports>),
    /// The shutdown's task ended.
    Closed(Reports),
}

#[cfg(feature = "cluster")]
impl ractor::Message for PlacerMessage {}

/// How a take ended.
pub(crate) enum Taken {
    /// The key is this process's (taken at the revision, if this take
    /// wrote it) and the shard's engine runs.
    Opened(Box<Opened>, Option<i64>),
    /// Another process holds the key.
    NotFree,
    /// Taking the key or opening the store failed (the key was let go, at
    /// the revision if the release succeeded).
    Failed(String, Option<i64>),
}

/// The placer.
#[derive(Debug)]
pub(crate) struct Placer;

/// This process's lease, as last renewed.
#[derive(Debug, Clone, Copy)]
struct Lease {
    id: i64,
    ttl: Duration,
    /// The lease is valid at least until then.
    valid_until: Instant,
    renewed_at: Instant,
}

/// A shard this process holds or is moving.
enum Hold {
    /// Its key is being taken and its store opened.
    Taking,
    /// Its engine runs here.
    Up(Kept),
    /// Being stopped (drained, or at once).
    Dropping(Kept),
}

/// The placer's state, owned here alone.
pub(crate) struct PlacerState {
    set: ShardSet,
    cfg: EtcdPlacement,
    keys: Keys,
    make: Arc<MakeFn>,
    sup: Supervision,
    events: broadcast::Sender<ShardEvent>,
    published: watch::Sender<KeptShards>,
    member: String,
    about: String,
    client: Client,
    lease: Option<Lease>,
    /// A lease given up (its deadline passed unrenewed): revoked at the
    /// next join, so its keys go at once if etcd still has it.
    stale_lease: Option<i64>,
    joining: bool,
    /// No join before then (a failed join waits a poll interval).
    next_join: Option<Instant>,
    renewing: bool,
    reading: bool,
    last_read: Option<Instant>,
    /// etcd calls failed in a row: the first is a warning, then every
    /// twentieth (the others go to debug), until one succeeds.
    failures: u32,
    /// Each shard's owner at the last read (the previous owner a gain names).
    owners_seen: BTreeMap<usize, String>,
    /// The revision of this process's last take or release: a read from
    /// before it is stale (it would show a shard just taken as free, or
    /// one just released as still this process's) and is not acted on.
    written: i64,
    held: BTreeMap<usize, Hold>,
    closing: Vec<RpcReplyPort<Reports>>,
    closed_started: bool,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

/// Join etcd and start the placer (its events go to `events`): its
/// handle, the shards it publishes, and this process's member name.
pub(crate) async fn start(
    set: &ShardSet,
    cfg: &EtcdPlacement,
    make: Arc<MakeFn>,
    sup: Supervision,
    events: broadcast::Sender<ShardEvent>,
) -> Result<(ActorRef<PlacerMessage>, watch::Receiver<KeptShards>, String)> {
    cfg.validate()?;
    let keys = Keys {
        prefix: cfg.prefix_of(set),
        limit: cfg.call_limit(),
    };
    let host = etcd::host();
    let member = cfg
        .member
        .clone()
        .unwrap_or_else(|| format!("{host}-{}", ulid::Ulid::new()));
    let about = serde_json::json!({
        "host": host,
        "pid": std::process::id(),
        "started_ms": gaffer_actors::layout::intake::epoch_ms(std::time::SystemTime::now()),
    })
    .to_string();
    let coordinator = |e: Failed| crate::Error::Shard(ShardError::Coordinator(e));
    let mut client = keys.connect(&cfg.endpoints).await.map_err(coordinator)?;
    let sent = Instant::now();
    let (id, ttl) = keys
        .join(&mut client, cfg.lease_ttl, &member, about.clone())
        .await
        .map_err(coordinator)?;
    let lease = Lease {
        id,
        ttl,
        valid_until: sent + ttl,
        renewed_at: sent,
    };
    let (published, shards) = watch::channel(KeptShards::default());
    let state = PlacerState {
        set: set.clone(),
        cfg: cfg.clone(),
        keys: keys.clone(),
        make,
        sup,
        events,
        published,
        member: member.clone(),
        about,
        client: client.clone(),
        lease: Some(lease),
        stale_lease: None,
        joining: false,
        next_join: None,
        renewing: false,
        reading: false,
        last_read: None,
        failures: 0,
        owners_seen: BTreeMap::new(),
        written: 0,
        held: BTreeMap::new(),
        closing: Vec::new(),
        closed_started: false,
        ticker: None,
    };
    match Actor::spawn(None, Placer, state).await {
        Ok((placer, _)) => Ok((placer, shards, member)),
        Err(e) => {
            let _ = keys.revoke(&mut client, id).await;
            Err(crate::Error::ActorUnavailable {
                actor: "shard placer",
                reason: format!("it did not start: {e}"),
            })
        }
    }
}

impl Actor for Placer {
    type Msg = PlacerMessage;
    type State = PlacerState;
    /// The state, built by [`start`] once the process joined (the ticker
    /// starts here).
    type Arguments = PlacerState;

    async fn pre_start(
        &self,
        myself: ActorRef<PlacerMessage>,
        mut state: PlacerState,
    ) -> std::result::Result<PlacerState, ActorProcessingErr> {
        // Often enough to stop the shards within the margin.
        let tick = state.cfg.poll.min(state.cfg.stop_margin / 4);
        state.ticker = Some(myself.send_interval(tick, || PlacerMessage::Tick));
        let _ = myself.cast(PlacerMessage::Tick);
        info!(member = %state.member, prefix = %state.keys.prefix, "joined the shard set's placement");
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<PlacerMessage>,
        message: PlacerMessage,
        state: &mut PlacerState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match message {
            PlacerMessage::Tick => state.tick(&myself),
            PlacerMessage::Joined { sent, result } => state.joined(sent, result),
            PlacerMessage::Renewed {
                lease,
                sent,
                result,
            } => state.renewed(&myself, lease, sent, result),
            PlacerMessage::Read(view) => state.read(&myself, view),
            PlacerMessage::Took {
                shard,
                reason,
                result,
            } => state.took(&myself, shard, reason, result).await,
            PlacerMessage::Dropped {
                shard,
                reason,
                result,
                released,
            } => {
                state.wrote(released);
                state.dropped(&myself, shard, reason, result)
            }
            PlacerMessage::Wrote(revision) => state.wrote(revision),
            PlacerMessage::Shutdown(reply) => {
                state.closing.push(reply);
                if let Some(t) = state.ticker.take() {
                    t.abort();
                }
                state.continue_closing(&myself);
            }
            PlacerMessage::Closed(mut reports) => {
                for shard in reports.iter().map(|(s, _)| *s).collect::<Vec<_>>() {
                    state.moved(false, shard, MoveReason::ShutDown);
                }
                for reply in state.closing.drain(..) {
                    let _ = reply.send(std::mem::take(&mut reports));
                }
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<PlacerMessage>,
        state: &mut PlacerState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if let Some(t) = state.ticker.take() {
            t.abort();
        }
        // Stopped other than by its shutdown (a bug): nothing renews the
        // lease any more, so no shard may go on here.
        for hold in std::mem::take(&mut state.held).into_values() {
            if let Hold::Up(kept) | Hold::Dropping(kept) = hold {
                warn!("the placer stopped with shards held; killing their engines");
                moves::kill(&kept);
            }
        }
        state.publish();
        Ok(())
    }
}

/// Run `work` in a task and tell `me` what it came to, also when it panics.
fn spawn_reporting<T: Send + 'static>(
    me: &ActorRef<PlacerMessage>,
    work: impl Future<Output = T> + Send + 'static,
    report: impl FnOnce(std::result::Result<T, String>) -> PlacerMessage + Send + 'static,
) {
    let me = me.clone();
    spawn_reported(work, move |out| {
        // A placer that stopped meanwhile needs no answer.
        let _ = me.cast(report(out.map_err(|e| e.to_string())));
    });
}

impl PlacerState {
    fn publish(&self) {
        let up: BTreeMap<usize, Kept> = self
            .held
            .iter()
            .filter_map(|(s, h)| match h {
                Hold::Up(k) => Some((*s, k.clone())),
                _ => None,
            })
            .collect();
        self.published.send_replace(Arc::new(up));
    }

    /// Tell the subscribers and the metrics a shard came or went.
    fn moved(&self, gained: bool, shard: usize, reason: MoveReason) {
        metrics::counter!(
            "gaffer_shard_moves_total",
            "direction" => if gained { "gained" } else { "lost" },
            "reason" => reason.label(),
        )
        .increment(1);
        info!(shard, gained, %reason, "shard moved");
        let _ = self.events.send(if gained {
            ShardEvent::Gained { shard, reason }
        } else {
            ShardEvent::Lost { shard, reason }
        });
    }
}
