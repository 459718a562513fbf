//! `gaffer stats --watch`: the unflushed WAL read once, then each round
//! only the objects written since the last one, folded into the changes
//! kept since the flushed state (the base).
//!
//! A [`Tail`] keeps, above the base's sequence number, each counter's
//! change ([`Counter`], composed in commit order: a put then merges is a
//! put of the sum, a put after anything is the put) and each ready job's
//! last change ([`PendingChanges`]). Overlaid on the same base reader they
//! give the counts and the oldest ready jobs a replay would: the base does
//! not move (the reader stays on the manifest it opened on), so the
//! changes since it are exact however far the writer has flushed since.
//!
//! WAL ids are consecutive, so a round probes for the newest object from
//! the last one read, as [`Unflushed::find`] does from the flushed one,
//! and reads the objects between. A WAL object's rows at or below the
//! sequence number already folded are left out. A writer deletes a WAL
//! object some minutes after its memtable flush covered it (SlateDB's GC,
//! 5 min by default): an object a round still needs that is gone is
//! [`Advance::Rebase`], never an error or a count without it; so are kept
//! changes past [`MAX_KEPT`].

use std::collections::BTreeMap;

use slatedb::RowEntry;

use super::pending::{fold_pending, is_pending};
use super::{
    Counter, Object, PendingChanges, ReadFailed, Unflushed, exist, fold_counters, is_counter,
    newest_id,
};
use crate::error::OpsError;

/// The most ready-job changes a [`Tail`] keeps before it asks for a
/// rebase (about 100 bytes each: some MiB).
pub const MAX_KEPT: usize = 200_000;

/// The WAL's changes past a base (a flushed state), kept across rounds.
#[derive(Debug, Clone)]
pub struct Tail {
    /// The first WAL object the tail read (the first past the base).
    first: u64,
    /// The next WAL object to read.
    next: u64,
    /// The highest sequence number folded (the base's at first).
    folded_seq: u64,
    /// Each counter's change since the base, per `(queue, metric)`.
    counters: BTreeMap<(String, String), Counter>,
    /// The ready jobs' changes since the base.
    pending: PendingChanges,
}

/// What a round of [`Unflushed::advance`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// These many new WAL objects were folded in.
    Folded(u64),
    /// The tail cannot go on: an object it needs is gone, or it keeps too
    /// many changes. Reopen the store and start a new one.
    Rebase,
}

impl Tail {
    /// An empty tail over a base at `above_seq`, reading from WAL object
    /// `first` on.
    pub(super) fn new(first: u64, above_seq: u64) -> Self {
        Self {
            first,
            next: first,
            folded_seq: above_seq,
            counters: BTreeMap::new(),
            pending: PendingChanges::default(),
        }
    }

    /// Each counter's change since the base.
    pub fn counters(&self) -> &BTreeMap<(String, String), Counter> {
        &self.counters
    }

    /// The ready jobs' changes since the base.
    pub fn pending(&self) -> &PendingChanges {
        &self.pending
    }

    /// How many changes the tail keeps.
    pub fn kept(&self) -> usize {
        self.counters.len() + self.pending.len()
    }

    /// Fold objects read (through `end`, exclusive) into the tail.
    fn fold_objects(&mut self, objects: Vec<Object>, end: u64) -> Result<(), OpsError> {
        let max_seq = objects.iter().filter_map(|o| o.max_seq).max();
        let rows = objects.into_iter().flat_map(|o| o.rows).collect();
        self.fold_rows(rows, max_seq)?;
        self.next = self.next.max(end);
        Ok(())
    }

    /// Fold counter and pending rows (of objects whose highest sequence
    /// number is `max_seq`) into the tail: only those above the sequence
    /// number folded so far, in commit order, after the changes kept.
    pub(super) fn fold_rows(
        &mut self,
        rows: Vec<RowEntry>,
        max_seq: Option<u64>,
    ) -> Result<(), OpsError> {
        let (counters, pending): (Vec<RowEntry>, Vec<RowEntry>) =
            rows.into_iter().partition(is_counter);
        // Both folds leave out rows at or below `folded_seq`: every row
        // they keep comes after every change kept.
        for (name, change) in fold_counters(counters, self.folded_seq)? {
            let next = match self.counters.get(&name) {
                Some(kept) => kept.then(change),
                None => change,
            };
            self.counters.insert(name, next);
        }
        self.pending.extend(fold_pending(pending, self.folded_seq));
        self.folded_seq = self.folded_seq.max(max_seq.unwrap_or(0));
        Ok(())
    }
}

impl Counter {
    /// This change followed by `next`: a put (`Set`) after anything is the
    /// put; merges after a put add to it; merges after merges add up.
    pub fn then(self, next: Counter) -> Counter {
        match (self, next) {
            (_, Self::Set(v)) => Self::Set(v),
            (Self::Add(a), Self::Add(d)) => Self::Add(a.saturating_add(d)),
            (Self::Set(v), Self::Add(d)) => Self::Set(v.saturating_add(d)),
        }
    }
}

impl Unflushed {
    /// A tail over the flushed state at `above_seq`: every object past it
    /// read now (as [`Self::changes`]).
    pub async fn tail(&self, above_seq: u64) -> Result<Tail, OpsError> {
        let mut tail = Tail::new(self.ids.start, above_seq);
        let objects = self
            .read(self.ids.clone(), |r| is_counter(r) || is_pending(r))
            .await?;
        tail.fold_objects(objects, self.ids.end)?;
        Ok(tail)
    }

    /// Fold the WAL objects written since `tail`'s last round into it.
    pub async fn advance(&self, tail: &mut Tail) -> Result<Advance, OpsError> {
        let last = tail.next.saturating_sub(1);
        let newest = newest_id(&self.wal, last).await?;
        if newest == last {
            // None new, or those after the last one read were deleted: a GC
            // that deleted them deleted it too (older, and as far below the
            // flushed point), or will by the next round. Only an object
            // this tail read is asked about: the flushed one before the
            // first may be long gone.
            if tail.next > tail.first && !exist(&self.wal, &[last]).await?[0] {
                return Ok(Advance::Rebase);
            }
            return Ok(Advance::Folded(0));
        }
        let objects = match self
            .read_objects(tail.next..newest + 1, |r| is_counter(r) || is_pending(r))
            .await
        {
            Ok(objects) => objects,
            Err(ReadFailed::Missing(_)) => return Ok(Advance::Rebase),
            Err(ReadFailed::Other(e)) => return Err(e),
        };
        let folded = newest + 1 - tail.next;
        tail.fold_objects(objects, newest + 1)?;
        if tail.kept() > MAX_KEPT {
            return Ok(Advance::Rebase);
        }
        Ok(Advance::Folded(folded))
    }
}

#[cfg(test)]
mod tests;
