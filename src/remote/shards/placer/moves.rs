//! The placer's moves: each read's comparison of the assignment with what
//! this process holds, and the takes, drains and stops it starts.

use super::*;

impl PlacerState {
    pub(super) fn read(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        view: std::result::Result<View, Failed>,
    ) {
        self.reading = false;
        let view = match view {
            Ok(view) => view,
            Err(e) => {
                self.call_failed("reading the placement", &e);
                return;
            }
        };
        self.call_answered();
        if self.lease.is_none() || !self.closing.is_empty() {
            return;
        }
        if view.revision < self.written {
            debug!(
                revision = view.revision,
                written = self.written,
                "a read from before this process's last take or release; not acted on"
            );
            return;
        }
        if !view.members.contains(&self.member) {
            warn!(member = %self.member, "this process's member key is gone (its lease ended); stopping its shards");
            self.lapse(myself, MoveReason::LeaseLost);
            return;
        }
        let target = assign::assign(self.set.len(), &view.members, &view.owners);
        for (shard, goes_to) in target.iter().enumerate() {
            let mine = goes_to.as_deref() == Some(self.member.as_str());
            let owner = view.owners.get(&shard).map(String::as_str);
            match self.held.get(&shard) {
                Some(Hold::Up(_)) if owner != Some(self.member.as_str()) => {
                    let by = owner.map(str::to_string);
                    self.stop_now(myself, shard, MoveReason::KeyLost { by });
                }
                Some(Hold::Up(_)) if !mine => {
                    let to = goes_to.clone().unwrap_or_default();
                    self.drain(myself, shard, MoveReason::Rebalanced { to });
                }
                Some(_) => {}
                None if mine && owner.is_none_or(|o| o == self.member) => {
                    let previous = self.owners_seen.get(&shard).cloned();
                    let previous = previous.filter(|p| *p != self.member);
                    self.take(
                        myself,
                        shard,
                        owner.is_some(),
                        MoveReason::Free { previous },
                    );
                }
                None if owner == Some(self.member.as_str()) => {
                    // A key of this process's without an engine (a take
                    // whose open failed and whose release did too).
                    self.release_key(myself, shard);
                }
                None => {}
            }
        }
        self.owners_seen = view.owners;
    }

    /// Delete this process's key of `shard` (no engine runs it here).
    pub(super) fn release_key(&self, myself: &ActorRef<PlacerMessage>, shard: usize) {
        let (keys, mut client, member) =
            (self.keys.clone(), self.client.clone(), self.member.clone());
        spawn_reporting(
            myself,
            async move { keys.release(&mut client, shard, &member).await },
            |r| PlacerMessage::Wrote(r.ok().and_then(Result::ok)),
        );
    }

    /// Note the revision of a take or release of this process's.
    pub(super) fn wrote(&mut self, revision: Option<i64>) {
        if let Some(r) = revision {
            self.written = self.written.max(r);
        }
    }

    pub(super) fn take(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        shard: usize,
        ours: bool,
        reason: MoveReason,
    ) {
        let Some(lease) = self.lease else { return };
        self.held.insert(shard, Hold::Taking);
        let (keys, mut client, member) =
            (self.keys.clone(), self.client.clone(), self.member.clone());
        let make = self.make.clone();
        let (count, url) = (self.set.len(), self.set.urls()[shard].clone());
        let work = async move {
            let mut taken_at = None;
            if !ours {
                match keys.take(&mut client, shard, &member, lease.id).await {
                    Ok(Some(revision)) => taken_at = Some(revision),
                    Ok(None) => return Taken::NotFree,
                    Err(e) => return Taken::Failed(e, None),
                }
            }
            match open(&*make, shard, count, &url, Some(&member)).await {
                Ok(opened) => Taken::Opened(Box::new(opened), taken_at),
                Err(e) => {
                    let released = keys.release(&mut client, shard, &member).await.ok();
                    Taken::Failed(format!("opening its store: {e}"), released)
                }
            }
        };
        spawn_reporting(myself, work, move |r| PlacerMessage::Took {
            shard,
            reason,
            result: r.unwrap_or_else(|e| Taken::Failed(e, None)),
        });
    }

    pub(super) async fn took(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        shard: usize,
        reason: MoveReason,
        result: Taken,
    ) {
        match result {
            Taken::Opened(opened, taken_at) => {
                self.wrote(taken_at);
                let kept = keep(
                    shard,
                    &self.set,
                    self.make.clone(),
                    self.sup.clone(),
                    self.events.clone(),
                    *opened,
                    Some(self.member.clone()),
                )
                .await;
                match kept {
                    Ok(kept) => {
                        self.held.insert(shard, Hold::Up(kept));
                        self.publish();
                        self.moved(true, shard, reason);
                        if !self.closing.is_empty() {
                            // Shut down with the others.
                        } else if self.lease.is_none() {
                            self.stop_now(myself, shard, MoveReason::LeaseExpiring);
                        }
                    }
                    Err(e) => {
                        self.held.remove(&shard);
                        // Its keeper did not start (the engine was shut
                        // down): the key goes back.
                        self.release_key(myself, shard);
                        self.failed(shard, e.to_string());
                    }
                }
            }
            Taken::NotFree => {
                self.held.remove(&shard);
            }
            Taken::Failed(e, released) => {
                self.wrote(released);
                self.held.remove(&shard);
                self.failed(shard, e);
            }
        }
        self.continue_closing(myself);
    }

    pub(super) fn failed(&self, shard: usize, error: String) {
        warn!(shard, %error, "taking the shard failed; trying again at the next read");
        let _ = self.events.send(ShardEvent::ReopenFailed {
            shard,
            error,
            retry_in: self.cfg.poll,
        });
    }

    /// A planned move: drain the shard (its engine's graceful shutdown),
    /// then delete its key.
    pub(super) fn drain(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        shard: usize,
        reason: MoveReason,
    ) {
        let Some(Hold::Up(kept)) = self.held.remove(&shard) else {
            return;
        };
        self.held.insert(shard, Hold::Dropping(kept.clone()));
        self.publish();
        let (keys, mut client, member) =
            (self.keys.clone(), self.client.clone(), self.member.clone());
        let work = async move {
            let report = shut_down(&kept).await;
            let released = match keys.release(&mut client, shard, &member).await {
                Ok(revision) => Some(revision),
                Err(e) => {
                    // Its lease ends it if the release cannot.
                    warn!(shard, error = %e, "releasing the drained shard failed");
                    None
                }
            };
            (report, released)
        };
        spawn_reporting(myself, work, move |r| {
            let (result, released) = r.unwrap_or_else(|e| (Err(stop_failed(e)), None));
            PlacerMessage::Dropped {
                shard,
                reason,
                result,
                released,
            }
        });
    }

    /// Stop the shard now: a graceful shutdown given half the stop margin,
    /// then its engine and keeper killed. A shard being drained is killed.
    pub(super) fn stop_now(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        shard: usize,
        reason: MoveReason,
    ) {
        let kept = match self.held.remove(&shard) {
            Some(Hold::Up(kept)) => kept,
            Some(Hold::Dropping(kept)) => {
                // Its drain reports when the kill ends it.
                kill(&kept);
                self.held.insert(shard, Hold::Dropping(kept));
                return;
            }
            // Its take reports, and finds the lease gone.
            Some(Hold::Taking) => {
                self.held.insert(shard, Hold::Taking);
                return;
            }
            None => return,
        };
        self.held.insert(shard, Hold::Dropping(kept.clone()));
        self.publish();
        let limit = self.cfg.stop_margin / 2;
        let work = async move {
            match tokio::time::timeout(limit, shut_down(&kept)).await {
                Ok(report) => report,
                Err(_) => {
                    kill(&kept);
                    Err(stop_failed(format!(
                        "its engine did not shut down within {limit:?} and was killed"
                    )))
                }
            }
        };
        spawn_reporting(myself, work, move |r| PlacerMessage::Dropped {
            shard,
            reason,
            result: r.unwrap_or_else(|e| Err(stop_failed(e))),
            released: None,
        });
    }

    pub(super) fn dropped(
        &mut self,
        myself: &ActorRef<PlacerMessage>,
        shard: usize,
        reason: MoveReason,
        result: Result<ShutdownReport>,
    ) {
        if let Err(e) = &result {
            warn!(shard, error = %e, "the shard's stop did not end cleanly");
        }
        self.held.remove(&shard);
        self.moved(false, shard, reason);
        self.continue_closing(myself);
    }

    /// Shut down once no take or stop is in flight: drain every shard,
    /// release the keys, revoke the lease.
    pub(super) fn continue_closing(&mut self, myself: &ActorRef<PlacerMessage>) {
        if self.closing.is_empty()
            || self.closed_started
            || self
                .held
                .values()
                .any(|h| matches!(h, Hold::Taking | Hold::Dropping(_)))
        {
            return;
        }
        self.closed_started = true;
        let up: BTreeMap<usize, Kept> = std::mem::take(&mut self.held)
            .into_iter()
            .filter_map(|(s, h)| match h {
                Hold::Up(k) => Some((s, k)),
                _ => None,
            })
            .collect();
        self.publish();
        let (keys, mut client, member) =
            (self.keys.clone(), self.client.clone(), self.member.clone());
        let lease = self.lease.map(|l| l.id).or(self.stale_lease);
        let work = async move {
            let reports = shut_down_kept(&up).await;
            for shard in up.keys() {
                let _ = keys.release(&mut client, *shard, &member).await;
            }
            if let Some(id) = lease {
                let _ = keys.revoke(&mut client, id).await;
            }
            reports
        };
        spawn_reporting(myself, work, |r| {
            PlacerMessage::Closed(r.unwrap_or_else(|e| {
                warn!(error = %e, "the placer's shutdown task failed");
                Vec::new()
            }))
        });
    }
}

/// Kill a shard's engine and keeper (a stop that cannot wait).
pub(super) fn kill(kept: &Kept) {
    if let Some(engine) = kept.slot.borrow().engine.clone() {
        engine.actor().kill();
    }
    kept.keeper.kill();
}

pub(super) fn stop_failed(reason: String) -> crate::Error {
    crate::Error::ActorUnavailable {
        actor: "shard placer",
        reason: format!("stopping a shard: {reason}"),
    }
}
