//! The dashboard's router over HTTP requests, on a live engine on a local
//! disk store: every page and action, their status codes, escaping of user
//! data, read-only, credentials, the cross-site check, bad ids and cursors.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{EVIL, Fix, Ping};
use gaffer_web::{Auth, WebConfig};
use tower::ServiceExt;

struct Answer {
    status: StatusCode,
    location: String,
    body: String,
    headers: axum::http::HeaderMap,
}

async fn send(app: &Router, req: Request<Body>) -> Answer {
    let res = app.clone().oneshot(req).await.expect("the router answers");
    let status = res.status();
    let headers = res.headers().clone();
    let location = headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .expect("a body");
    Answer {
        status,
        location,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        headers,
    }
}

async fn get(app: &Router, path: &str) -> Answer {
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

/// A POST as the dashboard's own page sends it.
async fn post(app: &Router, path: &str, form: &str) -> Answer {
    let req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .body(Body::from(form.to_string()))
        .unwrap();
    send(app, req).await
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Follow a request's page until its fate (and its job's state, when it
/// names one) is `fate`; returns the page.
async fn fate(app: &Router, location: &str, fate: &str, job_state: Option<&str>) -> String {
    assert!(location.contains("/requests?r="), "{location}");
    let mut last = String::new();
    let want = format!("class=\"state {fate}\"");
    // Every request the page follows (one `r=` each), not just the first
    // to land: the engine applies them one at a time.
    let requests = location.matches("r=").count();
    common::eventually(&format!("the request is {fate}"), async || {
        let a = get(app, location).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        last = a.body;
        last.matches(&want).count() >= requests
            && job_state.is_none_or(|s| {
                last.contains(&format!(
                    "<td class=\"job-state\"><span class=\"state {s}\">"
                ))
            })
    })
    .await;
    last
}

async fn router(dir: &std::path::Path) -> Router {
    let config = WebConfig::open(&gaffer::Store::local_dir(dir))
        .await
        .expect("the dashboard opens the store");
    gaffer_web::router(config)
}

#[tokio::test]
async fn every_page_answers_and_a_failed_job_is_retried_from_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;

    // A job submitted from the form, with the user data everywhere.
    let payload = serde_json::json!({ "text": EVIL }).to_string();
    let a = post(
        &app,
        "/submit",
        &format!("type=flaky&payload={}&key={}", enc(&payload), enc(EVIL)),
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let id = a
        .location
        .strip_prefix("/jobs/")
        .expect("to the job's page")
        .to_string();
    assert_eq!(id, gaffer_actors::layout::keys::keyed_run_id(EVIL));
    common::eventually("the job failed", async || {
        get(&app, &format!("/jobs/{id}"))
            .await
            .body
            .contains("state failed")
    })
    .await;

    let page = get(&app, &format!("/jobs/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    for raw in ["<script>alert", "<img src=x"] {
        assert!(!page.body.contains(raw), "unescaped {raw} in the job page");
    }
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "payload and error shown as text"
    );
    assert!(
        page.body
            .contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;")
    );
    assert!(page.body.contains("broke on"), "the error");
    assert!(page.body.contains("id=\"retry\""), "a Retry button");
    assert!(
        !page.body.contains("id=\"cancel\""),
        "no Cancel on a failed job"
    );

    // Found by its idempotency key.
    let found = get(&app, &format!("/jobs?q={}", enc(EVIL))).await;
    assert_eq!(found.status, StatusCode::SEE_OTHER);
    assert_eq!(found.location, format!("/jobs/{id}"));

    // Every page answers, and user data stays text on each.
    for path in [
        "/",
        "/?fragment=1",
        "/jobs",
        "/jobs?state=failed",
        "/jobs?state=waiting",
        "/jobs?type=flaky",
        "/failed",
        "/failed?type=flaky&since=60",
        "/batches",
        "/workflows",
        "/workflows?fragment=1",
        "/periodic",
        "/queues",
        "/submit",
        "/assets/app.js",
        "/assets/app.css",
    ] {
        let a = get(&app, path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.body);
        assert!(
            !a.body.contains("<img src=x"),
            "{path} shows user data unescaped"
        );
    }
    common::eventually("the periodic job is listed", async || {
        let p = get(&app, "/periodic").await.body;
        p.contains("hourly-ping") && p.contains("0 * * * *")
    })
    .await;
    let overview = get(&app, "/").await.body;
    assert!(overview.contains("data-queue=\"flaky\""), "flaky's row");
    assert!(overview.contains("<svg"), "the chart");
    assert!(
        overview.contains("1 failed"),
        "the failure on the chart: {overview}"
    );
    assert!(get(&app, "/jobs?state=failed").await.body.contains(&id));
    assert!(get(&app, "/failed").await.body.contains(&id));

    // Retry from the job's page, once the bug is fixed: applied, then it
    // succeeds.
    fix.0.store(true, Ordering::SeqCst);
    let a = post(&app, &format!("/jobs/{id}/retry"), "").await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    fate(&app, &a.location, "applied", Some("succeeded")).await;
    let page = get(&app, &format!("/jobs/{id}")).await.body;
    assert!(page.contains("state succeeded"), "{page}");
    assert!(!page.contains("id=\"retry\""));

    // Cancel a job due in an hour from its page.
    let h = engine
        .submit_with(
            Ping { n: 1 },
            gaffer::SubmitOptions {
                run_at: Some(std::time::SystemTime::now() + Duration::from_secs(3600)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let later = h.id().to_string();
    common::eventually("the dashboard sees the scheduled job", async || {
        get(&app, &format!("/jobs/{later}"))
            .await
            .body
            .contains("id=\"cancel\"")
    })
    .await;
    let a = post(&app, &format!("/jobs/{later}/cancel"), "").await;
    fate(&app, &a.location, "applied", Some("cancelled")).await;

    // The chart counts what finished since its last refresh: the failure
    // (counted before the retry), the success, the cancel.
    common::eventually("the chart counts all three", async || {
        get(&app, "/?fragment=1")
            .await
            .body
            .contains("all types · 1 ok · 1 failed · 1 cancelled")
    })
    .await;

    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn failed_jobs_are_retried_selected_or_all_that_match_and_queues_pause() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let h = engine
            .submit(common::Flaky {
                text: format!("t{i}"),
            })
            .await
            .unwrap();
        ids.push(h.id().to_string());
    }
    for id in &ids {
        let h = engine.handle::<common::Flaky>(id).unwrap();
        assert!(h.join().await.unwrap().is_err());
    }
    common::eventually("the dashboard lists the three failures", async || {
        let b = get(&app, "/failed?type=flaky").await.body;
        ids.iter().all(|id| b.contains(id.as_str()))
    })
    .await;
    fix.0.store(true, Ordering::SeqCst);

    // One of them by its row's button, another two selected.
    let a = post(
        &app,
        "/failed/retry",
        &format!("id={}&id={}&one={}", ids[1], ids[2], ids[0]),
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    assert_eq!(a.location.matches("r=").count(), 1, "only the row's job");
    fate(&app, &a.location, "applied", Some("succeeded")).await;
    let a = post(
        &app,
        "/failed/retry",
        &format!("id={}&id={}", ids[1], ids[2]),
    )
    .await;
    assert_eq!(a.location.matches("r=").count(), 2);
    let page = fate(&app, &a.location, "applied", None).await;
    assert_eq!(page.matches("class=\"state applied\"").count(), 2, "{page}");

    // All that match the filter, in one request: the one failed since.
    fix.0.store(false, Ordering::SeqCst);
    let h = engine
        .submit(common::Flaky {
            text: "again".into(),
        })
        .await
        .unwrap();
    assert!(h.join().await.unwrap().is_err());
    fix.0.store(true, Ordering::SeqCst);
    let a = post(&app, "/failed/retry-all", "type=flaky&since=60").await;
    assert_eq!(a.location.matches("r=").count(), 1, "one request");
    let page = fate(&app, &a.location, "applied", None).await;
    assert!(
        page.contains("<td>1</td>") || page.contains("1 "),
        "its result: {page}"
    );
    assert!(h.join().await.unwrap().is_ok(), "retried by the engine");

    // Pause, seen on the queues page and the overview, then resume.
    assert_eq!(
        engine
            .submit(Ping { n: 0 })
            .await
            .unwrap()
            .join()
            .await
            .unwrap()
            .unwrap(),
        0
    );
    let a = post(&app, "/queues/ping/pause", "").await;
    fate(&app, &a.location, "applied", None).await;
    let paused_row = "<td class=\"paused\"><span class=\"state paused\">";
    common::eventually("ping shows paused", async || {
        get(&app, "/queues").await.body.contains(paused_row)
    })
    .await;
    assert!(get(&app, "/").await.body.contains(paused_row));
    let held = engine.submit(Ping { n: 7 }).await.unwrap();
    let a = post(&app, "/queues/ping/resume", "").await;
    fate(&app, &a.location, "applied", None).await;
    assert_eq!(held.join().await.unwrap().unwrap(), 7, "runs once resumed");
    assert!(!get(&app, "/queues").await.body.contains(paused_row));

    // Submit: taken, refused with the engine's reason, or bad input.
    let a = post(&app, "/submit", "type=ping&payload=%7B%22n%22%3A5%7D").await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    let a = post(&app, "/submit", "type=nosuchtype&payload=%7B%7D").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    assert!(a.body.contains("id=\"refusal\""), "{}", a.body);
    let a = post(&app, "/submit", "type=ping&payload=%7Bnot+json").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.body.contains("id=\"refusal\""));
    let a = post(&app, "/submit", "type=ping&payload=%7B%7D&run_at=yesterday").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);

    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_ids_cursors_and_filters_are_4xx_pages_and_read_only_and_auth_hold() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let h = engine
        .submit(common::Flaky { text: "x".into() })
        .await
        .unwrap();
    assert!(h.join().await.unwrap().is_err());
    let failed = h.id().to_string();
    let app = router(dir.path()).await;
    for (path, status) in [
        ("/jobs/01NOSUCHJOB0000000000000000", StatusCode::NOT_FOUND),
        ("/jobs/%3Cscript%3E", StatusCode::NOT_FOUND),
        ("/jobs/a.b", StatusCode::NOT_FOUND),
        ("/jobs?q=nothing-like-it", StatusCode::NOT_FOUND),
        ("/batches/nosuch", StatusCode::NOT_FOUND),
        ("/batches/%2E%2E", StatusCode::NOT_FOUND),
        ("/workflows/nosuch", StatusCode::NOT_FOUND),
        ("/workflows/%3Cscript%3E", StatusCode::NOT_FOUND),
        ("/workflows?after=a%3Cb", StatusCode::BAD_REQUEST),
        ("/no/such/page", StatusCode::NOT_FOUND),
        ("/jobs?after=garbage", StatusCode::BAD_REQUEST),
        ("/jobs?after=live:x:y:z", StatusCode::BAD_REQUEST),
        ("/jobs?state=bogus", StatusCode::BAD_REQUEST),
        ("/jobs?shard=9", StatusCode::BAD_REQUEST),
        ("/failed?since=abc", StatusCode::BAD_REQUEST),
        ("/requests?r=nope", StatusCode::BAD_REQUEST),
        ("/requests?r=0:a%3Cb:", StatusCode::BAD_REQUEST),
        ("/requests", StatusCode::BAD_REQUEST),
    ] {
        let a = get(&app, path).await;
        assert_eq!(a.status, status, "{path}: {}", a.body);
        assert!(a.body.contains("<main>"), "{path}: an error page");
        assert!(!a.body.contains("<script>"), "{path}");
    }
    for (path, form) in [
        ("/failed/retry", ""),
        ("/failed/retry", "id=a%3Cb"),
        ("/failed/retry-all", "type=flaky&since=-1"),
    ] {
        assert_eq!(
            post(&app, path, form).await.status,
            StatusCode::BAD_REQUEST,
            "{path} {form}"
        );
    }
    assert_eq!(
        post(&app, "/jobs/a%3Cb/retry", "").await.status,
        StatusCode::NOT_FOUND
    );

    // From another site: refused.
    for (name, value) in [
        ("sec-fetch-site", "cross-site"),
        ("origin", "http://evil.example"),
    ] {
        let req = Request::post(format!("/jobs/{failed}/retry"))
            .header(name, value)
            .header(header::HOST, "127.0.0.1:8080")
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            send(&app, req).await.status,
            StatusCode::FORBIDDEN,
            "{name}: {value}"
        );
    }

    // Read-only: no button drawn, every POST 403.
    let ro = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .read_only(true),
    );
    let page = get(&ro, &format!("/jobs/{failed}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("state failed"));
    assert!(!page.body.contains("<button"), "no button when read-only");
    for path in ["/", "/failed", "/queues", "/jobs"] {
        let b = get(&ro, path).await.body;
        assert!(
            !b.contains("method=\"post\""),
            "{path}: an action when read-only"
        );
        assert!(!b.contains(">Retry"), "{path}");
    }
    assert_eq!(get(&ro, "/submit").await.status, StatusCode::FORBIDDEN);
    for path in [
        format!("/jobs/{failed}/retry"),
        format!("/jobs/{failed}/cancel"),
        "/failed/retry-all".into(),
        "/queues/flaky/pause".into(),
        "/submit".into(),
    ] {
        assert_eq!(
            post(&ro, &path, "type=flaky").await.status,
            StatusCode::FORBIDDEN,
            "{path}"
        );
    }

    // Credentials: a bearer token, basic auth.
    let with_token = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .auth(Auth::Bearer("t0ken".into())),
    );
    assert_eq!(get(&with_token, "/").await.status, StatusCode::UNAUTHORIZED);
    let req = |auth: &str| {
        Request::get("/")
            .header(header::AUTHORIZATION, auth)
            .body(Body::empty())
            .unwrap()
    };
    assert_eq!(
        send(&with_token, req("Bearer wrong")).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&with_token, req("Bearer t0ken")).await.status,
        StatusCode::OK
    );
    let basic = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .auth(Auth::Basic {
                user: "ops".into(),
                password: "pw".into(),
            }),
    );
    let a = get(&basic, "/").await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert!(a.headers.contains_key(header::WWW_AUTHENTICATE));
    // base64("ops:pw")
    assert_eq!(
        send(&basic, req("Basic b3BzOnB3")).await.status,
        StatusCode::OK
    );

    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_batch_shows_its_progress_items_and_failed_keys_under_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let dashboard = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .base_path("/admin/jobs"),
    );
    let app = Router::new().nest("/admin/jobs", dashboard);
    let batch = engine.batch::<common::Double>("b1").unwrap();
    let report = batch.run(0..60u64).await.unwrap();
    assert_eq!((report.succeeded, report.failed), (59, 1));
    common::eventually("the batch is settled on its page", async || {
        get(&app, "/admin/jobs/batches/b1")
            .await
            .body
            .contains("60 / 60")
    })
    .await;
    let page = get(&app, "/admin/jobs/batches/b1").await;
    assert!(page.body.contains("id=\"failed-keys\""));
    assert!(page.body.contains("item-13"));
    assert!(
        page.body.contains("unlucky &lt;b&gt;13&lt;/b&gt;"),
        "the item's error as text"
    );
    assert!(
        page.body.contains("href=\"/admin/jobs/batches/b1?after="),
        "a next page of items"
    );
    let list = get(&app, "/admin/jobs/batches").await.body;
    assert!(
        list.contains("href=\"/admin/jobs/batches/b1\""),
        "links under the prefix"
    );
    assert!(list.contains("calls=60"), "the cost");
    assert!(list.contains("role=\"progressbar\""));
    let overview = get(&app, "/admin/jobs").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert!(overview.body.contains("src=\"/admin/jobs/assets/app.js\""));
    engine.shutdown().await.unwrap();
}
