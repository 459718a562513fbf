//! The `gaffer` binary reading a bucket of a real S3 API (moto on loopback,
//! the harness of the root crate's S3 tests) while an engine runs on it:
//! `stats`, `job`, `batch` and `health` answer, the engine is not fenced, and
//! `health` fails once it has shut down.

mod common;

use std::process::Output;
use std::time::Duration;

use gaffer::{BulkCtx, Engine, Job, JobContext, Pipeline, bulk::ItemError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use common::{Gaffer, bin};
use gaffer_testkit::s3::S3Server;

#[derive(Debug, Serialize, Deserialize)]
struct Square(u64);

impl Job for Square {
    const NAME: &'static str = "square";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 * self.0)
    }
}

struct Inc;

impl Pipeline for Inc {
    const NAME: &'static str = "inc";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        Ok(ctx.input + 1)
    }
}

/// The binary on the bucket's `app` prefix, with the server's variables.
fn on(server: &S3Server) -> Gaffer {
    bin().arg("--url").arg(server.url("app")).envs(server.env())
}

fn gaffer(server: &S3Server, args: &[&str]) -> Output {
    on(server).run(args)
}

fn json(server: &S3Server, args: &[&str]) -> Value {
    on(server).json(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_reads_a_live_engine_in_a_bucket_without_disturbing_it() {
    let server = S3Server::start();
    let engine = Engine::builder()
        .store(gaffer::Store::url_with_env(server.url("app"), server.env()))
        .flush_interval(Duration::from_millis(1))
        .register::<Square>()
        .pipeline(Inc)
        .start()
        .await
        .unwrap();
    let h = engine.submit(Square(7)).await.unwrap();
    assert_eq!(h.join().await.unwrap().unwrap(), 49);
    let report = engine
        .batch::<Inc>("b1")
        .unwrap()
        .run(0..4u64)
        .await
        .unwrap();
    assert_eq!(report.succeeded, 4);

    let stats = json(&server, &["stats"]);
    let queues = stats["queues"].as_array().unwrap();
    assert!(
        queues.iter().any(|q| q["queue"] == "jobs.square"),
        "{stats}"
    );
    let job = json(&server, &["job", h.id()]);
    assert!(job.to_string().contains("square"), "{job}");
    let batch = json(&server, &["batch", "b1"]);
    assert!(batch.to_string().contains("\"succeeded\":4"), "{batch}");
    assert!(
        gaffer(&server, &["health"]).status.success(),
        "a live writer"
    );
    // A young store (nothing flushed): its WAL's listing is read for an
    // owner record; a plain engine wrote none.
    let health = json(&server, &["health"]);
    assert!(health["shard_owner"].is_null(), "{health}");

    // Not fenced: the engine goes on.
    let again = engine.submit(Square(8)).await.unwrap();
    assert_eq!(again.join().await.unwrap().unwrap(), 64);
    engine.shutdown().await.unwrap();
    assert!(
        !gaffer(&server, &["health"]).status.success(),
        "no live writer after the shutdown"
    );
}

/// `gaffer --shards … health` on shards at prefixes of one bucket: each
/// shard's owner, found past the flushed state by the WAL's listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_shows_each_shards_owner_in_a_bucket() {
    use gaffer::remote::{Placement, ShardSet, ShardedEngine};
    let server = S3Server::start();
    let template = server.url("app/shard-{shard}");
    let set = ShardSet::from_template(&template, 2).unwrap();
    let env = server.env();
    let engines = ShardedEngine::start(set, &Placement::Listed(vec![0, 1]), move |_, url| {
        Engine::builder()
            .store(gaffer::Store::url_with_env(url, env.clone()))
            .flush_interval(Duration::from_millis(1))
            .register::<Square>()
    })
    .await
    .unwrap();
    let health = bin()
        .envs(server.env())
        .args(["--shards", &template, "--shard-count", "2"])
        .json(&["health"]);
    let pid = std::process::id();
    for part in health["shards"].as_array().unwrap() {
        assert_eq!(part["report"]["shard_owner"]["pid"], pid, "{health}");
    }
    engines.shutdown().await;
}
