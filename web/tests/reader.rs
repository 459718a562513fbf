//! The dashboard's reader (`web/src/reader.rs`): closed after
//! `IDLE_CLOSE` without a page and opened again by the next one with the
//! store's current data, rebased when old while pages go on answering, and
//! a failed reopen shown as the page's error naming the store; a rebase
//! whose open failed is tried again `REBASE_AFTER` later, not at once.
//!
//! The dashboard runs under paused tokio time (its idle close and its
//! rebase are timers); the engine that writes the store runs on a thread
//! and runtime of its own, started for each batch of jobs and shut down
//! before the test goes on, so nothing writes while a test waits.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::{Fix, LIMIT, Ping, page as get, within};
use gaffer_web::{IDLE_CLOSE, REBASE_AFTER, WebConfig};

/// Run `n` ping jobs to their end with an engine on `dir` (on a thread of
/// its own, real time), shut it down; their ids.
fn pings(dir: &Path, n: u32) -> Vec<String> {
    let dir = dir.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        rt.block_on(async {
            let fix = Arc::new(Fix::default());
            let engine = common::engine(&dir, &fix, Duration::from_millis(1)).await;
            let mut ids = Vec::new();
            for i in 0..n {
                let h = engine.submit(Ping { n: i }).await.expect("submitted");
                ids.push(h.id().to_string());
                within(h.join()).await.expect("joined").expect("ran");
            }
            engine.shutdown().await.expect("shut down");
            ids
        })
    })
    .join()
    .expect("the engine's thread")
}

#[tokio::test(start_paused = true)]
async fn an_idle_reader_closes_and_the_next_page_reopens_it_with_current_data() {
    let dir = tempfile::tempdir().unwrap();
    let first = pings(dir.path(), 1);
    let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
        .await
        .expect("the dashboard opens the store");
    let mut state = config.reader_state(0).expect("one store");
    let app = gaffer_web::router(config);
    assert_eq!(
        get(&app, &format!("/jobs/{}", first[0])).await.0,
        StatusCode::OK
    );

    // No page for IDLE_CLOSE: the reader closes (and follows nothing).
    let asked = tokio::time::Instant::now();
    within(state.wait_for(|s| !s.open && s.idle_closes == 1))
        .await
        .expect("the state");
    assert!(
        asked.elapsed() >= IDLE_CLOSE,
        "closed after {:?}",
        asked.elapsed()
    );

    // A job run while it was closed; the next page opens a new reader,
    // which sees it.
    let second = pings(dir.path(), 1);
    let (status, body) = get(&app, &format!("/jobs/{}", second[0])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let now = *state.borrow();
    assert!(now.open);
    assert_eq!((now.opens, now.idle_closes), (2, 1));
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);

    // Pages within IDLE_CLOSE of each other keep it open.
    for _ in 0..4 {
        tokio::time::advance(IDLE_CLOSE / 2).await;
        assert_eq!(get(&app, "/jobs").await.0, StatusCode::OK);
    }
    assert_eq!(state.borrow().idle_closes, 1);
}

#[tokio::test(start_paused = true)]
async fn an_old_reader_is_rebased_while_pages_answer_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = pings(dir.path(), 1);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
        .await
        .expect("the dashboard opens the store")
        .hold_rebases(gate.clone());
    let mut state = config.reader_state(0).expect("one store");
    let app = gaffer_web::router(config);
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);

    // Pages every IDLE_CLOSE / 2 (never idle) until the reader is older
    // than REBASE_AFTER: the page that finds it so starts a rebase.
    let step = IDLE_CLOSE / 2;
    let mut aged = Duration::ZERO;
    while aged < REBASE_AFTER {
        tokio::time::advance(step).await;
        aged += step;
        assert_eq!(get(&app, "/jobs").await.0, StatusCode::OK);
    }
    within(state.wait_for(|s| s.rebasing))
        .await
        .expect("the state");

    // The rebase's new reader waits at the gate: pages answer through the
    // old one meanwhile.
    let second = pings(dir.path(), 1);
    for path in ["/", "/jobs", &format!("/jobs/{}", first[0])] {
        let (status, body) = get(&app, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
    }
    let now = *state.borrow();
    assert!(now.rebasing && now.open);
    assert_eq!((now.opens, now.rebases), (1, 0));

    // Let it through: swapped in, and the pages read the new one.
    gate.add_permits(1);
    within(state.wait_for(|s| s.rebases == 1 && !s.rebasing))
        .await
        .expect("the state");
    assert_eq!(state.borrow().opens, 2);
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);
    // The job run after the new reader's open: it follows the store too.
    let path = format!("/jobs/{}", second[0]);
    common::eventually("the new reader shows the newer job", LIMIT, async || {
        get(&app, &path).await.0 == StatusCode::OK
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_reopen_is_the_pages_error_naming_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    pings(&store_dir, 1);
    let named = gaffer::Store::local_dir(&store_dir);
    let config = WebConfig::open(&named)
        .await
        .expect("the dashboard opens the store");
    let mut state = config.reader_state(0).expect("one store");
    let app = gaffer_web::router(config);
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);
    within(state.wait_for(|s| !s.open))
        .await
        .expect("the state");

    // The store gone while the reader was closed: the page says which.
    let moved = dir.path().join("moved");
    std::fs::rename(&store_dir, &moved).unwrap();
    let (status, body) = get(&app, "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("could not be opened again"), "{body}");
    assert!(body.contains(&named.name()), "{body}");
    assert!(!state.borrow().open);

    // Back: the next page opens it.
    std::fs::rename(&moved, &store_dir).unwrap();
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);
    assert!(state.borrow().open);
}

#[tokio::test(start_paused = true)]
async fn a_failed_rebase_is_tried_again_a_rebase_interval_later() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    pings(&store_dir, 1);
    let config = WebConfig::open(&gaffer::Store::local_dir(&store_dir))
        .await
        .expect("the dashboard opens the store");
    let mut state = config.reader_state(0).expect("one store");
    let app = gaffer_web::router(config);
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);

    // The store gone once the reader is old: the rebase's open fails (the
    // pages' answers through the old reader do not matter here).
    let moved = dir.path().join("moved");
    std::fs::rename(&store_dir, &moved).unwrap();
    tokio::time::advance(REBASE_AFTER).await;
    within(get(&app, "/")).await;
    within(state.wait_for(|s| s.rebase_failures == 1 && !s.rebasing))
        .await
        .expect("the state");

    // The next pages start no rebase: the reader is as old, the failure new.
    for _ in 0..3 {
        tokio::time::advance(IDLE_CLOSE / 4).await;
        within(get(&app, "/")).await;
        let now = *state.borrow();
        assert!(!now.rebasing, "{now:?}");
        assert_eq!(now.rebase_failures, 1, "{now:?}");
    }

    // Back, and a rebase interval after the failure: the next page's
    // rebase swaps a new reader in.
    std::fs::rename(&moved, &store_dir).unwrap();
    tokio::time::advance(REBASE_AFTER).await;
    within(get(&app, "/")).await;
    within(state.wait_for(|s| s.rebases == 1 && !s.rebasing))
        .await
        .expect("the state");
    assert_eq!(state.borrow().rebase_failures, 1);
    assert_eq!(get(&app, "/").await.0, StatusCode::OK);
}
