//! Leases: the pool keeps the lease of every job it holds alive.
//!
//! A taquba lease is process state (taquba's lease registry): it bounds how
//! long a claim stays with this process before the queue's reaper gives the
//! job to another delivery. A process that dies loses its leases with it
//! (the next open re-queues every claimed job at once), so within a live
//! process a lease only has to outlast a stall. The pool renews, on one
//! timer of its own (every third of the shortest lease it holds), the lease
//! of each job it holds: running in a worker (parked or not), waiting in its
//! backlog, or being settled. A job therefore runs as long as its code
//! needs; a runaway is bounded by its timeout (`JobOptions::timeout`), not
//! by its lease. Renewal extends, never shortens: a job that asked for more
//! through `ctx.lease().ensure_at_least(..)` keeps it.
//!
//! No task per job: the timer is the pool's own message to itself, armed
//! again each time it is handled, so it lives exactly as long as the pool
//! (a restarted pool arms a new one in its `pre_start`). A pool that
//! stalls past a lease (its mailbox blocked) lets the job go, which is
//! what the lease is for.

use std::time::Duration;

use taquba::{Claim, LeaseHandle};

use super::PoolState;

/// The shortest renewal period (a lease configured in milliseconds).
const MIN_RENEW_EVERY: Duration = Duration::from_millis(10);

/// The lease a claim of `claim`'s queue is granted.
fn lease_of(queue: &taquba::Queue, claim: &Claim) -> Duration {
    queue.queue_config(&claim.queue).lease_duration
}

impl PoolState {
    /// The claims the pool holds in workers and in its backlog.
    fn held_claims(&self) -> impl Iterator<Item = &Claim> {
        self.slots
            .values()
            .filter_map(|s| s.job.as_ref())
            .chain(self.backlog.iter())
            .map(|h| &h.claim)
    }

    /// How often its leases are renewed: a third of the shortest lease of
    /// its queue and of the claims it holds (partition queues may be
    /// configured apart).
    pub(super) fn renew_every(&self) -> Duration {
        let Ok(queue) = self.args.services.queue() else {
            return Duration::from_secs(1);
        };
        let own = queue.queue_config(&self.args.queue).lease_duration;
        let shortest = self
            .held_claims()
            .map(|c| lease_of(&queue, c))
            .fold(own, Duration::min);
        (shortest / 3).max(MIN_RENEW_EVERY)
    }

    /// Renew every lease it holds to at least a full lease from now.
    pub(super) fn keep_leases(&self) {
        let Ok(queue) = self.args.services.queue() else {
            return;
        };
        for claim in self.held_claims() {
            // A lost claim (the reaper took it after a stall, or the store
            // closed) or a cancelled job refuses renewal: its settlement
            // finds out, so there is nothing to do here.
            let _ = queue
                .lease_handle(claim)
                .ensure_at_least(lease_of(&queue, claim));
        }
        for s in self.settling.values() {
            let _ = s.lease.ensure_at_least(s.duration);
        }
    }

    /// The lease of a claim about to be settled, kept until it reports.
    pub(super) fn settling_lease(&self, claim: &Claim) -> (LeaseHandle, Duration) {
        match self.args.services.queue() {
            Ok(queue) => (queue.lease_handle(claim), lease_of(&queue, claim)),
            Err(_) => (LeaseHandle::detached(), Duration::ZERO),
        }
    }
}
