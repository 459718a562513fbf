//! Per-key concurrency (#37 §2) at the size, checked from a side
//! file: 200 values × 20 jobs, each job appending `start {value} {seq}`
//! and `end {value} {seq}` lines to it (one `write` per line, appended, so
//! a `kill -9` never leaves half a line).
//!
//! - `n = 2`: no value ever has three jobs running at once; in process (on
//!   paused time, so the schedule depends on the claim order only), and in
//!   a child process on a local-disk store SIGKILLed three times while it
//!   runs jobs.
//! - `n = 1`: each value's jobs start in submit order, one at a time; in
//!   process, and across three SIGKILLs.
//!
//! What a kill does to the side file, and how the checks treat it. The
//! parent appends `boot` before it starts each incarnation, after the last
//! one's process is dead (`wait` on it returned). A job whose `start` has
//! no `end` before the next `boot` was running when its process died: its
//! interval ends at the kill, so the checks drop it from what is running
//! at the `boot`. The new engine opens the store, which re-queues the dead
//! process's claims at once (taquba's open, not a lease expiry: there is
//! one writer and it is gone), and counts from zero what it holds in
//! memory: it runs those jobs again (at least once), and they count
//! against their value's limit like any other. A job that wrote `end` but
//! whose settlement was not yet durable runs again too: with `n = 1` that
//! can only be its value's last ended job (the next one of the value is
//! not claimed before its predecessor's settlement commits, as the limit
//! counts a job until its settlement ends), so the first start of a value
//! after a `boot` is its job that was running at the kill if there was
//! one, else its last ended job or the one after it. Jobs never fail, so
//! no retry reorders a value's jobs.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{Concurrency, Engine, Fairness, Job, JobContext, JobOptions};
use serde::{Deserialize, Serialize};

/// Values (tenants).
const VALUES: u32 = 200;
/// Jobs per value.
const JOBS: u32 = 20;
/// Each job's sleep between its start and its end.
const SLEEP: Duration = Duration::from_millis(5);
/// Workers of the type: enough that a value's turn could take more slots
/// than its limit.
const WORKERS: usize = 16;
/// The kill test's child reads its directory from this.
const DIR_VAR: &str = "GAFFER_FAIR_KILL_DIR";

/// The side file the jobs append to (the engine's state), and how many
/// `end` lines this process appended (what the in-process runs wait on,
/// without reading the file back).
struct SideFile(PathBuf, AtomicUsize);

impl SideFile {
    fn new(path: PathBuf) -> Self {
        Self(path, AtomicUsize::new(0))
    }

    fn append(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }
}

/// Notes its start, sleeps, notes its end.
#[derive(Debug, Serialize, Deserialize)]
struct Step {
    seq: u32,
}

impl Job for Step {
    const NAME: &'static str = "fair-step";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, ctx: JobContext) -> Result<(), std::io::Error> {
        let value = ctx
            .headers()
            .get("tenant")
            .cloned()
            .unwrap_or_else(|| "-".into());
        let side = ctx.state::<Arc<SideFile>>();
        side.append(&format!("start {value} {}\n", self.seq));
        tokio::time::sleep(SLEEP).await;
        side.append(&format!("end {value} {}\n", self.seq));
        side.1.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn names() -> Vec<String> {
    (0..VALUES).map(|v| format!("v{v}")).collect()
}

/// The type's options: at most `limit` of a value at once, and every
/// value of weight 4, so that a value's turn would give it 4 slots: the
/// limit, not the turn, is what holds it.
fn options(limit: usize) -> JobOptions {
    JobOptions {
        concurrency: Some(WORKERS),
        fair_by: Some(
            names()
                .iter()
                .fold(Fairness::header("tenant"), |f, n| f.weight(n.as_str(), 4)),
        ),
        key_concurrency: Some(Concurrency::per_header("tenant", limit).unwrap()),
        ..Default::default()
    }
}

/// Submit every job, seq by seq, each seq for every value in turn: each
/// value's jobs in seq order.
async fn submit_all(engine: &Engine) {
    let names = names();
    for seq in 0..JOBS {
        for v in &names {
            let mut opts = gaffer::SubmitOptions::default();
            opts.headers.insert("tenant".into(), v.clone());
            engine.submit_with(Step { seq }, opts).await.unwrap();
        }
    }
}

/// One line of the side file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Boot,
    Start(String, u32),
    End(String, u32),
}

fn events(path: &Path) -> Vec<Event> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| match line.split(' ').collect::<Vec<_>>()[..] {
            ["boot"] => Event::Boot,
            ["start", v, s] => Event::Start(v.into(), s.parse().unwrap()),
            ["end", v, s] => Event::End(v.into(), s.parse().unwrap()),
            _ => panic!("a torn line: {line:?}"),
        })
        .collect()
}

/// Jobs (value, seq) with an `end` line.
fn ended(events: &[Event]) -> HashSet<(String, u32)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::End(v, s) => Some((v.clone(), *s)),
            _ => None,
        })
        .collect()
}

/// No value ever has more than `limit` jobs running: a job runs from its
/// `start` to its `end`, or to the next `boot` (its process was killed).
/// Answers the most of one value seen at once.
fn check_limit(events: &[Event], limit: usize) -> usize {
    let mut running: HashMap<&str, usize> = HashMap::new();
    let mut most = 0;
    let mut boots = 0;
    for e in events {
        match e {
            Event::Boot => {
                boots += 1;
                running.clear();
            }
            Event::Start(v, s) => {
                let n = running.entry(v).or_insert(0);
                *n += 1;
                most = most.max(*n);
                assert!(
                    *n <= limit,
                    "{v} ran {n} at once at the start of {s} (incarnation {boots})"
                );
            }
            Event::End(v, s) => {
                let n = running.entry(v).or_insert(0);
                assert!(*n > 0, "{v} {s} ended without a start");
                *n -= 1;
            }
        }
    }
    most
}

/// With `n = 1`: each value's jobs start one at a time, in seq (submit)
/// order. Within an incarnation a value goes `start s`, `end s`,
/// `start s+1`, …; its first start after a `boot` is the job that was
/// running at the kill if it had one, else its last ended job again (its
/// settlement was not durable) or the next one. Every job ended.
fn check_order(events: &[Event]) {
    #[derive(Default)]
    struct Value {
        /// The job running now (started, not ended, no boot since).
        running: Option<u32>,
        /// The job that was running at the last kill.
        killed: Option<u32>,
        /// The last job that ended.
        last_end: Option<u32>,
        /// No start of this value since the last boot yet.
        fresh: bool,
    }
    let mut values: HashMap<&str, Value> = HashMap::new();
    let mut boots = 0;
    for e in events {
        match e {
            Event::Boot => {
                boots += 1;
                for v in values.values_mut() {
                    // A job killed before and not started since stays
                    // the one to start first.
                    if let Some(r) = v.running.take() {
                        v.killed = Some(r);
                    }
                    v.fresh = true;
                }
            }
            Event::Start(name, s) => {
                let v = values.entry(name).or_default();
                assert_eq!(
                    v.running, None,
                    "{name} {s} started while {:?} ran (incarnation {boots})",
                    v.running
                );
                let next = v.last_end.map_or(0, |e| e + 1);
                let allowed: Vec<u32> = match (v.fresh, v.killed) {
                    (true, Some(k)) => vec![k],
                    (true, None) => v.last_end.into_iter().chain([next]).collect(),
                    (false, _) => vec![next],
                };
                assert!(
                    allowed.contains(s),
                    "{name} started {s}, out of order: expected one of {allowed:?} \
                     (incarnation {boots})"
                );
                v.running = Some(*s);
                v.killed = None;
                v.fresh = false;
            }
            Event::End(name, s) => {
                let v = values.entry(name).or_default();
                assert_eq!(v.running, Some(*s), "{name} {s} ended while not running");
                v.running = None;
                v.last_end = Some(*s);
            }
        }
    }
    assert_eq!(values.len(), VALUES as usize);
    for (name, v) in &values {
        assert_eq!(v.last_end, Some(JOBS - 1), "{name}");
    }
}

/// Every job of every value ended at least once.
fn check_all_ended(events: &[Event]) {
    let ended = ended(events);
    for v in names() {
        for s in 0..JOBS {
            assert!(ended.contains(&(v.clone(), s)), "{v} {s} never ended");
        }
    }
}

// ---- in process, no kill ----

/// Every job queued while the type is paused, then run; the side file
/// answered.
async fn run_in_process(limit: usize) -> Vec<Event> {
    let tmp = tempfile::tempdir().unwrap();
    let side = tmp.path().join("events.log");
    let file = Arc::new(SideFile::new(side.clone()));
    let engine = common::memory_builder(common::mock_clock())
        .register_with::<Step>(options(limit))
        .state(file.clone())
        .start()
        .await
        .unwrap();
    engine.pause(Step::NAME).await.unwrap();
    submit_all(&engine).await;
    engine.resume(Step::NAME).await.unwrap();
    let total = (VALUES * JOBS) as usize;
    // In process nothing is killed: each job ends once.
    common::eventually("every job ended", Duration::from_secs(3600), async || {
        file.1.load(Ordering::SeqCst) >= total
    })
    .await;
    engine.shutdown().await.unwrap();
    events(&side)
}

#[tokio::test(start_paused = true)]
async fn a_limit_of_two_holds_for_200_values_of_20_jobs() {
    let events = run_in_process(2).await;
    check_all_ended(&events);
    assert_eq!(check_limit(&events, 2), 2, "the limit was reached");
}

#[tokio::test(start_paused = true)]
async fn a_limit_of_one_runs_200_values_in_submit_order() {
    let events = run_in_process(1).await;
    check_limit(&events, 1);
    check_order(&events);
}

// ---- across kill -9 ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the kill tests below as a child process"]
async fn fairness_kill_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let dir = Path::new(&dir);
    let limit: usize = std::fs::read_to_string(dir.join("limit"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .flush_interval(Duration::from_millis(1))
        .register_with::<Step>(options(limit))
        .state(Arc::new(SideFile::new(dir.join("events.log"))))
        .start()
        .await
        .unwrap();
    let submitted = dir.join("submitted");
    if !submitted.exists() {
        // Queued while paused, so that every value's jobs are in place
        // before the first claim, and no kill comes during the submissions
        // (the parent kills only once `submitted` exists).
        engine.pause(Step::NAME).await.unwrap();
        submit_all(&engine).await;
        common::write_whole(&submitted, b"");
        engine.resume(Step::NAME).await.unwrap();
    }
    std::future::pending::<()>().await;
}

/// Run the child with `limit`, SIGKILL it once `kill_after[i]` jobs have
/// ended (counted from the side file), start it again, and after the last
/// kill let it end every job; answers the side file's events. Each wait is
/// bounded (two minutes, then a panic with the child's log).
async fn run_with_kills(limit: usize, kill_after: &[usize]) -> Vec<Event> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let side = dir.join("events.log");
    std::fs::write(dir.join("limit"), limit.to_string()).unwrap();
    let total = (VALUES * JOBS) as usize;
    let boot = || {
        SideFile::new(side.clone()).append("boot\n");
        common::spawn_test_child("fairness_kill_child", DIR_VAR, dir)
    };
    let wait_until_ended = async |n: usize| {
        let t0 = std::time::Instant::now();
        loop {
            let done = ended(&events(&side)).len();
            if done >= n {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "{done} of {n} ended: {}",
                common::child_logs(dir, 2000)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    for &threshold in kill_after {
        let mut child = boot();
        common::wait_for_child_file(dir, &dir.join("submitted"), "the submissions").await;
        wait_until_ended(threshold).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let mut child = boot();
    wait_until_ended(total).await;
    child.kill().unwrap();
    child.wait().unwrap();
    let events = events(&side);
    let boots = events.iter().filter(|e| **e == Event::Boot).count();
    assert_eq!(boots, kill_after.len() + 1);
    events
}

/// Kills at a quarter, half and three quarters of the jobs ended.
const KILLS: [usize; 3] = [1000, 2000, 3000];

/// `n = 2` across three SIGKILLs: no value ever ran three at once, in any
/// incarnation, and every job ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_two_holds_across_three_kills() {
    let events = run_with_kills(2, &KILLS).await;
    check_all_ended(&events);
    assert_eq!(check_limit(&events, 2), 2, "the limit was reached");
}

/// `n = 1` across three SIGKILLs: each value's jobs started one at a time
/// and in submit order, a job interrupted by a kill running again before
/// its value's next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_of_one_keeps_submit_order_across_three_kills() {
    let events = run_with_kills(1, &KILLS).await;
    check_limit(&events, 1);
    check_order(&events);
}
