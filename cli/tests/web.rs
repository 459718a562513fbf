//! `gaffer web`, the built binary, against a live engine: it serves the
//! dashboard, asks for the token from the environment, and a POST through
//! it pauses a type in the engine.

use std::process::Stdio;
use std::time::Duration;

use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl Job for Greet {
    const NAME: &'static str = "greet";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<String, gaffer::Error> {
        Ok(format!("hello {}", self.name))
    }
}

/// One HTTP/1.1 request (the connection closes after it): status and body.
async fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    http_to(addr, addr, method, path, headers).await
}

/// [`http`] naming `host` as its `Host`.
async fn http_to(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connects");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(LIMIT, s.read_to_string(&mut out))
        .await
        .expect("answered in time")
        .unwrap();
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out)
}

#[tokio::test]
async fn gaffer_web_serves_the_dashboard_of_a_live_store() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir.path()))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Greet>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Greet { name: "web".into() }).await.unwrap();
    assert_eq!(h.join().await.unwrap().unwrap(), "hello web");

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_gaffer"))
        .args(["web", "--dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--base-path", "/ops"])
        .args([
            "--allowed-host",
            "jobs.example.com",
            "--allowed-host",
            "ops.example:9",
        ])
        .env("GAFFER_WEB_TOKEN", "let-me-in")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("gaffer web starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("it says where it listens")
        .unwrap()
        .expect("a line");
    // "gaffer web: http://127.0.0.1:PORT/ops (actions on, credentials asked)"
    let url = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .expect("a URL")
        .to_string();
    let (addr, path) = url.split_at(url.find('/').expect("a path"));
    let addr = addr.to_string();
    assert!(first.contains("credentials asked"), "{first}");

    let token = [("Authorization", "Bearer let-me-in")];
    // The URL it prints is the dashboard, and so is the prefix with a
    // slash (a redirect to it).
    let (status, page) = http(&addr, "GET", path, &token).await;
    assert_eq!(status, 200, "{path}: {page}");
    assert!(page.contains("<h1>Overview</h1>"), "{page}");
    let (status, page) = http(&addr, "GET", "/ops/", &token).await;
    assert_eq!(status, 308, "{page}");
    assert!(page.contains("location: /ops\r\n"), "{page}");
    // DNS rebinding: a name it was not told of is refused; the loopback
    // names and the allowed ones are served.
    let port = addr.rsplit(':').next().unwrap();
    for (host, want) in [
        ("evil.example".to_string(), 421),
        (format!("evil.example:{port}"), 421),
        (format!("localhost:{port}"), 200),
        (format!("jobs.example.com:{port}"), 200),
        ("ops.example:9".to_string(), 200),
        (format!("ops.example:{port}"), 421),
    ] {
        let (status, page) = http_to(&addr, &host, "GET", "/ops", &token).await;
        assert_eq!(status, want, "{host}: {page}");
    }
    let (status, _) = http_to(
        &addr,
        &format!("evil.example:{port}"),
        "POST",
        "/ops/queues/greet/pause",
        &[token[0], ("Origin", &format!("http://evil.example:{port}"))],
    )
    .await;
    assert_eq!(status, 421, "a rebound page cannot act");
    assert_eq!(http(&addr, "GET", "/ops", &[]).await.0, 401);
    let (status, page) = http(&addr, "GET", "/ops", &token).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("data-queue=\"greet\""), "{page}");
    let (status, page) = http(&addr, "GET", &format!("/ops/jobs/{}", h.id()), &token).await;
    assert_eq!(status, 200);
    assert!(page.contains("hello web"), "the output: {page}");
    assert_eq!(http(&addr, "GET", "/ops/jobs/nope", &token).await.0, 404);

    // A pause through it reaches the engine.
    let (status, _) = http(&addr, "POST", "/ops/queues/greet/pause", &token).await;
    assert_eq!(status, 303);
    tokio::time::timeout(LIMIT, async {
        loop {
            if http(&addr, "GET", "/ops/queues", &token)
                .await
                .1
                .contains("state paused")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("greet shows paused");

    child.kill().await.unwrap();
    engine.shutdown().await.unwrap();
}
