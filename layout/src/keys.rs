//! The durable key layout, in one place.
//!
//! Everything gaffer keeps lives either as a taquba job or under the reserved
//! `gaffer/` prefix of the queue's caller KV namespace (or, for values over the
//! KV cap, as an object under the engine's blob prefix with a pointer in KV).
//! The layout is versioned by [`LAYOUT_VERSION`], stored at [`LAYOUT_KEY`]; a
//! store holding another version is refused at start.

use sha2::{Digest, Sha256};

/// Marker of the layout this build writes and reads.
pub const LAYOUT_VERSION: &str = "gaffer-layout-2";
/// KV key holding the layout marker.
pub const LAYOUT_KEY: &[u8] = b"gaffer/layout";
/// Prefix of every layout marker: `gaffer-layout-{n}`, numbered in release
/// order.
pub const LAYOUT_PREFIX: &str = "gaffer-layout-";

/// The number `n` of a layout marker `gaffer-layout-{n}`; `None` for a
/// value of another form.
pub fn layout_number(marker: &str) -> Option<u32> {
    marker.strip_prefix(LAYOUT_PREFIX)?.parse().ok()
}
/// Reserved prefix of the caller KV namespace: user effects may not write under it.
pub const RESERVED_KV_PREFIX: &str = "gaffer/";
/// Reserved header prefix: submissions may not set headers under it.
pub const RESERVED_HEADER_PREFIX: &str = "gaffer.";
/// Header carrying the job type name.
pub const HEADER_TYPE: &str = "gaffer.type";
/// Header carrying the run id (the id a handle answers to).
pub const HEADER_RUN: &str = "gaffer.run";
/// Header carrying the debounce key a job's run was debounced by (on its
/// timer and on its job).
pub const HEADER_DEBOUNCED: &str = "gaffer.debounced";
/// Header carrying the job's attempt limit when it is not its queue's default
/// (gaffer counts attempts itself: the queue's own limit is set out of reach,
/// see [`QUEUE_ATTEMPTS`]).
pub const HEADER_ATTEMPTS: &str = "gaffer.attempts";
/// The attempt limit gaffer gives taquba for every job it enqueues: out of
/// reach, so the queue never ends a job on its own (a claim interrupted by a
/// process exit would otherwise spend an attempt, and a dead-letter by the
/// queue would carry no outcome record). gaffer ends each job itself, with
/// its record, when [`HEADER_ATTEMPTS`] real attempts are spent.
pub const QUEUE_ATTEMPTS: u32 = u32::MAX;
/// Prefix of the reason a claim was given back without counting an attempt
/// (a job released at the end of a shutdown grace period, or by a paused job
/// type): kept in the run's earlier claims (`RunRecord::past`), and in the
/// attempt history of a job given back as the queue gives claims back (a
/// claim whose standing could not be read), where gaffer reads it when it
/// counts attempts.
pub const RELEASED_PREFIX: &str = "gaffer-released: ";
/// Prefix of the jobs retention index (a taquba `ExpiryIndex`).
pub const JOBS_EXPIRY_PREFIX: &[u8] = b"gaffer/v1/expiry/jobs/";
/// Prefix of the batch retention index (a taquba `ExpiryIndex`).
pub const BATCHES_EXPIRY_PREFIX: &[u8] = b"gaffer/v1/expiry/batches/";
/// KV key of the engine's snapshot of its queues' counters
/// (`records::StatsSnapshot`), rewritten every few seconds while they
/// change and at least once a minute: what `gaffer stats` reads without
/// going through the whole unflushed WAL.
pub const STATS_KEY: &[u8] = b"gaffer/v1/stats";
/// Prefix of the retention index of operator request records
/// (`gaffer/v1/requests/{id}`; a taquba `ExpiryIndex`, suffix = request id).
pub const REQUESTS_EXPIRY_PREFIX: &[u8] = b"gaffer/v1/expiry/requests/";
/// Header carrying the batch id of a bulk item.
pub const HEADER_BATCH: &str = "gaffer.batch";
/// Header carrying the item key of a bulk item.
pub const HEADER_KEY: &str = "gaffer.key";
/// Header set on a bulk item that a later run of its batch enqueues again
/// (a re-run of an item that failed, or a resume): its run id may hold memo
/// entries from an earlier delivery, so its first attempt reads the store
/// for them. Without it, a first attempt knows no entry can exist and looks
/// in no store (see the memo module).
pub const HEADER_MEMO: &str = "gaffer.memo";
/// Header on a queue job gaffer put back on its queue under the same id (a
/// retry after a real failure, or a claim given back), carrying what it
/// counted of the run so far: `{tried}:{interrupted}:{episode starts}` (real
/// attempts spent, interruptions, and the start times, epoch ms, of the
/// interruption episodes still remembered, comma separated). The queue
/// forgets a job's attempt history when the job is acknowledged, so the
/// count travels with the job (see `attempts`).
pub const HEADER_PAST: &str = "gaffer.past";
/// Header carrying the W3C `traceparent` of the span that submitted a job
/// (feature `otel`): each attempt's `gaffer.job` span becomes its child, in
/// this process or another, before or after a restart.
pub const HEADER_TRACEPARENT: &str = "gaffer.traceparent";
/// Header on a batch's completion job: the batch id and its run's counts,
/// `{total},{succeeded},{failed},{cancelled},{generation},{batch_id}`
/// (see `erased::CompletedBatch`).
pub const HEADER_COMPLETES: &str = "gaffer.completes";
/// Header of a job submitted with a timeout of its own
/// (`SubmitOptions::timeout`): milliseconds, decimal. Past it an attempt is
/// cancelled and counted as failed.
pub const HEADER_TIMEOUT: &str = "gaffer.timeout";

/// The timeout a job's [`HEADER_TIMEOUT`] names (`None`: none, or a value
/// that is not a positive count of milliseconds).
pub fn timeout_header(
    headers: &std::collections::HashMap<String, String>,
) -> Option<std::time::Duration> {
    headers
        .get(HEADER_TIMEOUT)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(std::time::Duration::from_millis)
}
/// Longest item key accepted, in bytes.
pub const MAX_ITEM_KEY_LEN: usize = 1024;

/// The taquba queue of one job type or pipeline: `{prefix}.{name}` where
/// `prefix` is the engine's jobs (or bulk) queue prefix. A name that is not
/// all `[A-Za-z0-9._-]`, holds `..` (the mark of a partition queue, see
/// [`partition_queue`]) or is too long for a queue name, is sanitized (other
/// bytes become `_`, cut to 180 bytes) and suffixed with 16 hex digits of its
/// SHA-256, so two names never share a queue.
pub fn queue_for(prefix: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && !name.contains("..")
        && prefix.len() + 1 + name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        return format!("{prefix}.{name}");
    }
    let mut cut: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let room = 255usize.saturating_sub(prefix.len() + 2 + 16).min(180);
    cut.truncate(room);
    format!("{prefix}.{cut}-{}", &hex_sha256(name.as_bytes())[..16])
}

/// A key written (durably) only to wait for the queue's flush: once that
/// write is durable, every commit visible before it is durable too. The
/// waiters use it after a restart (see the waiters module).
pub const BARRIER_KEY: &[u8] = b"gaffer/v1/barrier";

/// `gaffer/v1/runs/{run_id}`: the active-run record, written with the enqueue and
/// deleted by the terminal settlement.
pub fn run_key(run_id: &str) -> Vec<u8> {
    format!("gaffer/v1/runs/{run_id}").into_bytes()
}

/// `gaffer/v1/debounce/{hex sha256(job_type NUL key)}`: the open burst of
/// the debounce key `key` of `job_type` (`records::DebounceRecord`),
/// written by each debounced submission of the burst and deleted by the
/// transaction that closes it (see `jobs::debounce`).
pub fn debounce_key(job_type: &str, key: &str) -> Vec<u8> {
    let mut named = Vec::with_capacity(job_type.len() + 1 + key.len());
    named.extend_from_slice(job_type.as_bytes());
    named.push(0);
    named.extend_from_slice(key.as_bytes());
    format!("{DEBOUNCE_PREFIX}{}", hex_sha256(&named)).into_bytes()
}

/// Prefix of [`debounce_key`].
pub const DEBOUNCE_PREFIX: &str = "gaffer/v1/debounce/";

/// The queue of the debounce timers of an engine whose jobs queue prefix is
/// `queue_name` (a timer is a scheduled job there, its payload the burst's
/// [`debounce_key`]; its time is the burst's end).
pub fn debounce_queue(queue_name: &str) -> String {
    format!("{queue_name}-debounce")
}

/// `gaffer/v1/signals/{run_id}/{name}`: a signal sent to a job (its
/// payload), kept until the job ends, so a wait on `name` finds it whether
/// it came before the wait, during it, or after (see `jobs::signals`).
pub fn signal_key(run_id: &str, name: &str) -> Vec<u8> {
    format!("gaffer/v1/signals/{run_id}/{name}").into_bytes()
}

/// `gaffer/v1/signals/{run_id}/{name}/from`: who sent the signal that
/// stands, when its sender named itself (a client request's id): written in
/// the transaction that wrote the signal, so a request the intake applies
/// twice finds its own signal and is answered as the one that stands.
/// Under the job's signals prefix: removed with them.
pub fn signal_sender_key(run_id: &str, name: &str) -> Vec<u8> {
    format!("gaffer/v1/signals/{run_id}/{name}/from").into_bytes()
}

/// Prefix of a job's signals ([`signal_key`]).
pub fn signals_prefix(run_id: &str) -> Vec<u8> {
    format!("gaffer/v1/signals/{run_id}/").into_bytes()
}

/// Prefix of every job's signals.
pub const SIGNALS_PREFIX: &[u8] = b"gaffer/v1/signals/";

/// Whether `name` is an acceptable signal name: 1-128 characters of
/// `[A-Za-z0-9_.-]` (the same form as a periodic job's name).
pub fn is_valid_signal_name(name: &str) -> bool {
    is_valid_periodic_name(name)
}

/// `gaffer/v1/outcomes/{run_id}`: the outcome record, written by the terminal settlement.
pub fn outcome_key(run_id: &str) -> Vec<u8> {
    format!("gaffer/v1/outcomes/{run_id}").into_bytes()
}

/// Root of the finished-jobs index: one empty entry per ended job,
/// `gaffer/v1/ended/{type}/{state}/{finished_at_ms:016x}/{run_id}`, written by
/// the transaction that writes the outcome record and deleted with it by
/// retention. Scanned backwards it lists a type's jobs in one state newest
/// first, without reading the outcome records it skips.
pub const ENDED_ROOT: &[u8] = b"gaffer/v1/ended/";
/// Present once every outcome record has its index entry: written when the
/// store is created, or after the one-time backfill of a store made before
/// the index existed.
pub const ENDED_INDEX_READY: &[u8] = b"gaffer/v1/ended-index";

/// The shard of the job or batch `id` in a set of `shards` stores
/// (`gaffer::ShardSet`): the first 8 bytes of `SHA-256(id)`, big-endian,
/// mod `shards` (0 when `shards` is 0). Fixed for the life of the data:
/// every reader and writer of a shard set routes with it.
pub fn shard_of(id: &str, shards: usize) -> usize {
    if shards == 0 {
        return 0;
    }
    let digest = Sha256::digest(id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % shards as u64) as usize
}

/// `gaffer/v1/shard`: which shard of which set the store is, as text
/// ([`shard_marker`]: `"{index}/{count}"`). Written by the first engine
/// started on the store as a shard; every later sharded engine, sharded
/// client and `gaffer --shards` checks it, so a set started with another
/// count or order (which would route ids to the wrong stores) is refused.
pub const SHARD_KEY: &[u8] = b"gaffer/v1/shard";

/// `gaffer/v1/shard/owner`: which process writes the shard
/// ([`ShardOwnerRecord`](crate::records::ShardOwnerRecord): its name in the
/// placement, host, pid, and since when). Written by every start of an
/// engine as a shard (with the marker on the first), whatever placed the
/// shard on it; read by `gaffer health`. Overwritten, never removed.
pub const SHARD_OWNER_KEY: &[u8] = b"gaffer/v1/shard/owner";

/// `gaffer/v1/encryption`: the store's encryption record
/// ([`EncryptionRecord`](crate::sealed::EncryptionRecord): the keys
/// its values may be sealed under, each with a check value). Written by an
/// engine started with a keyring; absent on a store no such engine
/// started on, whose values are all plain.
pub const ENCRYPTION_KEY: &[u8] = b"gaffer/v1/encryption";

/// `gaffer/v1/rekey`: where a rekey pass stands (the key it reseals
/// under and the last key or path it finished), so an interrupted pass
/// goes on from there.
pub const REKEY_KEY: &[u8] = b"gaffer/v1/rekey";

/// The value of [`SHARD_KEY`] for shard `index` of a set of `count`.
pub fn shard_marker(index: usize, count: usize) -> String {
    format!("{index}/{count}")
}

/// Largest shard count of a shard set.
pub const MAX_SHARDS: usize = 4096;

/// The store URL of `shard` in a set of `count` named by `template`: its
/// `{shard}` replaced by the index, zero-padded to two digits at least (and
/// to the width of `count - 1`).
pub fn shard_url(template: &str, shard: usize, count: usize) -> String {
    let width = count.saturating_sub(1).to_string().len().max(2);
    template.replace("{shard}", &format!("{shard:0width$}"))
}

/// Bytes a partition queue adds to its type's queue: `..p` and 16 hex digits.
pub const PARTITION_SUFFIX_LEN: usize = 19;

/// The queue of the jobs of a type whose rate limit is partitioned by a
/// header (`RateLimit::per_header`) and whose header holds `value`:
/// `{base}..p{16 hex digits of the value's SHA-256}`, where `base` is the
/// type's own queue. Each value has its own queue, so a throttled value's
/// backlog waits in its queue while the pool claims other values' jobs.
/// No type's queue ends like this ([`queue_for`] never keeps a `..`).
pub fn partition_queue(base: &str, value: &str) -> String {
    format!("{base}..p{}", &hex_sha256(value.as_bytes())[..16])
}

/// `gaffer/v1/parts/{partition queue}`: the partition queue may hold live
/// jobs. Written (its value: the job's id, a space, the header's value) in
/// the transaction of every job created on a partition queue, and deleted
/// by the type's pool, compared against the value it read, only after the
/// queue's counts showed no live job (pending, scheduled, claimed or
/// dead). So every partition queue with a live job has its mark, and a
/// pool lists its type's values from the marks ([`partition_marks_prefix`])
/// in proportion to the values with live jobs, not to every value ever
/// seen (taquba's own queue listing keeps every queue that ever had a job).
pub fn partition_mark_key(queue: &str) -> Vec<u8> {
    format!("gaffer/v1/parts/{queue}").into_bytes()
}

/// Prefix of the marks of the partition queues of the type queue `base`
/// ([`partition_mark_key`]).
pub fn partition_marks_prefix(base: &str) -> Vec<u8> {
    format!("gaffer/v1/parts/{base}..p").into_bytes()
}

/// A partition mark's value: the id of the job whose creation wrote it,
/// and the header value of its queue.
pub fn partition_mark(job_id: &str, value: &str) -> Vec<u8> {
    format!("{job_id} {value}").into_bytes()
}

/// The header value a partition mark names (lossy for bytes that are not
/// UTF-8, which a mark written by gaffer never holds).
pub fn partition_mark_value(mark: &[u8]) -> Option<String> {
    let at = mark.iter().position(|&b| b == b' ')?;
    Some(String::from_utf8_lossy(&mark[at + 1..]).into_owned())
}

/// `gaffer/v1/parts-listed/{type queue}`: the marks of the type queue's
/// partitions are complete. A store written before marks existed has
/// partition queues without one; the first pool to start on it lists
/// taquba's queues once, marks every partition of its type, and then
/// writes this key.
pub fn partitions_listed_key(base: &str) -> Vec<u8> {
    format!("gaffer/v1/parts-listed/{base}").into_bytes()
}

/// The type queue `queue` is a partition of, if it is one (see
/// [`partition_queue`]).
pub fn partition_base(queue: &str) -> Option<&str> {
    let cut = queue.len().checked_sub(PARTITION_SUFFIX_LEN)?;
    let (base, suffix) = (queue.get(..cut)?, queue.get(cut..)?);
    let hex = suffix.strip_prefix("..p")?;
    (!base.is_empty() && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then_some(base)
}

/// The index segment of a job type: its name when that is all
/// `[A-Za-z0-9._-]` and at most 180 bytes, else the name sanitized, cut and
/// suffixed with 16 hex digits of its SHA-256 (as [`queue_for`] does).
pub fn type_segment(job_type: &str) -> String {
    let q = queue_for("", job_type);
    q[1..].to_string()
}

/// The index's state segment of a job that succeeded.
pub const ENDED_SUCCEEDED: char = 's';
/// The index's state segment of a job that failed.
pub const ENDED_FAILED: char = 'f';
/// The index's state segment of a job that was cancelled.
pub const ENDED_CANCELLED: char = 'c';

/// `gaffer/v1/ended/{type}/{state}/`: one type's ended jobs in one state.
pub fn ended_prefix(job_type_segment: &str, state: char) -> Vec<u8> {
    format!("gaffer/v1/ended/{job_type_segment}/{state}/").into_bytes()
}

/// The position of an ended job in the index, inside its prefix:
/// `{finished_at_ms:016x}/{run_id}` (byte order is time order).
pub fn ended_position(finished_at_ms: u64, run_id: &str) -> String {
    format!("{finished_at_ms:016x}/{run_id}")
}

/// The index entry of a job of `job_type` that ended in `state` at
/// `finished_at_ms` (see [`ENDED_ROOT`]).
pub fn ended_key(job_type: &str, state: char, finished_at_ms: u64, run_id: &str) -> Vec<u8> {
    let mut k = ended_prefix(&type_segment(job_type), state);
    k.extend_from_slice(ended_position(finished_at_ms, run_id).as_bytes());
    k
}

/// `gaffer/v1/paused/{type segment}`: the job type (its name as the value)
/// is paused by an operator: its pool claims nothing until it is resumed,
/// across restarts.
pub fn paused_key(job_type: &str) -> Vec<u8> {
    format!("gaffer/v1/paused/{}", type_segment(job_type)).into_bytes()
}

/// Prefix of the paused-type keys ([`paused_key`]).
pub const PAUSED_PREFIX: &[u8] = b"gaffer/v1/paused/";

/// `gaffer/v1/paused-values/{type segment}/{value}`: the jobs of one value
/// of the partitioning header of `job_type` (its fairness, limit per key or
/// rate limit per header) are held by an operator: the type's pool claims
/// nothing from the value's partition queue until it is resumed, across
/// restarts. The value is stored raw at the key's end (any bytes but the
/// key's length, see [`MAX_PAUSED_VALUE_LEN`]); the record's value is the
/// header's name.
pub fn paused_value_key(job_type: &str, value: &str) -> Vec<u8> {
    let mut k = paused_values_prefix(job_type);
    k.extend_from_slice(value.as_bytes());
    k
}

/// Prefix of one type's paused values ([`paused_value_key`]):
/// `gaffer/v1/paused-values/{type segment}/` (a type segment holds no `/`).
pub fn paused_values_prefix(job_type: &str) -> Vec<u8> {
    format!("gaffer/v1/paused-values/{}/", type_segment(job_type)).into_bytes()
}

/// The longest header value that can be paused, in bytes.
pub const MAX_PAUSED_VALUE_LEN: usize = 1024;

/// Prefix of the periodic jobs' records ([`periodic_key`]).
pub const PERIODIC_PREFIX: &[u8] = b"gaffer/v1/periodic/";

/// `gaffer/v1/periodic/{name}`: the record of the periodic job `name` (its
/// schedule and the last tick it handled), written in the transaction that
/// enqueues each tick's job.
pub fn periodic_key(name: &str) -> Vec<u8> {
    format!("gaffer/v1/periodic/{name}").into_bytes()
}

/// The idempotency key of the run of periodic job `name` for its tick at
/// `tick_ms` (epoch ms): `gaffer.periodic/{name}/{tick_ms}`. Its run id
/// ([`keyed_run_id`]) is the tick's job id, the same on every engine and
/// after every restart, so a tick fired twice is one job.
pub fn periodic_tick_key(name: &str, tick_ms: u64) -> String {
    format!("gaffer.periodic/{name}/{tick_ms}")
}

/// Whether `name` is an acceptable periodic job name: 1-128 bytes of
/// `[A-Za-z0-9_.-]`.
pub fn is_valid_periodic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Object prefix of all memo entries of a run (trailing slash included, so
/// `run` never matches `run-suffix`).
pub fn memo_dir(blob_prefix: &str, run_id: &str) -> String {
    format!("{blob_prefix}/v1/memo/{run_id}/")
}

/// Object prefix of the memo entries of a batch item's run:
/// `{blob}/v1/batches/{batch_id}/memo/{run_id}/`, under the batch's own
/// prefix so that forgetting the batch removes one prefix.
pub fn item_memo_dir(blob_prefix: &str, batch_id: &str, run_id: &str) -> String {
    format!("{}memo/{run_id}/", batch_blob_dir(blob_prefix, batch_id))
}

/// Object path of one memo entry in the memo `dir` ([`memo_dir`] or
/// [`item_memo_dir`]): the entry's key, hashed.
pub fn memo_entry_path(dir: &str, key: &str) -> String {
    format!("{dir}{}", hex_sha256(key.as_bytes()))
}

/// Object path of an output too large for KV: `{blob}/v1/outputs/{run_id}/{job_id}`.
pub fn output_blob_path(blob_prefix: &str, run_id: &str, job_id: &str) -> String {
    format!("{blob_prefix}/v1/outputs/{run_id}/{job_id}")
}

/// Object prefix of all output blobs of a run.
pub fn output_blob_dir(blob_prefix: &str, run_id: &str) -> String {
    format!("{blob_prefix}/v1/outputs/{run_id}/")
}

/// `gaffer/v1/batches/{batch_id}/`: everything of one batch in KV.
pub fn batch_prefix(batch_id: &str) -> Vec<u8> {
    format!("gaffer/v1/batches/{batch_id}/").into_bytes()
}

/// `gaffer/v1/batches/{batch_id}/head`.
pub fn batch_head_key(batch_id: &str) -> Vec<u8> {
    format!("gaffer/v1/batches/{batch_id}/head").into_bytes()
}

/// `gaffer/v1/batches/{batch_id}/manifest/`.
pub fn manifest_prefix(batch_id: &str) -> Vec<u8> {
    format!("gaffer/v1/batches/{batch_id}/manifest/").into_bytes()
}

/// `gaffer/v1/batches/{batch_id}/manifest/{index:08}`.
pub fn manifest_chunk_key(batch_id: &str, index: u32) -> Vec<u8> {
    format!("gaffer/v1/batches/{batch_id}/manifest/{index:08}").into_bytes()
}

/// `gaffer/v1/batches/{batch_id}/items/`.
pub fn item_marker_prefix(batch_id: &str) -> Vec<u8> {
    format!("gaffer/v1/batches/{batch_id}/items/").into_bytes()
}

/// `gaffer/v1/batches/{batch_id}/items/{key}` (the raw key).
pub fn item_marker_key(batch_id: &str, key: &str) -> Vec<u8> {
    let mut k = item_marker_prefix(batch_id);
    k.extend_from_slice(key.as_bytes());
    k
}

/// `gaffer/v1/batches/{batch_id}/active/`.
pub fn item_active_prefix(batch_id: &str) -> Vec<u8> {
    format!("gaffer/v1/batches/{batch_id}/active/").into_bytes()
}

/// `gaffer/v1/batches/{batch_id}/active/{key}`: the job id of the item's live
/// delivery; exists while the item is queued or running.
pub fn item_active_key(batch_id: &str, key: &str) -> Vec<u8> {
    let mut k = item_active_prefix(batch_id);
    k.extend_from_slice(key.as_bytes());
    k
}

/// The run id of a bulk item: hex SHA-256 of `{batch_id}/{key}`.
pub fn item_run_id(batch_id: &str, key: &str) -> String {
    hex_sha256(format!("{batch_id}/{key}").as_bytes())
}

/// Object prefix of everything a batch stored in the object store.
pub fn batch_blob_dir(blob_prefix: &str, batch_id: &str) -> String {
    format!("{blob_prefix}/v1/batches/{batch_id}/")
}

/// Lowercase hex SHA-256.
pub fn hex_sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    s
}

/// SHA-256 of a job's identity: its type name and payload bytes. Two submissions
/// under one id are "the same job" iff their input hashes are equal.
pub fn input_hash(job_type: &str, payload: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((job_type.len() as u64).to_be_bytes());
    h.update(job_type.as_bytes());
    h.update(payload);
    h.finalize().into()
}

/// The run id of a keyed job: hex SHA-256 of the idempotency key.
pub fn keyed_run_id(key: &str) -> String {
    hex_sha256(key.as_bytes())
}

/// The run id of the `index`th follow-up of the run `parent`
/// (`Effects::then`): hex SHA-256 of
/// `gaffer.then`, the parent's id and the index, NUL-separated.
pub fn followup_run_id(parent: &str, index: usize) -> String {
    hex_sha256(format!("gaffer.then\0{parent}\0{index}").as_bytes())
}

/// The run id of the completion job of generation `generation` of the batch
/// `batch_id`: hex SHA-256 of `gaffer.complete`, the batch id and the
/// generation, NUL-separated.
pub fn completion_run_id(batch_id: &str, generation: u64) -> String {
    hex_sha256(format!("gaffer.complete\0{batch_id}\0{generation}").as_bytes())
}

/// Whether `id` is an acceptable job id: 1–128 bytes of `[A-Za-z0-9_-]`.
pub fn is_valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether `id` is an acceptable batch id.
pub fn check_batch_id(id: &str) -> crate::error::Result<()> {
    if is_valid_id(id) {
        Ok(())
    } else {
        Err(crate::error::EngineError::InvalidBatchId(id.to_string()))
    }
}

/// Whether `key` is an acceptable item key.
pub fn check_item_key(key: &str) -> crate::error::Result<()> {
    let bad = |reason: &str| {
        Err(crate::error::EngineError::InvalidItemKey {
            key: key.chars().take(64).collect(),
            reason: reason.into(),
        })
    };
    if key.is_empty() {
        return bad("an item key must not be empty");
    }
    if key.len() > MAX_ITEM_KEY_LEN {
        return bad("an item key must be at most 1024 bytes");
    }
    if key.contains('\0') {
        return bad("an item key must not contain NUL");
    }
    Ok(())
}

#[cfg(test)]
mod tests;
