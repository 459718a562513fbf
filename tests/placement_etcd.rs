//! Elastic placement on etcd (`Placement::Etcd`), with real processes and
//! a real etcd (Debian's `etcd-server`, started by the test kit on
//! loopback): twelve shards on local-disk stores, engine processes that
//! join and leave, die (SIGKILL), pause (SIGSTOP) or lose etcd, and
//! producers that send keyed jobs through the shards' inboxes.
//!
//! Every run of a job appends `{job id} {incarnation}` to one shared file,
//! where an incarnation names one start of one shard's engine (process,
//! shard, and a count of that process's starts). Two processes writing one
//! shard at once would show as two incarnations of a shard interleaved in
//! that file; each test checks that none ever are: once a shard's run by a
//! new incarnation is in the file, no earlier incarnation of that shard
//! appears again.
//!
//! The processes' shard events (`gained`/`lost` with the reason, with the
//! time) go to one file per process; the takeover time after a kill and the
//! rebalance time after a join are read from them and printed (run with
//! `--nocapture` to see them; benches/README.md, *Elastic placement*).
//! `GAFFER_PLACEMENT_KILL_LEADER=1` makes the member-loss test kill etcd's
//! leader instead of a follower (by hand: whether the election fits in the
//! lease's slack depends on time).

#![cfg(feature = "etcd")]

mod common;

use common::lines;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::remote::{
    Client, EtcdPlacement, Placement, ShardEvent, ShardSet, ShardedClient, ShardedEngine,
};
use gaffer::{Engine, Job, JobContext};
use gaffer_testkit::etcd::EtcdCluster;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

const DIR_VAR: &str = "GAFFER_PLACEMENT_TEST_DIR";
const ROLE_VAR: &str = "GAFFER_PLACEMENT_ROLE";
const ETCD_VAR: &str = "GAFFER_PLACEMENT_ETCD";
const TTL_VAR: &str = "GAFFER_PLACEMENT_TTL";
const SHARDS: usize = 12;

/// A job that notes each run, with the incarnation that ran it.
#[derive(Debug, Serialize, Deserialize)]
struct Tally {
    key: String,
    n: u64,
}

/// What a shard's engine runs with: the shared run file and its
/// incarnation.
#[derive(Debug, Clone)]
struct RunLog {
    path: PathBuf,
    incarnation: String,
}

impl Job for Tally {
    const NAME: &'static str = "tally";
    type Output = u64;
    type Error = gaffer::Error;

    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }

    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        let log = ctx.state::<RunLog>();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log.path)?;
        // One write per line: concurrent runs append whole lines.
        f.write_all(format!("{} {}\n", ctx.id(), log.incarnation).as_bytes())?;
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(self.n * 2)
    }
}

fn set(root: &Path) -> ShardSet {
    ShardSet::from_template(
        &format!("file://{}/shard-{{shard}}", root.display()),
        SHARDS,
    )
    .unwrap()
}

fn make_dirs(root: &Path) {
    for i in 0..SHARDS {
        std::fs::create_dir_all(root.join(format!("shard-{i:02}"))).unwrap();
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Start process `name`'s engines under elastic placement, and its shard
/// events from the start on.
async fn start_engines(
    root: &Path,
    name: &str,
    endpoints: &str,
    ttl: u64,
) -> (ShardedEngine, broadcast::Receiver<ShardEvent>) {
    let placement = EtcdPlacement::from_endpoint_list(endpoints)
        .unwrap()
        .prefix("/gaffer-test/placement")
        .member_name(name)
        .lease_ttl(Duration::from_secs(ttl))
        .poll_interval(Duration::from_millis(500));
    let runs = root.join("runs.log");
    let starts = Arc::new(AtomicUsize::new(0));
    let name = name.to_string();
    let builder = ShardedEngine::builder(set(root), Placement::Etcd(placement));
    let events = builder.subscribe();
    let engines = builder
        .start(move |shard, url| {
            let n = starts.fetch_add(1, Ordering::Relaxed);
            Engine::builder()
                .store(gaffer::Store::url(url))
                .flush_interval(Duration::from_millis(1))
                .poll_interval(Duration::from_millis(20))
                .shutdown_grace(Duration::from_secs(10))
                .register::<Tally>()
                .state(RunLog {
                    path: runs.clone(),
                    incarnation: format!("{name}.{shard}.{n}"),
                })
        })
        .await
        .unwrap();
    (engines, events)
}

/// Append each gain and loss of `events` to `path`:
/// `{ms} gained|lost {shard} {reason label}`.
fn log_moves(mut events: broadcast::Receiver<ShardEvent>, path: PathBuf) {
    tokio::spawn(async move {
        while let Ok(e) = events.recv().await {
            let line = match e {
                ShardEvent::Gained { shard, reason } => {
                    format!("{} gained {shard} {}\n", now_ms(), reason.label())
                }
                ShardEvent::Lost { shard, reason } => {
                    format!("{} lost {shard} {}\n", now_ms(), reason.label())
                }
                _ => continue,
            };
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            f.write_all(line.as_bytes()).unwrap();
        }
    });
}

async fn open_client(root: &Path) -> ShardedClient {
    ShardedClient::open(set(root), |_, url| {
        Client::builder()
            .store(gaffer::Store::url(url))
            .poll_interval(Duration::from_millis(20))
    })
    .await
    .unwrap()
}

/// A child process: `engine:{name}` (until killed, or until
/// `stop-{name}` exists: then it shuts down and writes `stopped-{name}`),
/// or `producer:{n}:{from}:{count}` (submits keys `from..from+count`, writes
/// `producer-{n}.ids`).
fn spawn(root: &Path, etcd: &str, ttl: u64, role: &str) -> std::process::Child {
    let log = std::fs::File::create(root.join(format!("{}.log", role.replace(':', "-")))).unwrap();
    common::test_child("placement_child")
        .env(DIR_VAR, root)
        .env(ROLE_VAR, role)
        .env(ETCD_VAR, etcd)
        .env(TTL_VAR, ttl.to_string())
        .env("RUST_LOG", "gaffer=info")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The child processes' body (run by `spawn`, never on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the placement tests"]
async fn placement_child() {
    let root = PathBuf::from(std::env::var(DIR_VAR).unwrap());
    let role = std::env::var(ROLE_VAR).unwrap();
    let etcd = std::env::var(ETCD_VAR).unwrap();
    let ttl: u64 = std::env::var(TTL_VAR).unwrap().parse().unwrap();
    let parts: Vec<&str> = role.split(':').collect();
    match parts[..] {
        ["engine", name] => {
            let (engines, events) = start_engines(&root, name, &etcd, ttl).await;
            log_moves(events, root.join(format!("moves-{name}.log")));
            common::write_whole(&root.join(format!("ready-{name}")), b"");
            let stop = root.join(format!("stop-{name}"));
            common::eventually("the test stops it", Duration::from_secs(600), async || {
                stop.exists()
            })
            .await;
            for (shard, result) in engines.shutdown().await {
                result.unwrap_or_else(|e| panic!("shard {shard} did not shut down: {e}"));
            }
            common::write_whole(&root.join(format!("stopped-{name}")), b"");
        }
        ["producer", n, from, count] => {
            let (from, count): (usize, usize) = (from.parse().unwrap(), count.parse().unwrap());
            let client = open_client(&root).await;
            let mut ids = String::new();
            for k in from..from + count {
                let h = client
                    .submit(Tally {
                        key: format!("key-{k}"),
                        n: k as u64,
                    })
                    .await
                    .unwrap();
                ids.push_str(&format!("{} {k}\n", h.id()));
                // A steady stream, so that moves happen while jobs arrive.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            common::write_whole(&root.join(format!("producer-{n}.ids")), ids);
            client.close().await;
        }
        _ => panic!("unknown role {role}"),
    }
}

/// A test's processes and files.
struct Run {
    // Dropped in this order: the children killed, etcd stopped, the files
    // removed.
    children: common::Children,
    etcd: EtcdCluster,
    root: PathBuf,
    ttl: u64,
    _tmp: tempfile::TempDir,
}

impl Run {
    fn new(members: usize, ttl: u64) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        make_dirs(&root);
        Self {
            children: common::Children::default(),
            etcd: EtcdCluster::start(members),
            root,
            ttl,
            _tmp: tmp,
        }
    }

    fn spawn(&mut self, role: &str) {
        let child = spawn(&self.root, &self.etcd.endpoints().join(","), self.ttl, role);
        self.children.0.insert(role.to_string(), child);
    }

    async fn start_engine(&mut self, name: &str) {
        self.spawn(&format!("engine:{name}"));
        self.wait_for_file(&format!("ready-{name}")).await;
    }

    async fn wait_for_file(&self, name: &str) {
        let path = self.root.join(name);
        self.wait_until(&format!("{name} is written"), || path.exists())
            .await;
    }

    /// Poll `done` until it says yes; after 3 minutes, panic with the tail
    /// of every child's log and etcd's.
    async fn wait_until(&self, what: &str, mut done: impl FnMut() -> bool) {
        common::eventually_or(
            what,
            Duration::from_secs(180),
            async || done(),
            || {
                format!(
                    "child logs:\n{}\netcd:\n{}",
                    common::child_logs(&self.root, 3000),
                    self.etcd.logs()
                )
            },
        )
        .await;
    }

    /// Each process's gains and losses, in order: `(ms, gained, shard,
    /// reason)`.
    fn moves(&self, name: &str) -> Vec<(u64, bool, usize, String)> {
        lines(&self.root.join(format!("moves-{name}.log")))
            .iter()
            .map(|l| {
                let p: Vec<&str> = l.split(' ').collect();
                (
                    p[0].parse().unwrap(),
                    p[1] == "gained",
                    p[2].parse().unwrap(),
                    p[3].to_string(),
                )
            })
            .collect()
    }

    /// The shards process `name` holds now, by its events.
    fn held(&self, name: &str) -> HashSet<usize> {
        let mut held = HashSet::new();
        for (_, gained, shard, _) in self.moves(name) {
            if gained {
                held.insert(shard);
            } else {
                held.remove(&shard);
            }
        }
        held
    }

    /// Whether `names` hold every shard between them, each exactly once,
    /// in fair shares (as the assignment gives them: none more than one
    /// above another).
    fn balanced(&self, names: &[&str]) -> bool {
        let shares: Vec<usize> = names.iter().map(|n| self.held(n).len()).collect();
        let (lo, hi) = (shares.iter().min(), shares.iter().max());
        self.all_held_by(names) && lo.zip(hi).is_some_and(|(lo, hi)| hi - lo <= 1)
    }

    /// Whether `names` hold every shard between them, each exactly once.
    fn all_held_by(&self, names: &[&str]) -> bool {
        let mut count = [0; SHARDS];
        for name in names {
            for s in self.held(name) {
                count[s] += 1;
            }
        }
        count.iter().all(|c| *c == 1)
    }

    fn kill(&mut self, role: &str) {
        let mut child = self.children.0.remove(role).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }

    async fn wait_for_exit(&mut self, role: &str) {
        let mut child = self.children.0.remove(role).unwrap();
        let status = tokio::task::block_in_place(|| child.wait()).unwrap();
        assert!(status.success(), "{role} failed: {status}");
    }

    /// The producers' ids: id → value.
    fn submitted(&self, producers: &[usize]) -> HashMap<String, u64> {
        let mut ids = HashMap::new();
        for n in producers {
            for line in lines(&self.root.join(format!("producer-{n}.ids"))) {
                let (id, v) = line.split_once(' ').unwrap();
                ids.insert(id.to_string(), v.parse().unwrap());
            }
        }
        ids
    }

    /// Every job of `ids` ends with its output.
    async fn join_all(&self, ids: &HashMap<String, u64>) {
        let client = open_client(&self.root).await;
        let joins = ids.iter().map(|(id, v)| {
            let client = &client;
            async move {
                let out = common::within_for(Duration::from_secs(180), client.join::<Tally>(id))
                    .await
                    .unwrap_or_else(|e| panic!("join {id}: {e}"))
                    .unwrap_or_else(|e| panic!("{id} failed: {e}"));
                assert_eq!(out, v * 2, "{id}");
            }
        });
        futures_util::future::join_all(joins).await;
        client.close().await;
    }

    /// The runs file: `(job id, incarnation)` in file order.
    fn runs(&self) -> Vec<(String, String)> {
        lines(&self.root.join("runs.log"))
            .iter()
            .map(|l| {
                let (id, inc) = l.split_once(' ').unwrap();
                (id.to_string(), inc.to_string())
            })
            .collect()
    }

    /// No shard was run by two incarnations at once: per shard, once a
    /// later incarnation has a run in the file, no earlier one appears.
    fn assert_one_writer_per_shard(&self) {
        let set = set(&self.root);
        let mut current: BTreeMap<usize, String> = BTreeMap::new();
        let mut retired: HashSet<String> = HashSet::new();
        for (id, inc) in self.runs() {
            let shard = set.shard_of(&id);
            let shard_of_inc: usize = inc.split('.').nth(1).unwrap().parse().unwrap();
            assert_eq!(shard, shard_of_inc, "{id} ran on {inc}");
            assert!(
                !retired.contains(&inc),
                "shard {shard}: {inc} ran {id} after another incarnation had run the shard"
            );
            match current.insert(shard, inc.clone()) {
                Some(prev) if prev != inc => {
                    retired.insert(prev);
                }
                _ => {}
            }
        }
    }
}

/// The owner a shard's store names, as `gaffer health` reads it.
async fn owner_of(root: &Path, shard: usize) -> String {
    let dir = root.join(format!("shard-{shard:02}"));
    let ops = gaffer_ops::Store::open(
        Some(&dir),
        None,
        "queue",
        "jobs",
        "bulk",
        gaffer_ops::Reading::Flushed,
    )
    .await
    .unwrap();
    ops.health().await.unwrap().shard_owner.unwrap().owner
}

/// Three engine processes share twelve shards. A fourth joins while
/// producers send and takes its share (a quarter), each shard drained by
/// its owner before the release, so no job runs twice; then it leaves
/// gracefully and its shards return. Then one of the three is SIGKILLed
/// while producers send, and the others take its shards once its lease
/// ends; every job runs, and none whose success was durable runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_a_leave_and_a_kill_move_shards_by_themselves() {
    let mut run = Run::new(1, 5);
    for name in ["a", "b", "c"] {
        run.start_engine(name).await;
    }
    run.wait_until("a, b and c hold four shards each", || {
        run.balanced(&["a", "b", "c"])
    })
    .await;

    // A fourth process joins while jobs arrive: it takes its share (three
    // of twelve), each drained by its owner before the release.
    run.spawn("producer:0:0:600");
    let runs_file = run.root.join("runs.log");
    run.wait_until("jobs run", || lines(&runs_file).len() >= 50)
        .await;
    let joined_at = now_ms();
    run.start_engine("d").await;
    run.wait_until("d holds its share, three shards", || {
        run.balanced(&["a", "b", "c", "d"])
    })
    .await;
    let d_moves = run.moves("d");
    let rebalance = d_moves.iter().map(|(at, ..)| at - joined_at).max().unwrap();
    println!("rebalance on a join (start of d to its third shard): {rebalance} ms");
    for (_, gained, shard, _) in &d_moves {
        assert!(gained, "d lost {shard} while joining");
        let released = ["a", "b", "c"].iter().any(|n| {
            run.moves(n)
                .iter()
                .any(|(_, g, s, r)| !g && s == shard && r == "rebalanced")
        });
        assert!(released, "shard {shard} was not released to d by its owner");
        // `gaffer health` names d as its owner now.
        assert_eq!(owner_of(&run.root, *shard).await, "d", "shard {shard}");
    }
    // d leaves gracefully: its shards return.
    common::write_whole(&run.root.join("stop-d"), b"");
    run.wait_for_file("stopped-d").await;
    run.wait_until("a, b and c hold every shard again", || {
        run.balanced(&["a", "b", "c"])
    })
    .await;
    run.wait_for_exit("engine:d").await;
    run.wait_for_exit("producer:0:0:600").await;
    let first = run.submitted(&[0]);
    run.join_all(&first).await;
    // Planned moves run nothing twice.
    let mut seen = HashSet::new();
    for (id, inc) in run.runs() {
        assert!(
            seen.insert(id.clone()),
            "{id} ran again on {inc} after a planned move"
        );
    }
    for id in first.keys() {
        assert!(seen.contains(id), "{id} never ran");
    }
    run.assert_one_writer_per_shard();
    let runs_before_kill = run.runs().len();

    // A kill while jobs arrive.
    run.spawn("producer:1:600:600");
    run.wait_until("jobs run again", || {
        lines(&runs_file).len() >= runs_before_kill + 100
    })
    .await;
    let a_held = run.held("a");
    run.kill("engine:a");
    let killed_at = now_ms();
    run.wait_until("b and c hold every shard", || run.balanced(&["b", "c"]))
        .await;
    let takeover = a_held
        .iter()
        .map(|s| {
            ["b", "c"]
                .iter()
                .flat_map(|n| run.moves(n))
                .filter(|(at, gained, shard, _)| *gained && shard == s && *at >= killed_at)
                .map(|(at, ..)| at - killed_at)
                .min()
                .unwrap()
        })
        .max()
        .unwrap();
    println!(
        "takeover after kill -9 at a 5 s TTL: {takeover} ms for {} shards",
        a_held.len()
    );
    // The takers found them free: a's keys ended with its lease.
    for n in ["b", "c"] {
        for (at, gained, shard, reason) in run.moves(n) {
            if gained && at >= killed_at {
                assert_eq!(reason, "free", "{n} gained {shard}: {reason}");
            }
        }
    }
    run.wait_for_exit("producer:1:600:600").await;
    let second = run.submitted(&[1]);
    run.join_all(&second).await;

    // Every job ran; only jobs a was running (or had run without a durable
    // settlement) at the kill ran twice, on a and then elsewhere.
    let mut on: HashMap<String, Vec<String>> = HashMap::new();
    for (id, inc) in &run.runs()[runs_before_kill..] {
        on.entry(id.clone()).or_default().push(inc.clone());
    }
    for id in second.keys() {
        assert!(on.contains_key(id), "{id} never ran");
    }
    for (id, incs) in &on {
        assert!(
            second.contains_key(id),
            "{id} of the first producer ran again"
        );
        if incs.len() > 1 {
            assert!(
                incs.len() == 2 && incs[0].starts_with("a.") && !incs[1].starts_with("a."),
                "{id} ran on {incs:?}"
            );
        }
    }
    run.assert_one_writer_per_shard();
}

/// One etcd member of three killed (a follower: the leader's loss costs
/// an election, docs/guide/shards.md): nothing stops. All of etcd stopped
/// past the TTL: every process stops its shards before its lease could
/// expire, no shard is run by two processes, and work resumes when etcd
/// returns. At the default TTL (5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_etcd_stops_writing_before_the_lease_can_expire() {
    let ttl = 5;
    let mut run = Run::new(3, ttl);
    for name in ["a", "b", "c"] {
        run.start_engine(name).await;
    }
    run.wait_until("a, b and c hold four shards each", || {
        run.balanced(&["a", "b", "c"])
    })
    .await;
    let moves_before: usize = ["a", "b", "c"].iter().map(|n| run.moves(n).len()).sum();

    // One member of three killed: the others keep the quorum, leases are
    // renewed, and jobs go on running.
    // `GAFFER_PLACEMENT_KILL_LEADER=1` kills the leader instead (by hand:
    // whether its election fits in the lease's slack is a matter of time).
    let leader = run.etcd.leader();
    let victim = if std::env::var("GAFFER_PLACEMENT_KILL_LEADER").is_ok_and(|v| v == "1") {
        leader
    } else {
        (leader + 1) % 3
    };
    run.etcd.kill_member(victim);
    run.spawn("producer:0:0:300");
    run.wait_for_exit("producer:0:0:300").await;
    let first = run.submitted(&[0]);
    run.join_all(&first).await;
    let moves_after: usize = ["a", "b", "c"].iter().map(|n| run.moves(n).len()).sum();
    assert_eq!(
        moves_before,
        moves_after,
        "a shard moved while etcd kept its quorum; child logs:\n{}",
        common::child_logs(&run.root, 3000)
    );

    // All of etcd stopped: each process stops all its shards, saying why.
    let stopped_at = now_ms();
    run.etcd.stop_all();
    run.wait_until("every process stopped its shards", || {
        ["a", "b", "c"].iter().all(|n| run.held(n).is_empty())
    })
    .await;
    // Jobs sent meanwhile wait in the inboxes.
    run.spawn("producer:1:300:100");
    tokio::time::sleep(Duration::from_secs(ttl * 2)).await;
    let restarted_at = now_ms();
    // Until etcd came back, each process only lost shards, each saying
    // its lease could not be renewed.
    for n in ["a", "b", "c"] {
        for (at, gained, shard, reason) in run.moves(n) {
            if at >= stopped_at && at < restarted_at {
                assert!(!gained, "{n} gained {shard} while etcd was down");
                assert_eq!(reason, "lease_expiring", "{n} lost {shard}: {reason}");
            }
        }
    }
    run.etcd.start_all();
    run.wait_until("the shards are held again", || {
        run.balanced(&["a", "b", "c"])
    })
    .await;
    run.wait_for_exit("producer:1:300:100").await;
    let second = run.submitted(&[1]);
    run.join_all(&second).await;
    run.assert_one_writer_per_shard();
}

/// A process paused (SIGSTOP) past its TTL finds, when resumed, its shards
/// taken: it stops them, writes none of them, and takes its new share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_paused_past_its_ttl_stops_its_old_shards_and_takes_its_share() {
    let ttl = 3;
    let mut run = Run::new(1, ttl);
    for name in ["a", "b", "c"] {
        run.start_engine(name).await;
    }
    run.wait_until("a, b and c hold four shards each", || {
        run.balanced(&["a", "b", "c"])
    })
    .await;
    let a_pid = run.children.0["engine:a"].id() as i32;
    signal(a_pid, "STOP");
    let paused_at = now_ms();
    run.wait_until("b and c take a's shards", || run.balanced(&["b", "c"]))
        .await;
    // Work runs on b and c meanwhile.
    run.spawn("producer:0:0:200");
    run.wait_for_exit("producer:0:0:200").await;
    let first = run.submitted(&[0]);
    run.join_all(&first).await;
    signal(a_pid, "CONT");
    // a stops what it held (its lease ended), then takes its share back
    // from b and c, which drain it first.
    run.wait_until("a holds its share again", || {
        run.held("a").len() == 4 && run.balanced(&["a", "b", "c"])
    })
    .await;
    let a: Vec<_> = run
        .moves("a")
        .into_iter()
        .filter(|(at, ..)| *at >= paused_at)
        .collect();
    let lost: Vec<&String> = a.iter().filter(|(_, g, ..)| !g).map(|(.., r)| r).collect();
    assert_eq!(lost.len(), 4, "a's moves: {a:?}");
    // Its lease's deadline passed during the pause, or etcd said the
    // lease was gone, or another held the shard's key: whichever it saw
    // first on waking.
    assert!(
        lost.iter()
            .all(|r| ["lease_expiring", "lease_lost", "key_lost"].contains(&r.as_str())),
        "a's moves: {a:?}"
    );
    run.spawn("producer:1:200:100");
    run.wait_for_exit("producer:1:200:100").await;
    let second = run.submitted(&[1]);
    run.join_all(&second).await;
    run.assert_one_writer_per_shard();
}

fn signal(pid: i32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// One process in-process: it gains every shard as a free one (counted by
/// `gaffer_shard_moves_total`), runs jobs on them, and its shutdown drains
/// each, deletes its keys and revokes its lease (nothing of it is left in
/// etcd, so the next process need not wait for the TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_alone_takes_every_shard_and_its_shutdown_leaves_nothing_in_etcd() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::set_global_recorder(recorder).unwrap();
    let run = Run::new(1, 30);
    let endpoints = run.etcd.endpoints().join(",");
    let (engines, mut events) = start_engines(&run.root, "solo", &endpoints, 30).await;
    assert_eq!(engines.member(), Some("solo"));
    let mut gained = HashSet::new();
    while gained.len() < SHARDS {
        match common::within(events.recv()).await.unwrap() {
            ShardEvent::Gained { shard, reason } => {
                assert_eq!(reason, gaffer::remote::MoveReason::Free { previous: None });
                gained.insert(shard);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(engines.owned(), (0..SHARDS).collect::<Vec<_>>());
    // Each store names its owner, the member, as `gaffer health` reads it.
    for shard in [0, SHARDS - 1] {
        assert_eq!(owner_of(&run.root, shard).await, "solo", "shard {shard}");
    }
    let keys = run
        .etcd
        .etcdctl(&["get", "--prefix", "/gaffer-test/placement/", "--keys-only"])
        .unwrap();
    assert_eq!(
        keys.lines().filter(|l| !l.is_empty()).count(),
        SHARDS + 1,
        "{keys}"
    );
    let h = engines
        .submit(Tally {
            key: "solo-1".into(),
            n: 21,
        })
        .await
        .unwrap();
    assert_eq!(common::within(h.join()).await.unwrap().unwrap(), 42);

    for (shard, result) in engines.shutdown().await {
        result.unwrap_or_else(|e| panic!("shard {shard}: {e}"));
    }
    let keys = run
        .etcd
        .etcdctl(&["get", "--prefix", "/gaffer-test/placement/", "--keys-only"])
        .unwrap();
    assert_eq!(keys.trim(), "", "left in etcd: {keys}");
    let mut lost = HashSet::new();
    while let Ok(e) = common::within(events.recv()).await {
        if let ShardEvent::Lost { shard, reason } = e {
            assert_eq!(reason, gaffer::remote::MoveReason::ShutDown);
            lost.insert(shard);
        }
    }
    assert_eq!(lost.len(), SHARDS);
    // Counted by direction and reason.
    let counts: HashMap<(String, String), u64> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| k.key().name() == "gaffer_shard_moves_total")
        .map(|(k, _, _, v)| {
            let label = |n: &str| {
                k.key()
                    .labels()
                    .find(|l| l.key() == n)
                    .map(|l| l.value().to_string())
                    .unwrap_or_default()
            };
            let metrics_util::debugging::DebugValue::Counter(c) = v else {
                panic!("{v:?}")
            };
            ((label("direction"), label("reason")), c)
        })
        .collect();
    assert_eq!(counts[&("gained".into(), "free".into())], SHARDS as u64);
    assert_eq!(counts[&("lost".into(), "shut_down".into())], SHARDS as u64);
}
