//! `EngineBuilder`: where the store is, which job types and pipelines run,
//! the settings (every one with its own method), and the start of the actor
//! tree.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use taquba::object_store::ObjectStore;
use taquba::{Clock, OpenOptions, Queue};

use gaffer_actors::layout::store::Store;

use gaffer_actors::erased::JobEngine;
use gaffer_actors::exec::rate::RateLimit;

use gaffer_actors::{
    EngineConfig, EngineError, EngineEvent, EngineRef, ErasedHandler, Kind, QueueSource,
    Registration, Settings,
};

use crate::adapters::{TypedHandler, TypedPipeline};
use crate::error::Result;
use crate::job::Job;
use crate::pipeline::Pipeline;
use crate::state::StateMap;

use crate::engine::Engine;

/// The writer's liveness beat when the open options set none (one small
/// commit per interval). A shard's keeper judges a writer without a beat
/// record of its own by this interval (`shards::keeper`).
pub(crate) const LIVENESS_HEARTBEAT: Duration = Duration::from_secs(5);

/// The WAL flush interval on a local directory (`local_dir`, `file://`) when
/// none is set: a flush there is a small file write, and every durable
/// commit (a submission, a job's end) waits for the next one. Chosen from
/// `cargo bench --bench submit_latency` and `store_requests`
/// (benches/README.md, *Defaults that fit the store*): about 3 ms per
/// `submit().await` and the throughput of a 1 ms flush, for half its file
/// writes.
const LOCAL_FLUSH_INTERVAL: Duration = Duration::from_millis(2);

/// The WAL flush interval on an in-memory store (`in_memory`, `memory://`)
/// when none is set: a flush is a copy into memory.
const MEMORY_FLUSH_INTERVAL: Duration = Duration::from_millis(1);

/// The WAL flush interval on an object store (`s3://`, `gs://`, `az://`, any
/// other URL, or a store given with `object_store(..)`) when none is set:
/// each flush that carries commits is one billed PUT, so a busy engine makes
/// about 20 PUTs a second (measured), and an idle one none but its liveness
/// beat's.
const OBJECT_STORE_FLUSH_INTERVAL: Duration = Duration::from_millis(100);

impl Engine {
    /// Start configuring an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }
}

/// One individual setter's change to the settings.
type Override = Box<dyn Fn(&mut Settings) + Send + Sync>;

type MakeHandler = Box<dyn FnOnce(Arc<StateMap>) -> Arc<dyn ErasedHandler> + Send>;

struct PendingRegistration {
    name: String,
    make: MakeHandler,
    concurrency: Option<usize>,
    kind: Kind,
    rate: Option<RateLimit>,
}

/// The flush interval that fits `store`, when neither the builder nor the
/// open options set one: short on a local disk or in memory, where a flush
/// costs little; taquba's 100 ms on an object store, where each flush is a
/// request, and on a store given as an `ObjectStore` (the engine cannot
/// tell a local one from a remote one, and a flush too short for a remote
/// store costs money, one too long for a local store only latency).
fn default_flush_interval(store: &Store) -> Duration {
    match store {
        Store::LocalDir(_) => LOCAL_FLUSH_INTERVAL,
        Store::InMemory => MEMORY_FLUSH_INTERVAL,
        Store::Url(url, _) => {
            let scheme = url
                .split_once("://")
                .map(|(scheme, _)| scheme.to_ascii_lowercase());
            match scheme.as_deref() {
                Some("file") => LOCAL_FLUSH_INTERVAL,
                Some("memory") => MEMORY_FLUSH_INTERVAL,
                _ => OBJECT_STORE_FLUSH_INTERVAL,
            }
        }
        Store::Given(_) => OBJECT_STORE_FLUSH_INTERVAL,
    }
}

/// What a builder says without a store.
pub(crate) fn no_store() -> crate::Error {
    EngineError::InvalidConfig(
        "no store: name one with .store(Store::local_dir(..)), Store::url(..), \
         Store::in_memory() or Store::object_store(..)"
            .into(),
    )
    .into()
}

/// Configures and starts an [`Engine`]. Defaults follow the reference: queue
/// `"jobs"`, 16 concurrent jobs, 100 ms poll interval, no retention.
///
/// Every engine setting has its own method; [`settings`](Self::settings)
/// sets them all at once as a base, and the individual methods override it
/// field by field whatever the order of the calls.
pub struct EngineBuilder {
    store: Option<Store>,
    queue_path: String,
    queue: Option<Queue>,
    options: Option<OpenOptions>,
    flush_interval: Option<Duration>,
    clock: Option<Arc<dyn Clock>>,
    /// The base settings (`settings(..)`).
    settings: Settings,
    /// The individual setters, applied on top of the base at start.
    overrides: Vec<Override>,
    registrations: Vec<PendingRegistration>,
    periodic: Vec<gaffer_actors::PeriodicSpec>,
    state: StateMap,
    events: gaffer_actors::events::EventSender,
    /// The engine's place in a shard set (`ShardedEngine` sets it).
    shard: Option<gaffer_actors::ShardPlace>,
}

impl std::fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("queue_path", &self.queue_path)
            .field("settings", &self.effective_settings())
            .field(
                "registered",
                &self
                    .registrations
                    .iter()
                    .map(|r| &r.name)
                    .collect::<Vec<_>>(),
            )
            .field(
                "periodic",
                &self.periodic.iter().map(|p| &p.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Default for EngineBuilder {
    fn default() -> Self {
        Self {
            store: None,
            queue_path: "queue".into(),
            queue: None,
            options: None,
            flush_interval: None,
            clock: None,
            settings: Settings::default(),
            overrides: Vec::new(),
            registrations: Vec::new(),
            periodic: Vec::new(),
            state: StateMap::new(),
            events: gaffer_actors::events::channel(),
            shard: None,
        }
    }
}

impl EngineBuilder {
    /// Where the engine keeps everything: [`Store::local_dir`] (the
    /// embedded default, created if missing), [`Store::url`] (S3, GCS,
    /// Azure, `file://`, `memory://`), [`Store::object_store`] or
    /// [`Store::in_memory`]. Required.
    ///
    /// ```no_run
    /// # async fn f() -> gaffer::Result<()> {
    /// use gaffer::{Engine, Store};
    /// let engine = Engine::builder().store(Store::local_dir("gaffer-data")).start().await?;
    /// # Ok(()) }
    /// ```
    pub fn store(mut self, store: Store) -> Self {
        self.store = Some(store);
        self
    }

    /// The queue's path inside the store. Default `"queue"`.
    pub fn queue_path(mut self, path: impl Into<String>) -> Self {
        self.queue_path = path.into();
        self
    }

    /// Use an already-open queue; the engine takes it over and closes it at
    /// shutdown. `store` holds memo entries and large outputs.
    pub fn queue(mut self, queue: Queue, store: Arc<dyn ObjectStore>) -> Self {
        self.queue = Some(queue);
        self.store = Some(Store::Given(store));
        self
    }

    /// taquba open options (queue configs, reaper and scheduler intervals …).
    /// Without a `liveness_heartbeat` of their own, the engine beats every
    /// 5 s, so that `gaffer health` can tell a live engine from a stale one
    /// (not on an [`in_memory`](Self::in_memory) store, which no other
    /// process can read).
    pub fn open_options(mut self, options: OpenOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// taquba's WAL flush interval: every durable commit (a submission, a
    /// job's outcome) waits for the next flush, so it bounds their latency
    /// from below; on an object store each flush that carries commits is one
    /// PUT. Overrides the open options' own. Default: by the store, 2 ms on
    /// a local directory (`local_dir`, `file://`), 1 ms in memory
    /// (`in_memory`, `memory://`), 100 ms (taquba's own default) on any other
    /// URL and on a store given to [`object_store`](Self::object_store)
    /// (README, *Defaults*).
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.flush_interval = Some(interval);
        self
    }

    /// The clock of leases, schedules, records and retention (taquba's
    /// `MockClock` in tests). Default: the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Lifecycle events of the engine this builder starts, from its very
    /// start (a subscription taken after `start` can miss the first events:
    /// jobs left queued in the store may already run). The stream ends as
    /// [`Engine::subscribe`]'s does: after the engine's last event
    /// ([`EngineEvent::ShutDown`] or [`EngineEvent::StoreClosed`]), or at
    /// once if the builder is dropped or fails to start.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<EngineEvent> {
        self.events.subscribe()
    }

    /// Register a job type.
    pub fn register<J: Job>(self) -> Self {
        self.register_inner::<J>(None)
    }

    /// Register a job type with its own worker count (default:
    /// `max_concurrent_jobs`): its capacity, over its own queue.
    pub fn register_with_concurrency<J: Job>(self, workers: usize) -> Self {
        self.register_inner::<J>(Some(workers))
    }

    /// Register a job type whose attempts start at most at `rate` (for
    /// example `RateLimit::per_second(2)?`: 2 a second, bursts of 2;
    /// `.burst(1)` spaces them 500 ms apart). The limit applies when jobs
    /// are claimed; a run starts within milliseconds of its claim.
    /// For an API with a quota, a mail relay, a slow partner. Its pool
    /// claims no more jobs than it may start, so its backlog waits in the
    /// queue (scheduled jobs and retries included), holding no lease and no
    /// worker, and other types run at full speed meanwhile. The limit is
    /// per engine (two engines on one store would each allow it) and
    /// starts empty at each engine start (the first job waits one
    /// interval, `period / starts`), so restarts never add a burst. With
    /// [`RateLimit::per_header`] it holds for each value of a job header
    /// apart (per tenant), each value's jobs waiting in a queue of their
    /// own.
    pub fn register_with_rate<J: Job>(mut self, rate: RateLimit) -> Self {
        self = self.register_inner::<J>(None);
        if let Some(r) = self.registrations.last_mut() {
            r.rate = Some(rate);
        }
        self
    }

    fn register_inner<J: Job>(mut self, concurrency: Option<usize>) -> Self {
        self.registrations.push(PendingRegistration {
            name: J::NAME.to_string(),
            make: Box::new(|state| {
                Arc::new(TypedHandler::<J> {
                    state,
                    _job: PhantomData,
                }) as Arc<dyn ErasedHandler>
            }),
            concurrency,
            kind: Kind::Job,
            rate: None,
        });
        self
    }

    /// Register a bulk pipeline (its items run with 200 workers).
    pub fn pipeline<P: Pipeline>(self, pipeline: P) -> Self {
        self.pipeline_with_concurrency(
            pipeline,
            gaffer_actors::erased::DEFAULT_PIPELINE_CONCURRENCY,
        )
    }

    /// Register a bulk pipeline with `workers` concurrent items (the
    /// reference's `max_concurrent`).
    pub fn pipeline_with_concurrency<P: Pipeline>(mut self, pipeline: P, workers: usize) -> Self {
        let pipeline = Arc::new(pipeline);
        self.registrations.push(PendingRegistration {
            name: P::NAME.to_string(),
            make: Box::new(move |_state| {
                Arc::new(TypedPipeline::<P> {
                    pipeline,
                    _p: PhantomData,
                }) as Arc<dyn ErasedHandler>
            }),
            concurrency: Some(workers),
            kind: Kind::Pipeline,
            rate: None,
        });
        self
    }

    /// Submit a job of type `J` (registered on this builder) on `schedule`:
    /// one run per tick, across restarts and crashes. `make_job` makes the
    /// tick's job (it should make the same job for the same tick); `name`
    /// (1-128 characters of `[A-Za-z0-9_.-]`) names the periodic job in the
    /// store, where its record keeps the last tick it fired, and in each
    /// tick's job id ([`Tick::job_id`](crate::Tick::job_id)).
    ///
    /// Each tick's job is enqueued in one transaction with the record's
    /// new state, under an idempotency key made of `name` and the tick's
    /// time, so a tick fired twice (a restart, a stale engine) is one job.
    /// Ticks missed while no engine ran follow the schedule's
    /// [`Missed`](crate::Missed) policy. An invalid schedule, a duplicate
    /// name or an unregistered job type fail [`start`](Self::start).
    ///
    /// ```no_run
    /// # use gaffer::{Engine, Job, JobContext, Schedule};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Report { at_ms: u64 }
    /// # impl Job for Report {
    /// #     const NAME: &'static str = "report";
    /// #     type Output = ();
    /// #     type Error = std::convert::Infallible;
    /// #     async fn run(&self, _ctx: JobContext) -> Result<(), Self::Error> { Ok(()) }
    /// # }
    /// # async fn demo() -> gaffer::Result<()> {
    /// let engine = Engine::builder()
    ///     .local_dir("gaffer-data")
    ///     .register::<Report>()
    ///     .periodic("hourly-report", Schedule::cron("0 * * * *")?, |tick| Report {
    ///         at_ms: tick.at_ms,
    ///     })
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn periodic<J: Job>(
        mut self,
        name: impl Into<String>,
        schedule: gaffer_actors::Schedule,
        make_job: impl Fn(&gaffer_actors::Tick) -> J + Send + Sync + 'static,
    ) -> Self {
        self.periodic
            .push(crate::periodic::periodic_spec(name, schedule, make_job));
        self
    }

    /// Application state reachable from jobs by type (`ctx.state::<T>()`). A
    /// later value of the same type replaces the earlier one.
    pub fn state<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.state.insert(TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// All engine settings at once: the base the individual setters apply on
    /// top of. The setters (`retention`, `max_concurrent_jobs`, …) are
    /// overrides kept apart from the base, so they compose in any order:
    /// `.retention(r).settings(s)` and `.settings(s).retention(r)` both run
    /// with `s` and retention `r`. A second `settings` call replaces the base
    /// (not the overrides). Default: [`Settings::default()`].
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The settings the engine would start with: the base
    /// ([`settings`](Self::settings)) with every individual setter applied
    /// on top, in the order they were called. Validated at
    /// [`start`](Self::start).
    pub fn effective_settings(&self) -> Settings {
        let mut settings = self.settings.clone();
        for set in &self.overrides {
            set(&mut settings);
        }
        settings
    }

    /// Start as shard `index` of a set of `count` at `url` (see
    /// `ShardedEngine::start`): the start checks the store's shard marker,
    /// and writes it the first time.
    pub(crate) fn in_shard(mut self, index: usize, count: usize, url: &str) -> Self {
        self.shard = Some(gaffer_actors::ShardPlace {
            index,
            count,
            url: url.to_string(),
        });
        self
    }

    /// The queue's path inside the store (a shard's keeper reads the store
    /// there while the shard is down).
    pub(crate) fn queue_path_of(&self) -> &str {
        &self.queue_path
    }

    /// Record an override of one setting (applied on top of the base).
    fn set(mut self, set: impl Fn(&mut Settings) + Send + Sync + 'static) -> Self {
        self.overrides.push(Box::new(set));
        self
    }

    /// Take submissions from other processes ([`Client`](crate::Client))
    /// through the store's inbox. Default on; the engine's writer then
    /// checks the inbox every [`intake_poll`](Self::intake_poll).
    pub fn client_intake(self, on: bool) -> Self {
        self.set(move |s| s.client_intake = on)
    }

    /// How often the engine looks for client submissions: a
    /// [`Client`](crate::Client)'s job waits up to this long before the
    /// engine takes it. On S3 each look is one HEAD request (43 200 a day at
    /// the default). Default 2 s.
    pub fn intake_poll(self, every: Duration) -> Self {
        self.set(move |s| s.intake_poll = every)
    }

    /// How long the result of an operator request sent from another
    /// process (`Client::retry`, `gaffer cancel`, `gaffer pause` …) stays
    /// readable by its sender once the engine applied it
    /// ([`Settings::request_retention`](crate::Settings::request_retention));
    /// the retention pass removes it after. At least 1 ms. Default 7 days.
    pub fn request_retention(self, keep: Duration) -> Self {
        self.set(move |s| s.request_retention = keep)
    }

    /// Prefix of the taquba queues of job types: each type has its own queue,
    /// `{prefix}.{type}` (queue configs given to `open_options` use those
    /// names). Queues under this prefix are the engine's. Default `"jobs"`.
    pub fn queue_name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set(move |s| s.queue_name = name.clone())
    }

    /// Prefix of the taquba queues of pipelines, `{prefix}.{pipeline}`: apart
    /// from the jobs queues, so a big batch never starves single jobs. Must
    /// differ from [`queue_name`](Self::queue_name) (neither may start with
    /// the other followed by `.`). Default `"bulk-items"`.
    pub fn bulk_queue_name(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.set(move |s| s.bulk_queue_name = name.clone())
    }

    /// Jobs of one type running at once, for each type registered without a
    /// count of its own (`register_with_concurrency`). Every job type has its
    /// own workers and its own queue, so one type never takes another's
    /// capacity. At least 1. Default 16.
    pub fn max_concurrent_jobs(self, n: usize) -> Self {
        self.set(move |s| s.max_concurrent_jobs = n)
    }

    /// Items of one batch enqueued and not yet settled, at most: bounds the
    /// engine's memory for a run (and how far a run gets ahead of its
    /// items). At least 1. Default 10 000.
    pub fn batch_window(self, items: usize) -> Self {
        self.set(move |s| s.batch_window = items)
    }

    /// Longest idle wait before a job type's queue is looked at again, and
    /// the period of the retention sweeper (in-process submissions, retries
    /// and scheduled promotions wake the engine at once). Greater than zero.
    /// Default 100 ms.
    pub fn poll_interval(self, interval: Duration) -> Self {
        self.set(move |s| s.poll_interval = interval)
    }

    /// Remove outcome records (and memo entries, large outputs) this long
    /// after a job ends; after that the job is unknown
    /// ([`EngineError::JobNotFound`]). At least 1 ms. Default: keep forever.
    pub fn retention(self, retention: Duration) -> Self {
        self.set(move |s| s.retention = Some(retention))
    }

    /// Object-store prefix of memo entries and large outputs; must not
    /// overlap the queue's path. Default `"gaffer-blobs"`.
    pub fn blob_prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.set(move |s| s.blob_prefix = prefix.clone())
    }

    /// Settlements (ack/nack commits) in flight per job type before its pool
    /// stops claiming more jobs. Settlements commit together, so a worker
    /// takes its next job while its last one's settlement waits for the
    /// queue's flush. At least 1. Default 1024.
    pub fn settlement_window(self, settlements: usize) -> Self {
        self.set(move |s| s.settlement_window = settlements)
    }

    /// A crashed handler worker (a panic in a job) is replaced at once,
    /// unless more attempts than the type has workers panicked in a row:
    /// then this is the first delay before it restarts, doubling with each
    /// further panic in a row, up to
    /// [`restart_backoff_max`](Self::restart_backoff_max); an attempt that
    /// ends without a panic ends the streak. Default 50 ms.
    pub fn restart_backoff_base(self, delay: Duration) -> Self {
        self.set(move |s| s.restart_backoff_base = delay)
    }

    /// Longest delay before a crashed handler worker is restarted.
    /// Default 5 s.
    pub fn restart_backoff_max(self, delay: Duration) -> Self {
        self.set(move |s| s.restart_backoff_max = delay)
    }

    /// Crashes of one job type's workers tolerated within
    /// [`restart_window`](Self::restart_window) before the type is paused
    /// (`EngineEvent::JobTypePaused`: it claims nothing until
    /// `Engine::resume_job_type` or a restart; other types go on).
    /// Default 100.
    pub fn max_restarts(self, crashes: usize) -> Self {
        self.set(move |s| s.max_restarts = crashes)
    }

    /// The window [`max_restarts`](Self::max_restarts) counts crashes in.
    /// Default 10 s.
    pub fn restart_window(self, window: Duration) -> Self {
        self.set(move |s| s.restart_window = window)
    }

    /// A job that was running when the process died runs again without
    /// spending an attempt; one under which the process keeps dying is a
    /// poison pill: after this many separate interruption episodes (see
    /// [`interruption_window`](Self::interruption_window)) within
    /// [`interruption_memory`](Self::interruption_memory) it fails
    /// permanently instead. At least 1. Default 3.
    pub fn max_interruptions(self, episodes: u32) -> Self {
        self.set(move |s| s.max_interruptions = episodes)
    }

    /// Interruptions of one job closer together than this count as one
    /// episode toward [`max_interruptions`](Self::max_interruptions) (a
    /// crash loop, or several kills in a row, is one episode). Default 60 s.
    pub fn interruption_window(self, window: Duration) -> Self {
        self.set(move |s| s.interruption_window = window)
    }

    /// An interruption episode is forgotten this long after it began
    /// ([`Settings::interruption_memory`](crate::Settings::interruption_memory)):
    /// a long job that runs through unrelated crashes hours apart is never
    /// taken for a poison pill, while a crash loop still reaches
    /// [`max_interruptions`](Self::max_interruptions) within it. Longer than
    /// the interruption window. Default 1 h.
    pub fn interruption_memory(self, memory: Duration) -> Self {
        self.set(move |s| s.interruption_memory = memory)
    }

    /// When memo entries are written to the object store. Default
    /// [`MemoWrites::OnFailure`](crate::MemoWrites::OnFailure): an attempt keeps its entries in memory and
    /// writes them only if it does not succeed, so a successful attempt pays
    /// no object write. [`MemoWrites::Immediate`](crate::MemoWrites::Immediate) writes each entry as it is
    /// put, so entries survive a process crash mid-attempt too.
    pub fn memo_writes(self, writes: crate::MemoWrites) -> Self {
        self.set(move |s| s.memo_writes = writes)
    }

    /// How long a graceful shutdown lets running jobs finish before giving
    /// them back to the queue (their attempt is not counted; they run again
    /// after the next start) and reporting them in
    /// [`ShutdownReport::abandoned`](crate::ShutdownReport::abandoned). Default: wait as long as they take.
    pub fn shutdown_grace(self, grace: Duration) -> Self {
        self.set(move |s| s.shutdown_grace = Some(grace))
    }

    /// Open the store and start the engine. Fails with a typed error on a
    /// duplicate job type, an invalid setting, a store of another layout
    /// version or a store error.
    pub async fn start(self) -> Result<Engine> {
        let mut names = std::collections::HashSet::new();
        for r in &self.registrations {
            if !names.insert(r.name.clone()) {
                return Err(EngineError::DuplicateJobType(r.name.clone()).into());
            }
            if r.concurrency == Some(0) {
                return Err(EngineError::InvalidConfig(format!(
                    "`{}` needs at least 1 worker",
                    r.name
                ))
                .into());
            }
        }
        let settings = self.effective_settings();
        settings.validate()?;
        let state = Arc::new(self.state);
        let registrations = self
            .registrations
            .into_iter()
            .map(|r| Registration {
                job_type: r.name,
                handler: (r.make)(state.clone()),
                concurrency: r.concurrency,
                kind: r.kind,
                rate: r.rate,
            })
            .collect();
        // A store only this process can see needs no liveness beat.
        let Some(named) = self.store else {
            return Err(no_store());
        };
        let readable_elsewhere = !matches!(named, Store::InMemory);
        let default_flush = default_flush_interval(&named);
        let store = named.open()?;
        let source = match self.queue {
            Some(queue) => QueueSource::Given {
                queue: Box::new(queue),
                store,
            },
            None => {
                let mut options = self.options.unwrap_or_default();
                // A liveness beat, so that a reader (`gaffer health`) can tell
                // a live engine from a stale or closed one.
                if readable_elsewhere && options.liveness_heartbeat.is_none() {
                    options = options.liveness_heartbeat(LIVENESS_HEARTBEAT);
                }
                // With metrics, taquba's sampler reports each queue's depth
                // (the backlog per job type) and oldest pending age.
                #[cfg(feature = "metrics")]
                if options.metrics_sample_interval.is_none() {
                    options = options.metrics_sample_interval(Duration::from_secs(10));
                }
                // The builder's interval, else the open options', else the
                // store's.
                let flush = self
                    .flush_interval
                    .or(options.flush_interval)
                    .unwrap_or(default_flush);
                options = options.flush_interval(flush);
                if let Some(clock) = self.clock {
                    options = options.clock(clock);
                }
                QueueSource::Open {
                    store,
                    path: self.queue_path,
                    options,
                }
            }
        };
        let inner = EngineRef::start(EngineConfig {
            source,
            settings,
            registrations,
            events: Some(self.events),
            periodic: self.periodic,
            shard: self.shard,
        })
        .await?;
        let jobs: Arc<dyn JobEngine> = Arc::new(inner.clone());
        Ok(Engine { inner, jobs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taquba::object_store::memory::InMemory;

    fn url(url: &str) -> Store {
        Store::Url(url.into(), None)
    }

    #[test]
    fn the_default_flush_follows_the_store() {
        let local = LOCAL_FLUSH_INTERVAL;
        let memory = MEMORY_FLUSH_INTERVAL;
        let remote = OBJECT_STORE_FLUSH_INTERVAL;
        assert_eq!(default_flush_interval(&Store::LocalDir("d".into())), local);
        assert_eq!(default_flush_interval(&url("file:///tmp/d")), local);
        assert_eq!(default_flush_interval(&url("FILE:///tmp/d")), local);
        assert_eq!(default_flush_interval(&Store::InMemory), memory);
        assert_eq!(default_flush_interval(&url("memory://")), memory);
        for remote_url in [
            "s3://b/p",
            "gs://b/p",
            "az://c/p",
            "https://x.amazonaws.com/b",
        ] {
            assert_eq!(
                default_flush_interval(&url(remote_url)),
                remote,
                "{remote_url}"
            );
        }
        let given = Store::Given(Arc::new(InMemory::new()));
        assert_eq!(default_flush_interval(&given), remote);
    }
}
