//! The address book of settlements: who a settlement (or a cancel) tells
//! when a job or a batch item ends. The supervisor publishes the current
//! waiters and batches registry here, and publishes them again when it
//! restarts one of them, so a settlement that began before a restart tells
//! the new actor (see ARCHITECTURE.md, *Restarting the engine's own actors*
//! and *Shared state*).

use ractor::DerivedActorRef;
use tokio::sync::watch;

use crate::layout::records::{ItemMarker, OutcomeRecord};

/// What a job's terminal commit tells the waiters.
#[derive(Debug)]
pub enum JobEnd {
    /// A terminal commit of this run is starting: until it is durable (an
    /// `Ended` or `Aborted` follows), a record read from the store may not be
    /// durable yet.
    Settling(String),
    /// The run ended with this record; the commit is durable.
    Ended {
        /// Run id.
        run_id: String,
        /// Its outcome record.
        record: Box<OutcomeRecord>,
    },
    /// The terminal commit announced by `Settling` did not happen.
    Aborted(String),
}

/// What a batch item's terminal commit tells the batches registry.
#[derive(Debug)]
pub struct ItemEnd {
    /// Batch.
    pub batch_id: String,
    /// Item key.
    pub key: String,
    /// Job id of the delivery that settled it.
    pub job_id: String,
    /// Its marker.
    pub marker: Box<ItemMarker>,
}

/// Where settlements report: a view of the waiters (jobs) and of the batches
/// registry (items) that accepts only these reports.
#[derive(Debug, Clone)]
pub(crate) struct Reports {
    pub(crate) jobs: DerivedActorRef<JobEnd>,
    pub(crate) items: DerivedActorRef<ItemEnd>,
}

/// Who settlements tell, looked up when a report is sent. The supervisor
/// publishes new addresses when it restarts the waiters or the registry, so
/// a settlement that began before a restart tells the new actor when it ends
/// (an address book, not engine state: see ARCHITECTURE.md, "Shared state").
#[derive(Debug, Clone)]
pub struct Notify(watch::Receiver<Reports>);

impl Notify {
    pub(crate) fn new(book: watch::Receiver<Reports>) -> Self {
        Self(book)
    }

    /// Tell the current waiters.
    pub(crate) fn job(&self, end: JobEnd) {
        let _ = self.0.borrow().jobs.send_message(end);
    }

    /// Tell the current batches registry.
    pub(crate) fn item(&self, end: ItemEnd) {
        let _ = self.0.borrow().items.send_message(end);
    }
}
