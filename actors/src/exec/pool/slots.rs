//! Slots: the pool's workers and the jobs they run. A claimed job goes to an
//! idle worker (or waits in the backlog), runs, and leaves for its
//! settlement task; a slot added while a job is parked is retired once it is
//! not needed.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tracing::{error, warn};

use super::{Held, PoolMessage, PoolState, Slot, SlotId};
use crate::erased::{Delivery, ItemInfo, Verdict};
use crate::exec::attempts::Fate;
use crate::exec::effects::{CostMeter, Effects, StagedEffects};
use crate::exec::memo::{Memo, UnwrittenEntries};
use crate::exec::parking::Parking;
use crate::exec::settle::{Ending, Owner, Standing, Target, settle};
use crate::exec::worker::{HandlerWorker, WorkerMessage};
use crate::layout::keys;
use crate::layout::records::Cost;

impl PoolState {
    pub(super) async fn add_slot(&mut self, myself: &ActorRef<PoolMessage>) {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(slot, Slot::default());
        self.spawn_worker(myself, slot).await;
    }

    pub(super) async fn spawn_worker(&mut self, myself: &ActorRef<PoolMessage>, slot: SlotId) {
        let worker = HandlerWorker {
            handler: self.args.handler.clone(),
            pool: myself.clone(),
            slot,
            services: self.args.services.clone(),
            metrics: self.metrics.clone(),
        };
        match Actor::spawn_linked(None, worker, (), myself.get_cell()).await {
            Ok((actor, _)) => {
                self.by_actor.insert(actor.get_id(), slot);
                if let Some(s) = self.slots.get_mut(&slot) {
                    s.worker = Some(actor);
                }
                self.idle.push_back(slot);
            }
            Err(e) => {
                // A worker has no fallible start, so this is the runtime refusing:
                // try again later rather than take the pool down.
                error!(job_type = %self.args.job_type, error = %e, "handler worker failed to start");
                myself.send_after(Duration::from_secs(1), move || {
                    PoolMessage::RestartWorker(slot)
                });
            }
        }
    }

    /// Remove `slot` (its worker, if any, is stopped).
    pub(super) fn retire(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.remove(&slot)
            && let Some(worker) = s.worker
        {
            self.by_actor.remove(&worker.get_id());
            worker.stop(None);
        }
        self.idle.retain(|s| *s != slot);
    }

    /// Retire idle slots while there are more than the type needs.
    pub(super) fn shrink(&mut self) {
        // Idle slots the claim in flight (and the backlog) may need are kept.
        let claim: usize = self.claiming.iter().flatten().map(|(_, n)| n).sum();
        let promised = claim + self.backlog.len();
        while self.excess() > 0 && self.idle.len() > promised {
            let Some(slot) = self.idle.pop_back() else {
                return;
            };
            self.retire(slot);
        }
    }

    pub(super) fn dispatch(&mut self, myself: &ActorRef<PoolMessage>, held: Held) {
        // A job gaffer does not run (put on the queue by hand: no run id, an
        // invalid one, or one whose run does not name it) is dead-lettered
        // at once saying so, the user's code never run, no run's records
        // touched. One whose standing could not be read is given back.
        match &held.standing {
            Standing::Owner(_) => {}
            Standing::Stray(reason) => {
                let reason = reason.clone();
                self.start_settlement(
                    myself,
                    held,
                    Ending::Refuse(reason),
                    StagedEffects::default(),
                    Cost::default(),
                    None,
                );
                return;
            }
            Standing::Unread(error) => {
                warn!(job_type = %self.args.job_type, job_id = %held.claim.id, %error, "reading the claimed job's run record failed; giving it back");
                let why = format!("reading its run's record failed: {error}");
                self.release(myself, held, why, None);
                return;
            }
            Standing::Sealed(reason) => {
                warn!(job_type = %self.args.job_type, job_id = %held.claim.id, "{reason}");
                let why = reason.clone();
                self.release(myself, held, why, None);
                return;
            }
        }
        match held.attempts.fate(self.settings()) {
            Fate::Run => {}
            Fate::Poisoned(message) => {
                warn!(job_type = %self.args.job_type, job_id = %held.claim.id, "{message}");
                self.start_settlement(
                    myself,
                    held,
                    Ending::Verdict(Verdict::permanent(message)),
                    StagedEffects::default(),
                    Cost::default(),
                    None,
                );
                return;
            }
            Fate::Exhausted(message) => {
                self.start_settlement(
                    myself,
                    held,
                    Ending::Verdict(Verdict::transient(message)),
                    StagedEffects::default(),
                    Cost::default(),
                    None,
                );
                return;
            }
        }
        if self.paused {
            self.release(myself, held, "its job type is paused".into(), None);
            return;
        }
        let Some(slot) = self.idle.pop_front() else {
            self.backlog.push_back(held);
            return;
        };
        let Some(worker) = self.slots.get(&slot).and_then(|s| s.worker.clone()) else {
            self.backlog.push_back(held);
            return;
        };
        let Standing::Owner(owner) = &held.standing else {
            // Only a job that owns its run gets here (above).
            return;
        };
        let delivery = self.delivery(myself, slot, &held, owner);
        if let Some(s) = self.slots.get_mut(&slot) {
            s.memo = Some(delivery.memo.clone());
            s.waits = Some(delivery.parking.state.clone());
            s.job = Some(held);
        }
        // A worker that died between its last report and now is handled by its
        // supervision event, which gives the job back.
        let _ = worker.cast(WorkerMessage::Run(Box::new(delivery)));
    }

    pub(super) fn delivery(
        &self,
        myself: &ActorRef<PoolMessage>,
        slot: SlotId,
        held: &Held,
        owner: &Owner,
    ) -> Delivery {
        let claim = &held.claim;
        let (target, job_type) = (owner.target.clone(), owner.job_type.clone());
        let services = &self.args.services;
        let blob = &services.settings().blob_prefix;
        let writes = services.settings().memo_writes;
        // A run's memo entries reach the store only when a delivery of it
        // did not succeed: on its first claim there are none, unless it was
        // put back on its queue (a retry, a release) or a later run of its
        // batch enqueued it again.
        let earlier = claim.attempts > 1
            || claim.headers.contains_key(keys::HEADER_MEMO)
            || claim.headers.contains_key(keys::HEADER_PAST);
        let (run_id, memo, item) = match target {
            Target::Job { run_id } => (
                run_id.clone(),
                Memo::new(services.store().clone(), blob, &run_id)
                    .with_writes(writes)
                    .earlier_entries(earlier),
                None,
            ),
            Target::Item {
                batch_id,
                key,
                run_id,
            } => (
                run_id.clone(),
                Memo::for_item(services.store().clone(), blob, &batch_id, &run_id)
                    .with_writes(writes)
                    .earlier_entries(earlier),
                Some(ItemInfo { batch_id, key }),
            ),
        };
        let lease = match services.queue() {
            Ok(queue) => queue.lease_handle(claim),
            Err(_) => taquba::LeaseHandle::detached(),
        };
        // The job's own timeout (its submission's) beats its type's.
        let timeout = keys::timeout_header(&claim.headers).or(self.args.timeout);
        let completes = claim
            .headers
            .get(keys::HEADER_COMPLETES)
            .and_then(|v| crate::erased::CompletedBatch::decode(v));
        // The user's headers only: gaffer's own are not copied.
        let headers = claim
            .headers
            .iter()
            .filter(|(k, _)| !k.starts_with(keys::RESERVED_HEADER_PREFIX))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Delivery {
            completes,
            span: held.span.clone(),
            memo,
            item,
            cost: CostMeter::default(),
            run_id,
            job_id: claim.id.clone(),
            job_type,
            attempt: held.attempts.number,
            max_attempts: held.attempts.limit,
            headers: Arc::new(headers),
            payload: owner.payload.clone(),
            // A child of the claim's token: a timeout cancels the attempt
            // without marking the job cancelled (its settlement reads the
            // claim's own token).
            cancel: claim.cancel_token().child_token(),
            timeout,
            lease,
            effects: Effects::default(),
            engine: self.args.jobs.clone(),
            parking: Parking {
                pool: myself.get_derived(),
                slot,
                draining: self.draining_token.clone(),
                cancelled: claim.cancel_token().clone(),
                state: Arc::default(),
            },
            suspend: Default::default(),
            wait: owner.run.as_ref().and_then(|run| run.wait.clone()),
            sleep: owner.run.as_ref().and_then(|run| run.sleep),
            snoozes: owner.run.as_ref().map_or(0, |run| run.snoozes),
            max_snoozes: self.args.max_snoozes,
            step: owner.run.as_ref().and_then(|run| run.step.clone()),
        }
    }

    pub(super) fn finish(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        slot: SlotId,
        verdict: Verdict,
        effects: StagedEffects,
        cost: Cost,
    ) {
        let Some(s) = self.slots.get_mut(&slot) else {
            return;
        };
        let Some(held) = s.job.take() else {
            return;
        };
        let memo = s.memo.take().map(|m| m.take_unwritten());
        let cut = s.waits.take().is_some_and(|w| w.cut_by_shutdown());
        let was_parked = std::mem::take(&mut s.parked);
        let alive = s.worker.is_some();
        if was_parked {
            self.parked -= 1;
        }
        // A job whose wait for another job was cut short by the shutdown did
        // not fail by itself: it is given back, its attempt not spent.
        let ending = match verdict {
            Verdict::Failed { .. } if cut => {
                Ending::Release("the engine shut down while the job waited for another job".into())
            }
            verdict => Ending::Verdict(verdict),
        };
        self.start_settlement(myself, held, ending, effects, cost, memo);
        self.ended_normally(myself);
        if alive {
            if self.excess() > 0 {
                self.retire(slot);
            } else {
                self.idle.push_back(slot);
            }
        }
        if let Some(next) = self.backlog.pop_front() {
            self.dispatch(myself, next);
        }
        self.maybe_claim(myself);
    }

    pub(super) fn start_settlement(
        &mut self,
        myself: &ActorRef<PoolMessage>,
        held: Held,
        ending: Ending,
        effects: StagedEffects,
        cost: Cost,
        memo: Option<UnwrittenEntries>,
    ) {
        let number = self.next_settlement;
        self.next_settlement += 1;
        let (lease, duration) = self.settling_lease(&held.claim);
        let may_return = !matches!(ending, Ending::Verdict(Verdict::Succeeded(_)));
        self.settling.insert(
            number,
            super::Settling {
                lease,
                duration,
                queue: String::from(&*held.claim.queue),
                may_return,
            },
        );
        let services = self.args.services.clone();
        let notify = self.args.notify.clone();
        let myself = myself.clone();
        let metrics = self.metrics.clone();
        // The attempt's span moves into the settlement task (no clone).
        let Held {
            claim,
            attempts,
            history,
            standing,
            span,
        } = held;
        let settlement = async move {
            // An attempt that did not succeed leaves its memo entries for the
            // next one (MemoWrites::OnFailure); a cancelled run has none.
            let succeeded = matches!(ending, Ending::Verdict(Verdict::Succeeded(_)));
            if let Some(memo) = memo
                && !memo.is_empty()
                && !succeeded
                && !claim.cancel_token().is_cancelled()
            {
                let entries = memo.len();
                if let Err(e) = memo.write().await {
                    warn!(job_id = %claim.id, entries, error = %e, "writing the failed attempt's memo entries failed; the next attempt computes them again");
                }
            }
            let claimed = crate::exec::settle::Claimed {
                claim,
                attempts,
                history,
                standing,
            };
            #[cfg(feature = "testing")]
            crate::testing::panics::check(
                crate::testing::panics::PanicPoint::Settlement,
                &claimed.claim.queue,
            );
            let ctx = crate::exec::settle::Settler {
                services: &services,
                notify: &notify,
                metrics: &metrics,
            };
            let settlement = crate::exec::settle::Settlement {
                claimed,
                ending,
                effects,
                cost,
            };
            settle(ctx, settlement).await;
        };
        // Told when it ends, also by a panic: the pool never waits for a
        // settlement that will not come (the job is then redelivered when
        // its lease expires, as after a crash).
        let job_type = self.args.job_type.clone();
        crate::task::spawn_reported(
            tracing::Instrument::instrument(settlement, span),
            move |ended| {
                if let Err(e) = ended {
                    tracing::error!(%job_type, error = %e, "a settlement ended without committing; its job runs again when its lease expires");
                }
                let _ = myself.cast(PoolMessage::Settled(number));
            },
        );
    }

    pub(super) fn settled(&mut self, myself: &ActorRef<PoolMessage>, number: u64) {
        // A fair type's value may have jobs again: a job that did not
        // succeed may be back on its queue, and a value at its limit per
        // key has room now.
        if let Some(s) = self.settling.remove(&number)
            && self.limiter.settled(&s.queue, s.may_return)
        {
            self.woke_ring();
        }
        self.maybe_claim(myself);
        self.check_drained();
    }

    /// A running job began waiting for another job: its slot is parked and
    /// the pool runs one more worker meanwhile.
    pub(super) async fn park(&mut self, myself: &ActorRef<PoolMessage>, slot: SlotId) {
        let parked = match self.slots.get_mut(&slot) {
            Some(s) if s.job.is_some() && !s.parked => {
                s.parked = true;
                true
            }
            _ => false,
        };
        if !parked {
            return;
        }
        self.parked += 1;
        // One more slot, unless surplus slots are still there.
        if !self.draining && self.slots.len() < self.args.concurrency + self.parked {
            self.add_slot(myself).await;
            if let Some(next) = self.backlog.pop_front() {
                self.dispatch(myself, next);
            }
            self.maybe_claim(myself);
        }
    }

    /// A parked job's wait ended: its slot counts again.
    pub(super) fn unpark(&mut self, slot: SlotId) {
        let was_parked = self
            .slots
            .get_mut(&slot)
            .is_some_and(|s| std::mem::take(&mut s.parked));
        if was_parked {
            self.parked -= 1;
            self.shrink();
        }
    }
}
