//! Sweeper: the periodic actor. Each tick (the poll interval, re-armed after
//! the pass so ticks never pile up) it
//!
//! 1. reconciles runs the queue dead-lettered without a handler's settlement
//!    (lease lost on the last attempt, or found claimed on the last attempt at
//!    open): each gets a failure record, committed only if its run record still
//!    names that dead job, and its waiters are told;
//! 2. under retention, removes expired outcome records (and the run's memo
//!    entries and output blobs) through taquba's `ExpiryIndex`.

use std::sync::Arc;

use futures_util::TryStreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use taquba::{Expired, JobRecord, JobStatus, Queue, SettlementEffects};
use tracing::warn;

use crate::error::Result;
use crate::events::EngineEvent;
use crate::keys;
use crate::memo::delete_prefix;
use crate::records::{self, FailureKind, Outcome, OutcomeRecord, RunRecord};
use crate::services::Services;
use crate::waiters::WaitersMessage;

/// Messages of the sweeper.
#[derive(Debug)]
pub enum SweeperMessage {
    /// Run one pass now (and re-arm the timer).
    Sweep,
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
    /// Where completions go.
    pub waiters: ActorRef<WaitersMessage>,
}

/// The sweeper actor.
#[derive(Debug)]
pub struct Sweeper;

/// State of the sweeper.
#[derive(Debug)]
pub struct SweeperState {
    services: Arc<Services>,
    waiters: ActorRef<WaitersMessage>,
    last_dead: Option<i64>,
    ticks: u64,
}

/// Every this many ticks the dead set is read even if its count did not change.
const FULL_RECONCILE_EVERY: u64 = 600;

impl SweeperState {
    async fn pass(&mut self) -> Result<SweepReport> {
        let queue = self.services.queue()?;
        self.ticks += 1;
        let reconciled = self.reconcile(&queue).await?;
        let expired = self.expire(&queue).await?;
        if expired > 0 {
            self.services.emit(EngineEvent::Swept { removed: expired });
        }
        Ok(SweepReport {
            reconciled,
            expired,
        })
    }

    async fn reconcile(&mut self, queue: &Arc<Queue>) -> Result<usize> {
        let name = self.services.settings().queue_name.clone();
        let dead = queue.view().stats(&name).await?.dead;
        if self.last_dead == Some(dead) && self.ticks % FULL_RECONCILE_EVERY != 0 {
            return Ok(0);
        }
        let jobs: Vec<JobRecord> = queue
            .view()
            .jobs(&name, JobStatus::Dead, 256)
            .try_collect()
            .await?;
        let mut done = 0;
        for job in jobs {
            if self.reconcile_one(queue, &job).await? {
                done += 1;
            }
        }
        self.last_dead = Some(dead);
        Ok(done)
    }

    async fn reconcile_one(&self, queue: &Arc<Queue>, job: &JobRecord) -> Result<bool> {
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
        if queue.kv_compare_commit(&compares, effects).await?.is_none() {
            return Ok(false);
        }
        warn!(%run_id, job_id = %job.id, "run dead-lettered by the queue; recorded its failure");
        self.services.emit(EngineEvent::RunReconciled {
            run_id: run_id.clone(),
        });
        let _ = self.waiters.cast(WaitersMessage::Settled {
            run_id: run_id.clone(),
            record: Box::new(record),
        });
        Ok(true)
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
            waiters: args.waiters,
            last_dead: None,
            ticks: 0,
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
                if let Err(e) = state.pass().await {
                    if matches!(e, crate::EngineError::ShutDown) {
                        return Ok(());
                    }
                    warn!(error = %e, "sweep pass failed; retrying next tick");
                }
                let every = state.services.settings().poll_interval;
                myself.send_after(every, || SweeperMessage::Sweep);
            }
            SweeperMessage::SweepNow(reply) => {
                let report = state.pass().await.unwrap_or_default();
                let _ = reply.send(report);
            }
        }
        Ok(())
    }
}
