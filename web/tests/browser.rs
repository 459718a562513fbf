//! The dashboard in a real browser: headless Chromium (Debian's `chromium`
//! and `chromium-driver`) driven over WebDriver by fantoccini, against a
//! live engine. It reads the overview's counts, retries a failed job by
//! its button and sees it succeed, pauses a type, and watches a batch's
//! progress advance on a page that refreshes itself, all under the
//! dashboard's content security policy (the browser reports no violation);
//! it checks the layout at 800, 1400 and 1920 px (charts in their cells,
//! numeric columns aligned, no page wider than the window); and a page of
//! another origin cannot frame it. Screenshots of the main pages go to
//! `target/web-screenshots/` (docs/guide/dashboard.md's is `overview.png`).
//!
//! Skipped, with a message, when Chromium or its driver is missing and
//! `GAFFER_REQUIRE_BROWSER` is unset (`.ci/run` installs them and sets it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Fix, LIMIT, POLL, eventually_ok};
use fantoccini::{Client, ClientBuilder, Locator};
use gaffer_testkit::http::free_port;
use gaffer_web::WebConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// The text of the element at `css`, waited for (found again when the
/// page's refresh replaced it between the find and the read).
async fn text(c: &Client, css: &str) -> String {
    eventually_ok(
        &format!("the element at {css} has a text"),
        LIMIT,
        async || {
            let e = c.find(Locator::Css(css)).await?;
            e.text().await
        },
    )
    .await
}

/// Wait until the element at `css` exists (the page may refresh itself).
async fn appears(c: &Client, css: &str) {
    c.wait()
        .at_most(LIMIT)
        .every(POLL)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("never appeared: {css}: {e}"));
}

/// Whether the browser is here; when it is not, the test is skipped
/// (said on stderr) unless `GAFFER_REQUIRE_BROWSER` is set.
fn browser_present() -> bool {
    let present = Path::new(CHROMIUM).exists() && Path::new(DRIVER).exists();
    if !present {
        if std::env::var_os("GAFFER_REQUIRE_BROWSER").is_some() {
            panic!("GAFFER_REQUIRE_BROWSER is set but {CHROMIUM} or {DRIVER} is missing");
        }
        eprintln!(
            "SKIPPED: the browser test needs {CHROMIUM} and {DRIVER} \
             (apt-get install -y chromium chromium-driver)"
        );
    }
    present
}

/// chromedriver and a session of headless Chromium that keeps its
/// console's messages (see [`Browser::console`]).
struct Browser {
    c: Client,
    driver: tokio::process::Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Self {
        let port = free_port();
        let profile = tempfile::tempdir().unwrap();
        let driver = tokio::process::Command::new(DRIVER)
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
        caps.insert(
            "goog:loggingPrefs".into(),
            serde_json::json!({ "browser": "ALL" }),
        );
        let webdriver = format!("http://127.0.0.1:{port}");
        // Until chromedriver listens, and Chromium has started.
        let c = eventually_ok("a browser session", LIMIT, async || {
            ClientBuilder::rustls()
                .expect("a TLS config")
                .capabilities(caps.clone())
                .connect(&webdriver)
                .await
        })
        .await;
        Self {
            c,
            driver,
            port,
            _profile: profile,
        }
    }

    /// The browser console's messages since the last call (chromedriver's
    /// log endpoint): a policy violation is one of them.
    async fn console(&self) -> Vec<String> {
        let sid = self.c.session_id().await.unwrap().expect("a session");
        let body = r#"{"type":"browser"}"#;
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("the driver listens");
        let req = format!(
            "POST /session/{sid}/se/log HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        // Its answer: the head, then `Content-Length` bytes (the driver
        // may keep the connection open).
        let out = tokio::time::timeout(LIMIT, async {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 8192];
            loop {
                let n = s.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse::<usize>().ok())?
                        })
                        .expect("a content length");
                    if buf.len() >= end + 4 + length || n == 0 {
                        return String::from_utf8_lossy(&buf[end + 4..]).into_owned();
                    }
                } else if n == 0 {
                    panic!("the driver closed: {text}");
                }
            }
        })
        .await
        .expect("the driver answers");
        let json = &out[out.find('{').expect("a JSON body")..=out.rfind('}').unwrap()];
        let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
        v["value"]
            .as_array()
            .unwrap_or_else(|| panic!("no log: {v}"))
            .iter()
            .map(|e| e["message"].as_str().unwrap_or("").to_string())
            .collect()
    }

    async fn stop(mut self) {
        self.c.close().await.unwrap();
        self.driver.kill().await.unwrap();
    }
}

/// Run `script` (a function body returning JSON) in the page.
async fn js(c: &Client, script: &str) -> serde_json::Value {
    c.execute(script, vec![]).await.expect("the script runs")
}

/// Of every table of the page, the columns whose cells are right-aligned
/// (numbers) under a header that is not, or the other way round.
const MISALIGNED: &str = r#"
const bad = [];
for (const t of document.querySelectorAll('table')) {
  const head = t.rows[0];
  if (!head) continue;
  for (const row of [...t.rows].slice(1)) {
    [...row.cells].forEach((td, i) => {
      const th = head.cells[i];
      if (!th || td.tagName !== 'TD') return;
      const right = (e) => getComputedStyle(e).textAlign === 'right';
      if (right(td) !== right(th)) bad.push((t.id || 'table') + ': ' + th.textContent.trim() + ' (column ' + i + ')');
    });
  }
}
return [...new Set(bad)];
"#;

/// The overview's per-type charts: how many, and each one out of its
/// cell, over another, or with its "now" label cut off.
const CHARTS: &str = r#"
const svgs = [...document.querySelectorAll('.grid svg.chart')];
const bad = [];
svgs.forEach((s, i) => {
  const r = s.getBoundingClientRect(), cell = s.parentElement.getBoundingClientRect();
  if (r.right > cell.right + 0.5 || r.left < cell.left - 0.5) bad.push('chart ' + i + ' leaves its cell');
  svgs.forEach((t, j) => {
    if (j <= i) return;
    const q = t.getBoundingClientRect();
    if (r.left < q.right - 0.5 && q.left < r.right - 0.5 && r.top < q.bottom - 0.5 && q.top < r.bottom - 0.5) bad.push('charts ' + i + ' and ' + j + ' overlap');
  });
  const texts = [...s.querySelectorAll('text')];
  const now = texts[texts.length - 1].getBoundingClientRect();
  if (now.right > r.right + 0.5) bad.push('chart ' + i + ' cuts "now"');
});
return [svgs.length, bad];
"#;

/// How much wider than the window the page is (0: it fits).
const OVERFLOW: &str =
    "return document.documentElement.scrollWidth - document.documentElement.clientWidth;";

#[tokio::test]
async fn a_browser_reads_retries_pauses_and_watches_a_batch() {
    if !browser_present() {
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
    // Keyed jobs: 64-digit ids and long errors, for the narrow window.
    for name in ["invoice-2026-0001", "invoice-2026-0002"] {
        let h = engine
            .submit(common::Keyed { name: name.into() })
            .await
            .unwrap();
        assert!(h.join().await.unwrap().is_err());
    }

    // The dashboard on a loopback port.
    let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server =
        tokio::spawn(async move { axum::serve(listener, gaffer_web::router(config)).await });

    let browser = Browser::start().await;
    let c = &browser.c;

    // The overview's counts.
    c.goto(&base).await.unwrap();
    common::eventually("the overview counts ping's three", LIMIT, async || {
        text(c, "tr[data-queue=ping] td.done").await == "3"
    })
    .await;
    assert_eq!(text(c, "tr[data-queue=flaky] td.done").await, "0");
    assert!(c.source().await.unwrap().contains("<svg"), "the chart");
    shot(c, "overview").await;

    // A failed job: Retry, then it succeeds (the request's page refreshes
    // itself until the engine has run it).
    c.goto(&format!("{base}/jobs/{}", failed.id()))
        .await
        .unwrap();
    assert_eq!(text(c, "#job-state").await, "failed");
    assert!(
        text(c, "#error").await.contains("a <b>bold</b> bug"),
        "the error as text"
    );
    shot(c, "job-failed").await;
    c.goto(&format!("{base}/failed")).await.unwrap();
    shot(c, "failed").await;
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
    appears(c, "td.fate .state.applied").await;
    appears(c, "td.job-state .state.succeeded").await;
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
    appears(c, "td.fate .state.applied").await;
    c.goto(&format!("{base}/queues")).await.unwrap();
    appears(c, "tr[data-queue=ping] td.paused .state.paused").await;
    shot(c, "queues").await;
    assert!(engine.resume("ping").await.unwrap());

    // A batch's progress advances on its page without a reload. Its
    // pipeline is paused until the page has been read once, so that the
    // page is seen while the batch runs however long it took to load (120
    // items take 2.4 s, and a loaded machine's dashboard reader and browser
    // could take longer than that to catch up).
    assert!(engine.pause("double").await.unwrap());
    let batch = engine.batch::<common::Double>("browser-batch").unwrap();
    let run = tokio::spawn(async move { batch.run(0..120u64).await });
    common::eventually("the batch exists", LIMIT, async || {
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
    common::eventually("the dashboard sees the batch", LIMIT, async || {
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
    let first = settled(text(c, "#settled").await);
    assert_eq!(first, 0, "watched before any item ran");
    assert!(engine.resume("double").await.unwrap());
    common::eventually("the progress advances on the page", LIMIT, async || {
        settled(text(c, "#settled").await) > first
    })
    .await;
    shot(c, "batch").await;
    common::eventually("the batch settles on the page", LIMIT, async || {
        text(c, "#settled").await == "120 / 120"
    })
    .await;
    let report = run.await.unwrap().unwrap();
    assert_eq!((report.succeeded, report.failed), (119, 1));
    c.goto(&format!("{base}/batches")).await.unwrap();
    appears(c, "tr[data-batch=browser-batch]").await;
    shot(c, "batches").await;
    c.goto(&format!("{base}/jobs")).await.unwrap();
    shot(c, "jobs").await;

    // Under the policy: the style sheet applies, the bars are drawn, and
    // the browser reported no violation on any page seen.
    c.goto(&format!("{base}/batches")).await.unwrap();
    let styled = js(
        c,
        "return [getComputedStyle(document.querySelector('header')).backgroundColor, \
         document.querySelector('svg.bar rect.ok').getBoundingClientRect().width];",
    )
    .await;
    assert_eq!(styled[0], "rgb(31, 41, 51)", "the style sheet: {styled}");
    assert!(styled[1].as_f64().unwrap() > 0.0, "the bar: {styled}");
    let violations: Vec<String> = browser
        .console()
        .await
        .into_iter()
        .filter(|m| {
            m.contains("Content Security Policy") || (m.contains("404") && m.contains("icon"))
        })
        .collect();
    assert!(violations.is_empty(), "{violations:#?}");

    // Layout. Numbers right-aligned under right-aligned headers, on every
    // page with a table.
    for path in ["/", "/jobs", "/failed", "/batches", "/queues", "/periodic"] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        appears(c, "main table").await;
        let bad = js(c, MISALIGNED).await;
        assert_eq!(bad, serde_json::json!([]), "{path}");
    }
    // The per-type charts fit their cells, at every width.
    for width in [1400, 1920, 1280] {
        c.set_window_size(width, 900).await.unwrap();
        c.goto(&base).await.unwrap();
        appears(c, ".grid svg.chart").await;
        let charts = js(c, CHARTS).await;
        assert!(charts[0].as_u64().unwrap() >= 2, "{width}px: {charts}");
        assert_eq!(charts[1], serde_json::json!([]), "{width}px");
    }
    // docs/guide/dashboard.md's screenshot.
    shot(c, "overview").await;
    // A narrow window: no page is wider than it.
    c.set_window_size(800, 900).await.unwrap();
    for path in [
        "/",
        "/jobs",
        "/jobs?state=failed",
        "/failed",
        "/batches",
        "/queues",
    ] {
        c.goto(&format!("{base}{path}")).await.unwrap();
        appears(c, "main").await;
        let over = js(c, OVERFLOW).await;
        assert_eq!(over, 0, "{path} at 800 px is {over} px too wide");
    }
    shot(c, "jobs-800").await;

    browser.stop().await;
    server.abort();
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_frame_the_dashboard() {
    if !browser_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    engine
        .submit(common::Ping { n: 1 })
        .await
        .unwrap()
        .join()
        .await
        .unwrap()
        .unwrap();
    let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dashboard = format!("http://{}", listener.local_addr().unwrap());
    let server =
        tokio::spawn(async move { axum::serve(listener, gaffer_web::router(config)).await });
    // The other site: a page that frames the dashboard's queues page (its
    // Pause buttons) and, to show frames load here, a page of its own.
    let evil = format!(
        "<!doctype html><html><body>\
         <iframe id=\"victim\" src=\"{dashboard}/queues\" width=\"900\" height=\"400\" \
           onload=\"window.loaded=(window.loaded||0)+1\"></iframe>\
         <iframe id=\"own\" src=\"/own\" width=\"300\" height=\"100\" \
           onload=\"window.loaded=(window.loaded||0)+1\"></iframe>\
         </body></html>"
    );
    let other = axum::Router::new()
        .route(
            "/",
            axum::routing::get(move || async move { axum::response::Html(evil) }),
        )
        .route(
            "/own",
            axum::routing::get(|| async { axum::response::Html("<p id=\"own-page\">framed</p>") }),
        );
    let other_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    // Another origin: another host name and port.
    let attacker = format!(
        "http://localhost:{}/",
        other_listener.local_addr().unwrap().port()
    );
    let other_server = tokio::spawn(async move { axum::serve(other_listener, other).await });

    let browser = Browser::start().await;
    let c = &browser.c;
    c.goto(&attacker).await.unwrap();
    common::eventually("both frames have loaded", LIMIT, async || {
        js(c, "return window.loaded || 0;").await.as_u64() == Some(2)
    })
    .await;
    // Its own page loads in a frame.
    c.enter_frame(1).await.unwrap();
    assert_eq!(text(c, "#own-page").await, "framed");
    c.enter_parent_frame().await.unwrap();
    // The dashboard does not: nothing of it (no queue, no button) is there.
    c.enter_frame(0).await.unwrap();
    assert!(
        c.find(Locator::Css("#queues")).await.is_err(),
        "the queues page was framed"
    );
    assert!(
        c.find(Locator::Css("button")).await.is_err(),
        "a button was framed"
    );
    c.enter_parent_frame().await.unwrap();
    let refused: Vec<String> = browser
        .console()
        .await
        .into_iter()
        .filter(|m| m.contains("frame-ancestors"))
        .collect();
    assert!(!refused.is_empty(), "the browser says why it refused");
    shot(c, "framed").await;

    browser.stop().await;
    other_server.abort();
    server.abort();
    engine.shutdown().await.unwrap();
}

/// A job of a type fair over the values of its `tenant` header.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Tenanted;

impl gaffer::Job for Tenanted {
    const NAME: &'static str = "tenanted";
    type Output = ();
    type Error = std::io::Error;

    async fn run(&self, _ctx: gaffer::JobContext) -> Result<(), std::io::Error> {
        Ok(())
    }
}

/// #37 §4 in a browser: the type's queue page (reached from the queues
/// table) lists its values, most ready first; acme's Pause button holds
/// acme while globex runs, and its Resume button lets it run.
#[tokio::test]
async fn a_browser_pauses_one_value_from_the_queue_page() {
    if !browser_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .intake_poll(Duration::from_millis(20))
        .register_with::<Tenanted>(gaffer::JobOptions {
            fair_by: Some(gaffer::Fairness::header("tenant")),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    engine.pause("tenanted").await.unwrap();
    let mut handles = Vec::new();
    for (tenant, n) in [("acme", 2), ("globex", 1)] {
        for _ in 0..n {
            let mut opts = gaffer::SubmitOptions::default();
            opts.headers.insert("tenant".into(), tenant.into());
            handles.push((tenant, engine.submit_with(Tenanted, opts).await.unwrap()));
        }
    }
    let config = WebConfig::open(&gaffer::Store::local_dir(dir.path()))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server =
        tokio::spawn(async move { axum::serve(listener, gaffer_web::router(config)).await });
    let browser = Browser::start().await;
    let c = &browser.c;

    c.goto(&format!("{base}/queues")).await.unwrap();
    c.find(Locator::Css("tr[data-queue=tenanted] a.values"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    appears(c, "table#values").await;
    assert_eq!(text(c, "tr[data-value=acme] td.ready").await, "2");
    assert_eq!(text(c, "tr[data-value=globex] td.ready").await, "1");
    assert_eq!(
        text(c, "table#values tr:nth-child(2)")
            .await
            .split_whitespace()
            .next(),
        Some("tenant=acme"),
        "most ready first"
    );
    shot(c, "queue-values").await;
    c.find(Locator::Css("tr[data-value=acme] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    appears(c, "td.fate .state.applied").await;
    c.goto(&format!("{base}/queues/tenanted/values"))
        .await
        .unwrap();
    appears(c, "tr[data-value=acme] td.paused .state.paused").await;
    // The type resumed: globex runs, acme stays queued.
    engine.resume("tenanted").await.unwrap();
    for (tenant, h) in &handles {
        if *tenant == "globex" {
            assert!(h.join().await.unwrap().is_ok());
        }
    }
    for (tenant, h) in &handles {
        if *tenant == "acme" {
            assert_eq!(
                engine.status(h.id()).await.unwrap(),
                gaffer::job::JobState::Queued
            );
        }
    }
    // Its Resume button: acme's jobs run.
    c.goto(&format!("{base}/queues/tenanted/values"))
        .await
        .unwrap();
    c.find(Locator::Css("tr[data-value=acme] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    appears(c, "td.fate .state.applied").await;
    for (_, h) in &handles {
        assert!(h.join().await.unwrap().is_ok());
    }
    let console = browser.console().await;
    assert!(
        console
            .iter()
            .all(|m| !m.contains("Content Security Policy")),
        "{console:?}"
    );
    browser.stop().await;
    server.abort();
    engine.shutdown().await.unwrap();
}
