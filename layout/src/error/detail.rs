//! The detail types inside `EngineError::Schedule` and
//! `EngineError::Shard`: what is wrong with a schedule, a periodic job's
//! name, a shard set or a placement.

/// What is wrong with a periodic job's schedule or name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error(
        "invalid cron expression `{expr}`: {reason} (five fields `min hour day month weekday`, or six with seconds first)"
    )]
    InvalidCron {
        /// The expression as given.
        expr: String,
        /// What the parser said.
        reason: String,
    },
    /// The cron expression parses but matches no time (for example the 30th
    /// of February).
    #[error("cron expression `{0}` never matches a time")]
    NeverMatches(String),
    /// The time zone is not an IANA name this build knows.
    #[error("unknown time zone `{0}`: use an IANA name such as `Europe/Paris` or `UTC`")]
    UnknownTimeZone(String),
    /// A time zone was given to an interval schedule.
    #[error(
        "a time zone applies to cron schedules only: an interval counts elapsed time from the Unix epoch; use a cron expression for wall-clock times"
    )]
    TimeZoneOnInterval,
    /// The interval is shorter than a second.
    #[error("interval of {0:?} is too short: a periodic job ticks at most once a second")]
    IntervalTooShort(std::time::Duration),
    /// A catch-up of zero ticks, or of more than the engine fires at once.
    #[error("catch-up of {0} ticks is out of range: 1 to {max}", max = MAX_CATCH_UP)]
    CatchUpOutOfRange(u32),
    /// The name is not of the accepted form.
    #[error("invalid periodic job name `{0}`: 1-128 characters of [A-Za-z0-9_.-]")]
    InvalidName(String),
}

/// What is wrong with a shard set, a placement, or a shard asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The shard set cannot be built as given.
    #[error("invalid shard set: {0}")]
    InvalidSet(String),
    /// The placement cannot be worked out (no hostname ordinal, an ordinal
    /// out of range …).
    #[error("invalid placement: {0}")]
    InvalidPlacement(String),
    /// The placement's coordinator (etcd) could not be reached or refused
    /// this process's joining.
    #[error(
        "the placement's coordinator: {0}; check that etcd answers at the endpoints given \
         (and that this process's member name is not taken)"
    )]
    Coordinator(String),
    /// The job or batch belongs to a shard this process does not own.
    #[error(
        "`{id}` belongs to shard {shard}, which this process does not own (it owns {owned:?}); \
         submit or read it through a ShardedClient, or on the process that owns the shard"
    )]
    NotOwned {
        /// The job or batch id.
        id: String,
        /// Its shard.
        shard: usize,
        /// The shards this process owns.
        owned: Vec<usize>,
    },
    /// The job or batch belongs to a shard this process owns, whose engine
    /// is down now (fenced by another writer, or stopped).
    #[error(
        "shard {shard} is down on this process ({reason}); its keeper brings it back on its own \
         (`ShardedEngine::subscribe` says when): try again then, or submit through a \
         ShardedClient, whose inbox keeps the job for whichever process runs the shard"
    )]
    Down {
        /// The shard.
        shard: usize,
        /// Why it is down.
        reason: String,
    },
    /// A job of a type the set routes by a header
    /// (`ShardSet::route_by_header`) cannot be placed by that header's
    /// value (it has an idempotency key, whose id fixes its shard by
    /// itself).
    #[error("a job of `{job_type}` cannot be routed by its header `{header}`: {reason}")]
    Unroutable {
        /// The job's type.
        job_type: String,
        /// The header its type routes by.
        header: String,
        /// Why it cannot be routed by it.
        reason: String,
    },
}

/// The most missed ticks a catch-up policy (`Missed::CatchUp`) runs at once.
pub const MAX_CATCH_UP: u32 = 1000;
