//! `examples/metrics.rs` run as a real process: once its jobs have run, a
//! Prometheus scrape of its endpoint finds gaffer's counters, with their
//! labels and exact values, beside taquba's.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

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

/// A loopback port free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    listener.local_addr().expect("its address").port()
}

/// The body of `GET /metrics` on `port`.
async fn scrape(port: u16) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the example listens");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The value of the sample `series` (name and labels, as printed).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_of_the_metrics_example_finds_gaffers_counters() {
    let port = free_port();
    let mut child = tokio::process::Command::new(example_binary("metrics"))
        .args(["--port", &port.to_string(), "--jobs", "10"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("ready:") {
                return;
            }
        }
        panic!("the example ended before it was ready");
    })
    .await
    .expect("the example's jobs end within a minute");

    let body = scrape(port).await;
    let attempts = |result: &str| {
        sample(
            &body,
            &format!(
                "gaffer_attempts_total{{job_type=\"thumbnail\",kind=\"job\",result=\"{result}\"}}"
            ),
        )
    };
    // Jobs 1..=10: 5 and 10 fail for good; 3, 6 and 9 fail once first.
    assert_eq!(attempts("succeeded"), Some(8.0), "{body}");
    assert_eq!(attempts("failed"), Some(2.0), "{body}");
    assert_eq!(attempts("retried"), Some(3.0), "{body}");
    assert_eq!(
        sample(&body, "gaffer_jobs_running{job_type=\"thumbnail\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &body,
            "gaffer_job_run_seconds_count{job_type=\"thumbnail\"}"
        ),
        Some(13.0)
    );
    assert_eq!(
        sample(
            &body,
            "taquba_jobs_enqueued_total{queue=\"jobs.thumbnail\"}"
        ),
        // 10 submitted, and the 3 retries: a retry is the same job put back
        // on its queue in the transaction that acknowledges its failed
        // claim (at gaffer's own backoff), which taquba counts as an enqueue.
        Some(13.0),
        "taquba's own metrics come with the feature"
    );
    child.kill().await.unwrap();
}
