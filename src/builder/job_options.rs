//! `JobOptions`: how a job type or a pipeline is registered beyond its
//! type (capacity, rate limit, tenants, timeout).

use super::*;

/// How a job type (or a pipeline) is registered beyond its type: its own
/// capacity and its own rate limit. `JobOptions::default()` is what
/// [`EngineBuilder::register`] uses.
///
/// Tenants: fairness and concurrency per key. A type shared by tenants
/// claims round robin over the values of a header ([`fair_by`](Self::fair_by)),
/// and may hold at most `n` jobs of one value at once
/// ([`key_concurrency`](Self::key_concurrency)):
///
/// ```no_run
/// # use gaffer::{Concurrency, Engine, Fairness, Job, JobContext, JobOptions, Store, SubmitOptions};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Report;
/// # impl Job for Report { const NAME: &'static str = "report"; type Output = ();
/// #   type Error = std::convert::Infallible;
/// #   async fn run(&self, _: JobContext) -> Result<(), Self::Error> { Ok(()) } }
/// # async fn f() -> gaffer::Result<()> {
/// let engine = Engine::builder()
///     .store(Store::local_dir("gaffer-data"))
///     .register_with::<Report>(JobOptions {
///         concurrency: Some(8),
///         // Round robin over tenants; "enterprise" gets 4 slots per turn.
///         fair_by: Some(Fairness::header("tenant").weight("enterprise", 4)),
///         // At most 2 reports of one tenant at once.
///         key_concurrency: Some(Concurrency::per_header("tenant", 2)?),
///         ..Default::default()
///     })
///     .start()
///     .await?;
/// let mut opts = SubmitOptions::default();
/// opts.headers.insert("tenant".into(), "acme".into());
/// engine.submit_with(Report, opts).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct JobOptions {
    /// Workers of its own, at least 1 (`None`: a job type gets
    /// [`Settings::max_concurrent_jobs`], a pipeline 200). Every type has
    /// its own workers and its own queue: its capacity is never another
    /// type's.
    pub concurrency: Option<usize>,
    /// At most this many attempts start per period (for example
    /// `RateLimit::per_second(2)?`: 2 a second, bursts of 2; `.burst(1)`
    /// spaces them 500 ms apart), for an API with a quota, a mail relay, a
    /// slow partner. Its pool claims no more jobs than it may start, so its
    /// backlog waits in the queue (scheduled jobs and retries included),
    /// holding no lease and no worker, and other types run at full speed
    /// meanwhile. The limit is per engine (two engines on one store would
    /// each allow it) and starts empty at each engine start (the first job
    /// waits one interval, `period / starts`), so restarts never add a
    /// burst. With [`RateLimit::per_header`] it holds for each value of a
    /// job header apart (per tenant), each value's jobs waiting in a queue
    /// of their own.
    pub rate: Option<RateLimit>,
    /// Claim fairly across the values of a job header (tenants): round
    /// robin over the values with jobs ready, a value of weight `w` getting
    /// up to `w` turns' worth of jobs per turn ([`Fairness::weight`],
    /// default 1; [`Fairness::turn`] jobs a turn, default 8, claimed at
    /// once), so a value with one ready job waits about one turn of each
    /// value ahead of it however large another value's backlog is. Each
    /// value's jobs wait in a queue of their own (as with
    /// [`RateLimit::per_header`]); jobs without the
    /// header are one value of their own. Fairness comes first across
    /// values, priority orders jobs within one value only. Job types only
    /// (a pipeline with it is refused at start).
    pub fair_by: Option<Fairness>,
    /// At most `n` jobs of one header value held at once by this engine
    /// ([`Concurrency::per_header`]): counted from their claim to the end
    /// of their settlement (running, parked, waiting for a worker,
    /// settling). `n = 1` runs each value's jobs one at a time. Implies
    /// fair claiming (equal weights unless [`fair_by`](Self::fair_by) says
    /// otherwise). The rate limit's, the fairness's and this header must be
    /// the same when more than one is set (`InvalidConfig` at start).
    pub key_concurrency: Option<Concurrency>,
    /// How long one attempt may run: past it the attempt's cancel token
    /// fires, its future is dropped, and the attempt counts as a failed one
    /// (transient: retried like any failure while attempts remain), its
    /// error saying the timeout. `None` (the default): no limit. A job's own
    /// [`SubmitOptions::timeout`](crate::SubmitOptions::timeout) beats it.
    ///
    /// The lease does not bound a job: while its process lives the engine
    /// keeps the lease of every job it runs, however long it runs. There is
    /// no default timeout because no duration fits every job (a report may
    /// rightly take hours); set one for a type whose jobs can hang (a call
    /// with no deadline of its own) so a runaway attempt ends and retries.
    pub timeout: Option<std::time::Duration>,
    /// The most times one job of this type may snooze
    /// ([`JobContext::snooze`](crate::JobContext::snooze)): the snooze
    /// after that fails the job, permanently, saying so. `None` (the
    /// default): the engine's
    /// [`Settings::max_snoozes`](crate::Settings::max_snoozes).
    pub max_snoozes: Option<u32>,
}
