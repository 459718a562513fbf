//! The `gaffer` binary against a live engine on a temp directory: every
//! command with and without `--json`, while the engine runs (which keeps
//! running afterwards), and `health` after its shutdown.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{Approve, Boom, Explode, Greet, LIMIT, at, bin, gaffer, json, ok, within};
use gaffer::{BulkCtx, Engine, Job, JobContext, Pipeline, bulk::ItemError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

struct Double;

impl Pipeline for Double {
    const NAME: &'static str = "double";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        ctx.record_cost("tokens", 10.0);
        if ctx.input == 3 {
            return Err(ItemError::permanent("three is unlucky"));
        }
        Ok(ctx.input * 2)
    }
}

async fn start(dir: &Path) -> Engine {
    Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Greet>()
        .register::<Explode>()
        .pipeline(Double)
        .start()
        .await
        .expect("engine starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_reads_a_live_engine_without_disturbing_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = start(dir).await;

    let mut greeted = Vec::new();
    for name in ["ada", "bob"] {
        let h = engine.submit(Greet { name: name.into() }).await.unwrap();
        assert_eq!(h.join().await.unwrap().unwrap(), format!("hello {name}"));
        greeted.push(h.id().to_string());
    }
    let boom = engine.submit(Explode).await.unwrap();
    assert!(boom.join().await.unwrap().is_err());
    let boom_id = boom.id().to_string();
    let report = engine
        .batch::<Double>("nightly")
        .unwrap()
        .run(0..5u64)
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.failed), (4, 1));

    // stats
    let stats = json(dir, &["stats"]);
    let queues = stats["queues"].as_array().unwrap();
    let queue = |name: &str| {
        queues
            .iter()
            .find(|q| q["queue"] == name)
            .unwrap_or_else(|| panic!("no {name} in {stats}"))
    };
    assert_eq!(queue("jobs.greet")["kind"], "job");
    assert_eq!(queue("jobs.greet")["dead"], 0);
    assert_eq!(queue("jobs.explode")["dead"], 1);
    assert_eq!(queue("bulk-items.double")["kind"], "pipeline");
    assert_eq!(queue("bulk-items.double")["dead"], 1);
    let text = ok(dir, &["stats"]);
    assert!(
        text.contains("QUEUE") && text.contains("jobs.explode"),
        "{text}"
    );
    assert!(text.contains("bulk-items.double"), "{text}");
    // The same store by URL.
    let by_url = bin()
        .args(["--url", &format!("file://{}", dir.display())])
        .json(&["stats"]);
    assert_eq!(by_url, stats);

    // jobs
    let jobs = json(dir, &["jobs"]);
    let ids: Vec<&str> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    for id in greeted.iter().chain([&boom_id]) {
        assert!(ids.contains(&id.as_str()), "{id} not in {jobs}");
    }
    let failed = json(dir, &["jobs", "--state", "failed"]);
    assert_eq!(failed["jobs"].as_array().unwrap().len(), 1, "{failed}");
    assert_eq!(failed["jobs"][0]["id"], boom_id.as_str());
    let greets = json(dir, &["jobs", "--type", "greet", "--limit", "1"]);
    assert_eq!(greets["jobs"].as_array().unwrap().len(), 1, "{greets}");
    assert_eq!(greets["jobs"][0]["job_type"], "greet");
    assert_eq!(greets["more"], true);
    let text = ok(dir, &["jobs"]);
    assert!(
        text.contains(&boom_id) && text.contains("the fuse was lit"),
        "{text}"
    );

    // job
    let job = json(dir, &["job", &greeted[0]]);
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["job_type"], "greet");
    assert_eq!(job["output"], "hello ada");
    let job = json(dir, &["job", &boom_id]);
    assert_eq!(job["state"], "failed");
    assert_eq!(job["failure_kind"], "Permanent");
    assert_eq!(job["error"], "the fuse was lit");
    let history = job["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{job}");
    assert_eq!(history[0]["outcome"], "dead-lettered");
    assert_eq!(history[0]["error"], "the fuse was lit");
    let text = ok(dir, &["job", &boom_id]);
    assert!(
        text.contains("dead-lettered") && text.contains("Permanent"),
        "{text}"
    );
    let missing = gaffer(dir, &["job", "nope"]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no job `nope`"), "{err}");

    // dead
    let dead = json(dir, &["dead"]);
    let dead = dead["dead"].as_array().unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    let job_dead = dead.iter().find(|d| d["job_type"] == "explode").unwrap();
    assert_eq!(job_dead["id"], boom_id.as_str());
    assert_eq!(job_dead["error"], "the fuse was lit");
    let item_dead = dead.iter().find(|d| d["job_type"] == "double").unwrap();
    assert_eq!(item_dead["batch"], "nightly");
    assert_eq!(item_dead["key"], "item-3");
    assert_eq!(item_dead["error"], "three is unlucky");
    // Every id a listing prints is one `gaffer job` reads: a batch item's
    // too (its delivery's).
    for listing in [
        json(dir, &["jobs", "--state", "dead"]),
        json(dir, &["dead"]),
    ] {
        let rows = listing["jobs"]
            .as_array()
            .or_else(|| listing["dead"].as_array())
            .unwrap();
        assert_eq!(rows.len(), 2, "{listing}");
        for row in rows {
            let id = row["id"].as_str().unwrap();
            let job = json(dir, &["job", id]);
            assert_eq!(job["job_type"], row["job_type"], "{job}");
        }
    }
    let item = json(dir, &["job", item_dead["id"].as_str().unwrap()]);
    assert_eq!(
        (&item["batch"], &item["key"]),
        (&Value::from("nightly"), &Value::from("item-3"))
    );
    assert_eq!(item["error"], "three is unlucky");
    assert_eq!(
        item["retryable"], false,
        "an item runs again with its batch"
    );
    // And an item by its batch and key, whatever became of its delivery.
    let by_key = json(dir, &["item", "nightly", "item-3"]);
    assert_eq!(by_key["error"], "three is unlucky");
    let settled = json(dir, &["item", "nightly", "item-1"]);
    assert_eq!(settled["state"], "succeeded", "{settled}");
    assert_eq!(settled["output"], 2);
    let missing = gaffer(dir, &["item", "nightly", "item-9"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no item `item-9`"));
    let only = json(dir, &["dead", "--type", "explode"]);
    assert_eq!(only["dead"].as_array().unwrap().len(), 1);
    let text = ok(dir, &["dead"]);
    assert!(
        text.contains("three is unlucky") && text.contains(&boom_id),
        "{text}"
    );

    // batches, batch
    let batches = json(dir, &["batches"]);
    assert_eq!(batches["batches"].as_array().unwrap().len(), 1, "{batches}");
    let b = &batches["batches"][0];
    assert_eq!(b["id"], "nightly");
    assert_eq!(
        (
            &b["total"],
            &b["succeeded"],
            &b["failed"],
            &b["outstanding"]
        ),
        (
            &Value::from(5),
            &Value::from(4),
            &Value::from(1),
            &Value::from(0)
        )
    );
    assert_eq!(b["cost"]["tokens"], 50.0);
    let b = json(dir, &["batch", "nightly"]);
    assert_eq!(b["pipeline"], "double");
    assert_eq!(b["failed_keys"], serde_json::json!(["item-3"]));
    let text = ok(dir, &["batches"]);
    assert!(
        text.contains("nightly") && text.contains("tokens=50"),
        "{text}"
    );
    let text = ok(dir, &["batch", "nightly"]);
    assert!(
        text.contains("item-3") && text.contains("outstanding"),
        "{text}"
    );
    println!("$ gaffer stats\n{}", ok(dir, &["stats"]));
    println!("$ gaffer batch nightly\n{text}");
    let missing = gaffer(dir, &["batch", "nope"]);
    assert_eq!(missing.status.code(), Some(1));

    // health
    let health = json(dir, &["health"]);
    assert_eq!(health["alive"], true, "{health}");
    assert_eq!(health["status"], "alive");
    let text = ok(dir, &["health"]);
    assert!(text.contains("alive"), "{text}");

    // The engine was not fenced: it still runs jobs.
    let h = engine.submit(Greet { name: "cy".into() }).await.unwrap();
    assert_eq!(h.join().await.unwrap().unwrap(), "hello cy");

    engine.shutdown().await.unwrap();
    let after = gaffer(dir, &["health"]);
    assert_eq!(after.status.code(), Some(3), "{after:?}");
    assert!(String::from_utf8_lossy(&after.stdout).contains("closed"));
}

/// Fails its first attempt (transiently), succeeds on the second.
#[derive(Debug, Serialize, Deserialize)]
struct SecondTime;

impl Job for SecondTime {
    const NAME: &'static str = "second-time";
    type Output = u32;
    type Error = Boom;

    async fn run(&self, ctx: JobContext) -> Result<u32, Boom> {
        if ctx.attempt() == 1 {
            return Err(Boom("not yet".into()));
        }
        Ok(ctx.attempt())
    }
}

/// Every page of `gaffer jobs ARGS --limit N --json`, following `next`:
/// the ids in order, and how many pages it took.
fn all_pages(dir: &Path, args: &[&str], limit: usize) -> (Vec<Value>, usize) {
    let limit = limit.to_string();
    let mut rows = Vec::new();
    let mut after: Option<String> = None;
    for pages in 1.. {
        let mut all = args.to_vec();
        all.extend(["--limit", &limit]);
        if let Some(a) = &after {
            all.extend(["--after", a.as_str()]);
        }
        let page = json(dir, &all);
        let jobs = page["jobs"].as_array().unwrap();
        assert!(jobs.len() <= limit.parse().unwrap(), "{page}");
        rows.extend(jobs.iter().cloned());
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(page["more"], true);
                after = Some(next.to_string());
            }
            None => return (rows, pages),
        }
        assert!(pages < 100, "paging does not end");
    }
    unreachable!()
}

fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_pages_by_cursor_through_the_finished_jobs_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let start = async || {
        Engine::builder()
            .store(gaffer::Store::local_dir(dir))
            .open_options(
                gaffer::taquba::OpenOptions::default()
                    .flush_interval(Duration::from_millis(1))
                    .default_queue_config(
                        gaffer::taquba::QueueConfig::default().retry_backoff_base(Duration::ZERO),
                    ),
            )
            .register::<Greet>()
            .register::<Explode>()
            .register::<SecondTime>()
            .start()
            .await
            .expect("engine starts")
    };
    let engine = start().await;
    let mut succeeded = Vec::new();
    for i in 0..7 {
        let h = engine
            .submit(Greet {
                name: format!("n{i}"),
            })
            .await
            .unwrap();
        h.join().await.unwrap().unwrap();
        succeeded.push(h.id().to_string());
    }
    let mut failed = Vec::new();
    for _ in 0..3 {
        let h = engine.submit(Explode).await.unwrap();
        assert!(h.join().await.unwrap().is_err());
        failed.push(h.id().to_string());
    }
    let second = engine.submit(SecondTime).await.unwrap();
    assert_eq!(second.join().await.unwrap().unwrap(), 2);
    succeeded.push(second.id().to_string());

    // Succeeded jobs, 3 a page: each once, newest first (by end time).
    let (rows, pages) = all_pages(dir, &["jobs", "--state", "succeeded"], 3);
    assert_eq!(pages, 3);
    let mut listed = ids(&rows);
    let newest_first: Vec<u64> = rows.iter().map(|r| r["at_ms"].as_u64().unwrap()).collect();
    assert!(newest_first.is_sorted_by(|a, b| a >= b), "{newest_first:?}");
    assert_eq!(listed[0], second.id(), "the last to end comes first");
    listed.sort();
    let mut want = succeeded.clone();
    want.sort();
    assert_eq!(listed, want);
    assert!(rows.iter().all(|r| r["state"] == "succeeded"));

    // One type, and a type in a state it has no job in.
    let (rows, pages) = all_pages(dir, &["jobs", "--type", "explode"], 2);
    assert_eq!(pages, 2);
    let mut listed = ids(&rows);
    listed.sort();
    failed.sort();
    assert_eq!(listed, failed);
    assert!(
        rows.iter()
            .all(|r| r["state"] == "failed" && r["job_type"] == "explode")
    );
    let none = json(dir, &["jobs", "--type", "greet", "--state", "failed"]);
    assert_eq!(none["jobs"], serde_json::json!([]));
    assert_eq!(none["more"], false);

    // Everything, 4 a page: 11 jobs in 3 pages, none twice.
    let (rows, pages) = all_pages(dir, &["jobs"], 4);
    assert_eq!((rows.len(), pages), (11, 3));
    let mut all = ids(&rows);
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 11);
    // A page exactly full at the end of the listing says there is no more.
    let (_, pages) = all_pages(dir, &["jobs"], 11);
    assert_eq!(pages, 1);
    let text = ok(dir, &["jobs", "--limit", "2"]);
    assert!(text.contains("(more: pass --after "), "{text}");
    let bad = gaffer(dir, &["jobs", "--after", "nonsense"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a cursor"));

    // The job that succeeded on its second attempt shows the first one, kept
    // in its outcome record (the queue forgets an acknowledged job's claims).
    let job = json(dir, &["job", second.id()]);
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["attempts"], 2);
    let history = job["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{job}");
    assert_eq!(history[0]["outcome"], "failed");
    assert_eq!(history[0]["error"], "not yet");
    engine.shutdown().await.unwrap();

    // A store from before the index: no index entries and no marker. The
    // command says so; the next engine start builds the index.
    let before = ids(&all_pages(dir, &["jobs"], 50).0);
    {
        let store: std::sync::Arc<dyn gaffer::taquba::object_store::ObjectStore> =
            std::sync::Arc::new(
                gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap(),
            );
        let queue = gaffer::taquba::Queue::open(store, "queue").await.unwrap();
        let page = queue
            .view()
            .kv_scan(
                b"gaffer/v1/ended/",
                ..,
                gaffer::taquba::KvOrder::Ascending,
                1000,
            )
            .await
            .unwrap();
        assert_eq!(page.entries.len(), 11);
        for (key, _) in page.entries {
            queue.kv_delete(&key).await.unwrap();
        }
        queue.kv_delete(b"gaffer/v1/ended-index").await.unwrap();
        queue.close().await.unwrap();
    }
    let out = gaffer(dir, &["jobs"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not indexed yet"));
    let engine = start().await;
    assert_eq!(ids(&all_pages(dir, &["jobs"], 50).0), before);
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_pause_resume_cancel_and_retry_go_through_the_inbox() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Greet>()
        .register::<Explode>()
        .start()
        .await
        .expect("engine starts");

    // Submit by JSON; the command waits until the engine took it.
    let out = json(dir, &["submit", "greet", r#"{"name":"zed"}"#]);
    assert_eq!(out["status"], "applied", "{out}");
    let id = out["job"].as_str().unwrap().to_string();
    let h = engine.handle::<Greet>(&id).unwrap();
    assert_eq!(h.join().await.unwrap().unwrap(), "hello zed");
    // A keyed submission answers with the key's job id.
    let keyed = json(dir, &["submit", "greet", r#"{"name":"k"}"#, "--key", "k-1"]);
    assert_eq!(keyed["job"], gaffer::job::keyed_job_id("k-1").as_str());
    // A type the engine does not know: refused, exit 1, with the reason.
    let refused = gaffer(dir, &["submit", "nobody", "{}", "--json"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let body: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(body["status"], "refused");
    assert!(
        body["reason"].as_str().unwrap().contains("nobody"),
        "{body}"
    );
    // Answered, not dead-lettered: nothing of it is listed as user work.
    let dead = json(dir, &["dead"]);
    assert_eq!(dead["dead"], serde_json::json!([]), "{dead}");
    let listed = json(dir, &["jobs", "--state", "dead"]);
    assert_eq!(listed["jobs"], serde_json::json!([]), "{listed}");
    // Not JSON: an error before anything is sent.
    let bad = gaffer(dir, &["submit", "greet", "{nope"]);
    assert_eq!(bad.status.code(), Some(1));

    // Pause: a submitted job waits; cancel one of them; resume: the other runs.
    assert_eq!(json(dir, &["pause", "greet"])["status"], "applied");
    let waiting = json(dir, &["submit", "greet", r#"{"name":"w"}"#])["job"]
        .as_str()
        .unwrap()
        .to_string();
    let doomed = json(dir, &["submit", "greet", r#"{"name":"d"}"#])["job"]
        .as_str()
        .unwrap()
        .to_string();
    // Waiting: queued, or scheduled when the paused pool had claimed it and
    // gave it back (a release is a nack with the queue's backoff).
    assert!(matches!(
        engine.status(&waiting).await.unwrap(),
        gaffer::job::JobState::Queued | gaffer::job::JobState::Scheduled
    ));
    let cancel = json(dir, &["cancel", &doomed]);
    assert_eq!(cancel["status"], "applied", "{cancel}");
    assert_eq!(
        engine.status(&doomed).await.unwrap(),
        gaffer::job::JobState::Cancelled
    );
    let text = ok(dir, &["resume", "greet"]);
    assert!(
        text.contains("applied") && text.contains("resumed"),
        "{text}"
    );
    let h = engine.handle::<Greet>(&waiting).unwrap();
    assert_eq!(h.join().await.unwrap().unwrap(), "hello w");

    // Retry: one failed job by id, then every failed job of the type.
    let boom = engine.submit(Explode).await.unwrap();
    assert!(boom.join().await.unwrap().is_err());
    let retry = json(dir, &["retry", boom.id()]);
    assert_eq!(retry["status"], "applied", "{retry}");
    assert!(boom.join().await.unwrap().is_err(), "it failed again");
    // Its first dead letter is superseded: `dead` lists the job once, as
    // its latest attempt series ended.
    let dead = json(dir, &["dead", "--type", "explode"]);
    let boom_rows = dead["dead"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["id"] == boom.id())
        .count();
    assert_eq!(boom_rows, 1, "{dead}");
    let all = json(dir, &["retry", "--failed", "--type", "explode"]);
    assert_eq!(all["result"], "retried 1 failed `explode` jobs", "{all}");
    // A succeeded job is not retried.
    let no = gaffer(dir, &["retry", &id, "--json"]);
    assert_eq!(no.status.code(), Some(1));
    // --no-wait returns once the request is in the store.
    let sent = json(dir, &["submit", "greet", r#"{"name":"n"}"#, "--no-wait"]);
    assert_eq!(sent["status"], "sent");
    engine.shutdown().await.unwrap();
}

#[test]
fn errors_are_one_line_and_a_non_zero_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let out = gaffer(&missing, &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no store at"), "{err}");

    let out = gaffer(tmp.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was ever written"));

    let out = bin().run(&["stats"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--dir PATH or --url URL"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_without_the_layout_marker_or_with_another_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store: std::sync::Arc<dyn gaffer::taquba::object_store::ObjectStore> = std::sync::Arc::new(
        gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(tmp.path()).unwrap(),
    );
    let queue = gaffer::taquba::Queue::open_with_options(
        store,
        "queue",
        gaffer::taquba::OpenOptions::default().flush_interval(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    queue.kv_put(b"other", b"x").await.unwrap();
    let out = gaffer(tmp.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a gaffer store"), "{err}");

    queue
        .kv_put(b"gaffer/layout", b"gaffer-layout-9")
        .await
        .unwrap();
    let out = gaffer(tmp.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gaffer-layout-9"), "{err}");
    assert!(err.contains("the `gaffer` command"), "{err}");

    queue
        .kv_put(b"gaffer/layout", b"gaffer-layout-1")
        .await
        .unwrap();
    let out = gaffer(tmp.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gaffer-layout-1"), "{err}");
    assert!(err.contains("the gaffer version that wrote it"), "{err}");
    queue.close().await.unwrap();
}

/// Each item waits until the gate opens (`true`).
struct Gated(tokio::sync::watch::Receiver<bool>);

impl Pipeline for Gated {
    const NAME: &'static str = "gated";
    type Input = String;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, _ctx: &BulkCtx<String>) -> Result<u64, ItemError> {
        let mut gate = self.0.clone();
        gate.wait_for(|open| *open)
            .await
            .map_err(|_| ItemError::permanent("the gate was dropped"))?;
        Ok(1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_watch_follows_a_running_batch_to_its_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let (gate, closed) = tokio::sync::watch::channel(false);
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(&dir))
        .flush_interval(Duration::from_millis(1))
        .pipeline(Gated(closed))
        .start()
        .await
        .expect("engine starts");
    let inputs = vec!["held".to_string(); 6];
    let batch = engine.batch::<Gated>("watched").unwrap();
    let run = tokio::spawn(async move { batch.run(inputs).await });
    // Once the batch's head is durable, the watcher can find it.
    common::eventually("the batch is visible", LIMIT, async || {
        gaffer(&dir, &["batch", "watched"]).status.success()
    })
    .await;
    let watcher = at(&dir).spawn(&["batch", "watched", "--watch", "--every-ms", "50", "--json"]);
    // Items are held at the gate: a watch that ended now would have exited
    // 3 or printed outstanding items, which the asserts below refuse.
    gate.send_replace(true);
    let report = within(run).await.unwrap().unwrap();
    assert_eq!(report.succeeded, 6);
    // (Within the limit: the watch ends once the batch has settled.)
    let out = within(watcher.wait_with_output()).await.unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let row: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["succeeded"], 6, "{row}");
    assert_eq!(row["outstanding"], 0, "{row}");
    engine.shutdown().await.unwrap();
}

/// `gaffer periodic` lists each periodic job from its record: its schedule
/// and policy, the last tick fired and the next one due, with the engine
/// running and after it stopped. The engine's ticks follow a mock clock set
/// to 2026-01-01T00:00Z, so its next ticks are overdue on this machine's
/// clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_lists_each_periodic_job_with_its_last_and_next_tick() {
    use gaffer::taquba::MockClock;
    use gaffer::{periodic::Missed, periodic::Schedule, periodic::Tick};

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let t0 = common::T0_MS;
    let hour = Duration::from_secs(3600);
    let clock = std::sync::Arc::new(MockClock::new(t0));
    let empty = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Greet>()
        .start()
        .await
        .unwrap();
    empty.shutdown().await.unwrap();
    assert_eq!(ok(dir, &["periodic"]).trim(), "no periodic jobs");

    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .clock(clock.clone())
        .register::<Greet>()
        .periodic("hourly-greet", Schedule::every(hour), |tick| Greet {
            name: format!("tick {}", tick.at_ms),
        })
        .periodic(
            "morning",
            Schedule::cron("0 9 * * Mon-Fri")
                .unwrap()
                .time_zone("Europe/Paris")
                .unwrap()
                .on_missed(Missed::Skip),
            |_| Greet {
                name: "morning".into(),
            },
        )
        .start()
        .await
        .unwrap();
    engine.check_periodic().await.unwrap();
    clock.advance(hour);
    engine.check_periodic().await.unwrap();
    let fired = Tick::new("hourly-greet", t0 + 3_600_000).job_id;
    let greeting = engine.handle::<Greet>(&fired).unwrap().await.unwrap();
    assert_eq!(greeting, format!("hello tick {}", t0 + 3_600_000));

    for running in [true, false] {
        let doc = json(dir, &["periodic"]);
        let rows = doc["periodic"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{doc}");
        let hourly = &rows[0];
        assert_eq!(hourly["name"], "hourly-greet");
        assert_eq!(hourly["job_type"], "greet");
        assert_eq!(hourly["schedule"], "every 1h");
        assert_eq!(hourly["missed"], "run-once");
        assert_eq!(hourly["last_fired_ms"], t0 + 3_600_000);
        assert_eq!(hourly["last_job_id"], fired.as_str());
        assert_eq!(hourly["next_due_ms"], t0 + 7_200_000);
        assert_eq!(hourly["fired"], 1);
        let morning = &rows[1];
        assert_eq!(morning["name"], "morning");
        assert_eq!(morning["schedule"], "cron \"0 9 * * Mon-Fri\" Europe/Paris");
        assert_eq!(morning["missed"], "skip");
        assert_eq!(morning["last_fired_ms"], Value::Null);
        assert_eq!(morning["fired"], 0);
        // 2026-01-01 is a Thursday: 09:00 in Paris is 08:00 UTC.
        assert_eq!(morning["next_due_ms"], t0 + 8 * 3_600_000);

        let text = ok(dir, &["periodic"]);
        for expected in [
            "NAME",
            "NEXT DUE",
            "hourly-greet",
            "every 1h",
            "2026-01-01 01:00:00.000",
            "2026-01-01 02:00:00.000 (overdue)",
            "morning",
            "cron \"0 9 * * Mon-Fri\" Europe/Paris",
            "2026-01-01 08:00:00.000 (overdue)",
            fired.as_str(),
        ] {
            assert!(text.contains(expected), "{expected:?} in\n{text}");
        }
        if running {
            engine.shutdown().await.unwrap();
        }
    }
}

/// Succeeds, staging a `Greet` follow-up.
#[derive(Debug, Serialize, Deserialize)]
struct Welcome;

impl Job for Welcome {
    const NAME: &'static str = "welcome";
    type Output = String;
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        ctx.then(Greet {
            name: "newcomer".into(),
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_shows_the_follow_ups_a_success_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Greet>()
        .register::<Welcome>()
        .start()
        .await
        .unwrap();
    let parent = engine.submit(Welcome).await.unwrap();
    let child = parent.join().await.unwrap().unwrap();
    let detail = json(dir, &["job", parent.id()]);
    assert_eq!(detail["followups"], serde_json::json!([child]), "{detail}");
    let text = ok(dir, &["job", parent.id()]);
    assert!(
        text.lines()
            .any(|l| l.contains("follow-ups") && l.contains(&child)),
        "{text}"
    );
    engine.shutdown().await.unwrap();
}

#[derive(Debug, Serialize, Deserialize)]
struct Flaky;

impl Job for Flaky {
    const NAME: &'static str = "flaky";
    type Output = ();
    type Error = Boom;

    async fn run(&self, _ctx: JobContext) -> Result<(), Boom> {
        Err(Boom("the line was busy".into()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_its_retry_shows_its_failed_attempt_and_its_error() {
    use gaffer::taquba::{OpenOptions, QueueConfig};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A retry an hour away: the job waits, scheduled, with its first
    // attempt failed.
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .open_options(
            OpenOptions::default()
                .flush_interval(Duration::from_millis(1))
                .default_queue_config(
                    QueueConfig::default().retry_backoff_base(Duration::from_secs(3600)),
                ),
        )
        .register::<Flaky>()
        .start()
        .await
        .unwrap();
    let mut events = engine.subscribe();
    let job = engine.submit(Flaky).await.unwrap();
    common::wait_event(&mut events, LIMIT, |e| {
        matches!(e, gaffer::EngineEvent::JobFailed { retrying: true, .. })
    })
    .await;
    let detail = common::eventually_ok("the job shows as scheduled", LIMIT, async || {
        let detail = json(dir, &["job", job.id()]);
        if detail["state"] == "scheduled" {
            Ok(detail)
        } else {
            Err(detail)
        }
    })
    .await;
    assert_eq!(detail["attempts"], 1, "{detail}");
    assert_eq!(detail["error"], "the line was busy", "{detail}");
    let history = detail["history"].as_array().expect("a history");
    assert_eq!(history.len(), 1, "{detail}");
    assert_eq!(history[0]["outcome"], "failed", "{detail}");
    assert_eq!(history[0]["error"], "the line was busy", "{detail}");
    let listed = json(dir, &["jobs", "--type", "flaky"]);
    let row = &listed["jobs"][0];
    assert_eq!(
        (row["state"].as_str(), row["attempts"].as_u64()),
        (Some("scheduled"), Some(1)),
        "{listed}"
    );
    engine.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_and_jobs_list_a_tenants_queue_under_its_type() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register_with::<Greet>(gaffer::JobOptions {
            rate: Some(
                gaffer::RateLimit::per_minute(1)
                    .unwrap()
                    .per_header("tenant"),
            ),
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    // A tenant's job waits a minute in the tenant's own queue (a bucket
    // starts empty: the first token comes a minute after the start).
    let mut opts = gaffer::SubmitOptions::default();
    opts.headers.insert("tenant".into(), "acme".into());
    let waiting = engine
        .submit_with(Greet { name: "b".into() }, opts)
        .await
        .unwrap();
    // `stats` reads the engine's snapshot of its counters, written every
    // few seconds: wait (bounded) for one that has the tenant's queue.
    let has_tenant = |stats: &Value| {
        stats["queues"].as_array().is_some_and(|qs| {
            qs.iter()
                .any(|q| q["name"] == "greet" && q["queue"] != "jobs.greet")
        })
    };
    let stats = common::eventually_ok("stats has the tenant's queue", LIMIT, async || {
        let stats = json(dir, &["stats"]);
        if has_tenant(&stats) {
            Ok(stats)
        } else {
            Err(stats)
        }
    })
    .await;
    let rows: Vec<&Value> = stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["name"] == "greet")
        .collect();
    let tenant = rows
        .iter()
        .find(|q| q["queue"] != "jobs.greet")
        .unwrap_or_else(|| panic!("no tenant queue in {stats}"));
    let name = tenant["queue"].as_str().unwrap();
    assert!(name.starts_with("jobs.greet..p"), "{stats}");
    assert_eq!(
        (tenant["kind"].as_str(), tenant["pending"].as_u64()),
        (Some("job"), Some(1))
    );
    let jobs = json(dir, &["jobs", "--type", "greet", "--state", "queued"]);
    let listed = jobs.to_string();
    assert!(listed.contains(waiting.id()), "{listed}");
    engine.shutdown().await.unwrap();
}

/// Stays running until the test lets it end ([`HOLD_END`]); says it
/// started ([`HOLD_STARTED`]).
#[derive(Debug, Serialize, Deserialize)]
struct Hold(u32);

static HOLD_STARTED: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);
static HOLD_END: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

impl Job for Hold {
    const NAME: &'static str = "hold";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, _ctx: JobContext) -> Result<u32, gaffer::Error> {
        HOLD_STARTED.add_permits(1);
        HOLD_END.acquire().await.expect("never closed").forget();
        Ok(self.0)
    }
}

/// The row of `queue` in a `stats --json` document's `queues`.
fn stats_row<'a>(stats: &'a Value, queue: &str) -> &'a Value {
    stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == queue)
        .unwrap_or_else(|| panic!("no {queue} in {stats}"))
}

/// #39 §6, an autoscaler's signals: `stats` gives each queue's ready and
/// running jobs and the age of its oldest ready job (claim order), from the
/// WAL beside a live engine as from the flushed state, and after the
/// flushed state's first ready job was claimed since. The jobs are enqueued
/// on a mock clock two hours behind this machine's, one a minute apart, so
/// each one's enqueue time is known and its age at least two hours (less
/// its minutes); no engine claims them until the test resumes the type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_gives_ready_running_and_the_oldest_ready_jobs_age() {
    use gaffer::taquba::MockClock;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hour = 3_600_000;
    let minute = 60_000;
    let t0 = gaffer_ops::format::now_ms() - 2 * hour;
    let clock = std::sync::Arc::new(MockClock::new(t0));
    let builder = |clock: Option<std::sync::Arc<MockClock>>| {
        let b = Engine::builder()
            .store(gaffer::Store::local_dir(dir))
            .flush_interval(Duration::from_millis(1))
            .register_with::<Hold>(gaffer::JobOptions {
                concurrency: Some(1),
                ..Default::default()
            })
            .register::<Greet>();
        match clock {
            Some(c) => b.clock(c),
            None => b,
        }
    };
    // Paused by an engine before: the next one's pool starts paused and
    // claims nothing (a pool paused while it waits for a claim may take one
    // job, then gives it back: enqueued again, at the time of its release).
    let engine = builder(None).start().await.unwrap();
    assert!(engine.pause(Hold::NAME).await.unwrap());
    engine.shutdown().await.unwrap();
    let engine = builder(Some(clock.clone())).start().await.unwrap();
    let greeted = engine.submit(Greet { name: "a".into() }).await.unwrap();
    greeted.join().await.unwrap().unwrap();
    for i in 0..3 {
        engine.submit(Hold(i)).await.unwrap();
        clock.advance(Duration::from_secs(60));
    }

    // Beside the live engine: every job is in the WAL only.
    for args in [&["stats", "--exact"][..], &["stats"]] {
        let stats = json(dir, args);
        let hold = stats_row(&stats, "jobs.hold");
        if args.len() == 2 {
            // The snapshot's counts may trail by a commit; --exact's not.
            assert_eq!((&hold["pending"], &hold["running"]), (&3.into(), &0.into()));
        }
        assert_eq!(hold["oldest_ready_ms"], t0, "{args:?}: {stats}");
        assert!(
            hold["oldest_ready_age_ms"].as_u64().unwrap() >= 2 * hour,
            "{stats}"
        );
        let greet = stats_row(&stats, "jobs.greet");
        assert_eq!(greet["pending"], 0, "{stats}");
        assert_eq!(greet["oldest_ready_ms"], Value::Null, "{stats}");
        assert_eq!(greet["oldest_ready_age_ms"], Value::Null, "{stats}");
    }
    // Shut down (the memtable flushed): from the flushed state.
    engine.shutdown().await.unwrap();
    let stats = json(dir, &["stats"]);
    assert_eq!(stats_row(&stats, "jobs.hold")["oldest_ready_ms"], t0);

    // A new engine on the system clock claims the first job (concurrency
    // 1), which then runs until the test ends it: 2 ready, 1 running. The
    // flushed state's first ready job is the one claimed since, in the
    // WAL: the oldest ready job is the second.
    let engine = builder(None).start().await.unwrap();
    assert!(engine.resume(Hold::NAME).await.unwrap());
    within(HOLD_STARTED.acquire())
        .await
        .expect("never closed")
        .forget();
    let flushed = reader(dir, false).await;
    let first = flushed
        .view()
        .list_jobs("jobs.hold", gaffer::taquba::JobStatus::Pending, None, 1)
        .await
        .unwrap();
    flushed.close().await.unwrap();
    assert_eq!(
        first.jobs.first().map(|j| j.enqueued_at),
        Some(t0),
        "the test's premise: the flushed state still has the claimed job ready"
    );
    for args in [&["stats", "--exact"][..], &["stats"]] {
        let stats = json(dir, args);
        let hold = stats_row(&stats, "jobs.hold");
        if args.len() == 2 {
            // The snapshot's counts may trail by a commit; --exact's not.
            assert_eq!((&hold["pending"], &hold["running"]), (&2.into(), &1.into()));
        }
        assert_eq!(hold["oldest_ready_ms"], t0 + minute, "{args:?}: {stats}");
        assert!(
            hold["oldest_ready_age_ms"].as_u64().unwrap() >= 2 * hour - minute,
            "{stats}"
        );
    }
    let text = ok(dir, &["stats"]);
    assert!(text.contains("OLDEST READY"), "{text}");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("jobs.hold"))
        .unwrap_or_else(|| panic!("no jobs.hold in {text}"));
    let age = line.split_whitespace().last().unwrap();
    assert!(
        age.starts_with("1h5") || age.starts_with("2h"),
        "{age} in {text}"
    );
    HOLD_END.add_permits(3);
    engine.shutdown().await.unwrap();
}

/// `stats` over a shard set: each shard's oldest ready job, and the set's
/// (`total`) the oldest of them. The jobs wait (their type paused), one
/// enqueued a minute after the other on a mock clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_sets_stats_give_the_oldest_ready_job_of_the_set() {
    use gaffer::taquba::MockClock;
    let tmp = tempfile::tempdir().unwrap();
    for i in 0..3 {
        std::fs::create_dir_all(tmp.path().join(format!("shard-{i:02}"))).unwrap();
    }
    let template = format!("file://{}/shard-{{shard}}", tmp.path().display());
    let set = gaffer::remote::ShardSet::from_template(&template, 3).unwrap();
    let t0 = gaffer_ops::format::now_ms() - 3_600_000;
    let clock = std::sync::Arc::new(MockClock::new(t0));
    let start = async |clock: Option<std::sync::Arc<MockClock>>| {
        gaffer::remote::ShardedEngine::start(
            set.clone(),
            &gaffer::remote::Placement::Listed(vec![0, 1, 2]),
            move |_, url| {
                let b = Engine::builder()
                    .store(gaffer::Store::url(url))
                    .flush_interval(Duration::from_millis(1))
                    .register::<Greet>();
                match &clock {
                    Some(c) => b.clock(c.clone()),
                    None => b,
                }
            },
        )
        .await
        .unwrap()
    };
    // Paused by the engines before: the next ones' pools claim nothing.
    let engines = start(None).await;
    engines.pause(Greet::NAME).await.unwrap();
    engines.shutdown().await;
    let engines = start(Some(clock.clone())).await;
    let mut oldest = [None; 3];
    for i in 0..6u64 {
        let h = engines
            .submit(Greet {
                name: format!("n{i}"),
            })
            .await
            .unwrap();
        let shard = set.shard_of(h.id());
        oldest[shard].get_or_insert(t0 + i * 60_000);
        clock.advance(Duration::from_secs(60));
    }
    let out = on_shards(&template, &["stats", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (shard, part) in stats["shards"].as_array().unwrap().iter().enumerate() {
        let greet = part["report"]["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["queue"] == "jobs.greet");
        let shown = greet.and_then(|g| g["oldest_ready_ms"].as_u64());
        assert_eq!(shown, oldest[shard], "shard {shard}: {stats}");
    }
    let total = stats_row(&stats["total"], "jobs.greet");
    assert_eq!(total["pending"], 6, "{stats}");
    assert_eq!(total["oldest_ready_ms"], t0, "{stats}");
    assert!(
        total["oldest_ready_age_ms"].as_u64().unwrap() >= 3_600_000,
        "{stats}"
    );
    engines.shutdown().await;
}

/// `gaffer --shards TEMPLATE --shard-count N …`: its stdout, or panic.
fn on_shards(template: &str, args: &[&str]) -> Output {
    bin()
        .args(["--shards", template, "--shard-count", "3"])
        .run(args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_set_reads_every_shard_or_the_one_of_an_id() {
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
                .pipeline(Double)
        },
    )
    .await
    .unwrap();
    // A batch whose item 3 fails: its dead delivery's queue job id says
    // nothing of its shard (the batch's does); `job` finds it on the
    // others when the id's own shard has no such job, `item` on the
    // batch's shard.
    let report = engines
        .batch::<Double>("sharded-items")
        .unwrap()
        .run(0..5u64)
        .await
        .unwrap();
    assert_eq!(report.failed, 1);
    let out = on_shards(&template, &["dead", "--json"]);
    let dead: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = dead["all"]["dead"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{dead}");
    let out = on_shards(
        &template,
        &["job", items[0]["id"].as_str().unwrap(), "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let item: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(item["key"], "item-3", "{item}");
    let out = on_shards(&template, &["item", "sharded-items", "item-3", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ids = Vec::new();
    for name in ["ada", "bob", "cy", "dee", "eve", "fay"] {
        let h = engines.submit(Greet { name: name.into() }).await.unwrap();
        h.join().await.unwrap().unwrap();
        ids.push(h.id().to_string());
    }
    // stats: one part per shard; the done counts add up to the jobs run.
    let out = on_shards(&template, &["stats", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = stats["shards"].as_array().unwrap();
    assert_eq!(parts.len(), 3, "{stats}");
    let done: i64 = parts
        .iter()
        .flat_map(|p| p["report"]["queues"].as_array().unwrap())
        .filter(|q| q["name"] == "greet")
        .map(|q| q["done"].as_i64().unwrap())
        .sum();
    assert_eq!(done, 6, "{stats}");
    // And the counts added up over the shards.
    let total = stats["total"]["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "greet")
        .unwrap();
    assert_eq!(total["done"], 6, "{stats}");
    let text = on_shards(&template, &["stats"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("all 3 shards"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // job ID: found in its shard, whichever it is.
    for id in &ids {
        let out = on_shards(&template, &["job", id, "--json"]);
        assert!(
            out.status.success(),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let job: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(job["id"], id.as_str(), "{job}");
    }
    // A listing reads every shard: each job once, in its shard's part.
    let out = on_shards(&template, &["jobs", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let set = gaffer::remote::ShardSet::from_template(&template, 3).unwrap();
    for id in &ids {
        let home = set.shard_of(id);
        for shard in 0..3 {
            let part = listed["shards"][shard]["report"].to_string();
            assert_eq!(
                part.contains(id.as_str()),
                shard == home,
                "{id} (shard {home}): {listed}"
            );
        }
    }
    // And merged over the set: each job once, tagged with its shard,
    // newest first; `--limit` bounds the merged listing.
    let all = listed["all"]["jobs"].as_array().unwrap();
    assert_eq!(all.len(), ids.len(), "{listed}");
    for id in &ids {
        let rows: Vec<_> = all.iter().filter(|j| j["id"] == id.as_str()).collect();
        assert_eq!(rows.len(), 1, "{id}: {listed}");
        assert_eq!(rows[0]["shard"], set.shard_of(id), "{id}: {listed}");
    }
    let at: Vec<i64> = all.iter().map(|j| j["at_ms"].as_i64().unwrap()).collect();
    assert!(at.windows(2).all(|w| w[0] >= w[1]), "{listed}");
    let out = on_shards(&template, &["jobs", "--limit", "2", "--json"]);
    let two: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(two["all"]["jobs"].as_array().unwrap().len(), 2, "{two}");
    assert_eq!(two["all"]["more"], true, "{two}");
    let text = String::from_utf8_lossy(&on_shards(&template, &["jobs"]).stdout).into_owned();
    assert!(
        text.starts_with("all 3 shards\n")
            && text
                .lines()
                .nth(1)
                .is_some_and(|h| h.trim_start().starts_with("SHARD"))
            && text.matches("greet").count() == ids.len(),
        "{text}"
    );
    // A page after a cursor, or a command that acts, names its shard.
    let out = on_shards(&template, &["jobs", "--after", "x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shard"));
    let out = on_shards(&template, &["jobs", "--shard", "1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The set read with another count: refused at the first shard, whose
    // marker says it is shard 0 of 3.
    let out = bin()
        .args(["--shards", &template, "--shard-count", "2"])
        .run(&["stats"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shard 0/3") && err.contains("0/2"), "{err}");
    engines.shutdown().await;
}

/// The store's queue, opened read-only: replaying the WAL past the last
/// memtable flush (`replay`), or not (the flushed state only).
async fn reader(dir: &Path, replay: bool) -> gaffer::taquba::QueueReader {
    let store: std::sync::Arc<dyn gaffer::taquba::object_store::ObjectStore> = std::sync::Arc::new(
        gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap(),
    );
    let options = gaffer::taquba::ReaderOptions::default()
        .mode(gaffer::taquba::ReaderMode::FollowLatest)
        .skip_wal_replay(!replay);
    gaffer::taquba::QueueReader::open_with_options(store, "queue", options)
        .await
        .unwrap()
}

/// `(queue, pending, scheduled, running, done, dead)` of every queue, as a
/// replaying reader counts them.
async fn replayed_counts(dir: &Path) -> Vec<(String, i64, i64, i64, i64, i64)> {
    let r = reader(dir, true).await;
    let mut out = Vec::new();
    for q in r.view().list_queues().await.unwrap() {
        let s = r.view().stats(&q).await.unwrap();
        out.push((q, s.pending, s.scheduled, s.claimed, s.done, s.dead));
    }
    r.close().await.unwrap();
    out.sort();
    out
}

/// `health` and `stats` read the flushed state and, of the WAL past it,
/// the beat and the counters only, from the WAL objects: beside a live
/// engine whose memtable was never flushed (everything is in the WAL), they
/// answer what a reader that replays the whole WAL answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_stats_answer_as_a_replaying_reader_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .open_options(
            gaffer::taquba::OpenOptions::default().liveness_heartbeat(Duration::from_millis(50)),
        )
        .register::<Greet>()
        .register::<Explode>()
        .pipeline(Double)
        .start()
        .await
        .unwrap();
    for i in 0..20 {
        let h = engine
            .submit(Greet {
                name: format!("n{i}"),
            })
            .await
            .unwrap();
        h.join().await.unwrap().unwrap();
    }
    let boom = engine.submit(Explode).await.unwrap();
    assert!(boom.join().await.unwrap().is_err());
    let report = engine
        .batch::<Double>("nightly")
        .unwrap()
        .run(0..5u64)
        .await
        .unwrap();
    assert_eq!((report.succeeded, report.failed), (4, 1));

    // The test's premise: the flushed state has none of it.
    let flushed = reader(dir, false).await;
    assert!(flushed.view().list_queues().await.unwrap().is_empty());
    assert!(flushed.writer_heartbeat().await.unwrap().is_none());
    flushed.close().await.unwrap();

    // stats --exact: the replaying reader's counts (the engine is idle
    // now: the same before and after).
    let before = replayed_counts(dir).await;
    let stats = json(dir, &["stats", "--exact"]);
    assert!(stats.get("snapshot_at_ms").is_none(), "{stats}");
    assert_eq!(replayed_counts(dir).await, before, "the engine moved");
    let mut shown: Vec<(String, i64, i64, i64, i64, i64)> = stats["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            let n = |f: &str| q[f].as_i64().unwrap();
            (
                q["queue"].as_str().unwrap().to_string(),
                n("pending"),
                n("scheduled"),
                n("running"),
                n("done"),
                n("dead"),
            )
        })
        .collect();
    shown.sort();
    let engines: Vec<_> = before
        .iter()
        .filter(|q| {
            q.0.starts_with("jobs.") || q.0.starts_with("bulk-items.") || q.0 == "jobs-intake"
        })
        .cloned()
        .collect();
    assert_eq!(shown, engines, "{stats}");
    let greet = shown.iter().find(|q| q.0 == "jobs.greet").unwrap();
    assert_eq!(greet.4, 20, "{stats}");

    // stats: from the engine's snapshot of the counts (it looks every 5 s)
    // and the changes committed since, read from the newest WAL objects:
    // the same rows, at once.
    let snapshot = common::eventually_ok(
        "stats shows the exact counts from a snapshot",
        LIMIT,
        async || {
            let shown = json(dir, &["stats"]);
            if shown.get("snapshot_at_ms").is_some() && shown["queues"] == stats["queues"] {
                Ok(shown)
            } else {
                Err(format!("{shown} (exact: {stats})"))
            }
        },
    )
    .await;
    let text = ok(dir, &["stats"]);
    assert!(text.contains("the engine's snapshot"), "{text}");
    assert!(
        snapshot["snapshot_at_ms"].as_u64().unwrap() > 0,
        "{snapshot}"
    );

    // health: the newest beat. The engine beats every 50 ms; wait until
    // it has beaten a few times, so that the newest beat is not the first.
    let r = reader(dir, true).await;
    let first = r.writer_heartbeat().await.unwrap().unwrap();
    r.close().await.unwrap();
    let beats = common::eventually_ok("the engine has beaten 3 times more", LIMIT, async || {
        let r = reader(dir, true).await;
        let b = r.writer_heartbeat().await.unwrap().unwrap();
        r.close().await.unwrap();
        if b.counter >= first.counter + 3 {
            Ok(b)
        } else {
            Err(format!("beat {} (first {})", b.counter, first.counter))
        }
    })
    .await;
    let health = json(dir, &["health"]);
    let r = reader(dir, true).await;
    let after = r.writer_heartbeat().await.unwrap().unwrap();
    let epoch = r.last_store_activity().writer_epoch;
    r.close().await.unwrap();
    assert_eq!(health["status"], "alive", "{health}");
    let at = health["heartbeat_at_ms"].as_u64().unwrap();
    assert!(
        (beats.at_ms..=after.at_ms).contains(&at),
        "the beat shown, at {at}, is not the newest: a replay saw {} then {}: {health}",
        beats.at_ms,
        after.at_ms
    );
    assert_eq!(health["heartbeat_interval_ms"], 50);
    assert_eq!(health["writer_epoch"], epoch);
    assert_eq!(health["heartbeat_writer_epoch"], after.writer_epoch);
    assert!(
        health["unflushed_wal_objects"].as_u64().unwrap() > 0,
        "{health}"
    );

    // Shut down (the memtable is flushed): the closing beat, from the
    // flushed state now.
    engine.shutdown().await.unwrap();
    let closed = gaffer(dir, &["health", "--json"]);
    assert_eq!(closed.status.code(), Some(3), "{closed:?}");
    let closed: Value = serde_json::from_slice(&closed.stdout).unwrap();
    assert_eq!(closed["status"], "closed", "{closed}");
    let stats_after = json(dir, &["stats"]);
    assert_eq!(
        stats_after["queues"], stats["queues"],
        "a flushed store counts the same"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_runs_a_waiting_job_on_and_job_shows_it_waiting() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register::<Approve>()
        .start()
        .await
        .unwrap();
    let job = engine.submit(Approve { order: 7 }).await.unwrap();
    common::eventually("the job shows as waiting", LIMIT, async || {
        json(dir, &["job", job.id()])["state"] == "waiting"
    })
    .await;
    let waiting = json(dir, &["jobs", "--state", "waiting"]);
    assert_eq!(waiting["jobs"][0]["id"], job.id(), "{waiting}");
    // What it waits for, and until when.
    let shown = json(dir, &["job", job.id()]);
    assert_eq!(shown["waiting_for"], "approval", "{shown}");
    let until = shown["run_at_ms"].as_u64().expect("its timeout");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        until > now + 3000 * 1000 && until <= now + 3600 * 1000,
        "{shown}"
    );
    let text = ok(dir, &["job", job.id()]);
    assert!(
        text.contains("waiting for") && text.contains("approval") && text.contains("times out"),
        "{text}"
    );
    // Scheduled lists every job held for later, those waiting among them.
    let scheduled = json(dir, &["jobs", "--state", "scheduled"]);
    assert_eq!(scheduled["jobs"][0]["state"], "waiting", "{scheduled}");
    // A payload that is not JSON is refused before anything is sent.
    let bad = gaffer(dir, &["signal", job.id(), "approval", "{not json"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");

    let sent = json(dir, &["signal", job.id(), "approval", r#"{"by":"ana"}"#]);
    assert_eq!(sent["status"], "applied", "{sent}");
    assert!(
        sent["result"].as_str().unwrap_or("").contains("delivered"),
        "{sent}"
    );
    let output = within(job.join()).await.unwrap();
    assert_eq!(output, Ok("order 7 approved by ana".to_string()));

    // The job ended: a second signal is refused, with the reason, exit 1.
    let again = gaffer(
        dir,
        &["--json", "signal", job.id(), "approval", r#"{"by":"bo"}"#],
    );
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let refused: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(refused["status"], "refused", "{refused}");
    engine.shutdown().await.unwrap();
}

/// `gaffer … | head`: a reader that closed its end before the command
/// printed (here, before the command started: the pipe has no reader at
/// all, so every write fails) ends the command quietly, with the exit
/// status it would have had: no panic, no backtrace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_closed_the_pipe_ends_the_command_quietly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = start(dir).await;
    let h = engine
        .submit(Greet {
            name: "pipe".into(),
        })
        .await
        .unwrap();
    h.join().await.unwrap().unwrap();
    for args in [
        vec!["jobs"],
        vec!["jobs", "--json"],
        vec!["stats"],
        vec!["job", h.id()],
        vec!["health"],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = at(dir)
            .command(&args)
            .stdout(writer)
            .output()
            .expect("the gaffer binary runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
    engine.shutdown().await.unwrap();
    // The exit status stays the command's: no writer alive is 3.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = at(dir)
        .command(&["health"])
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// #37 §4: `stats TYPE` shows a fair type's values with the most ready and
/// running jobs (the rest summed) and their oldest ready job's age;
/// `pause TYPE --key H=V` holds one value while the others run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_of_a_type_shows_its_top_values_and_pause_key_holds_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register_with::<Greet>(gaffer::JobOptions {
            fair_by: Some(gaffer::Fairness::header("tenant")),
            ..Default::default()
        })
        .register::<Explode>()
        .start()
        .await
        .unwrap();
    // The whole type paused first: every job stays ready.
    engine.pause("greet").await.unwrap();
    let tenant = |t: &str| {
        let mut opts = gaffer::SubmitOptions::default();
        opts.headers.insert("tenant".into(), t.into());
        opts
    };
    let mut handles = Vec::new();
    for (t, n) in [("acme", 3), ("globex", 2), ("initech", 1)] {
        for i in 0..n {
            let name = format!("{t}-{i}");
            handles.push((
                t,
                engine.submit_with(Greet { name }, tenant(t)).await.unwrap(),
            ));
        }
    }
    let plain = engine
        .submit(Greet {
            name: "plain".into(),
        })
        .await
        .unwrap();

    let stats = json(dir, &["stats", "greet", "--top", "2"]);
    let values = stats["values"].as_array().unwrap();
    let shown: Vec<(&str, &str, u64, u64)> = values
        .iter()
        .map(|v| {
            (
                v["header"].as_str().unwrap_or(""),
                v["value"].as_str().unwrap_or(""),
                v["ready"].as_u64().unwrap(),
                v["running"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![("tenant", "acme", 3, 0), ("tenant", "globex", 2, 0)],
        "{stats}"
    );
    assert!(
        values.iter().all(|v| v["oldest_ready_age_ms"].is_u64()),
        "{stats}"
    );
    // initech's and the job without the header: summed.
    assert_eq!(stats["rest"]["values"], 2, "{stats}");
    assert_eq!(stats["rest"]["ready"], 2, "{stats}");
    assert_eq!(
        (&stats["queues"], &stats["examined"]),
        (&3.into(), &3.into())
    );
    let text = ok(dir, &["stats", "greet", "--top", "2"]);
    assert!(
        text.contains("tenant=acme") && text.contains("tenant=globex"),
        "{text}"
    );
    assert!(text.contains("(2 more values)"), "{text}");
    let text = ok(dir, &["stats", "greet", "--top", "4"]);
    assert!(
        text.contains("tenant=initech") && text.contains("(no header)"),
        "{text}"
    );

    // Pause acme, resume the type: every other value runs, acme waits.
    let paused = json(dir, &["pause", "greet", "--key", "tenant=acme"]);
    assert_eq!(paused["status"], "applied", "{paused}");
    assert!(
        paused["result"].as_str().unwrap().contains("paused"),
        "{paused}"
    );
    assert_eq!(json(dir, &["resume", "greet"])["status"], "applied");
    for (t, h) in &handles {
        if *t != "acme" {
            assert!(h.join().await.unwrap().is_ok());
        }
    }
    assert!(plain.join().await.unwrap().is_ok());
    for (t, h) in &handles {
        if *t == "acme" {
            assert_eq!(
                engine.status(h.id()).await.unwrap(),
                gaffer::job::JobState::Queued
            );
        }
    }
    let stats = json(dir, &["stats", "greet"]);
    let rows = stats["values"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{stats}");
    assert_eq!(
        (&rows[0]["value"], &rows[0]["ready"], &rows[0]["paused"]),
        (&"acme".into(), &3.into(), &true.into()),
        "{stats}"
    );
    assert!(ok(dir, &["stats", "greet"]).contains("paused"));

    // Refused: no `=`, a type whose jobs are not spread by a header.
    let bad = gaffer(dir, &["pause", "greet", "--key", "acme"]);
    assert_eq!(bad.status.code(), Some(1), "{bad:?}");
    let refused = gaffer(dir, &["pause", "explode", "--key", "tenant=acme", "--json"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let body: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(body["status"], "refused", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("gaffer pause explode"),
        "{body}"
    );

    // A store whose partition marks are not complete (written before
    // marks existed): the values come from taquba's list of queues, named
    // from a job's headers. The engine stopped, its marks removed by hand.
    engine.shutdown().await.unwrap();
    let store: std::sync::Arc<dyn gaffer::taquba::object_store::ObjectStore> = std::sync::Arc::new(
        gaffer::taquba::object_store::local::LocalFileSystem::new_with_prefix(dir).unwrap(),
    );
    let queue = gaffer::taquba::Queue::open(store, "queue").await.unwrap();
    let base = gaffer_layout::keys::queue_for("jobs", "greet");
    let mut fx = gaffer::taquba::SettlementEffects::default()
        .kv_delete(gaffer_layout::keys::partitions_listed_key(&base));
    for t in ["acme", "globex", "initech"] {
        let q = gaffer_layout::keys::partition_queue(&base, t);
        fx = fx.kv_delete(gaffer_layout::keys::partition_mark_key(&q));
    }
    queue.commit_effects(fx).await.unwrap();
    queue.close().await.unwrap();
    let stats = json(dir, &["stats", "greet"]);
    let rows = stats["values"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{stats}");
    assert_eq!(
        (&rows[0]["header"], &rows[0]["value"], &rows[0]["ready"]),
        (&"tenant".into(), &"acme".into(), &3.into()),
        "{stats}"
    );
    assert_eq!(
        (&stats["queues"], &stats["more"]),
        (&3.into(), &false.into())
    );

    // Resumed (a new engine on the store): acme's jobs run.
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .intake_poll(Duration::from_millis(20))
        .register_with::<Greet>(gaffer::JobOptions {
            fair_by: Some(gaffer::Fairness::header("tenant")),
            ..Default::default()
        })
        .register::<Explode>()
        .start()
        .await
        .unwrap();
    let resumed = json(dir, &["resume", "greet", "--key", "tenant=acme"]);
    assert_eq!(resumed["status"], "applied", "{resumed}");
    for (t, h) in &handles {
        if *t == "acme" {
            let h = engine.handle::<Greet>(h.id()).unwrap();
            assert!(h.join().await.unwrap().is_ok());
        }
    }
    engine.shutdown().await.unwrap();
}

/// By hand (`cargo test -p gaffer-cli --test cli -- --ignored
/// stats_of_a_type_cost --nocapture`): how long `stats TYPE` takes with
/// 10, 1 000 and 2 000 values each holding one ready job (the cap reads
/// 1 000 of them), the process's wall time, three runs each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn stats_of_a_type_cost() {
    for values in [10usize, 1_000, 2_000] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let engine = Engine::builder()
            .store(gaffer::Store::local_dir(dir))
            .flush_interval(Duration::from_millis(1))
            .register_with::<Greet>(gaffer::JobOptions {
                fair_by: Some(gaffer::Fairness::header("tenant")),
                ..Default::default()
            })
            .start()
            .await
            .unwrap();
        engine.pause("greet").await.unwrap();
        let mut batch = Vec::new();
        for v in 0..values {
            let mut opts = gaffer::SubmitOptions::default();
            opts.headers.insert("tenant".into(), format!("t{v}"));
            batch.push(engine.submit_with(
                Greet {
                    name: v.to_string(),
                },
                opts,
            ));
            if batch.len() == 100 {
                for f in batch.drain(..) {
                    f.await.unwrap();
                }
            }
        }
        for f in batch.drain(..) {
            f.await.unwrap();
        }
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let out = json(dir, &["stats", "greet"]);
            times.push(t.elapsed());
            assert_eq!(out["examined"], values.min(1_000), "{out}");
        }
        let t = std::time::Instant::now();
        json(dir, &["stats"]);
        println!(
            "{values} values: stats TYPE {times:?}; plain stats {:?}",
            t.elapsed()
        );
        engine.shutdown().await.unwrap();
    }
}
