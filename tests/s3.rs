//! gaffer on a real S3 API: moto's server on loopback (`common::s3`), the
//! store opened by URL (`s3://gaffer/{prefix}`), configured by the AWS
//! variables. Jobs end to end and a keyed re-submission after a reopen; two
//! prefixes of one bucket kept apart; a client submitting through the
//! bucket's inbox; a second writer fencing the first; a
//! batch in a child process SIGKILLed twice and resumed to an exact report.
//!
//! The child is this same test binary running the ignored test `s3_child`
//! with `GAFFER_S3_DIR` and `GAFFER_S3_URL` set, and the AWS variables in its
//! environment (so it reads them as a deployed service does).

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufWriter};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use gaffer::{
    BulkCtx, EngineEvent, Job, JobContext, Pipeline, bulk::ItemError, sink::JsonlSink,
    sink::OutputRecord,
};
use serde::{Deserialize, Serialize};

use common::s3::S3Server;
use common::{LIMIT, Runs, shut_down_cleanly, within};

/// Doubles its input; counts its runs. Keyed when `key` is set.
#[derive(Debug, Serialize, Deserialize)]
struct Double {
    x: u64,
    key: Option<String>,
}

impl Job for Double {
    const NAME: &'static str = "double";
    type Output = u64;
    type Error = std::convert::Infallible;
    fn idempotency_key(&self) -> Option<String> {
        self.key.clone()
    }
    async fn run(&self, ctx: JobContext) -> Result<u64, Self::Error> {
        ctx.state::<Arc<Runs>>().hit();
        Ok(self.x * 2)
    }
}

fn double(x: u64) -> Double {
    Double { x, key: None }
}

fn keyed(x: u64, key: &str) -> Double {
    Double {
        x,
        key: Some(key.into()),
    }
}

/// The job's output (it must succeed within the common limit).
async fn output(handle: &gaffer::JobHandle<Double>) -> u64 {
    within(handle.join()).await.unwrap().unwrap()
}

/// An engine builder on `prefix` of the server's bucket, running `Double`
/// (counted in `runs`).
fn builder(server: &S3Server, prefix: &str, runs: &Arc<Runs>) -> gaffer::EngineBuilder {
    gaffer::Engine::builder()
        .store(gaffer::Store::url_with_env(
            server.url(prefix),
            server.env(),
        ))
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .register::<Double>()
        .state(runs.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_on_s3_and_a_keyed_resubmission_after_a_reopen_answers_from_its_record() {
    let server = S3Server::start();
    let runs = Arc::new(Runs::default());
    let engine = builder(&server, "app", &runs).start().await.unwrap();
    let handles: Vec<_> = futures_util::future::join_all((0..20).map(|i| engine.submit(double(i))))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for (i, h) in handles.iter().enumerate() {
        assert_eq!(output(h).await, 2 * i as u64);
    }
    let first = engine.submit(keyed(7, "order-7")).await.unwrap();
    assert_eq!(output(&first).await, 14);
    assert_eq!(runs.get(), 21);
    shut_down_cleanly(&engine).await;

    // A new engine on the same URL: the keyed job answers from its record.
    let engine = builder(&server, "app", &runs).start().await.unwrap();
    let again = engine.submit(keyed(7, "order-7")).await.unwrap();
    assert_eq!(again.id(), first.id());
    assert_eq!(output(&again).await, 14);
    assert_eq!(runs.get(), 21, "answered from its record, not run again");
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_submits_through_the_bucket_and_a_keyed_job_runs_once() {
    let server = S3Server::start();
    let runs = Arc::new(Runs::default());
    let engine = builder(&server, "app", &runs)
        .intake_poll(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let client = gaffer::remote::Client::builder()
        .store(gaffer::Store::url_with_env(server.url("app"), server.env()))
        .poll_interval(Duration::from_millis(50))
        .open()
        .await
        .unwrap();
    let plain = client.submit(double(4)).await.unwrap();
    let keyed_a = client.submit(keyed(5, "k")).await.unwrap();
    let keyed_b = client.submit(keyed(5, "k")).await.unwrap();
    assert_eq!(keyed_a.id(), keyed_b.id());
    assert_eq!(within(plain.join()).await.unwrap().unwrap(), 8);
    assert_eq!(within(keyed_a.join()).await.unwrap().unwrap(), 10);
    assert_eq!(within(keyed_b.join()).await.unwrap().unwrap(), 10);
    assert_eq!(runs.get(), 2, "the keyed job ran once");
    client.close().await;
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixes_of_one_bucket_are_two_stores() {
    let server = S3Server::start();
    let runs = Arc::new(Runs::default());
    let a = builder(&server, "tenant-a", &runs).start().await.unwrap();
    let b = builder(&server, "tenant-b", &runs).start().await.unwrap();
    let in_a = a.submit(keyed(1, "same-key")).await.unwrap();
    assert_eq!(output(&in_a).await, 2);
    // The same key with other input in the other prefix is no mismatch: the
    // prefixes share nothing (not even blobs: both engines live under their
    // prefix, and neither fenced the other).
    let in_b = b.submit(keyed(5, "same-key")).await.unwrap();
    assert_eq!(output(&in_b).await, 10);
    shut_down_cleanly(&a).await;
    shut_down_cleanly(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_on_the_same_url_fences_the_first() {
    let server = S3Server::start();
    let runs = Arc::new(Runs::default());
    let first = builder(&server, "shared", &runs).start().await.unwrap();
    let mut events = first.subscribe();
    let h = first.submit(double(1)).await.unwrap();
    assert_eq!(output(&h).await, 2);

    let second = builder(&server, "shared", &runs).start().await.unwrap();
    // The first finds out at its next commit (a submission) and stops.
    let _ = first.submit(double(2)).await;
    common::wait_event(&mut events, LIMIT, |e| {
        matches!(e, EngineEvent::StoreClosed { .. })
    })
    .await;
    // The second serves, and has the first's record.
    let h2 = second.submit(double(3)).await.unwrap();
    assert_eq!(output(&h2).await, 6);
    assert_eq!(output(&second.handle::<Double>(h.id()).unwrap()).await, 2);
    shut_down_cleanly(&second).await;
}

/// Slow enough work that a run of the batch spans the two kills.
struct Triple;

impl Pipeline for Triple {
    const NAME: &'static str = "triple";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;
    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        tokio::time::sleep(Duration::from_millis(40)).await;
        Ok(ctx.input * 3)
    }
}

const ITEMS: u64 = 600;

/// The child: run (or continue) the batch on `$GAFFER_S3_URL` to completion,
/// append item records to `out.jsonl`, write the report to `report.txt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the S3 kill test as a child process"]
async fn s3_child() {
    let (Ok(dir), Ok(url)) = (
        std::env::var("GAFFER_S3_DIR"),
        std::env::var("GAFFER_S3_URL"),
    ) else {
        return;
    };
    let dir = Path::new(&dir);
    let engine = gaffer::Engine::builder()
        .store(gaffer::Store::url(url))
        .flush_interval(Duration::from_millis(1))
        .poll_interval(Duration::from_millis(20))
        .pipeline_with(
            Triple,
            gaffer::JobOptions {
                concurrency: Some(16),
                ..Default::default()
            },
        )
        .start()
        .await
        .unwrap();
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("out.jsonl"))
        .unwrap();
    let sink = Arc::new(JsonlSink::new(BufWriter::new(out)));
    let report = engine
        .batch::<Triple>("s3-batch")
        .unwrap()
        .sink(sink)
        .run(0..ITEMS)
        .await
        .unwrap();
    let text = format!(
        "{} {} {} {}\n",
        report.total, report.succeeded, report.failed, report.cancelled
    );
    std::fs::write(dir.join("report.txt"), text).unwrap();
    engine.shutdown().await.unwrap();
}

fn child(server: &S3Server, dir: &Path) -> std::process::Child {
    common::test_child("s3_child")
        .env("GAFFER_S3_DIR", dir)
        .env("GAFFER_S3_URL", server.url("batch"))
        .envs(server.env())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Settled items the child has recorded so far (the run writes each item's
/// record to the sink as it settles).
fn records_in(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("out.jsonl")).map_or(0, |s| s.lines().count())
}

#[test]
fn a_batch_on_s3_killed_twice_in_a_child_process_resumes_to_an_exact_report() {
    let server = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    // Two kills, each once the run has settled some items: after 50 records,
    // then after 50 more.
    let mut kills = 0;
    for target in [50, 100] {
        let mut c = child(&server, dir.path());
        let progress = format!("the child has settled {target} records");
        common::eventually_blocking(&progress, Duration::from_secs(120), || {
            if records_in(dir.path()) >= target {
                return true;
            }
            assert!(
                c.try_wait().unwrap().is_none(),
                "the child ended before its kill"
            );
            false
        });
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        kills += 1;
    }
    assert_eq!(kills, 2);
    let status = child(&server, dir.path()).wait().unwrap();
    assert!(status.success(), "the final child failed: {status}");

    let report = std::fs::read_to_string(dir.path().join("report.txt")).unwrap();
    assert_eq!(
        report.trim(),
        format!("{ITEMS} {ITEMS} 0 0"),
        "the final report is exact"
    );
    let mut keys = HashSet::new();
    let file = std::fs::File::open(dir.path().join("out.jsonl")).unwrap();
    // A kill can cut the last line of a run: such a line is skipped.
    for line in std::io::BufReader::new(file).lines() {
        if let Ok(record) = serde_json::from_str::<OutputRecord>(&line.unwrap()) {
            assert_eq!(record.status, "succeeded", "{record:?}");
            let n: u64 = record.key.trim_start_matches("item-").parse().unwrap();
            assert_eq!(record.output, Some(serde_json::json!(n * 3)));
            keys.insert(record.key);
        }
    }
    assert_eq!(keys.len() as u64, ITEMS, "every key reached the sink");
}
