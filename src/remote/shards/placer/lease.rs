//! The placer's lease: the ticks, the joins, the renewals, and the stop
//! of every shard when the lease may end.

use super::*;

impl PlacerState {
    /// An etcd call failed: said once, then every twentieth time in a row.
    pub(super) fn call_failed(&mut self, what: &str, error: &str) {
        self.failures += 1;
        if self.failures == 1 || self.failures.is_multiple_of(20) {
            warn!(member = %self.member, failures = self.failures, %error, "{what} failed; trying again");
        } else {
            debug!(member = %self.member, failures = self.failures, %error, "{what} failed; trying again");
        }
    }

    /// An etcd call succeeded.
    pub(super) fn call_answered(&mut self) {
        if self.failures > 0 {
            info!(member = %self.member, failures = self.failures, "etcd answers again");
            self.failures = 0;
        }
    }

    pub(super) fn tick(&mut self, myself: &ActorRef<PlacerMessage>) {
        if !self.closing.is_empty() {
            return;
        }
        let now = Instant::now();
        let Some(lease) = self.lease else {
            if !self.joining && self.next_join.is_none_or(|t| now >= t) {
                self.join(myself);
            }
            return;
        };
        if now + self.cfg.stop_margin >= lease.valid_until {
            warn!(
                member = %self.member,
                "the lease could not be renewed in time; stopping this process's shards before it can expire"
            );
            self.lapse(myself, MoveReason::LeaseExpiring);
            return;
        }
        if !self.renewing && now >= lease.renewed_at + lease.ttl / 5 {
            self.renewing = true;
            let (keys, mut client, id) = (self.keys.clone(), self.client.clone(), lease.id);
            spawn_reporting(
                myself,
                async move { keys.renew(&mut client, id).await },
                move |r| PlacerMessage::Renewed {
                    lease: id,
                    sent: now,
                    result: r.and_then(|r| r),
                },
            );
        }
        if !self.reading && self.last_read.is_none_or(|t| now >= t + self.cfg.poll) {
            self.reading = true;
            self.last_read = Some(now);
            let (keys, mut client) = (self.keys.clone(), self.client.clone());
            spawn_reporting(myself, async move { keys.read(&mut client).await }, |r| {
                PlacerMessage::Read(r.and_then(|r| r))
            });
        }
    }

    /// Join again: connect anew, revoke the lease given up, take a new one.
    pub(super) fn join(&mut self, myself: &ActorRef<PlacerMessage>) {
        self.joining = true;
        let keys = self.keys.clone();
        let cfg = self.cfg.clone();
        let (member, about) = (self.member.clone(), self.about.clone());
        let stale = self.stale_lease;
        let sent = Instant::now();
        let work = async move {
            let mut client = keys.connect(&cfg.endpoints).await?;
            if let Some(old) = stale {
                // Its keys go at once if etcd still has it.
                let _ = keys.revoke(&mut client, old).await;
            }
            let (id, ttl) = keys
                .join(&mut client, cfg.lease_ttl, &member, about)
                .await?;
            Ok(Box::new((client, id, ttl)))
        };
        spawn_reporting(myself, work, move |r| PlacerMessage::Joined {
            sent,
            result: r.and_then(|r| r),
        });
    }

    pub(super) fn joined(
        &mut self,
        sent: Instant,
        result: std::result::Result<Box<(Client, i64, Duration)>, Failed>,
    ) {
        self.joining = false;
        match result {
            Ok(joined) => {
                let (client, id, ttl) = *joined;
                self.call_answered();
                info!(member = %self.member, "joined the placement again with a new lease");
                self.client = client;
                self.stale_lease = None;
                self.last_read = None;
                self.lease = Some(Lease {
                    id,
                    ttl,
                    valid_until: sent + ttl,
                    renewed_at: sent,
                });
            }
            Err(e) => {
                self.next_join = Some(Instant::now() + self.cfg.poll);
                self.call_failed("joining the placement", &e);
            }
        }
    }

    pub(super) fn renewed(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        id: i64,
        sent: Instant,
        result: std::result::Result<Duration, Failed>,
    ) {
        self.renewing = false;
        let Some(lease) = self.lease.as_mut().filter(|l| l.id == id) else {
            return;
        };
        match result {
            Ok(ttl) if ttl.is_zero() => {
                warn!(member = %self.member, "etcd no longer has this process's lease; stopping its shards");
                self.lapse(myself, MoveReason::LeaseLost);
            }
            Ok(ttl) => {
                lease.valid_until = sent + ttl;
                lease.renewed_at = sent;
                self.call_answered();
            }
            Err(e) => self.call_failed("renewing the lease", &e),
        }
    }

    /// The lease may have ended: stop every shard now, and join again.
    pub(super) fn lapse(&mut self, myself: &ActorRef<PlacerMessage>, reason: MoveReason) {
        if let Some(lease) = self.lease.take() {
            self.stale_lease = Some(lease.id);
        }
        let shards: Vec<usize> = self.held.keys().copied().collect();
        for shard in shards {
            self.stop_now(myself, shard, reason.clone());
        }
    }
}
