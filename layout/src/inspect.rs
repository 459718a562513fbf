//! The read side of the durable layout, over taquba's read-only
//! [`QueueView`]: the layout marker, run and outcome records, batch heads,
//! batch status and item markers. Nothing here needs the actor tree or a
//! writer: the engine calls it on its queue's live view, and the `gaffer`
//! command on a `QueueReader`'s lagging view of the same store.

use std::ops::Bound;

use futures_util::TryStreamExt;
use taquba::{JobStatus, KvOrder, QueueView};

use crate::error::{EngineError, Result};
use crate::keys::{self, check_batch_id};
use crate::records::{
    self, BatchHead, Cost, ItemMarker, ItemStatus, JobState, OutcomeRecord, RunRecord, merge_cost,
};

/// What the markers of a batch say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchState {
    /// Items in the manifest.
    pub total: u64,
    /// Items whose latest marker is a success.
    pub succeeded: u64,
    /// Items whose latest marker is a failure.
    pub failed: u64,
    /// Items whose latest marker is a cancel.
    pub cancelled: u64,
    /// Items queued or running now.
    pub active: u64,
    /// Cost rollup of the markers.
    pub cost: Cost,
    /// Failed keys, in key order.
    pub failed_keys: Vec<String>,
}

/// What the layout marker of a store says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// No marker: not a gaffer store (or one no engine has started on yet).
    Absent,
    /// The layout this build reads and writes ([`keys::LAYOUT_VERSION`]).
    Current,
    /// Another layout version, as found.
    Other(String),
}

impl Layout {
    /// The one check of a store's layout for a reader of this build (a
    /// client, the `gaffer` command, the dashboard): this build's layout
    /// reads; no marker is [`EngineError::NotAGafferStore`]; another is
    /// refused ([`foreign_layout`]). `store` names the store in the error.
    pub fn readable(self, store: &str) -> Result<()> {
        match self {
            Layout::Current => Ok(()),
            Layout::Absent => Err(EngineError::NotAGafferStore(store.to_string())),
            Layout::Other(found) => Err(foreign_layout(found)),
        }
    }
}

/// The refusal of a store whose layout marker is `found`, not this build's:
/// [`EngineError::LayoutTooNew`] for a later layout (upgrade gaffer),
/// [`EngineError::LayoutMismatch`] for any other. The engine, the client
/// and the command all refuse through it.
pub fn foreign_layout(found: String) -> EngineError {
    let current = keys::layout_number(keys::LAYOUT_VERSION);
    match (keys::layout_number(&found), current) {
        (Some(n), Some(current)) if n > current => EngineError::LayoutTooNew {
            found,
            supported: keys::LAYOUT_VERSION.into(),
        },
        _ => EngineError::LayoutMismatch {
            found,
            expected: keys::LAYOUT_VERSION.into(),
        },
    }
}

/// Read the store's layout marker ([`keys::LAYOUT_KEY`]).
pub async fn layout(view: &QueueView) -> Result<Layout> {
    Ok(layout_of(view.kv_get(keys::LAYOUT_KEY).await?.as_deref()))
}

/// What a layout marker's value (`None`: no marker) says.
pub fn layout_of(found: Option<&[u8]>) -> Layout {
    match found {
        None => Layout::Absent,
        Some(found) if found == keys::LAYOUT_VERSION.as_bytes() => Layout::Current,
        Some(found) => Layout::Other(String::from_utf8_lossy(found).into_owned()),
    }
}

/// Check the store's shard marker ([`keys::SHARD_KEY`]) against `place`:
/// `Ok(true)` if it names that shard of that set, `Ok(false)` if the store
/// has no marker (no sharded engine has started on it), and
/// [`EngineError::ShardMismatch`] if it
/// names another.
pub async fn check_shard(view: &QueueView, place: &crate::ShardPlace) -> Result<bool> {
    shard_of(view.kv_get(keys::SHARD_KEY).await?.as_deref(), place)
}

/// [`check_shard`] on a shard marker's value (`None`: no marker).
pub fn shard_of(found: Option<&[u8]>, place: &crate::ShardPlace) -> Result<bool> {
    let expected = keys::shard_marker(place.index, place.count);
    match found {
        None => Ok(false),
        Some(found) if found == expected.as_bytes() => Ok(true),
        Some(found) => Err(crate::EngineError::ShardMismatch {
            url: place.url.clone(),
            found: String::from_utf8_lossy(found).into_owned(),
            expected,
        }),
    }
}

/// The store's encryption record ([`keys::ENCRYPTION_KEY`]), decoded, and
/// its stored bytes (`None`: no engine with a keyring started on it).
pub async fn encryption_record(
    view: &QueueView,
) -> Result<Option<(crate::sealed::EncryptionRecord, Vec<u8>)>> {
    match view.kv_get(keys::ENCRYPTION_KEY).await? {
        Some(raw) => Ok(Some((
            records::decode(keys::ENCRYPTION_KEY, &raw)?,
            raw.to_vec(),
        ))),
        None => Ok(None),
    }
}

/// The one check of a keyring against a store (the engine's, a client's,
/// the command's): every key the store's values may be sealed under must
/// be held, and be the same key ([`EngineError::EncryptionKeyMissing`],
/// [`EngineError::EncryptionKeyWrong`] name the first that is not). A
/// store with no encryption record passes any keyring.
pub async fn check_encryption(view: &QueueView, keyring: &crate::sealed::Keyring) -> Result<()> {
    if let Some((record, _)) = encryption_record(view).await? {
        record.check(keyring)?;
    }
    Ok(())
}

/// The active-run record of `run_id`, if the run is live.
pub async fn run_record(view: &QueueView, run_id: &str) -> Result<Option<RunRecord>> {
    let key = keys::run_key(run_id);
    match view.kv_get(&key).await? {
        Some(raw) => Ok(Some(records::decode(&key, &raw)?)),
        None => Ok(None),
    }
}

/// The outcome record of `run_id`, if the run has ended (and is retained).
pub async fn outcome_record(view: &QueueView, run_id: &str) -> Result<Option<OutcomeRecord>> {
    let key = keys::outcome_key(run_id);
    match view.kv_get(&key).await? {
        Some(raw) => Ok(Some(records::decode(&key, &raw)?)),
        None => Ok(None),
    }
}

/// Where the job `run_id` is now, as the records say: its run record and
/// its queue job's state while it lives, its outcome record once it ended;
/// `None` when neither exists (never submitted, or past retention).
pub async fn job_state(view: &QueueView, run_id: &str) -> Result<Option<JobState>> {
    if let Some(run) = run_record(view, run_id).await? {
        return Ok(Some(live_state(view, &run).await?));
    }
    // The run may have ended between the two reads: its outcome record
    // was committed with the deletion of its run record.
    Ok(outcome_record(view, run_id)
        .await?
        .map(|r| JobState::of(&r.outcome)))
}

/// Where the live run `run` is: its queue job's state (one read).
pub async fn live_state(view: &QueueView, run: &RunRecord) -> Result<JobState> {
    let record = view.job_record(&run.job_id).await?;
    Ok(live_state_of(record.as_ref()))
}

/// Where a live run is, as its queue job `record` says.
pub fn live_state_of(record: Option<&taquba::JobRecord>) -> JobState {
    match record.map(|r| (r.status, r.signal_wait)) {
        Some((JobStatus::Scheduled, true)) => JobState::Waiting,
        Some((JobStatus::Scheduled, false)) => JobState::Scheduled,
        Some((JobStatus::Pending, _)) | None => JobState::Queued,
        // Done/Dead with the run record still present: the settlement is in
        // progress.
        Some((JobStatus::Claimed | JobStatus::Done | JobStatus::Dead, _)) => JobState::Running,
    }
}

/// The head of a batch, if it exists.
pub async fn batch_head(view: &QueueView, batch_id: &str) -> Result<Option<BatchHead>> {
    check_batch_id(batch_id)?;
    let key = keys::batch_head_key(batch_id);
    match view.kv_get(&key).await? {
        Some(raw) => Ok(Some(records::decode(&key, &raw)?)),
        None => Ok(None),
    }
}

/// Entries under `prefix`, counted (a scan of their keys).
pub async fn count_prefix(view: &QueueView, prefix: &[u8]) -> Result<usize> {
    let mut n = 0;
    let mut entries = std::pin::pin!(view.kv_entries(prefix, .., KvOrder::Ascending, 1000));
    while entries.try_next().await?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// What the durable records of a batch say: its total from the head, then a
/// scan of its item markers and its active records.
pub async fn batch_state(view: &QueueView, batch_id: &str) -> Result<BatchState> {
    let Some(head) = batch_head(view, batch_id).await? else {
        return Err(EngineError::BatchNotFound(batch_id.to_string()));
    };
    let mut state = BatchState {
        total: head.total,
        ..Default::default()
    };
    let prefix = keys::item_marker_prefix(batch_id);
    let mut markers = std::pin::pin!(view.kv_entries(&prefix, .., KvOrder::Ascending, 1000));
    while let Some((key, raw)) = markers.try_next().await? {
        let Ok(marker) = records::decode::<ItemMarker>(&key, &raw) else {
            tracing::warn!(key = %String::from_utf8_lossy(&key), "undecodable item marker skipped");
            continue;
        };
        merge_cost(&mut state.cost, &marker.cost);
        match marker.status {
            ItemStatus::Succeeded => state.succeeded += 1,
            ItemStatus::Cancelled => state.cancelled += 1,
            ItemStatus::Failed => {
                state.failed += 1;
                state
                    .failed_keys
                    .push(String::from_utf8_lossy(&key[prefix.len()..]).into_owned());
            }
        }
    }
    state.active = count_prefix(view, &keys::item_active_prefix(batch_id)).await? as u64;
    Ok(state)
}

/// Batch ids in ascending order, after `after`: up to `limit`, and whether
/// more follow. One scan of one key per batch (it skips each batch's
/// manifest and markers), then nothing else.
pub async fn batch_ids(
    view: &QueueView,
    after: Option<&str>,
    limit: usize,
) -> Result<(Vec<String>, bool)> {
    let root = b"gaffer/v1/batches/".to_vec();
    // Every key of batch `id` starts with `{root}{id}/`; ids are
    // `[A-Za-z0-9_-]`, so `{root}{id}0` sorts after all of them and before
    // the keys of any later batch whose id does not extend `id` with `-`
    // (those sort before `{id}/` and were already seen).
    let past = |id: &str| {
        let mut k = root.clone();
        k.extend_from_slice(id.as_bytes());
        k.push(b'0');
        k
    };
    let mut start = after.map(past);
    let mut ids = Vec::new();
    loop {
        let range = match &start {
            Some(s) => (Bound::Included(s.clone()), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let page = view.kv_scan(&root, range, KvOrder::Ascending, 1).await?;
        let Some((key, _)) = page.entries.into_iter().next() else {
            return Ok((ids, false));
        };
        let rest = &key[root.len()..];
        let id_len = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let id = String::from_utf8_lossy(&rest[..id_len]).into_owned();
        if ids.len() == limit {
            return Ok((ids, true));
        }
        start = Some(past(&id));
        ids.push(id);
    }
}

/// Most item records one page of [`item_markers`] holds.
pub const MAX_ITEMS_PAGE: usize = 1000;

/// A page of a batch's settled items (see [`item_markers`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MarkerPage {
    /// `(item key, marker)` in ascending byte order of the keys.
    pub items: Vec<(String, ItemMarker)>,
    /// The key to pass as `after` for the next page; `None` when this page
    /// reached the end.
    pub next: Option<String>,
}

/// The markers of a batch's settled items, in key order: up to `limit`
/// (1 to [`MAX_ITEMS_PAGE`]) of those whose key sorts after `after` (all,
/// from the first, with `None`). One scan of the marker keys; nothing is
/// written. Items without a marker (not yet settled) are not listed.
pub async fn item_markers(
    view: &QueueView,
    batch_id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<MarkerPage> {
    if batch_head(view, batch_id).await?.is_none() {
        return Err(EngineError::BatchNotFound(batch_id.to_string()));
    }
    let limit = limit.clamp(1, MAX_ITEMS_PAGE);
    let prefix = keys::item_marker_prefix(batch_id);
    let start = match after {
        Some(key) => Bound::Excluded(keys::item_marker_key(batch_id, key)),
        None => Bound::Unbounded,
    };
    let page = view
        .kv_scan(
            &prefix,
            (start, Bound::Unbounded),
            KvOrder::Ascending,
            limit,
        )
        .await?;
    let mut items = Vec::with_capacity(page.entries.len());
    for (key, raw) in page.entries {
        let marker = records::decode::<ItemMarker>(&key, &raw)?;
        items.push((
            String::from_utf8_lossy(&key[prefix.len()..]).into_owned(),
            marker,
        ));
    }
    let next = if page.more {
        items.last().map(|(key, _)| key.clone())
    } else {
        None
    };
    Ok(MarkerPage { items, next })
}

/// Whether the store's finished-jobs index ([`keys::ENDED_ROOT`]) is
/// complete: true for a store created by this build, and for an older store
/// once an engine of this build has started on it (it backfills the index).
pub async fn ended_index_ready(view: &QueueView) -> Result<bool> {
    Ok(view.kv_get(keys::ENDED_INDEX_READY).await?.is_some())
}

/// A state a finished job ends in, as the finished-jobs index files it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndedState {
    /// Ended with an output.
    Succeeded,
    /// Ended with a failure.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl EndedState {
    /// Every ended state.
    pub const ALL: [EndedState; 3] = [Self::Succeeded, Self::Failed, Self::Cancelled];

    fn letter(self) -> char {
        match self {
            Self::Succeeded => keys::ENDED_SUCCEEDED,
            Self::Failed => keys::ENDED_FAILED,
            Self::Cancelled => keys::ENDED_CANCELLED,
        }
    }
}

/// A page of finished jobs (see [`ended_page`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EndedPage {
    /// `(run id, outcome record)`, newest (by end time) first.
    pub jobs: Vec<(String, OutcomeRecord)>,
    /// Pass as `before` for the next page; `None` when this page reached the
    /// end.
    pub next: Option<String>,
}

/// The index segments of the job types that have finished jobs, in byte
/// order: one scan of one key per type.
pub async fn ended_types(view: &QueueView) -> Result<Vec<String>> {
    let root = keys::ENDED_ROOT;
    // Segments are `[A-Za-z0-9._-]`, so `{root}{seg}0` sorts after every key
    // of `seg` (`{root}{seg}/…`) and before any later segment not already seen.
    let past = |seg: &str| {
        let mut k = root.to_vec();
        k.extend_from_slice(seg.as_bytes());
        k.push(b'0');
        k
    };
    let mut start: Option<Vec<u8>> = None;
    let mut out = Vec::new();
    loop {
        let range = match &start {
            Some(s) => (Bound::Included(s.clone()), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let page = view.kv_scan(root, range, KvOrder::Ascending, 1).await?;
        let Some((key, _)) = page.entries.into_iter().next() else {
            return Ok(out);
        };
        let rest = &key[root.len()..];
        let len = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        let seg = String::from_utf8_lossy(&rest[..len]).into_owned();
        start = Some(past(&seg));
        out.push(seg);
    }
}

/// Finished jobs, newest first (by the time they ended), through the
/// finished-jobs index: of the job types `job_types` (all with `None`), in
/// `states` (all when empty), ended before the position `before` (a previous
/// page's [`EndedPage::next`]; from the newest with `None` or an empty one), up to `limit`
/// (1 to 1000). Reads at most `limit` index entries per (type, state) and
/// one outcome record per job listed: never the jobs it skips.
pub async fn ended_page(
    view: &QueueView,
    job_types: Option<&[&str]>,
    states: &[EndedState],
    before: Option<&str>,
    limit: usize,
) -> Result<EndedPage> {
    let limit = limit.clamp(1, 1000);
    let segments = match job_types {
        Some(types) => types.iter().map(|t| keys::type_segment(t)).collect(),
        None => ended_types(view).await?,
    };
    let states = if states.is_empty() {
        &EndedState::ALL[..]
    } else {
        states
    };
    // Each (type, state) is its own run of the index, newest last: read the
    // newest `limit` of each before the position, then merge.
    let mut found: Vec<String> = Vec::new();
    let mut more = false;
    for seg in &segments {
        for state in states {
            let prefix = keys::ended_prefix(seg, state.letter());
            let end = match before {
                // An empty position is the newest's (`before` none): below
                // the prefix itself, the range would be empty, which
                // SlateDB's scan refuses with a panic.
                Some(pos) if !pos.is_empty() => {
                    let mut k = prefix.clone();
                    k.extend_from_slice(pos.as_bytes());
                    Bound::Excluded(k)
                }
                _ => Bound::Unbounded,
            };
            let page = view
                .kv_scan(&prefix, (Bound::Unbounded, end), KvOrder::Descending, limit)
                .await?;
            more |= page.more;
            for (key, _) in page.entries {
                found.push(String::from_utf8_lossy(&key[prefix.len()..]).into_owned());
            }
        }
    }
    found.sort_unstable_by(|a, b| b.cmp(a));
    more |= found.len() > limit;
    found.truncate(limit);
    let mut jobs = Vec::with_capacity(found.len());
    for pos in &found {
        let Some((_, run_id)) = pos.split_once('/') else {
            continue;
        };
        // An entry whose record is gone (removed by retention after this
        // scan) or is of a later run of the id is not listed.
        match outcome_record(view, run_id).await? {
            Some(rec) if keys::ended_position(rec.finished_at_ms, run_id) == *pos => {
                jobs.push((run_id.to_string(), rec));
            }
            _ => {}
        }
    }
    let next = if more { found.last().cloned() } else { None };
    Ok(EndedPage { jobs, next })
}

/// A periodic job as its record says, with when its next tick is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodicStatus {
    /// The record.
    pub record: records::PeriodicRecord,
    /// Its schedule, described (`every 1h`, `cron "0 9 * * *" Europe/Paris`).
    pub schedule: String,
    /// The first tick after the record's cursor (epoch ms): the next one
    /// due, or, if it is past, the one the engine will fire (or drop, by
    /// its policy) at its next check. `None`: the schedule has no tick left,
    /// or this build cannot read it.
    pub next_due_ms: Option<u64>,
}

/// Every periodic job's record (`gaffer/v1/periodic/`), by name, with when
/// each is next due. Reads one page of up to 1000 records at a time.
pub async fn periodic_jobs(view: &QueueView) -> Result<Vec<PeriodicStatus>> {
    let root = keys::PERIODIC_PREFIX;
    let mut out = Vec::new();
    let mut start: Bound<Vec<u8>> = Bound::Unbounded;
    loop {
        let page = view
            .kv_scan(root, (start, Bound::Unbounded), KvOrder::Ascending, 1000)
            .await?;
        for (key, raw) in &page.entries {
            let record: records::PeriodicRecord = records::decode(key, raw)?;
            let schedule = crate::schedule::Schedule::from_spec(&record.schedule, record.missed);
            let next_due_ms = schedule
                .as_ref()
                .ok()
                .and_then(|s| s.next_after(record.cursor_ms));
            out.push(PeriodicStatus {
                schedule: record.schedule.to_string(),
                next_due_ms,
                record,
            });
        }
        match page.entries.last() {
            Some((last, _)) if page.more => start = Bound::Excluded(last.clone()),
            _ => return Ok(out),
        }
    }
}
