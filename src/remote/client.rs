//! Submitting to an engine from another process: [`Client`].
//!
//! A client opens the engine's store (the same directory or URL) without
//! ever becoming its writer, so it cannot fence the engine and needs no
//! network path to it. It writes each submission as an entry of taquba's
//! inbox, which the engine takes through its intake (see
//! `gaffer_actors::engine::intake` and ARCHITECTURE.md), and reads jobs through a
//! read-only `QueueReader`.
//!
//! What a client sees lags the engine: a submission waits for the engine's
//! next look at its inbox ([`EngineBuilder::intake_poll`](crate::EngineBuilder::intake_poll),
//! 2 s by default), and a read sees a commit once the engine's WAL flush
//! made it durable and the reader's next poll found it
//! ([`ClientBuilder::poll_interval`], 100 ms by default).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::engine::intake::{IntakeOp, RequestProgress, request_progress, send_as};
use gaffer_actors::layout::records::OutputRef;
use gaffer_actors::layout::sealed::Keyring;
use gaffer_actors::layout::{inspect, keys};
use gaffer_actors::{EngineError, JobState};
use taquba::object_store::path::Path as ObjectPath;
use taquba::object_store::{ObjectStore, ObjectStoreExt};
use taquba::{
    EnqueueEntry, EnqueueOptions, InboxSender, MAX_INBOX_ENTRY_SIZE, QueueReader, ReaderMode,
    ReaderOptions, default_inbox_path,
};

use crate::error::{Error, JobError, Result};
use crate::job::handle::decode_outcome_with;
use crate::job::submit::{SubmitOptions, submit_request};
use crate::job::typed::Job;
use gaffer_actors::layout::store::Store;

mod handle;
mod requests;
mod tags;
mod workflows;
pub use handle::ClientHandle;
pub use requests::Request;
pub use workflows::ClientWorkflow;

/// Where a client's submission stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestState {
    /// In the store's inbox or the engine's intake: the engine has not
    /// submitted it yet.
    Sent,
    /// The engine refused it, for this reason (unknown job type, a key
    /// already used with another input, a request that does not decode as
    /// a gaffer request …). It will not run. A job payload its type does not
    /// decode is not refused: the job fails when it runs.
    Refused(String),
    /// Submitted: the job is in this state.
    Job(JobState),
}

/// How long a handle's `join` goes on reading a taken request whose job
/// reads as absent before it answers `JobNotFound`.
pub(crate) const MISSING_GRACE: Duration = Duration::from_secs(10);

/// Configures and opens a [`Client`].
pub struct ClientBuilder {
    store: Option<Store>,
    queue_path: String,
    queue_name: String,
    inbox_path: Option<String>,
    poll: Duration,
    keyring: Keyring,
}

/// Submits jobs to an engine, and reads them, from another process.
///
/// ```no_run
/// # use gaffer::{remote::Client, Job, JobContext};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Email { to: String }
/// # impl Job for Email { const NAME: &'static str = "email"; type Output = ();
/// #   type Error = gaffer::Error;
/// #   async fn run(&self, _: JobContext) -> Result<(), gaffer::Error> { Ok(()) } }
/// # async fn f() -> gaffer::Result<()> {
/// let client = Client::builder().store(gaffer::Store::url("s3://bucket/app")).open().await?;
/// let handle = client.submit(Email { to: "ada@example.com".into() }).await?;
/// let outcome = handle.join().await?; // waits for the engine to run it
/// # Ok(()) }
/// ```
///
/// A `Client` is a cheap handle: its clones share one reader and one inbox
/// sender, so hand a clone to each task.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    reader: QueueReader,
    sender: InboxSender,
    store: Arc<dyn ObjectStore>,
    queue_name: String,
    poll: Duration,
    /// Seals the requests sent, opens the outcomes read.
    keyring: Keyring,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("queue_path", &self.queue_path)
            .field("queue_name", &self.queue_name)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("queue_name", &self.inner.queue_name)
            .field("poll", &self.inner.poll)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The engine's store, named as the engine's builder names it
    /// ([`EngineBuilder::store`](crate::EngineBuilder::store)). Required. A
    /// local directory must exist: a client never creates a store.
    pub fn store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    /// The engine's queue path. Default `"queue"`.
    pub fn queue_path(mut self, path: impl Into<String>) -> Self {
        self.queue_path = path.into();
        self
    }

    /// The engine's jobs queue prefix (`EngineBuilder::queue_name`).
    /// Default `"jobs"`.
    pub fn queue_name(mut self, name: impl Into<String>) -> Self {
        self.queue_name = name.into();
        self
    }

    /// The inbox's path, when the engine's open options set one. Default:
    /// beside the queue (`{queue_path}-inbox`).
    pub fn inbox_path(mut self, path: impl Into<String>) -> Self {
        self.inbox_path = Some(path.into());
        self
    }

    /// The keys the engine's store is encrypted with (the engine's
    /// [`EngineBuilder::encryption`](crate::EngineBuilder::encryption)):
    /// every request is sealed under the newest, and outcomes are opened
    /// with them. Required when the store is encrypted (`open` refuses
    /// otherwise, `EncryptionKeyMissing`). Give the engine a new key before
    /// its clients: a request sealed under a key the engine does not hold
    /// waits in its intake until it does (docs/guide/encryption.md).
    pub fn encryption(mut self, keyring: Keyring) -> Self {
        self.keyring = keyring;
        self
    }

    /// How often the client reads the store again (the reader's poll, and
    /// the period of [`ClientHandle::join`]'s checks). Default 100 ms.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// Open the store read-only. Fails if no engine ever started on it.
    pub async fn open(self) -> Result<Client> {
        if self.poll.is_zero() {
            return Err(EngineError::InvalidConfig(
                "the client's poll interval must be greater than zero".into(),
            ));
        }
        let store = self
            .store
            .as_ref()
            .ok_or_else(crate::builder::no_store)?
            .open_existing()?;
        let options = ReaderOptions::default()
            .mode(ReaderMode::FollowLatest)
            .manifest_poll_interval(self.poll);
        let reader = QueueReader::open_with_options(store.clone(), &self.queue_path, options)
            .await
            .map_err(EngineError::from)?;
        let layout = match inspect::layout(reader.view())
            .await
            .and_then(|found| found.readable(&self.queue_path))
        {
            Ok(()) => inspect::check_encryption(reader.view(), &self.keyring).await,
            Err(e) => Err(e),
        };
        if let Err(e) = layout {
            let _ = reader.close().await;
            return Err(e);
        }
        let inbox = self
            .inbox_path
            .unwrap_or_else(|| default_inbox_path(&self.queue_path));
        Ok(Client {
            inner: Arc::new(Inner {
                reader,
                sender: InboxSender::new(store.clone(), inbox),
                store,
                queue_name: self.queue_name,
                poll: self.poll,
                keyring: self.keyring,
            }),
        })
    }
}

impl Client {
    /// A builder: name the store with `local_dir`, `store_url` or
    /// `object_store`, then [`open`](ClientBuilder::open).
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            store: None,
            queue_path: "queue".into(),
            queue_name: "jobs".into(),
            inbox_path: None,
            keyring: Keyring::new(),
            poll: Duration::from_millis(100),
        }
    }

    /// Submit a job. Returns once the request is durable in the store (one
    /// object write); the engine takes it at its next look at the inbox.
    /// The job's id is known at once: a fresh ULID, or the hex SHA-256 of
    /// its idempotency key (the same as in-process).
    ///
    /// A request larger than the inbox takes (16 MiB, its payload and
    /// headers encoded) fails with [`Error::RequestTooLarge`] before
    /// anything is written. A payload the engine's version of the job type
    /// does not decode is not refused: the job fails permanently when it
    /// runs ("invalid input for …"), and [`ClientHandle::join`] answers that
    /// failure.
    pub async fn submit<J: Job>(&self, job: J) -> Result<ClientHandle<J>> {
        self.submit_with(job, SubmitOptions::default()).await
    }

    /// [`submit`](Self::submit) with options.
    pub async fn submit_with<J: Job>(
        &self,
        job: J,
        opts: SubmitOptions,
    ) -> Result<ClientHandle<J>> {
        let req = submit_request(&job, opts)?;
        self.send_submit(req, ulid::Ulid::new().to_string()).await
    }

    /// Send the submission `req` as request `request_id` (a ULID; an
    /// unkeyed job's id too: a shard set picks it to route the job).
    pub(crate) async fn send_submit<J: Job>(
        &self,
        mut req: gaffer_actors::SubmitRequest,
        request_id: String,
    ) -> Result<ClientHandle<J>> {
        if let Some(h) = req
            .headers
            .keys()
            .find(|h| h.starts_with(keys::RESERVED_HEADER_PREFIX))
        {
            return Err(EngineError::ReservedHeader(h.clone()));
        }
        crate::job::submit::pin_period_now(&mut req)?;
        req.check_debounce(true)?;
        let debounced = req.debounce.is_some();
        let run_id = crate::job::submit::job_id_of(&req, &request_id);
        req.run_id = Some(run_id.clone());
        if req.traceparent.is_none() {
            req.traceparent = gaffer_actors::telemetry::current_traceparent();
        }
        self.inner
            .send(&request_id, &IntakeOp::Submit(Box::new(req)))
            .await?;
        Ok(ClientHandle {
            id: run_id,
            request_id,
            debounced,
            inner: self.inner.clone(),
            _job: PhantomData,
        })
    }

    /// The state of the job `id` as the store shows it (see the module's
    /// note on lag). `JobNotFound` when the store holds no record of it:
    /// not taken by the engine yet, never submitted, or past retention.
    pub async fn status(&self, id: &str) -> Result<JobState> {
        match self.inner.job_state(id).await? {
            Some(state) => Ok(state),
            None => Err(EngineError::JobNotFound(id.to_string())),
        }
    }

    /// The job's result if it has ended, `None` while it has not (or is not
    /// in the store yet).
    pub async fn outcome<J: Job>(&self, id: &str) -> Result<Option<Result<J::Output, JobError>>> {
        self.inner.outcome::<J>(id).await
    }

    /// Wait for the job `id` to end, reading the store every poll interval.
    /// It waits while the job is unknown too (the engine may not have taken
    /// the request yet): use [`ClientHandle::join`], which also ends on a
    /// refused request, when you have the handle.
    pub async fn join<J: Job>(&self, id: &str) -> Result<Result<J::Output, JobError>> {
        loop {
            match self.inner.outcome::<J>(id).await {
                Ok(Some(result)) => return Ok(result),
                Ok(None) => {}
                Err(e) if !e.is_permanent() => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(self.inner.poll).await;
        }
    }

    /// Check the store's shard marker against `place` (a store no sharded
    /// engine has started on passes).
    pub(crate) async fn check_shard(&self, place: &gaffer_actors::ShardPlace) -> Result<()> {
        inspect::check_shard(self.inner.reader.view(), place).await?;
        Ok(())
    }

    /// Close the client's reader (every clone's: they share it).
    pub async fn close(self) {
        let _ = self.inner.reader.close().await;
    }
}

impl Inner {
    /// The store's objects (large outputs) through the client's keyring.
    fn blobs(&self) -> Arc<dyn ObjectStore> {
        Arc::new(gaffer_actors::layout::sealed::blobs::SealedStore::new(
            self.store.clone(),
            self.keyring.clone(),
        ))
    }

    async fn job_state(&self, run_id: &str) -> Result<Option<JobState>> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        inspect::job_state(self.reader.view(), run_id).await
    }

    async fn outcome<J: Job>(&self, run_id: &str) -> Result<Option<Result<J::Output, JobError>>> {
        if !keys::is_valid_id(run_id) {
            return Err(EngineError::InvalidJobId(run_id.to_string()));
        }
        let Some(rec) = inspect::outcome_record(self.reader.view(), run_id).await? else {
            return Ok(None);
        };
        let rec = rec.opened(&self.keyring)?;
        let store = self.blobs();
        let fetch = async move |output: &OutputRef| -> Result<Vec<u8>> {
            let OutputRef::Blob(path) = output else {
                return Ok(Vec::new());
            };
            let got = store
                .get(&ObjectPath::from(path.as_str()))
                .await
                .map_err(EngineError::from)?;
            Ok(got.bytes().await.map_err(EngineError::from)?.to_vec())
        };
        decode_outcome_with::<J>(&rec, fetch).await.map(Some)
    }

    /// Where request `request_id` for run `run_id` stands. The run's state
    /// answers only once the intake has taken this request: a keyed run
    /// another client created may exist while this request is still to be
    /// refused.
    async fn request_state(&self, request_id: &str, run_id: &str) -> Result<RequestState> {
        let progress = request_progress(self.reader.view(), &self.queue_name, request_id).await?;
        Ok(match progress {
            RequestProgress::Sent => RequestState::Sent,
            RequestProgress::Refused(reason) => RequestState::Refused(reason),
            RequestProgress::Applied(_) => match self.job_state(run_id).await? {
                Some(state) => RequestState::Job(state),
                // Taken, and its job's records since removed (retention).
                None => return Err(EngineError::JobNotFound(run_id.to_string())),
            },
        })
    }

    /// Send `op` as request `request_id` (a ULID), unless its inbox entry
    /// would be over the inbox's limit: then nothing is written.
    async fn send(&self, request_id: &str, op: &IntakeOp) -> Result<()> {
        let mut size = entry_size(request_id, op)?;
        if !self.keyring.is_empty() {
            // The sealed payload's overhead, and a longer length prefix.
            size += gaffer_actors::layout::sealed::MAX_SEAL_OVERHEAD + 4;
        }
        if size > MAX_INBOX_ENTRY_SIZE {
            return Err(Error::RequestTooLarge {
                size,
                max: MAX_INBOX_ENTRY_SIZE,
            });
        }
        send_as(
            &self.sender,
            &self.queue_name,
            request_id,
            op,
            &self.keyring,
        )
        .await?;
        Ok(())
    }
}

/// The size of the inbox object [`send_as`] writes for `op` as request
/// `request_id`: its `EnqueueEntry`, which taquba encodes as MessagePack with
/// named fields and whose object its inbox rejects above
/// `MAX_INBOX_ENTRY_SIZE` (`tests/client.rs` checks that an entry of exactly
/// that size is written and read as an entry).
fn entry_size(request_id: &str, op: &IntakeOp) -> Result<usize> {
    let entry = EnqueueEntry {
        payload: op.encode()?,
        options: EnqueueOptions::default().id_override(request_id.to_string()),
    };
    rmp_serde::to_vec_named(&entry)
        .map(|body| body.len())
        .map_err(|e| Error::encode("the client's inbox entry", e))
}
