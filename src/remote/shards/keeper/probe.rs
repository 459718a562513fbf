//! A keeper's looks at its shard's store: starting the shard's engine and
//! reading the writer epoch it opened at, waiting for the engine's end,
//! and reading the writer's liveness beat through a `QueueReader` (which
//! never fences).

use std::sync::Arc;
use std::time::Duration;

use gaffer_actors::{EngineEvent, EngineMessage};
use ractor::ActorRef;
use taquba::object_store::ObjectStore;
use taquba::{QueueReader, ReaderMode, ReaderOptions};
use tokio::sync::broadcast;
use tracing::warn;

use super::{Beat, KeeperMessage, LAST_EVENT_LIMIT, LOOK_LIMIT, MakeFn, Sight};
use crate::engine::Engine;
use crate::error::Result;

/// A shard's engine just started, and where its store is.
pub(crate) struct Opened {
    pub(crate) engine: Engine,
    /// Taken on the builder: it sees the engine's last event.
    pub(super) events: broadcast::Receiver<EngineEvent>,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) path: String,
    /// The writer epoch the engine opened the store at.
    pub(super) ours: Option<u64>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("path", &self.path)
            .field("ours", &self.ours)
            .finish_non_exhaustive()
    }
}

/// Start shard `shard`'s engine (as `owner`'s, when placement names the
/// owning process) and read the writer epoch it holds.
pub(crate) async fn open(
    make: &MakeFn,
    shard: usize,
    count: usize,
    url: &str,
    owner: Option<&str>,
) -> Result<Opened> {
    let mut builder = make(shard, url).in_shard(shard, count, url);
    if let Some(owner) = owner {
        builder = builder.shard_owner(owner);
    }
    let path = builder.queue_path_of().to_string();
    let events = builder.subscribe();
    let engine = builder.start().await?;
    let store = engine.inner.services().store().clone();
    // Read right after the open: the manifest names this writer (a writer
    // that opened in between would make this process take its epoch for
    // its own, and retake the store from it once, after which the other,
    // seeing this one alive, waits).
    let ours = match tokio::time::timeout(LOOK_LIMIT, writer_epoch(&store, &path)).await {
        Ok(Ok(epoch)) => Some(epoch),
        Ok(Err(e)) => {
            warn!(shard, error = %e, "reading the shard's writer epoch failed; a stop is judged by the store's liveness alone");
            None
        }
        Err(_) => {
            warn!(
                shard,
                "reading the shard's writer epoch timed out; a stop is judged by the store's liveness alone"
            );
            None
        }
    };
    Ok(Opened {
        engine,
        events,
        store,
        path,
        ours,
    })
}

pub(super) fn reader_options(poll: Duration) -> ReaderOptions {
    // Follows the manifest without writing to the store.
    ReaderOptions::default()
        .mode(ReaderMode::FollowLatest)
        .manifest_poll_interval(poll)
}

pub(super) async fn writer_epoch(
    store: &Arc<dyn ObjectStore>,
    path: &str,
) -> std::result::Result<u64, taquba::Error> {
    // The epoch is the manifest's: no WAL to replay (a store just taken
    // over can hold many WAL objects not yet compacted).
    let options = reader_options(LOOK_LIMIT).skip_wal_replay(true);
    let reader = QueueReader::open_with_options(store.clone(), path, options).await?;
    let epoch = reader.last_store_activity().writer_epoch;
    let _ = reader.close().await;
    Ok(epoch)
}

/// How an engine's tree ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// A graceful shutdown.
    ShutDown,
    /// Its store closed under it (fenced by another writer, or closed).
    StoreClosed(String),
    /// It stopped without a last event: killed or crashed.
    Stopped(String),
}

/// Wait for the engine's tree to stop, then read its last event. The wait
/// ends when the engine stops (its supervisor's exit), which every path
/// of the engine comes to; the keeper ignores a report of an engine it no
/// longer holds.
pub(super) async fn watch_end(
    actor: ActorRef<EngineMessage>,
    mut events: broadcast::Receiver<EngineEvent>,
) -> End {
    let _ = actor.wait(None).await;
    let mut end =
        End::Stopped("the engine stopped without a last event (killed or crashed)".into());
    loop {
        match tokio::time::timeout(LAST_EVENT_LIMIT, events.recv()).await {
            Ok(Ok(EngineEvent::ShutDown { .. })) => end = End::ShutDown,
            Ok(Ok(EngineEvent::StoreClosed { reason })) => end = End::StoreClosed(reason),
            Ok(Ok(_) | Err(broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return end,
        }
    }
}

/// Run `work` in a task and tell `me` what it came to, also when it panics.
pub(super) fn spawn_reporting<T: Send + 'static>(
    me: &ActorRef<KeeperMessage>,
    work: impl Future<Output = T> + Send + 'static,
    report: impl FnOnce(std::result::Result<T, String>) -> KeeperMessage + Send + 'static,
) {
    let me = me.clone();
    gaffer_actors::task::spawn_reported(work, move |out| {
        // A keeper that stopped meanwhile needs no answer.
        let _ = me.cast(report(out.map_err(|e| e.to_string())));
    });
}

/// A look's reader and what it saw.
pub(crate) struct Looked {
    pub(super) reader: Option<Arc<QueueReader>>,
    pub(super) sight: std::result::Result<Sight, String>,
}

/// Look at the store through `reader` (opened first if `None`).
pub(super) async fn look(
    reader: Option<Arc<QueueReader>>,
    store: Arc<dyn ObjectStore>,
    path: String,
    poll: Duration,
) -> Looked {
    let reader = match reader {
        Some(r) => r,
        None => {
            let opened = tokio::time::timeout(
                LOOK_LIMIT,
                QueueReader::open_with_options(store, &path, reader_options(poll)),
            )
            .await;
            match opened {
                Ok(Ok(r)) => Arc::new(r),
                Ok(Err(e)) => {
                    return Looked {
                        reader: None,
                        sight: Err(format!("opening a reader: {e}")),
                    };
                }
                Err(_) => {
                    return Looked {
                        reader: None,
                        sight: Err(format!("opening a reader took over {LOOK_LIMIT:?}")),
                    };
                }
            }
        }
    };
    let activity = reader.last_store_activity();
    let sight = match tokio::time::timeout(LOOK_LIMIT, reader.writer_heartbeat()).await {
        Ok(Ok(beat)) => Ok(Sight {
            writer_epoch: activity.writer_epoch,
            beat: beat.map(|b| Beat {
                counter: b.counter,
                writer_epoch: b.writer_epoch,
                interval: b.interval,
                closed: b.closed,
            }),
            durable_seq: activity.durable_seq,
        }),
        Ok(Err(e)) => Err(format!("reading the writer's beat: {e}")),
        Err(_) => Err(format!(
            "reading the writer's beat took over {LOOK_LIMIT:?}"
        )),
    };
    Looked {
        reader: Some(reader),
        sight,
    }
}

pub(super) async fn close_reader(reader: Option<Arc<QueueReader>>) {
    if let Some(r) = reader {
        let _ = tokio::time::timeout(LOOK_LIMIT, r.close()).await;
    }
}
