//! One engine process and four producer processes on one local-disk store:
//! each producer submits its jobs through a `Client` (a share of them keyed
//! with keys all four use), while the engine process is SIGKILLed once and
//! started again. Every distinct job runs, each shared key ends once with
//! one id and one output that all four producers get, and no producer sees
//! an error.
//!
//! The same runs on the loopback S3 server (feature `aws`), smaller.
//!
//! Sizes: `GAFFER_CK_JOBS` per producer (default 1 000) of which
//! `GAFFER_CK_SHARED` keyed with shared keys (default 200); the issue's
//! figures are 2 500 and 500 (`GAFFER_CK_JOBS=2500 GAFFER_CK_SHARED=500`).
//!
//! Execution is at least once: a job running when the engine is killed
//! runs again after the restart (its first run never settled), and so does
//! one whose run ended but whose settlement was not yet durable (a worker
//! takes its next job while the last one's commit waits for the flush, up
//! to the settlement window; a claim does not wait for its flush either).
//! So the test counts runs from the handler's own log and allows a second
//! run only for jobs that were in flight at the kill: at most [`WORKERS`]
//! running plus [`WINDOW`] settling, which the engine child is configured
//! with (the default window, 1 024, would make the bound say nothing).

mod common;

use common::lines;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use gaffer::{Engine, EngineBuilder, Job, JobContext, remote::Client, remote::ClientBuilder};
use serde::{Deserialize, Serialize};

/// The engine child's workers for `square`.
const WORKERS: usize = 16;
/// The engine child's settlement window: commits in flight before its pool
/// stops claiming.
const WINDOW: usize = 16;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Serialize, Deserialize)]
struct Square {
    x: u64,
    key: Option<String>,
}

/// Where the engine child appends one line per run.
struct RunLog(PathBuf);

impl Job for Square {
    const NAME: &'static str = "square";
    type Output = u64;
    type Error = std::io::Error;

    async fn run(&self, ctx: JobContext) -> Result<u64, std::io::Error> {
        let log = ctx.state::<Arc<RunLog>>();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log.0)?;
        // One write per line: concurrent runs append whole lines.
        f.write_all(format!("{}\n", ctx.id()).as_bytes())?;
        Ok(self.x * self.x)
    }

    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// The store: `$GAFFER_CK_URL` (configured from the AWS variables in the
/// environment) if set, else `{dir}/store`.
fn engine_store(dir: &Path) -> EngineBuilder {
    match std::env::var("GAFFER_CK_URL") {
        Ok(url) => Engine::builder().store(gaffer::Store::url(url)),
        Err(_) => Engine::builder().store(gaffer::Store::local_dir(dir.join("store"))),
    }
}

fn client_store(dir: &Path) -> ClientBuilder {
    match std::env::var("GAFFER_CK_URL") {
        Ok(url) => Client::builder().store(gaffer::Store::url(url)),
        Err(_) => Client::builder().store(gaffer::Store::local_dir(dir.join("store"))),
    }
}

/// The engine process: runs until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by client_kill as a child process"]
async fn ck_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_CK_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let _engine = engine_store(dir)
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .intake_poll(Duration::from_millis(20))
        .max_concurrent_jobs(WORKERS)
        .settlement_window(WINDOW)
        .register::<Square>()
        .state(Arc::new(RunLog(dir.join("runs.log"))))
        .start()
        .await
        .unwrap();
    std::fs::write(dir.join("engine-ready"), b"").unwrap();
    std::future::pending::<()>().await;
}

/// A producer process: submits its jobs, joins each, writes `id=output`
/// lines to `producer-{p}.out`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by client_kill as a child process"]
async fn ck_producer_child() {
    let Ok(dir) = std::env::var("GAFFER_CK_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let p = env_or("GAFFER_CK_P", 0);
    let jobs = env_or("GAFFER_CK_JOBS", 1000);
    let shared = env_or("GAFFER_CK_SHARED", 200);
    let client = client_store(dir)
        .poll_interval(Duration::from_millis(50))
        .open()
        .await
        .unwrap();
    let mut handles = Vec::new();
    for i in 0..jobs {
        let job = if i < shared {
            Square {
                x: i,
                key: Some(format!("shared-{i}")),
            }
        } else {
            Square {
                x: p * 1_000_000 + i,
                key: None,
            }
        };
        let x = job.x;
        handles.push((x, client.submit(job).await.unwrap()));
    }
    let mut out = String::new();
    for (x, h) in handles {
        let got = h.join().await.unwrap().unwrap();
        assert_eq!(got, x * x);
        out.push_str(&format!("{}={got}\n", h.id()));
    }
    std::fs::write(dir.join(format!("producer-{p}.out")), out).unwrap();
    client.close().await;
}

fn child(test: &str, dir: &Path, extra: &[(&str, String)]) -> Child {
    let n = std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    let log = std::fs::File::create(dir.join(format!("{test}-{n}.log"))).unwrap();
    let mut cmd = common::test_child(test);
    cmd.env("GAFFER_CK_DIR", dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

#[test]
fn four_producers_and_an_engine_killed_mid_stream_lose_nothing_and_run_each_key_once() {
    let tmp = tempfile::tempdir().unwrap();
    let jobs = env_or("GAFFER_CK_JOBS", 1000);
    let shared = env_or("GAFFER_CK_SHARED", 200);
    four_producers_and_a_kill(tmp.path(), jobs, shared, &[]);
}

#[cfg(feature = "aws")]
#[test]
fn the_same_on_a_real_s3_api() {
    let server = common::s3::S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let mut env: Vec<(&str, String)> = vec![("GAFFER_CK_URL", server.url("ck"))];
    let aws = server.env();
    env.extend(aws.iter().map(|(k, v)| (k.as_str(), v.clone())));
    let jobs = env_or("GAFFER_CK_S3_JOBS", 300);
    let shared = env_or("GAFFER_CK_S3_SHARED", 60);
    four_producers_and_a_kill(tmp.path(), jobs, shared, &env);
}

fn four_producers_and_a_kill(dir: &Path, jobs: u64, shared: u64, store: &[(&str, String)]) {
    let limit = Duration::from_secs(300);
    let mut engine = child("ck_engine_child", dir, store);
    common::eventually_blocking("the engine start", limit, || {
        dir.join("engine-ready").exists()
    });
    let sizes = [
        ("GAFFER_CK_JOBS", jobs.to_string()),
        ("GAFFER_CK_SHARED", shared.to_string()),
    ];
    let mut producers: Vec<Child> = (0..4)
        .map(|p| {
            let mut env = sizes.to_vec();
            env.extend(store.iter().cloned());
            env.push(("GAFFER_CK_P", p.to_string()));
            child("ck_producer_child", dir, &env)
        })
        .collect();

    // Kill the engine while the producers are still sending.
    let runs = dir.join("runs.log");
    common::eventually_blocking("the first runs", limit, || {
        lines(&runs).len() as u64 >= jobs / 20
    });
    engine.kill().unwrap();
    engine.wait().unwrap();
    let before_kill = lines(&runs).len();
    std::fs::remove_file(dir.join("engine-ready")).unwrap();
    let mut engine = child("ck_engine_child", dir, store);
    common::eventually_blocking("the engine restart", limit, || {
        dir.join("engine-ready").exists()
    });

    // The producers join their jobs one at a time through store reads,
    // mostly after the last has run: on a loaded 2-core machine a passing
    // run took 290 s, nearly all of it this wait (every job had run within
    // the first minute), and a run before it timed out in a 300 s wait. A
    // bound on a hang, not on speed.
    common::eventually_blocking("the producers finish", 3 * limit, || {
        for (p, producer) in producers.iter_mut().enumerate() {
            let Some(status) = producer.try_wait().unwrap() else {
                return false;
            };
            if !status.success() {
                let logs: Vec<String> = std::fs::read_dir(dir)
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("ck_producer"))
                    .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
                    .collect();
                panic!("producer {p} failed: {status}\n{}", logs.join("\n---\n"));
            }
        }
        true
    });
    engine.kill().unwrap();
    engine.wait().unwrap();

    // Every producer got every job's output (checked in the producer);
    // the shared keys' ids and outputs are the same in all four.
    let outs: Vec<HashMap<String, String>> = (0..4)
        .map(|p| {
            lines(&dir.join(format!("producer-{p}.out")))
                .into_iter()
                .map(|l| {
                    let (id, out) = l.split_once('=').unwrap();
                    (id.to_string(), out.to_string())
                })
                .collect()
        })
        .collect();
    for (p, out) in outs.iter().enumerate() {
        assert_eq!(out.len() as u64, jobs, "producer {p}");
    }
    for i in 0..shared {
        let id = gaffer::job::keyed_job_id(&format!("shared-{i}"));
        for out in &outs {
            assert_eq!(out.get(&id), Some(&(i * i).to_string()), "key shared-{i}");
        }
    }
    // Every distinct job ran; a job ran twice only if it was in flight at
    // the kill.
    let ran = lines(&runs);
    let mut per_job: HashMap<&str, usize> = HashMap::new();
    for id in &ran {
        *per_job.entry(id.as_str()).or_default() += 1;
    }
    let distinct: HashSet<&String> = outs.iter().flat_map(|o| o.keys()).collect();
    assert_eq!(distinct.len() as u64, 4 * (jobs - shared) + shared);
    for id in &distinct {
        assert!(per_job.contains_key(id.as_str()), "job {id} never ran");
    }
    let twice = per_job.values().filter(|n| **n > 1).count();
    assert!(per_job.values().all(|n| *n <= 2), "a job ran three times");
    // In flight at the kill: running (at most WORKERS), or run with the
    // settlement not yet durable. The pool claims only while fewer than
    // WINDOW settlements are in flight, and a claim takes at most its idle
    // workers, so running and settling together stay within WORKERS + WINDOW.
    assert!(
        twice <= WORKERS + WINDOW,
        "{twice} jobs ran twice; at most {} were in flight at the kill",
        WORKERS + WINDOW
    );
    println!(
        "client_kill: {} distinct jobs, {} runs ({} before the kill), {twice} run again after it",
        distinct.len(),
        ran.len(),
        before_kill
    );
}
