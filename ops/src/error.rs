//! Why a read or a request failed, each one line.

use gaffer_layout::EngineError;

/// Why a read of the store, or an operator request, failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// Neither a directory nor a URL.
    #[error("no store given: pass --dir PATH or --url URL")]
    NoStoreGiven,
    /// No taquba queue at the queue path.
    #[error("no store at {0}: nothing was ever written there (is --queue-path right?)")]
    NotInitialized(String),
    /// No job with this id.
    #[error("no job `{0}` (never submitted, or its records were removed)")]
    JobNotFound(String),
    /// No batch with this id.
    #[error("no batch `{0}`")]
    BatchNotFound(String),
    /// No item with this key in the batch (not settled, not queued).
    #[error(
        "batch `{batch}` has no item `{key}` queued, running or settled (not fed yet, or not one of its keys)"
    )]
    ItemNotFound {
        /// The batch.
        batch: String,
        /// The item's key.
        key: String,
    },
    /// No workflow with this id.
    #[error("no workflow `{0}` (never submitted, or its records were removed)")]
    WorkflowNotFound(String),
    /// An input is not usable.
    #[error("{0}")]
    BadInput(String),
    /// A cursor that no page printed.
    #[error("`{0}` is not a cursor of `gaffer jobs`: pass the `next` a previous page printed")]
    BadCursor(String),
    /// A store whose finished jobs are not indexed yet.
    #[error(
        "this store's finished jobs are not indexed yet (it was made by an older gaffer): \
         start an engine of this version on it once, which builds the index"
    )]
    IndexNotReady,
    /// The store could not be opened or read.
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// The queue could not be read.
    #[error("{0}")]
    Queue(#[from] taquba::Error),
    /// A record in the store is not what this build reads.
    #[error("unreadable record in the store: {0}")]
    BadRecord(String),
}
