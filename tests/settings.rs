//! Engine settings: every setting has its builder setter and reaches the
//! started engine, and setters and `settings` compose by "the last call
//! wins".

mod common;

use std::time::Duration;

use gaffer::{Job, JobContext, Settings, job::MemoWrites};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

impl Job for Add {
    const NAME: &'static str = "add";
    type Output = i64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<i64, Self::Error> {
        Ok(self.a + self.b)
    }
}

/// Settings with every field off its default (the literal names every field,
/// so a new setting fails to compile here until it gets a setter below).
fn every_setting_changed() -> Settings {
    Settings {
        queue_name: "q-jobs".into(),
        bulk_queue_name: "q-bulk".into(),
        batch_window: 7,
        max_concurrent_jobs: 3,
        poll_interval: Duration::from_millis(30),
        forget_drained_after: Duration::from_secs(7),
        retention: Some(Duration::from_secs(90)),
        blob_prefix: "blobs-elsewhere".into(),
        settlement_window: 5,
        restart_backoff_base: Duration::from_millis(2),
        restart_backoff_max: Duration::from_millis(40),
        shutdown_grace: Some(Duration::from_secs(4)),
        max_restarts: 11,
        restart_window: Duration::from_secs(12),
        max_interruptions: 6,
        max_snoozes: 17,
        debounce_max_delay: Duration::from_secs(18),
        interruption_window: Duration::from_secs(13),
        interruption_memory: Duration::from_secs(14),
        memo_writes: MemoWrites::Immediate,
        client_intake: false,
        intake_poll: Duration::from_millis(300),
        request_retention: Duration::from_secs(15),
        memory_budget: Some(3 << 30),
        encryption: gaffer::encryption::Keyring::new()
            .with_key("settings", [5; 32])
            .unwrap(),
    }
}

#[tokio::test(start_paused = true)]
async fn every_builder_setter_reaches_the_engines_settings() {
    let want = every_setting_changed();
    let default = Settings::default();
    // Each field differs from its default, so a setter that did nothing shows.
    for (field, same) in [
        ("queue_name", want.queue_name == default.queue_name),
        (
            "bulk_queue_name",
            want.bulk_queue_name == default.bulk_queue_name,
        ),
        ("batch_window", want.batch_window == default.batch_window),
        (
            "max_concurrent_jobs",
            want.max_concurrent_jobs == default.max_concurrent_jobs,
        ),
        ("poll_interval", want.poll_interval == default.poll_interval),
        (
            "forget_drained_after",
            want.forget_drained_after == default.forget_drained_after,
        ),
        ("retention", want.retention == default.retention),
        ("blob_prefix", want.blob_prefix == default.blob_prefix),
        (
            "settlement_window",
            want.settlement_window == default.settlement_window,
        ),
        (
            "restart_backoff_base",
            want.restart_backoff_base == default.restart_backoff_base,
        ),
        (
            "restart_backoff_max",
            want.restart_backoff_max == default.restart_backoff_max,
        ),
        (
            "shutdown_grace",
            want.shutdown_grace == default.shutdown_grace,
        ),
        ("max_restarts", want.max_restarts == default.max_restarts),
        (
            "restart_window",
            want.restart_window == default.restart_window,
        ),
        (
            "max_interruptions",
            want.max_interruptions == default.max_interruptions,
        ),
        ("max_snoozes", want.max_snoozes == default.max_snoozes),
        (
            "debounce_max_delay",
            want.debounce_max_delay == default.debounce_max_delay,
        ),
        (
            "interruption_window",
            want.interruption_window == default.interruption_window,
        ),
        (
            "interruption_memory",
            want.interruption_memory == default.interruption_memory,
        ),
        ("memo_writes", want.memo_writes == default.memo_writes),
        ("client_intake", want.client_intake == default.client_intake),
        ("intake_poll", want.intake_poll == default.intake_poll),
        (
            "request_retention",
            want.request_retention == default.request_retention,
        ),
        ("memory_budget", want.memory_budget == default.memory_budget),
        ("encryption", want.encryption == default.encryption),
    ] {
        assert!(!same, "the test value of `{field}` is its default");
    }

    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::in_memory())
        .open_options(common::test_options(common::mock_clock()))
        .queue_name(want.queue_name.clone())
        .bulk_queue_name(want.bulk_queue_name.clone())
        .batch_window(want.batch_window)
        .max_concurrent_jobs(want.max_concurrent_jobs)
        .poll_interval(want.poll_interval)
        .forget_drained_after(want.forget_drained_after)
        .retention(Duration::from_secs(90))
        .blob_prefix(want.blob_prefix.clone())
        .settlement_window(want.settlement_window)
        .restart_backoff_base(want.restart_backoff_base)
        .restart_backoff_max(want.restart_backoff_max)
        .shutdown_grace(Duration::from_secs(4))
        .max_restarts(want.max_restarts)
        .restart_window(want.restart_window)
        .max_interruptions(want.max_interruptions)
        .max_snoozes(want.max_snoozes)
        .debounce_max_delay(want.debounce_max_delay)
        .interruption_window(want.interruption_window)
        .interruption_memory(want.interruption_memory)
        .memo_writes(want.memo_writes)
        .client_intake(want.client_intake)
        .intake_poll(want.intake_poll)
        .request_retention(want.request_retention)
        .memory_budget(want.memory_budget)
        .encryption(want.encryption.clone())
        .register::<Add>()
        .start()
        .await
        .unwrap();
    assert_eq!(engine.settings(), &want);
    // The settings are in force: the job type's queue has the new prefix.
    let handle = engine.submit(Add { a: 1, b: 1 }).await.unwrap();
    assert_eq!(handle.await.unwrap(), 2);
    let queues = gaffer::testing::raw_queue(&engine)
        .unwrap()
        .view()
        .list_queues()
        .await
        .unwrap();
    assert!(queues.iter().any(|q| q == "q-jobs.add"), "{queues:?}");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn settings_replace_what_was_set_before_and_a_setter_after_changes_its_one_field() {
    let base = Settings {
        max_concurrent_jobs: 4,
        batch_window: 99,
        ..Settings::default()
    };
    let retention = Duration::from_secs(42);
    // The last call wins: `settings` replaces the setters called before it…
    let before = gaffer::Engine::builder()
        .retention(retention)
        .max_restarts(7)
        .settings(base.clone())
        .effective_settings();
    assert_eq!(before, base);
    // …and a setter called after it changes its one field.
    let after = gaffer::Engine::builder()
        .settings(base.clone())
        .retention(retention)
        .max_restarts(7)
        .effective_settings();
    assert_eq!(
        after,
        Settings {
            retention: Some(retention),
            max_restarts: 7,
            ..base
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_started_engine_runs_with_the_last_call_of_each_setting() {
    let engine = common::memory_builder(common::mock_clock())
        .settings(Settings {
            max_concurrent_jobs: 2,
            ..Settings::default()
        })
        .retention(Duration::from_secs(42))
        .register::<Add>()
        .start()
        .await
        .unwrap();
    let settings = engine.settings().clone();
    assert_eq!(settings.retention, Some(Duration::from_secs(42)));
    assert_eq!(settings.max_concurrent_jobs, 2);
    // memory_builder's poll interval (a setter before `settings`) was
    // replaced by the settings' own.
    assert_eq!(settings.poll_interval, Settings::default().poll_interval);
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_zero_forget_window_is_refused_with_what_to_do() {
    let Err(err) = gaffer::Engine::builder()
        .store(gaffer::Store::in_memory())
        .forget_drained_after(Duration::ZERO)
        .start()
        .await
    else {
        panic!("a zero window is refused");
    };
    assert!(
        err.to_string()
            .contains("forget_drained_after must be greater than zero"),
        "{err}"
    );
}
