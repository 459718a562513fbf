//! A job's tags: a few short strings it is submitted with
//! (`SubmitOptions::tags`, e.g. `order:42`, `customer:acme`), kept on its
//! run record and its outcome record ([`Tags`]) and indexed, so a tag's
//! jobs are listed in any state without a scan of the store.
//!
//! The index: one empty KV entry per (tag, job),
//! `gaffer/v1/tags/{tag}/{at_ms:016x}/{run_id}` ([`tag_key`]), where
//! `at_ms` is when the job was first created ([`Tags::at_ms`], queue clock).
//! Entries are written in the transaction that creates the job (a
//! submission, a follow-up, a workflow step's release) and deleted in the
//! retention pass's transaction that removes its outcome record; a retry of
//! a failed job keeps them (its new run record keeps the same [`Tags`]).
//! Scanned backwards, a tag's prefix lists its jobs newest first
//! ([`page`]): one index scan, then each listed job's records by id.
//!
//! A tag is 1 to [`MAX_TAG_LEN`] bytes of `[A-Za-z0-9_.:@=-]` (no `/`: the
//! tag ends at the first `/` of its entry's key, so no tag's prefix holds
//! another tag's entries); a job has at most [`MAX_TAGS`]. Tags are stored
//! in the clear (they are in keys), also under a keyring: they must not
//! hold secrets.

use std::ops::Bound;

use serde::{Deserialize, Serialize};
use taquba::{KvOrder, QueueView};

use crate::error::{EngineError, Result};
use crate::inspect;
use crate::records::{JobState, OutcomeRecord, RunRecord};

/// The most tags a job may have.
pub const MAX_TAGS: usize = 8;
/// The longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 64;
/// Root of the tag index ([`tag_key`]).
pub const TAGS_ROOT: &[u8] = b"gaffer/v1/tags/";
/// The most jobs one [`page`] lists.
pub const MAX_PAGE: usize = 1000;

/// A job's tags, as its run record and its outcome record keep them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tags {
    /// The tags, in the order given, without repeats.
    pub names: Vec<String>,
    /// When the job was first created (queue clock, epoch ms): the time in
    /// its index entries' keys, kept through a retry.
    pub at_ms: u64,
}

impl Tags {
    /// Its index entries for the job `run_id`.
    pub fn keys(&self, run_id: &str) -> Vec<Vec<u8>> {
        self.names
            .iter()
            .map(|tag| tag_key(tag, self.at_ms, run_id))
            .collect()
    }
}

/// Whether `tag` is an acceptable tag: 1 to [`MAX_TAG_LEN`] bytes of
/// `[A-Za-z0-9_.:@=-]`.
pub fn is_valid_tag(tag: &str) -> bool {
    !tag.is_empty()
        && tag.len() <= MAX_TAG_LEN
        && tag.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'@' | b'=' | b'-')
        })
}

/// `tag` if it is acceptable, else [`EngineError::InvalidTag`] naming it
/// and the rule.
pub fn check_tag(tag: &str) -> Result<()> {
    if is_valid_tag(tag) {
        Ok(())
    } else {
        Err(EngineError::InvalidTag {
            tag: tag.chars().take(80).collect(),
            reason: format!(
                "a tag is 1 to {MAX_TAG_LEN} characters of [A-Za-z0-9_.:@=-] (no spaces, no `/`)"
            ),
        })
    }
}

/// A job's tags checked, in their order without repeats: each acceptable
/// ([`check_tag`]), at most [`MAX_TAGS`] different ones.
pub fn checked(tags: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        check_tag(tag)?;
        if out.contains(tag) {
            continue;
        }
        if out.len() == MAX_TAGS {
            return Err(EngineError::InvalidTag {
                tag: tag.clone(),
                reason: format!("a job has at most {MAX_TAGS} tags; this is one more"),
            });
        }
        out.push(tag.clone());
    }
    Ok(out)
}

/// `gaffer/v1/tags/{tag}/`: the index entries of one tag.
pub fn tag_prefix(tag: &str) -> Vec<u8> {
    let mut k = TAGS_ROOT.to_vec();
    k.extend_from_slice(tag.as_bytes());
    k.push(b'/');
    k
}

/// The position of a job in its tag's index, inside the tag's prefix:
/// `{at_ms:016x}/{run_id}` (byte order is creation order).
pub fn tag_position(at_ms: u64, run_id: &str) -> String {
    format!("{at_ms:016x}/{run_id}")
}

/// `gaffer/v1/tags/{tag}/{at_ms:016x}/{run_id}`: the index entry of the
/// job `run_id`, created at `at_ms`, under `tag`.
pub fn tag_key(tag: &str, at_ms: u64, run_id: &str) -> Vec<u8> {
    let mut k = tag_prefix(tag);
    k.extend_from_slice(tag_position(at_ms, run_id).as_bytes());
    k
}

/// One job of a tag, as its records say.
#[derive(Debug, Clone)]
pub struct TaggedEntry {
    /// The job's id (its run id).
    pub run_id: String,
    /// Where it is: a live job's state (its queue job read), or how it ended.
    pub state: JobState,
    /// Its run record, while it lives.
    pub run: Option<RunRecord>,
    /// Its live queue job, as the queue keeps it (while it lives).
    pub queue_job: Option<taquba::JobRecord>,
    /// Its outcome record, once it ended (as stored: texts may be sealed).
    pub outcome: Option<OutcomeRecord>,
    /// Its tags (the tag listed among them).
    pub tags: Tags,
}

impl TaggedEntry {
    /// The job's type.
    pub fn job_type(&self) -> &str {
        match (&self.run, &self.outcome) {
            (Some(run), _) => &run.job_type,
            (None, Some(rec)) => &rec.job_type,
            (None, None) => "",
        }
    }
}

/// A page of a tag's jobs (see [`page`]).
#[derive(Debug, Clone)]
pub struct TaggedPage {
    /// The jobs, newest (by creation) first.
    pub jobs: Vec<TaggedEntry>,
    /// Pass as `before` for the next page; `None` when this page reached
    /// the end.
    pub next: Option<String>,
}

/// One job of a tag, as `Engine::jobs_by_tag` and `Client::jobs_by_tag`
/// answer it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedJob {
    /// The job's id.
    pub id: String,
    /// Its type.
    pub job_type: String,
    /// Where it is now.
    pub state: JobState,
    /// When it was created (queue clock, epoch ms).
    pub created_at_ms: u64,
    /// When it ended, once it did.
    pub finished_at_ms: Option<u64>,
    /// All its tags.
    pub tags: Vec<String>,
}

/// A page of a tag's jobs, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaggedJobs {
    /// The jobs, newest (by creation) first.
    pub jobs: Vec<TaggedJob>,
    /// Pass as `before` for the next page; `None` when this page reached
    /// the end.
    pub next: Option<String>,
}

impl From<TaggedPage> for TaggedJobs {
    fn from(page: TaggedPage) -> Self {
        let jobs = page
            .jobs
            .into_iter()
            .map(|e| TaggedJob {
                job_type: e.job_type().to_string(),
                id: e.run_id,
                state: e.state,
                created_at_ms: e.tags.at_ms,
                finished_at_ms: e.outcome.as_ref().map(|r| r.finished_at_ms),
                tags: e.tags.names,
            })
            .collect();
        Self {
            jobs,
            next: page.next,
        }
    }
}

/// The jobs tagged `tag`, newest first (by when they were created), in
/// any state: up to `limit` (1 to [`MAX_PAGE`]) index entries created before
/// the position `before` (a previous page's [`TaggedPage::next`]; from the
/// newest with `None`), then each job's records by id (its run record and
/// queue job while it lives, else its outcome record). An entry whose job
/// has no record carrying it (removed between the scan and the read, or a
/// record that did not decode at retention) is skipped, so a page may hold
/// fewer jobs than `limit` with more to come. An unacceptable `tag` is
/// [`EngineError::InvalidTag`].
pub async fn page(
    view: &QueueView,
    tag: &str,
    before: Option<&str>,
    limit: usize,
) -> Result<TaggedPage> {
    check_tag(tag)?;
    let limit = limit.clamp(1, MAX_PAGE);
    let prefix = tag_prefix(tag);
    let end = match before {
        Some(pos) => {
            let mut k = prefix.clone();
            k.extend_from_slice(pos.as_bytes());
            Bound::Excluded(k)
        }
        None => Bound::Unbounded,
    };
    let scanned = view
        .kv_scan(&prefix, (Bound::Unbounded, end), KvOrder::Descending, limit)
        .await?;
    let mut found: Vec<String> = scanned
        .entries
        .into_iter()
        .map(|(key, _)| String::from_utf8_lossy(&key[prefix.len()..]).into_owned())
        .collect();
    found.sort_unstable_by(|a, b| b.cmp(a));
    let mut jobs = Vec::with_capacity(found.len());
    for pos in &found {
        if let Some(entry) = entry_at(view, tag, pos).await? {
            jobs.push(entry);
        }
    }
    let next = if scanned.more {
        found.last().cloned()
    } else {
        None
    };
    Ok(TaggedPage { jobs, next })
}

/// The job at the index position `pos` of `tag`, if a record of it
/// carries that entry.
async fn entry_at(view: &QueueView, tag: &str, pos: &str) -> Result<Option<TaggedEntry>> {
    let Some((_, run_id)) = pos.split_once('/') else {
        return Ok(None);
    };
    if !crate::keys::is_valid_id(run_id) {
        return Ok(None);
    }
    let carries = |tags: &Option<Tags>| -> Option<Tags> {
        tags.as_ref()
            .filter(|t| tag_position(t.at_ms, run_id) == pos && t.names.iter().any(|n| n == tag))
            .cloned()
    };
    if let Some(run) = inspect::run_record(view, run_id).await? {
        let Some(tags) = carries(&run.tags) else {
            return Ok(None);
        };
        let queue_job = view.job_record(&run.job_id).await?;
        return Ok(Some(TaggedEntry {
            run_id: run_id.to_string(),
            state: inspect::live_state_of(queue_job.as_ref()),
            queue_job,
            run: Some(run),
            outcome: None,
            tags,
        }));
    }
    // It may have ended between the reads: its outcome record was written
    // with the deletion of its run record.
    let Some(rec) = inspect::outcome_record(view, run_id).await? else {
        return Ok(None);
    };
    let Some(tags) = carries(&rec.tags) else {
        return Ok(None);
    };
    Ok(Some(TaggedEntry {
        run_id: run_id.to_string(),
        state: JobState::of(&rec.outcome),
        queue_job: None,
        run: None,
        outcome: Some(rec),
        tags,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_checked_by_their_rule() {
        for good in [
            "order:42",
            "customer:acme",
            "a",
            "x@y.z",
            "k=v",
            "A_b-9",
            &"t".repeat(64),
        ] {
            assert!(is_valid_tag(good), "{good}");
        }
        for bad in ["", "a/b", "a b", "é", "a\0", "tag,two", &"t".repeat(65)] {
            match check_tag(bad) {
                Err(EngineError::InvalidTag { reason, .. }) => {
                    assert!(reason.contains("[A-Za-z0-9_.:@=-]"), "{reason}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn repeats_are_dropped_and_a_ninth_tag_is_refused() {
        let tags: Vec<String> = ["a", "b", "a"].map(String::from).to_vec();
        assert_eq!(checked(&tags).unwrap(), ["a", "b"]);
        let nine: Vec<String> = (0..9).map(|i| format!("t{i}")).collect();
        match checked(&nine) {
            Err(EngineError::InvalidTag { tag, reason }) => {
                assert_eq!(tag, "t8");
                assert!(reason.contains("at most 8"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(checked(&nine[..8]).is_ok());
    }

    #[test]
    fn a_tags_prefix_holds_only_its_own_entries() {
        let k = tag_key("order:42", 0x18c, "01JRUN");
        assert_eq!(k, b"gaffer/v1/tags/order:42/000000000000018c/01JRUN");
        assert!(k.starts_with(&tag_prefix("order:42")));
        assert!(!k.starts_with(&tag_prefix("order:4")));
        assert!(k.starts_with(crate::keys::RESERVED_KV_PREFIX.as_bytes()));
    }
}
