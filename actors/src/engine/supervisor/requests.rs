//! The supervisor's answers to the engine's protocol, one method per request.
//! None runs anything slow inside the supervisor's `handle`: each one that
//! reads or writes the store, or waits, runs in a task that answers the
//! caller itself.

use std::collections::HashMap;

use ractor::{ActorRef, DerivedActorRef, RpcReplyPort};

use super::SupervisorState;
use crate::JobState;
use crate::batches::spec::{BatchFinished, BatchOutcome, BatchProgress, BatchSpec};
use crate::engine::notify::JobEnd;
use crate::engine::shutdown::{Closing, shut_down};
use crate::error::{EngineError, Result};
use crate::exec::pool::PoolStats;
use crate::jobs::submit::{CancelResult, SubmitRequest, Submitted};
use crate::jobs::waiters::JobFinished;
use crate::layout::inspect::BatchState;
use crate::maintenance::ticks::PeriodicSpec;
use crate::protocol::{EngineMessage, ShutdownReport};
use crate::services::{Kind, Route};

/// A batch's items as a message carries them.
type Items = Vec<(String, Vec<u8>)>;

/// Run a request's `work` in a task of its own; what it comes to goes to
/// `answer`, and if the task ends without coming to anything (a panic),
/// `answer` gets [`EngineError::Internal`] naming `doing`: a caller is never
/// left waiting on a request whose task died.
fn answered<T: Send + 'static>(
    doing: &'static str,
    scope: &str,
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
    answer: impl FnOnce(Result<T>) + Send + 'static,
) {
    #[cfg(feature = "testing")]
    let work = {
        let scope = scope.to_string();
        async move {
            crate::testing::panics::check(crate::testing::panics::PanicPoint::Request, &scope);
            work.await
        }
    };
    #[cfg(not(feature = "testing"))]
    let _ = scope;
    crate::task::spawn_reported(work, move |ended| {
        answer(ended.unwrap_or_else(|e| {
            tracing::error!(doing, error = %e, "a request's task ended without an answer");
            Err(EngineError::Internal {
                doing,
                reason: e.to_string(),
            })
        }))
    });
}

impl SupervisorState {
    /// Answer `reply` with what `work` comes to (see [`answered`]).
    fn answer<T: Send + 'static>(
        &self,
        doing: &'static str,
        reply: RpcReplyPort<Result<T>>,
        work: impl std::future::Future<Output = Result<T>> + Send + 'static,
    ) {
        answered(
            doing,
            &self.services.settings().queue_name,
            work,
            move |r| {
                let _ = reply.send(r);
            },
        );
    }

    /// Submit a job. Accepted even while shutting down, like a direct
    /// submission: it is durable and runs after the next start.
    pub(super) fn submit(&self, request: SubmitRequest, reply: RpcReplyPort<Result<Submitted>>) {
        let services = self.services.clone();
        self.answer("submitting a job", reply, async move {
            services.submit(request).await
        });
    }

    /// Tell `to` when the job ends. A watch is a wait in a task: it asks the
    /// waiters again if they restart, so it is never lost.
    pub(super) fn watch_job(&self, run_id: String, to: DerivedActorRef<JobFinished>) {
        let engine = self.engine_ref();
        let id = run_id.clone();
        let work = async move { Ok(engine.wait_for(&id, None).await) };
        answered(
            "watching a job",
            &self.services.settings().queue_name,
            work,
            move |r| {
                let result = r.unwrap_or_else(|e| Err(crate::jobs::waiters::WaitError::Read(e)));
                let _ = to.send_message(JobFinished { run_id, result });
            },
        );
    }

    /// The same answer as `EngineRef::status` (durable outcomes only).
    pub(super) fn status(&self, run_id: String, reply: RpcReplyPort<Result<JobState>>) {
        let engine = self.engine_ref();
        self.answer("reading a job's status", reply, async move {
            engine.status(&run_id).await
        });
    }

    /// Cancel a job. A cancel may commit a record: it is announced to the
    /// waiters like a settlement (settling, then ended or aborted).
    pub(super) fn cancel(&self, run_id: String, reply: RpcReplyPort<Result<CancelResult>>) {
        let services = self.services.clone();
        let notify = self.notify();
        self.answer("cancelling a job", reply, async move {
            notify.job(JobEnd::Settling(run_id.clone()));
            let result = services.cancel(&run_id).await;
            match &result {
                Ok((_, Some(record))) => notify.job(JobEnd::Ended {
                    run_id: run_id.clone(),
                    record: Box::new(record.clone()),
                }),
                _ => notify.job(JobEnd::Aborted(run_id.clone())),
            }
            result.map(|(result, _)| result)
        });
    }

    /// Send a signal to a job (see `Services::signal`).
    pub(super) fn signal(
        &self,
        run_id: String,
        name: String,
        payload: Vec<u8>,
        reply: RpcReplyPort<Result<crate::jobs::signals::Signalled>>,
    ) {
        let services = self.services.clone();
        self.answer("sending a signal", reply, async move {
            services.signal(&run_id, &name, payload).await
        });
    }

    /// Start the shutdown sequence (once) in a task; it stops the supervisor
    /// when it is done.
    pub(super) fn shutdown(
        &mut self,
        myself: &ActorRef<EngineMessage>,
        reply: RpcReplyPort<ShutdownReport>,
    ) {
        if self.shutting_down {
            let _ = reply.send(ShutdownReport {
                queue_closed: false,
                abandoned: 0,
                problems: vec!["already shut down".into()],
            });
            return;
        }
        self.shutting_down = true;
        // No batch run starts any more.
        self.registry().close();
        // No debounce timer is claimed any more (the loop lets go of the
        // queue, which the shutdown closes once every holder let go): a
        // burst that comes due meanwhile closes after the next start.
        self.debounce.stop_timers();
        let closing = Closing {
            cell: myself.get_cell(),
            pools: self
                .pools
                .iter()
                .map(|(t, p)| (t.clone(), p.clone()))
                .collect(),
            waiters: self.waiters.clone(),
            queue: self.queue.take(),
            queue_back: self.queue_back.take(),
            grace: self.services.settings().shutdown_grace,
        };
        self.children.clear();
        let events = self.events.take();
        let me = myself.clone();
        let work = async move { Ok(shut_down(closing).await) };
        answered(
            "shutting down",
            &self.services.settings().queue_name,
            work,
            move |r| {
                let report = r.unwrap_or_else(|e| ShutdownReport {
                    queue_closed: false,
                    abandoned: 0,
                    problems: vec![e.to_string()],
                });
                // The last event; dropping the sender then ends every
                // subscriber's stream, before the caller is answered.
                if let Some(events) = events {
                    let _ = events.send(crate::events::EngineEvent::ShutDown {
                        report: report.clone(),
                    });
                }
                let _ = reply.send(report);
                me.stop(Some("shutdown".into()));
            },
        );
    }

    pub(super) fn run_batch(
        &self,
        spec: BatchSpec,
        items: Items,
        reply: RpcReplyPort<Result<BatchOutcome>>,
    ) {
        let engine = self.engine_ref();
        self.answer("running a batch", reply, async move {
            let items = futures_util::stream::iter(items.into_iter().map(Ok));
            engine.run_batch(spec, items).await
        });
    }

    pub(super) fn run_batch_and_tell(
        &self,
        spec: BatchSpec,
        items: Items,
        to: DerivedActorRef<BatchFinished>,
    ) {
        let engine = self.engine_ref();
        let batch_id = spec.batch_id.clone();
        let work = async move {
            let items = futures_util::stream::iter(items.into_iter().map(Ok));
            engine.run_batch(spec, items).await
        };
        answered(
            "running a batch",
            &self.services.settings().queue_name,
            work,
            move |result| {
                let _ = to.send_message(BatchFinished { batch_id, result });
            },
        );
    }

    pub(super) fn resume_batch(&self, spec: BatchSpec, reply: RpcReplyPort<Result<BatchOutcome>>) {
        let engine = self.engine_ref();
        self.answer("resuming a batch", reply, async move {
            engine.resume_batch(spec).await
        });
    }

    pub(super) fn batch_progress(
        &self,
        batch_id: String,
        reply: RpcReplyPort<Option<BatchProgress>>,
    ) {
        let registry = self.registry();
        // A registry that died before it answered knows no run; neither
        // does a task that panicked.
        let work = async move { Ok(registry.progress(&batch_id).await.ok().flatten()) };
        answered(
            "reading a batch's progress",
            &self.services.settings().queue_name,
            work,
            move |r| {
                let _ = reply.send(r.ok().flatten());
            },
        );
    }

    pub(super) fn batch_status(&self, batch_id: String, reply: RpcReplyPort<Result<BatchState>>) {
        let services = self.services.clone();
        self.answer("reading a batch's status", reply, async move {
            crate::batches::status::batch_state(&services, &batch_id).await
        });
    }

    pub(super) fn forget_batch(&self, batch_id: String, reply: RpcReplyPort<Result<bool>>) {
        let services = self.services.clone();
        let registry = self.registry();
        self.answer("forgetting a batch", reply, async move {
            crate::batches::driver::forget(&services, &registry, &batch_id).await
        });
    }

    /// Resume a job type paused by an operator (durably) or after too many
    /// crashes; answers whether it was paused.
    pub(super) fn resume_job_type(&mut self, name: String, reply: RpcReplyPort<Result<bool>>) {
        match self.pools.get(&name).cloned() {
            Some(pool) if self.registrations.contains_key(&name) => {
                let durable = self.paused.remove(&name);
                let services = self.services.clone();
                self.answer("resuming a job type", reply, async move {
                    if durable {
                        services.set_paused(&name, false).await?;
                    }
                    Ok(pool.resume().await? || durable)
                });
            }
            _ => {
                let _ = reply.send(Err(EngineError::UnknownJobType(name)));
            }
        }
    }

    /// Pause a job type durably (an operator's pause, kept across restarts):
    /// its pool claims nothing until it is resumed; nothing is failed.
    /// Answers whether it was running.
    pub(super) fn pause_job_type(&mut self, name: String, reply: RpcReplyPort<Result<bool>>) {
        match self.pools.get(&name).cloned() {
            Some(pool) if self.registrations.contains_key(&name) => {
                self.paused.insert(name.clone());
                let services = self.services.clone();
                self.answer("pausing a job type", reply, async move {
                    services.set_paused(&name, true).await?;
                    pool.pause().await
                });
            }
            _ => {
                let _ = reply.send(Err(EngineError::UnknownJobType(name)));
            }
        }
    }

    /// Pause or resume one value of a job type's partitioning header,
    /// durably (see `keys::paused_value_key`): its pool holds the value's
    /// partition queue while the other values run. Refused for a type
    /// whose jobs are not spread by `header`.
    pub(super) fn pause_value(
        &mut self,
        job_type: String,
        header: String,
        value: String,
        pause: bool,
        reply: RpcReplyPort<Result<bool>>,
    ) {
        let (Some(pool), Some(route)) = (
            self.pools.get(&job_type).cloned(),
            self.services.route(&job_type).cloned(),
        ) else {
            let _ = reply.send(Err(EngineError::UnknownJobType(job_type)));
            return;
        };
        if !self.registrations.contains_key(&job_type)
            || !matches!(route.kind, crate::erased::Kind::Job)
        {
            let _ = reply.send(Err(EngineError::UnknownJobType(job_type)));
            return;
        }
        if route.partition.as_deref() != Some(header.as_str()) {
            let _ = reply.send(Err(EngineError::NotPartitioned {
                job_type,
                header,
                by: route.partition,
            }));
            return;
        }
        if value.is_empty() || value.len() > crate::layout::keys::MAX_PAUSED_VALUE_LEN {
            let _ = reply.send(Err(EngineError::PausedValueTooLong { len: value.len() }));
            return;
        }
        let queue = crate::layout::keys::partition_queue(&route.queue, &value);
        let held = self.paused_values.entry(job_type.clone()).or_default();
        if pause {
            held.insert(queue.clone());
        } else {
            held.remove(&queue);
        }
        let services = self.services.clone();
        self.answer("pausing a value of a job type", reply, async move {
            services
                .set_value_paused(&job_type, &header, &value, pause)
                .await?;
            pool.pause_value(queue, pause).await
        });
    }

    /// Load the values operators paused, for every registered job type
    /// whose jobs are spread by a header (at most
    /// `MAX_PAUSED_VALUES_LOADED` per type).
    pub(super) async fn load_paused_values(&mut self) -> Result<()> {
        for (name, route) in self.services.routes().clone() {
            if route.partition.is_none() || !matches!(route.kind, crate::erased::Kind::Job) {
                continue;
            }
            let values = self
                .services
                .paused_values(&name, MAX_PAUSED_VALUES_LOADED)
                .await?;
            if values.len() == MAX_PAUSED_VALUES_LOADED {
                tracing::warn!(job_type = %name, max = MAX_PAUSED_VALUES_LOADED, "more values are paused than an engine loads; those past the first are not held");
            }
            if !values.is_empty() {
                let queues = values
                    .iter()
                    .map(|v| crate::layout::keys::partition_queue(&route.queue, v))
                    .collect();
                self.paused_values.insert(name, queues);
            }
        }
        Ok(())
    }

    /// Retry a failed or cancelled job (see `Services::retry`).
    pub(super) fn retry(&self, run_id: String, reply: RpcReplyPort<Result<()>>) {
        let services = self.services.clone();
        self.answer("retrying a job", reply, async move {
            services.retry(&run_id).await
        });
    }

    /// Retry the failed jobs of a type (see `Services::retry_failed`).
    pub(super) fn retry_failed(
        &self,
        job_type: String,
        since_ms: u64,
        reply: RpcReplyPort<Result<usize>>,
    ) {
        if !self.registrations.contains_key(&job_type) {
            let _ = reply.send(Err(EngineError::UnknownJobType(job_type)));
            return;
        }
        let services = self.services.clone();
        self.answer("retrying failed jobs", reply, async move {
            services.retry_failed(&job_type, since_ms).await
        });
    }

    /// Schedule a periodic job at run time.
    pub(super) fn add_periodic(&mut self, spec: PeriodicSpec) -> Result<()> {
        check_periodic_spec(&spec, self.services.routes())?;
        if self.periodic.contains_key(&spec.name) {
            return Err(EngineError::DuplicatePeriodic(spec.name));
        }
        self.periodic.insert(spec.name.clone(), spec.clone());
        // A periodic actor restarting now is given the list, this one in it.
        if let Some(actor) = &self.periodic_actor {
            actor.add(spec);
        }
        Ok(())
    }

    /// Stop a periodic job; whether it was scheduled.
    pub(super) fn remove_periodic(&mut self, name: &str) -> bool {
        let found = self.periodic.remove(name).is_some();
        if found && let Some(actor) = &self.periodic_actor {
            actor.remove(name.to_string());
        }
        found
    }

    /// Check the periodic jobs now (the periodic actor answers).
    pub(super) fn check_periodic(&self, reply: RpcReplyPort<Result<usize>>) {
        match &self.periodic_actor {
            Some(actor) => actor.check_now(reply),
            None => {
                let _ = reply.send(Ok(0));
            }
        }
    }

    /// Every pool's counters (a pool that does not answer is left out).
    pub(super) fn pool_stats(&self, reply: RpcReplyPort<HashMap<String, PoolStats>>) {
        let pools: Vec<_> = self
            .pools
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let work = async move {
            let mut stats = HashMap::new();
            for (t, pool) in pools {
                if let Some(s) = pool.stats().await {
                    stats.insert(t, s);
                }
            }
            Ok(stats)
        };
        answered(
            "reading the pools' counters",
            &self.services.settings().queue_name,
            work,
            move |r| {
                let _ = reply.send(r.unwrap_or_default());
            },
        );
    }
}

/// A periodic job can be scheduled: its name and schedule are valid, and its
/// job type is a registered job type (not a pipeline).
pub(super) fn check_periodic_spec(
    spec: &PeriodicSpec,
    routes: &HashMap<String, Route>,
) -> Result<()> {
    spec.check()?;
    match routes.get(&spec.job_type) {
        Some(Route {
            kind: Kind::Job, ..
        }) => Ok(()),
        _ => Err(EngineError::UnknownJobType(spec.job_type.clone())),
    }
}

/// The most paused values an engine loads per job type at its start.
pub(super) const MAX_PAUSED_VALUES_LOADED: usize = 10_000;
