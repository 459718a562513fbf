//! Producers in other processes: a `Client` on the engine's local directory
//! submits through the store's inbox, and reads jobs through a read-only
//! reader. The multi-process claims run real child processes (this test
//! binary, re-run with `client_child`).

mod common;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::{
    Engine, Error, Job, JobContext, SubmitOptions, job::JobState, remote::Client,
    remote::RequestState,
};
use serde::{Deserialize, Serialize};

use common::{LIMIT, eventually, within};

#[derive(Debug, Serialize, Deserialize)]
struct Square {
    x: u64,
    key: Option<String>,
}

impl Job for Square {
    const NAME: &'static str = "square";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<u64, gaffer::Error> {
        if let Some(runs) = ctx.try_state::<Arc<AtomicUsize>>() {
            runs.fetch_add(1, Ordering::SeqCst);
        }
        Ok(self.x * self.x)
    }

    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
}

/// Registered by no engine here.
#[derive(Debug, Serialize, Deserialize)]
struct Nobody;

impl Job for Nobody {
    const NAME: &'static str = "nobody";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<(), gaffer::Error> {
        Ok(())
    }
}

async fn engine(dir: &Path, runs: Arc<AtomicUsize>) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Square>()
        .state(runs)
        .start()
        .await
        .expect("engine starts")
}

async fn client(dir: &Path) -> Client {
    Client::builder()
        .store(gaffer::Store::local_dir(dir))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .expect("client opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_submits_and_joins_through_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let client = client(tmp.path()).await;

    let h = client.submit(Square { x: 7, key: None }).await.unwrap();
    assert_eq!(within(h.join()).await.unwrap().unwrap(), 49);
    assert_eq!(
        h.status().await.unwrap(),
        RequestState::Job(JobState::Succeeded)
    );
    assert_eq!(client.status(h.id()).await.unwrap(), JobState::Succeeded);
    assert_eq!(
        client.outcome::<Square>(h.id()).await.unwrap(),
        Some(Ok(49))
    );
    assert_eq!(within(client.join::<Square>(h.id())).await.unwrap(), Ok(49));
    // The engine knows the job by the id the client made.
    assert_eq!(engine.status(h.id()).await.unwrap(), JobState::Succeeded);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // Options travel: a job held until later is scheduled, not run.
    let later = std::time::SystemTime::now() + Duration::from_secs(3600);
    let h = client
        .submit_with(
            Square { x: 2, key: None },
            SubmitOptions {
                run_at: Some(later),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually("the client reads the job as scheduled", LIMIT, async || {
        h.status().await.unwrap() == RequestState::Job(JobState::Scheduled)
    })
    .await;
    assert_eq!(engine.status(h.id()).await.unwrap(), JobState::Scheduled);
    client.close().await;
    engine.shutdown().await.unwrap();
}

/// Every field of a submission set through the client arrives on the job:
/// its type, payload, key and period (its id), headers, priority, attempt
/// limit, due time, timeout and tags, as the engine's queue job (and run record) holds them (read back from
/// the store: the run's record names its queue job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_field_set_through_the_client_arrives_on_the_job() {
    use gaffer_actors::layout::{keys, records};
    let tmp = tempfile::tempdir().unwrap();
    let engine = engine(tmp.path(), Arc::new(AtomicUsize::new(0))).await;
    let client = client(tmp.path()).await;
    let later = std::time::UNIX_EPOCH + Duration::from_millis(4_102_444_800_123);
    let job = Square {
        x: 9,
        key: Some("every-field".into()),
    };
    let before_send = std::time::SystemTime::now();
    let h = client
        .submit_with(
            Square {
                x: 9,
                key: Some("every-field".into()),
            },
            SubmitOptions {
                max_attempts: Some(7),
                priority: Some(42),
                run_at: Some(later),
                headers: [("tenant".to_string(), "acme".to_string())].into(),
                timeout: Some(Duration::from_millis(1234)),
                unique_for: Some(Duration::from_secs(3600)),
                // Not with a key: a debounced job through a client is
                // `debounce.rs`'s.
                debounce: None,
                tags: vec!["order:42".into(), "customer:acme".into()],
            },
        )
        .await
        .unwrap();
    // Unique for an hour: the key's slot is the hour it was sent in (this
    // machine's clock), read before and after the send.
    let hour = |at: std::time::SystemTime| {
        at.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            / 3_600_000
    };
    let slots = [hour(before_send), hour(std::time::SystemTime::now())];
    assert!(
        slots
            .iter()
            .any(|n| h.id() == gaffer::job::keyed_job_id(&format!("every-field@3600000ms#{n}"))),
        "{} is not the key's id in the hour it was sent",
        h.id()
    );
    eventually("the engine takes the request", LIMIT, async || {
        h.status().await.unwrap() == RequestState::Job(JobState::Scheduled)
    })
    .await;
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let key = keys::run_key(h.id());
    let bytes = queue
        .view()
        .kv_get(&key)
        .await
        .unwrap()
        .expect("a run record");
    let run: records::RunRecord = records::decode(&key, &bytes).unwrap();
    assert_eq!(run.job_type, "square");
    assert_eq!(
        run.tags.map(|t| t.names),
        Some(vec!["order:42".to_string(), "customer:acme".to_string()])
    );
    let queued = queue
        .view()
        .get_job(&run.job_id)
        .await
        .unwrap()
        .expect("the run's queue job");
    assert_eq!(queued.payload, rmp_serde::to_vec_named(&job).unwrap());
    assert_eq!(queued.priority, 42);
    assert_eq!(queued.run_at, Some(4_102_444_800_123));
    assert_eq!(queued.headers["tenant"], "acme");
    assert_eq!(queued.headers[keys::HEADER_TYPE], "square");
    assert_eq!(queued.headers[keys::HEADER_RUN], h.id());
    assert_eq!(queued.headers[keys::HEADER_ATTEMPTS], "7");
    assert_eq!(queued.headers[keys::HEADER_TIMEOUT], "1234");
    client.close().await;
    engine.shutdown().await.unwrap();
}

/// A handle's join whose job was taken and then removed by retention
/// ends with `JobNotFound`: only after the client's grace for a taken
/// request whose job reads as absent (10 s), and not never.
///
/// The engine's clock (retention's) is a mock one, at the wall clock's
/// now, that only the test moves: the record stays until the test has
/// seen it through the client, however slow the client's reader is. (On
/// the wall clock, a client that did not look within the retention's 1 s
/// never saw the job succeed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_whose_job_is_past_retention_ends_after_the_grace() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let clock = Arc::new(gaffer::taquba::MockClock::new(now_ms));
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .clock(clock.clone())
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .poll_interval(Duration::from_millis(20))
        .retention(Duration::from_secs(1))
        .register::<Square>()
        .state(runs.clone())
        .start()
        .await
        .expect("engine starts");
    let client = client(tmp.path()).await;
    let h = client.submit(Square { x: 3, key: None }).await.unwrap();
    // The client's reader follows the engine's writes: it sees the job
    // succeed (its record is kept 1 s of the engine's clock), then, once
    // that second has passed, the sweeper remove it. Past that, it cannot
    // read the record again to answer the join with.
    eventually("the client reads the job as succeeded", LIMIT, async || {
        matches!(client.status(h.id()).await, Ok(JobState::Succeeded))
    })
    .await;
    clock.advance(Duration::from_secs(2));
    engine.sweep_now().await.unwrap();
    eventually("the client reads the job as removed", LIMIT, async || {
        matches!(
            client.status(h.id()).await,
            Err(gaffer::Error::JobNotFound(_))
        )
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let started = std::time::Instant::now();
    let joined = within(h.join()).await;
    assert!(
        matches!(&joined, Err(gaffer::Error::JobNotFound(id)) if id == h.id()),
        "{joined:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "ended after {:?}, before the grace",
        started.elapsed()
    );
    client.close().await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_a_reason_the_client_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let client = client(tmp.path()).await;

    // A type the engine does not know.
    let h = client.submit(Nobody).await.unwrap();
    match within(h.join()).await {
        Err(Error::Refused { request, reason }) => {
            assert_eq!(request, h.request_id());
            assert!(reason.contains("nobody"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(matches!(
        h.status().await.unwrap(),
        RequestState::Refused(_)
    ));

    // A key already used with another input: the second client is told.
    let key = Some("k-1".to_string());
    let first = client
        .submit(Square {
            x: 3,
            key: key.clone(),
        })
        .await
        .unwrap();
    assert_eq!(within(first.join()).await.unwrap().unwrap(), 9);
    let other = client.submit(Square { x: 4, key }).await.unwrap();
    assert_eq!(other.id(), first.id());
    match within(other.join()).await {
        Err(Error::Refused { reason, .. }) => {
            assert!(reason.contains("different input"), "{reason}")
        }
        other => panic!("expected InputMismatch, got {other:?}"),
    }
    // The first client's job is untouched.
    assert_eq!(
        first.status().await.unwrap(),
        RequestState::Job(JobState::Succeeded)
    );

    // Reserved headers never leave the client.
    let mut headers = std::collections::HashMap::new();
    headers.insert("gaffer.run".to_string(), "x".to_string());
    let refused = client
        .submit_with(
            Square { x: 1, key: None },
            SubmitOptions {
                headers,
                ..Default::default()
            },
        )
        .await;
    assert!(refused.is_err());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    client.close().await;
    engine.shutdown().await.unwrap();
}

/// Carries bytes (to make an entry too large for the inbox).
#[derive(Debug, Serialize, Deserialize)]
struct Blob {
    data: String,
}

impl Job for Blob {
    const NAME: &'static str = "blob";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<(), gaffer::Error> {
        Ok(())
    }
}

/// The files under `dir` (none if it does not exist), with their sizes.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            found.extend(files_under(&entry.path()));
        } else {
            found.push((entry.path(), meta.len()));
        }
    }
    found
}

/// A submission whose inbox entry would be over taquba's limit is refused
/// by the client before it writes anything (on S3, before a 16 MiB PUT the
/// engine would reject); one exactly at the limit is written, and taquba's
/// inbox reads it as an entry it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_the_inbox_limit_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    // An engine made the store, and is gone: nothing takes or deletes what
    // the client writes.
    engine(tmp.path(), Arc::new(AtomicUsize::new(0)))
        .await
        .shutdown()
        .await
        .unwrap();
    let inbox = tmp.path().join("queue-inbox");
    let before = files_under(&inbox);
    let client = client(tmp.path()).await;
    let max = gaffer::taquba::MAX_INBOX_ENTRY_SIZE;

    let refused = client
        .submit(Blob {
            data: "x".repeat(max),
        })
        .await;
    let size = match refused {
        Err(Error::RequestTooLarge { size, max: m }) => {
            assert_eq!(m, max);
            assert!(size > max, "{size}");
            size
        }
        other => panic!("expected RequestTooLarge, got {other:?}"),
    };
    assert_eq!(files_under(&inbox), before, "the client wrote to the inbox");

    // One byte over: refused too, and still nothing written.
    let over = max - (size - max) + 1;
    match client
        .submit(Blob {
            data: "x".repeat(over),
        })
        .await
    {
        Err(Error::RequestTooLarge { size, .. }) => assert_eq!(size, max + 1),
        other => panic!("expected RequestTooLarge, got {other:?}"),
    }
    assert_eq!(files_under(&inbox), before, "the client wrote to the inbox");

    // Exactly at the limit: written, one object of `max` bytes, which the
    // inbox reads as an entry (not a rejection).
    let at = client
        .submit(Blob {
            data: "x".repeat(over - 1),
        })
        .await
        .unwrap();
    let entries: Vec<_> = files_under(&inbox)
        .into_iter()
        .filter(|(path, _)| !before.iter().any(|(p, _)| p == path))
        .filter(|(path, _)| path.to_string_lossy().contains(at.request_id()))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].1, max as u64);
    let store: Arc<dyn gaffer::taquba::object_store::ObjectStore> = Arc::new(
        gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(tmp.path()).unwrap(),
    );
    let sender = gaffer::taquba::InboxSender::new(store, "queue-inbox");
    let pending = sender.pending("jobs-intake").await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(
        matches!(
            sender.read(&pending[0]).await.unwrap(),
            gaffer::taquba::EntryRead::Entry(_)
        ),
        "the inbox rejects the entry at the limit"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_the_inbox_rejects_are_refused_to_their_client() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;

    // A client that names another engine's queue prefix: its entries are
    // for a queue this engine's inbox does not accept.
    let stray = Client::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .queue_name("elsewhere")
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .unwrap();
    let lost = stray.submit(Square { x: 1, key: None }).await.unwrap();
    match within(lost.join()).await {
        Err(Error::Refused { reason, .. }) => {
            assert!(reason.contains("inbox rejected"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    stray.close().await;
    engine.shutdown().await.unwrap();
}

/// `join_timeout` answers like `JobHandle::join_timeout`: the result when
/// the job ends in time, `Ok(None)` when it has not (here: a request no
/// engine takes), and a refusal as `join` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_timeout_ends_on_a_request_no_engine_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let client = client(tmp.path()).await;
    let done = client.submit(Square { x: 6, key: None }).await.unwrap();
    assert_eq!(
        done.join_timeout(LIMIT).await.unwrap(),
        Some(Ok(36)),
        "the job ended within the limit"
    );
    let refused = client.submit(Nobody).await.unwrap();
    assert!(
        matches!(
            refused.join_timeout(LIMIT).await,
            Err(Error::Refused { .. })
        ),
        "a refusal ends the wait as an error"
    );
    engine.shutdown().await.unwrap();

    // No engine: the request stays in the inbox, and the wait ends.
    let waiting = client.submit(Square { x: 7, key: None }).await.unwrap();
    let started = std::time::Instant::now();
    let timeout = Duration::from_millis(300);
    assert_eq!(waiting.join_timeout(timeout).await.unwrap(), None);
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    assert!(started.elapsed() < LIMIT, "{:?}", started.elapsed());
    assert_eq!(waiting.status().await.unwrap(), RequestState::Sent);
    // An operator's request too.
    let pause = client.pause(Square::NAME).await.unwrap();
    assert_eq!(pause.wait_timeout(timeout).await.unwrap(), None);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    client.close().await;
}

/// `square` as another version of the program encodes it: its payload does
/// not decode as the engine's `Square`.
#[derive(Debug, Serialize, Deserialize)]
struct SquareOfText {
    x: String,
}

impl Job for SquareOfText {
    const NAME: &'static str = "square";
    type Output = u64;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<u64, gaffer::Error> {
        Ok(0)
    }
}

/// A payload that does not decode as the engine's type is not refused at
/// the intake (only the job's own adapter decodes it, when it runs): the
/// job is submitted, and its one attempt fails permanently with "invalid
/// input", which the client's join reports as the job's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_does_not_decode_fails_its_job_permanently() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let client = client(tmp.path()).await;
    let h = client
        .submit(SquareOfText { x: "seven".into() })
        .await
        .unwrap();
    let err = within(h.join())
        .await
        .expect("the request is taken, not refused")
        .expect_err("the job cannot succeed");
    assert_eq!(err.kind, gaffer::job::FailureKind::Permanent, "{err:?}");
    assert!(!err.is_cancelled());
    assert!(
        err.message.contains("invalid input for `square`"),
        "{}",
        err.message
    );
    assert_eq!(
        h.status().await.unwrap(),
        RequestState::Job(JobState::Failed)
    );
    assert_eq!(engine.status(h.id()).await.unwrap(), JobState::Failed);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the handler never ran");
    client.close().await;
    engine.shutdown().await.unwrap();
}

/// A request the engine takes twice (a crash between its submit and the
/// intake's ack re-delivers it) is one job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_submitted_twice_is_one_job() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let request = gaffer::protocol::SubmitRequest {
        run_id: Some("01JCLIENTREQUESTTWICE00000".into()),
        job_type: "square".into(),
        payload: rmp_serde::to_vec_named(&Square { x: 5, key: None }).unwrap(),
        ..Default::default()
    };
    let services = gaffer::testing::services(&engine);
    let first = services.submit(request.clone()).await.unwrap();
    let again = services.submit(request).await.unwrap();
    assert_eq!(first.run_id, again.run_id);
    assert!(first.newly_submitted && !again.newly_submitted);
    let h = engine.handle::<Square>(&first.run_id).unwrap();
    assert_eq!(within(h.join()).await.unwrap().unwrap(), 25);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    engine.shutdown().await.unwrap();
}

/// The child: submit `GAFFER_CLIENT_N` keyed jobs through a client, join
/// each, and print `id=output` lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the client tests as a child process"]
async fn client_child() {
    let Ok(dir) = std::env::var("GAFFER_CLIENT_DIR") else {
        return;
    };
    let n: u64 = std::env::var("GAFFER_CLIENT_N").unwrap().parse().unwrap();
    let client = client(Path::new(&dir)).await;
    let mut handles = Vec::new();
    for x in 0..n {
        let key = Some(format!("shared-{x}"));
        handles.push(client.submit(Square { x, key }).await.unwrap());
    }
    for h in handles {
        let out = within(h.join()).await.unwrap().unwrap();
        println!("RESULT {}={out}", h.id());
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_producer_processes_share_keys_and_each_key_runs_once() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let n = 20u64;
    let children: Vec<_> = (0..3)
        .map(|_| {
            common::test_child("client_child")
                .env("GAFFER_CLIENT_DIR", tmp.path())
                .env("GAFFER_CLIENT_N", n.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut answers = Vec::new();
    for child in children {
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        assert!(out.status.success(), "a producer failed: {out:?}");
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
            .collect();
        lines.sort();
        assert_eq!(lines.len(), n as usize, "{lines:?}");
        answers.push(lines);
    }
    // Every producer got the same id and output for each key…
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[1], answers[2]);
    for x in 0..n {
        let id = gaffer::job::keyed_job_id(&format!("shared-{x}"));
        assert!(answers[0].contains(&format!("{id}={}", x * x)), "{id}");
    }
    // …and each key ran once.
    assert_eq!(runs.load(Ordering::SeqCst), n as usize);
    engine.shutdown().await.unwrap();
}

/// A refused request is answered, not dead-lettered: the record its
/// refusal commits with the intake's ack is what the client reads, and
/// the intake queue (the engine's own) keeps nothing of it that `gaffer
/// dead` or the dashboard could show as user work. An operator's request
/// the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_answered_and_not_dead_lettered() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let engine = engine(tmp.path(), runs.clone()).await;
    let client = client(tmp.path()).await;
    let h = client.submit(Nobody).await.unwrap();
    match within(h.join()).await {
        Err(Error::Refused { reason, .. }) => assert!(reason.contains("nobody"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let cancel = client.cancel("01NOSUCHJOB0000000000000000").await.unwrap();
    match within(cancel.wait()).await {
        Err(Error::Refused { reason, .. }) => assert!(reason.contains("no job"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let stats = queue.view().stats("jobs-intake").await.unwrap();
    assert_eq!(
        (stats.dead, stats.pending, stats.claimed),
        (0, 0, 0),
        "nothing of the refusals on the intake queue"
    );
    for id in [h.request_id(), cancel.id()] {
        assert!(queue.view().job_record(id).await.unwrap().is_none(), "{id}");
        let key = gaffer::testing::intake::request_result_key(id);
        let record = queue
            .view()
            .kv_get(&key)
            .await
            .unwrap()
            .expect("its record");
        assert!(matches!(
            gaffer::testing::intake::RequestFate::decode(&record),
            gaffer::testing::intake::RequestFate::Refused(_)
        ));
    }
    drop(queue);
    client.close().await;
    engine.shutdown().await.unwrap();
}

/// A store an older engine wrote keeps its refused requests as dead
/// letters of the intake queue, with the reason: they still read as
/// refused, with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_an_older_engine_dead_lettered_still_reads_as_refused() {
    use gaffer::testing::intake::{IntakeOp, RequestProgress, request_progress};
    let tmp = tempfile::tempdir().unwrap();
    // No intake: the request is settled by hand, as an older engine did.
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .flush_interval(Duration::from_millis(1))
        .client_intake(false)
        .register::<Square>()
        .start()
        .await
        .unwrap();
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let id = "01OLDREQUEST00000000000000";
    let op = IntakeOp::Cancel {
        run_id: "01NOSUCHJOB0000000000000000".into(),
    };
    queue
        .enqueue_with(
            "jobs-intake",
            op.encode().unwrap(),
            gaffer::taquba::EnqueueOptions::default().id_override(id.to_string()),
        )
        .await
        .unwrap();
    let claims = queue
        .claim_batch("jobs-intake", 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
    queue
        .dead_letter(&claims[0], "no job `01NOSUCHJOB0000000000000000`")
        .await
        .unwrap();
    assert_eq!(
        request_progress(queue.view(), "jobs", id).await.unwrap(),
        RequestProgress::Refused("no job `01NOSUCHJOB0000000000000000`".into())
    );
    drop(queue);
    engine.shutdown().await.unwrap();
    // Read through a reader of the store, as a client reads it.
    let reader = gaffer::taquba::QueueReader::open(
        std::sync::Arc::new(
            gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(tmp.path())
                .unwrap(),
        ),
        "queue",
    )
    .await
    .unwrap();
    assert!(matches!(
        request_progress(reader.view(), "jobs", id).await.unwrap(),
        RequestProgress::Refused(reason) if reason.contains("no job")
    ));
    reader.close().await.unwrap();
}
