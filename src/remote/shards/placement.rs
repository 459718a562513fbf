//! The placement: which shards of a set this process owns.

use super::*;

/// Which shards a process owns: fixed, as its orchestrator says (a list, a
/// StatefulSet ordinal), or elastic, through etcd leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// These shards.
    Listed(Vec<usize>),
    /// Every shard `s` with `s % replicas == ordinal` (a StatefulSet's pod
    /// `ordinal` of `replicas`).
    Ordinal {
        /// This replica, 0-based.
        ordinal: usize,
        /// Replicas in all.
        replicas: usize,
    },
    /// Whichever shards the assignment over the live members gives this
    /// process, held through etcd leases and moved as processes come and
    /// go (docs/guide/shards.md, *Elastic placement on etcd*).
    #[cfg(feature = "etcd")]
    Etcd(super::EtcdPlacement),
}

impl Placement {
    /// `Ordinal` from a StatefulSet pod's hostname (`HOSTNAME`, as
    /// Kubernetes sets it: `{statefulset}-{ordinal}`).
    pub fn from_hostname(replicas: usize) -> std::result::Result<Self, ShardError> {
        let host = std::env::var("HOSTNAME").map_err(|_| {
            ShardError::InvalidPlacement(
                "HOSTNAME is not set: a StatefulSet pod has it; elsewhere list the shards".into(),
            )
        })?;
        Self::from_pod_name(&host, replicas)
    }

    /// `Ordinal` from a pod name `{statefulset}-{ordinal}`.
    pub fn from_pod_name(name: &str, replicas: usize) -> std::result::Result<Self, ShardError> {
        let ordinal = name
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<usize>().ok())
            .ok_or_else(|| {
                ShardError::InvalidPlacement(format!(
                    "`{name}` does not end in `-{{ordinal}}` as a StatefulSet pod's name does"
                ))
            })?;
        if replicas == 0 || ordinal >= replicas {
            return Err(ShardError::InvalidPlacement(format!(
                "ordinal {ordinal} of {replicas} replicas: the ordinal must be below the \
                 replica count (set it to the StatefulSet's `replicas`)"
            )));
        }
        Ok(Self::Ordinal { ordinal, replicas })
    }

    /// The shards of `set` this process owns, ascending (refused for an
    /// elastic placement, whose shards move).
    pub fn owned(&self, set: &ShardSet) -> std::result::Result<Vec<usize>, ShardError> {
        let owned: Vec<usize> = match self {
            Self::Listed(shards) => {
                if let Some(bad) = shards.iter().find(|s| **s >= set.len()) {
                    return Err(ShardError::InvalidPlacement(format!(
                        "shard {bad} is listed, but the set has {} (0 to {})",
                        set.len(),
                        set.len() - 1
                    )));
                }
                let mut s = shards.clone();
                s.sort_unstable();
                s.dedup();
                s
            }
            Self::Ordinal { ordinal, replicas } => {
                if *replicas == 0 || ordinal >= replicas {
                    return Err(ShardError::InvalidPlacement(format!(
                        "ordinal {ordinal} of {replicas} replicas"
                    )));
                }
                (0..set.len())
                    .filter(|s| s % replicas == *ordinal)
                    .collect()
            }
            #[cfg(feature = "etcd")]
            Self::Etcd(_) => {
                return Err(ShardError::InvalidPlacement(
                    "an elastic placement's shards are not fixed: they move as processes come \
                     and go (ShardedEngine::owned says which it holds now)"
                        .into(),
                ));
            }
        };
        Ok(owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_by_list_or_by_pod_ordinal() {
        let set = ShardSet::from_template("file:///d/{shard}", 6).unwrap();
        assert_eq!(
            Placement::Listed(vec![4, 1, 4]).owned(&set).unwrap(),
            vec![1, 4]
        );
        assert!(Placement::Listed(vec![6]).owned(&set).is_err());
        let p = Placement::from_pod_name("gaffer-1", 3).unwrap();
        assert_eq!(p.owned(&set).unwrap(), vec![1, 4]);
        assert!(Placement::from_pod_name("gaffer-3", 3).is_err());
        assert!(Placement::from_pod_name("gaffer", 3).is_err());
        // Every shard has exactly one owner among the replicas.
        let mut all: Vec<usize> = (0..3)
            .flat_map(|o| {
                Placement::Ordinal {
                    ordinal: o,
                    replicas: 3,
                }
                .owned(&set)
                .unwrap()
            })
            .collect();
        all.sort();
        assert_eq!(all, (0..6).collect::<Vec<_>>());
        // An elastic placement's shards are not fixed.
        #[cfg(feature = "etcd")]
        assert!(
            Placement::Etcd(super::super::EtcdPlacement::new(["http://e:2379"]))
                .owned(&set)
                .is_err()
        );
    }
}
