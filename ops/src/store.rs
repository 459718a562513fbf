//! Opening: the store opened read-only through one `QueueReader`
//! (`FollowLatest`), its inbox sender, and its engine queues by kind.

use std::path::Path;

use gaffer_layout::inspect;
use gaffer_layout::keys;
use gaffer_layout::sealed::{EncryptionRecord, Keyring};
use taquba::{InboxSender, QueueReader, QueueView, ReaderMode, ReaderOptions, default_inbox_path};

use crate::error::OpsError;
use crate::unflushed::Unflushed;

/// How a command reads the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Through a reader that replays the WAL past the writer's last
    /// memtable flush at open: the whole current state, for the commands
    /// that list or look up jobs, batches and records.
    Replay,
    /// The flushed state, and of the WAL past it only the liveness beat,
    /// the job counters and the store's markers, read from the WAL objects
    /// raw (see the private `unflushed` module): `health`, which then reads the WAL
    /// of about one beat interval however long the unflushed WAL (on a
    /// shard, also the WAL objects' listing, and at most a few hundred of
    /// them after the newest writer's start, for its owner record), and
    /// `stats`, which reads every unflushed object but keeps only the
    /// counter rows (about half a replay's cost).
    Flushed,
    /// As [`Replay`](Self::Replay), following the writer every given
    /// interval instead of every 100 ms: the dashboard's reader, which
    /// need not follow faster than its pages refresh (each look replays the
    /// WAL objects written since the last one).
    Following(std::time::Duration),
}

/// What a [`Store`] reads through.
pub(crate) enum Source {
    /// A reader of its own (`Store::open*`).
    Reader(QueueReader),
    /// The writer's view, in the engine's process (`Store::live`).
    Live(QueueView),
}

/// A store opened read-only.
pub struct Store {
    pub(crate) reader: Source,
    /// With [`Reading::Flushed`]: the WAL past the reader's flushed state.
    pub(crate) unflushed: Option<Unflushed>,
    pub(crate) jobs_prefix: String,
    pub(crate) bulk_prefix: String,
    /// Where operator requests go: the store's inbox.
    sender: InboxSender,
    /// Opens the values shown (those it cannot open show as `encrypted`)
    /// and seals the requests sent.
    keyring: Keyring,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("jobs_prefix", &self.jobs_prefix)
            .field("bulk_prefix", &self.bulk_prefix)
            .field("flushed_only", &self.unflushed.is_some())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Open the store at `dir` or `url`, read as `reading` says, and check
    /// it is a gaffer store of the layout this build reads.
    pub async fn open(
        dir: Option<&Path>,
        url: Option<&str>,
        queue_path: &str,
        jobs_prefix: &str,
        bulk_prefix: &str,
        reading: Reading,
    ) -> Result<Self, OpsError> {
        let named = match (dir, url) {
            (Some(dir), _) => gaffer_layout::store::Store::local_dir(dir),
            (None, Some(url)) => gaffer_layout::store::Store::url(url),
            (None, None) => return Err(OpsError::NoStoreGiven),
        };
        Self::open_named(&named, queue_path, jobs_prefix, bulk_prefix, reading).await
    }

    /// [`Self::open`] on a store named as the engine's builder takes it
    /// (`gaffer::Store`: a directory, a URL, an object store of the
    /// application's).
    pub async fn open_named(
        named: &gaffer_layout::store::Store,
        queue_path: &str,
        jobs_prefix: &str,
        bulk_prefix: &str,
        reading: Reading,
    ) -> Result<Self, OpsError> {
        let name = named.name();
        let store = named.open_existing()?;
        let sender = InboxSender::new(store.clone(), default_inbox_path(queue_path));
        let mut options = ReaderOptions::default().mode(ReaderMode::FollowLatest);
        // The WAL past the flushed state starts after the manifest's
        // `replay_after_wal_id`. The manifest is read before the reader
        // opens (on a manifest as new or newer): the WAL objects from there
        // hold every commit past the reader's flushed state, and those
        // already flushed are told apart by their sequence numbers.
        let after = match reading {
            Reading::Replay => {
                options = options.manifest_poll_interval(std::time::Duration::from_millis(100));
                None
            }
            Reading::Following(every) => {
                options = options.manifest_poll_interval(every);
                None
            }
            Reading::Flushed => {
                let admin = slatedb::admin::Admin::builder(queue_path, store.clone()).build();
                let manifest = admin
                    .read_manifest(None)
                    .await
                    .map_err(taquba::Error::from)?;
                // The view stays on the manifest it opened on (its flushed
                // sequence number is the one the WAL rows are told apart by).
                options = options
                    .skip_wal_replay(true)
                    .manifest_poll_interval(std::time::Duration::from_secs(3600));
                manifest.map(|m| m.replay_after_wal_id())
            }
        };
        let reader = match QueueReader::open_with_options(store.clone(), queue_path, options).await
        {
            Ok(r) => r,
            Err(taquba::Error::StoreNotInitialized { .. }) => {
                return Err(OpsError::NotInitialized(name));
            }
            Err(e) => return Err(e.into()),
        };
        let unflushed = match after {
            Some(after) => match Unflushed::find(store, queue_path, after).await {
                Ok(u) => Some(u),
                Err(e) => {
                    let _ = reader.close().await;
                    return Err(e);
                }
            },
            None => None,
        };
        let opened = Self {
            reader: Source::Reader(reader),
            unflushed,
            jobs_prefix: jobs_prefix.to_string(),
            bulk_prefix: bulk_prefix.to_string(),
            sender,
            keyring: Keyring::new(),
        };
        let refused = match opened.store_marker(keys::LAYOUT_KEY).await {
            Ok(found) => inspect::layout_of(found.as_deref())
                .readable(&name)
                .err()
                .map(OpsError::from),
            Err(e) => Some(e),
        };
        if let Some(e) = refused {
            opened.close().await;
            return Err(e);
        }
        Ok(opened)
    }

    /// An engine's store in the engine's own process, read through its
    /// writer's view (`gaffer::Engine::live_store`): no reader is opened,
    /// so no WAL object is read, and every commit shows at once. Checked
    /// as [`Self::open`] checks a store.
    pub async fn live(live: &gaffer_layout::live::LiveStore) -> Result<Self, OpsError> {
        let opened = Self {
            reader: Source::Live(live.view().clone()),
            unflushed: None,
            jobs_prefix: live.jobs_prefix().to_string(),
            bulk_prefix: live.bulk_prefix().to_string(),
            sender: InboxSender::new(
                live.object_store().clone(),
                default_inbox_path(live.queue_path()),
            ),
            keyring: Keyring::new(),
        };
        let found = opened.store_marker(keys::LAYOUT_KEY).await?;
        inspect::layout_of(found.as_deref()).readable(live.name())?;
        Ok(opened)
    }

    /// What the reader last saw of the writer (`None` through the
    /// writer's own view, which has no manifest of its own to read).
    pub(crate) fn activity(&self) -> Option<taquba::StoreActivity> {
        match &self.reader {
            Source::Reader(r) => Some(r.last_store_activity()),
            Source::Live(_) => None,
        }
    }

    /// The value of a gaffer marker (written once, at the store's first
    /// start): from the view, else, read [`Reading::Flushed`], from the WAL
    /// past it.
    async fn store_marker(&self, key: &[u8]) -> Result<Option<Vec<u8>>, OpsError> {
        if let Some(found) = self.view().kv_get(key).await? {
            return Ok(Some(found.to_vec()));
        }
        match &self.unflushed {
            Some(u) => u.marker(key).await,
            None => Ok(None),
        }
    }

    /// Check the store's shard marker: refused if it was written as
    /// another shard or under another count (`--shard-count`).
    pub async fn check_shard(&self, index: usize, count: usize, url: &str) -> Result<(), OpsError> {
        let place = gaffer_layout::ShardPlace {
            index,
            count,
            url: url.to_string(),
            owner: None,
        };
        let found = self.store_marker(keys::SHARD_KEY).await?;
        inspect::shard_of(found.as_deref(), &place)?;
        Ok(())
    }

    /// This store read with `keyring`: values sealed under its keys are
    /// shown, others as `encrypted (key ID)`, and requests are sealed under
    /// its newest key. A key the store names whose key here is another one
    /// is refused (`EncryptionKeyWrong`): a wrong key. A key the keyring
    /// lacks is not: what it sealed shows as encrypted.
    pub async fn with_keyring(mut self, keyring: Keyring) -> Result<Self, OpsError> {
        let found = match self.store_marker(keys::ENCRYPTION_KEY).await {
            Ok(found) => found,
            Err(e) => {
                self.close().await;
                return Err(e);
            }
        };
        if let Some(raw) = found {
            let checked =
                gaffer_layout::records::decode::<EncryptionRecord>(keys::ENCRYPTION_KEY, &raw)
                    .and_then(|record| {
                        let held = EncryptionRecord {
                            keys: record
                                .keys
                                .into_iter()
                                .filter(|k| keyring.holds(&k.id))
                                .collect(),
                        };
                        Ok(held.check(&keyring)?)
                    });
            if let Err(e) = checked {
                self.close().await;
                return Err(e.into());
            }
        }
        self.keyring = keyring;
        Ok(self)
    }

    /// The keyring values are opened with (empty unless given).
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// The key ids the store's values may be sealed under, oldest first
    /// (empty: no engine with a keyring started on it).
    pub async fn encryption_keys(&self) -> Result<Vec<String>, OpsError> {
        match self.store_marker(keys::ENCRYPTION_KEY).await? {
            Some(raw) => Ok(gaffer_layout::records::decode::<EncryptionRecord>(
                keys::ENCRYPTION_KEY,
                &raw,
            )?
            .ids()),
            None => Ok(Vec::new()),
        }
    }

    /// Close the reader (nothing to close when read through the writer's
    /// view).
    pub async fn close(&self) {
        if let Source::Reader(r) = &self.reader {
            let _ = r.close().await;
        }
    }

    /// The inbox sender of operator requests.
    pub fn sender(&self) -> &InboxSender {
        &self.sender
    }

    /// The engine's jobs queue prefix.
    pub fn jobs_prefix(&self) -> &str {
        &self.jobs_prefix
    }

    /// The reader's view of the store (it follows the writer), or the
    /// writer's own.
    pub fn view(&self) -> &QueueView {
        match &self.reader {
            Source::Reader(r) => r.view(),
            Source::Live(v) => v,
        }
    }

    /// The queues of the user's work, `(queue, kind, name)`, in name order:
    /// each job type's and pipeline's (of `only`, when given), never the
    /// engine's own intake queue.
    pub(crate) async fn queues(
        &self,
        only: Option<&str>,
    ) -> Result<Vec<(String, &'static str, String)>, OpsError> {
        let mut all = self.queues_and(only, Vec::new()).await?;
        all.retain(|(_, kind, _)| *kind != "intake");
        Ok(all)
    }

    /// [`Self::queues`], with the queues `more` names beside the view's
    /// (those of counters only the WAL holds yet).
    pub(crate) async fn queues_and(
        &self,
        only: Option<&str>,
        more: Vec<String>,
    ) -> Result<Vec<(String, &'static str, String)>, OpsError> {
        let mut out = Vec::new();
        let wanted = only.map(|t| {
            [
                keys::queue_for(&self.jobs_prefix, t),
                keys::queue_for(&self.bulk_prefix, t),
            ]
        });
        let mut all = self.view().list_queues().await?;
        all.extend(more);
        all.sort();
        all.dedup();
        for q in all {
            // A partition queue (a rate limit per header value) is listed
            // under its type.
            let base = keys::partition_base(&q).unwrap_or(&q).to_string();
            if let Some(w) = &wanted
                && !w.contains(&base)
            {
                continue;
            }
            match self.classify(&q) {
                // Requests from clients in other processes: only in a
                // listing of every queue.
                Some(("intake", _)) if only.is_some() => {}
                Some((kind, name)) => out.push((q, kind, name)),
                None => {}
            }
        }
        out.sort();
        Ok(out)
    }

    /// What a queue of the store is: `(kind, name)`, a job type's (a
    /// partition queue under its type), a pipeline's, or the intake's (the
    /// engine's own: requests from other processes; its dead jobs are
    /// requests an older engine refused, with the reason), the debounce
    /// timers' (the engine's own: one per open burst); `None` for a
    /// queue that is not the engine's.
    pub(crate) fn classify(&self, q: &str) -> Option<(&'static str, String)> {
        let base = keys::partition_base(q).unwrap_or(q);
        if q == gaffer_layout::intake::intake_queue(&self.jobs_prefix) {
            return Some(("intake", "client requests".to_string()));
        }
        if q == keys::debounce_queue(&self.jobs_prefix) {
            return Some(("debounce", "debounce timers".to_string()));
        }
        if let Some(name) = base.strip_prefix(&format!("{}.", self.jobs_prefix)) {
            return Some(("job", name.to_string()));
        }
        q.strip_prefix(&format!("{}.", self.bulk_prefix))
            .map(|name| ("pipeline", name.to_string()))
    }
}
