//! The shard set: which stores, and the shard of an id.

use super::*;

/// The stores of one workload, in shard order. The count is fixed at
/// deploy: every id's shard depends on it.
///
/// A job goes to the shard of its id. A type routed by a header
/// ([`route_by_header`](Self::route_by_header)) has each of its unkeyed
/// jobs that carry the header placed on the shard of the header's value
/// instead, by picking its id there: its id still names its shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSet {
    pub(super) urls: Vec<String>,
    /// Job types routed by a header's value: type → header.
    routes: BTreeMap<String, String>,
}

/// Fresh ids drawn per shard of the set, at most, looking for one of a
/// value's shard: `count × 64` draws fail to find one with probability
/// about `e^-64`.
const ID_DRAWS_PER_SHARD: usize = 64;

/// Largest shard count accepted.
pub const MAX_SHARDS: usize = keys::MAX_SHARDS;

impl ShardSet {
    /// `count` shards named by `template`, whose `{shard}` is replaced by
    /// the shard's index, two digits at least (`s3://bucket/app/shard-{shard}`
    /// gives `…/shard-00` to `…/shard-05` for 6).
    pub fn from_template(template: &str, count: usize) -> std::result::Result<Self, ShardError> {
        if !template.contains("{shard}") {
            return Err(ShardError::InvalidSet(format!(
                "the template `{template}` has no `{{shard}}` to replace with each shard's index"
            )));
        }
        Self::from_urls(
            (0..count)
                .map(|i| keys::shard_url(template, i, count))
                .collect(),
        )
    }

    /// The shards' store URLs, in shard order (1 to [`MAX_SHARDS`],
    /// distinct).
    pub fn from_urls(urls: Vec<String>) -> std::result::Result<Self, ShardError> {
        if urls.is_empty() || urls.len() > MAX_SHARDS {
            return Err(ShardError::InvalidSet(format!(
                "{} shards: a set has 1 to {MAX_SHARDS}",
                urls.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for u in &urls {
            if !seen.insert(u.trim_end_matches('/')) {
                return Err(ShardError::InvalidSet(format!(
                    "`{u}` is listed twice: two shards would share a store"
                )));
            }
        }
        Ok(Self {
            urls,
            routes: BTreeMap::new(),
        })
    }

    /// Route the jobs of `job_type` by the value of their header `header`:
    /// every unkeyed job of the type that carries the header goes to the
    /// shard of its value ([`shard_of_value`](Self::shard_of_value)), so
    /// all jobs of one value (one tenant) meet in one store and a limit per
    /// value (`Concurrency::per_header` on the same header) holds over the
    /// whole set. The job's id is a fresh ULID picked among those of that
    /// shard, so its id still names its shard: joins, reads and cancels
    /// find it as any job's.
    ///
    /// A job of the type without the header goes to the shard of its id,
    /// as before. A keyed job with the header is refused
    /// ([`ShardError::Unroutable`]): its id is its key's, which fixes its
    /// shard by itself. Every process that submits to the set must route
    /// alike (build its `ShardSet` the same way): one that does not places
    /// jobs by id, where they are still found, but a value's limit then
    /// holds per shard only. A second call for the same type replaces the
    /// first. An empty header or one starting `gaffer.` is refused.
    pub fn route_by_header(
        mut self,
        job_type: &str,
        header: &str,
    ) -> std::result::Result<Self, ShardError> {
        if header.is_empty() || header.starts_with(keys::RESERVED_HEADER_PREFIX) {
            return Err(ShardError::InvalidSet(format!(
                "`{job_type}` cannot route by the header `{header}`: it is empty or reserved \
                 (`{}…`)",
                keys::RESERVED_HEADER_PREFIX
            )));
        }
        self.routes.insert(job_type.to_string(), header.to_string());
        Ok(self)
    }

    /// The header the jobs of `job_type` are routed by, if the set routes
    /// the type by one.
    pub fn route_of(&self, job_type: &str) -> Option<&str> {
        self.routes.get(job_type).map(String::as_str)
    }

    /// The shard of every routed job whose header holds `value`: the
    /// shard of `gaffer.route`, NUL, `value` as [`shard_of`](Self::shard_of)
    /// computes it. The same for every routed type and header, so one
    /// tenant's jobs of every routed type share a store.
    pub fn shard_of_value(&self, value: &str) -> usize {
        self.shard_of(&format!("gaffer.route\0{value}"))
    }

    /// The fresh id for a job submitted as `req` when it has no idempotency
    /// key (a keyed job's id is its key's): a ULID, of the shard of its
    /// header's value when its type is routed and it carries the header.
    pub(crate) fn fresh_id(
        &self,
        req: &gaffer_actors::SubmitRequest,
    ) -> std::result::Result<String, ShardError> {
        let Some((header, value)) = self
            .routes
            .get(&req.job_type)
            .and_then(|h| Some((h, req.headers.get(h)?)))
        else {
            return Ok(ulid::Ulid::new().to_string());
        };
        let unroutable = |reason: String| ShardError::Unroutable {
            job_type: req.job_type.clone(),
            header: header.clone(),
            reason,
        };
        if req.idempotency_key.is_some() {
            return Err(unroutable(
                "it has an idempotency key, whose id fixes its shard by itself (submit it \
                 without the key or without the header, or do not route the type)"
                    .into(),
            ));
        }
        let shard = self.shard_of_value(value);
        (0..self.len() * ID_DRAWS_PER_SHARD)
            .map(|_| ulid::Ulid::new().to_string())
            .find(|id| self.shard_of(id) == shard)
            .ok_or_else(|| {
                unroutable(format!(
                    "no fresh id of shard {shard} turned up in {} draws",
                    self.len() * ID_DRAWS_PER_SHARD
                ))
            })
    }

    /// How many shards.
    pub fn len(&self) -> usize {
        self.urls.len()
    }

    /// Never: a set has at least one shard.
    pub fn is_empty(&self) -> bool {
        self.urls.is_empty()
    }

    /// The store URL of `shard` (`None` past the end).
    pub fn url(&self, shard: usize) -> Option<&str> {
        self.urls.get(shard).map(String::as_str)
    }

    /// The shards' store URLs, in shard order.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The shard of the job or batch `id`: `SHA-256(id)`'s first 8 bytes,
    /// big-endian, mod the count.
    pub fn shard_of(&self, id: &str) -> usize {
        keys::shard_of(id, self.urls.len())
    }

    /// The shard of the job submitted with idempotency key `key`.
    pub fn shard_of_key(&self, key: &str) -> usize {
        self.shard_of(&keys::keyed_run_id(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gaffer_actors::SubmitRequest;

    #[test]
    fn a_template_names_each_shard_and_ids_spread_over_all() {
        let set = ShardSet::from_template("s3://b/app/shard-{shard}", 6).unwrap();
        assert_eq!(set.url(0), Some("s3://b/app/shard-00"));
        assert_eq!(set.url(5), Some("s3://b/app/shard-05"));
        assert_eq!(
            ShardSet::from_template("file:///d/{shard}", 120)
                .unwrap()
                .url(7),
            Some("file:///d/007")
        );
        let mut counts = [0usize; 6];
        for i in 0..6000 {
            counts[set.shard_of(&format!("job-{i}"))] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
        // A key's shard is its id's.
        assert_eq!(
            set.shard_of_key("order-7"),
            set.shard_of(&keys::keyed_run_id("order-7"))
        );
        assert!(ShardSet::from_template("s3://b/app", 3).is_err());
        assert!(ShardSet::from_urls(vec![]).is_err());
        assert!(ShardSet::from_urls(vec!["s3://b/a".into(), "s3://b/a/".into()]).is_err());
    }

    fn request(job_type: &str, tenant: Option<&str>, key: Option<&str>) -> SubmitRequest {
        let mut req = SubmitRequest {
            job_type: job_type.into(),
            ..Default::default()
        };
        if let Some(t) = tenant {
            req.headers.insert("tenant".into(), t.into());
        }
        req.idempotency_key = key.map(str::to_string);
        req
    }

    #[test]
    fn a_routed_types_fresh_ids_belong_to_the_shard_of_its_headers_value() {
        let set = ShardSet::from_template("s3://b/app/shard-{shard}", 6)
            .unwrap()
            .route_by_header("report", "tenant")
            .unwrap();
        assert_eq!(set.route_of("report"), Some("tenant"));
        assert_eq!(set.route_of("other"), None);
        // Values spread over the shards; each value's jobs meet in one.
        let mut seen = std::collections::HashSet::new();
        for v in 0..60 {
            let value = format!("tenant-{v}");
            let shard = set.shard_of_value(&value);
            seen.insert(shard);
            for _ in 0..5 {
                let id = set
                    .fresh_id(&request("report", Some(&value), None))
                    .unwrap();
                assert_eq!(set.shard_of(&id), shard, "{value}: {id}");
                assert!(ulid::Ulid::from_string(&id).is_ok(), "{id}");
            }
        }
        assert_eq!(seen.len(), 6, "{seen:?}");
        // Without the header, or of another type: a plain fresh ULID.
        let ids: std::collections::HashSet<usize> = (0..200)
            .map(|_| set.shard_of(&set.fresh_id(&request("report", None, None)).unwrap()))
            .collect();
        assert_eq!(ids.len(), 6);
        assert!(
            set.fresh_id(&request("other", Some("a"), Some("k")))
                .is_ok()
        );
        // A keyed job with the header cannot be placed by it.
        assert!(matches!(
            set.fresh_id(&request("report", Some("a"), Some("k"))),
            Err(ShardError::Unroutable { .. })
        ));
        // Reserved or empty headers are refused.
        let plain = ShardSet::from_template("s3://b/{shard}", 2).unwrap();
        assert!(plain.clone().route_by_header("report", "").is_err());
        assert!(plain.route_by_header("report", "gaffer.type").is_err());
    }
}
