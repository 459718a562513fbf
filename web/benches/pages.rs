//! Per-page latency of the dashboard on a store (filled by
//! `cargo bench --bench fill_store`): the router answers in process (no
//! TCP), each page `RUNS` times in turn, through the one reader it holds;
//! prints p50, p99 and max per page.
//!
//! ```sh
//! cargo bench --bench fill_store -- /tmp/web-store-100k 100000
//! cargo bench -p gaffer-web --bench pages -- /tmp/web-store-100k [RUNS]
//! ```

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn get(app: &axum::Router, path: &str) -> (u16, String) {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status().as_u16();
    let body = axum::body::to_bytes(res.into_body(), 64 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let dir = args.first().expect("usage: pages STORE_DIR [RUNS]");
    let runs: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(200);
    let opened = Instant::now();
    let config = gaffer_web::WebConfig::open(&gaffer::Store::local_dir(dir))
        .await
        .expect("the store opens");
    println!("opened the store's reader in {:?}", opened.elapsed());
    let app = gaffer_web::router(config);
    // A failed job's id, from the failed listing (newest first).
    let (_, failed) = get(&app, "/jobs?state=failed").await;
    let id = failed
        .split("href=\"/jobs/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a failed job listed")
        .to_string();
    let (_, succeeded) = get(&app, "/jobs?state=succeeded").await;
    let ok_id = succeeded
        .split("href=\"/jobs/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a succeeded job listed")
        .to_string();
    let pages = [
        "/".to_string(),
        "/?fragment=1".to_string(),
        "/jobs".to_string(),
        "/jobs?state=failed".to_string(),
        "/jobs?state=succeeded&type=work".to_string(),
        format!("/jobs/{id}"),
        format!("/jobs/{ok_id}"),
        "/failed".to_string(),
        "/queues".to_string(),
    ];
    println!("{runs} runs per page, in turn; ms");
    println!("| page | p50 | p99 | max | bytes |");
    println!("|---|---:|---:|---:|---:|");
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); pages.len()];
    let mut sizes = vec![0; pages.len()];
    for _ in 0..runs {
        for (i, p) in pages.iter().enumerate() {
            let t = Instant::now();
            let (status, body) = get(&app, p).await;
            times[i].push(t.elapsed());
            assert_eq!(status, 200, "{p}");
            sizes[i] = body.len();
        }
    }
    for (i, p) in pages.iter().enumerate() {
        let t = &mut times[i];
        t.sort();
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
        println!(
            "| `{p}` | {} | {} | {} | {} |",
            ms(pct(t, 0.5)),
            ms(pct(t, 0.99)),
            ms(*t.last().unwrap()),
            sizes[i]
        );
    }
}
