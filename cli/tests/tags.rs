//! `gaffer jobs --tag` and the tags of `gaffer job ID`, with the built
//! binary, beside a live engine on a temp directory.

mod common;

use std::time::Duration;

use common::{Explode, Greet, gaffer, json, ok};
use gaffer::{Engine, SubmitOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_by_tag_lists_a_tags_jobs_and_job_shows_its_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Greet>()
        .register::<Explode>()
        .start()
        .await
        .unwrap();
    let tags = |t: &[&str]| SubmitOptions::default().tags(t.iter().copied());
    let greeted = engine
        .submit_with(
            Greet { name: "ada".into() },
            tags(&["order:42", "customer:acme"]),
        )
        .await
        .unwrap();
    greeted.join().await.unwrap().unwrap();
    let exploded = engine
        .submit_with(Explode, tags(&["order:42"]))
        .await
        .unwrap();
    assert!(exploded.join().await.unwrap().is_err());
    engine
        .submit_with(Greet { name: "bob".into() }, tags(&["order:43"]))
        .await
        .unwrap()
        .join()
        .await
        .unwrap()
        .unwrap();

    let listed = json(dir, &["jobs", "--tag", "order:42"]);
    let rows = listed["jobs"].as_array().unwrap();
    let mut ids: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["state"].as_str().unwrap()))
        .collect();
    ids.sort();
    let mut want = vec![(greeted.id(), "succeeded"), (exploded.id(), "failed")];
    want.sort();
    assert_eq!(ids, want, "{listed}");
    assert_eq!(listed["more"], false);
    // A page at a time, by its cursor.
    let first = json(dir, &["jobs", "--tag", "order:42", "--limit", "1"]);
    assert_eq!(first["jobs"].as_array().unwrap().len(), 1);
    let next = first["next"].as_str().expect("a cursor");
    let second = json(
        dir,
        &["jobs", "--tag", "order:42", "--limit", "1", "--after", next],
    );
    assert_eq!(second["jobs"].as_array().unwrap().len(), 1);
    assert_ne!(first["jobs"][0]["id"], second["jobs"][0]["id"]);

    let text = ok(dir, &["jobs", "--tag", "customer:acme"]);
    assert!(text.contains(greeted.id()), "{text}");
    assert!(!text.contains(exploded.id()), "{text}");

    let detail = json(dir, &["job", greeted.id()]);
    assert_eq!(
        detail["tags"],
        serde_json::json!(["order:42", "customer:acme"]),
        "{detail}"
    );
    let text = ok(dir, &["job", greeted.id()]);
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("tags") && l.contains("order:42 customer:acme")),
        "{text}"
    );

    // A tag no job can have, and filters a tag's listing does not take.
    let out = gaffer(dir, &["jobs", "--tag", "order 42"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid tag `order 42`"), "{err}");
    let out = gaffer(dir, &["jobs", "--tag", "order:42", "--state", "failed"]);
    assert!(!out.status.success());
    engine.shutdown().await.unwrap();
}

/// Over a shard set, `gaffer --shards … jobs --tag` asks every shard and
/// prints one listing merged over them, each row with its shard; the
/// engines' own listing (`ShardedEngine::jobs_by_tag`) pages the set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_sets_tag_listing_is_merged_over_its_shards() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..3 {
        std::fs::create_dir_all(tmp.path().join(format!("shard-{i:02}"))).unwrap();
    }
    let template = format!("file://{}/shard-{{shard}}", tmp.path().display());
    let set = gaffer::remote::ShardSet::from_template(&template, 3).unwrap();
    let engines = gaffer::remote::ShardedEngine::start(
        set,
        &gaffer::remote::Placement::Listed(vec![0, 1, 2]),
        |_, url| {
            Engine::builder()
                .store(gaffer::Store::url(url))
                .flush_interval(Duration::from_millis(1))
                .register::<Greet>()
        },
    )
    .await
    .unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for name in ["ada", "bob", "cy", "dee", "eve", "fay"] {
        let opts = SubmitOptions::default().tags(["team:blue"]);
        let h = engines
            .submit_with(Greet { name: name.into() }, opts)
            .await
            .unwrap();
        h.join().await.unwrap().unwrap();
        ids.insert(h.id().to_string());
    }
    let mut paged = std::collections::BTreeSet::new();
    let mut before: Option<String> = None;
    loop {
        let page = engines
            .jobs_by_tag("team:blue", before.as_deref(), 4)
            .await
            .unwrap();
        paged.extend(page.jobs.into_iter().map(|j| j.id));
        match page.next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, ids);

    let out = common::bin()
        .args(["--shards", &template, "--shard-count", "3"])
        .run(&["jobs", "--tag", "team:blue", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = listed["all"]["jobs"].as_array().unwrap();
    let shown: std::collections::BTreeSet<String> = rows
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(shown, ids, "{listed}");
    assert!(rows.iter().all(|r| r["shard"].is_u64()), "{listed}");
    for (shard, report) in engines.shutdown().await {
        report.unwrap_or_else(|e| panic!("shard {shard}: {e}"));
    }
}
