//! What a batch's durable records say (no run needed; works after a
//! restart): its total from the head, then a scan of its item markers and its
//! active records.

use futures_util::TryStreamExt;
use taquba::KvOrder;

use crate::batch::{BatchState, count_prefix};
use crate::error::{EngineError, Result};
use crate::keys;
use crate::records::{self, ItemMarker, ItemStatus, merge_cost};
use crate::services::Services;

/// What the durable records of a batch say (works without a run, after a restart).
pub async fn batch_state(services: &Services, batch_id: &str) -> Result<BatchState> {
    let Some(head) = crate::manifest::batch_head(services, batch_id).await? else {
        return Err(EngineError::BatchNotFound(batch_id.to_string()));
    };
    let queue = services.queue()?;
    let mut state = BatchState {
        total: head.total,
        ..Default::default()
    };
    let prefix = keys::item_marker_prefix(batch_id);
    let mut markers = std::pin::pin!(queue.view().kv_entries(
        &prefix,
        ..,
        KvOrder::Ascending,
        1000
    ));
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
    state.active = count_prefix(services, &keys::item_active_prefix(batch_id)).await? as u64;
    Ok(state)
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
    services: &Services,
    batch_id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<MarkerPage> {
    crate::batch::check_batch_id(batch_id)?;
    if crate::manifest::batch_head(services, batch_id)
        .await?
        .is_none()
    {
        return Err(EngineError::BatchNotFound(batch_id.to_string()));
    }
    let limit = limit.clamp(1, MAX_ITEMS_PAGE);
    let prefix = keys::item_marker_prefix(batch_id);
    let start = match after {
        Some(key) => std::ops::Bound::Excluded(keys::item_marker_key(batch_id, key)),
        None => std::ops::Bound::Unbounded,
    };
    let queue = services.queue()?;
    let page = queue
        .view()
        .kv_scan(
            &prefix,
            (start, std::ops::Bound::Unbounded),
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
