//! Values encrypted at rest (issue #36 §5): with a keyring, no byte of the
//! store holds a user value in the clear; keys rotate without losing a
//! value; a store is refused to a keyring that lacks its key or holds a
//! wrong one; a client's requests are sealed too, and one sealed under a
//! key the engine lacks waits for an engine that has it.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gaffer::bulk::ItemError;
use gaffer::encryption::Keyring;
use gaffer::job::{FailureKind, JobState};
use gaffer::remote::Client;
use gaffer::taquba::{Clock, MockClock};
use gaffer::workflow::Workflow;
use gaffer::{BulkCtx, Engine, EngineBuilder, Error, Job, JobContext, Pipeline, SubmitOptions};
use serde::{Deserialize, Serialize};

use common::{LIMIT, shut_down_cleanly, within};

/// The marker of one kind of value: a failure names the kind that leaked.
fn mark(kind: &str) -> String {
    format!("SECRET-{kind}-MARK")
}

/// Every kind of value the workload writes a marker in.
const KINDS: [&str; 14] = [
    "payload",
    "output",
    "blob",
    "error",
    "retry-error",
    "memo",
    "effect",
    "signal",
    "batch-input",
    "batch-output",
    "batch-error",
    "step-payload",
    "client",
    "inbox",
];

fn keyring(keys: &[(&str, u8)]) -> Keyring {
    let mut ring = Keyring::new();
    for (id, byte) in keys {
        ring = ring.with_key(id, [*byte; 32]).unwrap();
    }
    ring
}

/// A job that answers with its text (and the output marker), or, with
/// `big`, an output over the KV cap (a blob).
#[derive(Serialize, Deserialize)]
struct Echo {
    text: String,
    big: bool,
}

impl Job for Echo {
    const NAME: &'static str = "echo";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<String, Self::Error> {
        let _ = ctx
            .effects()
            .put("user/effect", mark("effect").into_bytes());
        if self.big {
            return Ok(format!("{}{}", mark("blob"), "x".repeat(300 * 1024)));
        }
        Ok(format!("{} {}", self.text, mark("output")))
    }
}

/// Fails its first attempt (after a memo entry) and then for good.
#[derive(Serialize, Deserialize)]
struct Doomed;

impl Job for Doomed {
    const NAME: &'static str = "doomed";
    type Output = String;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<String, Error> {
        if ctx.attempt() == 1 {
            ctx.memo().put("step", mark("memo").into_bytes()).await?;
            return Err(Error::InvalidConfig(mark("retry-error")));
        }
        Err(Error::InvalidConfig(mark("error")))
    }
    fn classify(&self, _error: &Error) -> FailureKind {
        FailureKind::Transient
    }
}

/// Waits for a signal and answers with it.
#[derive(Serialize, Deserialize)]
struct Waiter;

impl Job for Waiter {
    const NAME: &'static str = "waiter";
    type Output = String;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<String, Error> {
        ctx.wait_signal::<String>("go", Duration::from_secs(3600))
            .await
    }
}

struct Shout;

impl Pipeline for Shout {
    const NAME: &'static str = "shout";
    type Input = String;
    type Output = String;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<String>) -> Result<String, ItemError> {
        if ctx.input.ends_with("-3") {
            return Err(ItemError::permanent(mark("batch-error")));
        }
        Ok(format!("{} {}", ctx.input, mark("batch-output")))
    }
}

fn engine_on(dir: &Path, clock: &Arc<MockClock>, keys: &Keyring) -> EngineBuilder {
    common::disk_builder(dir, clock.clone())
        .intake_poll(Duration::from_millis(20))
        .register::<Echo>()
        .register::<Doomed>()
        .register::<Waiter>()
        .pipeline(Shout)
        .encryption(keys.clone())
}

fn client_on(dir: &Path, keys: &Keyring) -> gaffer::remote::ClientBuilder {
    Client::builder()
        .store(gaffer::Store::local_dir(dir))
        .poll_interval(Duration::from_millis(20))
        .encryption(keys.clone())
}

/// A run with a marker in every kind of value, to its end; the engine shut
/// down, then one more client request left in the inbox.
async fn workload(dir: &Path, keys: &Keyring) {
    let clock = common::mock_clock();
    let engine = within(engine_on(dir, &clock, keys).start()).await.unwrap();
    let echo = engine
        .submit(Echo {
            text: mark("payload"),
            big: false,
        })
        .await
        .unwrap();
    assert!(
        within(echo).await.unwrap().contains(&mark("output")),
        "the output reads back"
    );
    let big = engine
        .submit(Echo {
            text: String::new(),
            big: true,
        })
        .await
        .unwrap();
    assert!(within(big).await.unwrap().starts_with(&mark("blob")));
    let doomed = engine
        .submit_with(
            Doomed,
            SubmitOptions {
                max_attempts: Some(2),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let failed = within(doomed.join()).await.unwrap().unwrap_err();
    assert!(failed.message.contains(&mark("error")), "{failed:?}");

    let waiter = engine.submit(Waiter).await.unwrap();
    let id = waiter.id().to_string();
    common::eventually("the waiter waits", LIMIT, async || {
        engine.status(&id).await.unwrap() == JobState::Waiting
    })
    .await;
    engine.signal(&id, "go", &mark("signal")).await.unwrap();
    assert_eq!(within(waiter).await.unwrap(), mark("signal"));

    let inputs: Vec<String> = (0..5)
        .map(|i| format!("{}-{i}", mark("batch-input")))
        .collect();
    let report = within(engine.batch::<Shout>("marked").unwrap().run(inputs))
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.failed), (4, 1), "{report:?}");

    let flow = Workflow::new("marked").step(
        "first",
        Echo {
            text: mark("step-payload"),
            big: false,
        },
    );
    let flow = engine.submit_workflow(flow).await.unwrap();
    within(flow.join()).await.unwrap().unwrap();

    let client = within(client_on(dir, keys).open()).await.unwrap();
    let sent = client
        .submit(Echo {
            text: mark("client"),
            big: false,
        })
        .await
        .unwrap();
    assert!(
        within(sent.join())
            .await
            .unwrap()
            .unwrap()
            .contains(&mark("client"))
    );
    client.close().await;
    shut_down_cleanly(&engine).await;

    // With no engine running, a request stays in the inbox as its object.
    let client = within(client_on(dir, keys).open()).await.unwrap();
    client
        .submit(Echo {
            text: mark("inbox"),
            big: false,
        })
        .await
        .unwrap();
    client.close().await;
}

/// The kinds whose marker some file under `dir` holds, read byte by byte.
fn markers_in_files(dir: &Path) -> Vec<&'static str> {
    fn walk(dir: &Path, found: &mut Vec<Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), found);
            } else {
                found.push(std::fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut files = Vec::new();
    walk(dir, &mut files);
    KINDS
        .into_iter()
        .filter(|kind| {
            let needle = mark(kind).into_bytes();
            files
                .iter()
                .any(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_file_of_an_encrypted_store_holds_a_value_in_the_clear() {
    // Without a keyring every marker is in the store's files as it is: the
    // scan sees each kind of value.
    let plain = tempfile::tempdir().unwrap();
    workload(plain.path(), &Keyring::new()).await;
    assert_eq!(markers_in_files(plain.path()), KINDS.to_vec());

    // With one, none is.
    let sealed = tempfile::tempdir().unwrap();
    workload(sealed.path(), &keyring(&[("k1", 1)])).await;
    assert_eq!(markers_in_files(sealed.path()), Vec::<&str>::new());
}

/// A job that answers with its text.
#[derive(Serialize, Deserialize)]
struct Note {
    text: String,
}

impl Job for Note {
    const NAME: &'static str = "note";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, ctx: JobContext) -> Result<String, Self::Error> {
        let _ = ctx.effects().put(
            format!("notes/{}", self.text),
            self.text.clone().into_bytes(),
        );
        Ok(format!("noted {}", self.text))
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.text.clone())
    }
}

fn notes_on(dir: &Path, clock: &Arc<MockClock>, keys: &Keyring) -> EngineBuilder {
    common::disk_builder(dir, clock.clone())
        .register::<Note>()
        .encryption(keys.clone())
}

fn a_minute_later(clock: &MockClock) -> SubmitOptions {
    SubmitOptions {
        run_at: Some(std::time::UNIX_EPOCH + Duration::from_millis(clock.now_ms() + 60_000)),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_mid_run_loses_nothing_and_a_rekey_retires_the_old_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let k1 = keyring(&[("k1", 1)]);
    let both = keyring(&[("k1", 1), ("k2", 2)]);
    let k2 = keyring(&[("k2", 2)]);

    // Under k1: ten jobs end, ten wait for their time.
    let engine = within(notes_on(dir.path(), &clock, &k1).start())
        .await
        .unwrap();
    for i in 0..10 {
        let h = engine
            .submit(Note {
                text: format!("early-{i}"),
            })
            .await
            .unwrap();
        within(h).await.unwrap();
    }
    for i in 0..10 {
        engine
            .submit_with(
                Note {
                    text: format!("late-{i}"),
                },
                a_minute_later(&clock),
            )
            .await
            .unwrap();
    }
    shut_down_cleanly(&engine).await;

    // Rotated to k2, k1 kept: what k1 sealed reads, and the waiting jobs run.
    let engine = within(notes_on(dir.path(), &clock, &both).start())
        .await
        .unwrap();
    for i in 0..10 {
        let early = engine.keyed_handle::<Note>(&format!("early-{i}"));
        assert_eq!(
            within(early.join()).await.unwrap().unwrap(),
            format!("noted early-{i}")
        );
    }
    // A rekey while jobs sealed under k1 wait in the queue keeps k1 listed.
    let report = within(engine.rekey()).await.unwrap();
    assert_eq!(report.key_id, "k2");
    assert!(report.renewed >= 10, "{report:?}");
    assert_eq!(report.queued_behind, 10, "{report:?}");
    assert!(report.retired.is_empty(), "{report:?}");
    common::a_minute_passes(&engine, &clock).await;
    for i in 0..10 {
        let late = engine.keyed_handle::<Note>(&format!("late-{i}"));
        assert_eq!(
            within(late.join()).await.unwrap().unwrap(),
            format!("noted late-{i}")
        );
    }
    // Nothing left under k1: the second pass retires it.
    let report = within(engine.rekey()).await.unwrap();
    assert_eq!(
        (report.queued_behind, report.retired.clone()),
        (0, vec!["k1".to_string()]),
        "{report:?}"
    );
    shut_down_cleanly(&engine).await;

    // k2 alone opens every value; k1 alone is refused, naming k2.
    let engine = within(notes_on(dir.path(), &clock, &k2).start())
        .await
        .unwrap();
    for key in (0..10).flat_map(|i| [format!("early-{i}"), format!("late-{i}")]) {
        let h = engine.keyed_handle::<Note>(&key);
        assert_eq!(
            within(h.join()).await.unwrap().unwrap(),
            format!("noted {key}")
        );
        // The job's own KV write, sealed under k1 first, reads too.
        let stored =
            within(gaffer::testing::services(&engine).kv_get(format!("notes/{key}").as_bytes()))
                .await
                .unwrap();
        assert_eq!(stored, Some(key.clone().into_bytes()));
    }
    shut_down_cleanly(&engine).await;
    let refused = within(notes_on(dir.path(), &clock, &k1).start()).await;
    assert!(
        matches!(&refused, Err(Error::EncryptionKeyMissing { key_id }) if key_id == "k2"),
        "{:?}",
        refused.as_ref().err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_is_refused_without_its_key_or_with_a_wrong_one_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let k1 = keyring(&[("k1", 1)]);
    let engine = within(notes_on(dir.path(), &clock, &k1).start())
        .await
        .unwrap();
    engine
        .submit_with(
            Note {
                text: "waiting".into(),
            },
            a_minute_later(&clock),
        )
        .await
        .unwrap();
    shut_down_cleanly(&engine).await;

    let none = within(notes_on(dir.path(), &clock, &Keyring::new()).start()).await;
    assert!(
        matches!(&none, Err(Error::EncryptionKeyMissing { key_id }) if key_id == "k1"),
        "{:?}",
        none.as_ref().err()
    );
    let wrong = within(notes_on(dir.path(), &clock, &keyring(&[("k1", 9)])).start()).await;
    assert!(
        matches!(&wrong, Err(Error::EncryptionKeyWrong { key_id }) if key_id == "k1"),
        "{:?}",
        wrong.as_ref().err()
    );
    let other = within(notes_on(dir.path(), &clock, &keyring(&[("k2", 2)])).start()).await;
    assert!(
        matches!(&other, Err(Error::EncryptionKeyMissing { key_id }) if key_id == "k1"),
        "{:?}",
        other.as_ref().err()
    );
    let client = within(client_on(dir.path(), &Keyring::new()).open()).await;
    assert!(
        matches!(&client, Err(Error::EncryptionKeyMissing { key_id }) if key_id == "k1"),
        "{:?}",
        client.as_ref().err()
    );

    // With the key the job is still there, and runs once its time comes.
    let engine = within(notes_on(dir.path(), &clock, &k1).start())
        .await
        .unwrap();
    common::a_minute_passes(&engine, &clock).await;
    let h = engine.keyed_handle::<Note>("waiting");
    assert_eq!(within(h.join()).await.unwrap().unwrap(), "noted waiting");
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_request_sealed_under_a_key_the_engine_lacks_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let k1 = keyring(&[("k1", 1)]);
    let both = keyring(&[("k1", 1), ("k2", 2)]);
    let engine = within(engine_on(dir.path(), &clock, &k1).start())
        .await
        .unwrap();
    // A client already rotated to k2.
    let client = within(client_on(dir.path(), &both).open()).await.unwrap();
    let sent = client
        .submit(Echo {
            text: "ahead".into(),
            big: false,
        })
        .await
        .unwrap();
    // The engine took the request, could not open it, and put it back for
    // later: it is scheduled on the intake queue, not refused, not run.
    let intake = gaffer::testing::intake::intake_queue("jobs");
    common::eventually("the request waits on the intake queue", LIMIT, async || {
        let queue = gaffer::testing::raw_queue(&engine).unwrap();
        queue.view().stats(&intake).await.unwrap().scheduled == 1
    })
    .await;
    let services = gaffer::testing::services(&engine);
    assert_eq!(services.run_record_of(sent.id()).await.unwrap(), None);
    assert_eq!(services.outcome(sent.id()).await.unwrap(), None);
    shut_down_cleanly(&engine).await;

    // An engine with k2 takes it once its wait is over.
    let engine = within(engine_on(dir.path(), &clock, &both).start())
        .await
        .unwrap();
    common::a_minute_passes(&engine, &clock).await;
    assert_eq!(
        within(sent.join()).await.unwrap().unwrap(),
        format!("ahead {}", mark("output"))
    );
    client.close().await;
    shut_down_cleanly(&engine).await;
}

/// The unencrypted fixture opens with a keyring: its plain values read,
/// and what the engine writes from then on is sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_with_a_keyring_runs_on_a_store_written_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let engine: Engine = within(notes_on(dir.path(), &clock, &Keyring::new()).start())
        .await
        .unwrap();
    let h = engine
        .submit(Note {
            text: "plain".into(),
        })
        .await
        .unwrap();
    within(h).await.unwrap();
    engine
        .submit_with(
            Note {
                text: "plain-later".into(),
            },
            a_minute_later(&clock),
        )
        .await
        .unwrap();
    shut_down_cleanly(&engine).await;

    let k1 = keyring(&[("k1", 1)]);
    let engine = within(notes_on(dir.path(), &clock, &k1).start())
        .await
        .unwrap();
    let plain = engine.keyed_handle::<Note>("plain");
    assert_eq!(within(plain.join()).await.unwrap().unwrap(), "noted plain");
    common::a_minute_passes(&engine, &clock).await;
    let later = engine.keyed_handle::<Note>("plain-later");
    assert_eq!(
        within(later.join()).await.unwrap().unwrap(),
        "noted plain-later"
    );
    let new = engine
        .submit(Note {
            text: "sealed".into(),
        })
        .await
        .unwrap();
    let id = new.id().to_string();
    within(new).await.unwrap();
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let stored = gaffer::testing::layout::inspect::outcome_record(queue.view(), &id)
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
}

/// Counts its runs.
#[derive(Serialize, Deserialize)]
struct Counted {
    key: String,
}

static COUNTED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Job for Counted {
    const NAME: &'static str = "counted";
    type Output = String;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<String, Self::Error> {
        COUNTED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(format!("ran {}", self.key))
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// A builder whose queues back off a second before a job given back is
/// claimed again (the test options retry at once), on the mock clock.
fn counted_on(dir: &Path, clock: &Arc<MockClock>, keys: &Keyring) -> EngineBuilder {
    let options = common::test_options(clock.clone()).default_queue_config(
        gaffer::taquba::QueueConfig::default().retry_backoff_base(Duration::from_secs(1)),
    );
    common::disk_builder(dir, clock.clone())
        .open_options(options)
        .register::<Counted>()
        .encryption(keys.clone())
}

fn local(dir: &Path) -> Arc<dyn gaffer::taquba::object_store::ObjectStore> {
    Arc::new(gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_job_whose_payload_does_not_open_is_given_back_never_run() {
    use gaffer::testing::layout::{keys, records, sealed::EncryptionRecord};
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let k1 = keyring(&[("k1", 1)]);
    let both = keyring(&[("k1", 1), ("k2", 2)]);
    // A job sealed under k2, waiting for its time.
    let engine = within(counted_on(dir.path(), &clock, &both).start())
        .await
        .unwrap();
    engine
        .submit_with(
            Counted {
                key: "k2-job".into(),
            },
            a_minute_later(&clock),
        )
        .await
        .unwrap();
    shut_down_cleanly(&engine).await;
    // The store's record made to list k1 alone (by hand: no engine writes
    // that while a value is under k2), so an engine with k1 alone starts.
    let queue = gaffer::taquba::Queue::open_with_options(
        local(dir.path()),
        "queue",
        common::test_options(clock.clone()),
    )
    .await
    .unwrap();
    let record = EncryptionRecord::default()
        .with_newest(&k1)
        .unwrap()
        .unwrap();
    let fx = gaffer::taquba::SettlementEffects::default().kv_put(
        keys::ENCRYPTION_KEY.to_vec(),
        records::encode(&record).unwrap(),
    );
    queue.commit_effects(fx).await.unwrap();
    queue.close().await.unwrap();

    let engine = within(counted_on(dir.path(), &clock, &k1).start())
        .await
        .unwrap();
    let id = gaffer::job::keyed_job_id("k2-job");
    common::a_minute_passes(&engine, &clock).await;
    // Claimed, not opened, given back for later: never run, never failed.
    common::eventually("the job is given back", LIMIT, async || {
        let view = gaffer::testing::raw_queue(&engine).unwrap();
        let stats = view
            .view()
            .stats(&common::job_queue("counted"))
            .await
            .unwrap();
        stats.scheduled == 1 && stats.claimed == 0 && stats.dead == 0
    })
    .await;
    assert_eq!(engine.status(&id).await.unwrap(), JobState::Scheduled);
    assert_eq!(COUNTED_RUNS.load(std::sync::atomic::Ordering::SeqCst), 0);
    shut_down_cleanly(&engine).await;

    // An engine with k2 runs it, once.
    let engine = within(counted_on(dir.path(), &clock, &both).start())
        .await
        .unwrap();
    common::a_minute_passes(&engine, &clock).await;
    let h = engine.keyed_handle::<Counted>("k2-job");
    assert_eq!(within(h.join()).await.unwrap().unwrap(), "ran k2-job");
    assert_eq!(COUNTED_RUNS.load(std::sync::atomic::Ordering::SeqCst), 1);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_open_with_the_engines_key_is_refused() {
    use gaffer::testing::intake::{IntakeOp, send_as};
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let engine = within(engine_on(dir.path(), &clock, &keyring(&[("k1", 1)])).start())
        .await
        .unwrap();
    // Sealed under another key that calls itself k1 (a client given it is
    // refused at its open; this one writes the inbox by hand).
    let sender = gaffer::taquba::InboxSender::new(
        local(dir.path()),
        gaffer::taquba::default_inbox_path("queue"),
    );
    let op = IntakeOp::Pause {
        job_type: "echo".into(),
    };
    let request = "01JREQUESTSEALEDWRONG00000";
    send_as(&sender, "jobs", request, &op, &keyring(&[("k1", 9)]))
        .await
        .unwrap();
    // Refused as every refusal is: acknowledged with its record, which
    // says why; nothing of it left on the intake queue.
    let key = gaffer::testing::intake::request_result_key(request);
    let fate = || async {
        let queue = gaffer::testing::raw_queue(&engine).unwrap();
        queue.view().kv_get(&key).await.unwrap()
    };
    common::eventually("the request is refused", LIMIT, async || {
        fate().await.is_some()
    })
    .await;
    let record = fate().await.unwrap();
    let gaffer::testing::intake::RequestFate::Refused(reason) =
        gaffer::testing::intake::RequestFate::decode(&record)
    else {
        panic!("refused, not applied");
    };
    assert!(
        reason.contains("does not open") && reason.contains("`k1`"),
        "{reason}"
    );
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let intake = gaffer::testing::intake::intake_queue("jobs");
    let stats = queue.view().stats(&intake).await.unwrap();
    assert_eq!((stats.dead, stats.pending, stats.claimed), (0, 0, 0));
    drop(queue);
    let paused = gaffer::testing::services(&engine)
        .kv_get(&gaffer::testing::layout::keys::paused_key("echo"))
        .await
        .unwrap();
    assert_eq!(paused, None, "the request was not applied");
    shut_down_cleanly(&engine).await;
}
