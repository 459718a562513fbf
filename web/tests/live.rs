//! The dashboard on an engine in its own process, read through the
//! engine's writer view (`WebConfig::live(&engine.live_store()?)`): each
//! commit shows on the next page with no reader to follow, actions go
//! through the inbox as from any dashboard, a store only this process can
//! open (in memory) has a dashboard, and after the engine's shutdown the
//! pages answer with the store's error instead of hanging or panicking.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use common::{Fix, LIMIT, Ping, page, post};
use gaffer_web::WebConfig;

/// A ping due in an hour: it stays scheduled while the test looks.
fn later() -> gaffer::SubmitOptions {
    gaffer::SubmitOptions {
        run_at: Some(SystemTime::now() + Duration::from_secs(3600)),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_live_dashboard_shows_each_commit_on_the_next_page_and_acts_through_the_inbox() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = gaffer_web::router(
        WebConfig::live(&engine.live_store().unwrap())
            .await
            .unwrap(),
    );
    let (status, overview) = page(&app, "/").await;
    assert_eq!(status, StatusCode::OK, "{overview}");
    assert!(
        overview.contains(&dir.path().display().to_string()),
        "the store's name: {overview}"
    );
    assert!(overview.contains("state alive"), "the writer: {overview}");

    // No follow, no wait: the submit's commit is on the very next page
    // (a reader sees it only once it has read the WAL object).
    for n in 0..5 {
        let h = engine.submit_with(Ping { n }, later()).await.unwrap();
        let (status, job) = page(&app, &format!("/jobs/{}", h.id())).await;
        assert_eq!(status, StatusCode::OK, "job {n}: {job}");
        assert!(
            job.contains("id=\"cancel\""),
            "job {n} is cancellable: {job}"
        );
    }
    let (_, scheduled) = page(&app, "/jobs?state=scheduled").await;
    assert!(scheduled.matches("/jobs/").count() >= 5, "{scheduled}");

    // Cancel one from its page: a request through the store's inbox, which
    // the engine applies.
    let h = engine.submit_with(Ping { n: 9 }, later()).await.unwrap();
    let (status, location) = post(&app, &format!("/jobs/{}/cancel", h.id()), "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.contains("/requests?r="), "{location}");
    common::eventually("the cancel is applied", LIMIT, async || {
        page(&app, &format!("/jobs/{}", h.id()))
            .await
            .1
            .contains("state cancelled")
    })
    .await;
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_in_memory_engine_has_a_live_dashboard_until_it_shuts_down() {
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::in_memory())
        .register::<Ping>()
        .start()
        .await
        .unwrap();
    let app = gaffer_web::router(
        WebConfig::live(&engine.live_store().unwrap())
            .await
            .unwrap(),
    );
    let h = engine.submit(Ping { n: 7 }).await.unwrap();
    assert_eq!(common::within(h.join()).await.unwrap().unwrap(), 7);
    let (status, job) = page(&app, &format!("/jobs/{}", h.id())).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert!(job.contains("state succeeded"), "{job}");
    let (_, overview) = page(&app, "/").await;
    assert!(
        overview.contains("data-queue=\"ping\""),
        "ping's row: {overview}"
    );

    engine.shutdown().await.unwrap();
    assert!(
        matches!(engine.live_store(), Err(gaffer::Error::ShutDown)),
        "no live store of a stopped engine"
    );
    // The view a page holds outlives the engine: its reads fail with the
    // store's error, and the page says so.
    let (status, body) = common::within(page(&app, "/")).await;
    assert!(status.is_server_error(), "{status}: {body}");
}

/// The `Scheduled` count of `ping`'s row on a queues page or fragment.
fn scheduled(body: &str) -> &str {
    let row = body
        .split("data-queue=\"ping\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no ping row in {body}"));
    let cell = row
        .split("<td class=\"n scheduled\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no scheduled cell in {row}"));
    &cell[..cell.find('<').unwrap_or(0)]
}

#[tokio::test]
async fn a_refresh_counts_from_the_engines_snapshot_once_newer_than_the_page_load() {
    use gaffer_layout::{keys, records};
    let now = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // The engine's clock stands still: its two pings, due in an hour, stay
    // scheduled, and once its snapshot counts them it writes none again
    // (it writes when the counters change, or after a minute of its
    // clock), so the snapshots below are the only ones.
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::in_memory())
        .clock(Arc::new(gaffer::taquba::MockClock::new(now())))
        .register::<Ping>()
        .start()
        .await
        .unwrap();
    let live = engine.live_store().unwrap();
    for n in 0..2 {
        engine.submit_with(Ping { n }, later()).await.unwrap();
    }
    let counted = async || {
        let raw = live.view().kv_get(keys::STATS_KEY).await.unwrap()?;
        let s: records::StatsSnapshot = records::decode(keys::STATS_KEY, &raw).unwrap();
        s.queues
            .iter()
            .find(|q| q.queue == "jobs.ping")
            .map(|q| q.scheduled)
    };
    common::eventually("the engine's snapshot counts both", LIMIT, async || {
        counted().await == Some(2)
    })
    .await;
    let queue = gaffer::testing::raw_queue(&engine).unwrap();
    let put = async |at_ms: u64, scheduled: i64| {
        let snapshot = records::StatsSnapshot {
            at_ms,
            queues: vec![records::QueueCounts {
                queue: "jobs.ping".into(),
                pending: 0,
                claimed: 0,
                scheduled,
                done: 0,
                dead: 0,
            }],
        };
        let bytes = records::encode(&snapshot).unwrap();
        queue.kv_put(keys::STATS_KEY, &bytes).await.unwrap();
    };
    let app = gaffer_web::router(WebConfig::live(&live).await.unwrap());

    // A refresh with no page load before it: the snapshot's counts, said
    // to be of its time.
    put(now() - 1_000, 42).await;
    let (_, body) = page(&app, "/queues?fragment=1").await;
    assert_eq!(scheduled(&body), "42", "{body}");
    assert!(body.contains("id=\"counted-at\""), "{body}");

    // A page load counts now; a refresh after it never shows a snapshot
    // older than that load, but the load's own counts.
    let (_, body) = page(&app, "/queues").await;
    assert_eq!(scheduled(&body), "2", "{body}");
    assert!(!body.contains("id=\"counted-at\""), "{body}");
    let (_, body) = page(&app, "/queues?fragment=1").await;
    assert_eq!(scheduled(&body), "2", "{body}");
    assert!(body.contains("id=\"counted-at\""), "{body}");

    // A snapshot newer than the load is shown.
    put(now() + 1_000, 43).await;
    let (_, body) = page(&app, "/?fragment=1").await;
    assert_eq!(scheduled(&body), "43", "{body}");

    // One over a minute old is a stopped engine's: counted now instead.
    put(now() - 70_000, 44).await;
    let (_, body) = page(&app, "/queues?fragment=1").await;
    assert_eq!(scheduled(&body), "2", "{body}");
    assert!(!body.contains("id=\"counted-at\""), "{body}");
    engine.shutdown().await.unwrap();
}
