//! The dashboard over a shard set (`WebConfig::open_shards`, as
//! `gaffer web --shards`): counts added up, lists merged with a shard
//! column, a job's page read from the id's shard, actions on every shard.

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use common::{Fix, Flaky, LIMIT};
use gaffer::remote::{Placement, ShardSet, ShardedEngine};
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};
use tower::ServiceExt;

/// A keyed job: its id follows from its key, so the test picks keys that
/// land on each shard (an unkeyed job's fresh id lands on either).
#[derive(Serialize, Deserialize)]
struct Tagged {
    n: u32,
    key: String,
}

impl Job for Tagged {
    const NAME: &'static str = "tagged";
    type Output = u32;
    type Error = gaffer::Error;
    async fn run(&self, _: JobContext) -> Result<u32, gaffer::Error> {
        Ok(self.n)
    }
    fn idempotency_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// `per_shard` keys of each of `shards` shards, found by trying `k0`, `k1`, …
fn keys_on_every_shard(shards: usize, per_shard: usize) -> Vec<String> {
    let mut found: Vec<Vec<String>> = vec![Vec::new(); shards];
    for k in 0.. {
        let key = format!("k{k}");
        let shard = gaffer_layout::keys::shard_of(&gaffer::job::keyed_job_id(&key), shards);
        if found[shard].len() < per_shard {
            found[shard].push(key);
        }
        if found.iter().all(|f| f.len() == per_shard) {
            break;
        }
    }
    found.into_iter().flatten().collect()
}

async fn get(app: &axum::Router, path: &str) -> (StatusCode, String) {
    let res = app
        .clone()
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), 16 << 20)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_shard_set_is_one_dashboard() {
    let root = tempfile::tempdir().unwrap();
    for i in 0..2 {
        std::fs::create_dir_all(root.path().join(format!("shard-{i:02}"))).unwrap();
    }
    let template = format!("file://{}/shard-{{shard}}", root.path().display());
    let fix = Arc::new(Fix::default());
    let set = ShardSet::from_template(&template, 2).unwrap();
    let state = fix.clone();
    let sharded = ShardedEngine::start(set, &Placement::Listed(vec![0, 1]), move |_, url| {
        Engine::builder()
            .store(gaffer::Store::url(url))
            .flush_interval(Duration::from_millis(1))
            .poll_interval(Duration::from_millis(20))
            .intake_poll(Duration::from_millis(20))
            .register::<Tagged>()
            .register::<Flaky>()
            .state(state.clone())
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for (n, key) in (0..).zip(keys_on_every_shard(2, 4)) {
        let h = sharded.submit(Tagged { n, key }).await.unwrap();
        assert_eq!(h.join().await.unwrap().unwrap(), n);
        ids.push(h.id().to_string());
    }
    let failed = sharded.submit(Flaky { text: "x".into() }).await.unwrap();
    assert!(failed.join().await.unwrap().is_err());
    let shards_used: std::collections::BTreeSet<usize> = ids
        .iter()
        .map(|id| gaffer_layout::keys::shard_of(id, 2))
        .collect();
    assert_eq!(shards_used.len(), 2, "both shards hold jobs");

    let config = gaffer_web::WebConfig::open_shards(&template, 2, "queue", "jobs", "bulk-items")
        .await
        .expect("the set opens");
    let app = gaffer_web::router(config);
    common::eventually("the overview adds both shards' counts", LIMIT, async || {
        let (s, b) = get(&app, "/").await;
        assert_eq!(s, StatusCode::OK);
        b.contains("2 shards") && b.contains("<td class=\"n done\">8</td>")
    })
    .await;
    // Each shard's owner, this process (named `{host}/{pid}`: no name
    // from the placement), in the writers' table.
    let (_, b) = get(&app, "/").await;
    assert!(b.contains("<th>Owner</th>"), "{b}");
    let pid = std::process::id();
    assert_eq!(b.matches(&format!("/{pid}</span>")).count(), 2, "{b}");
    common::eventually("the merged listing has every job", LIMIT, async || {
        let (_, b) = get(&app, "/jobs?type=tagged").await;
        b.contains("<th>Shard</th>") && ids.iter().all(|id| b.contains(id.as_str()))
    })
    .await;
    for id in &ids {
        let (s, b) = get(&app, &format!("/jobs/{id}")).await;
        assert_eq!(s, StatusCode::OK, "{id}: from its shard");
        assert!(b.contains("state succeeded"));
    }
    assert_eq!(get(&app, "/jobs?shard=1").await.0, StatusCode::OK);
    assert_eq!(
        get(&app, "/jobs?after=ended:").await.0,
        StatusCode::BAD_REQUEST,
        "a cursor needs its shard"
    );
    assert!(get(&app, "/failed").await.1.contains(failed.id()));

    // A pause goes to every shard.
    let req = Request::post("/queues/tagged/pause")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .body(Body::empty())
        .unwrap();
    let res = app.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let to = res.headers()[header::LOCATION]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(to.matches("r=").count(), 2, "one request per shard");
    common::eventually("both shards applied it", LIMIT, async || {
        get(&app, &to)
            .await
            .1
            .matches("class=\"state applied\"")
            .count()
            == 2
    })
    .await;
    sharded.shutdown().await;
}
