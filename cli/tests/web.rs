//! `gaffer web`, the built binary, against a live engine: it serves the
//! dashboard, asks for the token from the environment, and a POST through
//! it pauses a type in the engine.

mod common;

use std::time::Duration;

use common::{Greet, LIMIT, bin, first_line, url_in};
use gaffer::Engine;
use gaffer_testkit::http::request;

/// One HTTP/1.1 request (the connection closes after it): status and the
/// whole answer.
async fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    request(addr, addr, method, path, headers).await
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

    let mut child = bin()
        .arg("--dir")
        .arg(dir.path())
        .env("GAFFER_WEB_TOKEN", "let-me-in")
        .spawn(&[
            "web",
            "--listen",
            "127.0.0.1:0",
            "--base-path",
            "/ops",
            "--allowed-host",
            "jobs.example.com",
            "--allowed-host",
            "ops.example:9",
        ]);
    // "gaffer web: http://127.0.0.1:PORT/ops (actions on, credentials asked)"
    let first = first_line(&mut child).await;
    let url = url_in(&first);
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
        let (status, page) = request(&addr, &host, "GET", "/ops", &token).await;
        assert_eq!(status, want, "{host}: {page}");
    }
    let (status, _) = request(
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
    common::eventually("greet shows paused", LIMIT, async || {
        http(&addr, "GET", "/ops/queues", &token)
            .await
            .1
            .contains("state paused")
    })
    .await;

    child.kill().await.unwrap();
    engine.shutdown().await.unwrap();
}
