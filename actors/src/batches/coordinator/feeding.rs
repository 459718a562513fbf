//! Feeding and pacing: the manifest read a chunk at a time and its items
//! enqueued, many per transaction, as the window (and `max_rate`) allows;
//! items an earlier run settled are answered from their markers.

use ractor::ActorRef;
use taquba::{EnqueueOptions, EnqueueRequest, SettlementEffects};
use tokio::time::Instant;

use super::{CoordinatorMessage, CoordinatorState};
use crate::batches::budget::{Room, resident_bytes};
use crate::batches::lookups::{Found, look_up_all};
use crate::batches::manifest::read_chunk;
use crate::error::Result;
use crate::layout::keys;
use crate::layout::records::{BatchHead, ManifestItem};

impl CoordinatorState {
    pub(super) fn has_more(&self, head: &BatchHead) -> bool {
        !self.current.is_empty() || self.next_chunk < head.chunks
    }

    /// Enqueue as many items as the window has room for, reading the manifest
    /// a chunk at a time; re-arm itself while room remains so settlements
    /// interleave with enqueueing.
    pub(super) async fn feed(&mut self, myself: &ActorRef<CoordinatorMessage>) -> Result<()> {
        self.feeding = false;
        let Some(head) = self.head.clone() else {
            return Ok(());
        };
        let room = self.spec.window.saturating_sub(self.outstanding.len());
        if room == 0 {
            return Ok(());
        }
        if !self.has_more(&head) {
            return Ok(());
        }
        let room = match self.paced_room(myself) {
            Some(paced) => room.min(paced),
            None => return Ok(()),
        };
        let room = match self.budget_room(myself) {
            Some(budget) => room.min(budget),
            None => return Ok(()),
        };
        let enqueued_before = self.enqueued;
        if self.current.is_empty() {
            if self.next_chunk >= head.chunks {
                return Ok(());
            }
            let chunk = read_chunk(&self.services, &self.spec.batch_id, self.next_chunk).await?;
            self.next_chunk += 1;
            self.current = chunk.items.into();
        }
        let take = room.min(self.current.len());
        let items: Vec<ManifestItem> = self.current.drain(..take).collect();
        if self.current.is_empty() && self.next_chunk < head.chunks {
            // The next manifest chunk is read while this feed's items are
            // checked and enqueued (one chunk more in memory at most).
            let (services, batch_id) = (self.services.clone(), self.spec.batch_id.clone());
            let index = self.next_chunk;
            let (fed, next) = tokio::join!(
                self.enqueue_items(&head, items),
                read_chunk(&services, &batch_id, index)
            );
            fed?;
            self.current = next?.items.into();
            self.next_chunk += 1;
        } else {
            self.enqueue_items(&head, items).await?;
        }
        self.pacer.took(self.enqueued - enqueued_before);
        if self.has_more(&head) && self.outstanding.len() < self.spec.window {
            self.feeding = true;
            let _ = myself.cast(CoordinatorMessage::FeedNext);
        }
        Ok(())
    }

    /// How many items the run's pace lets it enqueue now (all, without a
    /// `max_rate`): the rate times the time since the run began, plus a
    /// tenth of a second's worth, less what it enqueued. `None` when that is
    /// nothing: the next feed is then scheduled for when there is room.
    pub(super) fn paced_room(&mut self, myself: &ActorRef<CoordinatorMessage>) -> Option<usize> {
        let Some(rate) = self.spec.max_rate else {
            return Some(usize::MAX);
        };
        let rate = u64::from(rate.max(1));
        let burst = (rate / 10).max(1);
        let elapsed_ms = self.paced_since.elapsed().as_millis() as u64;
        let allowed = (rate * elapsed_ms / 1000 + burst).saturating_sub(self.enqueued);
        if allowed > 0 {
            return Some(usize::try_from(allowed).unwrap_or(usize::MAX));
        }
        // Wait until a burst's worth is allowed again (at least 1 ms).
        let wait_ms = (burst * 1000).div_ceil(rate).max(1);
        self.feeding = true;
        myself.send_after(std::time::Duration::from_millis(wait_ms), || {
            CoordinatorMessage::FeedNext
        });
        None
    }

    /// How many items the memory budget lets the run enqueue now (all,
    /// without a budget or under three quarters of it); `None` when that is
    /// nothing: the next feed is then scheduled (at most `MAX_WAIT` away).
    /// The signal is read here, at most every `SAMPLE_EVERY`.
    fn budget_room(&mut self, myself: &ActorRef<CoordinatorMessage>) -> Option<usize> {
        if !self.pacer.enabled() {
            return Some(usize::MAX);
        }
        let now = Instant::now();
        if self.pacer.due(now) {
            self.pacer.observe(now, resident_bytes());
        }
        match self.pacer.room(now, self.enqueued) {
            Room::Any => Some(usize::MAX),
            Room::Items(n) => Some(n),
            Room::Wait(wait) => {
                self.feeding = true;
                myself.send_after(wait, || CoordinatorMessage::FeedNext);
                None
            }
        }
    }

    pub(super) async fn enqueue_items(
        &mut self,
        head: &BatchHead,
        items: Vec<ManifestItem>,
    ) -> Result<()> {
        let services = self.services.clone();
        let batch_id = self.spec.batch_id.clone();
        // On a batch's first generation nothing can exist yet; otherwise the
        // records of every item are read first (concurrently, order kept).
        let found = if self.fresh {
            items
                .into_iter()
                .map(|item| (item, Found::Absent))
                .collect()
        } else {
            look_up_all(&services, &batch_id, items, self.sink.is_some()).await?
        };
        let queue = services.queue()?;
        let item_queue = services.pipeline_queue(&head.pipeline)?.to_string();
        let mut fx = SettlementEffects::default();
        let mut answered = Vec::new();
        for (item, found) in found {
            match found {
                Found::Active(job_id) => {
                    // Still queued or running from an earlier run: wait for it.
                    self.outstanding.insert(item.key, job_id);
                    continue;
                }
                Found::Answered(marker, output) => {
                    answered.push((item.key, marker, output));
                    continue;
                }
                Found::Absent => {}
            }
            let job_id = queue.next_job_id();
            // No `gaffer.run`: an item's run id follows from its batch and
            // key (`keys::item_run_id`), and the queue stores these headers
            // twice per item (its pending and claimed records).
            let mut headers = head.headers.clone();
            headers.insert(keys::HEADER_TYPE.into(), head.pipeline.clone());
            headers.insert(keys::HEADER_BATCH.into(), batch_id.clone());
            headers.insert(keys::HEADER_KEY.into(), item.key.clone());
            if !self.fresh {
                // An earlier run may have left this item's memo entries.
                headers.insert(keys::HEADER_MEMO.into(), String::new());
            }
            fx = fx
                .kv_put(
                    keys::item_active_key(&batch_id, &item.key),
                    job_id.clone().into_bytes(),
                )
                .enqueue(EnqueueRequest {
                    queue: item_queue.clone(),
                    // Sealed in the manifest; renewed if under an
                    // older key (or written before the engine had one).
                    payload: self.services.keyring().renewed(item.input)?,
                    options: EnqueueOptions::default()
                        .headers(headers)
                        .id_override(job_id.clone())
                        // gaffer counts attempts (see `attempts`); an item
                        // has its queue's default limit.
                        .max_attempts(keys::QUEUE_ATTEMPTS),
                });
            self.outstanding.insert(item.key, job_id);
        }
        if !fx.enqueues.is_empty() {
            let count = fx.enqueues.len() as u64;
            queue.commit_effects(fx).await?;
            self.enqueued += count;
        }
        drop(queue);
        for (key, marker, output) in answered {
            self.record(&key, &marker, output).await;
        }
        Ok(())
    }
}
