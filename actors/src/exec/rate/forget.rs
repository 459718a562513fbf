//! Forgetting drained partition queues (#37 §3): a fair type's pool keeps
//! nothing for a value whose jobs are all gone.
//!
//! A partition queue that a claim found short (`Limiter::drained`) goes
//! idle. Once it has stayed idle for `forget_drained_after`, the pool checks it
//! in a task ([`check`]): it reads the queue's mark
//! (`keys::partition_mark_key`), then taquba's counts of the queue, and when
//! no job is live (pending, scheduled, claimed or dead) deletes the mark,
//! compared against the value it read. A job created on the queue after
//! the read wrote a new mark (every creation does, in its own
//! transaction), so the compare fails and the queue is kept; a job created
//! before the read is in the counts. A deleted mark therefore means the
//! queue held no live job when it was deleted.
//!
//! The pool then forgets the queue (`Limiter::forgot`) if nothing woke it
//! meanwhile: no submission named it, its wake-up holds no insert, it is
//! not in the ring (its stamp, bumped on every wake, is the one the check
//! started from). A submission whose event reached the pool before its
//! commit, with the commit landing after the queue was forgotten, is found
//! by the pool's next look at the marks (every `forget_drained_after`), or by the
//! next submission of its value.
//!
//! What the pool keeps per known queue is its `Known` entry and its place
//! in the limiter's `queues`; a forgotten queue has neither. taquba keeps a
//! small claim-cursor entry for every queue that ever had a job for the
//! life of the process: a limit of the queue beneath, measured in
//! benches/README.md.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::Limiter;
use crate::layout::keys;

/// Queues one forget check looks at, at most.
const CHECK_BATCH: usize = 256;

/// A known queue's entry.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    /// Its place in the limiter's `queues`.
    index: usize,
    /// Bumped (from the limiter's counter) each time it may have jobs.
    stamp: u64,
    /// Since when it has been idle (drained), if it is.
    idle_since: Option<Instant>,
    /// Whether it is in the forgetting's queue.
    queued: bool,
}

impl Known {
    pub(super) fn at(index: usize) -> Self {
        Self {
            index,
            stamp: 0,
            idle_since: None,
            queued: false,
        }
    }
}

/// The limiter's forgetting state.
#[derive(Debug, Default)]
pub(crate) struct Forgetting {
    /// Idle queues in the order they went idle (an entry whose queue woke
    /// since is dropped when reached).
    idle: VecDeque<String>,
    /// The stamps' counter.
    next_stamp: u64,
    /// The queues of the check in flight (one at a time), if any.
    checking: Option<Vec<String>>,
}

/// What a forget check found: queues to forget (with the stamp the check
/// started from), and queues that still hold live jobs.
#[derive(Debug, Default)]
pub(crate) struct ForgetCheck {
    pub(crate) forget: Vec<(String, u64)>,
    pub(crate) keep: Vec<String>,
}

impl Limiter {
    /// `queue` may have jobs: its stamp moves on, and it is not idle.
    pub(super) fn touched(&mut self, queue: &str) {
        if let Some(k) = self.known.get_mut(queue) {
            self.forgetting.next_stamp += 1;
            k.stamp = self.forgetting.next_stamp;
            k.idle_since = None;
        }
    }

    /// `queue` came back short: it is idle from now (a partition queue of a
    /// fair type joins the forgetting's queue).
    pub(super) fn went_idle(&mut self, queue: &str) {
        if keys::partition_base(queue).is_none() {
            return;
        }
        if let Some(k) = self.known.get_mut(queue) {
            k.idle_since = Some(Instant::now());
            if !k.queued {
                k.queued = true;
                self.forgetting.idle.push_back(queue.to_string());
            }
        }
    }

    /// The queues to check now (idle for `after`, the engine's
    /// `forget_drained_after`, and not in the ring), with their stamps;
    /// empty while a check is in flight. Looks at most at [`CHECK_BATCH`]
    /// entries of the forgetting's queue.
    pub(crate) fn due_for_check(&mut self, after: Duration) -> Vec<(String, u64)> {
        let Some(ring) = &self.fair else {
            return Vec::new();
        };
        if self.forgetting.checking.is_some() {
            return Vec::new();
        }
        let now = Instant::now();
        let mut due = Vec::new();
        for _ in 0..self.forgetting.idle.len().min(CHECK_BATCH) {
            let Some(q) = self.forgetting.idle.pop_front() else {
                break;
            };
            let Some(k) = self.known.get_mut(&q) else {
                continue;
            };
            match k.idle_since {
                Some(since) if !ring.is_active(&q) => {
                    if now.duration_since(since) >= after {
                        k.queued = false;
                        due.push((q, k.stamp));
                    } else {
                        self.forgetting.idle.push_back(q);
                    }
                }
                // Woke since it went idle: it queues again when it drains.
                _ => k.queued = false,
            }
        }
        if !due.is_empty() {
            self.forgetting.checking = Some(due.iter().map(|(q, _)| q.clone()).collect());
        }
        due
    }

    /// A forget check ended (`None`: it failed): forget the queues nothing
    /// woke meanwhile (`woke`: whether an insert happened on one since the
    /// last look, taken now); those with live jobs stay idle for another
    /// `forget_drained_after`. Answers the queues that woke (they join the ring).
    pub(crate) fn forgot(
        &mut self,
        found: Option<ForgetCheck>,
        mut woke: impl FnMut(&str) -> bool,
    ) -> Vec<String> {
        let checked = self.forgetting.checking.take().unwrap_or_default();
        let found = found.unwrap_or(ForgetCheck {
            // A failed check keeps them all, for another window.
            forget: Vec::new(),
            keep: checked,
        });
        let mut joined = Vec::new();
        for (q, stamp) in found.forget {
            let Some(k) = self.known.get(&q) else {
                continue;
            };
            let active = self.fair.as_ref().is_some_and(|r| r.is_active(&q));
            if k.stamp != stamp || k.idle_since.is_none() || active {
                continue;
            }
            if woke(&q) {
                joined.push(q);
                continue;
            }
            self.remove_known(&q);
        }
        let now = Instant::now();
        for q in found.keep {
            if let Some(k) = self.known.get_mut(&q)
                && k.idle_since.is_some()
            {
                k.idle_since = Some(now);
                if !k.queued {
                    k.queued = true;
                    self.forgetting.idle.push_back(q);
                }
            }
        }
        for q in &joined {
            if let Some(ring) = &mut self.fair {
                ring.enter(q);
            }
            self.touched(q);
        }
        joined
    }

    /// Drop `queue` from what the limiter knows: its entry, its place in
    /// `queues` (the last queue takes it), its bucket.
    fn remove_known(&mut self, queue: &str) {
        let Some(k) = self.known.remove(queue) else {
            return;
        };
        if k.index == 0 || k.index >= self.queues.len() {
            // The type's own queue is never forgotten.
            return;
        }
        self.queues.swap_remove(k.index);
        if let Some(moved) = self.queues.get(k.index)
            && let Some(m) = self.known.get_mut(moved)
        {
            m.index = k.index;
        }
        self.buckets.remove(queue);
    }
}

/// Check `due` queues in the store: those with no live job whose mark is
/// deleted (or was absent) are to be forgotten, the others kept. First each
/// queue's mark is no longer known written in this process (`marks`, see
/// `exec::marks`), and no submission that skipped it is in flight. The
/// reads go at once, and the marks of the empty queues are deleted in one
/// commit of compares (each queue alone when one of them changed).
pub(crate) async fn check(
    queue: &taquba::Queue,
    marks: &crate::exec::marks::Marks,
    due: Vec<(String, u64)>,
) -> crate::Result<ForgetCheck> {
    let mut found = ForgetCheck::default();
    let mut ready = Vec::with_capacity(due.len());
    for (q, stamp) in due {
        if marks.unmark(&q, Duration::from_secs(10)).await {
            ready.push((q, stamp));
        } else {
            found.keep.push(q);
        }
    }
    let reads = futures_util::future::join_all(ready.iter().map(|(q, _)| async move {
        let key = keys::partition_mark_key(q);
        // The mark first, then the counts (see the module's note).
        let mark = queue.view().kv_get(&key).await?;
        let stats = queue.view().stats(q).await?;
        let live = stats.pending + stats.scheduled + stats.claimed + stats.dead;
        Ok::<_, taquba::Error>((key, mark, live))
    }))
    .await;
    let mut empty = Vec::new();
    for ((q, stamp), read) in ready.into_iter().zip(reads) {
        let (key, mark, live) = read?;
        if live > 0 {
            found.keep.push(q);
        } else {
            empty.push((q, stamp, key, mark));
        }
    }
    let compares: Vec<(&[u8], Option<&[u8]>)> = empty
        .iter()
        .filter_map(|(_, _, key, mark)| mark.as_ref().map(|m| (key.as_slice(), Some(m.as_ref()))))
        .collect();
    let mut fx = taquba::SettlementEffects::default();
    for (key, _) in &compares {
        fx = fx.kv_delete(key.to_vec());
    }
    let all_deleted =
        compares.is_empty() || queue.kv_compare_commit(&compares, fx).await?.is_some();
    for (q, stamp, key, mark) in empty {
        let deleted = match &mark {
            _ if all_deleted => true,
            Some(mark) => queue.kv_compare_delete(&key, mark).await?,
            None => true,
        };
        if deleted {
            marks.forget(&q);
            found.forget.push((q, stamp));
        } else {
            // A job was created on it since the read.
            found.keep.push(q);
        }
    }
    Ok(found)
}

/// The partition queues of the type queue `base` that may hold live jobs:
/// those with a mark. A store whose marks of `base` are not known complete
/// (written before marks existed) is listed from taquba's queues once, and
/// every partition of `base` found there is marked first.
pub(crate) async fn marked(queue: &taquba::Queue, base: &str) -> crate::Result<Vec<String>> {
    let listed = keys::partitions_listed_key(base);
    if queue.view().kv_get(&listed).await?.is_none() {
        let all = queue.view().list_queues().await?;
        let mine: Vec<String> = all
            .into_iter()
            .filter(|q| keys::partition_base(q) == Some(base))
            .collect();
        for chunk in mine.chunks(512) {
            let mut fx = taquba::SettlementEffects::default();
            for q in chunk {
                fx = fx.kv_put(
                    keys::partition_mark_key(q),
                    keys::partition_mark("listed", ""),
                );
            }
            queue.commit_effects(fx).await?;
        }
        queue.kv_put(&listed, b"1").await?;
        return Ok(mine);
    }
    use futures_util::TryStreamExt;
    let prefix = keys::partition_marks_prefix(base);
    let strip = keys::partition_mark_key("").len();
    let marks: Vec<(Vec<u8>, _)> = queue
        .view()
        .kv_entries(&prefix, .., taquba::KvOrder::Ascending, 1024)
        .try_collect()
        .await?;
    Ok(marks
        .into_iter()
        .filter_map(|(k, _)| {
            k.get(strip..)
                .and_then(|q| std::str::from_utf8(q).ok())
                .map(str::to_string)
        })
        .collect())
}
