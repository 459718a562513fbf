//! `gaffer stats --watch`: the stats of a store read once in full, then
//! each round from the WAL objects written since the last one only.
//!
//! A [`StatsWatch`] keeps the flushed counters of the store's reader (its
//! base, read [`crate::Reading::Flushed`]) and the WAL's changes past them
//! (the private `unflushed::Tail`). A round folds the new WAL objects into
//! the changes and lays them over the base: the counts and each queue's
//! oldest ready job as the one-shot `gaffer stats --exact` gives them, at
//! the cost of the objects written since the last round (a few per second
//! beside a busy engine) instead of every object past the writer's last
//! memtable flush (up to 4 096) each time.
//!
//! The one-shot command's shortcut, the engine's counters snapshot among
//! the newest WAL objects, is not taken: the snapshot is a few seconds old
//! (`snapshot_at_ms`), and finding it reads objects back from the newest
//! every round, where the exact fold, once the first round is read, only
//! reads the new ones: it is exact and no dearer.

use std::collections::BTreeMap;
use std::time::Duration;

use taquba::JobStatus;

use crate::error::OpsError;
use crate::report::{QueueRow, Stats};
use crate::store::Store;
use crate::unflushed::{Advance, PendingKey, Tail};

/// The base's ready entries read at first per queue; each page after
/// reads twice as many as were read, up to 1 000.
const FIRST_PAGE: usize = 16;

/// How long a watch keeps one base before it reopens the store and reads
/// it in full again (its caller's to do: [`Round::Rebase`] says when it
/// must sooner).
///
/// The base is a reader in `FollowLatest` mode that does not replay the
/// WAL and stays on the manifest it opened on (taquba 0.16): nothing
/// protects the SSTs of that manifest from the writer's garbage collector
/// (SlateDB 0.17: every 10 minutes, it deletes the SSTs the latest manifest
/// no longer names, once 5 minutes old). A compaction after the open can
/// drop an SST the base reads from the manifest at once, and the next GC
/// run delete it; the sooner a base is left, the less likely a round finds
/// it gone (a round that fails is answered by a rebase, too). A minute
/// also bounds the changes kept and the flushed ready entries walked past
/// (those claimed since), at the cost of a full read a minute.
pub const REBASE_AFTER: Duration = Duration::from_secs(60);

/// The stats of a store kept across rounds (see the module's
/// documentation).
#[derive(Debug)]
pub struct StatsWatch {
    /// The flushed counters, per queue in queue order (no oldest ready
    /// job).
    base: Stats,
    /// The WAL's changes past them (`None`: the store was not read
    /// [`crate::Reading::Flushed`]; each round reads its view in full).
    tail: Option<Tail>,
    /// Per queue, the base's first ready entries, as far as a round read
    /// them.
    ready: BTreeMap<String, BaseReady>,
}

/// A queue's first ready entries in the base (claim order), read once
/// and kept: the base does not change, so a round need not walk again past
/// the entries the WAL removed since (a scan over the base's tombstones
/// too: at 500 jobs/s, keeping them took the watch from 15–19.5 % of the
/// engine's CPU to 9.7–10 %, benches/README.md).
#[derive(Debug, Default)]
struct BaseReady {
    /// The entries read, in claim order.
    keys: Vec<PendingKey>,
    /// How many of the first are removed by the changes (or put again:
    /// then the changes' own entry stands for it). A removed entry stays
    /// removed or comes back as a change, so this only grows.
    passed: usize,
    /// Where the next page starts (`None` and `read_all`: none left).
    cursor: Option<Vec<u8>>,
    read_all: bool,
}

impl BaseReady {
    /// The first ready entry of `queue`: the base's first not removed by
    /// `changes`, or the first entry `changes` added, whichever comes
    /// first (as `Store::first_ready`).
    async fn first(
        &mut self,
        store: &Store,
        queue: &str,
        changes: Option<&BTreeMap<PendingKey, bool>>,
    ) -> Result<Option<PendingKey>, OpsError> {
        let added = changes
            .and_then(|c| c.iter().find(|(_, there)| **there))
            .map(|(k, _)| k.clone());
        let kept = loop {
            while let Some(k) = self.keys.get(self.passed)
                && changes.is_some_and(|c| c.contains_key(k))
            {
                self.passed += 1;
            }
            if let Some(k) = self.keys.get(self.passed) {
                break Some(k.clone());
            }
            // Every base entry read is passed: one read later comes after
            // them, so after `added` too if it comes before the last.
            let past = matches!((&added, self.keys.last()), (Some(a), Some(l)) if a < l);
            if self.read_all || past {
                break None;
            }
            let limit = (self.keys.len() * 2).clamp(FIRST_PAGE, 1_000);
            let page = store
                .view()
                .list_jobs(queue, JobStatus::Pending, self.cursor.as_deref(), limit)
                .await?;
            self.keys.extend(page.jobs.iter().map(PendingKey::of));
            match page.next_cursor {
                Some(next) => self.cursor = Some(next),
                None => self.read_all = true,
            }
        };
        Ok(match (added, kept) {
            (Some(a), Some(k)) => Some(a.min(k)),
            (a, k) => a.or(k),
        })
    }
}

impl StatsWatch {
    /// How many changes the watch keeps past its base.
    pub fn kept(&self) -> usize {
        self.tail.as_ref().map_or(0, Tail::kept)
    }
}

/// What a round of [`Store::watch_round`] gives.
#[derive(Debug)]
pub enum Round {
    /// The stats now.
    Stats(Stats),
    /// The watch cannot go on over this base (a WAL object it needs was
    /// deleted, or it keeps too many changes): reopen the store and start
    /// a new watch.
    Rebase,
}

impl Store {
    /// Start a watch of the stats: every WAL object past the flushed
    /// state read. Gives the watch and the stats now.
    pub async fn watch_stats(&self) -> Result<(StatsWatch, Stats), OpsError> {
        let above = self.activity().map_or(0, |a| a.durable_seq);
        let base = self.rows_from_counters(&BTreeMap::new()).await?;
        let tail = match &self.unflushed {
            Some(u) => Some(u.tail(above).await?),
            None => None,
        };
        let mut watch = StatsWatch {
            base,
            tail,
            ready: BTreeMap::new(),
        };
        let stats = self.watched(&mut watch).await?;
        Ok((watch, stats))
    }

    /// A round of `watch`: the WAL objects written since the last one
    /// folded in, and the stats now.
    pub async fn watch_round(&self, watch: &mut StatsWatch) -> Result<Round, OpsError> {
        if let (Some(u), Some(tail)) = (&self.unflushed, &mut watch.tail)
            && u.advance(tail).await? == Advance::Rebase
        {
            return Ok(Round::Rebase);
        }
        self.watched(watch).await.map(Round::Stats)
    }

    /// The stats of `watch`: its base with its changes over it, and each
    /// queue's oldest ready job from the base's ready jobs with the changes
    /// to them over it.
    async fn watched(&self, watch: &mut StatsWatch) -> Result<Stats, OpsError> {
        let Some(tail) = &watch.tail else {
            return self.stats(true).await;
        };
        let mut stats = over_base(&watch.base, tail, |q| self.classify(q));
        let now_ms = crate::format::now_ms();
        for row in &mut stats.queues {
            if row.pending <= 0 {
                continue;
            }
            let base = watch.ready.entry(row.queue.clone()).or_default();
            let changes = tail.pending().of(&row.queue);
            if let Some(first) = base.first(self, &row.queue, changes).await? {
                row.oldest_ready_ms = Some(first.enqueued_at);
                row.oldest_ready_age_ms = Some(now_ms.saturating_sub(first.enqueued_at));
            }
        }
        Ok(stats)
    }
}

/// The rows of `base` with `tail`'s counter changes over them, and a row
/// for each queue only the changes name (`classify`: its kind and name;
/// `None`: not the engine's, left out).
fn over_base(
    base: &Stats,
    tail: &Tail,
    classify: impl Fn(&str) -> Option<(&'static str, String)>,
) -> Stats {
    let mut rows: BTreeMap<String, QueueRow> = base
        .queues
        .iter()
        .map(|r| (r.queue.clone(), r.clone()))
        .collect();
    for (queue, _) in tail.counters().keys() {
        if rows.contains_key(queue) {
            continue;
        }
        if let Some((kind, name)) = classify(queue) {
            rows.insert(
                queue.clone(),
                QueueRow {
                    queue: queue.clone(),
                    kind,
                    name,
                    pending: 0,
                    scheduled: 0,
                    running: 0,
                    done: 0,
                    dead: 0,
                    oldest_ready_ms: None,
                    oldest_ready_age_ms: None,
                },
            );
        }
    }
    for row in rows.values_mut() {
        let changes = tail.counters();
        let count = |metric: &str, flushed: i64| {
            changes
                .get(&(row.queue.clone(), metric.to_string()))
                .map_or(flushed, |c| c.over(flushed))
        };
        let (pending, scheduled, running, done, dead) = (
            count("pending", row.pending),
            count("scheduled", row.scheduled),
            count("claimed", row.running),
            count("done", row.done),
            count("dead", row.dead),
        );
        (row.pending, row.scheduled, row.running, row.done, row.dead) =
            (pending, scheduled, running, done, dead);
    }
    Stats {
        queues: rows.into_values().collect(),
        snapshot_at_ms: None,
    }
}
