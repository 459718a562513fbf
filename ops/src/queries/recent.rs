//! The counts a page that refreshes shows: the engine's counters snapshot
//! when a live engine wrote it lately, else the counters themselves.
//!
//! taquba's counters are merge operands: every job adds several
//! (enqueued, claimed, released, done, …), and a read of a counter folds
//! every operand since the writer's last memtable flush, through a reader
//! or through the writer's own view alike. Beside a busy engine that is
//! tens of thousands of operands: three quarters of a refreshing tab's CPU
//! (`web/benches/slowdown.rs`, profiled). The engine already folds them
//! every [`SNAPSHOT_EVERY_MS`] for its snapshot (`gaffer/v1/stats`,
//! written when they changed, and at least once a minute), one small
//! record a refresh reads at the cost of one key.

use std::collections::BTreeMap;

use gaffer_layout::keys;
use gaffer_layout::records;

use crate::error::OpsError;
use crate::report::Stats;
use crate::store::Store;

/// How often the engine looks at its counters for the snapshot (the
/// sweeper's `snapshot::EVERY`): the counts a refresh shows lag by at most
/// about this.
pub const SNAPSHOT_EVERY_MS: u64 = 5_000;

/// A snapshot older than this is not used: the engine writes one at least
/// every minute while it runs (`snapshot::IDLE_EVERY`), so an older one is
/// a stopped engine's, whose last changes it may lack.
const FRESH_MS: u64 = 65_000;

impl Store {
    /// Each queue's counts and its oldest ready job for a refresh of a
    /// page that last showed `shown` (as of the given epoch ms: a page
    /// load's exact read, or this function's last answer), never older
    /// than it; with the time the answer is as of:
    ///
    /// - the engine's snapshot, when it is at most a minute old and newer
    ///   than `shown`, with each queue's oldest ready job read now
    ///   ([`Stats::snapshot_at_ms`] says when the snapshot was taken: up to
    ///   [`SNAPSHOT_EVERY_MS`] behind);
    /// - `shown` again, its ages brought to now, when the snapshot is
    ///   recent but not newer: nothing is read but the snapshot's key until
    ///   the engine takes its next one;
    /// - else (no engine wrote one lately: stopped, or over 2 000 queues)
    ///   everything read now, as [`Self::stats`] reads it.
    ///
    /// For the dashboard's refreshes; what must be exact (a listing that
    /// skips a state its counters call empty) reads [`Self::stats`].
    pub async fn stats_recent(
        &self,
        shown: Option<(u64, &Stats)>,
    ) -> Result<(u64, Stats), OpsError> {
        let now = crate::format::now_ms();
        let snapshot = match self.view().kv_get(keys::STATS_KEY).await? {
            Some(raw) => Some(records::decode::<records::StatsSnapshot>(
                keys::STATS_KEY,
                &raw,
            )?),
            None => None,
        };
        let snapshot = snapshot
            .filter(|s| self.unflushed.is_none() && now.saturating_sub(s.at_ms) <= FRESH_MS);
        match (snapshot, shown) {
            (Some(s), Some((at, shown))) if s.at_ms <= at => {
                let mut again = shown.clone();
                again.snapshot_at_ms = Some(at);
                for row in &mut again.queues {
                    row.oldest_ready_age_ms = row.oldest_ready_ms.map(|t| now.saturating_sub(t));
                }
                Ok((at, again))
            }
            (Some(s), _) => {
                let at = s.at_ms;
                let mut stats = self.rows_from_snapshot(s, &BTreeMap::new());
                self.oldest_ready(&mut stats, None, now).await?;
                Ok((at, stats))
            }
            (None, _) => Ok((now, self.stats(false).await?)),
        }
    }
}
