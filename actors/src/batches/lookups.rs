//! The records of a re-run's or resume's items: which are answered by a
//! success marker, which are still queued or running, which must be enqueued.
//! Read concurrently, in groups of neighbouring keys.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt};
use taquba::KvOrder;

use crate::batches::data::output_of;
use crate::error::{EngineError, Result};
use crate::layout::keys;
use crate::layout::records::{self, ItemMarker, ItemStatus, ManifestItem};
use crate::services::Services;

/// An item's output as read for its sink (`None`: no sink, not read).
pub(crate) type ReadOutput = Option<std::result::Result<Vec<u8>, String>>;

/// What the records say about an item of a re-run or resume.
pub(crate) enum Found {
    /// A success marker answers it (with its output, fetched if a blob, when
    /// the run has a sink).
    Answered(ItemMarker, ReadOutput),
    /// Still queued or running from an earlier run: the job id of its delivery.
    Active(String),
    /// Neither: enqueue it.
    Absent,
}

/// Groups of fewer items read their markers one by one, without a scan.
const SCAN_MIN_ITEMS: usize = 32;
/// A scan stops once the entries it passed outnumber twice the group's items
/// among them plus this many: the group's keys are not neighbours in the
/// store, and reading its items one by one is cheaper.
const SCAN_SLACK: usize = 32;
/// Entries per page of a marker scan (bounds what one page holds, and what a
/// scan that stops early read in vain).
const SCAN_PAGE: usize = 64;
/// Items per task (at least; a feed of fewer items is read in one group).
const LOOKUPS_PER_TASK: usize = 64;
/// Tasks reading one feed's items at once.
const LOOKUP_TASKS: usize = 4;
/// Point reads in flight within one task (they overlap only on store I/O).
const LOOKUPS_IN_FLIGHT: usize = 8;

/// Read the records of `items`; the answer is in their order. The items are
/// sorted by key and cut into a few groups of neighbours, each read by its own
/// task (so the reads use every core): a scan of the group's key range finds
/// the success markers, and the items it does not answer are read one by one
/// (`look_up_group`).
pub(crate) async fn look_up_all(
    services: &Arc<Services>,
    batch_id: &str,
    items: Vec<ManifestItem>,
    want_output: bool,
) -> Result<Vec<(ManifestItem, Found)>> {
    let n = items.len();
    let mut sorted: Vec<(usize, ManifestItem)> = items.into_iter().enumerate().collect();
    sorted.sort_unstable_by(|a, b| a.1.key.cmp(&b.1.key));
    let tasks = n.div_ceil(LOOKUPS_PER_TASK).min(LOOKUP_TASKS);
    let mut found = Vec::with_capacity(n);
    if tasks <= 1 {
        found = look_up_group(services.clone(), batch_id.to_string(), sorted, want_output).await?;
    } else {
        let per_task = n.div_ceil(tasks);
        let mut set = tokio::task::JoinSet::new();
        while !sorted.is_empty() {
            let rest = sorted.split_off(per_task.min(sorted.len()));
            let group = std::mem::replace(&mut sorted, rest);
            let (services, batch_id) = (services.clone(), batch_id.to_string());
            set.spawn(look_up_group(services, batch_id, group, want_output));
        }
        // Dropping the set (an error, or the coordinator stopping) aborts the rest.
        while let Some(joined) = set.join_next().await {
            found.extend(joined.map_err(|e| EngineError::Internal {
                doing: "reading the batch's item records",
                reason: e.to_string(),
            })??);
        }
    }
    found.sort_unstable_by_key(|(i, _, _)| *i);
    if found.len() != n {
        return Err(EngineError::Internal {
            doing: "reading the batch's item records",
            reason: format!("{} of {n} items answered", found.len()),
        });
    }
    Ok(found
        .into_iter()
        .map(|(_, item, found)| (item, found))
        .collect())
}

/// The records of a group of items sorted by key (with their positions in the
/// feed). The success markers are found by one scan (`scan_markers`); every
/// item it does not answer is read by `look_up`, a few at a time.
async fn look_up_group(
    services: Arc<Services>,
    batch_id: String,
    items: Vec<(usize, ManifestItem)>,
    want_output: bool,
) -> Result<Vec<(usize, ManifestItem, Found)>> {
    let (services, batch_id) = (&services, batch_id.as_str());
    let mut scanned = if items.len() >= SCAN_MIN_ITEMS {
        scan_markers(services, batch_id, &items).await?
    } else {
        Vec::new()
    };
    scanned.resize_with(items.len(), || None);
    // A scanned success marker answers without a read (unless its output is a
    // blob to fetch); every other item is read.
    futures_util::stream::iter(items.into_iter().zip(scanned))
        .map(|((i, item), scanned)| async move {
            let found = match scanned {
                Some(marker) => answer(services, marker, want_output).await,
                None => look_up(services, batch_id, &item.key, want_output).await?,
            };
            Ok::<_, EngineError>((i, item, found))
        })
        .buffered(LOOKUPS_IN_FLIGHT)
        .try_collect()
        .await
}

/// The success markers of `items` (sorted by key), by position, found by one
/// scan of the marker keys from the first item's key to the last's. The scan
/// stops early when most entries it passes are other items' markers (keys
/// that sort together need not be neighbours in the store: `item-0`..
/// `item-999` span every `item-1…` key), so it passes at most about twice as
/// many entries as the group has items, and an item may be missed; the caller
/// reads every item without a success marker here one by one. A success
/// marker is final whenever the scan saw it (see `look_up`).
async fn scan_markers(
    services: &Services,
    batch_id: &str,
    items: &[(usize, ManifestItem)],
) -> Result<Vec<Option<ItemMarker>>> {
    let mut found: Vec<Option<ItemMarker>> = (0..items.len()).map(|_| None).collect();
    let (Some((_, first)), Some((_, last))) = (items.first(), items.last()) else {
        return Ok(found);
    };
    let index: HashMap<&[u8], usize> = items
        .iter()
        .enumerate()
        .map(|(at, (_, item))| (item.key.as_bytes(), at))
        .collect();
    let prefix = keys::item_marker_prefix(batch_id);
    let range =
        keys::item_marker_key(batch_id, &first.key)..=keys::item_marker_key(batch_id, &last.key);

    let queue = services.queue()?;
    let mut entries = std::pin::pin!(queue.view().kv_entries(
        &prefix,
        range,
        KvOrder::Ascending,
        SCAN_PAGE
    ));
    let (mut passed, mut ours) = (0, 0);
    while let Some((key, raw)) = entries.try_next().await? {
        passed += 1;
        if let Some(&at) = index.get(&key[prefix.len()..]) {
            ours += 1;
            found[at] = succeeded(&key, Some(&raw));
        }
        if passed > 2 * ours + SCAN_SLACK {
            break;
        }
    }
    Ok(found)
}

/// The records of one item. The marker is read first: a success marker is
/// final (an item with one is never enqueued again, and its terminal
/// transaction deleted its active record), so a finished item costs one read.
/// Otherwise the active record: present, the item's job is still queued or
/// running. Absent, no job of the item is live, but one may have ended between
/// the two reads (its marker is written in the transaction that deletes its
/// active record), so the marker is read again: only a success there answers;
/// anything else is enqueued.
async fn look_up(
    services: &Services,
    batch_id: &str,
    key: &str,
    want_output: bool,
) -> Result<Found> {
    let queue = services.queue()?;
    let marker_key = keys::item_marker_key(batch_id, key);
    if let Some(marker) = succeeded(
        &marker_key,
        queue.view().kv_get(&marker_key).await?.as_deref(),
    ) {
        return Ok(answer(services, marker, want_output).await);
    }
    let active_key = keys::item_active_key(batch_id, key);
    if let Some(job_id) = queue.view().kv_get(&active_key).await? {
        return Ok(Found::Active(String::from_utf8_lossy(&job_id).into_owned()));
    }
    match succeeded(
        &marker_key,
        queue.view().kv_get(&marker_key).await?.as_deref(),
    ) {
        Some(marker) => Ok(answer(services, marker, want_output).await),
        None => Ok(Found::Absent),
    }
}

/// A marker that answers its item: decodable and a success.
fn succeeded(key: &[u8], raw: Option<&[u8]>) -> Option<ItemMarker> {
    let marker = records::decode::<ItemMarker>(key, raw?).ok()?;
    (marker.status == ItemStatus::Succeeded).then_some(marker)
}

/// An item answered by its success marker, with its output's bytes when the
/// run has a sink.
async fn answer(services: &Services, mut marker: ItemMarker, want_output: bool) -> Found {
    let output = if want_output {
        Some(output_of(services, marker.output.take()).await)
    } else {
        None
    };
    Found::Answered(marker, output)
}
