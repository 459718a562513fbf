//! Shards reached by actor message across a `ractor_cluster` (feature
//! `cluster`), with real processes on local-disk shards:
//!
//! - Process `one` owns shard 0, and process `two` owns shard 1. Each runs
//!   a node and a gateway per shard; `one` connects to `two`.
//! - `two` is also the sender. Through a `ClusterRouter` it submits keyed
//!   jobs to both shards by message, and joins each by message.
//! - Once half the jobs are done, `one` is SIGKILLed, and the sender waits
//!   for that before it goes on (so the rest of shard 0's jobs cannot all
//!   end on `one` before the kill lands). Process `three` takes shard 0
//!   over and joins the cluster.
//! - `two`'s router finds the new gateway for shard 0. Every job's outcome
//!   comes back, each key with one id.
//! - Then `two` runs a batch on each shard by message, and gets its counts.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use gaffer::remote::ractor_cluster::NodeServer;
use gaffer::{
    BulkCtx, Engine, Job, JobContext, Pipeline, bulk::ItemError, remote::ClusterRouter,
    remote::Placement, remote::ShardSet, remote::ShardedEngine,
};
use serde::{Deserialize, Serialize};

const DIR_VAR: &str = "GAFFER_CLUSTER_TEST_DIR";
const ROLE_VAR: &str = "GAFFER_CLUSTER_ROLE";
const JOBS: u64 = 60;

#[derive(Debug, Serialize, Deserialize)]
struct Double {
    n: u64,
}

impl Job for Double {
    const NAME: &'static str = "double";
    type Output = u64;
    type Error = gaffer::Error;

    fn idempotency_key(&self) -> Option<String> {
        Some(format!("double-{}", self.n))
    }

    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        // Which process ran it: `runs-{name}` in the test's directory.
        let (Ok(dir), Ok(role)) = (std::env::var(DIR_VAR), std::env::var(ROLE_VAR)) else {
            return Ok(self.n * 2);
        };
        let name = role.split(':').next().unwrap_or("unknown");
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(Path::new(&dir).join(format!("runs-{name}")))?;
        f.write_all(format!("{}\n", self.n).as_bytes())?;
        Ok(self.n * 2)
    }
}

/// A pipeline run by message.
struct Triple;

impl Pipeline for Triple {
    const NAME: &'static str = "triple";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        if ctx.input == 13 {
            return Err(ItemError::permanent("unlucky"));
        }
        Ok(ctx.input * 3)
    }
}

fn set(root: &Path) -> ShardSet {
    ShardSet::from_template(&format!("file://{}/shard-{{shard}}", root.display()), 2).unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A node on `port`; joined to the node on `peer` when given.
async fn node(name: &str, port: u16, peer: Option<u16>) {
    let server = NodeServer::new(
        port,
        "gaffer-test-cookie".into(),
        name.into(),
        "127.0.0.1".into(),
        None,
        None,
    )
    .with_listen_addr("127.0.0.1".parse().unwrap());
    let (node, _) = gaffer::ractor::Actor::spawn(None, server, ())
        .await
        .unwrap();
    if let Some(peer) = peer {
        let error = std::cell::RefCell::new(None);
        common::eventually_or(
            &format!("the node on {peer} is joined"),
            Duration::from_secs(30),
            async || {
                let joined =
                    gaffer::remote::ractor_cluster::client_connect(&node, ("127.0.0.1", peer))
                        .await;
                *error.borrow_mut() = joined.err();
                error.borrow().is_none()
            },
            || format!("cannot join {peer}: {:?}", error.borrow()),
        )
        .await;
    }
    // Keep the node for the life of the process.
    std::mem::forget(node);
}

async fn own(root: &Path, shard: usize) -> ShardedEngine {
    let engines = ShardedEngine::start(set(root), &Placement::Listed(vec![shard]), |_, url| {
        Engine::builder()
            .store(gaffer::Store::url(url))
            .flush_interval(Duration::from_millis(1))
            .poll_interval(Duration::from_millis(20))
            .register::<Double>()
            .pipeline(Triple)
    })
    .await
    .unwrap();
    engines.serve_cluster().await.unwrap();
    engines
}

/// The child processes' body (run by `spawn`, never on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the cluster test"]
async fn cluster_child() {
    let root = PathBuf::from(std::env::var(DIR_VAR).unwrap());
    let role = std::env::var(ROLE_VAR).unwrap();
    let parts: Vec<&str> = role.split(':').collect();
    match parts[..] {
        // An owner of shard 0 that joins the node on `peer`.
        [name @ ("one" | "three"), port, peer] => {
            node(name, port.parse().unwrap(), Some(peer.parse().unwrap())).await;
            let _engines = own(&root, 0).await;
            std::fs::write(root.join(format!("ready-{name}")), b"").unwrap();
            std::future::pending::<()>().await;
        }
        // The owner of shard 1, and the sender.
        ["two", port] => {
            node("two", port.parse().unwrap(), None).await;
            let _engines = own(&root, 1).await;
            std::fs::write(root.join("ready-two"), b"").unwrap();
            let one = root.join("ready-one");
            common::eventually("`one` is ready", common::LIMIT, async || one.exists()).await;
            let router = ClusterRouter::new(set(&root)).deadline(Duration::from_secs(90));
            // Both shards' gateways are in their groups.
            common::eventually(
                "both gateways are found",
                Duration::from_secs(30),
                async || router.gateway(0).is_some() && router.gateway(1).is_some(),
            )
            .await;
            let mut out = String::new();
            for n in 0..JOBS {
                if n == JOBS / 2 {
                    // Half done: the parent kills `one` now, and says so.
                    std::fs::write(root.join("half"), b"").unwrap();
                    let killed = root.join("killed");
                    common::eventually("`one` is killed", common::LIMIT, async || killed.exists())
                        .await;
                }
                let id = router.submit(Double { n }).await.unwrap();
                let value = router.join::<Double>(&id).await.unwrap().unwrap();
                out.push_str(&format!("{n} {id} {value} {}\n", set(&root).shard_of(&id)));
            }
            // A batch on each shard, by message (shard 0 on its new owner).
            let mut batches = String::new();
            for shard in 0..2 {
                let id = (0..)
                    .map(|i| format!("batch-{i}"))
                    .find(|id| set(&root).shard_of(id) == shard)
                    .unwrap();
                let counts = router
                    .run_batch::<Triple>(&id, (0..20u64).map(|i| (format!("item-{i}"), i)))
                    .await
                    .unwrap();
                batches.push_str(&format!(
                    "{shard} {} {} {} {}\n",
                    counts.total,
                    counts.succeeded,
                    counts.failed,
                    counts.failed_keys.join(",")
                ));
            }
            // A job no shard knows is `JobNotFound`, as in process.
            for shard in 0..2 {
                let id = (0..)
                    .map(|i| format!("unknown-{i}"))
                    .find(|id| set(&root).shard_of(id) == shard)
                    .unwrap();
                let err = router.join::<Double>(&id).await.unwrap_err();
                assert!(
                    matches!(&err, gaffer::Error::JobNotFound(x) if *x == id),
                    "{err:?}"
                );
            }
            std::fs::write(root.join("batches"), batches).unwrap();
            // Whole (the parent reads it as soon as it exists).
            common::write_whole(&root.join("results"), out);
            std::future::pending::<()>().await;
        }
        _ => panic!("unknown role {role}"),
    }
}

fn spawn(root: &Path, role: &str) -> std::process::Child {
    let log = std::fs::File::create(root.join(format!("{}.log", role.replace(':', "-")))).unwrap();
    common::test_child("cluster_child")
        .env(DIR_VAR, root)
        .env(ROLE_VAR, role)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Wait until a child process has written `root/name` (3 minutes at most;
/// then panic with the children's logs).
async fn wait_for(root: &Path, name: &str) {
    let path = root.join(name);
    common::eventually_or(
        &format!("{name} is written"),
        Duration::from_secs(180),
        async || path.exists(),
        || common::child_logs(root, 3000),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_in_a_ractor_cluster_submit_and_join_by_message_across_a_takeover() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for i in 0..2 {
        std::fs::create_dir_all(root.join(format!("shard-{i:02}"))).unwrap();
    }
    let (p1, p2, p3) = (free_port(), free_port(), free_port());
    let mut children = common::Children::default();
    children
        .0
        .insert("two".into(), spawn(root, &format!("two:{p2}")));
    wait_for(root, "ready-two").await;
    children
        .0
        .insert("one".into(), spawn(root, &format!("one:{p1}:{p2}")));
    wait_for(root, "half").await;
    // `one` dies with half the jobs done; `three` takes shard 0 over.
    let mut one = children.0.remove("one").unwrap();
    one.kill().unwrap();
    one.wait().unwrap();
    std::fs::write(root.join("killed"), b"").unwrap();
    children
        .0
        .insert("three".into(), spawn(root, &format!("three:{p3}:{p2}")));
    wait_for(root, "results").await;

    let text = std::fs::read_to_string(root.join("results")).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(rows.len() as u64, JOBS);
    let mut ids = std::collections::HashSet::new();
    let mut on = [0usize; 2];
    for r in &rows {
        let n: u64 = r[0].parse().unwrap();
        assert_eq!(r[1], gaffer::job::keyed_job_id(&format!("double-{n}")));
        assert_eq!(r[2].parse::<u64>().unwrap(), n * 2, "{r:?}");
        assert!(ids.insert(r[1]));
        on[r[3].parse::<usize>().unwrap()] += 1;
    }
    // Both shards served jobs, shard 0 on `one` and, after the kill, on
    // `three`: the router found the new owner's gateway.
    assert!(on[0] > 0 && on[1] > 0, "{on:?}");
    let runs = |name: &str| {
        std::fs::read_to_string(root.join(format!("runs-{name}")))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(runs("one") > 0, "one ran nothing");
    assert!(
        runs("three") > 0,
        "three ran nothing: the takeover was not exercised"
    );
    assert_eq!(runs("two"), on[1]);
    // A batch on each shard, run by message: 20 items, the 13th fails.
    let batches = std::fs::read_to_string(root.join("batches")).unwrap();
    assert_eq!(batches, "0 20 19 1 item-13\n1 20 19 1 item-13\n");
}
