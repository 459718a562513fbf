//! What a shard's store says of the process that writes it: the owner
//! record at [`keys::SHARD_OWNER_KEY`](crate::keys::SHARD_OWNER_KEY).

use serde::{Deserialize, Serialize};

/// The process that owns a shard, as the engine that started on it last
/// wrote it: a placement's choice (a static list, a StatefulSet ordinal, a
/// lease) made visible to every reader of the store (`gaffer health`, the
/// dashboard), whatever placed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardOwnerRecord {
    /// The owner's name: its id in the placement
    /// ([`ShardPlace::owner`](crate::ShardPlace::owner)), else
    /// `{host}/{pid}`.
    pub owner: String,
    /// The host it runs on (`HOSTNAME`, else `/etc/hostname`, else
    /// `unknown`).
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When its engine started on the shard, queue clock, epoch ms.
    pub since_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{decode, encode};

    #[test]
    fn an_owner_record_round_trips_with_named_fields() {
        let rec = ShardOwnerRecord {
            owner: "gaffer-2".into(),
            host: "node-a".into(),
            pid: 4242,
            since_ms: 1_700_000_000_123,
        };
        let bytes = encode(&rec).expect("encodes");
        let back: ShardOwnerRecord = decode(crate::keys::SHARD_OWNER_KEY, &bytes).expect("decodes");
        assert_eq!(back, rec);
        // Named fields, as every record: a reader finds them by name.
        let named: std::collections::BTreeMap<String, serde::de::IgnoredAny> =
            rmp_serde::from_slice(&bytes).expect("a map");
        let fields: Vec<_> = named.keys().map(String::as_str).collect();
        assert_eq!(fields, ["host", "owner", "pid", "since_ms"]);
    }

    #[test]
    fn an_owner_record_that_is_not_one_is_a_corrupt_record() {
        let err = decode::<ShardOwnerRecord>(crate::keys::SHARD_OWNER_KEY, b"\xa3abc")
            .expect_err("a string is no owner record");
        assert!(
            matches!(&err, crate::EngineError::CorruptRecord { key, .. } if key == "gaffer/v1/shard/owner"),
            "{err:?}"
        );
    }
}
