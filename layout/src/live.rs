//! [`LiveStore`]: an engine's store as code in the engine's own process
//! reads it, through the writer's live view instead of a reader.
//!
//! A reader (`taquba::QueueReader`, what the dashboard and the `gaffer`
//! command open) must decode every WAL object the writer writes to follow
//! it, whether a page is asked or not. The writer's own view reads the
//! writer's memtable and SSTs: nothing is decoded twice, and every commit
//! is visible to the next read. A dashboard mounted in the engine's
//! service reads through it (`Engine::live_store`,
//! `gaffer_web::WebConfig::live`).

use std::sync::Arc;

use taquba::QueueView;
use taquba::object_store::ObjectStore;

/// An engine's store, read through the engine's own (writer's) view.
///
/// Made by `gaffer::Engine::live_store` while the engine runs. It holds
/// no reader and nothing to close; the view keeps the store's handle, not
/// the engine: once the engine shuts down, every read through it fails
/// with the store's closed error.
#[derive(Clone)]
pub struct LiveStore {
    name: String,
    view: QueueView,
    store: Arc<dyn ObjectStore>,
    queue_path: String,
    jobs_prefix: String,
    bulk_prefix: String,
}

impl std::fmt::Debug for LiveStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveStore")
            .field("name", &self.name)
            .field("queue_path", &self.queue_path)
            .field("jobs_prefix", &self.jobs_prefix)
            .field("bulk_prefix", &self.bulk_prefix)
            .finish_non_exhaustive()
    }
}

impl LiveStore {
    /// The engine's store named `name`, its queue at `queue_path` in
    /// `store` read through `view` (the writer's), its job and pipeline
    /// queues under `jobs_prefix` and `bulk_prefix`. Made by the engine.
    #[doc(hidden)]
    pub fn new(
        name: String,
        view: QueueView,
        store: Arc<dyn ObjectStore>,
        queue_path: String,
        jobs_prefix: String,
        bulk_prefix: String,
    ) -> Self {
        Self {
            name,
            view,
            store,
            queue_path,
            jobs_prefix,
            bulk_prefix,
        }
    }

    /// How the store is named in messages and pages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The writer's view of the store.
    pub fn view(&self) -> &QueueView {
        &self.view
    }

    /// The object store the queue is in (where operator requests are sent:
    /// the queue's inbox).
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The queue's path in the object store.
    pub fn queue_path(&self) -> &str {
        &self.queue_path
    }

    /// The prefix of the engine's job queues (`Settings::queue_name`).
    pub fn jobs_prefix(&self) -> &str {
        &self.jobs_prefix
    }

    /// The prefix of the engine's pipeline queues
    /// (`Settings::bulk_queue_name`).
    pub fn bulk_prefix(&self) -> &str {
        &self.bulk_prefix
    }
}
