//! What the supervisor does before it starts its children: open the queue,
//! check the store's layout version, give each registration its queue, and
//! find queues of types no longer registered.

use std::collections::HashMap;
use std::sync::Arc;

use taquba::object_store::ObjectStore;
use taquba::{OpenOptions, Queue, SettlementEffects};

use crate::erased::{Kind, Registration};
use crate::error::{EngineError, Result};
use crate::layout::keys;
use crate::layout::records::{self, OutcomeRecord};
use crate::services::Route;
use crate::settings::Settings;

/// Where the supervisor gets its queue.
// Built once per engine: the size of the variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum QueueSource {
    /// Open the queue at `path` in `store`.
    Open {
        /// The object store.
        store: Arc<dyn ObjectStore>,
        /// The queue's path in the store.
        path: String,
        /// taquba open options (flush interval, clock, queue configs …).
        options: OpenOptions,
    },
    /// Use this already-open queue (the engine takes ownership and closes it).
    Given {
        /// The queue.
        queue: Box<Queue>,
        /// The object store for memo entries and large outputs.
        store: Arc<dyn ObjectStore>,
    },
}

impl std::fmt::Debug for QueueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open { path, .. } => f
                .debug_struct("Open")
                .field("path", path)
                .finish_non_exhaustive(),
            Self::Given { .. } => f.debug_struct("Given").finish_non_exhaustive(),
        }
    }
}

pub(crate) async fn open(
    source: QueueSource,
    settings: &Settings,
) -> Result<(Queue, Arc<dyn ObjectStore>)> {
    match source {
        QueueSource::Open {
            store,
            path,
            options,
        } => {
            if path.trim_matches('/') == settings.blob_prefix.trim_matches('/') {
                return Err(EngineError::InvalidConfig(format!(
                    "the queue path `{path}` and the blob prefix must differ"
                )));
            }
            let mut options = options;
            if settings.client_intake && options.inbox.is_none() {
                let intake = crate::engine::intake::intake_queue(&settings.queue_name);
                options = options.inbox(
                    taquba::InboxOptions::new([intake]).touch_poll_interval(settings.intake_poll),
                );
            }
            check_layout_before_open(&store, &path, &settings.encryption).await?;
            let queue = Queue::open_with_options(store.clone(), &path, options).await?;
            Ok((queue, store))
        }
        QueueSource::Given { queue, store } => Ok((*queue, store)),
    }
}

/// The layout check a writer's open must not come before: opening the
/// queue as its writer fences whatever writer holds the store, so a store
/// another gaffer release serves (a newer one, say) is refused here, on
/// what its flushed state shows, read through a reader (which never fences
/// and replays no WAL), and its writer goes on. A store whose marker is
/// still only in its WAL (young: its memtable never flushed) shows none
/// here; [`check_layout`] decides after the open, as it does for every
/// store.
async fn check_layout_before_open(
    store: &Arc<dyn ObjectStore>,
    path: &str,
    keyring: &crate::layout::sealed::Keyring,
) -> Result<()> {
    let options = taquba::ReaderOptions::default()
        .mode(taquba::ReaderMode::FollowLatest)
        .skip_wal_replay(true)
        .manifest_poll_interval(std::time::Duration::from_secs(3600));
    let reader = match taquba::QueueReader::open_with_options(store.clone(), path, options).await {
        Ok(reader) => reader,
        // A new store: nothing to check yet.
        Err(taquba::Error::StoreNotInitialized { .. }) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let found = reader.view().kv_get(keys::LAYOUT_KEY).await;
    // A keyring that cannot open the store is refused here too, before the
    // open would fence the engine that can.
    let keys = crate::layout::inspect::check_encryption(reader.view(), keyring).await;
    if let Err(e) = reader.close().await {
        tracing::debug!(error = %e, "closing the layout check's reader failed");
    }
    match found? {
        Some(found) if found.as_ref() != keys::LAYOUT_VERSION.as_bytes() => Err(
            crate::layout::inspect::foreign_layout(String::from_utf8_lossy(&found).into_owned()),
        ),
        _ => keys,
    }
}

/// Check the engine's keyring against the store's encryption record (see
/// [`crate::layout::inspect::check_encryption`]) and, when the keyring's
/// newest key is not listed yet, list it (compare on the record's bytes):
/// from now on values may be sealed under it. An engine without a keyring
/// writes nothing.
pub(crate) async fn check_encryption(
    queue: &Queue,
    keyring: &crate::layout::sealed::Keyring,
) -> Result<()> {
    let found = crate::layout::inspect::encryption_record(queue.view()).await?;
    let (record, raw) = match found {
        Some((record, raw)) => (record, Some(raw)),
        None => (Default::default(), None),
    };
    record.check(keyring)?;
    if let Some(next) = record.with_newest(keyring)? {
        let fx = SettlementEffects::default().kv_put(keys::ENCRYPTION_KEY, records::encode(&next)?);
        let compares: [(&[u8], Option<&[u8]>); 1] = [(keys::ENCRYPTION_KEY, raw.as_deref())];
        if queue.kv_compare_commit(&compares, fx).await?.is_none() {
            return Err(EngineError::Contended {
                operation: "the listing of the keyring's newest key in the store's encryption \
                            record"
                    .into(),
            });
        }
        tracing::info!(key_id = ?keyring.newest_id(), keys = ?next.ids(), "the store's values are sealed under this key from now on");
    }
    Ok(())
}

/// Check the store's shard marker against the engine's place in its set,
/// and write it on the first start as a shard (see [`keys::SHARD_KEY`]);
/// write the shard's owner record ([`keys::SHARD_OWNER_KEY`]) at every
/// start, in the marker's commit when there is one.
pub(crate) async fn check_shard(queue: &Queue, place: &crate::ShardPlace) -> Result<()> {
    let owner = shard_owner(place, queue.clock().now_ms());
    let mut fx =
        SettlementEffects::default().kv_put(keys::SHARD_OWNER_KEY, records::encode(&owner)?);
    if !crate::layout::inspect::check_shard(queue.view(), place).await? {
        let marker = keys::shard_marker(place.index, place.count);
        fx = fx.kv_put(keys::SHARD_KEY, marker.into_bytes());
    }
    queue.commit_effects(fx).await?;
    tracing::info!(shard = place.index, owner = %owner.owner, host = %owner.host, pid = owner.pid, "the shard's owner");
    Ok(())
}

/// This process as the owner of the shard at `place`, from `now_ms`: the
/// name its placement gave it, else `{host}/{pid}`.
fn shard_owner(place: &crate::ShardPlace, now_ms: u64) -> records::ShardOwnerRecord {
    let host = host_name();
    let pid = std::process::id();
    records::ShardOwnerRecord {
        owner: place
            .owner
            .clone()
            .unwrap_or_else(|| format!("{host}/{pid}")),
        host,
        pid,
        since_ms: now_ms,
    }
}

/// This machine's name: `HOSTNAME` (set in a container, a pod), else
/// `/etc/hostname`, else `unknown`.
fn host_name() -> String {
    let named = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok());
    match named.as_deref().map(str::trim) {
        Some(host) if !host.is_empty() => host.to_string(),
        _ => "unknown".to_string(),
    }
}

/// Check the store's layout marker (ARCHITECTURE.md, *Durable layout*): a
/// new store gets this build's; this build's own is read (after the
/// one-time backfill of the finished-jobs index); a later one is refused
/// with [`EngineError::LayoutTooNew`] (upgrade gaffer), any other with
/// [`EngineError::LayoutMismatch`]. A layout change adds its migration
/// from the previous layout here, before anything else reads the store.
pub(crate) async fn check_layout(queue: &Queue) -> Result<()> {
    match queue.view().kv_get(keys::LAYOUT_KEY).await? {
        None => {
            // A new store: its index of finished jobs starts complete.
            let fx = SettlementEffects::default()
                .kv_put(keys::LAYOUT_KEY, keys::LAYOUT_VERSION.as_bytes().to_vec())
                .kv_put(keys::ENDED_INDEX_READY, Vec::new());
            queue.commit_effects(fx).await?;
            Ok(())
        }
        Some(found) if found.as_ref() == keys::LAYOUT_VERSION.as_bytes() => {
            if queue
                .view()
                .kv_get(keys::ENDED_INDEX_READY)
                .await?
                .is_none()
            {
                backfill_ended_index(queue).await?;
            }
            Ok(())
        }
        // A later layout asks for an upgrade of gaffer; no other is read.
        Some(found) => Err(crate::layout::inspect::foreign_layout(
            String::from_utf8_lossy(&found).into_owned(),
        )),
    }
}

/// The queue of every registration (distinct, or `InvalidConfig`).
pub(crate) fn routes(
    settings: &Settings,
    registrations: &HashMap<String, Registration>,
) -> Result<HashMap<String, Route>> {
    let mut routes = HashMap::new();
    let mut taken: HashMap<String, &str> = HashMap::new();
    for (name, reg) in registrations {
        let prefix = match reg.kind {
            Kind::Job => &settings.queue_name,
            Kind::Pipeline => &settings.bulk_queue_name,
        };
        let queue = keys::queue_for(prefix, name);
        if taquba::QueueName::new(queue.as_str()).is_err() {
            return Err(EngineError::InvalidConfig(format!(
                "`{name}` needs a queue named `{queue}`, which taquba refuses; use a shorter \
                 queue prefix or name"
            )));
        }
        let partition = partition_header(name, reg)?;
        if let Some(header) = &partition {
            if header.is_empty() || header.starts_with(keys::RESERVED_HEADER_PREFIX) {
                return Err(EngineError::InvalidConfig(format!(
                    "`{name}` is partitioned (its rate limit, fairness or concurrency) by the \
                     header `{header}`, which a job cannot set; name a header of your own (not \
                     empty, not starting with `{}`)",
                    keys::RESERVED_HEADER_PREFIX
                )));
            }
            if queue.len() + keys::PARTITION_SUFFIX_LEN > taquba::MAX_QUEUE_NAME_LEN {
                return Err(EngineError::InvalidConfig(format!(
                    "`{name}` has a rate limit per header value, whose queues are named \
                     `{queue}..p` and 16 hex digits: too long for taquba; use a shorter \
                     queue prefix or name"
                )));
            }
        }
        if let Some(other) = taken.insert(queue.clone(), name) {
            return Err(EngineError::InvalidConfig(format!(
                "`{name}` and `{other}` map to the same queue `{queue}`; rename one of them"
            )));
        }
        routes.insert(
            name.clone(),
            Route {
                queue,
                kind: reg.kind,
                partition,
            },
        );
    }
    Ok(routes)
}

/// The header a registration's queue is partitioned by: its rate limit's
/// (per header), its fairness's, its limit per key's. Each that is set
/// must name the same header (`InvalidConfig` otherwise); fairness and a
/// limit per key are for job types only.
fn partition_header(name: &str, reg: &Registration) -> Result<Option<String>> {
    let named = [
        (
            "its rate limit",
            reg.rate.as_ref().and_then(|r| r.partition_header()),
        ),
        (
            "its fairness (`fair_by`)",
            reg.fair_by.as_ref().map(|f| f.header_name()),
        ),
        (
            "its concurrency per key (`key_concurrency`)",
            reg.key_concurrency.as_ref().map(|c| c.header_name()),
        ),
    ];
    if matches!(reg.kind, Kind::Pipeline)
        && (reg.fair_by.is_some() || reg.key_concurrency.is_some())
    {
        return Err(EngineError::InvalidConfig(format!(
            "the pipeline `{name}` has fairness or a concurrency per key, which only job types \
             support; remove them from its options"
        )));
    }
    let mut chosen: Option<(&str, &str)> = None;
    for (what, header) in named {
        let Some(header) = header else { continue };
        match chosen {
            Some((first, h)) if h != header => {
                return Err(EngineError::InvalidConfig(format!(
                    "`{name}` is partitioned by the header `{h}` ({first}) and by `{header}` \
                     ({what}); a job type's jobs have one partition per value of one header: \
                     name the same header in each"
                )));
            }
            Some(_) => {}
            None => chosen = Some((what, header)),
        }
    }
    Ok(chosen.map(|(_, h)| h.to_string()))
}

/// Queues under the engine's prefixes that no registration owns and that
/// still hold jobs to run.
pub(crate) async fn stray_queues(
    queue: &Queue,
    settings: &Settings,
    routes: &HashMap<String, Route>,
) -> Result<Vec<String>> {
    let ours: std::collections::HashSet<&str> = routes.values().map(|r| r.queue.as_str()).collect();
    // A partition queue is its type's (a rate limit per header value).
    let ours = |name: &str| ours.contains(keys::partition_base(name).unwrap_or(name));
    let prefixes = [
        format!("{}.", settings.queue_name),
        format!("{}.", settings.bulk_queue_name),
    ];
    let mut strays = Vec::new();
    for name in queue.view().list_queues().await? {
        if !prefixes.iter().any(|p| name.starts_with(p.as_str())) || ours(&name) {
            continue;
        }
        let stats = queue.view().stats(&name).await?;
        if stats.pending + stats.scheduled + stats.claimed > 0 {
            strays.push(name);
        }
    }
    Ok(strays)
}

/// Give every outcome record of a store made before the finished-jobs index
/// existed its index entry, then mark the index complete. Runs once, at the
/// start, before any pool settles; entries are idempotent, so a crash midway
/// only repeats work. (A job retention removes meanwhile leaves no entry
/// behind: this runs before the sweeper starts.)
async fn backfill_ended_index(queue: &Queue) -> Result<()> {
    use futures_util::TryStreamExt;
    let prefix = keys::outcome_key("");
    let mut entries = std::pin::pin!(queue.view().kv_entries(
        &prefix,
        ..,
        taquba::KvOrder::Ascending,
        1000
    ));
    let mut fx = SettlementEffects::default();
    let mut staged = 0usize;
    let mut total = 0usize;
    while let Some((key, raw)) = entries.try_next().await? {
        let Ok(record) = records::decode::<OutcomeRecord>(&key, &raw) else {
            continue;
        };
        let run_id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
        fx = fx.kv_put(record.ended_key(&run_id), Vec::new());
        staged += 1;
        if staged == 1000 {
            queue.commit_effects(std::mem::take(&mut fx)).await?;
            total += staged;
            staged = 0;
        }
    }
    total += staged;
    fx = fx.kv_put(keys::ENDED_INDEX_READY, Vec::new());
    queue.commit_effects(fx).await?;
    tracing::info!(
        outcomes = total,
        "indexed the finished jobs of a store made before the index existed"
    );
    Ok(())
}
