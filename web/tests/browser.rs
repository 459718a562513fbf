//! The dashboard in a real browser: headless Chromium (Debian's `chromium`
//! and `chromium-driver`) driven over WebDriver by fantoccini, against a
//! live engine. It reads the overview's counts, retries a failed job by
//! its button and sees it succeed, pauses a type, and watches a batch's
//! progress advance on a page that refreshes itself; screenshots of the
//! main pages go to `target/web-screenshots/`.
//!
//! Skipped, with a message, when Chromium or its driver is missing and
//! `GAFFER_REQUIRE_BROWSER` is unset (`.ci/run` installs them and sets it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Fix, LIMIT};
use fantoccini::{Client, ClientBuilder, Locator};
use gaffer_web::WebConfig;

const CHROMIUM: &str = "/usr/bin/chromium";
const DRIVER: &str = "/usr/bin/chromedriver";

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/web-screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshot directory");
    dir
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("a screenshot");
    std::fs::write(screenshots().join(format!("{name}.png")), png).expect("saved");
}

/// A free port on the loopback (bound, then released for the driver).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The text of the element at `css`, waited for (found again when the
/// page's refresh replaced it between the find and the read).
async fn text(c: &Client, css: &str) -> String {
    tokio::time::timeout(LIMIT, async {
        loop {
            if let Ok(e) = c.find(Locator::Css(css)).await
                && let Ok(t) = e.text().await
            {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no text at {css}"))
}

/// Wait until the element at `css` exists (the page may refresh itself).
async fn appears(c: &Client, css: &str) {
    c.wait()
        .at_most(LIMIT)
        .every(Duration::from_millis(100))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("never appeared: {css}: {e}"));
}

#[tokio::test]
async fn a_browser_reads_retries_pauses_and_watches_a_batch() {
    let present = Path::new(CHROMIUM).exists() && Path::new(DRIVER).exists();
    if !present {
        if std::env::var_os("GAFFER_REQUIRE_BROWSER").is_some() {
            panic!("GAFFER_REQUIRE_BROWSER is set but {CHROMIUM} or {DRIVER} is missing");
        }
        eprintln!(
            "SKIPPED: the browser test needs {CHROMIUM} and {DRIVER} \
             (apt-get install -y chromium chromium-driver)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(40)).await;
    let failed = engine
        .submit(common::Flaky {
            text: "a <b>bold</b> bug".into(),
        })
        .await
        .unwrap();
    assert!(failed.join().await.unwrap().is_err());
    for n in 0..3 {
        let h = engine.submit(common::Ping { n }).await.unwrap();
        h.join().await.unwrap().unwrap();
    }

    // The dashboard on a loopback port.
    let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server =
        tokio::spawn(async move { axum::serve(listener, gaffer_web::router(config)).await });

    // chromedriver, then a session of headless Chromium.
    let port = free_port();
    let profile = tempfile::tempdir().unwrap();
    let mut driver = tokio::process::Command::new(DRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--window-size=1280,900",
                format!("--user-data-dir={}", profile.path().display()),
            ]
        }),
    );
    let webdriver = format!("http://127.0.0.1:{port}");
    let c = tokio::time::timeout(LIMIT, async {
        loop {
            match ClientBuilder::rustls()
                .expect("a TLS config")
                .capabilities(caps.clone())
                .connect(&webdriver)
                .await
            {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("a browser session within the limit");

    // The overview's counts.
    c.goto(&base).await.unwrap();
    common::eventually("the overview counts ping's three", async || {
        text(&c, "tr[data-queue=ping] td.done").await == "3"
    })
    .await;
    assert_eq!(text(&c, "tr[data-queue=flaky] td.done").await, "0");
    assert!(c.source().await.unwrap().contains("<svg"), "the chart");
    shot(&c, "overview").await;

    // A failed job: Retry, then it succeeds (the request's page refreshes
    // itself until the engine has run it).
    c.goto(&format!("{base}/jobs/{}", failed.id()))
        .await
        .unwrap();
    assert_eq!(text(&c, "#job-state").await, "failed");
    assert!(
        text(&c, "#error").await.contains("a <b>bold</b> bug"),
        "the error as text"
    );
    shot(&c, "job-failed").await;
    c.goto(&format!("{base}/failed")).await.unwrap();
    shot(&c, "failed").await;
    c.goto(&format!("{base}/jobs/{}", failed.id()))
        .await
        .unwrap();
    fix.0.store(true, Ordering::SeqCst);
    c.find(Locator::Css("#retry"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    appears(&c, "td.fate .state.applied").await;
    appears(&c, "td.job-state .state.succeeded").await;
    assert_eq!(
        failed.join().await.unwrap().unwrap(),
        "a <b>bold</b> bug".len()
    );

    // Pause ping from the queues page: paused there and on the overview.
    c.goto(&format!("{base}/queues")).await.unwrap();
    c.find(Locator::Css("tr[data-queue=ping] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    appears(&c, "td.fate .state.applied").await;
    c.goto(&format!("{base}/queues")).await.unwrap();
    appears(&c, "tr[data-queue=ping] td.paused .state.paused").await;
    shot(&c, "queues").await;
    assert!(engine.resume("ping").await.unwrap());

    // A batch's progress advances on its page without a reload.
    let batch = engine.batch::<common::Double>("browser-batch").unwrap();
    let run = tokio::spawn(async move { batch.run(0..120u64).await });
    common::eventually("the batch exists", async || {
        engine
            .batch::<common::Double>("browser-batch")
            .unwrap()
            .status()
            .await
            .is_ok()
    })
    .await;
    // Its page, once the dashboard's reader has caught up with the batch
    // (before, the page is a 404 and does not refresh).
    common::eventually("the dashboard sees the batch", async || {
        c.goto(&format!("{base}/batches/browser-batch"))
            .await
            .unwrap();
        c.find(Locator::Css("#settled")).await.is_ok()
    })
    .await;
    let settled = |t: String| -> u64 {
        t.split(" / ")
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let first = settled(text(&c, "#settled").await);
    assert!(first < 120, "watched while it runs: {first}");
    common::eventually("the progress advances on the page", async || {
        settled(text(&c, "#settled").await) > first
    })
    .await;
    shot(&c, "batch").await;
    common::eventually("the batch settles on the page", async || {
        text(&c, "#settled").await == "120 / 120"
    })
    .await;
    let report = run.await.unwrap().unwrap();
    assert_eq!((report.succeeded, report.failed), (119, 1));
    c.goto(&format!("{base}/batches")).await.unwrap();
    appears(&c, "tr[data-batch=browser-batch]").await;
    shot(&c, "batches").await;
    c.goto(&format!("{base}/jobs")).await.unwrap();
    shot(&c, "jobs").await;

    c.close().await.unwrap();
    driver.kill().await.unwrap();
    server.abort();
    engine.shutdown().await.unwrap();
}
