//! The driver of a batch run: it registers a coordinator with the batches
//! registry, writes (or reopens) the manifest, begins the run and waits for
//! its end, replacing a coordinator that dies (at most 3 times); and
//! forgetting a batch under the registry's lock. It runs in the caller's task
//! (or a task of the supervisor's), never inside an actor, and reaches the
//! registry through its address (`RegistryRef`), which follows a restart.

use crate::batch::{BatchOutcome, BatchSpec, check_batch_id, forget_batch_data};
use crate::error::{EngineError, Result};
use crate::manifest::{reopen_manifest, write_manifest};
use crate::registry::{CoordinatorRef, RegistryRef};
use crate::services::Services;

/// Run (inputs given) or resume (inputs `None`) a batch to completion: the
/// driver of both the typed API and the `RunBatch` message.
pub async fn drive_batch<I>(
    services: &Services,
    registry: &RegistryRef,
    spec: BatchSpec,
    items: Option<I>,
) -> Result<BatchOutcome>
where
    I: futures_util::Stream<Item = Result<(String, Vec<u8>)>> + Unpin,
{
    check_batch_id(&spec.batch_id)?;
    let mut spec = spec;
    if spec.parent.is_none() {
        spec.parent = tracing::Span::current();
    }
    let coordinator = start_coordinator(services, registry, spec.clone(), None).await?;
    // Dropping this future (or an error below) ends the run: the coordinator
    // stops; queued items keep running and `resume` completes them.
    let mut run = Run {
        registry: registry.clone(),
        batch_id: spec.batch_id.clone(),
        coordinator: Some(coordinator.clone()),
    };
    let head = match items {
        Some(items) => write_manifest(services, &spec, items).await,
        None => reopen_manifest(services, &spec.batch_id).await,
    };
    let mut head = match head {
        Ok(head) => head,
        // Deregister before answering, so the caller can retry at once.
        Err(e) => return Err(run.end(e).await),
    };
    let mut coordinator = coordinator;
    let mut restarts = 0;
    loop {
        match coordinator.begin(head.clone()).await {
            Ok(outcome) => {
                // The coordinator answered, so it finished (or failed) on its
                // own and left the registry.
                run.coordinator = None;
                return outcome;
            }
            Err(e) if restarts < MAX_COORDINATOR_RESTARTS => {
                // The coordinator died (it failed, or its registry restarted):
                // a new one rebuilds the counts from the markers, as a resume
                // does. The sink may see some items twice (consumers dedupe on
                // key, as for every re-run).
                restarts += 1;
                tracing::warn!(batch_id = %spec.batch_id, error = %e, restarts, "batch coordinator died; resuming the run with a new one");
                let dead = coordinator.get_id();
                coordinator =
                    match start_coordinator(services, registry, spec.clone(), Some(dead)).await {
                        Ok(c) => c,
                        Err(e) => {
                            run.coordinator = None;
                            return Err(run.end(e).await);
                        }
                    };
                run.coordinator = Some(coordinator.clone());
                head = match reopen_manifest(services, &spec.batch_id).await {
                    Ok(h) => h,
                    Err(e) => return Err(run.end(e).await),
                };
            }
            Err(e) => {
                let e = EngineError::unavailable("batch coordinator", e);
                return Err(run.end(e).await);
            }
        }
    }
}

/// Resume a batch from its manifest to completion.
pub async fn resume_batch(
    services: &Services,
    registry: &RegistryRef,
    spec: BatchSpec,
) -> Result<BatchOutcome> {
    drive_batch(
        services,
        registry,
        spec,
        None::<futures_util::stream::Empty<_>>,
    )
    .await
}

/// Times a run replaces a coordinator that died under it.
const MAX_COORDINATOR_RESTARTS: usize = 3;

/// A run in progress: while its coordinator is set, dropping it ends the run
/// as abandoned (the coordinator stops, the batch's watchers are told).
struct Run {
    registry: RegistryRef,
    batch_id: String,
    coordinator: Option<CoordinatorRef>,
}

impl Run {
    /// End the run with `error` (its coordinator leaves the registry and the
    /// batch's watchers are told) and return the error.
    async fn end(&mut self, error: EngineError) -> EngineError {
        let coordinator = self.coordinator.take().map(|c| c.get_id());
        self.registry
            .release(&self.batch_id, coordinator, Err(error.clone()))
            .await;
        error
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(c) = self.coordinator.take() {
            self.registry.abandon(&self.batch_id, c.get_id());
        }
    }
}

/// Start a coordinator for a run of `spec` (a registered pipeline's);
/// `replacing` names a coordinator of this run that died (the new one starts
/// once the registry saw it go).
async fn start_coordinator(
    services: &Services,
    registry: &RegistryRef,
    spec: BatchSpec,
    replacing: Option<ractor::ActorId>,
) -> Result<CoordinatorRef> {
    services.pipeline_queue(&spec.pipeline)?;
    registry.start(spec, replacing).await.unwrap_or_else(|| {
        Err(match services.queue() {
            Err(shut_down) => shut_down,
            Ok(_) => EngineError::unavailable(
                "batches registry",
                "it restarted while the run started; run the batch again",
            ),
        })
    })
}

/// Forget a batch under its in-process lock (no run may start meanwhile).
pub async fn forget(services: &Services, registry: &RegistryRef, batch_id: &str) -> Result<bool> {
    check_batch_id(batch_id)?;
    if !registry.lock(batch_id).await? {
        return Err(EngineError::BatchRunning(batch_id.to_string()));
    }
    let result = forget_batch_data(services, batch_id).await;
    registry.unlock(batch_id);
    result
}
