//! A batch's data as a whole: its removal (forget), and a succeeded item's
//! output read back from its marker.

use taquba::{KvOrder, SettlementEffects};

use crate::error::{EngineError, Result};
use crate::exec::memo::delete_prefix;
use crate::layout::inspect;
use crate::layout::keys::{self, check_batch_id};
use crate::layout::records::OutputRef;
use crate::services::Services;

/// Remove everything a batch wrote: markers, manifest, head, memo entries and
/// output blobs. Refuses while items are queued or running. The caller holds
/// the batch's in-process lock.
pub(crate) async fn forget_batch_data(services: &Services, batch_id: &str) -> Result<bool> {
    check_batch_id(batch_id)?;
    let queue = services.queue()?;
    let active = inspect::count_prefix(queue.view(), &keys::item_active_prefix(batch_id)).await?;
    if active > 0 {
        return Err(EngineError::BatchActive {
            batch_id: batch_id.to_string(),
            active,
        });
    }
    let existed = queue
        .view()
        .kv_get(&keys::batch_head_key(batch_id))
        .await?
        .is_some();
    // Objects first: if this fails half way the KV records still say the batch
    // exists, and forgetting it again finishes the job.
    delete_prefix(
        services.store(),
        &keys::batch_blob_dir(&services.settings().blob_prefix, batch_id),
    )
    .await?;
    let prefix = keys::batch_prefix(batch_id);
    let head = keys::batch_head_key(batch_id);
    loop {
        let page = queue
            .view()
            .kv_scan(&prefix, .., KvOrder::Ascending, 1000)
            .await?;
        let mut fx = SettlementEffects::default();
        for (k, _) in &page.entries {
            if *k != head {
                fx = fx.kv_delete(k.clone());
            }
        }
        if fx.kv_deletes.is_empty() {
            break;
        }
        queue.commit_effects(fx).await?;
    }
    queue.kv_delete(&head).await?;
    Ok(existed)
}

/// The bytes of a succeeded item's output (taken from its marker): inline
/// bytes as they are, a blob fetched. An error says why they cannot be had.
pub(crate) async fn output_of(
    services: &Services,
    output: Option<OutputRef>,
) -> std::result::Result<Vec<u8>, String> {
    match output {
        Some(OutputRef::Inline(b)) => services
            .keyring()
            .open_vec(b)
            .map_err(|e| format!("the item's output could not be opened: {e}")),
        Some(out @ OutputRef::Blob(_)) => services
            .output_bytes(&out)
            .await
            .map_err(|e| format!("the item's output could not be read: {e}")),
        None => Err("the item's marker holds no output".into()),
    }
}
