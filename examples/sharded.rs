//! A sharded gaffer service, as `deploy/kubernetes/` runs it: one engine per
//! shard this replica owns, until SIGTERM. The shards are fixed per replica
//! (a StatefulSet, `deploy/kubernetes/statefulset.yaml`) or elastic, moved
//! between interchangeable replicas through etcd leases (a Deployment,
//! `deploy/kubernetes/elastic/deployment.yaml`). A shard whose engine stops (its
//! store taken by another replica during a rollout, or the engine crashed)
//! comes back on its own once the store is this replica's again; the
//! service logs each shard's down, held and back.
//!
//! Configuration (environment):
//! - `GAFFER_SHARDS`: the shard set's URL template, `{shard}` replaced by
//!   each index (`s3://bucket/app/shard-{shard}`, `file:///data/shard-{shard}`);
//! - `GAFFER_SHARD_COUNT`: how many shards (fixed at deploy);
//! - `GAFFER_ETCD`: etcd's endpoints, comma-separated
//!   (`http://etcd:2379`): elastic placement (built with `--features
//!   etcd`); each shard gained and lost is logged with its reason;
//! - else `GAFFER_REPLICAS`: the StatefulSet's replicas; this pod owns every
//!   shard `s` with `s % replicas == ordinal`, the ordinal read from
//!   `HOSTNAME` (`gaffer-2` → 2). Or `GAFFER_OWNED=0,3` to list them.
//!
//! On one machine, without Kubernetes (two shards, one replica):
//!
//! ```sh
//! mkdir -p /tmp/gaffer-shards/shard-00 /tmp/gaffer-shards/shard-01
//! GAFFER_SHARDS='file:///tmp/gaffer-shards/shard-{shard}' GAFFER_SHARD_COUNT=2 \
//!   GAFFER_OWNED=0,1 cargo run --example sharded
//! gaffer --shards 'file:///tmp/gaffer-shards/shard-{shard}' --shard-count 2 stats
//! ```
//!
//! Elastic, with an etcd on loopback (Debian's `etcd-server`): start as
//! many as you like, each in its own terminal, and watch the shards spread
//! over them and come back when one stops.
//!
//! ```sh
//! etcd --data-dir /tmp/gaffer-etcd &
//! GAFFER_SHARDS='file:///tmp/gaffer-shards/shard-{shard}' GAFFER_SHARD_COUNT=2 \
//!   GAFFER_ETCD=http://127.0.0.1:2379 cargo run --features etcd --example sharded
//! ```

use std::time::Duration;

use gaffer::{
    Engine, Job, JobContext, remote::Placement, remote::ShardEvent, remote::ShardSet,
    remote::ShardedEngine,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct SendReceipt {
    order: u64,
}

impl Job for SendReceipt {
    const NAME: &'static str = "send-receipt";
    type Output = ();
    type Error = gaffer::Error;

    fn idempotency_key(&self) -> Option<String> {
        Some(format!("receipt-{}", self.order))
    }

    async fn run(&self, ctx: JobContext) -> Result<(), gaffer::Error> {
        tracing::info!(order = self.order, job = ctx.id(), "receipt sent");
        Ok(())
    }
}

fn env(name: &str) -> Result<String, Box<dyn std::error::Error>> {
    std::env::var(name).map_err(|_| format!("set {name} (see examples/sharded.rs)").into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_target(false).init();
    let count: usize = env("GAFFER_SHARD_COUNT")?.parse()?;
    let set = ShardSet::from_template(&env("GAFFER_SHARDS")?, count)?;
    let placement = placement()?;
    let engines = ShardedEngine::start(set, &placement, |_, url| {
        Engine::builder()
            .store(gaffer::Store::url(url))
            .register::<SendReceipt>()
            .shutdown_grace(Duration::from_secs(20))
    })
    .await?;
    tracing::info!(owned = ?engines.owned(), member = ?engines.member(), "engines started");
    // Each shard's ups and downs, until the engines shut down.
    let mut shard_events = engines.subscribe();
    tokio::spawn(async move {
        loop {
            match shard_events.recv().await {
                Ok(ShardEvent::Down { shard, reason }) => {
                    tracing::warn!(shard, %reason, "shard down")
                }
                Ok(ShardEvent::Held {
                    shard,
                    writer_epoch,
                }) => {
                    tracing::info!(shard, writer_epoch, "shard held by another writer")
                }
                Ok(ShardEvent::Back { shard, down_for }) => {
                    tracing::info!(shard, ?down_for, "shard back")
                }
                Ok(ShardEvent::Gained { shard, reason }) => {
                    tracing::info!(shard, %reason, "shard gained")
                }
                Ok(ShardEvent::Lost { shard, reason }) => {
                    tracing::info!(shard, %reason, "shard lost")
                }
                Ok(other) => tracing::info!(?other, "shard event"),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
    // A few jobs, each to its shard (only those this replica owns; another
    // process would send the rest through a `ShardedClient`).
    for order in 0..10 {
        match engines.submit(SendReceipt { order }).await {
            Ok(_) => {}
            Err(gaffer::Error::Shard(e)) => tracing::info!("{e}"),
            Err(e) => return Err(e.into()),
        }
    }
    shutdown_signal().await;
    for (shard, result) in engines.shutdown().await {
        tracing::info!(shard, ok = result.is_ok(), "shard stopped");
    }
    Ok(())
}

/// Elastic on etcd when `GAFFER_ETCD` is set; else the listed shards, or
/// the StatefulSet ordinal's.
fn placement() -> Result<Placement, Box<dyn std::error::Error>> {
    if let Ok(endpoints) = std::env::var("GAFFER_ETCD") {
        #[cfg(feature = "etcd")]
        return Ok(Placement::Etcd(
            gaffer::remote::EtcdPlacement::from_endpoint_list(&endpoints)?,
        ));
        #[cfg(not(feature = "etcd"))]
        return Err(format!(
            "GAFFER_ETCD={endpoints} asks for elastic placement: build with `--features etcd`"
        )
        .into());
    }
    Ok(match std::env::var("GAFFER_OWNED") {
        Ok(list) => Placement::Listed(
            list.split(',')
                .map(|s| s.trim().parse())
                .collect::<Result<_, _>>()?,
        ),
        Err(_) => Placement::from_hostname(env("GAFFER_REPLICAS")?.parse()?)?,
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        return;
    }
    let _ = tokio::signal::ctrl_c().await;
}
