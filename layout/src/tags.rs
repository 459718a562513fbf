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
//! ([`listing::page`]): one index scan, then each listed job's records by id.
//!
//! A tag is 1 to [`MAX_TAG_LEN`] bytes of `[A-Za-z0-9_.:@=-]` (no `/`: the
//! tag ends at the first `/` of its entry's key, so no tag's prefix holds
//! another tag's entries); a job has at most [`MAX_TAGS`]. Tags are stored
//! in the clear (they are in keys), also under a keyring: they must not
//! hold secrets.

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};

pub mod listing;

/// The most tags a job may have.
pub const MAX_TAGS: usize = 8;
/// The longest tag, in bytes.
pub const MAX_TAG_LEN: usize = 64;
/// Root of the tag index ([`tag_key`]).
pub const TAGS_ROOT: &[u8] = b"gaffer/v1/tags/";

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
