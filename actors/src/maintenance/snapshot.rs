//! The engine's snapshot of its queues' counters (`gaffer/v1/stats`).
//!
//! A reader that opens the store from another process (`gaffer stats`)
//! sees the flushed state and must read every WAL object since the
//! writer's last memtable flush to count exactly: SlateDB flushes the
//! memtable at 64 MiB or after 4 096 WAL flushes, and taquba 0.16 sets
//! neither, so that is up to thousands of objects, about 0.5 s beside an
//! idle engine after 100 000 jobs. The sweeper instead writes the counters
//! of every queue as one small record, every [`EVERY`] while they change
//! and at least every [`IDLE_EVERY`], so a reader finds a recent one among
//! the newest WAL objects. Nothing is written while nothing changes (but
//! the idle refresh), and a busy engine's record joins a flush it makes
//! anyway.

use std::time::Duration;

use taquba::SettlementEffects;

use crate::error::Result;
use crate::layout::keys;
use crate::layout::records::{self, QueueCounts, StatsSnapshot};
use crate::services::Services;

/// How often the counters are looked at.
pub(crate) const EVERY: Duration = Duration::from_secs(5);
/// Longest time between two snapshots, even when nothing changed: a reader
/// looks back at most about this far.
pub(crate) const IDLE_EVERY: Duration = Duration::from_secs(60);
/// More queues than this (tenants' partition queues, say) and no snapshot
/// is written: a reader counts from the WAL instead.
pub(crate) const MAX_QUEUES: usize = 2_000;

/// What was last written: the counters and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Last {
    queues: Vec<QueueCounts>,
    at_ms: Option<u64>,
}

/// Read every queue's counters and write them if they changed since `last`
/// or `IDLE_EVERY` passed; answers what is written now (`last` when
/// nothing was).
pub(crate) async fn take(services: &Services, last: Last) -> Result<Last> {
    let queue = services.queue()?;
    let view = queue.view();
    let names = view.list_queues().await?;
    if names.len() > MAX_QUEUES {
        return Ok(last);
    }
    let mut queues = Vec::with_capacity(names.len());
    for name in names {
        queues.push(QueueCounts::from(view.stats(&name).await?));
    }
    let now = services.clock().now_ms();
    let idle_ms = u64::try_from(IDLE_EVERY.as_millis()).unwrap_or(u64::MAX);
    let due = last
        .at_ms
        .is_none_or(|at| now.saturating_sub(at) >= idle_ms);
    if queues == last.queues && !due {
        return Ok(last);
    }
    let record = StatsSnapshot {
        at_ms: now,
        queues: queues.clone(),
    };
    let bytes = records::encode(&record)?;
    if bytes.len() > taquba::MAX_KV_VALUE_SIZE {
        return Ok(last);
    }
    let fx = SettlementEffects::default().kv_put(keys::STATS_KEY, bytes);
    queue.commit_effects(fx).await?;
    Ok(Last {
        queues,
        at_ms: Some(now),
    })
}
