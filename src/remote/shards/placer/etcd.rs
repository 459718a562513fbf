//! The etcd side of elastic placement: the settings ([`EtcdPlacement`]),
//! the keys, and each call the placer makes, each bounded in time.
//!
//! Keys, under the placement's prefix (by default
//! `/gaffer/placement/{set id}`, the set id being the first 16 hex digits
//! of `SHA-256` of the set's URLs, so two sets never share keys):
//!
//! - `{prefix}/members/{member}`: one per live process, under its lease;
//!   the value is a small JSON document (host, pid, start time);
//! - `{prefix}/shards/{shard:05}`: the shard's owner, a member name, under
//!   the owner's lease; created only when absent (a transaction comparing
//!   its create revision with 0), deleted by its owner after a drain or by
//!   etcd when the owner's lease ends.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use sha2::{Digest, Sha256};

use super::super::ShardSet;
use crate::remote::shards::ShardError;

/// Shards placed on live processes through etcd: every process of the set
/// joins with a lease and takes the shards the assignment over the live
/// members gives it (docs/guide/shards.md, *Elastic placement on etcd*).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdPlacement {
    pub(crate) endpoints: Vec<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) member: Option<String>,
    pub(crate) lease_ttl: Duration,
    pub(crate) poll: Duration,
    pub(crate) stop_margin: Duration,
}

impl EtcdPlacement {
    /// Join the etcd cluster at `endpoints` (`http://host:2379`, one or
    /// more of its members). Defaults: a 5 s lease, a look at the members
    /// and owners every second, and shards stopped 1 s before the lease
    /// could have expired when it cannot be renewed.
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: None,
            member: None,
            lease_ttl: Duration::from_secs(5),
            poll: Duration::from_secs(1),
            stop_margin: Duration::from_secs(1),
        }
    }

    /// From a comma-separated endpoint list, as an environment variable
    /// gives it (`GAFFER_ETCD=http://etcd-0:2379,http://etcd-1:2379`).
    pub fn from_endpoint_list(list: &str) -> Result<Self, ShardError> {
        let endpoints: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        if endpoints.is_empty() {
            return Err(ShardError::InvalidPlacement(format!(
                "`{list}` names no etcd endpoint (give `http://host:2379`, comma-separated)"
            )));
        }
        Ok(Self::new(endpoints))
    }

    /// The key prefix of this set's placement (default
    /// `/gaffer/placement/{set id}`). Every process of one set must use the
    /// same; two sets must not.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// This process's member name (default `{host}-{ULID}`, new at every
    /// start). Names must be unique among live processes: a name taken by
    /// a live member is refused at the start.
    pub fn member_name(mut self, name: impl Into<String>) -> Self {
        self.member = Some(name.into());
        self
    }

    /// The lease's time to live, in whole seconds (at least 2; default
    /// 5 s): how long after a process stops renewing (killed, cut off,
    /// paused) its shards are free for the others. Renewed every fifth of
    /// it.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How often the members and the owners are read (default 1 s): a
    /// bound on how late a process sees a join, a leave or a free shard.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every;
        self
    }

    /// How long before its lease could have expired a process that cannot
    /// renew it stops its shards (default 1 s; below half the TTL). Half of
    /// it is given to the shards' graceful shutdown; an engine still
    /// running then is killed.
    pub fn stop_margin(mut self, margin: Duration) -> Self {
        self.stop_margin = margin;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ShardError> {
        let bad = |why: String| Err(ShardError::InvalidPlacement(why));
        if self.endpoints.is_empty() {
            return bad("no etcd endpoint given".into());
        }
        if self.lease_ttl < Duration::from_secs(2) || self.lease_ttl.subsec_nanos() != 0 {
            return bad(format!(
                "a lease TTL of {:?}: etcd leases count whole seconds, at least 2",
                self.lease_ttl
            ));
        }
        if self.stop_margin.is_zero() || self.stop_margin * 2 >= self.lease_ttl {
            return bad(format!(
                "a stop margin of {:?} with a {:?} lease: it must be above zero and below half \
                 the TTL",
                self.stop_margin, self.lease_ttl
            ));
        }
        if self.poll.is_zero() || self.poll >= self.lease_ttl {
            return bad(format!(
                "a poll interval of {:?} with a {:?} lease: it must be above zero and below the \
                 TTL",
                self.poll, self.lease_ttl
            ));
        }
        if let Some(m) = &self.member
            && (m.is_empty() || m.contains('/') || m.len() > 128)
        {
            return bad(format!(
                "the member name `{m}`: 1 to 128 bytes, without `/`"
            ));
        }
        Ok(())
    }

    /// The prefix of `set`'s keys.
    pub(crate) fn prefix_of(&self, set: &ShardSet) -> String {
        if let Some(p) = &self.prefix {
            return p.trim_end_matches('/').to_string();
        }
        let mut h = Sha256::new();
        for url in set.urls() {
            h.update(url.as_bytes());
            h.update([0]);
        }
        let d = h.finalize();
        let id: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("/gaffer/placement/{id}")
    }

    /// Longest wait for one etcd call.
    pub(crate) fn call_limit(&self) -> Duration {
        (self.lease_ttl / 3).min(Duration::from_secs(2))
    }
}

/// The host this process runs on (`HOSTNAME`, else `/etc/hostname`).
pub(crate) fn host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// One etcd call's failure, said in a sentence.
pub(crate) type Failed = String;

fn failed(what: &str, e: impl std::fmt::Display) -> Failed {
    format!("{what}: {e}")
}

/// Run `call` for at most `limit`.
async fn bounded<T>(
    what: &str,
    limit: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, Failed> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failed(what, e)),
        Err(_) => Err(format!("{what}: no answer within {limit:?}")),
    }
}

/// The keys of one set's placement, and the calls on them.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    pub(crate) prefix: String,
    pub(crate) limit: Duration,
}

impl Keys {
    pub(crate) fn member(&self, name: &str) -> String {
        format!("{}/members/{name}", self.prefix)
    }

    pub(crate) fn members(&self) -> String {
        format!("{}/members/", self.prefix)
    }

    pub(crate) fn shard(&self, shard: usize) -> String {
        format!("{}/shards/{shard:05}", self.prefix)
    }

    pub(crate) fn shards(&self) -> String {
        format!("{}/shards/", self.prefix)
    }

    /// Connect (the client finds the members it can reach).
    pub(crate) async fn connect(&self, endpoints: &[String]) -> Result<Client, Failed> {
        let options = ConnectOptions::new()
            .with_connect_timeout(self.limit)
            .with_timeout(self.limit)
            .with_keep_alive(self.limit, self.limit);
        bounded(
            "connecting to etcd",
            self.limit,
            Client::connect(endpoints, Some(options)),
        )
        .await
    }

    /// A lease of `ttl`, and this member's key under it (only if no live
    /// member has the name). Answers the lease id and its granted TTL.
    pub(crate) async fn join(
        &self,
        client: &mut Client,
        ttl: Duration,
        member: &str,
        about: String,
    ) -> Result<(i64, Duration), Failed> {
        let lease = bounded(
            "granting a lease",
            self.limit,
            client.lease_grant(ttl.as_secs() as i64, None),
        )
        .await?;
        let key = self.member(member);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                about,
                Some(PutOptions::new().with_lease(lease.id())),
            )]);
        let done = bounded("registering the member", self.limit, client.txn(txn)).await?;
        if !done.succeeded() {
            let _ = bounded(
                "revoking the lease",
                self.limit,
                client.lease_revoke(lease.id()),
            )
            .await;
            return Err(format!(
                "the member name `{member}` is taken by a live process of the set"
            ));
        }
        Ok((lease.id(), Duration::from_secs(lease.ttl().max(0) as u64)))
    }

    /// Renew `lease` once: its remaining TTL (zero: etcd no longer has it).
    pub(crate) async fn renew(&self, client: &mut Client, lease: i64) -> Result<Duration, Failed> {
        let work = async {
            let (mut keeper, mut stream) = client.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            let answer = stream.message().await?;
            Ok(answer.map_or(0, |a| a.ttl()))
        };
        let ttl = bounded("renewing the lease", self.limit, work).await?;
        Ok(Duration::from_secs(ttl.max(0) as u64))
    }

    /// The live members and each shard's owner, read at one revision.
    pub(crate) async fn read(&self, client: &mut Client) -> Result<View, Failed> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.members(), Some(GetOptions::new().with_prefix())),
            TxnOp::get(self.shards(), Some(GetOptions::new().with_prefix())),
        ]);
        let read = bounded(
            "reading the members and owners",
            self.limit,
            client.txn(txn),
        )
        .await?;
        let mut view = View {
            revision: read.header().map_or(0, |h| h.revision()),
            ..View::default()
        };
        let responses = read.op_responses();
        let (Some(TxnOpResponse::Get(members)), Some(TxnOpResponse::Get(owners))) =
            (responses.first(), responses.get(1))
        else {
            return Err("etcd answered the read with something else than two ranges".into());
        };
        let members_prefix = self.members();
        for kv in members.kvs() {
            if let Some(name) = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(&members_prefix))
            {
                view.members.push(name.to_string());
            }
        }
        let shards_prefix = self.shards();
        for kv in owners.kvs() {
            let shard = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(&shards_prefix))
                .and_then(|s| s.parse::<usize>().ok());
            if let (Some(shard), Ok(owner)) = (shard, kv.value_str()) {
                view.owners.insert(shard, owner.to_string());
            }
        }
        Ok(view)
    }

    /// Take `shard` for `member` under `lease` if nobody holds it: the
    /// revision it was taken at, `None` if another holds it.
    pub(crate) async fn take(
        &self,
        client: &mut Client,
        shard: usize,
        member: &str,
        lease: i64,
    ) -> Result<Option<i64>, Failed> {
        let key = self.shard(shard);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                member,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let done = bounded("taking the shard", self.limit, client.txn(txn)).await?;
        Ok(done
            .succeeded()
            .then(|| done.header().map_or(0, |h| h.revision())))
    }

    /// Let go of `shard` if `member` holds it: the revision after.
    pub(crate) async fn release(
        &self,
        client: &mut Client,
        shard: usize,
        member: &str,
    ) -> Result<i64, Failed> {
        let key = self.shard(shard);
        let txn = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Equal, member)])
            .and_then([TxnOp::delete(key, None)]);
        let done = bounded("releasing the shard", self.limit, client.txn(txn)).await?;
        Ok(done.header().map_or(0, |h| h.revision()))
    }

    /// End `lease`: its keys go at once.
    pub(crate) async fn revoke(&self, client: &mut Client, lease: i64) -> Result<(), Failed> {
        bounded("revoking the lease", self.limit, client.lease_revoke(lease)).await?;
        Ok(())
    }
}

/// The members and owners at one revision.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    /// The revision read at.
    pub(crate) revision: i64,
    /// Live members' names (sorted: etcd answers ranges in key order).
    pub(crate) members: Vec<String>,
    /// Each held shard's owner.
    pub(crate) owners: BTreeMap<usize, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_out_of_bounds_are_refused_with_the_reason() {
        let ok = EtcdPlacement::new(["http://e:2379"]);
        assert!(ok.validate().is_ok());
        let refused = |p: EtcdPlacement| p.validate().unwrap_err().to_string();
        assert!(refused(EtcdPlacement::new(Vec::<String>::new())).contains("no etcd endpoint"));
        assert!(refused(ok.clone().lease_ttl(Duration::from_secs(1))).contains("at least 2"));
        assert!(refused(ok.clone().lease_ttl(Duration::from_millis(5500))).contains("whole"));
        assert!(refused(ok.clone().stop_margin(Duration::from_millis(2500))).contains("half"));
        assert!(refused(ok.clone().stop_margin(Duration::ZERO)).contains("above zero"));
        assert!(refused(ok.clone().poll_interval(Duration::from_secs(5))).contains("below the"));
        assert!(refused(ok.clone().member_name("a/b")).contains("without `/`"));
        assert!(refused(ok.clone().member_name("")).contains("1 to 128"));
        assert!(EtcdPlacement::from_endpoint_list(" , ").is_err());
        assert_eq!(
            EtcdPlacement::from_endpoint_list("http://a:1, http://b:2")
                .unwrap()
                .endpoints,
            vec!["http://a:1".to_string(), "http://b:2".to_string()]
        );
    }

    #[test]
    fn each_set_has_its_own_prefix_unless_one_is_given() {
        let p = EtcdPlacement::new(["http://e:2379"]);
        let a = ShardSet::from_template("s3://b/a/{shard}", 4).unwrap();
        let b = ShardSet::from_template("s3://b/b/{shard}", 4).unwrap();
        assert_eq!(p.prefix_of(&a), p.prefix_of(&a.clone()));
        assert_ne!(p.prefix_of(&a), p.prefix_of(&b));
        assert!(p.prefix_of(&a).starts_with("/gaffer/placement/"));
        assert_eq!(p.clone().prefix("/mine/").prefix_of(&a), "/mine");
        let keys = Keys {
            prefix: "/p".into(),
            limit: Duration::from_secs(1),
        };
        assert_eq!(keys.shard(7), "/p/shards/00007");
        assert_eq!(keys.member("m"), "/p/members/m");
    }
}
