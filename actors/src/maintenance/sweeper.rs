//! Sweeper: the retention actor. Each tick (the poll interval, re-armed after
//! the pass so ticks never pile up) it runs a retention pass, in a task that
//! reports its end even if it panics (the actor never awaits inside
//! `handle`): under retention it removes expired outcome records (and the
//! run's index entries, memo entries and output blobs) through taquba's
//! `ExpiryIndex`,
//! forgets batches whose retention ended, and removes operator request
//! records past `request_retention`. A pass in flight when the sweeper stops
//! is aborted (the shutdown closes the queue, which the pass holds); the
//! entries it did not reach are read again by the next pass.
//!
//! There is no reconciliation of queue dead-letters: taquba never ends a
//! gaffer job on its own (its attempt limit is out of reach, see
//! `attempts`), so every dead job was dead-lettered by a gaffer settlement,
//! with its record, in one transaction.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::{Expired, Queue, SettlementEffects};
use tracing::warn;

use crate::batches::registry::RegistryRef;
use crate::error::Result;
use crate::events::EngineEvent;
use crate::exec::memo::delete_prefix;
use crate::layout::keys;
use crate::layout::records::{self, BatchHead, OutcomeRecord};
use crate::services::Services;

/// Messages of the sweeper.
#[derive(Debug)]
pub(crate) enum SweeperMessage {
    /// The timer: run a pass (and re-arm the timer after it).
    Sweep,
    /// Run one pass now and reply with what it did (it starts after the
    /// request, even if a pass is in flight).
    SweepNow(RpcReplyPort<SweepReport>),
    /// A pass finished.
    PassDone(std::result::Result<SweepReport, PassFailed>),
    /// Its other timer: look at the queues' counters, and snapshot them if
    /// they changed (`snapshot`).
    Snapshot,
    /// The counters' look finished: what is written now.
    Snapshotted(std::result::Result<crate::maintenance::snapshot::Last, String>),
}

/// Why a pass ended without its report.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PassFailed {
    /// The engine is shutting down (its queue is gone).
    #[error("the engine shut down")]
    ShutDown,
    /// A read or a write of the pass failed.
    #[error("{0}")]
    Failed(String),
    /// The pass panicked, or was aborted.
    #[error("{0}")]
    Ended(String),
}

/// The typed handle of the sweeper, for its supervisor.
#[derive(Debug, Clone)]
pub(crate) struct SweeperRef(pub(crate) ActorRef<SweeperMessage>);

impl SweeperRef {
    #[cfg(feature = "testing")]
    /// The actor's cell.
    pub(crate) fn get_cell(&self) -> ractor::ActorCell {
        self.0.get_cell()
    }

    /// Run one pass now; `reply` gets what it did.
    pub(crate) fn sweep_now(&self, reply: RpcReplyPort<SweepReport>) {
        let _ = self.0.cast(SweeperMessage::SweepNow(reply));
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Expired outcome records and batches removed.
    pub expired: usize,
}

/// Arguments of the sweeper.
#[derive(Debug)]
pub(crate) struct SweeperArguments {
    /// Engine services.
    pub services: Arc<Services>,
    /// Where the batches registry is.
    pub(crate) registry: RegistryRef,
}

/// The sweeper actor.
#[derive(Debug)]
pub(crate) struct Sweeper;

/// State of the sweeper.
#[derive(Debug)]
pub(crate) struct SweeperState {
    services: Arc<Services>,
    registry: RegistryRef,
    /// The pass in flight: aborted if the sweeper stops.
    in_flight: Option<tokio::task::AbortHandle>,
    /// A timer tick is owed: the timer is re-armed when the pass in flight
    /// ends (ticks never pile up, and never get lost).
    tick_owed: bool,
    /// Callers answered when the pass in flight ends.
    current: Vec<RpcReplyPort<SweepReport>>,
    /// Callers whose pass has not started yet.
    next: Vec<RpcReplyPort<SweepReport>>,
    /// The counters' snapshot last written.
    last_snapshot: crate::maintenance::snapshot::Last,
    /// The counters' look in flight: aborted if the sweeper stops.
    snapshot: Option<tokio::task::AbortHandle>,
}

impl SweeperState {
    fn start(&mut self, myself: &ActorRef<SweeperMessage>, timer: bool) {
        self.tick_owed |= timer;
        self.current = std::mem::take(&mut self.next);
        let services = self.services.clone();
        let registry = self.registry.clone();
        let myself = myself.clone();
        let work = async move {
            pass(&services, registry).await.map_err(|e| match e {
                crate::EngineError::ShutDown => PassFailed::ShutDown,
                e => PassFailed::Failed(e.to_string()),
            })
        };
        self.in_flight = Some(crate::task::spawn_reported(work, move |ended| {
            let done = ended.unwrap_or_else(|e| Err(PassFailed::Ended(e.to_string())));
            let _ = myself.cast(SweeperMessage::PassDone(done));
        }));
    }
}

async fn pass(services: &Arc<Services>, registry: RegistryRef) -> Result<SweepReport> {
    let queue = services.queue()?;
    #[cfg(feature = "testing")]
    crate::testing::panics::check(
        crate::testing::panics::PanicPoint::SweepPass,
        &services.settings().queue_name,
    );
    let expired = expire(services, &queue).await?
        + expire_batches(services, &queue, registry).await?
        + expire_requests(services, &queue).await?
        + expire_workflows(services, &queue).await?;
    if expired > 0 {
        services.emit(EngineEvent::Swept { removed: expired });
    }
    Ok(SweepReport { expired })
}

async fn expire_batches(
    services: &Arc<Services>,
    queue: &Queue,
    registry: RegistryRef,
) -> Result<usize> {
    // The retention of each batch is its run's; entries are only written
    // for runs that asked for it, so the pass uses the smallest window: an
    // entry's own deadline is checked in the callback.
    let index = services.batch_expiry().clone();
    let now = services.clock().now_ms();
    let removed = index
        .pass(
            queue,
            now,
            std::time::Duration::ZERO,
            move |at_ms, suffix| {
                let services = services.clone();
                let registry = registry.clone();
                async move { expire_batch(&services, &registry, now, at_ms, suffix).await }
            },
        )
        .await?;
    Ok(removed)
}

/// Remove the operator request records (`gaffer/v1/requests/{id}`) older
/// than `request_retention`: each entry names its request.
async fn expire_requests(services: &Arc<Services>, queue: &Queue) -> Result<usize> {
    let retention = services.settings().request_retention;
    let now = services.clock().now_ms();
    let index = services.request_expiry().clone();
    let removed = index
        .pass(queue, now, retention, |_at_ms, suffix| async move {
            let effects = match String::from_utf8(suffix) {
                Ok(id) => SettlementEffects::default()
                    .kv_delete(crate::engine::intake::request_result_key(&id)),
                Err(_) => SettlementEffects::default(),
            };
            Expired::Delete(effects)
        })
        .await?;
    Ok(removed)
}

/// Remove the records of workflows that ended `retention` ago: the
/// workflow's record and every step record and marker (the steps' outcome
/// records have their own entries). An entry of a workflow retried since
/// (its end time changed) only removes itself.
async fn expire_workflows(services: &Arc<Services>, queue: &Queue) -> Result<usize> {
    use crate::workflows::layout::{WorkflowRecord, workflow_dir, workflow_key};
    let Some(retention) = services.settings().retention else {
        return Ok(0);
    };
    let now = services.clock().now_ms();
    let index = services.workflow_expiry().clone();
    let removed = index
        .pass(queue, now, retention, move |at_ms, suffix| {
            let services = services.clone();
            async move {
                let Ok(id) = String::from_utf8(suffix) else {
                    return Expired::Delete(SettlementEffects::default());
                };
                let Ok(queue) = services.queue() else {
                    return Expired::Keep;
                };
                let key = workflow_key(&id);
                let raw = match queue.view().kv_get(&key).await {
                    Ok(Some(raw)) => raw,
                    Ok(None) => return Expired::Delete(SettlementEffects::default()),
                    Err(e) => {
                        warn!(workflow = %id, error = %e, "retention: reading the workflow failed; kept for the next pass");
                        return Expired::Keep;
                    }
                };
                match records::decode::<WorkflowRecord>(&key, &raw) {
                    Ok(rec) if rec.ended_at_ms == Some(at_ms) => {}
                    _ => return Expired::Delete(SettlementEffects::default()),
                }
                let dir = workflow_dir(&id);
                let mut effects = SettlementEffects::default().kv_delete(key.clone());
                let entries = queue
                    .view()
                    .kv_entries(&dir, .., taquba::KvOrder::Ascending, 1000);
                let mut entries = std::pin::pin!(entries);
                loop {
                    match futures_util::TryStreamExt::try_next(&mut entries).await {
                        Ok(Some((k, _))) => effects = effects.kv_delete(k),
                        Ok(None) => break,
                        Err(e) => {
                            warn!(workflow = %id, error = %e, "retention: listing the workflow's records failed; kept for the next pass");
                            return Expired::Keep;
                        }
                    }
                }
                Expired::DeleteIf {
                    key,
                    expected: Some(raw.to_vec()),
                    effects,
                }
            }
        })
        .await?;
    Ok(removed)
}

async fn expire(services: &Arc<Services>, queue: &Queue) -> Result<usize> {
    let Some(retention) = services.settings().retention else {
        return Ok(0);
    };
    let now = services.clock().now_ms();
    let index = services.expiry().clone();
    let removed = index
        .pass(queue, now, retention, move |at_ms, suffix| {
            let services = services.clone();
            async move {
                match services.queue() {
                    Ok(q) => expire_one(&services, &q, at_ms, suffix).await,
                    Err(_) => Expired::Keep,
                }
            }
        })
        .await?;
    Ok(removed)
}

async fn expire_one(services: &Services, queue: &Queue, at_ms: u64, suffix: Vec<u8>) -> Expired {
    let Ok(run_id) = String::from_utf8(suffix) else {
        return Expired::Delete(SettlementEffects::default());
    };
    if !keys::is_valid_id(&run_id) {
        return Expired::Delete(SettlementEffects::default());
    }
    let key = keys::outcome_key(&run_id);
    let raw = match queue.view().kv_get(&key).await {
        Ok(Some(raw)) => raw,
        Ok(None) => return Expired::Delete(SettlementEffects::default()),
        Err(e) => {
            warn!(%run_id, error = %e, "retention: reading the outcome failed; kept for the next pass");
            return Expired::Keep;
        }
    };
    // An entry of an earlier run of this id (the id ran again after it) only
    // removes itself.
    // Its index entries go with it: the finished-jobs index's and its
    // tags'. A record that does not decode leaves its tags' entries, which
    // a listing skips (no record carries them).
    let index_entries = match records::decode::<OutcomeRecord>(&key, &raw) {
        Ok(rec) if rec.finished_at_ms != at_ms => {
            return Expired::Delete(SettlementEffects::default());
        }
        Ok(rec) => {
            let mut entries = vec![rec.ended_key(&run_id)];
            entries.extend(rec.tags.iter().flat_map(|t| t.keys(&run_id)));
            entries
        }
        Err(_) => Vec::new(),
    };
    let blob = &services.settings().blob_prefix;
    for prefix in [
        keys::memo_dir(blob, &run_id),
        keys::output_blob_dir(blob, &run_id),
    ] {
        if let Err(e) = delete_prefix(services.store(), &prefix).await {
            warn!(%run_id, error = %e, "retention: deleting objects failed; kept for the next pass");
            return Expired::Keep;
        }
    }
    let mut effects = SettlementEffects::default().kv_delete(key.clone());
    for entry in index_entries {
        effects = effects.kv_delete(entry);
    }
    Expired::DeleteIf {
        key,
        expected: Some(raw.to_vec()),
        effects,
    }
}

/// A batch retention entry: `{due_ms}{generation:016x}{batch_id}` where the
/// entry's time is the completion time plus the retention (so the pass runs
/// with zero retention and the entry is due exactly then).
async fn expire_batch(
    services: &Services,
    registry: &RegistryRef,
    _now: u64,
    _at_ms: u64,
    suffix: Vec<u8>,
) -> Expired {
    let Ok(suffix) = String::from_utf8(suffix) else {
        return Expired::Delete(SettlementEffects::default());
    };
    if suffix.len() < 17 {
        return Expired::Delete(SettlementEffects::default());
    }
    let (generation, batch_id) = suffix.split_at(16);
    let Ok(generation) = u64::from_str_radix(generation, 16) else {
        return Expired::Delete(SettlementEffects::default());
    };
    let head_key = keys::batch_head_key(batch_id);
    let head = match services.queue() {
        Ok(q) => q.view().kv_get(&head_key).await,
        Err(_) => return Expired::Keep,
    };
    let head: BatchHead = match head {
        Ok(Some(raw)) => match records::decode(&head_key, &raw) {
            Ok(h) => h,
            Err(_) => return Expired::Keep,
        },
        Ok(None) => return Expired::Delete(SettlementEffects::default()),
        Err(_) => return Expired::Keep,
    };
    // The batch ran again since this entry was written: that run decides.
    if head.generation != generation {
        return Expired::Delete(SettlementEffects::default());
    }
    match crate::batches::driver::forget(services, registry, batch_id).await {
        Ok(_) => Expired::Delete(SettlementEffects::default()),
        Err(e) => {
            tracing::debug!(%batch_id, error = %e, "retention: batch kept for now");
            Expired::Keep
        }
    }
}

impl Actor for Sweeper {
    type Msg = SweeperMessage;
    type State = SweeperState;
    type Arguments = SweeperArguments;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SweeperArguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let _ = myself.cast(SweeperMessage::Sweep);
        let _ = myself.cast(SweeperMessage::Snapshot);
        Ok(SweeperState {
            services: args.services,
            registry: args.registry,
            in_flight: None,
            tick_owed: false,
            current: Vec::new(),
            next: Vec::new(),
            last_snapshot: Default::default(),
            snapshot: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SweeperMessage::Sweep => {
                if state.in_flight.is_some() {
                    // The pass in flight serves this tick; the timer is
                    // re-armed when it ends.
                    state.tick_owed = true;
                } else {
                    state.start(&myself, true);
                }
            }
            SweeperMessage::SweepNow(reply) => {
                state.next.push(reply);
                if state.in_flight.is_none() {
                    state.start(&myself, false);
                }
            }
            SweeperMessage::Snapshot => {
                if state.snapshot.is_none() {
                    let services = state.services.clone();
                    let last = state.last_snapshot.clone();
                    let me = myself.clone();
                    let work = async move {
                        crate::maintenance::snapshot::take(&services, last)
                            .await
                            .map_err(|e| e.to_string())
                    };
                    state.snapshot = Some(crate::task::spawn_reported(work, move |ended| {
                        let done = ended.unwrap_or_else(|e| Err(e.to_string()));
                        let _ = me.cast(SweeperMessage::Snapshotted(done));
                    }));
                }
            }
            SweeperMessage::Snapshotted(done) => {
                state.snapshot = None;
                match done {
                    Ok(last) => state.last_snapshot = last,
                    Err(e) => {
                        tracing::debug!(error = %e, "the counters' snapshot failed; tried again later")
                    }
                }
                myself.send_after(crate::maintenance::snapshot::EVERY, || {
                    SweeperMessage::Snapshot
                });
            }
            SweeperMessage::PassDone(done) => {
                let report = match done {
                    Ok(report) => report,
                    Err(PassFailed::ShutDown) => SweepReport::default(),
                    Err(e) => {
                        warn!(error = %e, "sweep pass failed; retrying next tick");
                        SweepReport::default()
                    }
                };
                for reply in state.current.drain(..) {
                    let _ = reply.send(report);
                }
                state.in_flight = None;
                if std::mem::take(&mut state.tick_owed) {
                    let every = state.services.settings().poll_interval;
                    myself.send_after(every, || SweeperMessage::Sweep);
                }
                if !state.next.is_empty() {
                    state.start(&myself, false);
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // A pass in flight holds the queue: the shutdown waits for its last
        // user before closing it. The pass is aborted (each of its
        // transactions is whole; what it did not reach, the next pass does).
        if let Some(pass) = state.in_flight.take() {
            pass.abort();
        }
        if let Some(look) = state.snapshot.take() {
            look.abort();
        }
        Ok(())
    }
}
