//! A keeper's look at a down shard's store (the verdict on who holds it)
//! and the reopen that follows when the shard is this process's again.

use super::*;

impl KeeperState {
    pub(super) fn looked(&mut self, myself: &ActorRef<KeeperMessage>, looked: Looked) {
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

    pub(super) fn reopen(&mut self, myself: &ActorRef<KeeperMessage>) {
        self.busy = Busy::Reopening;
        let reader = self.reader.take();
        let make = self.make.clone();
        let (shard, count, url) = (self.shard, self.count, self.url.clone());
        let owner = self.owner.clone();
        let work = async move {
            close_reader(reader).await;
            open(&*make, shard, count, &url, owner.as_deref()).await
        };
        spawn_reporting(myself, work, |opened| {
            KeeperMessage::Reopened(
                opened.unwrap_or_else(|e| {
                    Err(EngineError::Startup(format!("reopening the shard: {e}")))
                }),
            )
        });
    }

    pub(super) async fn reopened(
        &mut self,
        myself: &ActorRef<KeeperMessage>,
        result: Result<Opened>,
    ) {
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
}
