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

use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::{EngineError, EngineEvent, EngineMessage, ShutdownReport};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::object_store::ObjectStore;
use taquba::{QueueReader, ReaderMode, ReaderOptions};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::{info, warn};

use super::{ShardError, ShardEvent, ShardStatus};
use crate::builder::EngineBuilder;
use crate::engine::Engine;
use crate::error::{Error, Result};

/// Builds a shard's engine: `make(shard, url)`, called at the start and at
/// every reopen.
pub(crate) type MakeFn = dyn Fn(usize, &str) -> EngineBuilder + Send + Sync;

/// Longest wait for one look at the store (opening a reader, reading the
/// beat) or for the read of the writer epoch after a start.
const LOOK_LIMIT: Duration = Duration::from_secs(30);

/// Longest wait, once an engine's tree stopped, for its last event to be
/// read (it was sent before the stop: this only drains the channel).
const LAST_EVENT_LIMIT: Duration = Duration::from_secs(5);

/// How a shard's keeper supervises it (set on
/// [`ShardedEngineBuilder`](super::ShardedEngineBuilder)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Supervision {
    /// First delay before a stopped shard is looked at (and reopened, if
    /// it is still this process's); doubles with each stop or failed
    /// reopen in a row.
    pub(crate) backoff_base: Duration,
    /// Longest such delay.
    pub(crate) backoff_max: Duration,
    /// How often a held shard's store is looked at (and the reader's
    /// manifest poll).
    pub(crate) probe_interval: Duration,
    /// Beat intervals without a new beat after which the writer that holds
    /// the store counts as gone.
    pub(crate) stale_beats: u32,
    /// An engine that stayed up this long starts the count of stops in a
    /// row again.
    pub(crate) reset_after: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            probe_interval: Duration::from_secs(2),
            stale_beats: 3,
            reset_after: Duration::from_secs(60),
        }
    }
}

impl Supervision {
    /// The delay before the look after the `n`th stop or failure in a row
    /// (1-based): `base·2^(n−1)`, capped.
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        let doubled = self
            .backoff_base
            .saturating_mul(2u32.saturating_pow(n.saturating_sub(1)));
        doubled.min(self.backoff_max)
    }

    /// How long a writer beating every `interval` (`None`: one without a
    /// beat of its own, judged by gaffer's default beat) may be silent
    /// before it counts as gone: `stale_beats` intervals, plus two probe
    /// intervals for the reader's lag.
    pub(crate) fn window(&self, interval: Option<Duration>) -> Duration {
        let beat = interval.unwrap_or(crate::builder::LIVENESS_HEARTBEAT);
        beat.saturating_mul(self.stale_beats)
            .saturating_add(self.probe_interval.saturating_mul(2))
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(EngineError::InvalidConfig(what.to_string()));
        if self.backoff_base.is_zero() || self.backoff_max < self.backoff_base {
            return bad("a shard's reopen backoff needs 0 < base <= max");
        }
        if self.probe_interval.is_zero() {
            return bad("a shard's probe interval must be above zero");
        }
        if self.stale_beats == 0 {
            return bad("a writer counts as gone after at least 1 missed beat");
        }
        Ok(())
    }
}

/// The latest liveness beat in the store, as a look saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Beat {
    pub(crate) counter: u64,
    pub(crate) writer_epoch: u64,
    pub(crate) interval: Duration,
    pub(crate) closed: bool,
}

/// What one look at a down shard's store saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sight {
    /// The manifest's writer epoch: the last writer to open the store.
    pub(crate) writer_epoch: u64,
    /// The latest beat (of whichever writer wrote it).
    pub(crate) beat: Option<Beat>,
    /// The store's durable sequence number (advances with every commit).
    pub(crate) durable_seq: u64,
}

/// The last sign of life of the writer that holds the store, and since
/// when the keeper has seen nothing newer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    epoch: u64,
    /// Its beat counter, or the durable sequence for a writer without beats.
    mark: u64,
    since: Instant,
}

/// What the keeper of a down shard does after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No writer opened the store after this process's engine: reopen.
    Ours,
    /// The writer that took the store closed it cleanly: reopen.
    Released { epoch: u64 },
    /// The writer that took the store showed no sign of life for `silent`:
    /// it is gone; reopen.
    Stale { epoch: u64, silent: Duration },
    /// The writer that took the store is alive (or not yet silent long
    /// enough): wait and look again.
    Held { epoch: u64 },
}

/// The ownership decision. `ours` is the writer epoch this process's last
/// engine opened the store at (`None` if it could not be read: then only
/// the store's liveness decides, which is slower after a crash but never
/// fences a live writer); `last` what the previous look remembered.
/// Answers the verdict and what to remember for the next look.
pub(crate) fn judge(
    ours: Option<u64>,
    sight: &Sight,
    last: Option<Seen>,
    now: Instant,
    supervision: &Supervision,
) -> (Verdict, Option<Seen>) {
    if let Some(ours) = ours
        && sight.writer_epoch <= ours
    {
        return (Verdict::Ours, None);
    }
    let epoch = sight.writer_epoch;
    // The holder's own beat; an older epoch's beat says nothing of it.
    let beat = sight.beat.filter(|b| b.writer_epoch == epoch);
    if beat.is_some_and(|b| b.closed) {
        return (Verdict::Released { epoch }, None);
    }
    let mark = beat.map_or(sight.durable_seq, |b| b.counter);
    let seen = match last {
        Some(s) if s.epoch == epoch && s.mark == mark => s,
        _ => Seen {
            epoch,
            mark,
            since: now,
        },
    };
    let silent = now.saturating_duration_since(seen.since);
    if silent >= supervision.window(beat.map(|b| b.interval)) {
        (Verdict::Stale { epoch, silent }, None)
    } else {
        (Verdict::Held { epoch }, Some(seen))
    }
}

/// What a keeper publishes for `ShardedEngine`'s methods: the running
/// engine (if any) and the shard's status. Written only by the keeper.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) engine: Option<Engine>,
    pub(crate) status: ShardStatus,
}

/// A shard's engine just started, and where its store is.
pub(crate) struct Opened {
    pub(crate) engine: Engine,
    /// Taken on the builder: it sees the engine's last event.
    events: broadcast::Receiver<EngineEvent>,
    store: Arc<dyn ObjectStore>,
    path: String,
    /// The writer epoch the engine opened the store at.
    ours: Option<u64>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("path", &self.path)
            .field("ours", &self.ours)
            .finish_non_exhaustive()
    }
}

/// Start shard `shard`'s engine and read the writer epoch it holds.
pub(crate) async fn open(make: &MakeFn, shard: usize, count: usize, url: &str) -> Result<Opened> {
    let builder = make(shard, url).in_shard(shard, count, url);
    let path = builder.queue_path_of().to_string();
    let events = builder.subscribe();
    let engine = builder.start().await?;
    let store = engine.inner.services().store().clone();
    // Read right after the open: the manifest names this writer (a writer
    // that opened in between would make this process take its epoch for
    // its own, and retake the store from it once, after which the other,
    // seeing this one alive, waits).
    let ours = match tokio::time::timeout(LOOK_LIMIT, writer_epoch(&store, &path)).await {
        Ok(Ok(epoch)) => Some(epoch),
        Ok(Err(e)) => {
            warn!(shard, error = %e, "reading the shard's writer epoch failed; a stop is judged by the store's liveness alone");
            None
        }
        Err(_) => {
            warn!(
                shard,
                "reading the shard's writer epoch timed out; a stop is judged by the store's liveness alone"
            );
            None
        }
    };
    Ok(Opened {
        engine,
        events,
        store,
        path,
        ours,
    })
}

fn reader_options(poll: Duration) -> ReaderOptions {
    // Follows the manifest without writing to the store.
    ReaderOptions::default()
        .mode(ReaderMode::FollowLatest)
        .manifest_poll_interval(poll)
}

async fn writer_epoch(
    store: &Arc<dyn ObjectStore>,
    path: &str,
) -> std::result::Result<u64, taquba::Error> {
    // The epoch is the manifest's: no WAL to replay (a store just taken
    // over can hold many WAL objects not yet compacted).
    let options = reader_options(LOOK_LIMIT).skip_wal_replay(true);
    let reader = QueueReader::open_with_options(store.clone(), path, options).await?;
    let epoch = reader.last_store_activity().writer_epoch;
    let _ = reader.close().await;
    Ok(epoch)
}

/// How an engine's tree ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// A graceful shutdown.
    ShutDown,
    /// Its store closed under it (fenced by another writer, or closed).
    StoreClosed(String),
    /// It stopped without a last event: killed or crashed.
    Stopped(String),
}

/// Wait for the engine's tree to stop, then read its last event. The wait
/// ends when the engine stops (its supervisor's exit), which every path
/// of the engine comes to; the keeper ignores a report of an engine it no
/// longer holds.
async fn watch_end(
    actor: ActorRef<EngineMessage>,
    mut events: broadcast::Receiver<EngineEvent>,
) -> End {
    let _ = actor.wait(None).await;
    let mut end =
        End::Stopped("the engine stopped without a last event (killed or crashed)".into());
    loop {
        match tokio::time::timeout(LAST_EVENT_LIMIT, events.recv()).await {
            Ok(Ok(EngineEvent::ShutDown { .. })) => end = End::ShutDown,
            Ok(Ok(EngineEvent::StoreClosed { reason })) => end = End::StoreClosed(reason),
            Ok(Ok(_) | Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return end,
        }
    }
}

/// Run `work` in a task and tell `me` what it came to, also when it panics.
fn spawn_reporting<T: Send + 'static>(
    me: &ActorRef<KeeperMessage>,
    work: impl Future<Output = T> + Send + 'static,
    report: impl FnOnce(std::result::Result<T, String>) -> KeeperMessage + Send + 'static,
) {
    let me = me.clone();
    gaffer_actors::task::spawn_reported(work, move |out| {
        // A keeper that stopped meanwhile needs no answer.
        let _ = me.cast(report(out.map_err(|e| e.to_string())));
    });
}

/// A look's reader and what it saw.
pub(crate) struct Looked {
    reader: Option<Arc<QueueReader>>,
    sight: std::result::Result<Sight, String>,
}

/// Look at the store through `reader` (opened first if `None`).
async fn look(
    reader: Option<Arc<QueueReader>>,
    store: Arc<dyn ObjectStore>,
    path: String,
    poll: Duration,
) -> Looked {
    let reader = match reader {
        Some(r) => r,
        None => {
            let opened = tokio::time::timeout(
                LOOK_LIMIT,
                QueueReader::open_with_options(store, &path, reader_options(poll)),
            )
            .await;
            match opened {
                Ok(Ok(r)) => Arc::new(r),
                Ok(Err(e)) => {
                    return Looked {
                        reader: None,
                        sight: Err(format!("opening a reader: {e}")),
                    };
                }
                Err(_) => {
                    return Looked {
                        reader: None,
                        sight: Err(format!("opening a reader took over {LOOK_LIMIT:?}")),
                    };
                }
            }
        }
    };
    let activity = reader.last_store_activity();
    let sight = match tokio::time::timeout(LOOK_LIMIT, reader.writer_heartbeat()).await {
        Ok(Ok(beat)) => Ok(Sight {
            writer_epoch: activity.writer_epoch,
            beat: beat.map(|b| Beat {
                counter: b.counter,
                writer_epoch: b.writer_epoch,
                interval: b.interval,
                closed: b.closed,
            }),
            durable_seq: activity.durable_seq,
        }),
        Ok(Err(e)) => Err(format!("reading the writer's beat: {e}")),
        Err(_) => Err(format!(
            "reading the writer's beat took over {LOOK_LIMIT:?}"
        )),
    };
    Looked {
        reader: Some(reader),
        sight,
    }
}

async fn close_reader(reader: Option<Arc<QueueReader>>) {
    if let Some(r) = reader {
        let _ = tokio::time::timeout(LOOK_LIMIT, r.close()).await;
    }
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
    Serve(RpcReplyPort<Result<Option<ActorRef<crate::cluster::GatewayMessage>>>>),
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
    gateway: Option<ActorRef<crate::cluster::GatewayMessage>>,
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

    fn looked(&mut self, myself: &ActorRef<KeeperMessage>, looked: Looked) {
        self.busy = Busy::Idle;
        if looked.reader.is_some() {
            self.reader = looked.reader;
        }
        if !self.closing.is_empty() {
            self.continue_closing(myself);
            return;
        }
        let shard = self.shard;
        let Some(down) = self.down.as_mut() else {
            return;
        };
        let sight = match looked.sight {
            Ok(sight) => sight,
            Err(e) => {
                // The reader is kept: a read of a view whose object was
                // collected succeeds again once the view moves on.
                warn!(shard, error = %e, "looking at the shard's store failed; looking again");
                self.schedule_look(myself, self.sup.probe_interval);
                return;
            }
        };
        let (verdict, seen) = judge(self.ours, &sight, down.seen, Instant::now(), &self.sup);
        down.seen = seen;
        let newly_held = match verdict {
            Verdict::Held { epoch } if down.held_by != Some(epoch) => {
                down.held_by = Some(epoch);
                Some((epoch, down.reason.clone()))
            }
            _ => None,
        };
        match verdict {
            Verdict::Held { .. } => {
                if let Some((epoch, reason)) = newly_held {
                    info!(
                        shard,
                        writer_epoch = epoch,
                        "another writer holds the shard's store; waiting until it is gone"
                    );
                    self.publish(
                        None,
                        ShardStatus::Down {
                            reason,
                            held_by: Some(epoch),
                        },
                    );
                    self.emit(ShardEvent::Held {
                        shard,
                        writer_epoch: epoch,
                    });
                }
                self.schedule_look(myself, self.sup.probe_interval);
            }
            Verdict::Ours => {
                info!(
                    shard,
                    "no other writer opened the shard's store; reopening it"
                );
                self.reopen(myself);
            }
            Verdict::Released { epoch } => {
                info!(
                    shard,
                    writer_epoch = epoch,
                    "the writer that held the shard's store closed it; reopening it"
                );
                self.reopen(myself);
            }
            Verdict::Stale { epoch, silent } => {
                info!(
                    shard,
                    writer_epoch = epoch,
                    ?silent,
                    "the writer that held the shard's store is silent; reopening it"
                );
                self.reopen(myself);
            }
        }
    }

    fn reopen(&mut self, myself: &ActorRef<KeeperMessage>) {
        self.busy = Busy::Reopening;
        let reader = self.reader.take();
        let make = self.make.clone();
        let (shard, count, url) = (self.shard, self.count, self.url.clone());
        let work = async move {
            close_reader(reader).await;
            open(&*make, shard, count, &url).await
        };
        spawn_reporting(myself, work, |opened| {
            KeeperMessage::Reopened(
                opened.unwrap_or_else(|e| {
                    Err(EngineError::Startup(format!("reopening the shard: {e}")))
                }),
            )
        });
    }

    async fn reopened(&mut self, myself: &ActorRef<KeeperMessage>, result: Result<Opened>) {
        self.busy = Busy::Idle;
        let shard = self.shard;
        match result {
            Ok(opened) => {
                self.generation += 1;
                let engine = opened.engine.clone();
                self.engine = Some(opened.engine);
                self.ours = opened.ours;
                self.store = opened.store;
                self.path = opened.path;
                self.up_since = Instant::now();
                self.watch(myself, &engine, opened.events);
                if !self.closing.is_empty() {
                    self.continue_closing(myself);
                    return;
                }
                let down_for = self
                    .down
                    .take()
                    .map_or(Duration::ZERO, |d| d.since.elapsed());
                info!(shard, ?down_for, "shard back");
                self.publish(Some(engine), ShardStatus::Up);
                self.emit(ShardEvent::Back { shard, down_for });
                #[cfg(feature = "cluster")]
                if self.serve
                    && let Err(e) = self.serve_gateway().await
                {
                    warn!(shard, error = %e, "the shard's gateway did not start");
                }
            }
            Err(e) => {
                if !self.closing.is_empty() {
                    self.continue_closing(myself);
                    return;
                }
                if permanent(&e) {
                    self.give_up(format!("reopening it failed: {e}"));
                    return;
                }
                self.failures = self.failures.saturating_add(1);
                let retry_in = self.sup.backoff(self.failures);
                warn!(shard, error = %e, ?retry_in, "reopening the shard failed");
                self.emit(ShardEvent::ReopenFailed {
                    shard,
                    error: e.to_string(),
                    retry_in,
                });
                self.schedule_look(myself, retry_in);
            }
        }
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
    async fn serve_gateway(&mut self) -> Result<Option<ActorRef<crate::cluster::GatewayMessage>>> {
        let Some(engine) = self.engine.clone() else {
            return Ok(None);
        };
        if let Some(g) = &self.gateway
            && g.get_status() == ractor::ActorStatus::Running
        {
            return Ok(Some(g.clone()));
        }
        let gateway = crate::cluster::spawn_gateway(engine, self.shard).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sup() -> Supervision {
        Supervision {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(1),
            probe_interval: Duration::from_millis(50),
            stale_beats: 3,
            reset_after: Duration::from_secs(60),
        }
    }

    fn beat(counter: u64, writer_epoch: u64, closed: bool) -> Option<Beat> {
        Some(Beat {
            counter,
            writer_epoch,
            interval: Duration::from_millis(200),
            closed,
        })
    }

    fn sight(writer_epoch: u64, beat: Option<Beat>, durable_seq: u64) -> Sight {
        Sight {
            writer_epoch,
            beat,
            durable_seq,
        }
    }

    #[test]
    fn the_backoff_doubles_to_its_cap_and_the_window_counts_beats_and_lag() {
        let s = sup();
        let ms = Duration::from_millis;
        assert_eq!(s.backoff(1), ms(100));
        assert_eq!(s.backoff(2), ms(200));
        assert_eq!(s.backoff(4), ms(800));
        assert_eq!(s.backoff(5), ms(1000));
        assert_eq!(s.backoff(200), ms(1000));
        // 3 beats of 200 ms, plus two probes of 50 ms.
        assert_eq!(s.window(Some(ms(200))), ms(700));
        // A writer without a beat is judged by gaffer's default beat.
        assert_eq!(
            s.window(None),
            crate::builder::LIVENESS_HEARTBEAT * 3 + ms(100)
        );
        assert!(s.validate().is_ok());
        assert!(
            Supervision {
                stale_beats: 0,
                ..sup()
            }
            .validate()
            .is_err()
        );
        assert!(
            Supervision {
                backoff_max: ms(10),
                ..sup()
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn a_store_no_one_opened_since_is_retaken_at_once() {
        let now = Instant::now();
        // The epoch is still ours: the engine crashed (its own beat, or
        // none, or a later one of ours: all the same).
        for b in [None, beat(7, 4, false), beat(7, 4, true)] {
            let (v, seen) = judge(Some(4), &sight(4, b, 10), None, now, &sup());
            assert_eq!(v, Verdict::Ours);
            assert_eq!(seen, None);
        }
    }

    #[test]
    fn a_live_writer_is_never_retaken_from_and_a_silent_one_is() {
        let s = sup();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Epoch 5 opened the store after ours (4): a fence. Its beats go on.
        let mut last = None;
        for i in 0..50 {
            let now = t0 + ms(100) * i;
            let (v, seen) = judge(
                Some(4),
                &sight(5, beat(i.into(), 5, false), 0),
                last,
                now,
                &s,
            );
            assert_eq!(v, Verdict::Held { epoch: 5 }, "look {i}");
            last = seen;
        }
        // Its beats stop at counter 49: held until the window (700 ms) has
        // passed since it was first seen, then stale.
        let stop = t0 + ms(100) * 49;
        let (v, seen) = judge(
            Some(4),
            &sight(5, beat(49, 5, false), 0),
            last,
            stop + ms(699),
            &s,
        );
        assert_eq!(v, Verdict::Held { epoch: 5 });
        let (v, _) = judge(
            Some(4),
            &sight(5, beat(49, 5, false), 0),
            seen,
            stop + ms(700),
            &s,
        );
        assert_eq!(
            v,
            Verdict::Stale {
                epoch: 5,
                silent: ms(700)
            }
        );
    }

    #[test]
    fn a_closing_beat_releases_the_store_at_once() {
        let now = Instant::now();
        let (v, _) = judge(Some(4), &sight(5, beat(9, 5, true), 0), None, now, &sup());
        assert_eq!(v, Verdict::Released { epoch: 5 });
        // An older writer's closing beat says nothing of the one that holds
        // the store now.
        let (v, _) = judge(Some(4), &sight(6, beat(9, 5, true), 0), None, now, &sup());
        assert_eq!(v, Verdict::Held { epoch: 6 });
    }

    #[test]
    fn a_writer_without_beats_is_judged_by_its_commits_and_the_default_window() {
        let s = sup();
        let t0 = Instant::now();
        let window = s.window(None);
        // Epoch 6 has written no beat (the latest is epoch 5's): its
        // commits (the durable sequence) are its sign of life.
        let (v, seen) = judge(Some(4), &sight(6, beat(3, 5, false), 100), None, t0, &s);
        assert_eq!(v, Verdict::Held { epoch: 6 });
        let (v, seen) = judge(
            Some(4),
            &sight(6, beat(3, 5, false), 101),
            seen,
            t0 + window,
            &s,
        );
        assert_eq!(v, Verdict::Held { epoch: 6 }, "a commit is a sign of life");
        let later = t0 + window * 2;
        let (v, _) = judge(Some(4), &sight(6, beat(3, 5, false), 101), seen, later, &s);
        assert_eq!(
            v,
            Verdict::Stale {
                epoch: 6,
                silent: window
            }
        );
    }

    #[test]
    fn a_new_holder_starts_its_own_window() {
        let s = sup();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (_, seen) = judge(Some(4), &sight(5, beat(1, 5, false), 0), None, t0, &s);
        // Epoch 5 went silent, then epoch 6 took the store: the silence of
        // 5 does not count for 6.
        let (v, _) = judge(
            Some(4),
            &sight(6, beat(1, 6, false), 0),
            seen,
            t0 + ms(5000),
            &s,
        );
        assert_eq!(v, Verdict::Held { epoch: 6 });
    }

    #[test]
    fn without_our_epoch_only_liveness_decides() {
        let s = sup();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Our own last beat (epoch 4, unknown to us) stopped with our crash:
        // stale after the window, never at once.
        let (v, seen) = judge(None, &sight(4, beat(8, 4, false), 0), None, t0, &s);
        assert_eq!(v, Verdict::Held { epoch: 4 });
        let (v, _) = judge(
            None,
            &sight(4, beat(8, 4, false), 0),
            seen,
            t0 + ms(700),
            &s,
        );
        assert!(matches!(v, Verdict::Stale { epoch: 4, .. }), "{v:?}");
    }
}
