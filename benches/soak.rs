//! Soak (#30 §3): an engine under steady load for MINUTES, SIGKILLed and
//! restarted every 3 minutes, sampled every 10 s; it checks that nothing is
//! lost, that no periodic tick runs as two jobs, and that RSS, the store's
//! bytes and p99 latency stay flat over the last two thirds of the run.
//!
//! ```sh
//! cargo bench --bench soak -- MINUTES [RATE] [--keep]   # RATE jobs/s, 500 by default
//! ```
//!
//! The engine runs in a child process (this binary with `GAFFER_SOAK_CHILD`
//! set) on a local-disk store (`Store::local_dir`, the 2 ms flush), with
//! `retention(5 min)`. The child itself is the producer: it submits RATE
//! jobs a second of three types (`soak-echo` returns at once, `soak-spin`
//! spins ~20 µs of CPU, `soak-nap` sleeps 5–14 ms); 1 % fail permanently and
//! 5 % fail their first attempt and succeed on the retry (the queue's 1 s
//! retry backoff). Every 5 minutes (by the run's clock) it runs a batch of
//! 10 000 items (`soak-items`, batch id `soak-batch-{slot}`, batch retention
//! 5 min); a periodic job `soak-tick` fires every second. The parent SIGKILLs
//! the child every 3 minutes and starts the next one at once: producers go on
//! in the new child.
//!
//! Side files in the run's directory (the child appends one line per event,
//! unbuffered, so a SIGKILL loses at most the line being written):
//!
//! - `submitted.log`: `id kind mode submit_ms life`, written once `submit`
//!   returned (the submission is durable: acknowledged);
//! - `done.log`: `id kind status submit_ms done_ms same_life`, written when
//!   the job's `join` answered (`ok`, `failed`, or `notfound`);
//! - `rejoin.txt`: written by the parent after each kill: every acknowledged
//!   id without a `done` line. The next child joins each of them
//!   (`Engine::join` by id) and logs its answer, so every acknowledged job
//!   is answered by a join in some life;
//! - `ticks.log`: `at_ms job_id attempt life`, one line per run of the tick
//!   job;
//! - `pending.log`, `batches.log`, `ready.log`: the queues' counts every
//!   10 s, each completed batch run, each child's ready time.
//!
//! **Nothing lost** means: after the last kill a last child (no producer)
//! joins every id still without an answer, and then every acknowledged id
//! has an answer that is its outcome (`ok` for jobs meant to succeed,
//! `failed` for the 1 %). A join that answers `JobNotFound` counts as lost:
//! an unanswered id is joined again at the next start, at most one life
//! (3 min) plus a start after it could have ended, and retention keeps an
//! ended job's outcome for 5 min, so an ended job is always still there.
//!
//! **No tick twice**: every tick's runs carry one job id, and it is
//! `Tick::new("soak-tick", at_ms).job_id`. A tick whose job ran twice under
//! that one id (killed after it ran, before its outcome committed) is
//! at-least-once execution, counted and reported apart.
//!
//! **Flat**: for a run of M minutes, the mean RSS, the mean store bytes and
//! the p99 latency over minutes [M−M/6, M) are within 1.2× of those over
//! [M/3, M/2) (for 30 minutes: minutes 25–30 against 10–15). The p99 that is
//! checked is of jobs answered in the life that submitted them; the p99 of
//! all answers (with the downtime of a kill in the latency of the jobs it
//! caught) is in the CSV beside it.
//!
//! Outputs: `benches/soak/soak-{M}min.csv` (one row per 10 s sample) and
//! `benches/soak/soak-{M}min.png` (drawn with plotters; the text is drawn
//! by ab_glyph from `/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf`,
//! Debian's `fonts-dejavu-core`; without it the plot has no text). The run's
//! directory is removed at the end unless `--keep`. Exit status 1 when a
//! check fails.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gaffer::job::{FailureKind, JobError};
use gaffer::periodic::{Schedule, Tick};
use gaffer::{BulkCtx, Engine, Error, Job, JobContext, JobHandle, Pipeline, bulk::ItemError};
use serde::{Deserialize, Serialize};

const LIFE: Duration = Duration::from_secs(180);
const SAMPLE: Duration = Duration::from_secs(10);
const RETENTION: Duration = Duration::from_secs(300);
const BATCH_EVERY_MS: u64 = 300_000;
const BATCH_ITEMS: u64 = 10_000;
const TICK_NAME: &str = "soak-tick";
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_millis() as u64
}

// ---------------------------------------------------------------- the jobs

/// How a job ends: 0 succeeds, 1 fails its first attempt (transient) and
/// succeeds on its retry, 2 fails permanently.
#[derive(Debug, thiserror::Error)]
enum SoakError {
    #[error("first attempt fails")]
    Once,
    #[error("fails for good")]
    Permanent,
}

fn fate(mode: u8, ctx: &JobContext) -> Result<(), SoakError> {
    match mode {
        2 => Err(SoakError::Permanent),
        1 if ctx.attempt() == 1 => Err(SoakError::Once),
        _ => Ok(()),
    }
}

fn classify(e: &SoakError) -> FailureKind {
    match e {
        SoakError::Once => FailureKind::Transient,
        SoakError::Permanent => FailureKind::Permanent,
    }
}

#[derive(Serialize, Deserialize)]
struct Echo {
    seq: u64,
    mode: u8,
}

impl Job for Echo {
    const NAME: &'static str = "soak-echo";
    type Output = u64;
    type Error = SoakError;
    async fn run(&self, ctx: JobContext) -> Result<u64, SoakError> {
        fate(self.mode, &ctx)?;
        Ok(self.seq)
    }
    fn classify(&self, e: &SoakError) -> FailureKind {
        classify(e)
    }
}

#[derive(Serialize, Deserialize)]
struct Spin {
    seq: u64,
    mode: u8,
}

impl Job for Spin {
    const NAME: &'static str = "soak-spin";
    type Output = u64;
    type Error = SoakError;
    async fn run(&self, ctx: JobContext) -> Result<u64, SoakError> {
        fate(self.mode, &ctx)?;
        let mut x = self.seq | 1;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        Ok(std::hint::black_box(x))
    }
    fn classify(&self, e: &SoakError) -> FailureKind {
        classify(e)
    }
}

#[derive(Serialize, Deserialize)]
struct Nap {
    seq: u64,
    mode: u8,
}

impl Job for Nap {
    const NAME: &'static str = "soak-nap";
    type Output = u64;
    type Error = SoakError;
    async fn run(&self, ctx: JobContext) -> Result<u64, SoakError> {
        fate(self.mode, &ctx)?;
        tokio::time::sleep(Duration::from_millis(5 + self.seq % 10)).await;
        Ok(self.seq)
    }
    fn classify(&self, e: &SoakError) -> FailureKind {
        classify(e)
    }
}

/// The periodic job: appends `at_ms job_id attempt life` to `ticks.log`.
#[derive(Serialize, Deserialize)]
struct TickJob {
    at_ms: u64,
}

struct TickLog {
    file: Mutex<File>,
    life: u32,
}

impl Job for TickJob {
    const NAME: &'static str = "soak-tick-job";
    type Output = u64;
    type Error = std::io::Error;
    async fn run(&self, ctx: JobContext) -> Result<u64, std::io::Error> {
        let log = ctx.state::<TickLog>();
        let line = format!(
            "{} {} {} {}\n",
            self.at_ms,
            ctx.id(),
            ctx.attempt(),
            log.life
        );
        log.file
            .lock()
            .expect("the tick log's lock")
            .write_all(line.as_bytes())?;
        Ok(self.at_ms)
    }
}

struct Items;

impl Pipeline for Items {
    const NAME: &'static str = "soak-items";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        Ok(ctx.input * 2)
    }
}

// ---------------------------------------------------------------- the child

/// Append-only side files; each line is one `write` of the whole line.
struct Logs {
    submitted: Mutex<File>,
    done: Mutex<File>,
    life: u32,
}

/// Open `path` for appending, with a newline first if a kill cut its last
/// line (so the next line starts clean).
fn append(path: &Path) -> File {
    let mut f = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)
        .expect("a side file opens");
    let len = f.metadata().expect("its metadata").len();
    if len > 0 {
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1)).expect("seek");
        f.read_exact(&mut last).expect("read its last byte");
        if last[0] != b'\n' {
            f.write_all(b"\n").expect("a newline");
        }
    }
    f
}

fn write_line(file: &Mutex<File>, line: &str) {
    file.lock()
        .expect("a side file's lock")
        .write_all(line.as_bytes())
        .expect("a side file write");
}

fn log_answer<O>(
    logs: &Logs,
    id: &str,
    kind: u8,
    submit_ms: u64,
    same_life: bool,
    answer: gaffer::Result<Result<O, JobError>>,
) {
    let status = match answer {
        Ok(Ok(_)) => "ok",
        Ok(Err(_)) => "failed",
        Err(Error::JobNotFound(_)) => "notfound",
        Err(e) => {
            eprintln!("soak child: join {id}: {e}");
            return;
        }
    };
    let line = format!(
        "{id} {kind} {status} {submit_ms} {} {}\n",
        now_ms(),
        u8::from(same_life)
    );
    write_line(&logs.done, &line);
}

async fn submit_and_join<J: Job>(
    engine: Engine,
    logs: Arc<Logs>,
    job: J,
    kind: u8,
    mode: u8,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let t = now_ms();
    let handle: JobHandle<J> = match engine.submit(job).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("soak child: submit: {e}");
            return;
        }
    };
    drop(permit);
    let id = handle.id().to_string();
    write_line(
        &logs.submitted,
        &format!("{id} {kind} {mode} {t} {}\n", logs.life),
    );
    let answer = handle.join().await;
    log_answer(&logs, &id, kind, t, true, answer);
}

async fn rejoin<J: Job>(engine: Engine, logs: Arc<Logs>, id: String, kind: u8, submit_ms: u64) {
    let answer = engine.join::<J>(&id).await;
    log_answer(&logs, &id, kind, submit_ms, false, answer);
}

/// A deterministic mix from the life and the sequence number (splitmix64).
fn mix(life: u32, seq: u64) -> u64 {
    let mut z = (u64::from(life) << 40 ^ seq).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn env<T: std::str::FromStr>(name: &str) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} is set by the parent"))
}

async fn child(dir: PathBuf) {
    let life: u32 = env("GAFFER_SOAK_LIFE");
    let start_ms: u64 = env("GAFFER_SOAK_START_MS");
    let rate: f64 = env("GAFFER_SOAK_RATE");
    let verify = std::env::var_os("GAFFER_SOAK_VERIFY").is_some();

    let logs = Arc::new(Logs {
        submitted: Mutex::new(append(&dir.join("submitted.log"))),
        done: Mutex::new(append(&dir.join("done.log"))),
        life,
    });
    let ticks = TickLog {
        file: Mutex::new(append(&dir.join("ticks.log"))),
        life,
    };
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .retention(RETENTION)
        .register::<Echo>()
        .register::<Spin>()
        .register::<Nap>()
        .register::<TickJob>()
        .pipeline(Items)
        .periodic(TICK_NAME, Schedule::every(Duration::from_secs(1)), |t| {
            TickJob { at_ms: t.at_ms }
        })
        .state(ticks)
        .start()
        .await
        .expect("the engine starts");
    write_line(
        &Mutex::new(append(&dir.join("ready.log"))),
        &format!("{life} {}\n", now_ms()),
    );

    // The previous lives' unanswered jobs.
    let mut rejoins = tokio::task::JoinSet::new();
    let text = std::fs::read_to_string(dir.join("rejoin.txt")).unwrap_or_default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [id, kind, _mode, submit_ms] = f[..] else {
            continue;
        };
        let (id, submit_ms) = (id.to_string(), submit_ms.parse().unwrap_or(0));
        let (e, l) = (engine.clone(), logs.clone());
        match kind {
            "0" => rejoins.spawn(rejoin::<Echo>(e, l, id, 0, submit_ms)),
            "1" => rejoins.spawn(rejoin::<Spin>(e, l, id, 1, submit_ms)),
            _ => rejoins.spawn(rejoin::<Nap>(e, l, id, 2, submit_ms)),
        };
    }

    let sampler = tokio::spawn(sample_queues(engine.clone(), dir.join("pending.log")));
    if verify {
        let all = async { while rejoins.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(600), all)
            .await
            .is_err()
        {
            eprintln!("soak verify: some joins did not answer within 10 minutes");
        }
        // One more count of the queues, after every answer.
        tokio::time::sleep(SAMPLE + Duration::from_secs(1)).await;
        sampler.abort();
        engine
            .shutdown()
            .await
            .expect("the verifying engine shuts down");
        return;
    }

    tokio::spawn(batches(engine.clone(), dir.clone(), start_ms, life));

    // The producer: `rate` submissions a second, at most 256 in flight.
    let permits = Arc::new(tokio::sync::Semaphore::new(256));
    let t0 = Instant::now();
    let mut seq = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    loop {
        tick.tick().await;
        let due = (t0.elapsed().as_secs_f64() * rate) as u64;
        while seq < due {
            let permit = permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            seq += 1;
            let r = mix(life, seq);
            let mode = match (r >> 8) % 100 {
                0 => 2,
                1..=5 => 1,
                _ => 0,
            };
            let (e, l) = (engine.clone(), logs.clone());
            match r % 3 {
                0 => tokio::spawn(submit_and_join(e, l, Echo { seq, mode }, 0, mode, permit)),
                1 => tokio::spawn(submit_and_join(e, l, Spin { seq, mode }, 1, mode, permit)),
                _ => tokio::spawn(submit_and_join(e, l, Nap { seq, mode }, 2, mode, permit)),
            };
        }
    }
}

/// Every 10 s: `t_ms jobs_pending jobs_scheduled jobs_claimed jobs_dead
/// items_pending` from the queues' counters (what `gaffer stats` shows).
async fn sample_queues(engine: Engine, path: PathBuf) {
    let file = Mutex::new(append(&path));
    loop {
        tokio::time::sleep(SAMPLE).await;
        let Ok(queue) = gaffer::testing::raw_queue(&engine) else {
            return;
        };
        let view = queue.view();
        let Ok(names) = view.list_queues().await else {
            continue;
        };
        let (mut pending, mut scheduled, mut claimed, mut dead, mut items) = (0, 0, 0, 0, 0);
        for name in names {
            let Ok(s) = view.stats(&name).await else {
                continue;
            };
            if name.starts_with("jobs.") {
                pending += s.pending;
                scheduled += s.scheduled;
                claimed += s.claimed;
                dead += s.dead;
            } else if name.starts_with("bulk-items.") {
                items += s.pending + s.scheduled + s.claimed;
            }
        }
        drop(queue);
        write_line(
            &file,
            &format!(
                "{} {pending} {scheduled} {claimed} {dead} {items}\n",
                now_ms()
            ),
        );
    }
}

/// The batch of each 5-minute slot of the run, resumed by the next life if
/// a kill cut it (a run of the same id resumes it); `batches.log` gets
/// `slot total succeeded failed elapsed_ms life` when a run completes.
async fn batches(engine: Engine, dir: PathBuf, start_ms: u64, life: u32) {
    let path = dir.join("batches.log");
    loop {
        let slot = now_ms().saturating_sub(start_ms) / BATCH_EVERY_MS;
        let done: HashSet<u64> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').next()?.parse().ok())
            .collect();
        for s in [slot.saturating_sub(1), slot] {
            if done.contains(&s) {
                continue;
            }
            let batch = match engine.batch::<Items>(&format!("soak-batch-{s}")) {
                Ok(b) => b.retention(RETENTION),
                Err(e) => {
                    eprintln!("soak child: batch {s}: {e}");
                    continue;
                }
            };
            match batch.run(0..BATCH_ITEMS).await {
                Ok(r) => write_line(
                    &Mutex::new(append(&path)),
                    &format!(
                        "{s} {} {} {} {} {life}\n",
                        r.total,
                        r.succeeded,
                        r.failed,
                        r.elapsed.as_millis()
                    ),
                ),
                Err(e) => eprintln!("soak child: batch {s}: {e}"),
            }
            if s == slot {
                break;
            }
        }
        let next = start_ms + (slot + 1) * BATCH_EVERY_MS;
        tokio::time::sleep(Duration::from_millis(next.saturating_sub(now_ms()))).await;
    }
}

// ---------------------------------------------------------------- the parent

/// New whole lines of a growing file.
struct Tail {
    path: PathBuf,
    offset: u64,
    rest: Vec<u8>,
}

impl Tail {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            rest: Vec::new(),
        }
    }

    fn lines(&mut self) -> Vec<String> {
        let Ok(mut f) = File::open(&self.path) else {
            return Vec::new();
        };
        f.seek(SeekFrom::Start(self.offset)).expect("seek");
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).expect("read a side file");
        self.offset += buf.len() as u64;
        self.rest.extend_from_slice(&buf);
        let Some(end) = self.rest.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let whole: Vec<u8> = self.rest.drain(..=end).collect();
        String::from_utf8_lossy(&whole)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }
}

#[derive(Default)]
struct Sample {
    t_s: f64,
    life: u32,
    submitted_per_s: f64,
    answered_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    p99_all_ms: f64,
    rss_mib: f64,
    store_mib: f64,
    store_files: u64,
    jobs_pending: i64,
    jobs_scheduled: i64,
    jobs_running: i64,
    jobs_dead: i64,
    items_pending: i64,
}

/// What the parent follows of the side files.
struct Ledger {
    submitted: Tail,
    done: Tail,
    pending: Tail,
    /// Acknowledged and not answered yet: id → (kind, mode, submit_ms).
    open: HashMap<String, (u8, u8, u64)>,
    acknowledged: u64,
    answered: BTreeMap<&'static str, u64>,
    wrong: Vec<String>,
    notfound: Vec<String>,
    /// Answers read before their acknowledgement; what is left at the end
    /// answered an id never acknowledged, or one answered twice.
    early: HashMap<String, String>,
    start_ms: u64,
    /// (answer time in s since the start, latency ms, answered in the life
    /// that submitted it).
    latencies: Vec<(f64, u64, bool)>,
    last_pending: [i64; 5],
    interval_submitted: u64,
}

impl Ledger {
    fn new(dir: &Path, start_ms: u64) -> Self {
        Self {
            submitted: Tail::new(dir.join("submitted.log")),
            done: Tail::new(dir.join("done.log")),
            pending: Tail::new(dir.join("pending.log")),
            open: HashMap::new(),
            acknowledged: 0,
            answered: BTreeMap::new(),
            wrong: Vec::new(),
            notfound: Vec::new(),
            early: HashMap::new(),
            start_ms,
            latencies: Vec::new(),
            last_pending: [0; 5],
            interval_submitted: 0,
        }
    }

    /// Read what was appended (acknowledgements before answers: an answer
    /// line is written after its acknowledgement).
    fn read(&mut self) {
        for line in self.submitted.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let [id, kind, mode, t, _life] = f[..] else {
                continue;
            };
            let (Ok(kind), Ok(mode), Ok(t)) = (kind.parse(), mode.parse(), t.parse()) else {
                continue;
            };
            if self.open.insert(id.to_string(), (kind, mode, t)).is_none() {
                self.acknowledged += 1;
                self.interval_submitted += 1;
            }
            // An answer read before its acknowledgement (both were appended
            // between the reads of the two files).
            if let Some(early) = self.early.remove(id) {
                self.answer(early);
            }
        }
        for line in self.done.lines() {
            self.answer(line);
        }
        for line in self.pending.lines() {
            let v: Vec<i64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
            if let [_, a, b, c, d, e] = v[..] {
                self.last_pending = [a, b, c, d, e];
            }
        }
    }

    fn answer(&mut self, line: String) {
        let f: Vec<&str> = line.split(' ').collect();
        let [id, _kind, status, submit, done, same] = f[..] else {
            return;
        };
        let Some((_, mode, _)) = self.open.remove(id) else {
            self.early.insert(id.to_string(), line);
            return;
        };
        let (submit, done): (u64, u64) = (submit.parse().unwrap_or(0), done.parse().unwrap_or(0));
        let status: &'static str = match status {
            "ok" => "ok",
            "failed" => "failed",
            _ => "notfound",
        };
        *self.answered.entry(status).or_default() += 1;
        match (status, mode) {
            ("notfound", _) => self.notfound.push(id.to_string()),
            ("ok", 2) | ("failed", 0 | 1) => self.wrong.push(format!("{id} {status} {mode}")),
            _ => {}
        }
        self.latencies.push((
            done.saturating_sub(self.start_ms) as f64 / 1000.0,
            done.saturating_sub(submit),
            same == "1",
        ));
    }

    fn write_rejoin(&self, dir: &Path) {
        let mut text = String::new();
        for (id, (kind, mode, t)) in &self.open {
            text.push_str(&format!("{id} {kind} {mode} {t}\n"));
        }
        std::fs::write(dir.join("rejoin.txt"), text).expect("write rejoin.txt");
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Bytes and files under `dir`.
fn disk_usage(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => {
                    bytes += m.len();
                    files += 1;
                }
                Err(_) => {}
            }
        }
    }
    (bytes, files)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn spawn_child(dir: &Path, life: u32, start_ms: u64, rate: f64, verify: bool) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("this binary"));
    cmd.env("GAFFER_SOAK_CHILD", dir)
        .env("GAFFER_SOAK_LIFE", life.to_string())
        .env("GAFFER_SOAK_START_MS", start_ms.to_string())
        .env("GAFFER_SOAK_RATE", rate.to_string())
        .stdout(Stdio::null())
        .stderr(
            File::create(dir.join(format!("child-{life}.stderr")))
                .expect("the child's stderr file"),
        );
    if verify {
        cmd.env("GAFFER_SOAK_VERIFY", "1");
    }
    cmd.spawn().expect("the child starts")
}

fn main() {
    if let Some(dir) = std::env::var_os("GAFFER_SOAK_CHILD") {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(child(PathBuf::from(dir)));
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<f64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if let Some(i) = args.iter().position(|a| a == "--replot") {
        // Draw the PNG again from a CSV of an earlier run.
        let csv = PathBuf::from(args.get(i + 1).expect("--replot CSV"));
        let samples = read_csv(&csv);
        let minutes = (samples.last().map_or(0.0, |s| s.t_s) / 60.0).round();
        let rate = nums.first().copied().unwrap_or(500.0);
        plot(&csv.with_extension("png"), &samples, minutes, rate).expect("the plot");
        return;
    }
    let minutes = nums.first().copied().unwrap_or(30.0);
    let rate = nums.get(1).copied().unwrap_or(500.0);
    let keep = args.iter().any(|a| a == "--keep");
    std::process::exit(parent(minutes, rate, keep));
}

fn parent(minutes: f64, rate: f64, keep: bool) -> i32 {
    let run_dir = tempfile::Builder::new()
        .prefix("gaffer-soak-")
        .tempdir()
        .expect("a temp dir");
    let dir = run_dir.path().to_path_buf();
    let store = dir.join("store");
    println!(
        "soak: {minutes} min at {rate} jobs/s, a kill every {} s, in {}",
        LIFE.as_secs(),
        dir.display()
    );
    let total = Duration::from_secs_f64(minutes * 60.0);
    let start = Instant::now();
    let start_ms = now_ms();
    let mut ledger = Ledger::new(&dir, start_ms);
    let mut samples: Vec<Sample> = Vec::new();
    let mut spawned: Vec<(u32, u64)> = Vec::new();
    let mut loads: Vec<String> = Vec::new();
    let mut life = 0u32;
    let mut next_sample = SAMPLE;
    let mut interval_lat: Vec<(u64, bool)> = Vec::new();
    while start.elapsed() < total {
        life += 1;
        spawned.push((life, now_ms()));
        let mut child = spawn_child(&dir, life, start_ms, rate, false);
        let pid = child.id();
        let kill_at = (start.elapsed() + LIFE).min(total);
        while start.elapsed() < kill_at {
            let wait = next_sample
                .min(kill_at)
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(1));
            std::thread::sleep(wait.min(Duration::from_millis(500)));
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("soak: child {life} exited on its own: {status}");
                break;
            }
            let seen = ledger.latencies.len();
            ledger.read();
            interval_lat.extend(ledger.latencies[seen..].iter().map(|&(_, l, s)| (l, s)));
            if start.elapsed() >= next_sample {
                let (bytes, files) = disk_usage(&store);
                let mut live: Vec<u64> = interval_lat.iter().filter(|x| x.1).map(|x| x.0).collect();
                let mut all: Vec<u64> = interval_lat.iter().map(|x| x.0).collect();
                live.sort_unstable();
                all.sort_unstable();
                let secs = SAMPLE.as_secs_f64();
                let p = ledger.last_pending;
                let s = Sample {
                    t_s: start.elapsed().as_secs_f64(),
                    life,
                    submitted_per_s: ledger.interval_submitted as f64 / secs,
                    answered_per_s: all.len() as f64 / secs,
                    p50_ms: percentile(&live, 0.50),
                    p99_ms: percentile(&live, 0.99),
                    p99_all_ms: percentile(&all, 0.99),
                    rss_mib: vm_rss_kib(pid) as f64 / 1024.0,
                    store_mib: bytes as f64 / 1048576.0,
                    store_files: files,
                    jobs_pending: p[0],
                    jobs_scheduled: p[1],
                    jobs_running: p[2],
                    jobs_dead: p[3],
                    items_pending: p[4],
                };
                println!(
                    "{:6.0} s  life {:2}  {:5.0} sub/s {:5.0} ans/s  p50 {:5.0} p99 {:6.0} (all {:6.0}) ms  rss {:6.1} MiB  store {:7.1} MiB {:5} files  pending {} sched {} run {} dead {} items {}  load {}",
                    s.t_s,
                    s.life,
                    s.submitted_per_s,
                    s.answered_per_s,
                    s.p50_ms,
                    s.p99_ms,
                    s.p99_all_ms,
                    s.rss_mib,
                    s.store_mib,
                    s.store_files,
                    s.jobs_pending,
                    s.jobs_scheduled,
                    s.jobs_running,
                    s.jobs_dead,
                    s.items_pending,
                    load_average()
                );
                loads.push(load_average());
                samples.push(s);
                ledger.interval_submitted = 0;
                interval_lat.clear();
                next_sample += SAMPLE;
            }
        }
        // SIGKILL, then what the child wrote before it died.
        let _ = child.kill();
        let _ = child.wait();
        ledger.read();
        ledger.write_rejoin(&dir);
    }

    // The last child: no producer; it joins every unanswered job.
    println!(
        "soak: {} s of load done; verifying {} unanswered jobs",
        start.elapsed().as_secs(),
        ledger.open.len()
    );
    life += 1;
    spawned.push((life, now_ms()));
    let status = spawn_child(&dir, life, start_ms, rate, true)
        .wait()
        .expect("the verifying child");
    ledger.read();
    let verified_clean = status.success();

    // The ticks.
    let mut ticks: BTreeMap<u64, (HashSet<String>, u32)> = BTreeMap::new();
    for line in Tail::new(dir.join("ticks.log")).lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [at, id, _attempt, _life] = f[..] else {
            continue;
        };
        let Ok(at) = at.parse::<u64>() else { continue };
        let e = ticks.entry(at).or_default();
        e.0.insert(id.to_string());
        e.1 += 1;
    }
    let two_ids = ticks.values().filter(|(ids, _)| ids.len() > 1).count();
    let wrong_id = ticks
        .iter()
        .filter(|(at, (ids, _))| {
            ids.iter()
                .any(|id| *id != Tick::new(TICK_NAME, **at).job_id)
        })
        .count();
    let rerun = ticks.values().filter(|(_, runs)| *runs > 1).count();

    // The batches.
    let batch_lines = std::fs::read_to_string(dir.join("batches.log")).unwrap_or_default();
    let mut batch_ok = true;
    let mut batch_slots = BTreeMap::new();
    for line in batch_lines.lines() {
        let v: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
        if let [slot, total, ok, failed, ms, _life] = v[..] {
            batch_ok &= total == BATCH_ITEMS && ok == BATCH_ITEMS && failed == 0;
            batch_slots.insert(slot, ms);
        }
    }
    let slots_expected = (minutes * 60_000.0 / BATCH_EVERY_MS as f64).ceil() as usize;

    // Restarts: from the spawn to the engine's start.
    let ready: HashMap<u32, u64> = std::fs::read_to_string(dir.join("ready.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once(' ')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    let starts: Vec<String> = spawned
        .iter()
        .map(|(l, t)| {
            ready.get(l).map_or("-".into(), |r| {
                format!("{:.2}", r.saturating_sub(*t) as f64 / 1000.0)
            })
        })
        .collect();

    // The windows: [M/3, M/2) against [M - M/6, M).
    let m = total.as_secs_f64();
    let (ref_w, last_w) = ((m / 3.0, m / 2.0), (m - m / 6.0, m + 1.0));
    let in_w = |t: f64, w: (f64, f64)| t >= w.0 && t < w.1;
    let mean = |w: (f64, f64), f: &dyn Fn(&Sample) -> f64| {
        let v: Vec<f64> = samples.iter().filter(|s| in_w(s.t_s, w)).map(f).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let p99_w = |w: (f64, f64)| {
        let mut v: Vec<u64> = ledger
            .latencies
            .iter()
            .filter(|(t, _, live)| *live && in_w(*t, w))
            .map(|x| x.1)
            .collect();
        v.sort_unstable();
        percentile(&v, 0.99)
    };
    let thr = |w: (f64, f64)| mean(w, &|s| s.answered_per_s);
    let figures = [
        (
            "RSS MiB (mean)",
            mean(ref_w, &|s| s.rss_mib),
            mean(last_w, &|s| s.rss_mib),
        ),
        (
            "store MiB (mean)",
            mean(ref_w, &|s| s.store_mib),
            mean(last_w, &|s| s.store_mib),
        ),
        ("p99 ms (same life)", p99_w(ref_w), p99_w(last_w)),
    ];
    println!();
    println!(
        "windows: minutes {:.1}-{:.1} against {:.1}-{:.1}",
        ref_w.0 / 60.0,
        ref_w.1 / 60.0,
        last_w.0 / 60.0,
        m / 60.0
    );
    println!(
        "  answered/s (mean)     {:10.1} {:10.1}",
        thr(ref_w),
        thr(last_w)
    );
    println!(
        "  store files (mean)    {:10.1} {:10.1}",
        mean(ref_w, &|s| s.store_files as f64),
        mean(last_w, &|s| s.store_files as f64)
    );
    let mut flat = true;
    for (name, a, b) in figures {
        let ratio = b / a;
        let holds = ratio <= 1.2;
        flat &= holds;
        println!(
            "  {name:<21} {a:10.1} {b:10.1}  {ratio:.2}x  {}",
            if holds { "flat" } else { "GROWS" }
        );
    }
    let lost = ledger.open.len() + ledger.notfound.len();
    println!();
    println!(
        "jobs: {} acknowledged, answers {:?}, {} unanswered, {} not found, {} wrong outcomes, {} stray answers",
        ledger.acknowledged,
        ledger.answered,
        ledger.open.len(),
        ledger.notfound.len(),
        ledger.wrong.len(),
        ledger.early.len()
    );
    println!(
        "ticks: {} ticks run, {} with two job ids, {} with a wrong id, {} run twice under their one id",
        ticks.len(),
        two_ids,
        wrong_id,
        rerun
    );
    println!(
        "batches: {} of {} slots completed ({:?} ms each), all exact: {batch_ok}",
        batch_slots.len(),
        slots_expected,
        batch_slots.values().collect::<Vec<_>>()
    );
    println!(
        "starts (s from spawn to started engine): {}",
        starts.join(" ")
    );
    println!("verifying child exit: {status}");

    let name = format!("soak-{}min", minutes);
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/soak");
    std::fs::create_dir_all(&out).expect("benches/soak");
    write_csv(&out.join(format!("{name}.csv")), &samples, &loads);
    match plot(&out.join(format!("{name}.png")), &samples, minutes, rate) {
        Ok(()) => println!("wrote {}/{name}.csv and .png", out.display()),
        Err(e) => eprintln!("soak: the plot failed: {e}"),
    }
    if keep {
        println!("kept {}", run_dir.keep().display());
    }
    let ok = lost == 0
        && ledger.wrong.is_empty()
        && ledger.early.is_empty()
        && two_ids == 0
        && wrong_id == 0
        && batch_ok
        && flat
        && verified_clean;
    println!(
        "verdict: {}",
        if ok { "holds" } else { "FAILS (see above)" }
    );
    if ok { 0 } else { 1 }
}

fn write_csv(path: &Path, samples: &[Sample], loads: &[String]) {
    let mut f = std::io::BufWriter::new(File::create(path).expect("the CSV"));
    writeln!(
        f,
        "t_s,life,submitted_per_s,answered_per_s,p50_ms,p99_ms,p99_all_ms,rss_mib,store_mib,store_files,jobs_pending,jobs_scheduled,jobs_running,jobs_dead,items_pending,load1"
    )
    .expect("write");
    for (s, load) in samples.iter().zip(loads) {
        writeln!(
            f,
            "{:.0},{},{:.1},{:.1},{},{},{},{:.1},{:.1},{},{},{},{},{},{},{}",
            s.t_s,
            s.life,
            s.submitted_per_s,
            s.answered_per_s,
            s.p50_ms,
            s.p99_ms,
            s.p99_all_ms,
            s.rss_mib,
            s.store_mib,
            s.store_files,
            s.jobs_pending,
            s.jobs_scheduled,
            s.jobs_running,
            s.jobs_dead,
            s.items_pending,
            load.split(' ').next().unwrap_or("")
        )
        .expect("write");
    }
}

fn read_csv(path: &Path) -> Vec<Sample> {
    let text = std::fs::read_to_string(path).expect("the CSV");
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let v: Vec<f64> = l
                .split(',')
                .map(|x| x.parse().unwrap_or(f64::NAN))
                .collect();
            (v.len() >= 15).then(|| Sample {
                t_s: v[0],
                life: v[1] as u32,
                submitted_per_s: v[2],
                answered_per_s: v[3],
                p50_ms: v[4],
                p99_ms: v[5],
                p99_all_ms: v[6],
                rss_mib: v[7],
                store_mib: v[8],
                store_files: v[9] as u64,
                jobs_pending: v[10] as i64,
                jobs_scheduled: v[11] as i64,
                jobs_running: v[12] as i64,
                jobs_dead: v[13] as i64,
                items_pending: v[14] as i64,
            })
        })
        .collect()
}

fn plot(
    path: &Path,
    samples: &[Sample],
    minutes: f64,
    rate: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let text = match std::fs::read(FONT) {
        Ok(bytes) => {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| "the font does not load")?;
            true
        }
        Err(e) => {
            eprintln!("soak: no font at {FONT} ({e}): the plot has no text");
            false
        }
    };
    let root = BitMapBackend::new(path, (1800, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = if text {
        root.titled(
            &format!(
                "gaffer soak: {minutes} min, {rate} jobs/s, SIGKILL every 3 min (dashed), retention 5 min"
            ),
            ("sans-serif", 22),
        )?
    } else {
        root
    };
    let panels = root.split_evenly((2, 3));
    let t: Vec<f64> = samples.iter().map(|s| s.t_s / 60.0).collect();
    let xmax = minutes.max(0.1);
    type Series<'a> = (&'a str, RGBColor, Vec<f64>);
    let draw = |area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
                caption: &str,
                series: Vec<Series>|
     -> Result<(), Box<dyn std::error::Error>> {
        let ymax = series
            .iter()
            .flat_map(|s| s.2.iter().copied())
            .filter(|v| v.is_finite())
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut b = ChartBuilder::on(area);
        b.margin(12);
        if text {
            b.caption(caption, ("sans-serif", 18))
                .x_label_area_size(30)
                .y_label_area_size(60);
        }
        let mut chart = b.build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc("minutes");
        } else {
            mesh.disable_x_mesh().disable_y_mesh();
        }
        mesh.draw()?;
        for k in 1..=((minutes * 60.0) as u64 / LIFE.as_secs()) {
            let x = (k * LIFE.as_secs()) as f64 / 60.0;
            if x < xmax {
                chart.draw_series(DashedLineSeries::new(
                    vec![(x, 0.0), (x, ymax)],
                    4,
                    4,
                    BLACK.mix(0.3).stroke_width(1),
                ))?;
            }
        }
        for (label, color, ys) in series {
            let pts: Vec<(f64, f64)> = t
                .iter()
                .zip(ys)
                .filter(|(_, y)| y.is_finite())
                .map(|(x, y)| (*x, y))
                .collect();
            let s = chart.draw_series(LineSeries::new(pts, color.stroke_width(2)))?;
            if text {
                s.label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        Ok(())
    };
    let col = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(f).collect::<Vec<f64>>();
    draw(
        &panels[0],
        "throughput (jobs/s)",
        vec![
            ("answered", BLUE, col(&|s| s.answered_per_s)),
            ("submitted", GREEN, col(&|s| s.submitted_per_s)),
        ],
    )?;
    draw(
        &panels[1],
        "latency, submit to outcome, same life (ms)",
        vec![
            ("p99", RED, col(&|s| s.p99_ms)),
            ("p50", BLUE, col(&|s| s.p50_ms)),
        ],
    )?;
    draw(
        &panels[2],
        "engine process RSS (MiB)",
        vec![("VmRSS", MAGENTA, col(&|s| s.rss_mib))],
    )?;
    draw(
        &panels[3],
        "store on disk (MiB)",
        vec![("bytes", BLUE, col(&|s| s.store_mib))],
    )?;
    draw(
        &panels[4],
        "store on disk (files)",
        vec![("files", GREEN, col(&|s| s.store_files as f64))],
    )?;
    draw(
        &panels[5],
        "jobs in the queues",
        vec![
            ("pending", RED, col(&|s| s.jobs_pending as f64)),
            ("scheduled", BLUE, col(&|s| s.jobs_scheduled as f64)),
            ("dead letters", BLACK, col(&|s| s.jobs_dead as f64)),
        ],
    )?;
    root.present()?;
    Ok(())
}
