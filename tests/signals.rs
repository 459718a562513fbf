//! Signals: a job waits durably for an outside event (`ctx.wait_signal`),
//! holding no worker, and runs again from the top when it comes (or its
//! timeout does), its memoized steps answering from the memo.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gaffer::job::{JobState, Signalled};
use gaffer::testing::panics::{self, HoldPoint};
use gaffer::{EngineEvent, Error, Job, JobContext};
use serde::{Deserialize, Serialize};

use common::{LIMIT, within};

/// How often the steps of [`Approve`] ran.
#[derive(Default)]
struct Steps {
    /// Runs of the job (each from the top).
    runs: AtomicUsize,
    /// Computations of its memoized step.
    computed: AtomicUsize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Approval {
    by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    cents: u64,
}

/// Prepares an order (memoized), waits for an approval, then a payment.
#[derive(Serialize, Deserialize)]
struct Approve {
    order: u32,
    /// Wait for a payment after the approval.
    pay: bool,
}

impl Job for Approve {
    const NAME: &'static str = "approve";
    type Output = String;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<String, Error> {
        let steps = ctx.state::<Arc<Steps>>();
        steps.runs.fetch_add(1, Ordering::SeqCst);
        let prepared: String = ctx
            .memo()
            .memoized("prepare", || async {
                steps.computed.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Error>(format!("order-{}", self.order))
            })
            .await?;
        let approval = match ctx
            .wait_signal::<Approval>("approval", Duration::from_secs(3600))
            .await
        {
            Ok(a) => a,
            Err(Error::SignalTimeout { .. }) => return Ok(format!("{prepared}: timed out")),
            Err(e) => return Err(e),
        };
        if !self.pay {
            return Ok(format!("{prepared}: approved by {}", approval.by));
        }
        let payment = ctx
            .wait_signal::<Payment>("payment", Duration::from_secs(3600))
            .await?;
        Ok(format!(
            "{prepared}: approved by {}, paid {}",
            approval.by, payment.cents
        ))
    }
}

fn builder(clock: Arc<gaffer::taquba::MockClock>, steps: &Arc<Steps>) -> gaffer::EngineBuilder {
    common::memory_builder(clock)
        .register::<Approve>()
        .state(steps.clone())
}

/// Wait until the job's state is `want`.
async fn reaches(engine: &gaffer::Engine, id: &str, want: JobState) {
    common::eventually(&format!("`{id}` is {want:?}"), LIMIT, async || {
        engine.status(id).await.ok() == Some(want)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_job_waits_for_its_signal_without_a_worker_and_runs_on_from_its_memo() {
    let steps = Arc::new(Steps::default());
    let engine = builder(common::mock_clock(), &steps).start().await.unwrap();
    let mut events = engine.subscribe();
    let handle = engine
        .submit(Approve {
            order: 7,
            pay: false,
        })
        .await
        .unwrap();
    let id = handle.id().to_string();
    common::wait_event(
        &mut events,
        LIMIT,
        |e| matches!(e, EngineEvent::JobWaiting { signal, .. } if signal == "approval"),
    )
    .await;
    reaches(&engine, &id, JobState::Waiting).await;
    // Waiting holds no worker and no claim.
    assert_eq!(common::running(&engine, Approve::NAME).await, 0);
    assert_eq!(handle.outcome().await.unwrap(), None);

    let sent = engine
        .signal(&id, "approval", &Approval { by: "ada".into() })
        .await
        .unwrap();
    assert_eq!(sent, Signalled::Delivered);
    assert_eq!(
        within(handle).await.unwrap(),
        "order-7: approved by ada".to_string()
    );
    // Twice from the top; the memoized step once; no attempt spent.
    assert_eq!(steps.runs.load(Ordering::SeqCst), 2);
    assert_eq!(steps.computed.load(Ordering::SeqCst), 1);
    // The job's signals went with it.
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let key = gaffer::testing::layout::keys::signal_key(&id, "approval");
    assert_eq!(queue.view().kv_get(&key).await.unwrap(), None);
    drop(queue);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_signal_sent_before_the_wait_is_kept_and_the_wait_answers_at_once() {
    let steps = Arc::new(Steps::default());
    let clock = common::mock_clock();
    let engine = builder(clock.clone(), &steps).start().await.unwrap();
    // Scheduled for later, so the signal certainly comes first.
    let handle = engine
        .submit_with(
            Approve {
                order: 1,
                pay: false,
            },
            common::a_minute_later(),
        )
        .await
        .unwrap();
    let id = handle.id().to_string();
    let sent = engine
        .signal(&id, "approval", &Approval { by: "bo".into() })
        .await
        .unwrap();
    assert_eq!(sent, Signalled::Held);
    // The first signal of a name stands.
    let again = engine
        .signal(&id, "approval", &Approval { by: "cy".into() })
        .await
        .unwrap();
    assert_eq!(again, Signalled::AlreadySent);
    common::a_minute_passes(&engine, &clock).await;
    assert_eq!(within(handle).await.unwrap(), "order-1: approved by bo");
    // It never waited: one run.
    assert_eq!(steps.runs.load(Ordering::SeqCst), 1);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_signal_that_comes_while_the_wait_commits_is_not_lost() {
    let steps = Arc::new(Steps::default());
    let engine = builder(common::mock_clock(), &steps).start().await.unwrap();
    let queue = common::job_queue(Approve::NAME);
    // The job finds no signal and ends its attempt; its settlement stops
    // just before it commits the wait.
    let hold = panics::hold_next(HoldPoint::BeforeWaitCommit, &queue);
    let handle = engine
        .submit(Approve {
            order: 3,
            pay: false,
        })
        .await
        .unwrap();
    let id = handle.id().to_string();
    within(hold.reached()).await;
    // The signal finds the job not waiting (its wait is not committed):
    // taquba's signal changes nothing, and gaffer keeps it.
    let sent = engine
        .signal(&id, "approval", &Approval { by: "di".into() })
        .await
        .unwrap();
    assert_eq!(sent, Signalled::Held);
    hold.release();
    // The wait commits, finds the signal kept, and the job runs on at once
    // (not at the wait's deadline, an hour away on a clock nobody moves).
    assert_eq!(within(handle).await.unwrap(), "order-3: approved by di");
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn a_signal_kept_when_the_engine_died_after_the_wait_committed_is_delivered_at_the_next_start()
 {
    let steps = Arc::new(Steps::default());
    let store = common::shared_store();
    let clock = common::mock_clock();
    let start = || {
        common::shared_memory_builder(store.clone(), clock.clone())
            .register::<Approve>()
            .state(steps.clone())
            .start()
    };
    let first = start().await.unwrap();
    let queue = common::job_queue(Approve::NAME);
    let before = panics::hold_next(HoldPoint::BeforeWaitCommit, &queue);
    let after = panics::hold_next(HoldPoint::AfterWaitCommit, &queue);
    let id = first
        .submit(Approve {
            order: 4,
            pay: false,
        })
        .await
        .unwrap()
        .id()
        .to_string();
    within(before.reached()).await;
    let sent = first
        .signal(&id, "approval", &Approval { by: "ed".into() })
        .await
        .unwrap();
    assert_eq!(sent, Signalled::Held);
    before.release();
    // The wait is committed; the engine "dies" before it reads the job's
    // signals again: a second engine takes the store over (the first is
    // fenced), then the first one's settlement goes on and fails.
    within(after.reached()).await;
    let second = start().await.unwrap();
    after.release();
    let handle = second.handle::<Approve>(&id).unwrap();
    assert_eq!(
        within(handle.join()).await.unwrap().unwrap(),
        "order-4: approved by ed"
    );
    common::shut_down_cleanly(&second).await;
    let _ = first.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_wait_times_out_at_its_deadline_and_survives_a_restart() {
    let steps = Arc::new(Steps::default());
    let store = common::shared_store();
    let clock = common::mock_clock();
    let start = || {
        common::shared_memory_builder(store.clone(), clock.clone())
            .register::<Approve>()
            .state(steps.clone())
            .start()
    };
    let first = start().await.unwrap();
    let opened = (std::time::SystemTime::now(), tokio::time::Instant::now());
    let id = first
        .submit(Approve {
            order: 5,
            pay: false,
        })
        .await
        .unwrap()
        .id()
        .to_string();
    reaches(&first, &id, JobState::Waiting).await;
    first.shutdown().await.unwrap();
    common::let_the_store_clock_catch_up(opened);
    let second = start().await.unwrap();
    reaches(&second, &id, JobState::Waiting).await;
    // The deadline passes (the queue's clock) and the job runs again.
    clock.advance(Duration::from_secs(3601));
    gaffer::testing::raw_queue(&second)
        .unwrap()
        .promote_scheduled_now()
        .await
        .unwrap();
    let handle = second.handle::<Approve>(&id).unwrap();
    assert_eq!(
        within(handle.join()).await.unwrap().unwrap(),
        "order-5: timed out"
    );
    common::shut_down_cleanly(&second).await;
}

#[tokio::test(start_paused = true)]
async fn a_job_waits_for_one_signal_then_another() {
    let steps = Arc::new(Steps::default());
    let engine = builder(common::mock_clock(), &steps).start().await.unwrap();
    let handle = engine
        .submit(Approve {
            order: 8,
            pay: true,
        })
        .await
        .unwrap();
    let id = handle.id().to_string();
    reaches(&engine, &id, JobState::Waiting).await;
    // While it waits for the approval, a payment is refused, naming why.
    let early = engine
        .signal(&id, "payment", &Payment { cents: 100 })
        .await
        .unwrap_err();
    assert!(
        matches!(&early, Error::WaitingForAnotherSignal { waiting, sent, .. } if waiting == "approval" && sent == "payment"),
        "{early:?}"
    );
    engine
        .signal(&id, "approval", &Approval { by: "fay".into() })
        .await
        .unwrap();
    common::eventually("it waits for the payment", LIMIT, async || {
        steps.runs.load(Ordering::SeqCst) == 2
            && engine.status(&id).await.ok() == Some(JobState::Waiting)
    })
    .await;
    engine
        .signal(&id, "payment", &Payment { cents: 4200 })
        .await
        .unwrap();
    assert_eq!(
        within(handle).await.unwrap(),
        "order-8: approved by fay, paid 4200"
    );
    assert_eq!(steps.runs.load(Ordering::SeqCst), 3);
    assert_eq!(steps.computed.load(Ordering::SeqCst), 1);
    common::shut_down_cleanly(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn signals_to_no_job_an_ended_job_or_with_a_bad_name_are_refused_and_a_waiting_job_cancels() {
    let steps = Arc::new(Steps::default());
    let engine = builder(common::mock_clock(), &steps).start().await.unwrap();
    let unknown = engine
        .signal(
            "01JNOSUCHJOB0000000000000",
            "approval",
            &Approval { by: "x".into() },
        )
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::JobNotFound(_)), "{unknown:?}");
    let handle = engine
        .submit(Approve {
            order: 9,
            pay: false,
        })
        .await
        .unwrap();
    let id = handle.id().to_string();
    let bad = engine
        .signal(&id, "no spaces", &Approval { by: "x".into() })
        .await
        .unwrap_err();
    assert!(matches!(bad, Error::InvalidSignalName(_)), "{bad:?}");
    reaches(&engine, &id, JobState::Waiting).await;
    // A waiting job cancels like a scheduled one.
    engine.cancel(&id).await.unwrap();
    let ended = within(handle).await.unwrap_err();
    assert!(ended.to_string().contains("cancelled"), "{ended}");
    let late = engine
        .signal(&id, "approval", &Approval { by: "x".into() })
        .await
        .unwrap_err();
    assert!(matches!(late, Error::JobEnded(_)), "{late:?}");
    common::shut_down_cleanly(&engine).await;
}

/// The engine process of the kill test: submits a job that waits for its
/// approval, writes its id to `waiting` once it waits, then waits to be
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by a_waiting_job_survives_a_kill_and_its_signal_runs_it_on_the_next_engine as a child process"]
async fn signals_engine_child() {
    let Ok(dir) = std::env::var("GAFFER_SIG_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir.join("store")))
        .flush_interval(Duration::from_millis(1))
        .register::<Approve>()
        .state(Arc::new(Steps::default()))
        .start()
        .await
        .unwrap();
    let id = engine
        .submit(Approve {
            order: 11,
            pay: false,
        })
        .await
        .unwrap()
        .id()
        .to_string();
    common::eventually("the job waits", LIMIT, async || {
        engine.status(&id).await.ok() == Some(JobState::Waiting)
    })
    .await;
    // Whole: the parent reads it, and kills this process, once it exists.
    common::write_whole(&dir.join("waiting"), &id);
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_survives_a_kill_and_its_signal_runs_it_on_the_next_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = common::spawn_test_child("signals_engine_child", "GAFFER_SIG_DIR", tmp.path());
    let waiting = tmp.path().join("waiting");
    common::wait_for_child_file(tmp.path(), &waiting, "the job's wait").await;
    child.kill().unwrap();
    child.wait().unwrap();
    let id = std::fs::read_to_string(&waiting).unwrap();

    let steps = Arc::new(Steps::default());
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(tmp.path().join("store")))
        .flush_interval(Duration::from_millis(1))
        .register::<Approve>()
        .state(steps.clone())
        .start()
        .await
        .unwrap();
    // Still waiting after the kill: the wait spent no attempt and runs
    // nothing until its signal comes.
    assert_eq!(engine.status(&id).await.unwrap(), JobState::Waiting);
    let sent = engine
        .signal(&id, "approval", &Approval { by: "gus".into() })
        .await
        .unwrap();
    assert_eq!(sent, Signalled::Delivered);
    let handle = engine.handle::<Approve>(&id).unwrap();
    assert_eq!(
        within(handle.join()).await.unwrap().unwrap(),
        "order-11: approved by gus"
    );
    // One run on this engine, from its memo (the step ran before the kill).
    assert_eq!(steps.runs.load(Ordering::SeqCst), 1);
    assert_eq!(steps.computed.load(Ordering::SeqCst), 0);
    assert_eq!(
        handle.join().await.unwrap().unwrap(),
        "order-11: approved by gus"
    );
    engine.shutdown().await.unwrap();
}

/// A signal sent from another process (`Client::signal`, through the
/// store's inbox) runs a waiting job on, and its request records what it
/// came to; one to an ended job is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_signals_a_waiting_job_through_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let steps = Arc::new(Steps::default());
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Approve>()
        .state(steps.clone())
        .start()
        .await
        .unwrap();
    let client = gaffer::remote::Client::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .unwrap();
    let handle = engine
        .submit(Approve {
            order: 3,
            pay: false,
        })
        .await
        .unwrap();
    let id = handle.id().to_string();
    reaches(&engine, &id, JobState::Waiting).await;

    let request = client
        .signal(&id, "approval", &Approval { by: "di".into() })
        .await
        .unwrap();
    let fate = within(request.wait()).await.unwrap();
    assert!(fate.contains("delivered"), "{fate}");
    assert_eq!(
        within(handle).await.unwrap(),
        "order-3: approved by di".to_string()
    );

    // The job ended: a second signal is refused, and says why.
    let request = client
        .signal(&id, "approval", &Approval { by: "ed".into() })
        .await
        .unwrap();
    match within(request.wait()).await {
        Err(Error::Refused { reason, .. }) => assert!(reason.contains("ended"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    common::shut_down_cleanly(&engine).await;
}

// ---- Racing senders: one is told its signal stands. ----

/// Waits for `go` and answers its payload.
#[derive(Serialize, Deserialize)]
struct AwaitGo;

impl Job for AwaitGo {
    const NAME: &'static str = "await-go";
    type Output = String;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<String, Error> {
        ctx.wait_signal("go", Duration::from_secs(3600)).await
    }
}

/// Jobs in each race.
const RACERS: usize = 60;

fn racing_engine(dir: &std::path::Path) -> gaffer::EngineBuilder {
    gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(10))
        .register_with::<AwaitGo>(gaffer::JobOptions {
            concurrency: Some(8),
            ..Default::default()
        })
}

async fn racing_client(dir: &std::path::Path) -> gaffer::remote::Client {
    gaffer::remote::Client::builder()
        .store(gaffer::Store::local_dir(dir))
        .poll_interval(Duration::from_millis(10))
        .open()
        .await
        .unwrap()
}

/// Whether a client request's fate says its signal stands: a refusal
/// because the job already ended (another sender's signal ran it to its
/// end first) does not.
fn client_won(fate: gaffer::Result<String>) -> bool {
    match fate {
        Ok(fate) => {
            assert!(
                fate.contains("delivered") || fate.contains("kept") || fate.contains("already had"),
                "a signal's fate: {fate}"
            );
            !fate.contains("already had")
        }
        Err(Error::Refused { reason, .. }) if reason.contains("ended") => false,
        Err(e) => panic!("a signal's request failed: {e:?}"),
    }
}

/// Whether `engine.signal` says its signal stands (as [`client_won`]).
async fn engine_won(engine: &gaffer::Engine, id: &str, payload: &str) -> bool {
    match engine.signal(id, "go", &payload.to_string()).await {
        Ok(s) => s != Signalled::AlreadySent,
        Err(Error::JobEnded(_)) => false,
        Err(e) => panic!("signalling `{id}` failed: {e:?}"),
    }
}

/// Each job's senders, by payload, and whether each was told its signal
/// stands: exactly one was, and the job read its payload.
async fn one_winner_each(engine: &gaffer::Engine, told: Vec<(String, Vec<(String, bool)>)>) {
    for (id, answers) in told {
        let winners: Vec<&String> = answers
            .iter()
            .filter(|(_, won)| *won)
            .map(|(p, _)| p)
            .collect();
        assert_eq!(winners.len(), 1, "`{id}`: {answers:?}");
        let handle = engine.handle::<AwaitGo>(&id).unwrap();
        let read = within(handle.join()).await.unwrap().unwrap();
        assert_eq!(&read, winners[0], "`{id}` read the winner's payload");
    }
}

/// Two senders in the engine and one `Client` race for each job, some
/// jobs waiting when the signals come and some not yet started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_racing_senders_exactly_one_is_told_its_signal_stands() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = racing_engine(tmp.path()).start().await.unwrap();
    let client = racing_client(tmp.path()).await;
    // A third waits when the signals come, a third is sent them as it
    // starts (submitted just before), a third while its type is paused
    // (queued: the signal is kept for its wait) and runs after the race.
    let mut ids = Vec::new();
    for _ in 0..RACERS / 3 {
        ids.push(engine.submit(AwaitGo).await.unwrap().id().to_string());
    }
    for id in &ids {
        reaches(&engine, id, JobState::Waiting).await;
    }
    for _ in 0..RACERS / 3 {
        ids.push(engine.submit(AwaitGo).await.unwrap().id().to_string());
    }
    engine.pause(AwaitGo::NAME).await.unwrap();
    for _ in 0..RACERS / 3 {
        ids.push(engine.submit(AwaitGo).await.unwrap().id().to_string());
    }

    let races = ids.iter().map(|id| {
        let (engine, client, id) = (engine.clone(), client.clone(), id.clone());
        async move {
            let send = |who: &'static str| {
                let engine = engine.clone();
                let id = id.clone();
                async move { (who.to_string(), engine_won(&engine, &id, who).await) }
            };
            let by_client = async {
                let request = client
                    .signal(&id, "go", &"client".to_string())
                    .await
                    .unwrap();
                (
                    "client".to_string(),
                    client_won(within(request.wait()).await),
                )
            };
            let (a, b, c) = tokio::join!(send("engine-a"), send("engine-b"), by_client);
            (id, vec![a, b, c])
        }
    });
    let told = futures_util::future::join_all(races).await;
    engine.resume(AwaitGo::NAME).await.unwrap();
    one_winner_each(&engine, told).await;
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by racing_senders_in_two_processes_tell_one_its_signal_stands as a child process"]
async fn signals_sender_child() {
    let Ok(dir) = std::env::var("GAFFER_SIGNAL_SENDER_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    let ids = std::fs::read_to_string(dir.join("ids")).unwrap();
    let client = racing_client(&dir.join("store")).await;
    let sends = ids.lines().map(|id| {
        let client = client.clone();
        async move {
            let request = client.signal(id, "go", &"child".to_string()).await.unwrap();
            format!("{id} {}", client_won(within(request.wait()).await))
        }
    });
    let lines = futures_util::future::join_all(sends).await;
    std::fs::write(dir.join("told.tmp"), lines.join("\n")).unwrap();
    std::fs::rename(dir.join("told.tmp"), dir.join("told")).unwrap();
}

/// A sender in another process (a `Client` in a child) races two senders
/// in the engine's process for each waiting job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_senders_in_two_processes_tell_one_its_signal_stands() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = racing_engine(&tmp.path().join("store"))
        .start()
        .await
        .unwrap();
    let mut ids = Vec::new();
    for _ in 0..RACERS {
        ids.push(engine.submit(AwaitGo).await.unwrap().id().to_string());
    }
    for id in &ids {
        reaches(&engine, id, JobState::Waiting).await;
    }
    std::fs::write(tmp.path().join("ids"), ids.join("\n")).unwrap();
    let mut children = common::Children::default();
    children.0.insert(
        "sender".into(),
        common::spawn_test_child(
            "signals_sender_child",
            "GAFFER_SIGNAL_SENDER_DIR",
            tmp.path(),
        ),
    );
    let sends = ids.iter().map(|id| {
        let (engine, id) = (engine.clone(), id.clone());
        async move {
            let (a, b) = tokio::join!(
                engine_won(&engine, &id, "engine-a"),
                engine_won(&engine, &id, "engine-b")
            );
            (id, vec![("engine-a".into(), a), ("engine-b".into(), b)])
        }
    });
    let mut told = futures_util::future::join_all(sends).await;
    let path = tmp.path().join("told");
    common::wait_for_child_file(tmp.path(), &path, "the child's signals").await;
    let by_child: std::collections::HashMap<String, bool> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| {
            let (id, won) = l.split_once(' ').unwrap();
            (id.to_string(), won == "true")
        })
        .collect();
    for (id, answers) in &mut told {
        answers.push(("child".into(), by_child[id.as_str()]));
    }
    one_winner_each(&engine, told).await;
    engine.shutdown().await.unwrap();
}

/// A wait's deadline is kept within a scheduler pass: the queue's scheduler
/// runs at the flush interval (at least 10 ms), not every second, so a
/// wait that timed out runs again within a few passes of its deadline.
#[tokio::test(start_paused = true)]
async fn a_wait_that_times_out_runs_again_within_a_scheduler_pass_of_its_deadline() {
    let steps = Arc::new(Steps::default());
    let clock = common::mock_clock();
    let engine = builder(clock.clone(), &steps).start().await.unwrap();
    let handle = engine
        .submit(Approve {
            order: 9,
            pay: false,
        })
        .await
        .unwrap();
    let id = handle.id().to_string();
    reaches(&engine, &id, JobState::Waiting).await;
    // The deadline passes on the queue's clock; nobody promotes the job by
    // hand: the engine's scheduler does, within 100 ms of tokio time (ten
    // passes at the in-memory store's 1 ms flush, clamped to 10 ms; taquba's
    // own default of a second would not).
    clock.advance(Duration::from_secs(3601));
    let ended = tokio::time::timeout(Duration::from_millis(100), handle.join()).await;
    assert_eq!(
        ended
            .expect("ran again within 100 ms of its deadline")
            .unwrap(),
        Ok("order-9: timed out".to_string())
    );
    common::shut_down_cleanly(&engine).await;
}
