//! Engine services: the shared resources (queue, object store, clock, event
//! channel) and the bytes-level operations every part of the engine and the
//! typed layer uses: submit, read an outcome, read a job's state, cancel.
//!
//! `Services` holds no engine state. It holds the queue weakly: the supervisor
//! owns the queue, and once it closes the queue at shutdown every operation
//! here fails with [`EngineError::ShutDown`]. It also knows, from the start,
//! which job types and pipelines are registered and the taquba queue of each
//! (fixed for the engine's life).

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Weak};

use taquba::object_store::ObjectStore;
use taquba::{Clock, ExpiryIndex, Queue};

use crate::error::{EngineError, Result};
use crate::events::{EngineEvent, EventSender, WeakEventSender};
use crate::layout::keys;
use crate::settings::Settings;

/// The engine's open queue. The supervisor holds the one long-lived strong
/// reference; operations upgrade the services' weak one for their duration.
/// When the last reference drops, the queue is handed to whoever waits for it
/// (the supervisor's shutdown, which closes it): a completion signal, not a
/// poll.
pub struct SharedQueue {
    // `Some` until the last reference drops.
    queue: Option<Queue>,
    give_back: Option<tokio::sync::oneshot::Sender<Queue>>,
}

impl SharedQueue {
    /// Share `queue`; the receiver gets it back once every reference is gone.
    pub(crate) fn new(queue: Queue) -> (Arc<Self>, tokio::sync::oneshot::Receiver<Queue>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = Arc::new(Self {
            queue: Some(queue),
            give_back: Some(tx),
        });
        (shared, rx)
    }
}

impl Deref for SharedQueue {
    type Target = Queue;

    fn deref(&self) -> &Queue {
        // Taken only in `drop`, after which no reference exists.
        self.queue
            .as_ref()
            .expect("the queue is taken only when its last reference drops")
    }
}

impl Drop for SharedQueue {
    fn drop(&mut self) {
        if let (Some(queue), Some(tx)) = (self.queue.take(), self.give_back.take()) {
            // Nobody waiting (no shutdown): the queue is dropped unclosed.
            let _ = tx.send(queue);
        }
    }
}

impl std::fmt::Debug for SharedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedQueue").finish_non_exhaustive()
    }
}

/// What a registration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A job type, on the jobs queues.
    Job,
    /// A bulk pipeline, on the bulk queues.
    Pipeline,
}

/// The taquba queue of a registered job type or pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The queue's name.
    pub queue: String,
    /// Job type or pipeline.
    pub kind: Kind,
    /// The job header whose values have queues of their own (a rate limit
    /// per header value, `RateLimit::per_header`; fairness, `Fairness`; a
    /// limit per key, `Concurrency::per_header`).
    pub partition: Option<String>,
}

/// Shared resources and bytes-level operations of one engine.
pub struct Services {
    queue: Weak<SharedQueue>,
    routes: HashMap<String, Route>,
    /// The blob store through the keyring (see `store`).
    store: Arc<dyn ObjectStore>,
    /// The blob store as it is (a rekey reads what is stored).
    raw_store: Arc<dyn ObjectStore>,
    settings: Settings,
    clock: Arc<dyn Clock>,
    /// Weak: the supervisor holds the sender, and drops it when the engine
    /// stops, which ends every subscriber's stream.
    events: WeakEventSender,
    expiry: ExpiryIndex,
    batch_expiry: ExpiryIndex,
    request_expiry: ExpiryIndex,
    workflow_expiry: ExpiryIndex,
    /// Partition queues named by submissions, for the pools that claim
    /// from them (a pool learns a new tenant's queue from its first job).
    partitions: tokio::sync::broadcast::Sender<String>,
    /// How often keyed submissions lately found their id taken: decides
    /// whether a submission reads the outcome record before its
    /// compare-and-commit (a hint, never an answer: see `jobs`).
    duplicates: DuplicateRate,
    /// Partition queues whose marks this process wrote (a cache: see
    /// `exec::marks`).
    marks: crate::exec::marks::Marks,
    /// Where workflow steps' settlements ask their plans (the supervisor):
    /// set once when the supervisor starts (an address, not state).
    gates: std::sync::OnceLock<ractor::DerivedActorRef<crate::workflows::GateMessage>>,
    /// Where debounced submissions go (the supervisor's debounce lines):
    /// set once when the supervisor starts (an address, not state).
    debounce: std::sync::OnceLock<ractor::DerivedActorRef<crate::jobs::debounce::DebounceMessage>>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Services {
    pub(crate) fn new(
        queue: &Arc<SharedQueue>,
        store: Arc<dyn ObjectStore>,
        settings: Settings,
        clock: Arc<dyn Clock>,
        routes: HashMap<String, Route>,
        events: EventSender,
    ) -> Self {
        // Every object the engine writes or reads (memo entries, large
        // outputs) goes through its keyring.
        let raw_store = store.clone();
        let store: Arc<dyn ObjectStore> = Arc::new(crate::layout::sealed::blobs::SealedStore::new(
            store,
            settings.encryption.clone(),
        ));
        Self {
            queue: Arc::downgrade(queue),
            routes,
            store,
            raw_store,
            settings,
            clock,
            events: events.downgrade(),
            expiry: ExpiryIndex::new(keys::JOBS_EXPIRY_PREFIX),
            batch_expiry: ExpiryIndex::new(keys::BATCHES_EXPIRY_PREFIX),
            request_expiry: ExpiryIndex::new(keys::REQUESTS_EXPIRY_PREFIX),
            workflow_expiry: ExpiryIndex::new(crate::workflows::layout::WORKFLOWS_EXPIRY_PREFIX),
            duplicates: DuplicateRate::default(),
            marks: Default::default(),
            partitions: tokio::sync::broadcast::channel(1024).0,
            gates: std::sync::OnceLock::new(),
            debounce: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn set_gates(&self, to: ractor::DerivedActorRef<crate::workflows::GateMessage>) {
        let _ = self.gates.set(to);
    }

    pub(crate) fn set_debounce(
        &self,
        to: ractor::DerivedActorRef<crate::jobs::debounce::DebounceMessage>,
    ) {
        let _ = self.debounce.set(to);
    }

    /// Where debounced submissions go (`ShutDown` before the supervisor
    /// started).
    pub(crate) fn debounce(
        &self,
    ) -> Result<&ractor::DerivedActorRef<crate::jobs::debounce::DebounceMessage>> {
        self.debounce.get().ok_or(EngineError::ShutDown)
    }

    /// Where the gates of workflows are (`ShutDown` before the supervisor
    /// started them).
    pub(crate) fn gates(&self) -> Result<&ractor::DerivedActorRef<crate::workflows::GateMessage>> {
        self.gates.get().ok_or(EngineError::ShutDown)
    }

    /// The queue, while the engine runs. Hold it only for an operation: the
    /// engine closes the queue at shutdown once every holder let go.
    pub(crate) fn queue(&self) -> Result<Arc<SharedQueue>> {
        self.queue.upgrade().ok_or(EngineError::ShutDown)
    }

    /// The engine's open queue, for tests (feature `testing`): to put a job
    /// on it by hand, promote scheduled jobs on a mock clock, or read its
    /// counts. Anything written here bypasses gaffer's records. Users read a
    /// store through taquba's read-only `QueueReader` instead, which never
    /// disturbs the engine.
    #[cfg(feature = "testing")]
    pub fn raw_queue(&self) -> Result<Arc<SharedQueue>> {
        self.queue()
    }

    /// The writer's live view of the store and the object store the queue
    /// is in, while the engine runs (`ShutDown` after): what a dashboard
    /// in this process reads through (`gaffer::Engine::live_store`). The
    /// view holds the store's handle, not the queue, so it never keeps the
    /// engine from closing it.
    pub fn live_view(&self) -> Result<(taquba::QueueView, Arc<dyn ObjectStore>)> {
        Ok((self.queue()?.view().clone(), self.raw_store.clone()))
    }

    /// The queues of every registered job type and pipeline.
    pub fn routes(&self) -> &HashMap<String, Route> {
        &self.routes
    }

    /// The queue of a registered job type or pipeline.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.get(name)
    }

    /// The queue of the registered job type `job_type`
    /// (`UnknownJobType` otherwise).
    pub fn job_queue(&self, job_type: &str) -> Result<&str> {
        match self.routes.get(job_type) {
            Some(Route {
                queue,
                kind: Kind::Job,
                ..
            }) => Ok(queue),
            _ => Err(EngineError::UnknownJobType(job_type.to_string())),
        }
    }

    /// The queue a job of `job_type` with `headers` goes to: its type's, or
    /// when the type's rate limit is per header value and the job has that
    /// header, the value's partition queue (whose pool is told of it).
    pub(crate) fn queue_for_job(
        &self,
        job_type: &str,
        headers: &HashMap<String, String>,
    ) -> Result<String> {
        let queue = self.job_queue_of(job_type, headers)?;
        self.tell_partition(job_type, &queue);
        Ok(queue)
    }

    /// Tell the pool of `job_type` (if its jobs are spread over partition
    /// queues) that `queue` has a job (a queue it may have forgotten as
    /// drained, or a fair type's value to put in its ring). A creation that
    /// commits on its own says so after its commit, so that the pool's
    /// claim finds the job (told before, the claim can come back empty, and
    /// the queue then waits for the pool's idle check).
    pub(crate) fn tell_partition(&self, job_type: &str, queue: &str) {
        if self
            .routes
            .get(job_type)
            .is_some_and(|r| r.partition.is_some())
        {
            // Jobs without the header are one value of their own, on the
            // type's queue: a fair type's pool is told of it too. No pool
            // listening (the engine is stopping) is not an error.
            let _ = self.partitions.send(queue.to_string());
        }
    }

    /// The queue a job of `job_type` with `headers` goes to (see
    /// [`queue_for_job`](Self::queue_for_job)), no pool told.
    pub(crate) fn job_queue_of(
        &self,
        job_type: &str,
        headers: &HashMap<String, String>,
    ) -> Result<String> {
        let base = self.job_queue(job_type)?;
        let value = self
            .routes
            .get(job_type)
            .and_then(|r| r.partition.as_ref())
            .and_then(|header| headers.get(header));
        Ok(match value {
            Some(value) => keys::partition_queue(base, value),
            None => base.to_string(),
        })
    }

    /// How a submission to `job_queue` treats the queue's mark (see
    /// `exec::marks`): none for a type's own queue.
    pub(crate) fn begin_marking(&self, job_queue: &str) -> crate::exec::marks::Marking {
        if keys::partition_base(job_queue).is_none() {
            return crate::exec::marks::Marking::None;
        }
        self.marks.begin(job_queue)
    }

    /// What this process knows of the partition marks.
    pub(crate) fn marks(&self) -> &crate::exec::marks::Marks {
        &self.marks
    }

    /// `fx` with the mark of `job_queue` (`keys::partition_mark_key`) when
    /// it is a partition queue: a creation of a job on a partition queue
    /// writes it in its own transaction (unless this process knows it is
    /// written, see `exec::marks`), so the type's pool finds the queue
    /// again at its next start (or its next look at the marks) after it
    /// forgot the queue as drained. The mark holds `job_id` (unique per
    /// creation: a forget compares against it) and the header's value.
    pub(crate) fn mark_partition(
        &self,
        fx: taquba::SettlementEffects,
        job_type: &str,
        job_queue: &str,
        headers: &HashMap<String, String>,
        job_id: &str,
    ) -> taquba::SettlementEffects {
        if keys::partition_base(job_queue).is_none() {
            return fx;
        }
        let value = self
            .routes
            .get(job_type)
            .and_then(|r| r.partition.as_ref())
            .and_then(|h| headers.get(h))
            .map_or("", String::as_str);
        fx.kv_put(
            keys::partition_mark_key(job_queue),
            keys::partition_mark(job_id, value),
        )
    }

    /// Partition queues as submissions name them (see `queue_for_job`).
    pub(crate) fn partition_events(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.partitions.subscribe()
    }

    /// The queue of the registered pipeline `pipeline` (`UnknownPipeline`
    /// otherwise).
    pub fn pipeline_queue(&self, pipeline: &str) -> Result<&str> {
        match self.routes.get(pipeline) {
            Some(Route {
                queue,
                kind: Kind::Pipeline,
                ..
            }) => Ok(queue),
            _ => Err(EngineError::UnknownPipeline(pipeline.to_string())),
        }
    }

    /// The object store of memo entries and large outputs, through the
    /// engine's keyring: what is put is sealed, what is read is opened.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The blob store as it is, its objects as stored (sealed or not).
    pub(crate) fn raw_store(&self) -> &Arc<dyn ObjectStore> {
        &self.raw_store
    }

    /// The engine's settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The keyring every user value is sealed with on its way to the store
    /// and opened with on its way back ([`Settings::encryption`]; empty:
    /// nothing is sealed).
    pub fn keyring(&self) -> &crate::layout::sealed::Keyring {
        &self.settings.encryption
    }

    /// The clock of records and retention (taquba's clock).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Subscribe to lifecycle events. The stream ends (`RecvError::Closed`)
    /// after the engine's last event; a subscription taken once the engine
    /// has stopped is already ended.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        match self.events.upgrade() {
            Some(events) => events.subscribe(),
            // The engine stopped: a receiver whose channel is closed.
            None => crate::events::channel().subscribe(),
        }
    }

    pub(crate) fn emit(&self, event: EngineEvent) {
        self.emit_with(|| event);
    }

    /// Emit the event `event` makes, making it only when someone listens
    /// (the hot path's events: a job started, a run ended). No subscriber,
    /// or an engine that stopped, is fine: events are observations, and one
    /// that subscribes after the check misses this event as it would had it
    /// subscribed after the send.
    pub(crate) fn emit_with(&self, event: impl FnOnce() -> EngineEvent) {
        if let Some(events) = self.events.upgrade()
            && events.receiver_count() > 0
        {
            let _ = events.send(event());
        }
    }

    pub(crate) fn expiry(&self) -> &ExpiryIndex {
        &self.expiry
    }

    pub(crate) fn batch_expiry(&self) -> &ExpiryIndex {
        &self.batch_expiry
    }

    /// The retention index of ended workflows.
    pub(crate) fn workflow_expiry(&self) -> &ExpiryIndex {
        &self.workflow_expiry
    }

    /// The retention index of operator request records.
    pub(crate) fn request_expiry(&self) -> &ExpiryIndex {
        &self.request_expiry
    }

    pub(crate) fn duplicates(&self) -> &DuplicateRate {
        &self.duplicates
    }
}

/// How often keyed submissions (and submissions with a given run id) lately
/// found their id taken: a moving average over about the last 16, in 1/1024.
///
/// It decides one thing, whether a submission reads the outcome record
/// before its compare-and-commit. For a duplicate of a finished job that
/// read is the whole answer (no job prepared, no transaction); for a new id
/// it is a miss the compare repeats. So the read pays while duplicates are
/// more than about one submission in five, and is skipped otherwise. The
/// answer is the same either way: the compare-and-commit decides, and every
/// read after a failed compare is made as before. Updates may race (a lost
/// update only delays the switch); it is a hint, not engine state.
#[derive(Debug, Default)]
pub(crate) struct DuplicateRate(std::sync::atomic::AtomicU32);

impl DuplicateRate {
    pub(crate) const ONE: u32 = 1024;
    /// Read the outcome record first at or above this rate (1/5).
    const PRE_READ_AT: u32 = Self::ONE / 5;

    pub(crate) fn pre_read(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) >= Self::PRE_READ_AT
    }

    pub(crate) fn note(&self, duplicate: bool) {
        let rate = self.0.load(std::sync::atomic::Ordering::Relaxed);
        let target = if duplicate { Self::ONE } else { 0 };
        // rate += (target - rate) / 16, rounded away from the old value so
        // it reaches 0 and ONE.
        let next = if target > rate {
            rate + (target - rate).div_ceil(16)
        } else {
            rate - (rate - target).div_ceil(16)
        };
        self.0.store(next, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::DuplicateRate;

    #[test]
    fn the_outcome_is_read_first_only_while_duplicates_are_frequent() {
        let rate = DuplicateRate::default();
        assert!(!rate.pre_read(), "a fresh engine expects new ids");
        // Four duplicates in a row switch the read on...
        for _ in 0..3 {
            rate.note(true);
        }
        assert!(!rate.pre_read());
        rate.note(true);
        assert!(rate.pre_read());
        // ...one duplicate in two keeps it on...
        for _ in 0..100 {
            rate.note(false);
            rate.note(true);
        }
        assert!(rate.pre_read());
        // ...one in ten does not.
        for _ in 0..100 {
            rate.note(true);
            for _ in 0..9 {
                rate.note(false);
            }
        }
        assert!(!rate.pre_read());
        // The average reaches both ends.
        for _ in 0..200 {
            rate.note(false);
        }
        assert_eq!(rate.0.load(std::sync::atomic::Ordering::Relaxed), 0);
        for _ in 0..200 {
            rate.note(true);
        }
        assert_eq!(
            rate.0.load(std::sync::atomic::Ordering::Relaxed),
            DuplicateRate::ONE
        );
    }
}
