//! The open-options policy: what the builder sets on taquba's
//! `OpenOptions` when the user set nothing of their own (the WAL flush
//! interval that fits the store, the scheduler's pass that follows it, dead
//! letters kept as long as their outcome records, the writer's beat).

use std::time::Duration;

use gaffer_actors::layout::store::Store;
use taquba::OpenOptions;

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

/// The flush interval that fits `store`, when neither the builder nor the
/// open options set one: short on a local disk or in memory, where a flush
/// costs little; taquba's 100 ms on an object store, where each flush is a
/// request, and on a store given as an `ObjectStore` (the engine cannot
/// tell a local one from a remote one, and a flush too short for a remote
/// store costs money, one too long for a local store only latency).
pub(super) fn default_flush_interval(store: &Store) -> Duration {
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

/// How long a dead letter outlives its job's outcome record under
/// `retention(..)`: past the record the job is unknown (`JobNotFound`), and
/// `retry` reads the letter only while the record is there; the margin
/// covers the sweeper's and taquba's reaper's passes.
const DEAD_LETTER_MARGIN: Duration = Duration::from_secs(60);

/// With `retention(..)`, each registered job type's queue keeps its dead
/// letters `retention` plus a minute instead of taquba's default 7 days (the
/// queue's `dead_retention`), so the letters of permanently failed jobs go
/// with their outcome records: past them nothing reads a letter, and at a
/// steady failure rate they were the store's one record set that grew for a
/// week (benches/README.md, *Soak*). A queue with an entry of its own in
/// `queue_configs` keeps it as given; a shorter `dead_retention` in the
/// default config is kept. Per-tenant queues of a rate limit (`jobs.{type}..p…`)
/// take the default config as it is.
pub(super) fn dead_letters_follow_retention(
    mut options: OpenOptions,
    retention: Duration,
    queues: &[String],
) -> OpenOptions {
    let keep = retention.saturating_add(DEAD_LETTER_MARGIN);
    let mut config = options.default_queue_config.clone();
    if config.dead_retention.is_none_or(|d| d > keep) {
        config.dead_retention = Some(keep);
    }
    for queue in queues {
        options
            .queue_configs
            .entry(queue.clone())
            .or_insert_with(|| config.clone());
    }
    options
}

/// The shortest scheduler pass (a flush of 1 or 2 ms does not need one as
/// often).
const MIN_SCHEDULER_INTERVAL: Duration = Duration::from_millis(10);

/// Jobs due later (a `run_at`, a retry's backoff, a wait for a signal's
/// deadline) are moved to pending by taquba's scheduler, every second by
/// default: a 400 ms `wait_signal` timeout was answered up to a second
/// late. A pass reads nothing while no job is due (taquba keeps the
/// earliest due time in memory), so unless the open options set an
/// interval of their own the scheduler runs at the flush interval (at least
/// 10 ms, at most taquba's second): a due job is promoted within one flush
/// of its time.
pub(super) fn scheduler_follows_flush(options: OpenOptions, flush: Duration) -> OpenOptions {
    let taquba_default = OpenOptions::default().scheduler_interval;
    if options.scheduler_interval != taquba_default {
        return options;
    }
    options.scheduler_interval(flush.clamp(MIN_SCHEDULER_INTERVAL, taquba_default))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use taquba::object_store::memory::InMemory;

    fn url(url: &str) -> Store {
        Store::Url(url.into(), None)
    }

    #[test]
    fn dead_letters_follow_retention_on_job_queues_not_given_a_config() {
        let week = Some(Duration::from_secs(7 * 24 * 3600));
        let own = taquba::QueueConfig::default().dead_retention(Duration::from_secs(3600 * 48));
        let options = OpenOptions::default().queue_config("jobs.kept", own.clone());
        let queues = ["jobs.a".to_string(), "jobs.kept".to_string()];
        let out = dead_letters_follow_retention(options, Duration::from_secs(300), &queues);
        assert_eq!(
            out.queue_configs["jobs.a"].dead_retention,
            Some(Duration::from_secs(360))
        );
        // An entry of its own is kept as given, and so is the default for
        // every other queue (the intake's refused requests, batch items).
        assert_eq!(
            out.queue_configs["jobs.kept"].dead_retention,
            own.dead_retention
        );
        assert_eq!(out.default_queue_config.dead_retention, week);
        // A shorter default is not lengthened.
        let short = OpenOptions::default().default_queue_config(
            taquba::QueueConfig::default().dead_retention(Duration::from_secs(10)),
        );
        let out = dead_letters_follow_retention(short, Duration::from_secs(300), &queues[..1]);
        assert_eq!(
            out.queue_configs["jobs.a"].dead_retention,
            Some(Duration::from_secs(10))
        );
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
