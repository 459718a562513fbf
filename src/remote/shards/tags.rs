//! A tag's jobs over a shard set: each shard's page before the same
//! position, merged newest first (`gaffer_layout::tags::listing::merge`),
//! so a cursor pages the whole set.

use gaffer_actors::layout::tags::listing;

use super::{ShardedClient, ShardedEngine};
use crate::error::Result;
use crate::job::TaggedJobs;

impl ShardedEngine {
    /// The jobs tagged `tag` in the shards this process owns, newest first
    /// (as [`Engine::jobs_by_tag`](crate::Engine::jobs_by_tag); `next`
    /// pages the owned shards together). A shard owned here but down is
    /// `Down`, once the others were read.
    pub async fn jobs_by_tag(
        &self,
        tag: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaggedJobs> {
        let mut pages = Vec::new();
        let mut first_error = None;
        for shard in self.owned() {
            let page = match self.engine(shard) {
                Some(engine) => engine.jobs_by_tag(tag, before, limit).await,
                None => Err(gaffer_actors::ShardError::Down {
                    shard,
                    reason: self
                        .shard_status(shard)
                        .map_or_else(|| "not owned here".into(), |s| s.reason()),
                }
                .into()),
            };
            match page {
                Ok(page) => pages.push(page),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(listing::merge(pages, limit)),
        }
    }
}

impl ShardedClient {
    /// The jobs tagged `tag` in every shard, newest first (as
    /// [`Client::jobs_by_tag`](crate::remote::Client::jobs_by_tag); `next`
    /// pages the whole set).
    pub async fn jobs_by_tag(
        &self,
        tag: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaggedJobs> {
        let mut pages = Vec::with_capacity(self.set().len());
        for client in (0..self.set().len()).filter_map(|shard| self.client(shard)) {
            pages.push(client.jobs_by_tag(tag, before, limit).await?);
        }
        Ok(listing::merge(pages, limit))
    }
}
