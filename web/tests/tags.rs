//! The dashboard's tag search: `/jobs?tag=T` lists a tag's jobs, `tag:T`
//! in the jobs page's search leads there, a job's page shows its tags
//! (each a link to its listing), a tag no job can have is a 400.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{Fix, Ping, within};
use gaffer::SubmitOptions;
use gaffer_web::WebConfig;
use tower::ServiceExt;

async fn get(app: &Router, path: &str) -> (StatusCode, String, String) {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .expect("the router answers");
    let status = res.status();
    let location = res
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let bytes = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .unwrap();
    (
        status,
        location,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

#[tokio::test]
async fn a_tags_jobs_are_listed_and_a_jobs_page_shows_its_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = common::engine(tmp.path(), &Arc::new(Fix::default()), Duration::ZERO).await;
    let tagged = engine
        .submit_with(
            Ping { n: 1 },
            SubmitOptions::default().tags(["order:42", "customer:acme"]),
        )
        .await
        .unwrap();
    within(tagged.join()).await.unwrap().unwrap();
    let other = engine
        .submit_with(Ping { n: 2 }, SubmitOptions::default().tags(["order:43"]))
        .await
        .unwrap();
    within(other.join()).await.unwrap().unwrap();
    let app = gaffer_web::router(
        WebConfig::open(&gaffer::Store::local_dir(tmp.path()))
            .await
            .unwrap(),
    );

    let (status, _, body) = get(&app, "/jobs?tag=order%3A42").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains(tagged.id()), "{body}");
    assert!(!body.contains(other.id()), "{body}");

    let (status, location, _) = get(&app, "/jobs?q=tag%3Aorder%3A43").await;
    assert!(status.is_redirection(), "{status}");
    assert_eq!(location, "/jobs?tag=order%3A43");

    let (status, _, body) = get(&app, &format!("/jobs/{}", tagged.id())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("id=\"job-tags\""), "{body}");
    assert!(
        body.contains("href=\"/jobs?tag=customer%3Aacme\""),
        "{body}"
    );

    // Escaped, and refused: no job can have it.
    let (status, _, body) = get(&app, "/jobs?tag=%3Cscript%3E").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(!body.contains("<script>"), "{body}");
    engine.shutdown().await.unwrap();
}
