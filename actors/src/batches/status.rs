//! What a batch's durable records say (no run needed; works after a
//! restart), for the engine: [`crate::layout::inspect`] over its queue's live view.

use crate::error::Result;
use crate::layout::inspect::BatchState;
pub use crate::layout::inspect::{MAX_ITEMS_PAGE, MarkerPage};
use crate::services::Services;

/// What the durable records of a batch say (works without a run, after a restart).
pub async fn batch_state(services: &Services, batch_id: &str) -> Result<BatchState> {
    let queue = services.queue()?;
    crate::layout::inspect::batch_state(queue.view(), batch_id).await
}

/// The markers of a batch's settled items, in key order, their errors and
/// outputs opened: see [`crate::layout::inspect::item_markers`].
pub async fn item_markers(
    services: &Services,
    batch_id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<MarkerPage> {
    crate::layout::keys::check_batch_id(batch_id)?;
    let queue = services.queue()?;
    let page = crate::layout::inspect::item_markers(queue.view(), batch_id, after, limit).await?;
    let keyring = services.keyring();
    let items = page
        .items
        .into_iter()
        .map(|(key, marker)| Ok((key, marker.opened(keyring)?)))
        .collect::<Result<_>>()?;
    Ok(MarkerPage { items, ..page })
}
