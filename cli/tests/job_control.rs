//! `gaffer job` on jobs that pause their runs: a durable sleep shows until
//! when, a snooze how often.

mod common;

use std::time::Duration;

use common::{LIMIT, json, ok};
use gaffer::Engine;

const HOUR: Duration = Duration::from_secs(3600);
use gaffer_testkit::jobs::{Greet, Nap, Snoozy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_shows_a_sleeping_job_until_when_and_a_snoozed_one_how_often() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Nap>()
        .register::<Snoozy>()
        .register::<Greet>()
        .start()
        .await
        .unwrap();
    let nap = engine.submit(Nap).await.unwrap();
    let snoozy = engine.submit(Snoozy).await.unwrap();
    common::eventually("the job shows as asleep", LIMIT, async || {
        json(dir, &["job", nap.id()])["sleeping"] == true
    })
    .await;
    let shown = json(dir, &["job", nap.id()]);
    assert_eq!(shown["state"], "scheduled", "{shown}");
    let until = shown["run_at_ms"].as_u64().expect("its end");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        until > now + 3000 * 1000 && until <= now + 3600 * 1000,
        "{shown}"
    );
    let text = ok(dir, &["job", nap.id()]);
    assert!(text.contains("wakes at"), "{text}");

    common::eventually("the job shows as snoozed", LIMIT, async || {
        json(dir, &["job", snoozy.id()])["snoozes"] == 1
    })
    .await;
    let shown = json(dir, &["job", snoozy.id()]);
    assert_eq!(shown["state"], "scheduled", "{shown}");
    assert!(shown.get("sleeping").is_none(), "{shown}");
    let text = ok(dir, &["job", snoozy.id()]);
    assert!(text.contains("1 time"), "{text}");

    // A debounced run: its key, and its open burst's submissions.
    let hourly = || gaffer::SubmitOptions::default().debounce("greet-ada", HOUR);
    let greet = || Greet { name: "ada".into() };
    let first = engine.submit_with(greet(), hourly()).await.unwrap();
    let second = engine.submit_with(greet(), hourly()).await.unwrap();
    assert_eq!(first.id(), second.id());
    common::eventually("the job shows its burst", LIMIT, async || {
        json(dir, &["job", first.id()])["debounced_submits"] == 2
    })
    .await;
    let shown = json(dir, &["job", first.id()]);
    assert_eq!(shown["state"], "scheduled", "{shown}");
    assert_eq!(shown["debounced"], "greet-ada", "{shown}");
    assert_eq!(shown["debounced_submits"], 2, "{shown}");
    let text = ok(dir, &["job", first.id()]);
    assert!(
        text.contains("the key `greet-ada` (its burst open: 2 submissions so far)"),
        "{text}"
    );
    engine.shutdown().await.unwrap();
}
