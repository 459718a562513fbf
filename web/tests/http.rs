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
use common::{EVIL, Fix, LIMIT, Ping, within};
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
    common::eventually(&format!("the request is {fate}"), LIMIT, async || {
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
    assert_eq!(id, gaffer_layout::keys::keyed_run_id(EVIL));
    common::eventually("the job failed", LIMIT, async || {
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
    common::eventually("the periodic job is listed", LIMIT, async || {
        let p = get(&app, "/periodic").await.body;
        p.contains("rare-ping") && p.contains("every 365000d")
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
    common::eventually("the dashboard sees the scheduled job", LIMIT, async || {
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
    common::eventually("the chart counts all three", LIMIT, async || {
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
    common::eventually(
        "the dashboard lists the three failures",
        LIMIT,
        async || {
            let b = get(&app, "/failed?type=flaky").await.body;
            ids.iter().all(|id| b.contains(id.as_str()))
        },
    )
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
    common::eventually("the dashboard sees the new failure", LIMIT, async || {
        let a = post(&app, "/failed/retry-all", "type=flaky&since=60").await;
        assert_eq!(a.status, StatusCode::OK, "it asks first");
        a.body.contains("<strong id=\"will-retry\">1</strong>")
    })
    .await;
    let a = post(&app, "/failed/retry-all", "type=flaky&since=60&confirm=yes").await;
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
    common::eventually("ping shows paused", LIMIT, async || {
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
    common::eventually("the batch is settled on its page", LIMIT, async || {
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

/// A GET that names the host it was sent to (as every browser does).
async fn get_on(app: &Router, host: &str, path: &str) -> Answer {
    let req = Request::get(path)
        .header(header::HOST, host)
        .body(Body::empty())
        .unwrap();
    send(app, req).await
}

/// The number in `(N)` after the tab `name` of the jobs page.
fn tab_count(page: &str, name: &str) -> String {
    let at = page
        .find(&format!(">{name} ("))
        .unwrap_or_else(|| panic!("no tab {name} in {page}"));
    let rest = &page[at + name.len() + 3..];
    rest[..rest.find(')').unwrap()].to_string()
}

/// The rows of the table `#id` (its header row not counted).
fn rows_of(page: &str, id: &str) -> usize {
    match page.find(&format!("<table id=\"{id}\"")) {
        None => 0,
        Some(at) => {
            let table = &page[at..at + page[at..].find("</table>").unwrap()];
            table.matches("<tr").count() - 1
        }
    }
}

/// Every `href` of the page that starts with `prefix`.
fn hrefs(page: &str, prefix: &str) -> Vec<String> {
    page.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter(|h| h.starts_with(prefix))
        .map(|h| h.replace("&amp;", "&"))
        .collect()
}

#[tokio::test]
async fn every_response_forbids_framing_sniffing_and_any_script_or_style_but_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    let batch = engine.batch::<common::Double>("framed").unwrap();
    batch.run(0..5u64).await.unwrap();
    let refused = Request::post("/queues/ping/pause")
        .header("sec-fetch-site", "cross-site")
        .body(Body::empty())
        .unwrap();
    let mut answers = Vec::new();
    for path in [
        "/",
        "/jobs",
        "/batches",
        "/batches/framed",
        "/queues",
        "/assets/app.js",
        "/no/such/page",
    ] {
        answers.push((path.to_string(), get(&app, path).await));
    }
    answers.push(("a refused POST".into(), send(&app, refused).await));
    for (what, a) in &answers {
        let h = |name: &str| {
            a.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_else(|| panic!("{what}: no {name}"))
                .to_string()
        };
        let csp = h("content-security-policy");
        for directive in [
            "frame-ancestors 'none'",
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
        ] {
            assert!(csp.contains(directive), "{what}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
        assert_eq!(h("x-frame-options"), "DENY", "{what}");
        assert_eq!(h("x-content-type-options"), "nosniff", "{what}");
        assert_eq!(h("referrer-policy"), "same-origin", "{what}");
        // Nothing inline the policy would block: no style attribute, no
        // script without a source, no event handler attribute.
        assert!(!a.body.contains(" style="), "{what}: an inline style");
        assert!(!a.body.contains("<style"), "{what}: a style element");
        assert!(!a.body.contains("<script>"), "{what}: an inline script");
        assert!(!a.body.contains(" onclick="), "{what}: a handler");
    }
    // An icon, so that no page asks for one in vain.
    let page = get(&app, "/").await.body;
    let icon = hrefs(&page, "/assets/icon");
    assert_eq!(icon.len(), 1, "one icon link: {page}");
    for path in [icon[0].as_str(), "/favicon.ico"] {
        let a = get(&app, path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert_eq!(a.headers[header::CONTENT_TYPE], "image/svg+xml", "{path}");
        assert!(a.body.starts_with("<svg"), "{path}");
    }
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_request_for_a_host_the_dashboard_is_not_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    engine
        .submit(Ping { n: 1 })
        .await
        .unwrap()
        .join()
        .await
        .unwrap()
        .unwrap();
    let app = router(dir.path()).await;
    for host in ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "10.0.0.7"] {
        assert_eq!(
            get_on(&app, host, "/").await.status,
            StatusCode::OK,
            "{host}"
        );
    }
    // A DNS-rebinding page: its own name, now pointing at this server.
    for host in [
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
    ] {
        let a = get_on(&app, host, "/queues").await;
        assert_eq!(a.status, StatusCode::MISDIRECTED_REQUEST, "{host}");
        assert!(a.body.contains("--allowed-host"), "{}", a.body);
        assert!(!a.body.contains("data-queue"), "no data for {host}");
    }
    // Its POST: same-origin to the browser, Origin and Host the rebound
    // name. Refused, and nothing is paused.
    let req = Request::post("/queues/ping/pause")
        .header(header::HOST, "evil.example:8080")
        .header("origin", "http://evil.example:8080")
        .header("sec-fetch-site", "same-origin")
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        send(&app, req).await.status,
        StatusCode::MISDIRECTED_REQUEST
    );
    let a = post(&app, "/queues/ping/pause", "").await;
    fate(&app, &a.location, "applied", None).await;
    let paused = "<td class=\"paused\"><span class=\"state paused\">";
    common::eventually("ping shows paused", LIMIT, async || {
        get(&app, "/queues").await.body.contains(paused)
    })
    .await;
    let page = get(&app, "/queues").await.body;
    assert_eq!(
        page.matches(paused).count(),
        1,
        "only the request from the dashboard: {page}"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_refused_request_is_answered_and_never_shown_as_user_work() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    for _ in 0..3 {
        let a = post(&app, "/submit", "type=nosuchtype&payload=%7B%7D").await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.body);
    }
    let a = post(&app, "/jobs/01NOSUCHJOB0000000000000000/cancel", "").await;
    fate(&app, &a.location, "refused", None).await;
    let failed = get(&app, "/failed").await.body;
    assert!(failed.contains("No dead letters."), "{failed}");
    let dead = get(&app, "/jobs?state=dead").await.body;
    assert_eq!(rows_of(&dead, "jobs"), 0, "{dead}");
    assert_eq!(tab_count(&dead, "dead"), "0", "{dead}");
    for path in ["/", "/queues"] {
        let page = get(&app, path).await.body;
        assert!(
            !page.contains("data-queue=\"client requests\""),
            "{path}: {page}"
        );
        assert!(
            !page.contains("refused by an older engine"),
            "{path}: {page}"
        );
    }
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_link_to_a_batch_item_leads_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    let batch = engine.batch::<common::Double>("linked").unwrap();
    let report = batch.run(0..20u64).await.unwrap();
    assert_eq!((report.succeeded, report.failed), (19, 1));
    common::eventually("the batch is settled on its page", LIMIT, async || {
        get(&app, "/batches/linked").await.body.contains("20 / 20")
    })
    .await;
    let page = get(&app, "/batches/linked").await.body;
    let items: Vec<String> = hrefs(&page, "/batches/linked/item");
    assert_eq!(items.len(), 20, "a link per settled item: {page}");
    for href in &items {
        let a = get(&app, href).await;
        assert_eq!(a.status, StatusCode::OK, "{href}: {}", a.body);
        assert!(a.body.contains("id=\"job-state\""), "{href}");
    }
    let failed_item = get(&app, "/batches/linked/item?key=item-13").await.body;
    assert!(failed_item.contains("state failed"), "{failed_item}");
    assert!(
        failed_item.contains("unlucky &lt;b&gt;13&lt;/b&gt;"),
        "{failed_item}"
    );
    let ok_item = get(&app, "/batches/linked/item?key=item-2").await.body;
    assert!(ok_item.contains("state succeeded"), "{ok_item}");
    assert!(ok_item.contains("<pre id=\"output\">4</pre>"), "{ok_item}");
    // The dead item on Jobs → dead and on Failed: its link leads to it.
    for list in ["/jobs?state=dead", "/failed"] {
        let page = get(&app, list).await.body;
        let links: Vec<String> = hrefs(&page, "/")
            .into_iter()
            .filter(|h| h.starts_with("/jobs/") || h.contains("/item?"))
            .collect();
        assert_eq!(links.len(), 1, "{list}: the dead item: {page}");
        let a = get(&app, &links[0]).await;
        assert_eq!(
            a.status,
            StatusCode::OK,
            "{list} → {}: {}",
            links[0],
            a.body
        );
        assert!(a.body.contains("item-13"), "{}", a.body);
    }
    assert_eq!(
        get(&app, "/batches/linked/item?key=no-such-key")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, "/batches/nosuch/item?key=a").await.status,
        StatusCode::NOT_FOUND
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_retry_button_drawn_is_one_the_engine_applies() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    // A failed job, a failed batch item, a workflow whose first step
    // failed, a refused client request, and a waiting job cancelled.
    let job = engine
        .submit(common::Flaky { text: "job".into() })
        .await
        .unwrap();
    assert!(job.join().await.unwrap().is_err());
    let batch = engine.batch::<common::Double>("buttons").unwrap();
    batch.run(10..15u64).await.unwrap();
    let flow = gaffer::workflow::Workflow::new("buttons")
        .step(
            "first",
            common::Flaky {
                text: "step".into(),
            },
        )
        .step_after("second", Ping { n: 2 }, ["first"]);
    let wf = engine.submit_workflow(flow).await.unwrap();
    assert!(wf.join().await.unwrap().is_err());
    let a = post(&app, "/submit", "type=nosuchtype&payload=%7B%7D").await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY);
    let waiting = engine.submit(common::Approve { order: 1 }).await.unwrap();
    common::eventually("the job waits", LIMIT, async || {
        engine.status(waiting.id()).await.unwrap() == gaffer::job::JobState::Waiting
    })
    .await;
    engine.cancel(waiting.id()).await.unwrap();
    common::eventually(
        "the dashboard lists the job, the item and the step",
        LIMIT,
        async || {
            let b = get(&app, "/failed").await.body;
            b.contains(job.id())
                && b.contains(">buttons</a> / item-3")
                && b.contains("Retry workflow")
        },
    )
    .await;
    fix.0.store(true, Ordering::SeqCst);

    let page = get(&app, "/failed").await.body;
    // The item: a link to its batch, nothing to retry it alone.
    let item_row = page
        .split("<tr")
        .find(|r| r.contains(">buttons</a> / item-3"))
        .and_then(|r| r.split("</tr>").next())
        .unwrap();
    assert!(!item_row.contains("<button"), "{item_row}");
    assert!(!item_row.contains("type=\"checkbox\""), "{item_row}");
    assert!(item_row.contains("href=\"/batches/buttons\""), "{item_row}");
    // Every Retry drawn is applied when clicked.
    let ones: Vec<String> = page
        .split("name=\"one\" value=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().to_string())
        .collect();
    assert!(ones.contains(&job.id().to_string()), "{page}");
    for id in &ones {
        let a = post(&app, "/failed/retry", &format!("one={id}")).await;
        fate(&app, &a.location, "applied", None).await;
    }
    // The workflow's: the workflow is retried.
    let actions: Vec<String> = page
        .split("formaction=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().to_string())
        .collect();
    assert_eq!(actions, [format!("/workflows/{}/retry", wf.id())], "{page}");
    let a = post(&app, &actions[0], "").await;
    fate(&app, &a.location, "applied", None).await;
    assert!(
        within(wf.join()).await.unwrap().is_ok(),
        "the workflow ran on"
    );
    // A job's page draws the same.
    let step = gaffer::workflow::step_id(wf.id(), "first");
    let page = get(&app, &format!("/jobs/{step}")).await.body;
    assert!(!page.contains("id=\"retry\""), "{page}");
    let page = get(&app, &format!("/jobs/{}", waiting.id())).await.body;
    assert!(page.contains("state cancelled"), "{page}");
    if page.contains("id=\"retry\"") {
        let a = post(&app, &format!("/jobs/{}/retry", waiting.id()), "").await;
        fate(&app, &a.location, "applied", None).await;
    }
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn retry_all_says_what_it_will_retry_and_asks_first() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    for i in 0..2 {
        let h = engine
            .submit(common::Flaky {
                text: format!("r{i}"),
            })
            .await
            .unwrap();
        assert!(h.join().await.unwrap().is_err());
    }
    let flow = gaffer::workflow::Workflow::new("all").step(
        "only",
        common::Flaky {
            text: "step".into(),
        },
    );
    let wf = engine.submit_workflow(flow).await.unwrap();
    assert!(wf.join().await.unwrap().is_err());
    common::eventually("the dashboard sees the three failures", LIMIT, async || {
        get(&app, "/failed")
            .await
            .body
            .matches("<tr data-id=")
            .count()
            == 3
    })
    .await;
    let failed = get(&app, "/failed").await.body;
    assert!(!failed.contains("action=\"/failed/retry-all\" method=\"post\""));
    for page in [
        get(&app, "/failed/retry-all?type=flaky").await,
        post(&app, "/failed/retry-all", "type=flaky").await,
    ] {
        assert_eq!(page.status, StatusCode::OK, "asks first: {}", page.location);
        assert!(
            page.body.contains("<strong id=\"will-retry\">2</strong>"),
            "{}",
            page.body
        );
        assert!(page.body.contains("workflow steps"), "{}", page.body);
        assert!(page.body.contains("Batch items"), "{}", page.body);
        assert!(page.body.contains("name=\"confirm\" value=\"yes\""));
    }
    // Every type: the same two, pipelines not among the types.
    let every = get(&app, "/failed/retry-all").await.body;
    assert!(
        every.contains("<strong id=\"will-retry\">2</strong>"),
        "{every}"
    );
    assert!(!every.contains("data-type=\"double\""), "{every}");
    fix.0.store(true, Ordering::SeqCst);
    let a = post(&app, "/failed/retry-all", "type=flaky&confirm=yes").await;
    assert_eq!(a.status, StatusCode::SEE_OTHER);
    let page = fate(&app, &a.location, "applied", None).await;
    assert!(page.contains("retried 2 failed"), "{page}");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn each_count_counts_what_its_list_shows() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    // Batch items only: none of them is a job of the succeeded list.
    let batch = engine.batch::<common::Double>("counted").unwrap();
    batch.run(0..30u64).await.unwrap();
    // A job that failed once (transiently) before it succeeded.
    let twice = engine.submit(common::Twice).await.unwrap();
    assert_eq!(twice.join().await.unwrap().unwrap(), 2);
    let h = engine
        .submit(common::Flaky { text: "f".into() })
        .await
        .unwrap();
    assert!(h.join().await.unwrap().is_err());
    common::eventually("the dashboard sees every job end", LIMIT, async || {
        let page = get(&app, "/jobs?state=failed").await.body;
        rows_of(&page, "jobs") == 1
            && rows_of(&get(&app, "/jobs?state=succeeded").await.body, "jobs") == 1
            && get(&app, "/").await.body.contains("data-queue=\"double\"")
    })
    .await;
    for state in [
        "succeeded",
        "failed",
        "cancelled",
        "dead",
        "queued",
        "running",
    ] {
        let page = get(&app, &format!("/jobs?state={state}")).await.body;
        let listed = rows_of(&page, "jobs");
        assert_eq!(
            tab_count(&page, state),
            listed.to_string(),
            "{state}: the count and the list: {page}"
        );
    }
    let page = get(&app, "/jobs?state=succeeded&type=twice").await.body;
    assert_eq!(tab_count(&page, "succeeded"), "1", "{page}");
    // Costs read as written: thirty tenths are 3.
    let list = get(&app, "/batches").await.body;
    assert!(list.contains("usd=3"), "{list}");
    assert!(!list.contains("000000"), "{list}");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_retried_job_keeps_its_earlier_failure_and_its_payload() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    let h = engine
        .submit(common::Flaky {
            text: "remember me".into(),
        })
        .await
        .unwrap();
    assert!(h.join().await.unwrap().is_err());
    fix.0.store(true, Ordering::SeqCst);
    let a = post(&app, &format!("/jobs/{}/retry", h.id()), "").await;
    fate(&app, &a.location, "applied", Some("succeeded")).await;
    let page = get(&app, &format!("/jobs/{}", h.id())).await.body;
    assert!(page.contains("state succeeded"), "{page}");
    let attempts = &page[page.find("id=\"attempts\"").expect("its attempts")..];
    assert!(
        attempts.contains("broke on remember me"),
        "the earlier failure: {page}"
    );
    assert!(page.contains("id=\"payload\""), "its payload: {page}");
    assert!(page.contains("remember me"), "{page}");
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_waiting_job_names_its_signal_and_its_timeout_and_takes_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    let h = engine.submit(common::Approve { order: 7 }).await.unwrap();
    common::eventually("the page shows it waiting", LIMIT, async || {
        get(&app, &format!("/jobs/{}", h.id()))
            .await
            .body
            .contains("state waiting")
    })
    .await;
    let page = get(&app, &format!("/jobs/{}", h.id())).await.body;
    assert!(
        page.contains("<dd id=\"waits-for\">the signal <code>approval</code></dd>"),
        "{page}"
    );
    assert!(page.contains("Times out at"), "{page}");
    assert!(!page.contains("Run at"), "{page}");
    assert!(page.contains("id=\"signal\""), "a form: {page}");
    assert!(page.contains("id=\"cancel\""), "{page}");
    let ro = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .read_only(true),
    );
    assert!(
        !get(&ro, &format!("/jobs/{}", h.id()))
            .await
            .body
            .contains("id=\"signal\"")
    );
    let path = format!("/jobs/{}/signal", h.id());
    assert_eq!(
        post(&ro, &path, "name=approval&payload=null").await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        post(&app, &path, "name=approval&payload=%7Bnope")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let a = post(
        &app,
        &path,
        &format!("name=approval&payload={}", enc(r#"{"by":"ana"}"#)),
    )
    .await;
    assert_eq!(a.status, StatusCode::SEE_OTHER, "{}", a.body);
    fate(&app, &a.location, "applied", Some("succeeded")).await;
    assert_eq!(h.join().await.unwrap().unwrap(), "order 7 approved by ana");
    engine.shutdown().await.unwrap();
}

/// A job of a type fair over the values of its `tenant` header.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Tenanted {
    n: u32,
}

impl gaffer::Job for Tenanted {
    const NAME: &'static str = "tenanted";
    type Output = u32;
    type Error = std::io::Error;

    async fn run(&self, _ctx: gaffer::JobContext) -> Result<u32, std::io::Error> {
        Ok(self.n)
    }
}

/// The `<tr>` of the value `value` on a queue page (its `data-value`).
fn value_row<'a>(page: &'a str, value: &str) -> &'a str {
    let at = page
        .find(&format!("<tr data-value=\"{value}\""))
        .unwrap_or_else(|| panic!("no row of {value}: {page}"));
    let end = page[at..].find("</tr>").map_or(page.len(), |e| at + e);
    &page[at..end]
}

/// #37 §4: a fair type's queue page lists its values with the most ready
/// jobs, each with its oldest ready job's age and a pause button that
/// holds that value while the others run; read-only, no button and a 403.
#[tokio::test]
async fn a_queue_page_shows_the_top_values_and_pauses_one() {
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
    engine.pause(<Tenanted as gaffer::Job>::NAME).await.unwrap();
    let mut handles = Vec::new();
    for (tenant, n) in [("acme", 3), ("globex", 1), (EVIL, 1)] {
        for i in 0..n {
            let mut opts = gaffer::SubmitOptions::default();
            opts.headers.insert("tenant".into(), tenant.into());
            let h = engine.submit_with(Tenanted { n: i }, opts).await.unwrap();
            handles.push((tenant, h));
        }
    }
    let app = router(dir.path()).await;
    let queues = get(&app, "/queues").await;
    assert!(
        queues.body.contains("href=\"/queues/tenanted/values\""),
        "{}",
        queues.body
    );
    // Each queue's oldest ready job's age (#39 §6), in the rows of the
    // type's queues that hold ready jobs.
    let cell = "<td class=\"n oldest\">";
    assert!(
        queues
            .body
            .match_indices(cell)
            .any(|(at, _)| queues.body[at + cell.len()..].starts_with(|c: char| c.is_ascii_digit())),
        "{}",
        queues.body
    );
    let page = get(&app, "/queues/tenanted/values").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(!page.body.contains(EVIL), "escaped");
    let acme = value_row(&page.body, "acme");
    assert!(acme.contains("<td class=\"n ready\">3</td>"), "{acme}");
    assert!(acme.contains("<td class=\"oldest\">"), "{acme}");
    assert!(
        acme.contains("action=\"/queues/tenanted/values/pause\"")
            && acme.contains("name=\"value\" value=\"acme\""),
        "{acme}"
    );
    // Most ready first: acme's row comes before globex's.
    assert!(
        page.body.find("data-value=\"acme\"") < page.body.find("data-value=\"globex\""),
        "{}",
        page.body
    );
    // Top 1: the rest summed.
    let top1 = get(&app, "/queues/tenanted/values?top=1").await;
    assert!(top1.body.contains("id=\"values-rest\""), "{}", top1.body);
    assert!(top1.body.contains("(2 more values)"), "{}", top1.body);
    assert_eq!(
        get(&app, "/queues/tenanted/values?top=0").await.status,
        StatusCode::BAD_REQUEST
    );

    // The button's request: acme paused; the type resumed, the others run.
    let a = post(
        &app,
        "/queues/tenanted/values/pause",
        "header=tenant&value=acme",
    )
    .await;
    fate(&app, &a.location, "applied", None).await;
    common::eventually("acme shows paused", LIMIT, async || {
        let page = get(&app, "/queues/tenanted/values").await.body;
        let row = value_row(&page, "acme");
        row.contains("state paused") && row.contains("/values/resume")
    })
    .await;
    engine
        .resume(<Tenanted as gaffer::Job>::NAME)
        .await
        .unwrap();
    for (tenant, h) in &handles {
        if *tenant != "acme" {
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

    // Read-only: the page has no form, and the action is refused.
    let ro = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .read_only(true),
    );
    let page = get(&ro, "/queues/tenanted/values").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(value_row(&page.body, "acme").contains("state paused"));
    assert!(!page.body.contains("method=\"post\""), "{}", page.body);
    assert_eq!(
        post(
            &ro,
            "/queues/tenanted/values/resume",
            "header=tenant&value=acme"
        )
        .await
        .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        post(&app, "/queues/tenanted/values/pause", "header=tenant")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );

    // Resumed from its button: acme's jobs run.
    let a = post(
        &app,
        "/queues/tenanted/values/resume",
        "header=tenant&value=acme",
    )
    .await;
    fate(&app, &a.location, "applied", None).await;
    for (_, h) in &handles {
        assert!(h.join().await.unwrap().is_ok());
    }
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_sleeping_job_shows_until_when_and_a_snoozed_one_how_often() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let app = router(dir.path()).await;
    let nap = engine.submit(gaffer_testkit::jobs::Nap).await.unwrap();
    let snoozy = engine.submit(gaffer_testkit::jobs::Snoozy).await.unwrap();
    common::eventually("the page shows it asleep", LIMIT, async || {
        get(&app, &format!("/jobs/{}", nap.id()))
            .await
            .body
            .contains("Sleeping until")
    })
    .await;
    let page = get(&app, &format!("/jobs/{}", nap.id())).await.body;
    assert!(page.contains("state scheduled"), "{page}");
    assert!(page.contains("id=\"cancel\""), "{page}");
    common::eventually("the page shows it snoozed", LIMIT, async || {
        get(&app, &format!("/jobs/{}", snoozy.id()))
            .await
            .body
            .contains("<dd id=\"snoozes\">1 time</dd>")
    })
    .await;
    let page = get(&app, &format!("/jobs/{}", snoozy.id())).await.body;
    assert!(page.contains("state scheduled"), "{page}");
    assert!(!page.contains("Sleeping until"), "{page}");
    // A debounced run names its key and its open burst.
    let hourly =
        || gaffer::SubmitOptions::default().debounce("ping-<b>", Duration::from_secs(3600));
    let ping = engine.submit_with(Ping { n: 1 }, hourly()).await.unwrap();
    engine.submit_with(Ping { n: 2 }, hourly()).await.unwrap();
    common::eventually("the page names its key and its burst", LIMIT, async || {
        get(&app, &format!("/jobs/{}", ping.id())).await.body.contains(
            "<dd id=\"debounced\">the key <code>ping-&lt;b&gt;</code> (its burst open: 2 submissions so far)</dd>",
        )
    })
    .await;
    engine.shutdown().await.unwrap();
}
