//! The engine's error type. Every fallible engine operation returns
//! [`EngineError`]; each variant says what went wrong and what to do about it.

use std::sync::Arc;

/// The typed cause an error carries (its `source()`): the encoder's or
/// decoder's error, or a message where there is none.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// `e` as a [`Cause`]: an error, or a message (`&str`, `String`).
pub fn cause(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Cause {
    Arc::from(e.into())
}

/// Errors of the untyped engine. Cheap to clone (the store's own errors are
/// shared), so one error can reach every party waiting on an operation.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The durable queue (or the object store underneath it) failed.
    #[error("queue error: {0}")]
    Queue(#[source] Arc<taquba::Error>),

    /// An object-store operation outside the queue failed (memo entries, output blobs).
    #[error("object store error: {0}")]
    Store(#[source] Arc<taquba::object_store::Error>),

    /// The store holds a durable layout this build does not read and that is
    /// not newer than its own (a layout from before the first release, such
    /// as `gaffer-layout-1`, or a marker of another form); gaffer refuses to
    /// read it rather than misread it.
    #[error(
        "the store holds gaffer layout `{found}` but this build reads `{expected}` and has no \
         upgrade from it (layouts before `gaffer-layout-2` are from before gaffer's first \
         release); open it with the gaffer version that wrote it, or point this engine at a \
         new store path"
    )]
    LayoutMismatch {
        /// The version marker found in the store.
        found: String,
        /// The version marker this build writes and reads.
        expected: String,
    },

    /// The store was written (or upgraded) by a later gaffer release, with a
    /// layout newer than this build's: this build cannot read it, and the
    /// store is not touched.
    #[error(
        "the store holds gaffer layout `{found}`, newer than `{supported}`, the newest this \
         build reads: it was written by a later gaffer release; upgrade gaffer (the crate, or \
         the `gaffer` command) to that release or later to open it"
    )]
    LayoutTooNew {
        /// The version marker found in the store.
        found: String,
        /// The newest layout this build reads (the one it writes).
        supported: String,
    },

    /// A reader was pointed at a store that is not there (a local directory
    /// that does not exist).
    #[error("no store at {0}")]
    NoSuchStore(String),

    /// A signal's name is not of the accepted form.
    #[error("invalid signal name `{0}`: 1-128 characters of [A-Za-z0-9_.-]")]
    InvalidSignalName(String),

    /// A signal was sent to a job that has ended: no wait of it will ever
    /// read it.
    #[error("job `{0}` has ended: a signal to it would never be read")]
    JobEnded(String),

    /// A signal was sent to a job that waits for a signal of another name
    /// now.
    #[error(
        "job `{run_id}` waits for signal `{waiting}`, not `{sent}`; send `{waiting}` (a signal \
         for a later wait can be sent while the job runs, not while it waits for another)"
    )]
    WaitingForAnotherSignal {
        /// The job.
        run_id: String,
        /// The signal it waits for.
        waiting: String,
        /// The signal sent.
        sent: String,
    },

    /// A wait for a signal reached its deadline without the signal.
    #[error("the wait for signal `{name}` timed out")]
    SignalTimeout {
        /// The signal waited for.
        name: String,
    },

    /// The store has no gaffer layout marker: no gaffer engine ever
    /// started on it (a reader cannot tell an empty store from another
    /// program's).
    #[error(
        "`{0}` is not a gaffer store: it has no layout marker (no gaffer engine has started on \
         it; check the store path and the queue path)"
    )]
    NotAGafferStore(String),

    /// The store was written as another shard, or as a shard of a set of
    /// another size, than the engine or client opening it was told: the
    /// set's count and order are fixed for the life of its data, since
    /// they decide every id's store.
    #[error(
        "the store at `{url}` is shard {found} (index/count), but it was opened as shard {expected}; \
         open the set with the shard count and order its data was written with (docs/guide/shards.md), \
         or point the set at new, empty stores"
    )]
    ShardMismatch {
        /// The store's URL.
        url: String,
        /// The marker found in the store, `index/count`.
        found: String,
        /// The marker expected, `index/count`.
        expected: String,
    },

    /// The store is encrypted with a key the engine (client, command) was
    /// not given: its values sealed under that key cannot be opened, so
    /// nothing runs on it.
    #[error(
        "the store's values are sealed under key `{key_id}`, which this keyring does not hold; \
         start with a keyring that holds it (`EngineBuilder::encryption`, `--key-file`, \
         GAFFER_KEY_FILE or GAFFER_KEYS; docs/guide/encryption.md)"
    )]
    EncryptionKeyMissing {
        /// The key id missing from the keyring.
        key_id: String,
    },

    /// The keyring holds a key under the id the store names, but not the
    /// key that id stands for in the store: a wrong key.
    #[error(
        "the keyring's key `{key_id}` is not the key the store's values were sealed with under \
         that id (its check value does not open); give the right key for `{key_id}`"
    )]
    EncryptionKeyWrong {
        /// The key id whose key is wrong.
        key_id: String,
    },

    /// A stored value that claims to be sealed is not a valid sealed value
    /// (cut short, changed, an unknown format version).
    #[error("a sealed value could not be opened: {0}")]
    SealedValue(String),

    /// A keyring could not be made (a key file or variable that does not
    /// parse, an invalid or duplicate key id).
    #[error("invalid keyring: {0}")]
    InvalidKeyring(String),

    /// A header key uses the engine's reserved prefix.
    #[error("header `{0}` uses the reserved `gaffer.` prefix; choose another header name")]
    ReservedHeader(String),

    /// A KV key written through effects uses the engine's reserved prefix.
    #[error(
        "key `{0}` is under the reserved `gaffer/` prefix of the KV namespace; choose another key"
    )]
    ReservedKvKey(String),

    /// The same key was both put and deleted by one handler's effects.
    #[error("key `{0}` was both written and deleted by one job's effects")]
    ConflictingKvEffect(String),

    /// Effects were staged after the job returned.
    #[error("effects can no longer be staged: the job already returned")]
    EffectsSealed,

    /// A value is larger than the KV value cap.
    #[error(
        "value of {size} bytes exceeds the {max}-byte KV value cap; store large values elsewhere and keep a pointer"
    )]
    ValueTooLarge {
        /// The size that was rejected.
        size: usize,
        /// The cap.
        max: usize,
    },

    /// A submission's options do not hold together (what and why in the
    /// message): fix the options.
    #[error("invalid submit options: {0}")]
    InvalidSubmitOptions(String),
    /// A job id (run id) is not of the accepted form.
    #[error("invalid job id `{0}`: a job id is 1-128 characters of [A-Za-z0-9_-]")]
    InvalidJobId(String),

    /// An idempotency key is already used by a job with a different payload.
    #[error(
        "job `{0}` already exists with a different payload (same idempotency key, different input)"
    )]
    InputMismatch(String),

    /// A job was cancelled while it waited for the job `0` (a child it
    /// submitted): the wait ended, and the child was cancelled too.
    #[error("the waiting job was cancelled; the job `{0}` it awaited was cancelled with it")]
    WaiterCancelled(String),

    /// A workflow that cannot be submitted as given: a step named twice, a
    /// dependency on a step it does not have, a cycle, a name or id not of
    /// the accepted form, a step's job too large to hold.
    #[error("invalid workflow: {0}")]
    InvalidWorkflow(String),

    /// No workflow with this id was submitted (or it was removed).
    #[error("workflow `{0}` not found")]
    WorkflowNotFound(String),

    /// A workflow with this id (or key) exists with other steps or jobs.
    #[error(
        "workflow `{0}` already exists with other steps or jobs (same id or key, different graph)"
    )]
    WorkflowMismatch(String),

    /// A step's dependency (`JobContext::dep`) has no output to give: not
    /// a step of this job's workflow, not succeeded, or this job is not a
    /// workflow step.
    #[error("no output of step `{step}`: {reason}")]
    NoDependencyOutput {
        /// The step asked for.
        step: String,
        /// Why.
        reason: String,
    },

    /// A retry of a job that cannot be retried: it succeeded, it has not
    /// ended, or its payload is no longer kept.
    #[error("job `{id}` cannot be retried: {reason}")]
    NotRetryable {
        /// The job's id.
        id: String,
        /// Why.
        reason: String,
    },

    /// No job with this id is known to the store (never submitted, or its record was
    /// removed by retention).
    #[error("no job `{0}` is known: it was never submitted here, or retention removed its record")]
    JobNotFound(String),

    /// The id is a queue job's that was not submitted through gaffer: it was
    /// put on the queue directly, without gaffer's `gaffer.run` header and run
    /// record. gaffer does not run such a job and keeps no outcome for it.
    #[error(
        "queue job `{0}` was not submitted through gaffer (it has no `gaffer.run` header and no \
         run record): gaffer does not run it and keeps no outcome for it; submit jobs with \
         Engine::submit or EngineMessage::SubmitJob"
    )]
    NotSubmittedThroughGaffer(String),

    /// A durable record could not be decoded.
    #[error("corrupt record at `{key}`: {reason}")]
    CorruptRecord {
        /// The KV key or object path of the record.
        key: String,
        /// Why it failed to decode.
        #[source]
        reason: Cause,
    },

    /// A durable record failed to encode; nothing was written.
    #[error("a `{record}` record failed to encode ({reason}); nothing was written")]
    RecordEncoding {
        /// The record's type.
        record: String,
        /// The encoder's message.
        #[source]
        reason: Cause,
    },

    /// No job type of this name is registered on this engine.
    #[error(
        "no job type `{0}` is registered on this engine; register it on the builder before submitting it"
    )]
    UnknownJobType(String),

    /// A pause per value of a job type whose jobs are not spread over the
    /// values of that header.
    #[error("{}", not_partitioned(job_type, header, by.as_deref()))]
    NotPartitioned {
        /// The job type.
        job_type: String,
        /// The header named.
        header: String,
        /// The header the type's jobs are spread by, if any.
        by: Option<String>,
    },

    /// A header value that cannot be paused.
    #[error(
        "a header value to pause must be 1 to {max} bytes, not {len}; pause the whole type instead",
        max = crate::keys::MAX_PAUSED_VALUE_LEN
    )]
    PausedValueTooLong {
        /// Its length in bytes.
        len: usize,
    },

    /// A batch id is not of the accepted form.
    #[error("invalid batch id `{0}`: a batch id is 1-128 characters of [A-Za-z0-9_-]")]
    InvalidBatchId(String),

    /// An item key is not acceptable.
    #[error("invalid item key `{key}`: {reason}")]
    InvalidItemKey {
        /// The key (cut to 64 characters).
        key: String,
        /// Why.
        reason: String,
    },

    /// A job's tag is not acceptable (`SubmitOptions::tags`), or a job has
    /// too many.
    #[error("invalid tag `{tag}`: {reason}")]
    InvalidTag {
        /// The tag (cut to 80 characters).
        tag: String,
        /// The rule it breaks.
        reason: String,
    },

    /// Two items of one batch have the same key.
    #[error("two items of the batch have the key `{0}`; item keys must be unique (check key_fn)")]
    DuplicateItemKey(String),

    /// A run of an existing batch was given a different item set.
    #[error(
        "batch `{0}` exists with a different item set (or pipeline); use a new batch id, or forget this one first"
    )]
    BatchMismatch(String),

    /// No batch with this id exists.
    #[error("no batch `{0}` exists here (never run, or forgotten)")]
    BatchNotFound(String),

    /// The batch's manifest was never completed (its first run stopped while
    /// reading its inputs): it cannot be resumed without its inputs.
    #[error(
        "batch `{0}` was interrupted while its inputs were being read; run it again with the same inputs"
    )]
    BatchIncomplete(String),

    /// The batch is already being run (or forgotten) in this process.
    #[error("batch `{0}` is already running in this process; wait for that run, or drop it")]
    BatchRunning(String),

    /// The batch still has queued or running items.
    #[error(
        "batch `{batch_id}` still has {active} queued or running items; resume it to completion first"
    )]
    BatchActive {
        /// The batch.
        batch_id: String,
        /// Items still queued or running.
        active: usize,
    },

    /// The batch is not running in this process (never started here, or its
    /// run already ended): nothing to watch.
    #[error(
        "batch `{0}` is not running here: its run ended or never started; read its status instead"
    )]
    BatchNotRunning(String),

    /// The run of the batch was dropped by its caller before it finished;
    /// its queued items keep running.
    #[error("the run of batch `{0}` was dropped before it finished; resume the batch to finish it")]
    BatchAbandoned(String),

    /// No pipeline of this name is registered on the engine.
    #[error("no pipeline `{0}` is registered on this engine")]
    UnknownPipeline(String),

    /// A job type was registered twice.
    #[error("job type `{0}` is registered twice; every Job::NAME must be unique")]
    DuplicateJobType(String),

    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// The engine has shut down (or is shutting down) and accepts no more work.
    #[error("the engine has shut down")]
    ShutDown,

    /// An actor of the engine stopped before it answered (it crashed and is
    /// being restarted by its supervisor).
    #[error(
        "the engine's {actor} stopped before it answered ({reason}); it restarts on its own: retry the call"
    )]
    ActorUnavailable {
        /// Which actor.
        actor: &'static str,
        /// What the actor framework said.
        reason: String,
    },

    /// An operation kept losing races against concurrent changes of the same
    /// record (another submit, cancel or settlement of the same job).
    #[error("{operation} kept racing concurrent changes of the same record; retry it")]
    Contended {
        /// The operation, with the id it was for.
        operation: String,
    },

    /// Another writer changed a batch's durable head while this engine was
    /// changing it: only one engine may write a store at a time.
    #[error(
        "batch `{0}` was changed by another writer of this store while this run started; only one \
         engine may write a store: stop the other one, then run the batch again"
    )]
    ConcurrentWriter(String),

    /// A batch's output sink failed to flush at the end of a run. The items'
    /// outcomes are recorded.
    #[error(
        "the output sink of batch `{batch_id}` failed to flush: {reason}; the items' outcomes are \
         recorded: fix the sink and run the batch again to write them out"
    )]
    SinkFailed {
        /// The batch.
        batch_id: String,
        /// The sink's error.
        reason: String,
    },

    /// An input of a batch failed to encode; the run stopped before it.
    #[error(
        "input {index} of pipeline `{pipeline}` failed to encode ({reason}); fix its Serialize \
         implementation and run the batch again"
    )]
    InputEncoding {
        /// The pipeline.
        pipeline: String,
        /// The input's position (0-based).
        index: u64,
        /// The encoder's message.
        #[source]
        reason: Cause,
    },

    /// A task of the engine ended abnormally (it panicked): a bug in gaffer.
    #[error("an internal task of the engine failed while {doing}: {reason}; please report this")]
    Internal {
        /// What the task was doing.
        doing: &'static str,
        /// How it ended.
        reason: String,
    },

    /// A store URL does not parse, or names a scheme or an option its
    /// provider rejects.
    #[error(
        "invalid store URL `{url}`: {reason}; use s3://bucket/prefix, gs://…, az://…, \
         file:///path or memory://"
    )]
    InvalidStoreUrl {
        /// The URL as given.
        url: String,
        /// Why it was rejected.
        reason: String,
    },

    /// A store URL needs a backend this build does not have.
    #[error(
        "store URL `{url}` needs the `{feature}` feature of gaffer; build with \
         `--features {feature}` (or add `features = [\"{feature}\"]` to the gaffer dependency)"
    )]
    StoreFeatureMissing {
        /// The URL as given.
        url: String,
        /// The feature to enable: `aws`, `gcp` or `azure`.
        feature: &'static str,
    },

    /// The engine failed to start.
    #[error("engine failed to start: {0}")]
    Startup(String),

    /// A periodic job's schedule is not valid (see [`ScheduleError`]).
    #[error("the schedule of periodic job `{name}` is not valid: {source}")]
    InvalidSchedule {
        /// The periodic job's name.
        name: String,
        /// What is wrong with its schedule.
        #[source]
        source: ScheduleError,
    },

    /// Two periodic jobs have one name.
    #[error(
        "a periodic job named `{0}` is already scheduled on this engine; every periodic job needs its own name"
    )]
    DuplicatePeriodic(String),

    /// A periodic job's `make_job` failed for a tick (it panicked, or the
    /// job it made failed to encode): the tick is not fired, and is tried
    /// again later.
    #[error(
        "periodic job `{name}` could not make its job for the tick at {tick_ms} ms: {reason}; the tick is tried again"
    )]
    PeriodicMakeFailed {
        /// The periodic job's name.
        name: String,
        /// The tick, epoch ms.
        tick_ms: u64,
        /// What went wrong.
        reason: String,
    },

    /// No periodic job of this name is scheduled on this engine.
    #[error("no periodic job `{0}` is scheduled on this engine")]
    UnknownPeriodic(String),

    /// A schedule is not valid (a cron expression that does not parse, an
    /// unknown time zone …).
    #[error(transparent)]
    Schedule(#[from] ScheduleError),

    /// A shard set or placement is not valid, or the job belongs to a
    /// shard this process does not own, or whose engine is down.
    #[error(transparent)]
    Shard(#[from] ShardError),

    /// A value failed to encode (MessagePack).
    #[error("`{what}` failed to encode: {reason}")]
    Encode {
        /// What was being encoded.
        what: String,
        /// The encoder's message.
        #[source]
        reason: Cause,
    },

    /// A recorded value failed to decode as the expected type (the type
    /// changed since it was recorded, or the id belongs to another job
    /// type).
    #[error("`{what}` failed to decode: {reason}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The decoder's message.
        #[source]
        reason: Cause,
    },

    /// A line of JSON input failed to decode.
    #[error("line {line}: invalid JSON: {reason}")]
    Json {
        /// 1-based line number.
        line: usize,
        /// The decoder's message.
        reason: String,
    },

    /// An I/O error (reading inputs, writing a sink).
    #[error("I/O error: {0}")]
    Io(#[source] Arc<std::io::Error>),

    /// More items failed than the batch's `fail_threshold` allows. The
    /// report of the run is included.
    #[error("{failed} of {total} items failed, over the {threshold}% threshold")]
    FailureThresholdExceeded {
        /// Items failed.
        failed: u64,
        /// Items in the batch.
        total: u64,
        /// The threshold, percent.
        threshold: f64,
        /// The run's report.
        report: Box<crate::report::BulkReport>,
    },

    /// The engine refused a client's submission (unknown job type, a key
    /// already used with another input, a request that does not decode as
    /// a gaffer request …): the job will not run. A job payload its type
    /// does not decode is not refused: the job fails when it runs.
    #[error("request `{request}` was refused by the engine: {reason}")]
    Refused {
        /// The request's id.
        request: String,
        /// Why.
        reason: String,
    },

    /// A client's request would be larger than the store's inbox takes
    /// (taquba's `MAX_INBOX_ENTRY_SIZE`, 16 MiB): refused before anything
    /// is written.
    #[error(
        "the request is {size} bytes, over the {max}-byte limit of the store's inbox; keep large data in an object of its own and pass its key in the job"
    )]
    RequestTooLarge {
        /// The size of the inbox entry it would be.
        size: usize,
        /// The inbox's limit.
        max: usize,
    },

    /// The job id belongs to a job of another type.
    #[error("job `{id}` is a `{actual}` job, not a `{expected}` job")]
    WrongJobType {
        /// The id.
        id: String,
        /// The type asked for.
        expected: String,
        /// The type recorded.
        actual: String,
    },
}

mod convert;
mod detail;
pub use convert::store_closed;
pub use detail::{MAX_CATCH_UP, ScheduleError, ShardError};

/// Result alias of the engine crate.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// The message of [`EngineError::NotPartitioned`].
fn not_partitioned(job_type: &str, header: &str, by: Option<&str>) -> String {
    match by {
        Some(by) => format!(
            "job type `{job_type}` spreads its jobs by header `{by}`, not `{header}`; \
             pause a value of `{by}` (`--key {by}=VALUE`)"
        ),
        None => format!(
            "job type `{job_type}` does not spread its jobs over the values of a header \
             (register it with `fair_by`, `key_concurrency` or `RateLimit::per_header` \
             on `{header}` to pause one value), so none of its values can be paused \
             alone; pause the whole type (`gaffer pause {job_type}`)"
        ),
    }
}
