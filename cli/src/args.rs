//! The command line: the store options every command takes, and the
//! commands.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Look inside a gaffer store (read-only: never opens a writer).
#[derive(Debug, Parser)]
#[command(name = "gaffer", version, about)]
pub struct Cli {
    /// The store: a local directory (as `EngineBuilder::local_dir`).
    #[arg(long, global = true, conflicts_with = "url", value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// The store: a URL (`s3://bucket/prefix`, `gs://…`, `az://…`,
    /// `file:///dir`), configured from the provider variables.
    #[arg(long, global = true, value_name = "URL")]
    pub url: Option<String>,
    /// A shard set instead of one store: a URL template whose `{shard}`
    /// is each shard's index, two digits at least (as
    /// `gaffer::ShardSet::from_template`); needs `--shard-count`. `stats`
    /// `health`, `jobs` (a first page), `dead`, `batches`, `workflows` (a
    /// first page) and `periodic` read every shard (one part each; `stats`
    /// adds them up too, `jobs` and `dead` print one listing merged over
    /// the set with a SHARD column, at most `--limit` rows); `job`,
    /// `batch`, `cancel` and `retry ID` the shard of the id (`job` of a
    /// batch item's delivery, not found there, the other shards), `item`
    /// the shard of its batch; other
    /// commands (`workflow ID` too), and any with `--shard`, the one shard
    /// it names.
    #[arg(long, global = true, conflicts_with_all = ["dir", "url"], requires = "shard_count", value_name = "TEMPLATE")]
    pub shards: Option<String>,
    /// How many shards the set has (fixed at deploy).
    #[arg(long, global = true, value_name = "N")]
    pub shard_count: Option<usize>,
    /// With `--shards`: the one shard to read or act on.
    #[arg(long, global = true, value_name = "INDEX")]
    pub shard: Option<usize>,
    /// The queue's path inside the store (the engine's `queue_path`).
    #[arg(long, global = true, default_value = "queue")]
    pub queue_path: String,
    /// Prefix of the job types' queues (the engine's `queue_name`).
    #[arg(long, global = true, default_value = "jobs")]
    pub jobs_queue: String,
    /// Prefix of the pipelines' queues (the engine's `bulk_queue_name`).
    #[arg(long, global = true, default_value = "bulk-items")]
    pub bulk_queue: String,
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The store's keys (one `id:base64` a line, newest last;
    /// docs/guide/encryption.md): values sealed under them are shown, others as
    /// `encrypted (key ID)`, and requests are sealed under the newest.
    /// Default: the file `GAFFER_KEY_FILE` names, or the keys in
    /// `GAFFER_KEYS`.
    #[arg(long, global = true, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// A state to list jobs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// Waiting to be claimed.
    Queued,
    /// Held for later: its time (run_at or a retry's backoff), or a signal
    /// (the waiting ones among them).
    Scheduled,
    /// Waiting for a signal (`ctx.wait_signal`), or its timeout.
    Waiting,
    /// Claimed by a handler.
    Running,
    /// Dead-lettered (failed or cancelled).
    Dead,
    /// Ended with an output.
    Succeeded,
    /// Ended with a failure.
    Failed,
    /// Cancelled.
    Cancelled,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per queue (one per job type and pipeline): pending, scheduled,
    /// running, done, dead. Beside a live engine, as of its latest
    /// snapshot of them (at most a few seconds old, said in the output).
    /// With a job type whose jobs are spread over the values of a header
    /// (fairness, a limit per key, a rate limit per header): its values
    /// with the most ready and running jobs, the rest summed, and each
    /// shown value's oldest ready job's age.
    Stats {
        /// Only this job type, with its values.
        #[arg(value_name = "TYPE", conflicts_with = "exact")]
        job_type: Option<String>,
        /// Show this many values (1 to 100), the rest summed in one row.
        #[arg(long, default_value_t = 10, requires = "job_type", value_parser = clap::value_parser!(u16).range(1..=100))]
        top: u16,
        /// Count exactly now, from every WAL object past the writer's last
        /// memtable flush (up to thousands: about 0.5 s after 100 000 jobs).
        #[arg(long)]
        exact: bool,
        /// Keep the store open and print the stats again every `--every`
        /// until Ctrl-C: a table redrawn on a terminal, else a block a
        /// round; with `--json` one JSON document a line (NDJSON). Counts
        /// exactly, as `--exact`, reading after its first round only the
        /// WAL objects written since the last (reopened, and read in full,
        /// every minute). Not with a TYPE: its values are read from the
        /// whole state, not the WAL's changes.
        #[arg(long, conflicts_with = "job_type")]
        watch: bool,
        /// With `--watch`: how often (`500ms`, `1s`, `2m`).
        #[arg(long, default_value = "1s", requires = "watch", value_parser = parse_duration, value_name = "DURATION")]
        every: std::time::Duration,
        /// With `--watch`: how long one base is kept before the store is
        /// reopened and read in full (default: a minute; for tests).
        #[arg(long, hide = true, requires = "watch", value_parser = parse_duration, value_name = "DURATION")]
        rebase_every: Option<std::time::Duration>,
    },
    /// Jobs: running, queued and scheduled, then finished ones newest
    /// first; or a tag's jobs (`--tag`).
    Jobs {
        /// Only jobs in this state.
        #[arg(long)]
        state: Option<StateArg>,
        /// Only jobs of this type (or pipeline).
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// At most this many jobs (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this cursor: the `next` a previous page printed.
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// Only the jobs submitted with this tag (`SubmitOptions::tags`),
        /// in any state, newest first: read from the tag's index, not a
        /// scan of the store.
        #[arg(long, value_name = "TAG", conflicts_with_all = ["state", "job_type"])]
        tag: Option<String>,
    },
    /// One job: its run or outcome record, attempts, output or error; a
    /// waiting job's signal and timeout; whether it can be retried.
    Job {
        /// The job's id (its run id, as `JobHandle::id`), or a queue job id
        /// (a batch item's, as `jobs` and `dead` list it).
        id: String,
    },
    /// One item of a batch: its delivery while the queue keeps it (as
    /// `job` shows a job), else how it ended (its status, error, output).
    Item {
        /// The batch id.
        batch: String,
        /// The item's key.
        key: String,
    },
    /// Dead letters with their failure records. A job retried since its
    /// dead letter is listed by its latest dead letter only (or not at all
    /// while it runs again); `stats`'s dead count is the queue's own and
    /// still counts the older ones until the queue's dead retention.
    Dead {
        /// Only dead letters of this type (or pipeline).
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// At most this many per queue.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Every batch and its status.
    Batches {
        /// At most this many batches.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// One batch: total, succeeded, failed, outstanding, cost.
    Batch {
        /// The batch id.
        id: String,
        /// Redraw a progress bar (items settled, rate, time left) until the
        /// batch has no outstanding item, then print its status. Stops with
        /// exit status 3 if the engine's writer stops meanwhile.
        #[arg(long)]
        watch: bool,
        /// With `--watch`: read the batch this often, in milliseconds.
        #[arg(long, default_value_t = 500)]
        every_ms: u64,
    },
    /// Workflows in id order: name, created, steps counted by state, and
    /// the workflow's state.
    Workflows {
        /// At most this many workflows (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this workflow id: the `next` a previous page printed.
        #[arg(long, value_name = "ID")]
        after: Option<String>,
    },
    /// One workflow: its steps, each after the steps it needs, with its
    /// state, job type, job id and the steps it needs.
    Workflow {
        /// The workflow's id (as `WorkflowHandle::id`).
        id: String,
    },
    /// Periodic jobs: name, job type, schedule, missed-tick policy, last
    /// tick fired, next tick due.
    Periodic,
    /// The writer's heartbeat and the store's activity; exit status 0 when a
    /// writer is alive, 3 when it is stale, closed or absent.
    Health,
    /// Submit a job (through the store's inbox; the engine takes it at its
    /// next look). Exit 0 once submitted, 1 if refused, 3 if not taken in
    /// time.
    Submit {
        /// The job type.
        job_type: String,
        /// The job as JSON: its fields, as its Rust type serializes them
        /// (`--json` is the output format of every command).
        #[arg(value_name = "JOB_JSON")]
        job: String,
        /// An idempotency key.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Run a failed or cancelled job again under its id, or every failed
    /// job of a type.
    Retry {
        /// The job's id (with `--workflow`: the workflow's).
        #[arg(required_unless_present = "failed", conflicts_with = "failed")]
        id: Option<String>,
        /// ID is a workflow: run its failed and cancelled steps again, and
        /// the graph on from them.
        #[arg(long, conflicts_with = "failed")]
        workflow: bool,
        /// Every failed job of `--type`.
        #[arg(long, requires = "job_type")]
        failed: bool,
        /// With `--failed`: the job type.
        #[arg(long = "type", value_name = "TYPE")]
        job_type: Option<String>,
        /// With `--failed`: only jobs that failed in the last this many
        /// seconds.
        #[arg(long, value_name = "SECS")]
        since_secs: Option<u64>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Send a signal to a job: a job waiting for it (`ctx.wait_signal`)
    /// runs again; one not at its wait yet finds it there.
    Signal {
        /// The job's id.
        id: String,
        /// The signal's name (what the job waits for).
        name: String,
        /// The signal's payload, as JSON (encoded as the job decodes it).
        #[arg(value_name = "JSON", default_value = "null")]
        payload: String,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Cancel a job, or with `--workflow` a workflow (every step not ended).
    Cancel {
        /// The job's id (with `--workflow`: the workflow's).
        id: String,
        /// ID is a workflow.
        #[arg(long)]
        workflow: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Pause a job type: nothing more of it is claimed, across restarts,
    /// until `resume`; nothing is failed. With `--key HEADER=VALUE`, only
    /// that value's jobs are held (a type spread over the values of
    /// HEADER), while its other values run.
    Pause {
        /// The job type.
        job_type: String,
        /// Only the jobs of this value of the type's header:
        /// `HEADER=VALUE` (`tenant=acme`).
        #[arg(long, value_name = "HEADER=VALUE")]
        key: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Ask the engine to write every value the store keeps under its
    /// keyring's newest key (`Engine::rekey`): resumable; once nothing is
    /// left under an older key, the store stops listing it and it may
    /// leave the keyring (docs/guide/encryption.md).
    Rekey {
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Print a new random key as a key file line, `ID:base64`: append it
    /// to the key file (newest last) to rotate to it.
    Keygen {
        /// The new key's id (1-64 of [A-Za-z0-9_.-]).
        id: String,
    },
    /// Resume a paused job type, or with `--key HEADER=VALUE` a paused
    /// value of it.
    Resume {
        /// The job type.
        job_type: String,
        /// Only this value of the type's header: `HEADER=VALUE`.
        #[arg(long, value_name = "HEADER=VALUE")]
        key: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Serve the web dashboard (all the above in a browser, live) until
    /// Ctrl-C. Asks for `Authorization: Bearer $GAFFER_WEB_TOKEN`, or
    /// basic auth `$GAFFER_WEB_USER`/`$GAFFER_WEB_PASSWORD`, when set.
    Web {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// Serve under this path prefix (`/admin/jobs`).
        #[arg(long, default_value = "")]
        base_path: String,
        /// No actions: no button, every POST answers 403.
        #[arg(long)]
        read_only: bool,
        /// Also answer requests for this host name (`jobs.example.com`,
        /// any port; or `NAME:PORT`): a name the dashboard is reached by.
        /// Repeat for several. It answers to the address it listens on
        /// (any IP address on `0.0.0.0` or `::`) and `localhost` (on a
        /// loopback or every address) without it; any other `Host` is
        /// refused with 421 (DNS rebinding).
        #[arg(long, value_name = "HOST")]
        allowed_host: Vec<String>,
    },
}

/// How a command that acts waits for the engine.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// Return once the request is in the store, without waiting for the
    /// engine.
    #[arg(long)]
    pub no_wait: bool,
    /// Wait at most this long for the engine to apply it (exit 3 after).
    #[arg(long, default_value_t = 30)]
    pub wait_secs: u64,
}

/// A duration as `--every` takes it: a whole number and a unit, `ms`,
/// `s`, `m` or `h` (`500ms`, `1s`, `2m`); more than zero.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("`{text}`: a whole number and a unit, ms, s, m or h (500ms, 1s, 2m)");
    let at = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = text.split_at(at);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(bad)?;
    if ms == 0 {
        return Err(format!("`{text}`: more than zero"));
    }
    Ok(std::time::Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_a_whole_number_and_a_unit() {
        use std::time::Duration;
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "",
            "1",
            "s",
            "1.5s",
            "0s",
            "-1s",
            "1d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
