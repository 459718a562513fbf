//! Sweeper: the periodic actor. Each tick (the poll interval, re-armed after
//! the pass so ticks never pile up) it
//!
//! 1. at most every [`RECONCILE_INTERVAL`], reconciles runs the queue
//!    dead-lettered without a handler's settlement (lease lost on the last
//!    attempt, or found claimed on the last attempt at open): each gets a
//!    failure record, committed only if its run record still names that dead
//!    job, and its waiters are told. The check reads the queues' dead counts,
//!    which SlateDB computes by merging one operand per queue transition
//!    since the last compaction: at every 100 ms tick on a busy queue that was
//!    a seventh of the engine's CPU, for lease expiries that take 30 s;
//! 2. under retention, removes expired outcome records (and the run's memo
//!    entries and output blobs) through taquba's `ExpiryIndex`.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::TryStreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::{Expired, JobRecord, JobStatus, Queue, SettlementEffects};
use tracing::warn;

use crate::batches::BatchesMessage;
use crate::error::Result;
use crate::events::EngineEvent;
use crate::keys;
use crate::memo::delete_prefix;
use crate::records::{self, FailureKind, Outcome, OutcomeRecord, RunRecord};
use crate::records::{BatchHead, ItemMarker, ItemStatus};
use crate::services::Services;
use crate::settle::Notify;
use crate::waiters::WaitersMessage;

/// Messages of the sweeper.
#[derive(Debug)]
pub enum SweeperMessage {
    /// Run one pass now (and re-arm the timer).
    Sweep,
    /// The waiters or the batches registry restarted: tell the new ones.
    SetNotify(Notify),
    /// Run one pass now and reply with what it did (tests).
    SweepNow(RpcReplyPort<SweepReport>),
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Dead-lettered runs given their failure record.
    pub reconciled: usize,
    /// Expired outcome records removed.
    pub expired: usize,
}

/// Arguments of the sweeper.
#[derive(Debug)]
pub struct SweeperArguments {
    /// Engine services.
    pub services: Arc<Services>,
    /// Who reconciliations tell.
    pub(crate) notify: Notify,
}

/// The sweeper actor.
#[derive(Debug)]
pub struct Sweeper;

/// State of the sweeper.
#[derive(Debug)]
pub struct SweeperState {
    services: Arc<Services>,
    notify: Notify,
    last_dead: HashMap<String, i64>,
    ticks: u64,
    /// When the timer's passes last reconciled.
    last_reconcile: Option<tokio::time::Instant>,
}

/// Every this many reconciliations the dead set is read even if its count did
/// not change.
const FULL_RECONCILE_EVERY: u64 = 60;

/// Shortest time between two reconciliation checks of the timer's passes
/// (an explicit `SweepNow` always reconciles).
pub const RECONCILE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl SweeperState {
    /// One pass; `forced` reconciles even if the last reconciliation is
    /// recent.
    async fn pass(&mut self, forced: bool) -> Result<SweepReport> {
        let queue = self.services.queue()?;
        let now = tokio::time::Instant::now();
        let due = forced
            || self
                .last_reconcile
                .is_none_or(|last| now.duration_since(last) >= RECONCILE_INTERVAL);
        let mut reconciled = 0;
        if due {
            self.ticks += 1;
            self.last_reconcile = Some(now);
            for name in [
                self.services.settings().queue_name.clone(),
                self.services.settings().bulk_queue_name.clone(),
            ] {
                reconciled += self.reconcile(&queue, &name).await?;
            }
        }
        let expired = self.expire(&queue).await? + self.expire_batches(&queue).await?;
        if expired > 0 {
            self.services.emit(EngineEvent::Swept { removed: expired });
        }
        Ok(SweepReport {
            reconciled,
            expired,
        })
    }

    async fn reconcile(&mut self, queue: &Arc<Queue>, name: &str) -> Result<usize> {
        let dead = queue.view().stats(name).await?.dead;
        if self.last_dead.get(name) == Some(&dead)
            && !self.ticks.is_multiple_of(FULL_RECONCILE_EVERY)
        {
            return Ok(0);
        }
        let jobs: Vec<JobRecord> = queue
            .view()
            .jobs(name, JobStatus::Dead, 256)
            .try_collect()
            .await?;
        let mut done = 0;
        for job in jobs {
            if self.reconcile_one(queue, &job).await? {
                done += 1;
            }
        }
        self.last_dead.insert(name.to_string(), dead);
        Ok(done)
    }

    async fn reconcile_one(&self, queue: &Arc<Queue>, job: &JobRecord) -> Result<bool> {
        if let (Some(batch_id), Some(key)) = (
            job.headers.get(keys::HEADER_BATCH),
            job.headers.get(keys::HEADER_KEY),
        ) {
            return self.reconcile_item(queue, job, batch_id, key).await;
        }
        let Some(run_id) = job.headers.get(keys::HEADER_RUN) else {
            return Ok(false);
        };
        if !keys::is_valid_id(run_id) {
            return Ok(false);
        }
        let run_key = keys::run_key(run_id);
        let Some(raw) = queue.view().kv_get(&run_key).await? else {
            return Ok(false);
        };
        let run: RunRecord = records::decode(&run_key, &raw)?;
        if run.job_id != job.id {
            return Ok(false);
        }
        let record = OutcomeRecord {
            job_id: job.id.clone(),
            job_type: run.job_type.clone(),
            input_hash: run.input_hash,
            attempts: job.attempts,
            finished_at_ms: self.services.clock().now_ms(),
            outcome: Outcome::Failed {
                kind: FailureKind::Transient,
                message: job.last_error.clone().unwrap_or_else(|| {
                    "dead-lettered by the queue (lease lost on the last attempt)".into()
                }),
            },
        };
        let effects = self.services.terminal_effects(run_id, &record);
        let compares: [(&[u8], Option<&[u8]>); 1] = [(&run_key, Some(&raw))];
        // Announce the commit (see the waiters): until it is durable, reads of
        // the record do not answer.
        let _ = self
            .notify
            .waiters
            .cast(WaitersMessage::Settling(run_id.clone()));
        let committed = queue.kv_compare_commit(&compares, effects).await;
        if !matches!(committed, Ok(Some(_))) {
            let _ = self
                .notify
                .waiters
                .cast(WaitersMessage::SettleAborted(run_id.clone()));
            committed?;
            return Ok(false);
        }
        warn!(%run_id, job_id = %job.id, "run dead-lettered by the queue; recorded its failure");
        self.services.emit(EngineEvent::RunReconciled {
            run_id: run_id.clone(),
        });
        let _ = self.notify.waiters.cast(WaitersMessage::Settled {
            run_id: run_id.clone(),
            record: Box::new(record),
        });
        Ok(true)
    }

    async fn reconcile_item(
        &self,
        queue: &Arc<Queue>,
        job: &JobRecord,
        batch_id: &str,
        key: &str,
    ) -> Result<bool> {
        let active = keys::item_active_key(batch_id, key);
        let compares: [(&[u8], Option<&[u8]>); 1] = [(&active, Some(job.id.as_bytes()))];
        let marker = ItemMarker {
            status: ItemStatus::Failed,
            error: Some(job.last_error.clone().unwrap_or_else(|| {
                "dead-lettered by the queue (lease lost on the last attempt)".into()
            })),
            cost: Default::default(),
            output: None,
            job_id: job.id.clone(),
        };
        let fx = SettlementEffects::default()
            .kv_delete(active.clone())
            .kv_put(
                keys::item_marker_key(batch_id, key),
                records::encode(&marker),
            );
        if queue.kv_compare_commit(&compares, fx).await?.is_none() {
            return Ok(false);
        }
        let _ = self.notify.batches.cast(BatchesMessage::ItemSettled {
            batch_id: batch_id.to_string(),
            key: key.to_string(),
            job_id: job.id.clone(),
            marker: Box::new(marker),
        });
        Ok(true)
    }

    async fn expire_batches(&self, queue: &Arc<Queue>) -> Result<usize> {
        // The retention of each batch is its run's; entries are only written
        // for runs that asked for it, so the pass uses the smallest window: an
        // entry's own deadline is checked in the callback.
        let services = self.services.clone();
        let batches = self.notify.batches.clone();
        let index = services.batch_expiry().clone();
        let now = services.clock().now_ms();
        let removed = index
            .pass(
                queue,
                now,
                std::time::Duration::ZERO,
                move |at_ms, suffix| {
                    let services = services.clone();
                    let batches = batches.clone();
                    async move { expire_batch(&services, &batches, now, at_ms, suffix).await }
                },
            )
            .await?;
        Ok(removed)
    }

    async fn expire(&self, queue: &Arc<Queue>) -> Result<usize> {
        let Some(retention) = self.services.settings().retention else {
            return Ok(0);
        };
        let services = self.services.clone();
        let q = queue.clone();
        let now = services.clock().now_ms();
        let index = services.expiry().clone();
        let removed = index
            .pass(queue, now, retention, move |at_ms, suffix| {
                let services = services.clone();
                let q = q.clone();
                async move { expire_one(&services, &q, at_ms, suffix).await }
            })
            .await?;
        Ok(removed)
    }
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
    match records::decode::<OutcomeRecord>(&key, &raw) {
        Ok(rec) if rec.finished_at_ms != at_ms => {
            return Expired::Delete(SettlementEffects::default());
        }
        _ => {}
    }
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
    Expired::DeleteIf {
        key: key.clone(),
        expected: Some(raw.to_vec()),
        effects: SettlementEffects::default().kv_delete(key),
    }
}

/// A batch retention entry: `{due_ms}{generation:016x}{batch_id}` where the
/// entry's time is the completion time plus the retention (so the pass runs
/// with zero retention and the entry is due exactly then).
async fn expire_batch(
    services: &Services,
    batches: &ActorRef<BatchesMessage>,
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
    match crate::supervisor::forget(services, batches, batch_id).await {
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
        // First pass right away: runs dead-lettered at open are reconciled now.
        let _ = myself.cast(SweeperMessage::Sweep);
        Ok(SweeperState {
            services: args.services,
            notify: args.notify,
            last_dead: HashMap::new(),
            ticks: 0,
            last_reconcile: None,
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
                if let Err(e) = state.pass(false).await {
                    if matches!(e, crate::EngineError::ShutDown) {
                        return Ok(());
                    }
                    warn!(error = %e, "sweep pass failed; retrying next tick");
                }
                let every = state.services.settings().poll_interval;
                myself.send_after(every, || SweeperMessage::Sweep);
            }
            SweeperMessage::SetNotify(notify) => state.notify = notify,
            SweeperMessage::SweepNow(reply) => {
                let report = state.pass(true).await.unwrap_or_default();
                let _ = reply.send(report);
            }
        }
        Ok(())
    }
}
