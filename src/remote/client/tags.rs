//! A tag's jobs, read through the client's reader.

use gaffer_actors::layout::tags::listing;

use super::Client;
use crate::error::Result;
use crate::job::TaggedJobs;

impl Client {
    /// The jobs submitted with the tag `tag`, in any state, newest first,
    /// as the store shows them (see the module's note on lag): as
    /// [`Engine::jobs_by_tag`](crate::Engine::jobs_by_tag).
    pub async fn jobs_by_tag(
        &self,
        tag: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaggedJobs> {
        Ok(listing::page(self.inner.reader.view(), tag, before, limit)
            .await?
            .into())
    }
}
