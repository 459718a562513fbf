//! The keeper of one owned shard: an actor that holds the shard's engine,
//! notices when it stops, and reopens it when the shard is this process's
//! to take again.
//!
//! What decides is the shard's store, read through a `QueueReader` (which
//! never fences): the manifest's writer epoch (it advances each time a
//! process opens the store as its writer) and the writer's liveness beat
//! (taquba's `WriterHeartbeat`: a counter committed every interval, and a
//! closing beat on a clean close). [`judge`] is the decision, a pure
//! function:
//!
//! - no writer opened the store after this process's engine (the epoch is
//!   still its own): the engine crashed or its store closed on its own, so
//!   the keeper reopens it (after a backoff that doubles with each stop in a
//!   row, capped);
//! - another writer opened it (a fence by another owner): the keeper waits,
//!   looking every probe interval, until that writer is gone: its closing
//!   beat (it shut down), or no new beat (no commit, for a writer that
//!   beats none) for `stale_beats` of its beat intervals plus two probe
//!   intervals. Only then does it reopen the store, which fences nobody
//!   alive.
//!
//! So a process never takes a shard back from a live writer, and two
//! processes whose placements both name a shard do not fence each other in
//! turn: the later opener writes, the other waits as its standby.

mod judge;
mod probe;
mod reopen;

use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::{EngineError, EngineEvent, ShutdownReport};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::QueueReader;
use taquba::object_store::ObjectStore;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{ShardError, ShardEvent, ShardStatus};
use crate::builder::EngineBuilder;
use crate::engine::Engine;
use crate::error::{Error, Result};

pub(crate) use judge::{Beat, Seen, Sight, Supervision, Verdict, judge};
use probe::*;
pub(crate) use probe::{Opened, open};

/// Builds a shard's engine: `make(shard, url)`, called at the start and at
/// every reopen.
pub(crate) type MakeFn = dyn Fn(usize, &str) -> EngineBuilder + Send + Sync;

/// Longest wait for one look at the store (opening a reader, reading the
/// beat) or for the read of the writer epoch after a start.
pub(super) const LOOK_LIMIT: Duration = Duration::from_secs(30);

/// Longest wait, once an engine's tree stopped, for its last event to be
/// read (it was sent before the stop: this only drains the channel).
pub(super) const LAST_EVENT_LIMIT: Duration = Duration::from_secs(5);

/// What a keeper publishes for `ShardedEngine`'s methods: the running
/// engine (if any) and the shard's status. Written only by the keeper.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) engine: Option<Engine>,
    pub(crate) status: ShardStatus,
}

/// Messages of a shard's keeper.
pub(crate) enum KeeperMessage {
    /// The engine of `generation` stopped (its watch task).
    Ended { generation: u64, end: End },
    /// Look at the down shard's store (a timer).
    Look,
    /// A look ended.
    Looked(Looked),
    /// A reopen ended.
    Reopened(Result<Opened>),
    /// Shut the shard's engine down and stop keeping the shard.
    Shutdown(RpcReplyPort<Result<ShutdownReport>>),
    /// The shutdown's task ended: the engine's report.
    Closed(Result<ShutdownReport>),
    /// Serve the shard to the ractor cluster: a gateway now (answered) and
    /// after every reopen.
    #[cfg(feature = "cluster")]
    Serve(RpcReplyPort<Result<Option<ActorRef<crate::remote::cluster::GatewayMessage>>>>),
}

#[cfg(feature = "cluster")]
impl ractor::Message for KeeperMessage {}

impl std::fmt::Debug for KeeperMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ended { generation, end } => write!(f, "Ended({generation}, {end:?})"),
            Self::Look => f.write_str("Look"),
            Self::Looked(l) => write!(f, "Looked({:?})", l.sight),
            Self::Reopened(r) => write!(f, "Reopened(ok: {})", r.is_ok()),
            Self::Shutdown(_) => f.write_str("Shutdown"),
            Self::Closed(r) => write!(f, "Closed(ok: {})", r.is_ok()),
            #[cfg(feature = "cluster")]
            Self::Serve(_) => f.write_str("Serve"),
        }
    }
}

/// The keeper of one shard.
#[derive(Debug)]
pub(crate) struct Keeper;

/// A keeper's start: its shard, how to build the shard's engine, and the
/// engine already started.
pub(crate) struct KeeperArgs {
    pub(crate) shard: usize,
    pub(crate) count: usize,
    pub(crate) url: String,
    pub(crate) make: Arc<MakeFn>,
    pub(crate) supervision: Supervision,
    pub(crate) events: broadcast::Sender<ShardEvent>,
    pub(crate) slot: watch::Sender<Slot>,
    pub(crate) opened: Opened,
    /// The owning process's name under elastic placement.
    pub(crate) owner: Option<String>,
}

/// What the keeper is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Busy {
    Idle,
    Looking,
    Reopening,
    Closing,
}

/// A down shard.
#[derive(Debug)]
struct Down {
    since: Instant,
    reason: String,
    seen: Option<Seen>,
    /// The live writer that holds the store, as last reported.
    held_by: Option<u64>,
}

/// The keeper's state: everything about its shard, owned here alone.
pub(crate) struct KeeperState {
    shard: usize,
    count: usize,
    url: String,
    make: Arc<MakeFn>,
    sup: Supervision,
    events: broadcast::Sender<ShardEvent>,
    slot: watch::Sender<Slot>,
    owner: Option<String>,
    /// Counts the engines started; a watch report names its engine's.
    generation: u64,
    engine: Option<Engine>,
    ours: Option<u64>,
    store: Arc<dyn ObjectStore>,
    path: String,
    up_since: Instant,
    /// Stops and failed reopens in a row.
    failures: u32,
    down: Option<Down>,
    /// Not kept any more (its engine was shut down, or a reopen failed in a
    /// way retrying cannot mend): why.
    given_up: Option<String>,
    reader: Option<Arc<QueueReader>>,
    busy: Busy,
    timer: Option<
        tokio::task::JoinHandle<std::result::Result<(), ractor::MessagingErr<KeeperMessage>>>,
    >,
    closing: Vec<RpcReplyPort<Result<ShutdownReport>>>,
    #[cfg(feature = "cluster")]
    serve: bool,
    #[cfg(feature = "cluster")]
    gateway: Option<ActorRef<crate::remote::cluster::GatewayMessage>>,
}

impl Actor for Keeper {
    type Msg = KeeperMessage;
    type State = KeeperState;
    type Arguments = KeeperArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<KeeperMessage>,
        args: KeeperArgs,
    ) -> std::result::Result<KeeperState, ActorProcessingErr> {
        let Opened {
            engine,
            events,
            store,
            path,
            ours,
        } = args.opened;
        let state = KeeperState {
            shard: args.shard,
            count: args.count,
            url: args.url,
            make: args.make,
            sup: args.supervision,
            events: args.events,
            slot: args.slot,
            owner: args.owner,
            generation: 0,
            engine: Some(engine.clone()),
            ours,
            store,
            path,
            up_since: Instant::now(),
            failures: 0,
            down: None,
            given_up: None,
            reader: None,
            busy: Busy::Idle,
            timer: None,
            closing: Vec::new(),
            #[cfg(feature = "cluster")]
            serve: false,
            #[cfg(feature = "cluster")]
            gateway: None,
        };
        state.watch(&myself, &engine, events);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<KeeperMessage>,
        message: KeeperMessage,
        state: &mut KeeperState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match message {
            KeeperMessage::Ended { generation, end } => state.ended(&myself, generation, end),
            KeeperMessage::Look => {
                state.timer = None;
                state.look(&myself);
            }
            KeeperMessage::Looked(looked) => state.looked(&myself, looked),
            KeeperMessage::Reopened(result) => state.reopened(&myself, result).await,
            KeeperMessage::Shutdown(reply) => {
                state.closing.push(reply);
                if let Some(timer) = state.timer.take() {
                    timer.abort();
                }
                state.continue_closing(&myself);
            }
            KeeperMessage::Closed(result) => {
                let mut result = Some(result);
                for reply in state.closing.drain(..) {
                    let answer = result.take().unwrap_or(Err(EngineError::ShutDown));
                    let _ = reply.send(answer);
                }
                let reason = "shut down".to_string();
                state.publish(
                    None,
                    ShardStatus::Stopped {
                        reason: reason.clone(),
                    },
                );
                state.emit(ShardEvent::Stopped {
                    shard: state.shard,
                    reason,
                });
                myself.stop(None);
            }
            #[cfg(feature = "cluster")]
            KeeperMessage::Serve(reply) => {
                state.serve = true;
                let _ = reply.send(state.serve_gateway().await);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<KeeperMessage>,
        state: &mut KeeperState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        Ok(())
    }
}

impl KeeperState {
    fn emit(&self, event: ShardEvent) {
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    fn publish(&self, engine: Option<Engine>, status: ShardStatus) {
        self.slot.send_replace(Slot { engine, status });
    }

    fn watch(
        &self,
        myself: &ActorRef<KeeperMessage>,
        engine: &Engine,
        events: broadcast::Receiver<EngineEvent>,
    ) {
        let generation = self.generation;
        spawn_reporting(
            myself,
            watch_end(engine.actor().clone(), events),
            move |end| KeeperMessage::Ended {
                generation,
                end: end.unwrap_or_else(|e| End::Stopped(format!("watching the engine: {e}"))),
            },
        );
    }

    fn schedule_look(&mut self, myself: &ActorRef<KeeperMessage>, after: Duration) {
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
        self.timer = Some(myself.send_after(after, || KeeperMessage::Look));
    }

    fn ended(&mut self, myself: &ActorRef<KeeperMessage>, generation: u64, end: End) {
        if generation != self.generation || self.engine.is_none() || !self.closing.is_empty() {
            return;
        }
        self.engine = None;
        #[cfg(feature = "cluster")]
        {
            // It stops with its engine.
            self.gateway = None;
        }
        let shard = self.shard;
        let reason = match end {
            End::ShutDown => {
                self.give_up("its engine was shut down".into());
                return;
            }
            End::StoreClosed(reason) => format!("its store closed: {reason}"),
            End::Stopped(reason) => reason,
        };
        self.failures = if self.up_since.elapsed() >= self.sup.reset_after {
            1
        } else {
            self.failures.saturating_add(1)
        };
        let delay = self.sup.backoff(self.failures);
        warn!(shard, %reason, ?delay, "shard down; looking at its store after the delay");
        self.down = Some(Down {
            since: Instant::now(),
            reason: reason.clone(),
            seen: None,
            held_by: None,
        });
        self.publish(
            None,
            ShardStatus::Down {
                reason: reason.clone(),
                held_by: None,
            },
        );
        self.emit(ShardEvent::Down { shard, reason });
        self.schedule_look(myself, delay);
    }

    fn give_up(&mut self, reason: String) {
        info!(shard = self.shard, %reason, "shard no longer kept");
        self.down = None;
        self.given_up = Some(reason.clone());
        self.publish(
            None,
            ShardStatus::Stopped {
                reason: reason.clone(),
            },
        );
        self.emit(ShardEvent::Stopped {
            shard: self.shard,
            reason,
        });
    }

    fn look(&mut self, myself: &ActorRef<KeeperMessage>) {
        if self.busy != Busy::Idle || self.down.is_none() || !self.closing.is_empty() {
            return;
        }
        self.busy = Busy::Looking;
        let work = look(
            self.reader.clone(),
            self.store.clone(),
            self.path.clone(),
            self.sup.probe_interval,
        );
        spawn_reporting(myself, work, |looked| {
            KeeperMessage::Looked(looked.unwrap_or_else(|e| Looked {
                reader: None,
                sight: Err(e),
            }))
        });
    }

    /// Shut down what the keeper holds, once no task is in flight (a look
    /// or a reopen reports first; a reopened engine is shut down too).
    fn continue_closing(&mut self, myself: &ActorRef<KeeperMessage>) {
        if self.busy != Busy::Idle {
            return;
        }
        self.busy = Busy::Closing;
        let engine = self.engine.clone();
        let reader = self.reader.take();
        let shard = self.shard;
        let why = self
            .down
            .as_ref()
            .map(|d| d.reason.clone())
            .or_else(|| self.given_up.clone())
            .unwrap_or_else(|| "it has no engine".into());
        let work = async move {
            close_reader(reader).await;
            match engine {
                Some(engine) => engine.shutdown().await,
                None => Err(Error::Shard(ShardError::Down { shard, reason: why })),
            }
        };
        spawn_reporting(myself, work, |result| {
            KeeperMessage::Closed(result.unwrap_or_else(|e| {
                Err(EngineError::ActorUnavailable {
                    actor: "shard keeper",
                    reason: format!("shutting the shard down: {e}"),
                })
            }))
        });
    }

    /// The gateway of the running engine, started if it has none.
    #[cfg(feature = "cluster")]
    async fn serve_gateway(
        &mut self,
    ) -> Result<Option<ActorRef<crate::remote::cluster::GatewayMessage>>> {
        let Some(engine) = self.engine.clone() else {
            return Ok(None);
        };
        if let Some(g) = &self.gateway
            && g.get_status() == ractor::ActorStatus::Running
        {
            return Ok(Some(g.clone()));
        }
        let gateway = crate::remote::cluster::spawn_gateway(engine, self.shard).await?;
        self.gateway = Some(gateway.clone());
        Ok(Some(gateway))
    }
}

/// A start error that another try cannot mend: the configuration or the
/// store's layout is wrong, not the store's availability.
fn permanent(e: &Error) -> bool {
    matches!(
        e,
        EngineError::ShardMismatch { .. }
            | EngineError::LayoutMismatch { .. }
            | EngineError::InvalidConfig(_)
            | EngineError::DuplicateJobType(_)
            | EngineError::InvalidStoreUrl { .. }
            | EngineError::StoreFeatureMissing { .. }
    )
}
