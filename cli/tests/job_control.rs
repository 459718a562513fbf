//! `gaffer job` on jobs that pause their runs: a durable sleep shows until
//! when, a snooze how often.

mod common;

use std::time::Duration;

use common::{LIMIT, json, ok};
use gaffer::Engine;
use gaffer_testkit::jobs::{Nap, Snoozy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_shows_a_sleeping_job_until_when_and_a_snoozed_one_how_often() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Nap>()
        .register::<Snoozy>()
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
    engine.shutdown().await.unwrap();
}
