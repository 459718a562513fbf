//! The `gaffer.past` header: what earlier queue jobs of a run counted
//! (attempts, interruptions, episode starts), carried on a job gaffer puts
//! back on its queue, and read by the engine at a claim and by readers of
//! the store that show a live job's attempts.

use taquba::Claim;

use crate::keys;

/// What earlier queue jobs of the same run counted, carried in the
/// [`HEADER_PAST`](crate::keys::HEADER_PAST) header of a job gaffer put back on its queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carried {
    /// Real attempts spent.
    pub tried: u32,
    /// Interruptions.
    pub interrupted: u32,
    /// Start times of the episodes still remembered, oldest first.
    pub episodes: Vec<u64>,
}

/// Episode starts a header keeps at most (the newest): more than any
/// sensible `max_interruptions`.
pub const CARRIED_EPISODES: usize = 32;

impl Carried {
    /// What `claim` carries; nothing for a job never put back (or a header
    /// that does not parse: only gaffer writes it, submissions may not).
    pub fn of(claim: &Claim) -> Self {
        claim
            .headers
            .get(keys::HEADER_PAST)
            .and_then(|v| Self::parse(v))
            .unwrap_or_default()
    }

    /// The header's value parsed; `None` if it does not parse.
    pub fn parse(v: &str) -> Option<Self> {
        let mut parts = v.splitn(3, ':');
        let tried = parts.next()?.parse().ok()?;
        let interrupted = parts.next()?.parse().ok()?;
        let episodes = match parts.next()? {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(str::parse)
                .collect::<Result<Vec<u64>, _>>()
                .ok()?,
        };
        Some(Self {
            tried,
            interrupted,
            episodes,
        })
    }

    /// The header's value.
    pub fn encode(&self) -> String {
        let episodes: Vec<String> = self.episodes.iter().map(u64::to_string).collect();
        format!("{}:{}:{}", self.tried, self.interrupted, episodes.join(","))
    }
}

/// The real attempts a run spent on its earlier queue jobs, from a queue
/// job's headers (what its `gaffer.past` carries; 0 for a job never put
/// back): for readers of the store that show a live job's attempts.
pub fn tried_before(headers: &std::collections::HashMap<String, String>) -> u32 {
    headers
        .get(keys::HEADER_PAST)
        .and_then(|v| Carried::parse(v))
        .map_or(0, |c| c.tried)
}
