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
use gaffer_actors::exec::fair::{Concurrency, Fairness};
use gaffer_actors::exec::rate::RateLimit;

use gaffer_actors::{
    EngineConfig, EngineError, EngineEvent, EngineRef, ErasedHandler, Kind, QueueSource,
    Registration, Settings,
};

use crate::adapters::{TypedHandler, TypedPipeline};
use crate::bulk::pipeline::Pipeline;
use crate::error::Result;
use crate::job::state::StateMap;
use crate::job::typed::Job;

use crate::engine::Engine;

mod job_options;
mod open;
mod shard;

pub use job_options::JobOptions;

pub(crate) use open::LIVENESS_HEARTBEAT;
use open::{dead_letters_follow_retention, default_flush_interval, scheduler_follows_flush};

impl Engine {
    /// Start configuring an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }
}

type MakeHandler = Box<dyn FnOnce(Arc<StateMap>) -> Arc<dyn ErasedHandler> + Send>;

struct PendingRegistration {
    name: String,
    make: MakeHandler,
    concurrency: Option<usize>,
    kind: Kind,
    rate: Option<RateLimit>,
    fair_by: Option<Fairness>,
    key_concurrency: Option<Concurrency>,
    timeout: Option<Duration>,
    max_snoozes: Option<u32>,
}

/// What a builder says without a store.
pub(crate) fn no_store() -> crate::Error {
    EngineError::InvalidConfig(
        "no store: name one with .store(Store::local_dir(..)), Store::url(..), \
         Store::in_memory() or Store::object_store(..)"
            .into(),
    )
}

/// One setter per [`Settings`] field, named as the field and documented by
/// pointing at it (a setting is described once, on its field).
macro_rules! setters {
    ($($field:ident: $how:ident $ty:ty,)*) => {
        $(setters!(@one $field $how $ty);)*
    };
    (@one $field:ident set $ty:ty) => {
        #[doc = concat!("Sets [`Settings::", stringify!($field), "`].")]
        pub fn $field(mut self, value: $ty) -> Self {
            self.settings.$field = value;
            self
        }
    };
    (@one $field:ident into $ty:ty) => {
        #[doc = concat!("Sets [`Settings::", stringify!($field), "`].")]
        pub fn $field(mut self, value: impl Into<$ty>) -> Self {
            self.settings.$field = value.into();
            self
        }
    };
    (@one $field:ident some $ty:ty) => {
        #[doc = concat!("Sets [`Settings::", stringify!($field), "`] (to `Some`).")]
        pub fn $field(mut self, value: $ty) -> Self {
            self.settings.$field = Some(value);
            self
        }
    };
}

/// Configures and starts an [`Engine`]. Defaults follow the reference: queue
/// `"jobs"`, 16 concurrent jobs, 100 ms poll interval, no retention.
///
/// Every engine setting has a method of the same name that sets that
/// field of [`Settings`] (documented there); [`settings`](Self::settings)
/// sets them all at once. The last call wins.
pub struct EngineBuilder {
    store: Option<Store>,
    queue_path: String,
    queue: Option<Queue>,
    options: Option<OpenOptions>,
    flush_interval: Option<Duration>,
    clock: Option<Arc<dyn Clock>>,
    /// The settings, as `settings(..)` and the setters left them.
    settings: Settings,
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
    /// (not on a [`Store::in_memory`] store, which no other
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
    /// URL and on a store given as [`Store::object_store`]
    /// (docs/guide/tuning.md, *Defaults*).
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

    /// Register a job type, with the engine's default capacity
    /// ([`Settings::max_concurrent_jobs`] workers) and no rate limit.
    pub fn register<J: Job>(self) -> Self {
        self.register_with::<J>(JobOptions::default())
    }

    /// Register a job type with options of its own: its worker count and
    /// its rate limit ([`JobOptions`]).
    ///
    /// ```no_run
    /// # use gaffer::{Engine, Job, JobContext, JobOptions, RateLimit, Store};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Email;
    /// # impl Job for Email { const NAME: &'static str = "email"; type Output = ();
    /// #   type Error = std::convert::Infallible;
    /// #   async fn run(&self, _: JobContext) -> Result<(), Self::Error> { Ok(()) } }
    /// # async fn f() -> gaffer::Result<()> {
    /// let engine = Engine::builder()
    ///     .store(Store::local_dir("gaffer-data"))
    ///     .register_with::<Email>(JobOptions {
    ///         concurrency: Some(4),
    ///         rate: Some(RateLimit::per_second(2)?),
    ///         ..Default::default()
    ///     })
    ///     .start()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn register_with<J: Job>(mut self, options: JobOptions) -> Self {
        self.registrations.push(PendingRegistration {
            name: J::NAME.to_string(),
            make: Box::new(|state| {
                Arc::new(TypedHandler::<J> {
                    state,
                    _job: PhantomData,
                }) as Arc<dyn ErasedHandler>
            }),
            concurrency: options.concurrency,
            kind: Kind::Job,
            rate: options.rate,
            fair_by: options.fair_by,
            key_concurrency: options.key_concurrency,
            timeout: options.timeout,
            max_snoozes: options.max_snoozes,
        });
        self
    }

    /// Register a bulk pipeline, its items run by 200 workers.
    pub fn pipeline<P: Pipeline>(self, pipeline: P) -> Self {
        self.pipeline_with(pipeline, JobOptions::default())
    }

    /// Register a bulk pipeline with options of its own: its item worker
    /// count (default 200, the reference's `max_concurrent`) and a rate
    /// limit on its items' starts ([`JobOptions`]).
    pub fn pipeline_with<P: Pipeline>(mut self, pipeline: P, options: JobOptions) -> Self {
        let pipeline = Arc::new(pipeline);
        self.registrations.push(PendingRegistration {
            name: P::NAME.to_string(),
            make: Box::new(move |_state| {
                Arc::new(TypedPipeline::<P> {
                    pipeline,
                    _p: PhantomData,
                }) as Arc<dyn ErasedHandler>
            }),
            concurrency: Some(
                options
                    .concurrency
                    .unwrap_or(gaffer_actors::erased::DEFAULT_PIPELINE_CONCURRENCY),
            ),
            kind: Kind::Pipeline,
            rate: options.rate,
            fair_by: options.fair_by,
            key_concurrency: options.key_concurrency,
            timeout: options.timeout,
            max_snoozes: options.max_snoozes,
        });
        self
    }

    /// Submit a job of type `J` (registered on this builder) on `schedule`:
    /// one run per tick, across restarts and crashes. `make_job` makes the
    /// tick's job (it should make the same job for the same tick); `name`
    /// (1-128 characters of `[A-Za-z0-9_.-]`) names the periodic job in the
    /// store, where its record keeps the last tick it fired, and in each
    /// tick's job id ([`Tick::job_id`](crate::periodic::Tick::job_id)).
    ///
    /// Each tick's job is enqueued in one transaction with the record's
    /// new state, under an idempotency key made of `name` and the tick's
    /// time, so a tick fired twice (a restart, a stale engine) is one job.
    /// Ticks missed while no engine ran follow the schedule's
    /// [`Missed`](crate::periodic::Missed) policy. An invalid schedule, a duplicate
    /// name or an unregistered job type fail [`start`](Self::start).
    ///
    /// ```no_run
    /// # use gaffer::{Engine, Job, JobContext, periodic::Schedule};
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
    ///     .store(gaffer::Store::local_dir("gaffer-data"))
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

    /// All engine settings at once, replacing those set before; a setter
    /// called after it changes its one field (the last call wins). Default:
    /// [`Settings::default()`].
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// The settings the engine would start with (validated at
    /// [`start`](Self::start)).
    pub fn effective_settings(&self) -> Settings {
        self.settings.clone()
    }

    /// The queue's path inside the store (a shard's keeper reads the store
    /// there while the shard is down).
    pub(crate) fn queue_path_of(&self) -> &str {
        &self.queue_path
    }

    setters! {
        client_intake: set bool,
        intake_poll: set Duration,
        request_retention: set Duration,
        queue_name: into String,
        bulk_queue_name: into String,
        max_concurrent_jobs: set usize,
        batch_window: set usize,
        poll_interval: set Duration,
        forget_drained_after: set Duration,
        retention: some Duration,
        blob_prefix: into String,
        settlement_window: set usize,
        restart_backoff_base: set Duration,
        restart_backoff_max: set Duration,
        max_restarts: set usize,
        restart_window: set Duration,
        max_interruptions: set u32,
        max_snoozes: set u32,
        debounce_max_delay: set Duration,
        interruption_window: set Duration,
        interruption_memory: set Duration,
        memo_writes: set gaffer_actors::MemoWrites,
        shutdown_grace: some Duration,
        memory_budget: set Option<u64>,
        encryption: set gaffer_actors::layout::sealed::Keyring,
    }

    /// Open the store and start the engine. Fails with a typed error on a
    /// duplicate job type, an invalid setting, a store of another layout
    /// version or a store error.
    pub async fn start(self) -> Result<Engine> {
        let mut names = std::collections::HashSet::new();
        for r in &self.registrations {
            if !names.insert(r.name.clone()) {
                return Err(EngineError::DuplicateJobType(r.name.clone()));
            }
            if r.concurrency == Some(0) {
                return Err(EngineError::InvalidConfig(format!(
                    "`{}` needs at least 1 worker",
                    r.name
                )));
            }
        }
        let settings = self.effective_settings();
        settings.validate()?;
        let job_queues: Vec<String> = self
            .registrations
            .iter()
            .filter(|r| matches!(r.kind, Kind::Job))
            .map(|r| gaffer_actors::layout::keys::queue_for(&settings.queue_name, &r.name))
            .collect();
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
                fair_by: r.fair_by,
                key_concurrency: r.key_concurrency,
                timeout: r.timeout,
                max_snoozes: r.max_snoozes,
            })
            .collect();
        // A store only this process can see needs no liveness beat.
        let Some(named) = self.store else {
            return Err(no_store());
        };
        let place = Arc::new((named.name(), self.queue_path.clone()));
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
                options = scheduler_follows_flush(options, flush);
                if let Some(clock) = self.clock {
                    options = options.clock(clock);
                }
                if let Some(retention) = settings.retention {
                    options = dead_letters_follow_retention(options, retention, &job_queues);
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
        Ok(Engine { inner, jobs, place })
    }
}
