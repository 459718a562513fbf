//! The builder's place in a shard set: which shard the engine starts as,
//! and the name of the process that owns it (its owner record).

use super::EngineBuilder;

#[cfg(test)]
mod tests;

impl EngineBuilder {
    /// Start as shard `index` of a set of `count` at `url` (see
    /// `ShardedEngine::start`): the start checks the store's shard marker,
    /// and writes it the first time, and writes the shard's owner record
    /// (see [`shard_owner`](Self::shard_owner)) every time.
    pub(crate) fn in_shard(mut self, index: usize, count: usize, url: &str) -> Self {
        let owner = self.shard.take().and_then(|place| place.owner);
        self.shard = Some(gaffer_actors::ShardPlace {
            index,
            count,
            url: url.to_string(),
            owner,
        });
        self
    }

    /// Name the process that owns the shard this engine starts as (a
    /// placement member's id), written in the shard's owner record at the
    /// start (`gaffer health` shows it); without it the engine names itself
    /// `{host}/{pid}`. Nothing for an engine that is not a shard: call it
    /// after [`in_shard`](Self::in_shard).
    pub(crate) fn shard_owner(mut self, owner: impl Into<String>) -> Self {
        if let Some(place) = &mut self.shard {
            place.owner = Some(owner.into());
        }
        self
    }
}
