//! A job's tags at its creation: checked, kept on its run record and
//! indexed in the creating transaction (see `gaffer_layout::tags`). Their
//! entries leave with the outcome record, in the retention pass
//! (`maintenance::sweeper`), or when a workflow's retry removes a step's
//! outcome record (its release indexes them again).

use taquba::SettlementEffects;

use crate::error::Result;
use crate::layout::tags::listing::{self, TaggedJobs};
use crate::layout::tags::{self, Tags};
use crate::services::Services;

impl Services {
    /// `fx` plus the index entries of the job `run_id` under each of
    /// `names` (checked: `InvalidTag` for an unacceptable one), and the
    /// [`Tags`] its run record keeps; `fx` alone and `None` for none.
    pub(crate) fn tag_effects(
        &self,
        fx: SettlementEffects,
        names: &[String],
        run_id: &str,
    ) -> Result<(SettlementEffects, Option<Tags>)> {
        if names.is_empty() {
            return Ok((fx, None));
        }
        let tags = Tags {
            names: tags::checked(names)?,
            at_ms: self.clock().now_ms(),
        };
        let mut fx = fx;
        for key in tags.keys(run_id) {
            fx = fx.kv_put(key, Vec::new());
        }
        Ok((fx, Some(tags)))
    }

    /// The jobs tagged `tag`, newest first, from the position `before` (a
    /// previous page's `next`), up to `limit` (1 to 1000): a scan of the
    /// tag's index entries, then each job's records by id.
    pub async fn jobs_by_tag(
        &self,
        tag: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaggedJobs> {
        Ok(listing::page(self.queue()?.view(), tag, before, limit)
            .await?
            .into())
    }
}
