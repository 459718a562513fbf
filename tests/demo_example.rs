//! `examples/demo.rs` run as a real process (told to stop by itself after
//! five minutes, `GAFFER_DEMO_SECONDS`, so no run of the suite can leave it
//! behind): it prints its dashboard's URL, and the dashboard there shows
//! its engine's work live: the job types, the batch, both workflows, the
//! waiting order and the periodic job.

use gaffer_testkit::process::example_binary;
use gaffer_testkit::{LIMIT, eventually_ok, http};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_serves_its_live_engine_on_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(example_binary("demo"))
        .arg(dir.path())
        .env("ADDR", "127.0.0.1:0")
        .env("GAFFER_DEMO_SECONDS", "300")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(LIMIT, async {
        loop {
            let line = lines.next_line().await.unwrap().expect("a line");
            if let Some(url) = line.strip_prefix("dashboard: http://") {
                return url.trim_end_matches('/').to_string();
            }
        }
    })
    .await
    .expect("it prints the dashboard's URL");
    let want = [
        ("/", "data-queue=\"send-email\""),
        ("/", "data-queue=\"thumbnail\""),
        ("/batches", "thumbnails-2026-12"),
        ("/workflows", "sales-solar"),
        ("/workflows", "sales-earth"),
        ("/jobs?state=waiting", "approve-order"),
        ("/jobs?state=failed", "card declined"),
        ("/periodic", "cleanup-every-30s"),
    ];
    eventually_ok("the dashboard shows the demo's work", LIMIT, async || {
        for (path, text) in want {
            let (status, page) = http::get(&url, path).await;
            assert_eq!(status, 200, "{path}: {page}");
            if !page.contains(text) {
                return Err(format!("{path} does not show {text}"));
            }
        }
        Ok(())
    })
    .await;
    child.kill().await.unwrap();
}
