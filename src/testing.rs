//! Test helpers (feature `testing`): a fault-injecting object store
//! ([`FaultyStore`]), panics injected into the engine's own work
//! ([`panics`]), and the few insides of a running engine a test reaches
//! for: its queue as it is open ([`raw_queue`]), and its actors, to kill
//! one and see it replaced ([`kill`]).

use std::sync::Arc;

pub use gaffer_actors::ChildKind;
pub use gaffer_actors::SharedQueue;
/// The requests other processes leave in the store (what a `Client`
/// sends), for tests that write or read them by hand.
pub use gaffer_actors::engine::intake;
pub use gaffer_actors::jobs::waiters::WaitersMessage;
/// The durable layout (keys, records, the read side), for tests that check
/// what the store holds.
pub use gaffer_actors::layout;
pub use gaffer_actors::testing::*;

use crate::{Engine, Result};

/// The engine's open queue: to put a job on it by hand, promote scheduled
/// jobs on a mock clock, reap expired leases, or read its counts and KV.
/// Anything written here bypasses gaffer's records. Drop it before the
/// engine shuts down (a shutdown waits for the queue's last user).
pub fn raw_queue(engine: &Engine) -> Result<Arc<SharedQueue>> {
    engine.inner.services().raw_queue()
}

/// Kill one of the engine's actors (`EngineMessage::KillChild`), to see
/// that it is restarted and nothing is lost; whether it was found.
pub async fn kill(engine: &Engine, kind: ChildKind) -> Result<bool> {
    ractor::call!(
        engine.actor(),
        gaffer_actors::EngineMessage::KillChild,
        kind
    )
    .map_err(|e| crate::Error::ActorUnavailable {
        actor: "engine",
        reason: e.to_string(),
    })
}

/// The engine's shared services (feature `testing` only): the bytes-level
/// operations a test checks records with (`outcome`, `kv_get`, a raw
/// `submit` of bytes that are not a job's encoding …).
pub fn services(engine: &Engine) -> &Arc<gaffer_actors::Services> {
    engine.inner.services()
}
