//! `gaffer stats --watch`: the built binary left running beside a live
//! engine, its NDJSON read line by line until a round shows what the
//! engine did since (bounded by the test kit's limit).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Greet, at, bin, within};
use gaffer::taquba::MockClock;
use gaffer::{Engine, Job};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// A child's stdout, a line at a time.
type Out = Lines<BufReader<ChildStdout>>;

fn lines(child: &mut Child) -> Out {
    BufReader::new(child.stdout.take().expect("its stdout is piped")).lines()
}

/// The next round the child prints.
async fn next_round(out: &mut Out) -> Value {
    let line = within(out.next_line())
        .await
        .expect("its stdout reads")
        .expect("the watch goes on");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON document ({e}): {line}"))
}

/// Rounds until one whose `queue` row `fits` (none: no row), within the
/// test kit's limit; that round.
async fn round_until(out: &mut Out, queue: &str, fits: impl Fn(Option<&Value>) -> bool) -> Value {
    within(async {
        loop {
            let round = next_round(out).await;
            if fits(row(&round, queue)) {
                return round;
            }
        }
    })
    .await
}

fn row<'a>(stats: &'a Value, queue: &str) -> Option<&'a Value> {
    stats["queues"]
        .as_array()
        .expect("a stats document")
        .iter()
        .find(|q| q["queue"] == queue)
}

/// `(pending, done, oldest_ready_ms)` of a row.
fn counts(row: Option<&Value>) -> (i64, i64, Option<u64>) {
    row.map_or((0, 0, None), |r| {
        (
            r["pending"].as_i64().unwrap_or(-1),
            r["done"].as_i64().unwrap_or(-1),
            r["oldest_ready_ms"].as_u64(),
        )
    })
}

/// An engine on `dir` whose greet pool starts paused (paused by an engine
/// before it, so it claims nothing until resumed), enqueueing on `clock`.
async fn paused_engine(dir: &Path, clock: Arc<MockClock>) -> Engine {
    let builder = || {
        Engine::builder()
            .store(gaffer::Store::local_dir(dir))
            .flush_interval(Duration::from_millis(1))
            .register::<Greet>()
    };
    let engine = builder().start().await.unwrap();
    assert!(engine.pause(Greet::NAME).await.unwrap());
    engine.shutdown().await.unwrap();
    builder().clock(clock).start().await.unwrap()
}

async fn greet(engine: &Engine, clock: &MockClock, n: usize) {
    for i in 0..n {
        engine
            .submit(Greet {
                name: format!("n{i}"),
            })
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
    }
}

/// Two watches beside one live engine, one kept on its first base, one
/// rebased every 200 ms (`--rebase-every`, hidden): both follow the jobs
/// enqueued after they started (the ready count and the oldest ready job,
/// enqueued before), then claimed and done once the type is resumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_follows_a_live_engine_round_by_round_across_rebases() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t0 = gaffer_ops::format::now_ms() - 3_600_000;
    let clock = Arc::new(MockClock::new(t0));
    let engine = paused_engine(dir, clock.clone()).await;
    greet(&engine, &clock, 2).await;

    let watch = ["stats", "--watch", "--json", "--every", "100ms"];
    let mut kept = at(dir).spawn(&watch);
    let mut rebased = at(dir).spawn(&[&watch[..], &["--rebase-every", "200ms"]].concat());
    let (mut kept_out, mut rebased_out) = (lines(&mut kept), lines(&mut rebased));
    for out in [&mut kept_out, &mut rebased_out] {
        round_until(out, "jobs.greet", |r| counts(r) == (2, 0, Some(t0))).await;
    }

    // Enqueued while they watch: read from the WAL objects since.
    greet(&engine, &clock, 3).await;
    for out in [&mut kept_out, &mut rebased_out] {
        round_until(out, "jobs.greet", |r| counts(r) == (5, 0, Some(t0))).await;
    }
    // Ten rounds later (a second: rebases past), still the same.
    for out in [&mut kept_out, &mut rebased_out] {
        for _ in 0..10 {
            let round = next_round(out).await;
            let greet = row(&round, "jobs.greet");
            assert_eq!(counts(greet), (5, 0, Some(t0)), "{round}");
            assert!(
                greet.unwrap()["oldest_ready_age_ms"].as_u64().unwrap() >= 3_600_000,
                "{round}"
            );
        }
    }

    // Claimed and done: no ready job left, none oldest.
    assert!(engine.resume(Greet::NAME).await.unwrap());
    for out in [&mut kept_out, &mut rebased_out] {
        round_until(out, "jobs.greet", |r| counts(r) == (0, 5, None)).await;
    }
    // The writer gone: the watch goes on, as it left them.
    engine.shutdown().await.unwrap();
    for out in [&mut kept_out, &mut rebased_out] {
        for _ in 0..3 {
            let round = next_round(out).await;
            assert_eq!(counts(row(&round, "jobs.greet")), (0, 5, None), "{round}");
        }
    }
    for child in [&mut kept, &mut rebased] {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the watch runs until stopped"
        );
        child.kill().await.unwrap();
    }
}

/// A terminal's text: a block a round (stdout not a terminal here), and
/// `stats TYPE --watch` refused by the parser with a clear reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_prints_a_table_a_round_and_refuses_a_type() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let clock = Arc::new(MockClock::new(gaffer_ops::format::now_ms()));
    let engine = paused_engine(dir, clock.clone()).await;
    greet(&engine, &clock, 1).await;
    let mut child = at(dir).spawn(&["stats", "--watch", "--every", "100ms"]);
    let mut out = lines(&mut child);
    let mut heads = 0;
    within(async {
        while heads < 2 {
            let line = out.next_line().await.unwrap().expect("the watch goes on");
            heads += usize::from(line.starts_with("gaffer stats --watch: "));
            assert!(
                !line.contains('\u{1b}'),
                "no screen control off a terminal: {line:?}"
            );
        }
    })
    .await;
    child.kill().await.unwrap();
    engine.shutdown().await.unwrap();

    let refused = at(dir).run(&["stats", "greet", "--watch"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("--watch") && said.contains("cannot be used"),
        "{said}"
    );
    let refused = at(dir).run(&["stats", "--watch", "--every", "0s"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

/// Over a shard set each shard keeps its own watch: each part and the
/// total follow the jobs enqueued since the first round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_over_a_shard_set_follows_every_shard() {
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..2 {
        std::fs::create_dir_all(tmp.path().join(format!("shard-{i:02}"))).unwrap();
    }
    let template = format!("file://{}/shard-{{shard}}", tmp.path().display());
    let set = gaffer::remote::ShardSet::from_template(&template, 2).unwrap();
    let start = async || {
        gaffer::remote::ShardedEngine::start(
            set.clone(),
            &gaffer::remote::Placement::Listed(vec![0, 1]),
            move |_, url| {
                Engine::builder()
                    .store(gaffer::Store::url(url))
                    .flush_interval(Duration::from_millis(1))
                    .register::<Greet>()
            },
        )
        .await
        .unwrap()
    };
    let engines = start().await;
    engines.pause(Greet::NAME).await.unwrap();
    engines.shutdown().await;
    let engines = start().await;
    let mut child = bin()
        .args(["--shards", &template, "--shard-count", "2"])
        .spawn(&["stats", "--watch", "--json", "--every", "100ms"]);
    let mut out = lines(&mut child);
    let first = next_round(&mut out).await;
    assert_eq!(first["shards"].as_array().map(Vec::len), Some(2), "{first}");
    let mut per_shard = [0i64; 2];
    for i in 0..6 {
        let h = engines
            .submit(Greet {
                name: format!("n{i}"),
            })
            .await
            .unwrap();
        per_shard[set.shard_of(h.id())] += 1;
    }
    let seen = within(async {
        loop {
            let round = next_round(&mut out).await;
            let total = row(&round["total"], "jobs.greet").map(|r| r["pending"].clone());
            if total == Some(6.into()) {
                return round;
            }
        }
    })
    .await;
    for (shard, part) in seen["shards"].as_array().unwrap().iter().enumerate() {
        let pending =
            row(&part["report"], "jobs.greet").map_or(0, |r| r["pending"].as_i64().unwrap());
        assert_eq!(pending, per_shard[shard], "shard {shard}: {seen}");
    }
    child.kill().await.unwrap();
    engines.shutdown().await;
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hold(u32);

static HOLD_STARTED: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static HOLD_END: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

impl Job for Hold {
    const NAME: &'static str = "hold";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: gaffer::JobContext) -> Result<u32, gaffer::Error> {
        HOLD_STARTED.add_permits(1);
        HOLD_END.acquire().await.expect("never closed").forget();
        Ok(self.0)
    }
}

/// The watch's base holds ready jobs (flushed at a shutdown) that the next
/// engine claims one at a time: each round's oldest ready job is the
/// base's first not claimed since, as the claims go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_watch_passes_the_bases_ready_jobs_claimed_since() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let minute = 60_000;
    let t0 = gaffer_ops::format::now_ms() - 3_600_000;
    let clock = Arc::new(MockClock::new(t0));
    let builder = || {
        Engine::builder()
            .store(gaffer::Store::local_dir(dir))
            .flush_interval(Duration::from_millis(1))
            .register_with::<Hold>(gaffer::JobOptions {
                concurrency: Some(1),
                ..Default::default()
            })
    };
    let engine = builder().start().await.unwrap();
    assert!(engine.pause(Hold::NAME).await.unwrap());
    engine.shutdown().await.unwrap();
    let engine = builder().clock(clock.clone()).start().await.unwrap();
    for i in 0..3 {
        engine.submit(Hold(i)).await.unwrap();
        clock.advance(Duration::from_secs(60));
    }
    // Shut down: the memtable flushed, the three ready jobs in the base.
    engine.shutdown().await.unwrap();
    let mut child = at(dir).spawn(&["stats", "--watch", "--json", "--every", "100ms"]);
    let mut out = lines(&mut child);
    round_until(&mut out, "jobs.hold", |r| counts(r) == (3, 0, Some(t0))).await;

    let engine = builder().start().await.unwrap();
    assert!(engine.resume(Hold::NAME).await.unwrap());
    within(HOLD_STARTED.acquire()).await.unwrap().forget();
    round_until(&mut out, "jobs.hold", |r| {
        counts(r) == (2, 0, Some(t0 + minute))
    })
    .await;
    HOLD_END.add_permits(1);
    within(HOLD_STARTED.acquire()).await.unwrap().forget();
    round_until(&mut out, "jobs.hold", |r| {
        counts(r) == (1, 1, Some(t0 + 2 * minute))
    })
    .await;
    HOLD_END.add_permits(1);
    within(HOLD_STARTED.acquire()).await.unwrap().forget();
    round_until(&mut out, "jobs.hold", |r| counts(r) == (0, 2, None)).await;
    HOLD_END.add_permits(1);
    round_until(&mut out, "jobs.hold", |r| counts(r) == (0, 3, None)).await;
    child.kill().await.unwrap();
    engine.shutdown().await.unwrap();
}
