//! Which live member each shard belongs to, computed by every member from
//! one read of etcd (the live members and each shard's holder), so no
//! leader is needed: fair shares kept where they are, the rest by
//! rendezvous hashing.
//!
//! 1. Shares: with `s` shards over `n` members, every member's share is
//!    `⌊s / n⌋`, and `s mod n` of them get one more: those holding the
//!    most now (ties by name). No member holds more than one above another.
//! 2. Sticky: each member keeps the shards it holds, up to its share (its
//!    highest-scored ones, the score of a pair being the first 8 bytes of
//!    `SHA-256(member NUL shard)`).
//! 3. The rest (free shards, shards of members gone, shards above a
//!    holder's share) go by score, highest pair first, to members below
//!    their share.
//!
//! So a member that joins takes exactly its share, each from a member above
//! the new share; a member that leaves or dies gives exactly its shards to
//! the others; and a settled set (every member holding its share) is left as
//! it is. Rendezvous scores alone (without stickiness) would, with bounded
//! load, push shards on between the old members at a join: measured at 4
//! moves for a join of 12 shards over 3 members (the share is 3), and up to
//! three times the share with more shards.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// The member of each shard (`result[shard]`), for `shards` shards over
/// `members`, given each shard's holder now (`holders`; holders that are
/// not live members are ignored). `None` for every shard when there is no
/// member.
pub(crate) fn assign(
    shards: usize,
    members: &[String],
    holders: &BTreeMap<usize, String>,
) -> Vec<Option<String>> {
    let mut members: Vec<&String> = members.iter().collect();
    members.sort();
    members.dedup();
    if members.is_empty() {
        return vec![None; shards];
    }
    let index: BTreeMap<&str, usize> = members
        .iter()
        .enumerate()
        .map(|(i, m)| (m.as_str(), i))
        .collect();
    // What each live member holds now, best-scored first.
    let mut holding: Vec<Vec<(u64, usize)>> = vec![Vec::new(); members.len()];
    for (shard, holder) in holders.range(..shards) {
        if let Some(m) = index.get(holder.as_str()) {
            holding[*m].push((score(holder, *shard), *shard));
        }
    }
    for h in &mut holding {
        h.sort_unstable_by(|a, b| b.cmp(a));
    }
    // Shares: the `extra` members holding the most get one above `base`.
    let (base, extra) = (shards / members.len(), shards % members.len());
    let mut by_holding: Vec<usize> = (0..members.len()).collect();
    by_holding.sort_by(|a, b| holding[*b].len().cmp(&holding[*a].len()).then(a.cmp(b)));
    let mut share = vec![base; members.len()];
    for m in by_holding.into_iter().take(extra) {
        share[m] += 1;
    }
    // Each keeps what it holds, up to its share.
    let mut owner: Vec<Option<usize>> = vec![None; shards];
    let mut load = vec![0usize; members.len()];
    for (m, h) in holding.iter().enumerate() {
        for (_, shard) in h.iter().take(share[m]) {
            owner[*shard] = Some(m);
            load[m] += 1;
        }
    }
    // The rest by score, highest pair first; ties (a collision of 64 bits)
    // by shard, then by member, so the order is total.
    let mut pairs: Vec<(u64, usize, usize)> = Vec::new();
    for (m, member) in members.iter().enumerate() {
        if load[m] == share[m] {
            continue;
        }
        for (shard, o) in owner.iter().enumerate() {
            if o.is_none() {
                pairs.push((score(member, shard), shard, m));
            }
        }
    }
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    for (_, shard, m) in pairs {
        if owner[shard].is_none() && load[m] < share[m] {
            owner[shard] = Some(m);
            load[m] += 1;
        }
    }
    owner
        .into_iter()
        .map(|m| m.map(|m| members[m].clone()))
        .collect()
}

fn score(member: &str, shard: usize) -> u64 {
    let mut h = Sha256::new();
    h.update(member.as_bytes());
    h.update([0]);
    h.update((shard as u64).to_be_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("member-{i}")).collect()
    }

    fn loads(a: &[Option<String>]) -> HashMap<String, usize> {
        let mut l = HashMap::new();
        for m in a.iter().flatten() {
            *l.entry(m.clone()).or_default() += 1;
        }
        l
    }

    /// The holders an assignment leaves once every move is done.
    fn held(a: &[Option<String>]) -> BTreeMap<usize, String> {
        a.iter()
            .enumerate()
            .filter_map(|(s, m)| Some((s, m.clone()?)))
            .collect()
    }

    /// Shards whose member differs between `a` and `b`.
    fn moved(a: &[Option<String>], b: &[Option<String>]) -> usize {
        a.iter().zip(b).filter(|(x, y)| x != y).count()
    }

    fn settled(shards: usize, members: &[String]) -> Vec<Option<String>> {
        assign(shards, members, &BTreeMap::new())
    }

    #[test]
    fn every_shard_gets_one_member_in_fair_shares() {
        for members in 1..=7 {
            for shards in [1, 5, 12, 64, 256] {
                let a = settled(shards, &names(members));
                assert!(a.iter().all(Option::is_some), "{shards}/{members}");
                let l = loads(&a);
                let lo = l.values().min().copied().unwrap_or(0);
                let hi = l.values().max().copied().unwrap_or(0);
                assert_eq!(hi, shards.div_ceil(members), "{shards}/{members}: {l:?}");
                if shards >= members {
                    assert_eq!(l.len(), members, "{shards}/{members}: {l:?}");
                    assert!(hi - lo <= 1, "{shards}/{members}: {l:?}");
                }
            }
        }
        assert_eq!(settled(3, &[]), vec![None, None, None]);
    }

    #[test]
    fn the_result_depends_on_the_set_of_members_and_a_settled_set_stays() {
        let mut m = names(4);
        let a = settled(12, &m);
        m.reverse();
        m.push("member-2".into());
        assert_eq!(settled(12, &m), a);
        // Settled: nothing moves.
        assert_eq!(assign(12, &m, &held(&a)), a);
        // One process held everything (the set's first start): the others
        // get their shares, it keeps its own.
        let all: BTreeMap<usize, String> = (0..12).map(|s| (s, "member-0".to_string())).collect();
        let spread = assign(12, &names(4), &all);
        assert_eq!(
            loads(&spread).values().copied().collect::<Vec<_>>(),
            vec![3; 4]
        );
        // Holders that are not members are ignored.
        let ghosts: BTreeMap<usize, String> = (0..12).map(|s| (s, "gone".to_string())).collect();
        assert_eq!(assign(12, &names(4), &ghosts), a);
    }

    #[test]
    fn a_join_moves_exactly_its_share_and_a_leave_exactly_the_leavers() {
        for (shards, before) in [(12, 3), (12, 5), (13, 3), (64, 4), (256, 7), (1000, 9)] {
            let old = settled(shards, &names(before));
            let new = assign(shards, &names(before + 1), &held(&old));
            let joined = format!("member-{before}");
            let share = new.iter().filter(|m| m.as_deref() == Some(&joined)).count();
            assert_eq!(share, shards / (before + 1), "{shards}/{before}");
            assert_eq!(moved(&old, &new), share, "{shards}/{before}");
            // Settled again, it stays.
            assert_eq!(assign(shards, &names(before + 1), &held(&new)), new);
            // The newest leaves (or dies): only its shards move.
            let back = assign(shards, &names(before), &held(&new));
            assert_eq!(moved(&new, &back), share, "{shards}/{before}");
            let l = loads(&back);
            assert!(l.values().max().unwrap() - l.values().min().unwrap() <= 1);
        }
    }
}
