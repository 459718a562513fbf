//! `gaffer --shards … health`: each shard's owner, the process its
//! engine runs in, as the engine wrote it at its start, beside a live
//! shard set on temp directories.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Greet, bin};
use gaffer::Engine;
use gaffer::remote::{Placement, ShardSet, ShardedEngine};
use gaffer::taquba::MockClock;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_on_a_shard_set_shows_each_shards_owner() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..3 {
        std::fs::create_dir_all(tmp.path().join(format!("shard-{i:02}"))).unwrap();
    }
    let template = format!("file://{}/shard-{{shard}}", tmp.path().display());
    let set = ShardSet::from_template(&template, 3).unwrap();
    let t0 = gaffer_ops::format::now_ms();
    let clock = Arc::new(MockClock::new(t0));
    let engines = ShardedEngine::start(set, &Placement::Listed(vec![0, 1, 2]), move |_, url| {
        Engine::builder()
            .store(gaffer::Store::url(url))
            .flush_interval(Duration::from_millis(1))
            .clock(clock.clone())
            .register::<Greet>()
    })
    .await
    .unwrap();
    let pid = std::process::id();
    let shards = bin().args(["--shards", &template, "--shard-count", "3"]);

    // --json: every shard's report has its owner, this process.
    let health: Value = shards.clone().json(&["health"]);
    let parts = health["shards"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{health}");
    for part in parts {
        let owner = &part["report"]["shard_owner"];
        let host = owner["host"].as_str().unwrap();
        assert!(!host.is_empty(), "{health}");
        // No name from the placement: the engine names itself.
        assert_eq!(owner["owner"], format!("{host}/{pid}"), "{health}");
        assert_eq!(owner["pid"], pid, "{health}");
        assert_eq!(owner["since_ms"], t0, "its start, queue clock: {health}");
    }

    // The text: an owner row in each shard's table.
    let text = shards.ok(&["health"]);
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("owner "))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        assert!(row.contains(&format!("/{pid} (")), "{text}");
        assert!(row.contains(&format!(", pid {pid}) since ")), "{text}");
    }
    engines.shutdown().await;
}
