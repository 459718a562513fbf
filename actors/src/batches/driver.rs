//! The driver of a batch run: it claims the batch id (with the supervisor,
//! so no second run of it starts while this one lives, whatever restarts),
//! registers a coordinator with the batches registry, writes (or reopens) the
//! manifest, begins the run and waits for its end, replacing a coordinator
//! that dies (at most 3 times), and hands a sink that takes over the run's
//! records (`AttachBatch`) to the coordinator of the moment; and forgetting a
//! batch under its claim. It runs in the caller's task (or a task of the
//! supervisor's), never inside an actor, and reaches the registry through its
//! address (`RegistryRef`), which follows a restart.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::batches::claims::{Attach, Claim};
use crate::batches::data::forget_batch_data;
use crate::batches::manifest::{reopen_manifest, write_manifest};
use crate::batches::registry::{CoordinatorRef, RegistryRef};
use crate::batches::spec::{BatchOutcome, BatchSpec, RecordSink};
use crate::error::{EngineError, Result};
use crate::layout::keys::check_batch_id;
use crate::services::Services;

/// Run (inputs given) or resume (inputs `None`) a batch to completion: the
/// driver of both the typed API and the `RunBatch` message. `BatchRunning`
/// if a run (or a forget) of the batch is in progress in this process.
pub(crate) async fn drive_batch<I>(
    services: &Services,
    registry: &RegistryRef,
    spec: BatchSpec,
    items: Option<I>,
) -> Result<BatchOutcome>
where
    I: futures_util::Stream<Item = Result<(String, Vec<u8>)>> + Unpin,
{
    check_batch_id(&spec.batch_id)?;
    let (attach, attaches) = mpsc::unbounded_channel();
    // Held until the caller is answered; dropped with this future, it is
    // released as abandoned.
    let claim = Claim::take(registry.claims(), &spec.batch_id, Some(attach)).await?;
    let mut attaches = Attaches {
        rx: attaches,
        sink: spec.sink.clone(),
    };
    let result = drive_claimed(services, registry, spec, items, &mut attaches).await;
    // The sinks still on their way find the run ended.
    drop(attaches);
    claim.end(&result);
    result
}

/// Sinks that take over the run's records, as they arrive, and the run's
/// sink of now (a replacement coordinator starts with it).
struct Attaches {
    rx: mpsc::UnboundedReceiver<Attach>,
    sink: Option<Arc<dyn RecordSink>>,
}

impl Attaches {
    /// Do `work`, meanwhile handing each sink that arrives to `coordinator`
    /// (which answers where the switch fell; one that died drops the answer,
    /// and the sink comes again).
    async fn during<F: Future>(&mut self, coordinator: &CoordinatorRef, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                biased;
                Some(attach) = self.rx.recv() => {
                    self.sink = Some(attach.sink.clone());
                    coordinator.take_sink(attach);
                }
                out = &mut work => return out,
            }
        }
    }

    /// `spec` with the run's sink of now.
    fn spec(&self, spec: &BatchSpec) -> BatchSpec {
        let mut spec = spec.clone();
        spec.sink = self.sink.clone();
        spec
    }
}

async fn drive_claimed<I>(
    services: &Services,
    registry: &RegistryRef,
    spec: BatchSpec,
    items: Option<I>,
    attaches: &mut Attaches,
) -> Result<BatchOutcome>
where
    I: futures_util::Stream<Item = Result<(String, Vec<u8>)>> + Unpin,
{
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
        Some(items) => {
            attaches
                .during(&coordinator, write_manifest(services, &spec, items))
                .await
        }
        None => {
            attaches
                .during(&coordinator, reopen_manifest(services, &spec.batch_id))
                .await
        }
    };
    let mut head = match head {
        Ok(head) => head,
        // Deregister before answering, so the caller can retry at once.
        Err(e) => return Err(run.end(e).await),
    };
    let mut coordinator = coordinator;
    let mut restarts = 0;
    loop {
        match attaches
            .during(&coordinator, coordinator.begin(head.clone()))
            .await
        {
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
                let replacement = attaches.spec(&spec);
                coordinator =
                    match start_coordinator(services, registry, replacement, Some(dead)).await {
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
pub(crate) async fn resume_batch(
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
/// as abandoned (the coordinator stops; the claim, dropped with it, tells the
/// batch's watchers).
struct Run {
    registry: RegistryRef,
    batch_id: String,
    coordinator: Option<CoordinatorRef>,
}

impl Run {
    /// End the run with `error` (its coordinator leaves the registry) and
    /// return the error.
    async fn end(&mut self, error: EngineError) -> EngineError {
        let coordinator = self.coordinator.take().map(|c| c.get_id());
        self.registry.release(&self.batch_id, coordinator).await;
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
                "it kept restarting while the run started; run the batch again",
            ),
        })
    })
}

/// Forget a batch under its claim (no run may start meanwhile):
/// `BatchRunning` if a run (or another forget) of it is in progress.
pub(crate) async fn forget(
    services: &Services,
    registry: &RegistryRef,
    batch_id: &str,
) -> Result<bool> {
    check_batch_id(batch_id)?;
    let _claim = Claim::take(registry.claims(), batch_id, None).await?;
    forget_batch_data(services, batch_id).await
}
