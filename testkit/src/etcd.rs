//! A real etcd cluster on loopback for the tests: Debian's `etcd-server`
//! (3.4), one process per member.
//!
//! The server is found at `$GAFFER_ETCD_SERVER`, else `/usr/bin/etcd`
//! (`apt-get install etcd-server`; `.ci/run` installs it). Each cluster
//! gets free loopback ports (a client and a peer port per member) and a
//! temporary directory holding each member's data dir (`member-N.etcd`)
//! and log (`member-N.log`, appended to across restarts). The timing is
//! etcd's own default, written out: a heartbeat every 100 ms, an election
//! after 1 s without one. A member can be killed (SIGKILL) and started
//! again on its data, name and ports; every member is killed when the
//! handle drops.
//!
//! Everything here blocks the calling thread: a start waits, up to
//! [`LIMIT`] of real time, until the members answer. From an async test,
//! call it from a multi-threaded runtime or through `spawn_blocking`.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{LIMIT, POLL};

/// How many times [`EtcdCluster::start`] picks new ports after a clash (a
/// port another process bound between the pick and etcd's bind).
const ATTEMPTS: usize = 5;

/// The most one step of a check of a member (a connect, a request, its
/// answer) waits. etcd answers at once, or in milliseconds; a check that
/// takes longer (a quorum read while the members elect a leader, a port
/// held by a process that is not etcd) only fails, and the wait checks
/// again, so the bound keeps a poll short and claims nothing about speed.
const CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// How much of the end of each member's log [`EtcdCluster::logs`] gives.
const TAIL: usize = 6000;

/// Clusters started by this process, for unique member names.
static CLUSTERS: AtomicUsize = AtomicUsize::new(0);

/// A running etcd cluster on loopback; every member is killed when it
/// drops.
pub struct EtcdCluster {
    /// The `etcd` executable.
    binary: PathBuf,
    /// The cluster's `--initial-cluster-token`, also the prefix of its
    /// members' names: unique on this machine while this process runs.
    token: String,
    /// The members, by index.
    members: Vec<Member>,
    /// Where the members' data dirs and logs are; removed on drop.
    dir: tempfile::TempDir,
}

/// One member of an [`EtcdCluster`].
struct Member {
    /// Its `--name`, unique on this machine: `{token}-{index}`.
    name: String,
    /// Its client port (`--listen-client-urls`).
    client: u16,
    /// Its peer port (`--listen-peer-urls`).
    peer: u16,
    /// The running process; `None` once killed.
    child: Option<Child>,
    /// The length of its log when it was last started: what it has said
    /// since.
    log_from: u64,
}

/// Why the members did not come to answer.
enum Failed {
    /// A member could not bind its ports, or another server answers on
    /// them: new ports may do.
    Clash(String),
    /// Anything else.
    Other(String),
}

/// What one check of a member found, when not an answer.
enum Check {
    /// Not answering (yet): why.
    Not(String),
    /// Another etcd answers on the member's client port.
    Foreign(String),
}

impl EtcdCluster {
    /// Start a cluster of `members` (1, or 3 for the member-loss tests) on
    /// free loopback ports, and wait until every member answers: its
    /// `/health` is true (a quorum read through it succeeded) and it is
    /// the member this cluster started on that port. Panics with the
    /// members' logs if they do not answer within [`LIMIT`].
    pub fn start(members: usize) -> Self {
        Self::start_on(members, free_ports)
    }

    /// [`start`](Self::start) on the ports `pick(n)` gives (`n` of them:
    /// each member's client port, then its peer port), picking again after
    /// a clash.
    fn start_on(members: usize, mut pick: impl FnMut(usize) -> Vec<u16>) -> Self {
        assert!(members >= 1, "an etcd cluster has at least one member");
        let token = format!(
            "gaffer-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        );
        let mut cluster = Self {
            binary: etcd_server(),
            token,
            members: Vec::new(),
            dir: tempfile::Builder::new()
                .prefix("gaffer-etcd-")
                .tempdir()
                .expect("creating a temporary directory for etcd's members"),
        };
        let all: Vec<usize> = (0..members).collect();
        for attempt in 1..=ATTEMPTS {
            let ports = pick(2 * members);
            assert_eq!(ports.len(), 2 * members, "two ports per member");
            cluster.members = all
                .iter()
                .map(|&i| Member {
                    name: format!("{}-{i}", cluster.token),
                    client: ports[2 * i],
                    peer: ports[2 * i + 1],
                    child: None,
                    log_from: 0,
                })
                .collect();
            for &i in &all {
                cluster.spawn(i);
            }
            match cluster.wait_answering(&all) {
                Ok(()) => return cluster,
                Err(Failed::Clash(why)) if attempt < ATTEMPTS => {
                    cluster.stop_all();
                    cluster.forget_attempt(&why);
                }
                Err(Failed::Clash(why)) => panic!(
                    "etcd found no free ports in {ATTEMPTS} attempts; last: {why}; {}",
                    cluster.logs()
                ),
                Err(Failed::Other(why)) => panic!("etcd did not start: {why}; {}", cluster.logs()),
            }
        }
        unreachable!("every attempt returns or panics")
    }

    /// Every member's client endpoint, `http://127.0.0.1:PORT`, by index.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Member `member`'s client endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self, member: usize) -> String {
        format!("http://127.0.0.1:{}", self.member(member).client)
    }

    /// SIGKILL member `member` and wait for it to exit; nothing if it is
    /// not running. Its data dir stays, for [`restart_member`](Self::restart_member)
    /// or [`start_all`](Self::start_all).
    pub fn kill_member(&mut self, member: usize) {
        let name = self.member(member).name.clone();
        if let Some(mut child) = self.members[member].child.take() {
            // SIGKILL; an error only says it had exited already.
            let _ = child.kill();
            child
                .wait()
                .unwrap_or_else(|e| panic!("waiting for etcd member {name} to exit: {e}"));
        }
    }

    /// SIGKILL every running member (all of them first, then wait for each
    /// to exit). Their data dirs stay, for [`start_all`](Self::start_all).
    pub fn stop_all(&mut self) {
        let mut killed = Vec::new();
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                killed.push((member.name.clone(), child));
            }
        }
        for (name, mut child) in killed {
            child
                .wait()
                .unwrap_or_else(|e| panic!("waiting for etcd member {name} to exit: {e}"));
        }
    }

    /// Start every member that is not running, on its data dir, name and
    /// ports, and wait until every member answers. After
    /// [`stop_all`](Self::stop_all) that is the cluster back with its data.
    /// Panics with the logs if they do not answer within [`LIMIT`] (or a
    /// port of theirs was taken meanwhile).
    pub fn start_all(&mut self) {
        for i in 0..self.members.len() {
            if self.members[i].child.is_none() {
                self.spawn(i);
            }
        }
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.wait_or_panic(&all);
    }

    /// The index of the member that leads the cluster now, asked of every
    /// running member (`etcdctl endpoint status`): the leader's id as the
    /// members report it, matched to the member that reports it as its
    /// own. Panics with the logs if no running member names a leader
    /// within [`LIMIT`].
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + LIMIT;
        loop {
            let running: Vec<usize> = (0..self.members.len())
                .filter(|i| self.members[*i].child.is_some())
                .collect();
            let endpoints: Vec<String> = running.iter().map(|i| self.endpoint(*i)).collect();
            let status = etcdctl("2s", &endpoints, &["endpoint", "status", "-w", "json"]);
            let found = status.ok().and_then(|out| {
                let rows: Vec<serde_json::Value> = serde_json::from_str(&out).ok()?;
                let ids: Vec<(u64, u64)> = rows
                    .iter()
                    .filter_map(|r| {
                        let s = &r["Status"];
                        Some((s["header"]["member_id"].as_u64()?, s["leader"].as_u64()?))
                    })
                    .collect();
                let leader = ids.iter().map(|(_, l)| *l).find(|l| *l != 0)?;
                let at = ids.iter().position(|(me, _)| *me == leader)?;
                running.get(at).copied()
            });
            match found {
                Some(i) => return i,
                None if Instant::now() < deadline => std::thread::sleep(POLL),
                None => panic!("no running etcd member names a leader; {}", self.logs()),
            }
        }
    }

    /// `etcdctl` (API 3) with `args` against every running member: its
    /// output, or what it said on failing (2 s to connect, 5 s for the
    /// request).
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let endpoints: Vec<String> = (0..self.members.len())
            .filter(|i| self.members[*i].child.is_some())
            .map(|i| self.endpoint(i))
            .collect();
        etcdctl("5s", &endpoints, args)
    }

    /// Kill member `member` if it runs, start it again on its data dir,
    /// name and ports, and wait until it answers. It answers only with a
    /// quorum: in a 3-member cluster, one other member must be running.
    /// Panics with the logs if it does not answer within [`LIMIT`].
    pub fn restart_member(&mut self, member: usize) {
        self.kill_member(member);
        self.spawn(member);
        self.wait_or_panic(&[member]);
    }

    /// The end of each member's log (its last few kilobytes), each under
    /// its name, ports and state: for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = format!("etcd members' logs (in {}):", self.dir.path().display());
        for (i, m) in self.members.iter().enumerate() {
            let text = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
            let mut start = text.len().saturating_sub(TAIL);
            while !text.is_char_boundary(start) {
                start += 1;
            }
            let state = if m.child.is_some() {
                "started"
            } else {
                "killed"
            };
            out.push_str(&format!(
                "\n--- member {i}, {} (client {}, peer {}, {state}):\n{}",
                m.name,
                m.client,
                m.peer,
                &text[start..]
            ));
        }
        out
    }

    /// Member `member`, or a panic naming the cluster's size.
    fn member(&self, member: usize) -> &Member {
        let count = self.members.len();
        self.members
            .get(member)
            .unwrap_or_else(|| panic!("no etcd member {member}: the cluster has {count}"))
    }

    /// Member `i`'s data dir.
    fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("member-{i}.etcd"))
    }

    /// Member `i`'s log.
    fn log_path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("member-{i}.log"))
    }

    /// Start member `i`'s process, its output appended to its log.
    fn spawn(&mut self, i: usize) {
        let log_path = self.log_path(i);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log_path.display()));
        let log_from = log.metadata().map_or(0, |m| m.len());
        let stderr = log
            .try_clone()
            .unwrap_or_else(|e| panic!("opening {} twice: {e}", log_path.display()));
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let member = &self.members[i];
        let client = format!("http://127.0.0.1:{}", member.client);
        let peer = format!("http://127.0.0.1:{}", member.peer);
        let mut cmd = Command::new(&self.binary);
        // The initial flags matter only to a member without data: one that
        // has it rejoins the cluster its data dir names.
        cmd.args(["--name", &member.name])
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            // 3.4's default logger (capnslog) is deprecated and says so.
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        if let Some(arch) = unsupported_arch()
            && std::env::var_os("ETCD_UNSUPPORTED_ARCH").is_none()
        {
            cmd.env("ETCD_UNSUPPORTED_ARCH", arch);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.binary.display()));
        let member = &mut self.members[i];
        member.child = Some(child);
        member.log_from = log_from;
    }

    /// After a clash: note it in each member's log and remove the data
    /// dirs, so the next attempt's members start new.
    fn forget_attempt(&self, why: &str) {
        for i in 0..self.members.len() {
            if let Ok(mut log) = OpenOptions::new().append(true).open(self.log_path(i)) {
                let _ = writeln!(log, "gaffer-testkit: {why}; starting again on new ports");
            }
            let data = self.data_dir(i);
            match std::fs::remove_dir_all(&data) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => panic!("removing {}: {e}", data.display()),
            }
        }
    }

    /// [`wait_answering`](Self::wait_answering), panicking with the logs
    /// if the members do not answer.
    fn wait_or_panic(&mut self, which: &[usize]) {
        if let Err(Failed::Clash(why) | Failed::Other(why)) = self.wait_answering(which) {
            panic!("etcd did not answer: {why}; {}", self.logs());
        }
    }

    /// Wait, up to [`LIMIT`], until each member of `which` answers
    /// ([`check`](Self::check)); fails at once when one of them exits.
    fn wait_answering(&mut self, which: &[usize]) -> Result<(), Failed> {
        let deadline = Instant::now() + LIMIT;
        let mut waiting = which.to_vec();
        let mut last = vec![String::new(); self.members.len()];
        loop {
            for &i in which {
                if let Some(status) = self.exited(i) {
                    let why = format!("member {i} ({}) exited: {status}", self.members[i].name);
                    return Err(
                        if self.said_since_start(i).contains("address already in use") {
                            Failed::Clash(why)
                        } else {
                            Failed::Other(why)
                        },
                    );
                }
            }
            let mut still = Vec::new();
            for i in waiting {
                match self.check(i) {
                    Ok(()) => {}
                    Err(Check::Foreign(why)) => return Err(Failed::Clash(why)),
                    Err(Check::Not(why)) => {
                        last[i] = why;
                        still.push(i);
                    }
                }
            }
            waiting = still;
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let seen: Vec<String> = waiting
                    .iter()
                    .map(|&i| format!("member {i}: {}", last[i]))
                    .collect();
                return Err(Failed::Other(format!(
                    "not answering within {LIMIT:?}: {}",
                    seen.join("; ")
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Member `i`'s exit status, if it was started and has exited.
    fn exited(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        let member = &mut self.members[i];
        let child = member.child.as_mut()?;
        child
            .try_wait()
            .unwrap_or_else(|e| panic!("checking on etcd member {}: {e}", member.name))
    }

    /// What member `i` has logged since it was last started.
    fn said_since_start(&self, i: usize) -> String {
        let mut text = Vec::new();
        if let Ok(mut log) = std::fs::File::open(self.log_path(i)) {
            let _ = log.read_to_end(&mut text);
        }
        let from = usize::try_from(self.members[i].log_from)
            .unwrap_or(usize::MAX)
            .min(text.len());
        String::from_utf8_lossy(&text[from..]).into_owned()
    }

    /// Whether member `i` answers: `GET /health` says true (etcd 3.4 reads
    /// a key through the quorum for it), and the etcd on its client port is
    /// this member (`/v3/cluster/member/list`, through etcd's JSON gateway,
    /// names the member that answers), not another cluster's that bound the
    /// port first.
    fn check(&self, i: usize) -> Result<(), Check> {
        let member = &self.members[i];
        let (status, health) = http(member.client, "GET /health", "")
            .map_err(|e| Check::Not(format!("GET /health: {e}")))?;
        if !health.contains(r#""health":"true""#) {
            return Err(Check::Not(format!("GET /health: {status} {health}")));
        }
        let (status, list) = http(member.client, "POST /v3/cluster/member/list", "{}")
            .map_err(|e| Check::Not(format!("listing the members: {e}")))?;
        let list: serde_json::Value = serde_json::from_str(&list)
            .map_err(|e| Check::Not(format!("listing the members: {status} {list:?}: {e}")))?;
        let me = &list["header"]["member_id"];
        let name = list["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| &m["ID"] == me)
            .and_then(|m| m["name"].as_str());
        match name {
            Some(name) if name == member.name => Ok(()),
            Some(name) => Err(Check::Foreign(format!(
                "port {} answers as etcd member {name}, not {}",
                member.client, member.name
            ))),
            None => Err(Check::Not(format!(
                "the member list names no member {me}: {list}"
            ))),
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The `etcd` executable: `$GAFFER_ETCD_SERVER`, else `/usr/bin/etcd`.
fn etcd_server() -> PathBuf {
    etcd_server_at(std::env::var_os("GAFFER_ETCD_SERVER").map(PathBuf::from))
}

/// The `etcd` executable `set` names, else `/usr/bin/etcd`; a panic saying
/// how to install it if it is not there.
fn etcd_server_at(set: Option<PathBuf>) -> PathBuf {
    let path = set.unwrap_or_else(|| PathBuf::from("/usr/bin/etcd"));
    assert!(
        path.is_file(),
        "{} is missing: the etcd tests run a real etcd server; install Debian's with \
         `apt-get install etcd-server` (.ci/run installs it), or set GAFFER_ETCD_SERVER \
         to an etcd executable",
        path.display()
    );
    path
}

/// The value `ETCD_UNSUPPORTED_ARCH` needs on this machine (Go's name of
/// its architecture), if any: etcd 3.4 runs on amd64 and ppc64le, and on
/// any other architecture only with the variable naming it.
fn unsupported_arch() -> Option<&'static str> {
    let go_arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        other => other,
    };
    (!matches!(go_arch, "amd64" | "ppc64le")).then_some(go_arch)
}

/// `count` distinct free loopback ports: each bound to port 0 at once (so
/// none twice), then released for etcd to bind. Another process can take
/// one meanwhile; [`EtcdCluster::start`] then picks again.
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..count)
        .map(|_| {
            TcpListener::bind(("127.0.0.1", 0))
                .unwrap_or_else(|e| panic!("binding a free loopback port: {e}"))
        })
        .collect();
    held.iter()
        .map(|l| {
            l.local_addr()
                .unwrap_or_else(|e| panic!("reading a bound port: {e}"))
                .port()
        })
        .collect()
}

/// `request` (`METHOD /path`) with `body` to `127.0.0.1:port`, as HTTP/1.0
/// (the answer is then never chunked, and the connection closes after
/// it): its status (0 if it has none) and its body. Each step waits
/// [`CHECK_TIMEOUT`] at most.
fn http(port: u16, request: &str, body: &str) -> std::io::Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, CHECK_TIMEOUT)?;
    stream.set_read_timeout(Some(CHECK_TIMEOUT))?;
    stream.set_write_timeout(Some(CHECK_TIMEOUT))?;
    write!(
        stream,
        "{request} HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_string()))
}

/// `etcdctl` (API 3, beside the server: Debian's `etcd-client`) with
/// `args` against `endpoints`: its output, or what it said on failing.
/// Bounded: 2 s to connect, `timeout` (`5s`) for the request; it waits
/// that long when no endpoint answers.
fn etcdctl(timeout: &str, endpoints: &[String], args: &[&str]) -> Result<String, String> {
    let bin = etcd_server().with_file_name("etcdctl");
    assert!(
        bin.is_file(),
        "{} is missing: `apt-get install etcd-client` (.ci/run installs it)",
        bin.display()
    );
    let out = Command::new(&bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .arg("--dial-timeout=2s")
        .arg(format!("--command-timeout={timeout}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "etcdctl {args:?} on {endpoints:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[cfg(test)]
mod tests;
