//! `examples/demo.rs` run as a real process (told to stop by itself after
//! five minutes, `GAFFER_DEMO_SECONDS`, so no run of the suite can leave it
//! behind): it prints its dashboard's URL, and the dashboard there shows
//! its engine's work live: the job types, the batch, both workflows, the
//! waiting order and the periodic job.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const LIMIT: Duration = Duration::from_secs(60);

/// The example's binary, built by `cargo test` beside this test's.
fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples (or run `cargo build --example {name}`)",
        path.display()
    );
    path
}

/// `GET path` on `addr`: the status line and the body.
async fn get(addr: &str, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the demo listens");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

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
    let shown = tokio::time::timeout(LIMIT, async {
        loop {
            let mut all = true;
            for (path, text) in want {
                let page = get(&url, path).await;
                assert!(page.starts_with("HTTP/1.1 200"), "{path}: {page}");
                all &= page.contains(text);
            }
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(shown.is_ok(), "the dashboard shows the demo's work");
    child.kill().await.unwrap();
}
