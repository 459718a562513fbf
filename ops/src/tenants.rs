//! The values of a job type whose jobs are spread over partition queues
//! (fairness, a limit per key or a rate limit per header: #37 §4), as
//! `gaffer stats TYPE` and the dashboard's queue page show them: the values
//! with the most ready and running jobs, the rest summed, and each shown
//! value's oldest ready job's age.
//!
//! **What it reads, and its cost.** The type's partition queues come from
//! their marks (`keys::partition_mark_key`: every job created on a
//! partition queue writes its queue's mark, with the header's value, and a
//! fair type's pool deletes it once the queue holds no live job), a prefix
//! scan of at most [`MAX_VALUES_EXAMINED`] + 1 keys: in proportion to the
//! values with live jobs, not to every value ever seen. On a store whose
//! marks are not complete yet (written before marks existed, until a pool
//! of the type has started: `keys::partitions_listed_key`), they come from
//! taquba's `list_queues` instead, which reads the counter keys of *every
//! queue that ever had a job* (taquba 0.16 keeps a queue's counters after
//! it drains, and lists by no prefix nor limit; `gaffer stats` and the
//! dashboard's Queues page read the same list). Then, for at most
//! [`MAX_VALUES_EXAMINED`] of the type's partition queues (in name order,
//! which is the order of their hash: a sample unrelated to their size),
//! the queue's counters (`stats`: five point reads each); the report says
//! when there were more (`more`). Finally, for each value shown only
//! (`top`, at most [`MAX_TOP`]), the first page of one of its ready jobs
//! (or, with none ready, of its running ones) to recover the value and
//! the age. The paused values are a prefix scan of at most
//! [`MAX_PAUSED_LISTED`] keys.
//!
//! **The value's name.** A partition queue is named by the first 16 hex
//! digits of its value's SHA-256 (`keys::partition_queue`), so the value
//! cannot be read from the name: it is read from the queue's mark, else
//! recovered from the headers of one of the queue's jobs (the header whose
//! value hashes to the queue's name), or from its pause record. A value whose queue holds neither a
//! ready nor a running job (only scheduled ones, say) shows as
//! `(hashed …)` with the queue's digits.

use std::collections::{BTreeMap, HashMap};

use gaffer_layout::keys;
use taquba::JobStatus;

use crate::error::OpsError;
use crate::report::{Tenants, ValueRow, ValuesRest};
use crate::store::Store;

/// The most partition queues of one type whose counters one read looks at.
pub const MAX_VALUES_EXAMINED: usize = 1_000;

/// The most values one read shows (`--top`).
pub const MAX_TOP: usize = 100;

/// The most paused values one read lists.
pub const MAX_PAUSED_LISTED: usize = 1_000;

/// The counts of a type's values, before the top is chosen (one store's,
/// or a shard set's added up with [`ValueCounts::add`]).
#[derive(Debug, Clone, Default)]
pub struct ValueCounts {
    /// Live queues (a job ready, running or scheduled), by queue name:
    /// (ready, running, scheduled).
    pub live: BTreeMap<String, (i64, i64, i64)>,
    /// The type's partition queues listed.
    pub queues: usize,
    /// Those whose counters were read.
    pub examined: usize,
    /// More partition queues exist than were read (the cap).
    pub more: bool,
    /// Values named by their queue's mark, by queue.
    pub named: BTreeMap<String, String>,
}

impl ValueCounts {
    /// Add another store's counts (a shard set: the same value has the
    /// same queue name on every shard).
    pub fn add(&mut self, other: &ValueCounts) {
        for (q, (r, n, s)) in &other.live {
            let e = self.live.entry(q.clone()).or_default();
            e.0 += r;
            e.1 += n;
            e.2 += s;
        }
        self.queues += other.queues;
        self.examined += other.examined;
        self.more |= other.more;
        for (q, v) in &other.named {
            self.named.entry(q.clone()).or_insert_with(|| v.clone());
        }
    }

    /// The report's rows: the `top` values with the most ready and running
    /// jobs (ready first on a tie, then the queue's name), and the rest
    /// summed. Values, headers and ages are left for
    /// [`Store::describe_values`].
    pub fn top(&self, job_type: &str, own_queue: &str, top: usize) -> Tenants {
        let mut rows: Vec<(&String, &(i64, i64, i64))> = self.live.iter().collect();
        rows.sort_by(|(qa, a), (qb, b)| {
            (b.0 + b.1)
                .cmp(&(a.0 + a.1))
                .then(b.0.cmp(&a.0))
                .then(qa.cmp(qb))
        });
        let top = top.min(MAX_TOP);
        let mut shown = Vec::new();
        let mut rest = ValuesRest::default();
        for (i, (queue, (ready, running, scheduled))) in rows.into_iter().enumerate() {
            if i < top {
                shown.push(ValueRow {
                    value: self.named.get(queue).cloned(),
                    header: None,
                    no_header: queue == own_queue,
                    queue: queue.clone(),
                    ready: *ready,
                    running: *running,
                    scheduled: *scheduled,
                    oldest_ready_ms: None,
                    oldest_ready_age_ms: None,
                    paused: false,
                });
            } else {
                rest.values += 1;
                rest.ready += ready;
                rest.running += running;
                rest.scheduled += scheduled;
            }
        }
        Tenants {
            job_type: job_type.to_string(),
            values: shown,
            rest,
            queues: self.queues,
            examined: self.examined,
            more: self.more,
            paused: Vec::new(),
        }
    }
}

impl Store {
    /// `gaffer stats TYPE`: the type's values, the `top` with the most
    /// ready and running jobs (see the module's notes for the cost).
    pub async fn tenants(&self, job_type: &str, top: usize) -> Result<Tenants, OpsError> {
        let counts = self.value_counts(job_type).await?;
        let own = keys::queue_for(&self.jobs_prefix, job_type);
        let mut report = counts.top(job_type, &own, top);
        let now = now_ms();
        self.describe_values(&mut report, now).await?;
        let paused = self.paused_values(job_type).await?;
        apply_paused(&mut report, &own, paused);
        Ok(report)
    }

    /// The counts of `job_type`'s live queues: its own (jobs without the
    /// header) and at most [`MAX_VALUES_EXAMINED`] of its partition queues.
    pub async fn value_counts(&self, job_type: &str) -> Result<ValueCounts, OpsError> {
        let own = keys::queue_for(&self.jobs_prefix, job_type);
        let mut counts = ValueCounts::default();
        let mut examine = vec![own.clone()];
        let marked = self
            .view()
            .kv_get(&keys::partitions_listed_key(&own))
            .await?
            .is_some();
        if marked {
            let prefix = keys::partition_marks_prefix(&own);
            let strip = keys::partition_mark_key("").len();
            let page = self
                .view()
                .kv_scan(
                    &prefix,
                    (
                        std::ops::Bound::<Vec<u8>>::Unbounded,
                        std::ops::Bound::Unbounded,
                    ),
                    taquba::KvOrder::Ascending,
                    MAX_VALUES_EXAMINED + 1,
                )
                .await?;
            counts.more = page.entries.len() > MAX_VALUES_EXAMINED || page.more;
            for (key, mark) in page.entries.into_iter().take(MAX_VALUES_EXAMINED) {
                let Some(queue) = key.get(strip..).and_then(|q| std::str::from_utf8(q).ok()) else {
                    continue;
                };
                if let Some(value) = keys::partition_mark_value(&mark).filter(|v| !v.is_empty()) {
                    counts.named.insert(queue.to_string(), value);
                }
                examine.push(queue.to_string());
            }
            counts.queues = examine.len() - 1;
            counts.examined = counts.queues;
        } else {
            for (queue, kind, _) in self.queues(Some(job_type)).await? {
                if kind != "job" || queue == own {
                    continue;
                }
                counts.queues += 1;
                if counts.examined < MAX_VALUES_EXAMINED {
                    counts.examined += 1;
                    examine.push(queue);
                }
            }
            counts.more = counts.examined < counts.queues;
        }
        for queue in examine {
            let s = self.view().stats(&queue).await?;
            if s.pending + s.claimed + s.scheduled > 0 {
                counts
                    .live
                    .insert(queue, (s.pending, s.claimed, s.scheduled));
            }
        }
        Ok(counts)
    }

    /// Fill each shown row's value, header and oldest ready job from this
    /// store: the first ready job of its queue (claim order: priority, then
    /// enqueue order; without priorities, the oldest; as `gaffer stats`
    /// reads it, `queries/ready.rs`, through this replaying reader), else
    /// its first running one for the value alone. A row this store already
    /// described keeps its value; an older ready job here lowers its age.
    pub async fn describe_values(&self, report: &mut Tenants, now_ms: u64) -> Result<(), OpsError> {
        let own = keys::queue_for(&self.jobs_prefix, &report.job_type);
        for row in &mut report.values {
            let ready = self.first_job(&row.queue, JobStatus::Pending).await?;
            if let Some(job) = &ready {
                let at = job.enqueued_at;
                if row.oldest_ready_ms.is_none_or(|o| at < o) {
                    row.oldest_ready_ms = Some(at);
                    row.oldest_ready_age_ms = Some(now_ms.saturating_sub(at));
                }
            }
            if row.no_header || (row.value.is_some() && row.header.is_some()) {
                continue;
            }
            let job = match ready {
                Some(job) => Some(job),
                None => self.first_job(&row.queue, JobStatus::Claimed).await?,
            };
            if let Some((header, value)) = job
                .as_ref()
                .and_then(|j| value_of(&own, &row.queue, &j.headers))
            {
                row.header = Some(header);
                row.value = Some(value);
            }
        }
        Ok(())
    }

    /// The values of `job_type` an operator paused, with the header each
    /// was paused under (at most [`MAX_PAUSED_LISTED`]).
    pub async fn paused_values(&self, job_type: &str) -> Result<Vec<(String, String)>, OpsError> {
        let prefix = keys::paused_values_prefix(job_type);
        let page = self
            .view()
            .kv_scan(
                &prefix,
                (
                    std::ops::Bound::<Vec<u8>>::Unbounded,
                    std::ops::Bound::Unbounded,
                ),
                taquba::KvOrder::Ascending,
                MAX_PAUSED_LISTED,
            )
            .await?;
        Ok(page
            .entries
            .into_iter()
            .filter_map(|(k, v)| {
                let value = k.get(prefix.len()..)?;
                Some((
                    String::from_utf8_lossy(&v).into_owned(),
                    String::from_utf8_lossy(value).into_owned(),
                ))
            })
            .collect())
    }
}

/// Mark the shown rows whose value is paused, and name those rows by the
/// pause record when no job named them; `paused` is (header, value).
pub fn apply_paused(report: &mut Tenants, own_queue: &str, paused: Vec<(String, String)>) {
    let by_queue: HashMap<String, &(String, String)> = paused
        .iter()
        .map(|p| (keys::partition_queue(own_queue, &p.1), p))
        .collect();
    for row in &mut report.values {
        if let Some((header, value)) = by_queue.get(&row.queue) {
            row.paused = true;
            row.header.get_or_insert_with(|| header.clone());
            row.value.get_or_insert_with(|| value.clone());
        }
    }
    report.paused.extend(paused);
    report.paused.sort();
    report.paused.dedup();
}

/// Now, epoch ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The header and value of `headers` whose partition queue of `own` is
/// `queue`.
fn value_of(own: &str, queue: &str, headers: &HashMap<String, String>) -> Option<(String, String)> {
    let mut found: Vec<(&String, &String)> = headers
        .iter()
        .filter(|(k, v)| !k.starts_with("gaffer.") && keys::partition_queue(own, v) == queue)
        .collect();
    found.sort();
    found
        .into_iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_values_by_ready_and_running_and_the_rest_summed() {
        let mut c = ValueCounts::default();
        c.live.insert("q..pa".into(), (5, 1, 0));
        c.live.insert("q..pb".into(), (1, 1, 3));
        c.live.insert("q..pc".into(), (0, 9, 0));
        c.live.insert("q".into(), (2, 0, 0));
        c.queues = 3;
        c.examined = 3;
        let mut other = ValueCounts::default();
        other.live.insert("q..pb".into(), (1, 0, 0));
        c.add(&other);
        let t = c.top("t", "q", 2);
        let shown: Vec<(&str, i64, i64)> = t
            .values
            .iter()
            .map(|r| (r.queue.as_str(), r.ready, r.running))
            .collect();
        assert_eq!(shown, vec![("q..pc", 0, 9), ("q..pa", 5, 1)]);
        assert_eq!(t.rest.values, 2);
        assert_eq!(t.rest.ready, 2 + 2);
        assert_eq!(t.rest.running, 1);
        assert_eq!(t.rest.scheduled, 3);
    }

    #[test]
    fn the_value_is_the_header_whose_hash_names_the_queue() {
        let queue = keys::partition_queue("jobs.t", "acme");
        let headers = HashMap::from([
            ("region".to_string(), "eu".to_string()),
            ("tenant".to_string(), "acme".to_string()),
        ]);
        assert_eq!(
            value_of("jobs.t", &queue, &headers),
            Some(("tenant".into(), "acme".into()))
        );
        assert_eq!(value_of("jobs.u", &queue, &headers), None);
    }
}
