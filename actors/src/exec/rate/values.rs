//! The limiter's look at single values: an operator's pause of one value
//! (`Engine::pause_value`), the queues a sample of ready jobs reads, and
//! whether an insert happened on an idle queue.

use std::time::Duration;

use super::Limiter;

/// Pause per value (`Engine::pause_value`).
impl Limiter {
    /// Hold (`pause`) or let go the jobs of the partition queue `queue`:
    /// a fair type's ring keeps it out; a type rate-limited per header
    /// passes it over. Answers whether it changed.
    pub(crate) fn pause_value(&mut self, queue: &str, pause: bool) -> bool {
        match (&mut self.fair, pause) {
            (Some(ring), true) => ring.pause(queue),
            (Some(ring), false) => ring.resume(queue),
            (None, true) => self.paused.insert(queue.to_string()),
            (None, false) => self.paused.remove(queue),
        }
    }

    /// The queues a sample of ready jobs reads, at most `max`: a fair
    /// type's that may hold ready jobs (its ring, blocked and paused ones;
    /// a drained value has none ready, until an insert its idle check has
    /// not seen yet), any other type's every known queue.
    pub(crate) fn sample_queues(&self, max: usize) -> Vec<String> {
        match &self.fair {
            Some(ring) => ring.live_queues().take(max).map(str::to_string).collect(),
            None => self.queues.iter().take(max).cloned().collect(),
        }
    }

    /// Whether an operator paused `queue`.
    pub(crate) fn is_paused(&self, queue: &str) -> bool {
        match &self.fair {
            Some(ring) => ring.is_paused(queue),
            None => self.paused.contains(queue),
        }
    }
}

/// Whether an insert happened on `name` since the last look: its wake-up
/// holds a permit (taken now). Polled once, never awaited: the hour only
/// keeps the wait from ending by itself on this one poll.
pub(crate) fn inserted_since(queue: &taquba::Queue, name: &str) -> bool {
    use futures_util::FutureExt;
    queue
        .wait_for_jobs_on(name, Duration::from_secs(3600))
        .now_or_never()
        .is_some()
}
