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
