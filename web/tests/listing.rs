//! The jobs listing on the counters its page read once (#41 §2): the jobs
//! page reads each store's counters for its tabs and hands the same read to
//! the listing (`Store::jobs_counted`), which lists what `Store::jobs`
//! lists, page by page, and scans only the (queue, state) those counters
//! count non-empty. One job held running, two queued behind it (the type
//! runs one at a time), two finished of another type: nothing moves while
//! it looks.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gaffer::{Engine, Job, JobContext};
use gaffer_ops::report::Jobs;
use gaffer_ops::{Reading, StateFilter};
use serde::{Deserialize, Serialize};
use tower::ServiceExt;

/// What a `Hold` waits for.
static HOLD: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

/// Runs until let go (one at a time: the others stay queued).
#[derive(Debug, Serialize, Deserialize)]
struct Hold;

impl Job for Hold {
    const NAME: &'static str = "hold";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, _: JobContext) -> Result<(), gaffer::Error> {
        HOLD.acquire().await.expect("open").forget();
        Ok(())
    }
}

fn rows(j: &Jobs) -> Vec<(String, String)> {
    j.jobs
        .iter()
        .map(|r| (r.id.clone(), r.state.to_string()))
        .collect()
}

async fn page(app: &axum::Router, path: &str) -> String {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .expect("the router answers");
    assert_eq!(res.status(), StatusCode::OK, "{path}");
    let body = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .expect("a body");
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test]
async fn the_jobs_page_lists_on_the_counters_it_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let named = gaffer::Store::local_dir(dir.path());
    let engine = Engine::builder()
        .store(named.clone())
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .register_with::<Hold>(gaffer::JobOptions {
            concurrency: Some(1),
            ..Default::default()
        })
        .register::<common::Ping>()
        .start()
        .await
        .expect("the engine starts");
    for n in 0..2 {
        let h = engine.submit(common::Ping { n }).await.expect("submits");
        h.join().await.expect("joins").expect("pings");
    }
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(engine.submit(Hold).await.expect("submits"));
    }
    let store =
        gaffer_ops::Store::open_named(&named, "queue", "jobs", "bulk-items", Reading::Replay)
            .await
            .expect("opens");
    let hold_row = |s: &gaffer_ops::report::Stats| {
        s.queues
            .iter()
            .find(|r| r.name == "hold")
            .map(|r| (r.running, r.pending))
    };
    let mut stats = None;
    common::eventually("one hold running, two queued", common::LIMIT, async || {
        let s = store.stats(false).await.expect("stats");
        let there = hold_row(&s) == Some((1, 2));
        stats = Some(s);
        there
    })
    .await;
    let stats = stats.expect("read");

    // The same rows as a listing that reads the counters itself, in every
    // state and type, and page by page from each page's cursor.
    for state in [None, Some(StateFilter::Running), Some(StateFilter::Queued)]
        .into_iter()
        .chain(StateFilter::ALL.into_iter().map(Some))
    {
        for ty in [None, Some("hold"), Some("ping")] {
            let read = store.jobs(state, ty, 50, None).await.expect("lists");
            let given = store
                .jobs_counted(&stats, state, ty, 50, None)
                .await
                .expect("lists");
            assert_eq!(rows(&read), rows(&given), "{state:?} {ty:?}");
            let (mut a, mut b) = (None::<String>, None::<String>);
            loop {
                let x = store.jobs(state, ty, 1, a.as_deref()).await.expect("lists");
                let y = store
                    .jobs_counted(&stats, state, ty, 1, b.as_deref())
                    .await
                    .expect("lists");
                assert_eq!(rows(&x), rows(&y), "{state:?} {ty:?} after {a:?}");
                assert_eq!(x.next, y.next);
                if x.next.is_none() {
                    break;
                }
                (a, b) = (x.next, y.next);
            }
        }
    }
    let all = store.jobs(None, None, 50, None).await.expect("lists");
    let states: Vec<String> = all.jobs.iter().map(|r| r.state.to_string()).collect();
    assert_eq!(
        states,
        ["running", "queued", "queued", "succeeded", "succeeded"],
        "{all:?}"
    );
    let running = &all.jobs[0].id;

    // It scans what the counters it is given count, and no more: counted
    // empty, the running job is not looked for.
    let mut none_running = stats.clone();
    for row in &mut none_running.queues {
        row.running = 0;
    }
    let listed = store
        .jobs_counted(&none_running, Some(StateFilter::Running), None, 50, None)
        .await
        .expect("lists");
    assert!(listed.jobs.is_empty(), "{listed:?}");

    // The page: its tabs count from the counters, its rows are the listing's.
    let app = gaffer_web::router(gaffer_web::WebConfig::open(&named).await.expect("opens"));
    let jobs = page(&app, "/jobs").await;
    assert!(jobs.contains("running (1)"), "{jobs}");
    assert!(jobs.contains("queued (2)"), "{jobs}");
    assert!(jobs.contains("succeeded (2)"), "{jobs}");
    for r in &all.jobs {
        assert!(jobs.contains(&r.id), "{} not on /jobs", r.id);
    }
    let only_running = page(&app, "/jobs?state=running").await;
    for r in &all.jobs {
        assert_eq!(only_running.contains(&r.id), r.id == *running, "{}", r.id);
    }
    // A page the live jobs filled to the end, and a hand-typed cursor: an
    // empty finished position is the newest's (SlateDB's scan panicked on
    // the empty range it made).
    let full = store.jobs(None, None, 3, None).await.expect("lists");
    assert_eq!(full.next.as_deref(), Some("ended:"), "{full:?}");
    let rest = store
        .jobs(None, None, 50, Some("ended:"))
        .await
        .expect("lists");
    assert_eq!(rows(&rest), rows(&all)[3..].to_vec());
    let typed = page(&app, "/jobs?after=ended:").await;
    for r in &all.jobs {
        assert_eq!(typed.contains(&r.id), r.job_type == "ping", "{}", r.id);
    }
    let pings = page(&app, "/jobs?type=ping").await;
    for r in &all.jobs {
        assert_eq!(pings.contains(&r.id), r.job_type == "ping", "{}", r.id);
    }

    store.close().await;
    HOLD.add_permits(3);
    for h in held {
        h.join().await.expect("joins").expect("runs");
    }
    engine.shutdown().await.expect("shuts down");
}
