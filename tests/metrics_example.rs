//! `examples/metrics.rs` run as a real process: once its jobs have run, a
//! Prometheus scrape of its endpoint finds gaffer's counters, with their
//! labels and exact values, beside taquba's.

use gaffer_testkit::http::{self, free_port};
use gaffer_testkit::{LIMIT, process::example_binary};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The body of `GET /metrics` on `port`.
async fn scrape(port: u16) -> String {
    let (status, response) = http::request(
        &format!("127.0.0.1:{port}"),
        "localhost",
        "GET",
        "/metrics",
        &[],
    )
    .await;
    assert_eq!(status, 200, "{response}");
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
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("ready:") {
                return;
            }
        }
        panic!("the example ended before it was ready");
    })
    .await
    .expect("the example's jobs end within the limit");

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
