//! The dashboard's workflow pages on a live engine: the list (state
//! counts, links, a page at a time) and a workflow's page (its steps in
//! dependency order with their states, each linked to its job), user data
//! escaped, bad ids and cursors as 4xx pages; a workflow's Retry and Cancel
//! buttons, each a request the engine carries out.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{EVIL, Fix, Flaky, LIMIT, Ping};
use gaffer::workflow::{Workflow, step_id};
use gaffer_web::WebConfig;
use tower::ServiceExt;

async fn get(app: &Router, path: &str) -> (StatusCode, String) {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .expect("the router answers");
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .expect("a body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// A POST as the dashboard's own form sends it; the status and where it
/// redirects to.
async fn post(app: &Router, path: &str) -> (StatusCode, String) {
    let req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .body(Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.expect("the router answers");
    let to = res
        .headers()
        .get(header::LOCATION)
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    (res.status(), to)
}

/// Wait until the page of workflow `id` shows it in `state`.
async fn until_state(app: &Router, id: &str, state: &str) -> String {
    let want = format!("id=\"workflow-state\"><span class=\"state {state}\">");
    let mut page = String::new();
    common::eventually(&format!("workflow {id} is {state}"), LIMIT, async || {
        page = get(app, &format!("/ops/workflows/{id}")).await.1;
        page.contains(&want)
    })
    .await;
    page
}

/// Where `needle` is in `hay` (it must be).
fn at(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("no {needle} in the page:\n{hay}"))
}

#[tokio::test]
async fn the_workflow_pages_show_each_step_in_order_linked_to_its_job() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    let flow = Workflow::new(EVIL)
        .id("wf-evil")
        .step("ping", Ping { n: 1 })
        .step_after(
            "flaky",
            Flaky {
                text: EVIL.to_string(),
            },
            ["ping"],
        )
        .cleanup_after("tidy", Ping { n: 2 }, ["flaky"]);
    let flow = engine.submit_workflow(flow).await.unwrap();
    assert_eq!(flow.join().await.unwrap().unwrap_err().step, "flaky");
    // Enough more for a second page of the list.
    for n in 0..50 {
        let one = Workflow::new("one")
            .id(format!("wf-p-{n:02}"))
            .step("only", Ping { n });
        engine.submit_workflow(one).await.unwrap();
    }
    let dashboard = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(dir.path()))
            .await
            .unwrap()
            .base_path("/ops"),
    );
    let app = Router::new().nest("/ops", dashboard);

    common::eventually("the list shows the ended workflow", LIMIT, async || {
        let (_, list) = get(&app, "/ops/workflows").await;
        list.contains("<tr data-workflow=\"wf-evil\">")
            && list[at(&list, "data-workflow=\"wf-evil\"")..].contains("class=\"state failed\"")
    })
    .await;
    let (status, list) = get(&app, "/ops/workflows").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains("href=\"/ops/workflows/wf-evil\""), "linked");
    assert!(list.contains("href=\"/ops/workflows\""), "a nav entry");
    assert!(!list.contains("<img src=x"), "the name unescaped");
    assert!(
        list.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the name as text"
    );
    // 51 workflows: the first 50, then the next page from the 50th.
    assert!(list.contains("wf-p-48") && !list.contains("wf-p-49"));
    assert!(
        list.contains("href=\"/ops/workflows?after=wf-p-48\""),
        "a next page"
    );
    let (status, second) = get(&app, "/ops/workflows?after=wf-p-48").await;
    assert_eq!(status, StatusCode::OK);
    assert!(second.contains("wf-p-49") && !second.contains("wf-evil"));

    let (status, page) = get(&app, "/ops/workflows/wf-evil").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(!page.contains("<img src=x") && !page.contains("<script>alert"));
    let (ping, flaky, tidy) = (
        at(&page, "id=\"step-ping\""),
        at(&page, "id=\"step-flaky\""),
        at(&page, "id=\"step-tidy\""),
    );
    assert!(ping < flaky && flaky < tidy, "dependency order");
    let row = |from: usize| &page[from..from + page[from..].find("</tr>").unwrap()];
    assert!(
        row(ping).contains("class=\"state succeeded\""),
        "{}",
        row(ping)
    );
    assert!(
        row(flaky).contains("class=\"state failed\""),
        "{}",
        row(flaky)
    );
    assert!(row(flaky).contains("href=\"#step-ping\""), "its dependency");
    assert!(
        row(tidy).contains("class=\"state succeeded\""),
        "{}",
        row(tidy)
    );
    assert!(row(tidy).contains("(cleanup)"), "{}", row(tidy));
    for name in ["ping", "flaky", "tidy"] {
        let job = format!("href=\"/ops/jobs/{}\"", step_id("wf-evil", name));
        assert!(page.contains(&job), "{name}'s job linked");
    }
    assert!(
        page.contains("id=\"workflow-state\"><span class=\"state failed\">"),
        "the workflow's state"
    );
    // The step's job page answers (the link works).
    let (status, job) = get(&app, &format!("/ops/jobs/{}", step_id("wf-evil", "flaky"))).await;
    assert_eq!(status, StatusCode::OK);
    assert!(job.contains("state failed"));
    let (status, live) = get(&app, "/ops/workflows/wf-evil?fragment=1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(live.contains("id=\"steps\"") && !live.contains("<html"));

    for (path, want) in [
        ("/ops/workflows/nosuch", StatusCode::NOT_FOUND),
        ("/ops/workflows/%3Cscript%3E", StatusCode::NOT_FOUND),
        ("/ops/workflows/a.b", StatusCode::NOT_FOUND),
        ("/ops/workflows?after=a%3Cb", StatusCode::BAD_REQUEST),
        ("/ops/workflows?shard=7", StatusCode::BAD_REQUEST),
    ] {
        let (status, body) = get(&app, path).await;
        assert_eq!(status, want, "{path}: {body}");
        assert!(body.contains("<main>"), "{path}: an error page");
        assert!(!body.contains("<script>"), "{path}");
    }

    // Ended with a failed step: Retry, no Cancel. Retried once the bug is
    // fixed, the failed step runs again and the workflow succeeds.
    assert!(page.contains("id=\"retry-workflow\"") && !page.contains("id=\"cancel-workflow\""));
    for path in ["/ops/workflows/nosuch/retry", "/ops/workflows/a.b/cancel"] {
        assert_eq!(post(&app, path).await.0, StatusCode::NOT_FOUND, "{path}");
    }
    fix.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let (status, to) = post(&app, "/ops/workflows/wf-evil/retry").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(to.starts_with("/ops/requests?r="), "{to}");
    let page = until_state(&app, "wf-evil", "succeeded").await;
    assert!(
        !page.contains("id=\"retry-workflow\""),
        "nothing left to retry"
    );
    let (_, fate) = get(&app, &to).await;
    assert!(
        // `flaky`, and `tidy`, which ran after it failed and runs again
        // after its retry.
        fate.contains("workflow `wf-evil` retried (2 steps set back)"),
        "{fate}"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_running_workflow_is_cancelled_from_its_page() {
    let dir = tempfile::tempdir().unwrap();
    let fix = Arc::new(Fix::default());
    let engine = common::engine(dir.path(), &fix, Duration::from_millis(1)).await;
    // Its first step's type is paused: the step stays queued, the next one
    // blocked behind it.
    engine.pause("ping").await.unwrap();
    let flow = Workflow::new("held")
        .id("wf-held")
        .step("ping", Ping { n: 1 })
        .step_after("after", Ping { n: 2 }, ["ping"]);
    let flow = engine.submit_workflow(flow).await.unwrap();
    let app = Router::new().nest(
        "/ops",
        gaffer_web::router(
            WebConfig::open(&gaffer::Store::local_dir(dir.path()))
                .await
                .unwrap()
                .base_path("/ops"),
        ),
    );
    let page = until_state(&app, "wf-held", "running").await;
    assert!(page.contains("id=\"cancel-workflow\"") && !page.contains("id=\"retry-workflow\""));

    let (status, to) = post(&app, "/ops/workflows/wf-held/cancel").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let page = until_state(&app, "wf-held", "cancelled").await;
    assert!(
        !page.contains("id=\"cancel-workflow\""),
        "cancelled already"
    );
    assert!(
        page.contains("id=\"retry-workflow\""),
        "its steps can be retried"
    );
    let (_, fate) = get(&app, &to).await;
    assert!(
        fate.contains("workflow `wf-held` cancelled (2 steps"),
        "{fate}"
    );
    let err = flow.join().await.unwrap().unwrap_err();
    assert!(err.error.is_cancelled(), "{err:?}");

    // A read-only dashboard shows neither button and refuses the request.
    let ro = Router::new().nest(
        "/ops",
        gaffer_web::router(
            WebConfig::open(&gaffer::Store::local_dir(dir.path()))
                .await
                .unwrap()
                .base_path("/ops")
                .read_only(true),
        ),
    );
    let (_, page) = get(&ro, "/ops/workflows/wf-held").await;
    assert!(!page.contains("retry-workflow") && !page.contains("cancel-workflow"));
    assert_eq!(
        post(&ro, "/ops/workflows/wf-held/retry").await.0,
        StatusCode::FORBIDDEN
    );
    engine.shutdown().await.unwrap();
}
