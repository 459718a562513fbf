//! A store written by one release opens in the next (issue #26 §1).
//!
//! `tests/fixtures/layout-2/` is a local-disk store written by this file's
//! generator (the ignored test [`regenerate_the_layout_2_fixture`]) with the
//! `gaffer-layout-2` layout, and left as a crash leaves it: its writer was
//! SIGKILLed with jobs queued, scheduled and running and a batch half
//! done. Its `README.md` lists what it holds. Each test here opens a copy
//! of it (the committed files are never written) with the current build and
//! checks what a user sees: pending jobs run once, finished ones answer
//! from their records and the finished-jobs index, a dead letter retries
//! from its payload and finds its memo, the batch resumes from its
//! manifest to an exact report, the periodic jobs keep their last tick, the
//! scheduled job waits for its time, the paused type stays paused, and the
//! client requests (one taken, one left in the inbox) both answer.
//!
//! Time is taquba's `MockClock`: the fixture was written at [`T0_MS`]
//! (2026-01-01) and one hour later, and every test opens it at
//! [`OPENED_AT_MS`], 90 minutes after [`T0_MS`], whatever the date: the
//! tests mean the same in ten years. The fixture engine has no retention.
//!
//! When the layout changes (ARCHITECTURE.md, *Durable layout*), this
//! fixture stays, with these tests, and the new layout gets its own
//! fixture and generator.
//!
//! Regenerate (only while the layout is still `gaffer-layout-2`):
//! `cargo test --test stored_format -- --ignored --exact regenerate_the_layout_2_fixture`.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use gaffer::taquba::object_store::local::LocalFileSystem;
use gaffer::taquba::{MockClock, QueueReader, QueueView, ReaderOptions};
use gaffer::testing::layout::inspect::{self, EndedState, Layout};
use gaffer::{
    BulkCtx, Engine, EngineBuilder, Error, Job, JobContext, Pipeline, SubmitOptions,
    bulk::ItemError, bulk::ItemOutcome, job::FailureKind, job::JobState, periodic::Missed,
    periodic::Schedule, periodic::Tick, remote::Client,
};
use serde::{Deserialize, Serialize};

use common::{CollectSink, Gate, LIMIT, T0_MS, shut_down_cleanly, within};

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;
/// When every test opens the fixture: after the hourly tick it recorded
/// (`T0 + 1h`), before the next (`T0 + 2h`) and long before the scheduled
/// job (`T0 + 1d`).
const OPENED_AT_MS: u64 = T0_MS + 90 * 60_000;
/// The batch the fixture left half done.
const BATCH: &str = "fixture-batch";
/// Where the writer's child process finds its directory.
const WRITER_DIR: &str = "GAFFER_FIXTURE_WRITER_DIR";

// ---------------------------------------------------------------------------
// The jobs and the pipeline of the fixture's engine. Their names, payloads,
// outputs and keys are the fixture's: do not change them.

/// What a job sees: whether it runs in the fixture's writer (then jobs hold
/// at the gates and `doomed` fails) or in a test; and what ran here.
struct Fx {
    writing: bool,
    /// `echo` jobs wait here in the writer (released one at a time).
    echo_gate: Gate,
    /// Batch items of input 4 and more wait here (in the writer never
    /// released: they are the unfinished half).
    item_gate: Gate,
    ran: Mutex<Vec<String>>,
}

impl Fx {
    fn writing() -> Arc<Self> {
        Arc::new(Self {
            writing: true,
            echo_gate: Gate::closed(),
            item_gate: Gate::closed(),
            ran: Mutex::new(Vec::new()),
        })
    }

    fn reading() -> Arc<Self> {
        Self::reading_with(Gate::opened())
    }

    fn reading_with(item_gate: Gate) -> Arc<Self> {
        Arc::new(Self {
            writing: false,
            echo_gate: Gate::opened(),
            item_gate,
            ran: Mutex::new(Vec::new()),
        })
    }

    fn ran(&self, what: String) {
        self.ran.lock().unwrap().push(what);
    }

    /// How often `what` ran in this process.
    fn runs_of(&self, what: &str) -> usize {
        self.ran
            .lock()
            .unwrap()
            .iter()
            .filter(|r| *r == what)
            .count()
    }

    /// What ran in this process whose name starts with `prefix`, sorted.
    fn runs(&self, prefix: &str) -> Vec<String> {
        let mut ran: Vec<String> = self
            .ran
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.starts_with(prefix))
            .cloned()
            .collect();
        ran.sort();
        ran
    }
}

/// A keyed job answering `echo:{key}` (and `+{note}` with a `note` header).
#[derive(Serialize, Deserialize)]
struct Echo {
    key: String,
}

fn echo(key: &str) -> Echo {
    Echo { key: key.into() }
}

impl Job for Echo {
    const NAME: &'static str = "echo";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<String, Self::Error> {
        let fx = ctx.state::<Arc<Fx>>();
        fx.ran(format!("echo/{}", self.key));
        if fx.writing {
            fx.echo_gate.wait().await;
        }
        Ok(match ctx.headers().get("note") {
            Some(note) => format!("echo:{}+{note}", self.key),
            None => format!("echo:{}", self.key),
        })
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// The paused type's job.
#[derive(Serialize, Deserialize)]
struct Report {
    key: String,
}

impl Job for Report {
    const NAME: &'static str = "report";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<String, Self::Error> {
        ctx.state::<Arc<Fx>>().ran(format!("report/{}", self.key));
        Ok(format!("report:{}", self.key))
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

#[derive(Debug, thiserror::Error)]
enum Doom {
    #[error("not yet")]
    NotYet,
    #[error("doomed for good")]
    ForGood,
}

/// In the writer: fails its first attempt (transient, after a memo put),
/// then for good on its second: a dead letter with an attempt history and
/// a memo entry. In a test it succeeds with what its memo holds.
#[derive(Serialize, Deserialize)]
struct Doomed {
    key: String,
}

impl Job for Doomed {
    const NAME: &'static str = "doomed";
    type Output = String;
    type Error = Doom;
    async fn run(&self, ctx: JobContext) -> Result<String, Doom> {
        let fx = ctx.state::<Arc<Fx>>();
        fx.ran(format!("doomed/{}", self.key));
        if fx.writing {
            if ctx.attempt() == 1 {
                let _ = ctx
                    .memo()
                    .put("first", b"attempt 1 was here".to_vec())
                    .await;
                return Err(Doom::NotYet);
            }
            return Err(Doom::ForGood);
        }
        let memo = ctx.memo().get("first").await.ok().flatten();
        let memo = memo.map(|m| String::from_utf8_lossy(&m).into_owned());
        Ok(format!(
            "revived:{}:{}",
            self.key,
            memo.as_deref().unwrap_or("-")
        ))
    }
    fn classify(&self, error: &Doom) -> FailureKind {
        match error {
            Doom::NotYet => FailureKind::Transient,
            Doom::ForGood => FailureKind::Permanent,
        }
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
    fn max_attempts(&self) -> Option<u32> {
        Some(3)
    }
}

/// The periodic jobs' job: answers its tick.
#[derive(Serialize, Deserialize)]
struct Beat {
    at_ms: u64,
}

impl Job for Beat {
    const NAME: &'static str = "beat";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        ctx.state::<Arc<Fx>>().ran(format!("beat/{}", self.at_ms));
        Ok(self.at_ms)
    }
}

/// The batch's pipeline: the square of its input and the batch's `team`
/// header; 3 fails for good; 4 and more wait at the item gate.
struct Square {
    fx: Arc<Fx>,
}

impl Pipeline for Square {
    const NAME: &'static str = "square";
    type Input = u32;
    type Output = String;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u32>) -> Result<String, ItemError> {
        self.fx.ran(format!("square/{}", ctx.input));
        if ctx.input == 3 {
            return Err(ItemError::permanent("three is unlucky"));
        }
        if ctx.input >= 4 {
            self.fx.item_gate.wait().await;
        }
        let team = ctx.headers.get("team").map_or("-", String::as_str);
        Ok(format!("{} for {team}", ctx.input * ctx.input))
    }
}

/// The fixture's engine on `store`, writing it or reading it.
fn engine_on(store: &Path, clock: &Arc<MockClock>, fx: &Arc<Fx>) -> EngineBuilder {
    let nightly = Schedule::cron("30 4 * * *")
        .and_then(|s| s.time_zone("Europe/Paris"))
        .expect("a valid schedule")
        .on_missed(Missed::Skip);
    common::disk_builder(store, clock.clone())
        .intake_poll(Duration::from_millis(20))
        .register_with::<Echo>(gaffer::JobOptions {
            concurrency: Some(1),
            ..Default::default()
        })
        .register::<Report>()
        .register::<Doomed>()
        .register::<Beat>()
        .pipeline_with(
            Square { fx: fx.clone() },
            gaffer::JobOptions {
                concurrency: Some(2),
                ..Default::default()
            },
        )
        .periodic(
            "hourly",
            Schedule::every(Duration::from_millis(HOUR_MS)).on_missed(Missed::RunOnce),
            |t: &Tick| Beat { at_ms: t.at_ms },
        )
        .periodic("nightly", nightly, |t: &Tick| Beat { at_ms: t.at_ms })
        .state(fx.clone())
}

fn run_at(ms: u64) -> SubmitOptions {
    SubmitOptions {
        run_at: Some(UNIX_EPOCH + Duration::from_millis(ms)),
        ..Default::default()
    }
}

fn id(key: &str) -> String {
    gaffer::job::keyed_job_id(key)
}

fn tick_id(name: &str, at_ms: u64) -> String {
    Tick::new(name, at_ms).job_id
}

// ---------------------------------------------------------------------------
// Opening a copy.

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layout-2")
}

/// Copy the store files of `from` into `to` (not its README).
fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "README.md" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_store(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A fresh copy of the committed fixture, and a clock at [`OPENED_AT_MS`].
fn a_copy() -> (tempfile::TempDir, Arc<MockClock>) {
    let tmp = tempfile::tempdir().unwrap();
    assert!(
        fixture().join("queue").is_dir(),
        "no fixture store at {}",
        fixture().display()
    );
    copy_store(&fixture(), tmp.path());
    (tmp, Arc::new(MockClock::new(OPENED_AT_MS)))
}

async fn open(dir: &Path, clock: &Arc<MockClock>, fx: &Arc<Fx>) -> Engine {
    within(engine_on(dir, clock, fx).start())
        .await
        .expect("today's build opens the layout-2 fixture")
}

async fn client_on(dir: &Path) -> Client {
    Client::builder()
        .store(gaffer::Store::local_dir(dir))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .expect("a client opens the layout-2 fixture")
}

// ---------------------------------------------------------------------------
// What the fixture holds, read without an engine (as the `gaffer` command
// reads it). The generator checks it before it replaces the committed files.

async fn reader_on(dir: &Path) -> QueueReader {
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    QueueReader::open_with_options(store, "queue", ReaderOptions::default())
        .await
        .unwrap()
}

async fn state(view: &QueueView, key: &str) -> Option<JobState> {
    inspect::job_state(view, &id(key)).await.unwrap()
}

/// Files under `dir` whose path contains `part`.
fn files_with(dir: &Path, part: &str) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            n += files_with(&entry.path(), part);
        } else if entry.path().to_string_lossy().contains(part) {
            n += 1;
        }
    }
    n
}

async fn check_contents(dir: &Path) {
    let reader = reader_on(dir).await;
    let view = reader.view();
    assert_eq!(inspect::layout(view).await.unwrap(), Layout::Current);
    assert!(inspect::ended_index_ready(view).await.unwrap());

    // Pending (one of them claimed by the killed writer), scheduled, paused.
    for key in ["pending-a", "pending-b", "pending-c"] {
        let s = state(view, key).await;
        assert!(
            matches!(s, Some(JobState::Queued | JobState::Running)),
            "{key}: {s:?}"
        );
    }
    assert_eq!(state(view, "later-1").await, Some(JobState::Scheduled));
    assert_eq!(state(view, "paused-1").await, Some(JobState::Queued));
    let paused = gaffer::testing::layout::keys::paused_key(Report::NAME);
    assert!(
        view.kv_get(&paused).await.unwrap().is_some(),
        "report is paused"
    );

    // Finished, with their records and index entries.
    assert_eq!(state(view, "done-1").await, Some(JobState::Succeeded));
    assert_eq!(state(view, "client-taken").await, Some(JobState::Succeeded));
    assert_eq!(state(view, "doomed-1").await, Some(JobState::Failed));
    assert_eq!(state(view, "cancelled-1").await, Some(JobState::Cancelled));
    let doomed = inspect::outcome_record(view, &id("doomed-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(doomed.attempts, 2, "{doomed:?}");
    assert_eq!(doomed.history.len(), 1, "{doomed:?}");
    let tick = tick_id("hourly", T0_MS + HOUR_MS);
    assert_eq!(
        inspect::job_state(view, &tick).await.unwrap(),
        Some(JobState::Succeeded)
    );
    let ended = inspect::ended_page(view, None, &[], None, 100)
        .await
        .unwrap();
    let mut listed: Vec<(String, JobState)> = ended
        .jobs
        .iter()
        .map(|(run, rec)| (run.clone(), JobState::of(&rec.outcome)))
        .collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = vec![
        (id("done-1"), JobState::Succeeded),
        (id("client-taken"), JobState::Succeeded),
        (tick.clone(), JobState::Succeeded),
        (id("doomed-1"), JobState::Failed),
        (id("cancelled-1"), JobState::Cancelled),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed, expected);
    assert_eq!(ended.next, None);

    // The client's second request, still in the inbox: not taken.
    assert_eq!(state(view, "client-inbox").await, None);
    assert_eq!(files_with(&dir.join("queue-inbox"), "/enqueue/"), 1);

    // The batch: complete manifest, three items settled, three not.
    let head = inspect::batch_head(view, BATCH).await.unwrap().unwrap();
    assert!(head.complete, "{head:?}");
    assert_eq!(head.total, 6);
    let batch = inspect::batch_state(view, BATCH).await.unwrap();
    assert_eq!(
        (batch.succeeded, batch.failed, batch.cancelled, batch.active),
        (2, 1, 0, 3),
        "{batch:?}"
    );

    // The periodic records.
    let periodic: HashMap<String, _> = inspect::periodic_jobs(view)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.record.name.clone(), p))
        .collect();
    let hourly = &periodic["hourly"].record;
    assert_eq!(
        (
            hourly.fired,
            hourly.last_fired_ms,
            hourly.last_run_id.clone()
        ),
        (1, Some(T0_MS + HOUR_MS), Some(tick))
    );
    assert_eq!(periodic["nightly"].record.fired, 0);

    // The dead letter is kept on its queue (a retry reads its payload).
    let dead = view
        .stats(&common::job_queue(Doomed::NAME))
        .await
        .unwrap()
        .dead;
    assert_eq!(dead, 1);
    reader.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_holds_what_its_readme_lists() {
    let (dir, _clock) = a_copy();
    check_contents(dir.path()).await;
}

// ---------------------------------------------------------------------------
// Today's build on the fixture.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_jobs_run_once_and_finished_ones_answer_from_their_records() {
    let (dir, clock) = a_copy();
    let fx = Fx::reading();
    let engine = open(dir.path(), &clock, &fx).await;

    // The pending jobs (one was running when the writer died) run, once.
    for (key, out) in [
        ("pending-a", "echo:pending-a"),
        ("pending-b", "echo:pending-b+kept"),
        ("pending-c", "echo:pending-c"),
    ] {
        let got = within(engine.keyed_handle::<Echo>(key).join()).await;
        assert_eq!(got.unwrap().unwrap(), out);
        assert_eq!(fx.runs_of(&format!("echo/{key}")), 1, "{key}");
    }

    // The finished ones answer from their records, without running.
    for key in ["done-1", "client-taken"] {
        assert_eq!(engine.status(&id(key)).await.unwrap(), JobState::Succeeded);
        let got = within(engine.keyed_handle::<Echo>(key).join()).await;
        assert_eq!(got.unwrap().unwrap(), format!("echo:{key}"));
    }
    let tick = tick_id("hourly", T0_MS + HOUR_MS);
    let beat = within(engine.handle::<Beat>(&tick).unwrap().join()).await;
    assert_eq!(beat.unwrap().unwrap(), T0_MS + HOUR_MS);

    assert_eq!(
        engine.status(&id("doomed-1")).await.unwrap(),
        JobState::Failed
    );
    let failed = within(engine.keyed_handle::<Doomed>("doomed-1").join())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(failed.kind, FailureKind::Permanent);
    assert!(failed.message.contains("doomed for good"), "{failed:?}");

    assert_eq!(
        engine.status(&id("cancelled-1")).await.unwrap(),
        JobState::Cancelled
    );
    let cancelled = within(engine.keyed_handle::<Echo>("cancelled-1").join())
        .await
        .unwrap()
        .unwrap_err();
    assert!(cancelled.is_cancelled(), "{cancelled:?}");

    // The request left in the inbox is taken at the start and runs.
    let got = within(engine.keyed_handle::<Echo>("client-inbox").join()).await;
    assert_eq!(got.unwrap().unwrap(), "echo:client-inbox");

    // No other job ran: the scheduled job waits, the paused type is
    // paused, no tick was due. (The batch's queued items run too: see the
    // batch's test.)
    let jobs: Vec<String> = fx
        .runs("")
        .into_iter()
        .filter(|r| !r.starts_with("square/"))
        .collect();
    assert_eq!(
        jobs,
        vec![
            "echo/client-inbox",
            "echo/pending-a",
            "echo/pending-b",
            "echo/pending-c"
        ]
    );

    // The finished-jobs index lists the fixture's finished jobs and the new.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let ended = inspect::ended_page(queue.view(), None, &[], None, 100)
        .await
        .unwrap();
    let listed: BTreeMap<String, JobState> = ended
        .jobs
        .iter()
        .map(|(run, rec)| (run.clone(), JobState::of(&rec.outcome)))
        .collect();
    let mut expected: BTreeMap<String, JobState> = [
        "done-1",
        "client-taken",
        "pending-a",
        "pending-b",
        "pending-c",
        "client-inbox",
    ]
    .into_iter()
    .map(|k| (id(k), JobState::Succeeded))
    .collect();
    expected.insert(tick, JobState::Succeeded);
    expected.insert(id("doomed-1"), JobState::Failed);
    expected.insert(id("cancelled-1"), JobState::Cancelled);
    assert_eq!(listed, expected);

    // Of the failed ones, by the index's type and state.
    let failed = inspect::ended_page(
        queue.view(),
        Some(&[Doomed::NAME]),
        &[EndedState::Failed],
        None,
        100,
    )
    .await
    .unwrap();
    let failed: Vec<&str> = failed.jobs.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(failed, vec![id("doomed-1").as_str()]);
    drop(queue);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_retries_from_its_payload_and_finds_its_memo() {
    let (dir, clock) = a_copy();
    let fx = Fx::reading();
    let engine = open(dir.path(), &clock, &fx).await;
    engine.retry(&id("doomed-1")).await.unwrap();
    let got = within(engine.keyed_handle::<Doomed>("doomed-1").join()).await;
    assert_eq!(got.unwrap().unwrap(), "revived:doomed-1:attempt 1 was here");
    assert_eq!(fx.runs_of("doomed/doomed-1"), 1);
    assert_eq!(
        engine.status(&id("doomed-1")).await.unwrap(),
        JobState::Succeeded
    );
    shut_down_cleanly(&engine).await;
}

/// An engine given a keyring (issue #36 §5) opens the unencrypted fixture:
/// its plain values read (records, the dead letter's payload and memo, the
/// manifest), what it writes from then on is sealed, and the store is from
/// then on refused to an engine without the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_opens_with_a_keyring_its_plain_values_read_and_new_ones_are_sealed() {
    use gaffer::encryption::Keyring;
    let (dir, clock) = a_copy();
    let fx = Fx::reading();
    let keyring = Keyring::new().with_key("k1", [7; 32]).unwrap();
    let engine = within(
        engine_on(dir.path(), &clock, &fx)
            .encryption(keyring.clone())
            .start(),
    )
    .await
    .expect("an engine with a keyring opens the unencrypted fixture");
    let got = within(engine.keyed_handle::<Echo>("pending-a").join()).await;
    assert_eq!(got.unwrap().unwrap(), "echo:pending-a");
    let done = within(engine.keyed_handle::<Echo>("done-1").join()).await;
    assert_eq!(done.unwrap().unwrap(), "echo:done-1");
    engine.retry(&id("doomed-1")).await.unwrap();
    let revived = within(engine.keyed_handle::<Doomed>("doomed-1").join()).await;
    assert_eq!(
        revived.unwrap().unwrap(),
        "revived:doomed-1:attempt 1 was here"
    );
    let report = within(engine.batch::<Square>(BATCH).unwrap().resume())
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.failed), (5, 1), "{report:?}");
    // The retried job's new outcome is sealed under the engine's key.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let stored = inspect::outcome_record(queue.view(), &id("doomed-1"))
        .await
        .unwrap()
        .unwrap();
    let gaffer::protocol::Outcome::Succeeded(gaffer::protocol::OutputRef::Inline(bytes)) =
        &stored.outcome
    else {
        panic!("{stored:?}");
    };
    assert_eq!(
        gaffer::testing::layout::sealed::sealed_under(bytes),
        Some("k1")
    );
    drop(queue);
    shut_down_cleanly(&engine).await;
    let keyless = within(engine_on(dir.path(), &clock, &fx).start()).await;
    assert!(
        matches!(&keyless, Err(Error::EncryptionKeyMissing { key_id }) if key_id == "k1"),
        "{:?}",
        keyless.as_ref().err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_half_finished_batch_resumes_to_an_exact_report() {
    let (dir, clock) = a_copy();
    // The unfinished items start at the engine's start (they are queued),
    // and wait until the settled ones are checked.
    let items = Gate::closed();
    let fx = Fx::reading_with(items.clone());
    let engine = open(dir.path(), &clock, &fx).await;
    let sink = CollectSink::new();
    let batch = engine.batch::<Square>(BATCH).unwrap().sink(sink.clone());

    let before = batch.status().await.unwrap();
    assert_eq!(
        (
            before.total,
            before.succeeded,
            before.failed,
            before.pending
        ),
        (6, 2, 1, 3),
        "{before:?}"
    );
    let settled = batch.items(None, 100).await.unwrap();
    let settled: Vec<(String, ItemOutcome<String>)> = settled
        .items
        .into_iter()
        .map(|i| (i.key, i.outcome))
        .collect();
    assert_eq!(
        settled,
        vec![
            (
                "item-0".into(),
                ItemOutcome::Succeeded("1 for fixture".into())
            ),
            (
                "item-1".into(),
                ItemOutcome::Succeeded("4 for fixture".into())
            ),
            (
                "item-2".into(),
                ItemOutcome::Failed("three is unlucky".into())
            ),
        ]
    );

    // The resume reads the inputs from the manifest.
    items.open();
    let report = within(batch.resume()).await.unwrap();
    assert_eq!(
        (
            report.total,
            report.succeeded,
            report.failed,
            report.cancelled,
            report.sink_errors
        ),
        (6, 5, 1, 0, 0),
        "{report:?}"
    );
    assert_eq!(report.failed_keys, vec!["item-2".to_string()]);
    // The succeeded items did not run again; the failed one and the
    // unfinished ones ran once each.
    assert_eq!(
        fx.runs("square/"),
        vec!["square/3", "square/4", "square/5", "square/6"]
    );
    let records = sink.by_key();
    assert_eq!(records.len(), 6, "{records:?}");
    for (n, key) in [
        (1u32, "item-0"),
        (2, "item-1"),
        (4, "item-3"),
        (5, "item-4"),
        (6, "item-5"),
    ] {
        let rec = &records[key];
        assert_eq!(rec.status, gaffer::sink::STATUS_SUCCEEDED, "{rec:?}");
        assert_eq!(
            rec.output,
            Some(serde_json::Value::String(format!("{} for fixture", n * n))),
            "{rec:?}"
        );
    }
    assert_eq!(records["item-2"].status, gaffer::sink::STATUS_FAILED);
    assert_eq!(records["item-2"].error.as_deref(), Some("three is unlucky"));
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_jobs_keep_their_last_tick() {
    let (dir, clock) = a_copy();
    let fx = Fx::reading();
    let engine = open(dir.path(), &clock, &fx).await;

    // Nothing is due at T0 + 90 min: the tick of T0 + 1h is not fired again.
    assert_eq!(engine.check_periodic().await.unwrap(), 0);
    let jobs: HashMap<String, _> = engine
        .periodic_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.record.name.clone(), p))
        .collect();
    let hourly = &jobs["hourly"];
    assert_eq!(hourly.record.fired, 1);
    assert_eq!(hourly.record.last_fired_ms, Some(T0_MS + HOUR_MS));
    assert_eq!(
        hourly.record.last_run_id,
        Some(tick_id("hourly", T0_MS + HOUR_MS))
    );
    assert_eq!(hourly.next_due_ms, Some(T0_MS + 2 * HOUR_MS));
    assert_eq!(hourly.schedule, "every 1h");
    let nightly = &jobs["nightly"];
    assert_eq!(nightly.record.fired, 0);
    assert_eq!(nightly.record.last_fired_ms, None);
    // 04:30 in Paris on 2026-01-01 is 03:30 UTC.
    assert_eq!(nightly.next_due_ms, Some(T0_MS + 3 * HOUR_MS + HOUR_MS / 2));

    // The next tick fires once, as the next of the recorded one.
    clock.advance(Duration::from_millis(30 * 60_000));
    engine.check_periodic().await.unwrap();
    let next = tick_id("hourly", T0_MS + 2 * HOUR_MS);
    let beat = within(engine.handle::<Beat>(&next).unwrap().join()).await;
    assert_eq!(beat.unwrap().unwrap(), T0_MS + 2 * HOUR_MS);
    let hourly = engine
        .periodic_jobs()
        .await
        .unwrap()
        .into_iter()
        .find(|p| p.record.name == "hourly")
        .unwrap();
    assert_eq!(hourly.record.fired, 2);
    assert_eq!(hourly.record.last_fired_ms, Some(T0_MS + 2 * HOUR_MS));
    assert_eq!(
        fx.runs_of(&format!("beat/{}", T0_MS + HOUR_MS)),
        0,
        "the recorded tick does not run again"
    );
    assert_eq!(fx.runs_of(&format!("beat/{}", T0_MS + 2 * HOUR_MS)), 1);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduled_job_waits_for_its_time() {
    let (dir, clock) = a_copy();
    let fx = Fx::reading();
    let engine = open(dir.path(), &clock, &fx).await;
    // The pending ones run at once; the scheduled one does not.
    within(engine.keyed_handle::<Echo>("pending-c").join())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        engine.status(&id("later-1")).await.unwrap(),
        JobState::Scheduled
    );
    assert_eq!(fx.runs_of("echo/later-1"), 0);

    clock.advance(Duration::from_millis(T0_MS + DAY_MS + 1 - OPENED_AT_MS));
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    queue.promote_scheduled_now().await.unwrap();
    drop(queue);
    let got = within(engine.keyed_handle::<Echo>("later-1").join()).await;
    assert_eq!(got.unwrap().unwrap(), "echo:later-1");
    assert_eq!(fx.runs_of("echo/later-1"), 1);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_paused_type_stays_paused_until_resumed() {
    let (dir, clock) = a_copy();
    let fx = Fx::reading();
    let engine = open(dir.path(), &clock, &fx).await;
    // Other types' pending jobs run; the paused type's does not.
    for key in ["pending-a", "pending-b", "pending-c"] {
        within(engine.keyed_handle::<Echo>(key).join())
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(
        engine.status(&id("paused-1")).await.unwrap(),
        JobState::Queued
    );
    assert_eq!(fx.runs_of("report/paused-1"), 0);
    // The stored pause was read: pausing again changes nothing.
    assert!(!engine.pause(Report::NAME).await.unwrap());
    assert!(engine.resume(Report::NAME).await.unwrap());
    let got = within(engine.keyed_handle::<Report>("paused-1").join()).await;
    assert_eq!(got.unwrap().unwrap(), "report:paused-1");
    assert_eq!(fx.runs_of("report/paused-1"), 1);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_requests_taken_and_left_in_the_inbox_both_answer() {
    let (dir, clock) = a_copy();
    // Before any engine: the taken request's job answers, the other is not
    // in the store yet.
    let client = client_on(dir.path()).await;
    assert_eq!(
        client.status(&id("client-taken")).await.unwrap(),
        JobState::Succeeded
    );
    assert_eq!(
        client
            .outcome::<Echo>(&id("client-taken"))
            .await
            .unwrap()
            .unwrap()
            .unwrap(),
        "echo:client-taken"
    );
    assert!(
        matches!(
            client.status(&id("client-inbox")).await,
            Err(Error::JobNotFound(_))
        ),
        "the request in the inbox is not taken before an engine starts"
    );

    let fx = Fx::reading();
    let engine = open(dir.path(), &clock, &fx).await;
    let got = within(client.join::<Echo>(&id("client-inbox"))).await;
    assert_eq!(got.unwrap().unwrap(), "echo:client-inbox");
    assert_eq!(fx.runs_of("echo/client-inbox"), 1);
    assert_eq!(fx.runs_of("echo/client-taken"), 0);
    client.close().await;
    shut_down_cleanly(&engine).await;
}

// ---------------------------------------------------------------------------
// Other layouts.

async fn store_with_layout(dir: &Path, marker: &str) {
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir).unwrap());
    let queue = gaffer::taquba::Queue::open_with_options(
        store,
        "queue",
        common::test_options(common::mock_clock()),
    )
    .await
    .unwrap();
    queue
        .kv_put(b"gaffer/layout", marker.as_bytes())
        .await
        .unwrap();
    queue.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_a_newer_layout_is_refused_with_a_call_to_upgrade_gaffer() {
    let dir = tempfile::tempdir().unwrap();
    store_with_layout(dir.path(), "gaffer-layout-3").await;
    let refused = common::disk_builder(dir.path(), common::mock_clock())
        .start()
        .await
        .expect_err("a store of a later layout must be refused");
    match &refused {
        Error::LayoutTooNew { found, supported } => {
            assert_eq!(found, "gaffer-layout-3");
            assert_eq!(supported, gaffer::testing::layout::keys::LAYOUT_VERSION);
        }
        other => panic!("expected LayoutTooNew, got {other:?}"),
    }
    let text = refused.to_string();
    assert!(text.contains("upgrade gaffer"), "{text}");
    assert!(text.contains("gaffer-layout-3"), "{text}");

    // A client is refused the same way.
    let err = Client::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .open()
        .await
        .expect_err("a client refuses it too");
    assert!(matches!(err, Error::LayoutTooNew { .. }), "{err:?}");

    // The store was not touched: still the later layout.
    let reader = reader_on(dir.path()).await;
    assert_eq!(
        inspect::layout(reader.view()).await.unwrap(),
        Layout::Other("gaffer-layout-3".into())
    );
    reader.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_a_newer_release_serves_is_refused_without_fencing_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    store_with_layout(dir.path(), "gaffer-layout-3").await;
    // The newer release's writer holds the store.
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let newer = gaffer::taquba::Queue::open_with_options(
        store,
        "queue",
        common::test_options(common::mock_clock()),
    )
    .await
    .unwrap();
    let refused = common::disk_builder(dir.path(), common::mock_clock())
        .start()
        .await
        .expect_err("a store of a later layout must be refused");
    assert!(matches!(refused, Error::LayoutTooNew { .. }), "{refused:?}");
    // Its writer was not fenced: it still commits.
    newer
        .kv_put(b"still-mine", b"yes")
        .await
        .expect("the newer release's writer is not fenced");
    newer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_release_layout_1_is_refused_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    store_with_layout(dir.path(), "gaffer-layout-1").await;
    let refused = common::disk_builder(dir.path(), common::mock_clock())
        .start()
        .await
        .expect_err("a pre-release store must be refused");
    match &refused {
        Error::LayoutMismatch { found, expected } => {
            assert_eq!(found, "gaffer-layout-1");
            assert_eq!(expected, gaffer::testing::layout::keys::LAYOUT_VERSION);
        }
        other => panic!("expected LayoutMismatch, got {other:?}"),
    }
    let text = refused.to_string();
    assert!(text.contains("new store path"), "{text}");
}

// ---------------------------------------------------------------------------
// The generator.

/// Write the fixture into `{GAFFER_FIXTURE_WRITER_DIR}/store`, then write
/// `ready` and wait to be killed. Run by [`regenerate_the_layout_2_fixture`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the fixture's writer: run as a child process by regenerate_the_layout_2_fixture"]
async fn fixture_writer_child() {
    let Ok(dir) = std::env::var(WRITER_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    let store = dir.join("store");
    let clock = common::mock_clock();
    let fx = Fx::writing();
    let engine = open(&store, &clock, &fx).await;

    // A paused type with a job waiting.
    assert!(engine.pause(Report::NAME).await.unwrap());
    engine
        .submit(Report {
            key: "paused-1".into(),
        })
        .await
        .unwrap();

    // A success.
    fx.echo_gate.release(1);
    let done = within(engine.submit(echo("done-1")).await.unwrap().join()).await;
    assert_eq!(done.unwrap().unwrap(), "echo:done-1");

    // A client's request, taken and run.
    let client = client_on(&store).await;
    fx.echo_gate.release(1);
    let taken = client.submit(echo("client-taken")).await.unwrap();
    let taken = within(taken.join()).await;
    assert_eq!(taken.unwrap().unwrap(), "echo:client-taken");
    client.close().await;

    // A dead letter with its record (two attempts: a history) and a memo.
    let doomed = within(
        engine
            .submit(Doomed {
                key: "doomed-1".into(),
            })
            .await
            .unwrap()
            .join(),
    )
    .await;
    assert_eq!(doomed.unwrap().unwrap_err().kind, FailureKind::Permanent);

    // A cancelled job, and a job scheduled a day ahead.
    let cancelled = engine
        .submit_with(echo("cancelled-1"), run_at(T0_MS + DAY_MS))
        .await
        .unwrap();
    engine.cancel(cancelled.id()).await.unwrap();
    engine
        .submit_with(echo("later-1"), run_at(T0_MS + DAY_MS))
        .await
        .unwrap();

    // An hour later, the hourly tick fires and runs.
    clock.advance(Duration::from_millis(HOUR_MS));
    engine.check_periodic().await.unwrap();
    let tick = tick_id("hourly", T0_MS + HOUR_MS);
    let beat = within(engine.handle::<Beat>(&tick).unwrap().join()).await;
    assert_eq!(beat.unwrap().unwrap(), T0_MS + HOUR_MS);

    // A batch of six: 1 and 2 succeed, 3 fails, 4 to 6 never finish.
    let batch = engine
        .batch::<Square>(BATCH)
        .unwrap()
        .headers(HashMap::from([("team".to_string(), "fixture".to_string())]));
    tokio::spawn(async move { batch.run(1..=6u32).await });
    let probe = engine.batch::<Square>(BATCH).unwrap();
    common::eventually("three items settle", LIMIT, async || {
        probe
            .status()
            .await
            .is_ok_and(|s| s.succeeded == 2 && s.failed == 1)
    })
    .await;
    fx.item_gate.wait_entered(1, LIMIT).await;

    // Three pending echo jobs: the first one starts and holds.
    engine.submit(echo("pending-a")).await.unwrap();
    let note = SubmitOptions {
        headers: HashMap::from([("note".to_string(), "kept".to_string())]),
        ..Default::default()
    };
    engine.submit_with(echo("pending-b"), note).await.unwrap();
    engine.submit(echo("pending-c")).await.unwrap();
    fx.echo_gate.wait_entered(3, LIMIT).await;

    // Every commit above was awaited durable: the crash can come.
    std::fs::write(dir.join("ready"), b"").unwrap();
    std::future::pending::<()>().await;
}

/// Write a new `tests/fixtures/layout-2` (keeping its README): run the
/// writer as a child process, SIGKILL it once it is ready, send one more
/// client request into the inbox with no engine running, check the store
/// holds what the README lists, and copy its files over the fixture's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "regenerates tests/fixtures/layout-2; run by hand"]
async fn regenerate_the_layout_2_fixture() {
    assert_eq!(
        gaffer::testing::layout::keys::LAYOUT_VERSION,
        "gaffer-layout-2",
        "this build writes another layout: keep the layout-2 fixture and add a generator for the new one"
    );
    let tmp = tempfile::tempdir().unwrap();
    let mut child = common::spawn_test_child("fixture_writer_child", WRITER_DIR, tmp.path());
    common::wait_for_child_file(
        tmp.path(),
        &tmp.path().join("ready"),
        "the fixture's writing",
    )
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let store = tmp.path().join("store");

    // A request sent while no engine runs: it stays in the inbox.
    let client = client_on(&store).await;
    client.submit(echo("client-inbox")).await.unwrap();
    client.close().await;

    // Check a copy (a reader may write to the store it opens).
    let check = tempfile::tempdir().unwrap();
    copy_store(&store, check.path());
    check_contents(check.path()).await;

    let target = fixture();
    std::fs::create_dir_all(&target).unwrap();
    for entry in std::fs::read_dir(&target).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "README.md" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            std::fs::remove_dir_all(entry.path()).unwrap();
        } else {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
    copy_store(&store, &target);
}
