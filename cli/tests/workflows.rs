//! `gaffer workflows` and `gaffer workflow ID` against a live engine on a
//! temp directory: a workflow that succeeds (with a cleanup step), one
//! whose failed step cancels the step that needs it, and one held by a
//! step waiting for a signal (the step after it blocked), then cancelled.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Explode, Greet, LIMIT, gaffer, json, ok};
use gaffer::workflow::{Workflow, step_id};
use gaffer::{Engine, Job, JobContext};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Waits for the signal `go` (an hour at most).
#[derive(Debug, Serialize, Deserialize)]
struct Hold;

impl Job for Hold {
    const NAME: &'static str = "hold";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<(), gaffer::Error> {
        ctx.wait_signal::<()>("go", Duration::from_secs(3600)).await
    }
}

/// Run `args --json` until `done` says yes of its document; the last one.
/// Panics naming `what` after [`LIMIT`].
async fn until(dir: &Path, args: &[&str], what: &str, done: impl Fn(&Value) -> bool) -> Value {
    common::eventually_ok(what, LIMIT, async || {
        let v = json(dir, args);
        if done(&v) { Ok(v) } else { Err(v) }
    })
    .await
}

/// The step `name` of a `gaffer workflow ID --json` document.
fn step<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["steps"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no step {name} in {doc}"))
}

fn greet(name: &str) -> Greet {
    Greet { name: name.into() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_and_workflow_show_each_graph_with_its_steps_states() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let engine = Engine::builder()
        .store(gaffer::Store::local_dir(dir))
        .flush_interval(Duration::from_millis(1))
        .register::<Greet>()
        .register::<Explode>()
        .register::<Hold>()
        .start()
        .await
        .expect("engine starts");

    let good = Workflow::new("greetings")
        .id("wf-a-good")
        .step("a", greet("a"))
        .step("b", greet("b"))
        .step_after("both", greet("both"), ["a", "b"])
        .cleanup_after("tidy", greet("tidy"), ["both"]);
    let good = engine.submit_workflow(good).await.unwrap();
    assert!(good.join().await.unwrap().is_ok());
    let bad = Workflow::new("fireworks")
        .id("wf-b-bad")
        .step("boom", Explode)
        .step_after("after", greet("after"), ["boom"])
        .cleanup_after("tidy", greet("tidy"), ["after"]);
    let bad = engine.submit_workflow(bad).await.unwrap();
    assert_eq!(bad.join().await.unwrap().unwrap_err().step, "boom");
    let held = Workflow::new("held")
        .id("wf-c-held")
        .step("hold", Hold)
        .step_after("next", greet("next"), ["hold"]);
    let held = engine.submit_workflow(held).await.unwrap();

    // The held workflow: its first step waits for its signal, the next is
    // blocked behind it.
    let doc = until(dir, &["workflow", held.id()], "the hold step waits", |d| {
        step(d, "hold")["state"] == "waiting"
    })
    .await;
    assert_eq!(step(&doc, "next")["state"], "blocked", "{doc}");
    assert_eq!(doc["workflow"]["state"], "running", "{doc}");
    assert_eq!(doc["workflow"]["ended"], false, "{doc}");
    assert_eq!(doc["workflow"]["counts"]["blocked"], 1, "{doc}");
    assert_eq!(doc["workflow"]["counts"]["waiting"], 1, "{doc}");

    // The listing, in id order, each with its steps by state.
    let list = json(dir, &["workflows"]);
    let rows = list["workflows"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["wf-a-good", "wf-b-bad", "wf-c-held"], "{list}");
    assert_eq!(list["more"], false);
    assert_eq!(rows[0]["name"], "greetings");
    assert_eq!(rows[0]["state"], "succeeded");
    assert_eq!(rows[0]["steps"], 4);
    assert_eq!(rows[0]["counts"]["succeeded"], 4, "{list}");
    assert!(rows[0]["ended_at_ms"].as_u64().is_some(), "{list}");
    assert_eq!(rows[1]["state"], "failed");
    let c = &rows[1]["counts"];
    assert_eq!(
        (&c["failed"], &c["cancelled"], &c["succeeded"]),
        (&1.into(), &1.into(), &1.into())
    );
    assert_eq!(rows[2]["state"], "running");
    assert!(rows[2]["ended_at_ms"].is_null());
    // A page at a time.
    let first = json(dir, &["workflows", "--limit", "1"]);
    assert_eq!(first["more"], true, "{first}");
    assert_eq!(first["next"], "wf-a-good", "{first}");
    let rest = json(dir, &["workflows", "--after", "wf-a-good", "--limit", "5"]);
    let ids: Vec<&str> = rest["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["wf-b-bad", "wf-c-held"], "{rest}");
    let text = ok(dir, &["workflows"]);
    for want in [
        "BLOCKED",
        "greetings",
        "fireworks",
        "succeeded",
        "failed",
        "running",
    ] {
        assert!(text.contains(want), "{want} not in\n{text}");
    }
    let text = ok(dir, &["workflows", "--limit", "2"]);
    assert!(text.contains("(more: pass --after wf-b-bad)"), "{text}");

    // One workflow: its steps after the steps they need, each with its job.
    let doc = json(dir, &["workflow", "wf-b-bad"]);
    let names: Vec<&str> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["boom", "after", "tidy"], "{doc}");
    assert_eq!(step(&doc, "boom")["state"], "failed");
    assert_eq!(step(&doc, "after")["state"], "cancelled");
    assert_eq!(step(&doc, "after")["deps"], serde_json::json!(["boom"]));
    assert_eq!(step(&doc, "tidy")["state"], "succeeded");
    assert_eq!(step(&doc, "tidy")["regardless"], true);
    assert_eq!(step(&doc, "boom")["job_type"], "explode");
    let boom_job = step_id("wf-b-bad", "boom");
    assert_eq!(step(&doc, "boom")["job"], boom_job.as_str());
    // The step's job is a job `gaffer job` shows.
    let job = json(dir, &["job", &boom_job]);
    assert_eq!(job["state"], "failed");
    assert_eq!(job["error"], "the fuse was lit");

    let text = ok(dir, &["workflow", "wf-a-good"]);
    let line = |name: &str| {
        text.lines()
            .position(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line of step {name} in\n{text}"))
    };
    assert!(
        line("a") < line("both") && line("b") < line("both"),
        "{text}"
    );
    assert!(line("both") < line("tidy"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[line("both")].contains("← a, b"), "{text}");
    assert!(lines[line("tidy")].contains("← both (cleanup)"), "{text}");
    assert!(
        lines[line("a")].contains(&step_id("wf-a-good", "a")),
        "{text}"
    );
    assert!(
        text.contains("greetings") && text.contains("4 succeeded"),
        "{text}"
    );

    // An unknown or malformed id: one line, exit 1.
    for id in ["nope", "a/b", "<x>"] {
        let missing = gaffer(dir, &["workflow", id]);
        assert_eq!(missing.status.code(), Some(1), "{id}: {missing:?}");
        let err = String::from_utf8_lossy(&missing.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("no workflow `{id}`")), "{err}");
    }
    let out = gaffer(dir, &["workflows", "--after", "a/b"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a workflow id"));

    // Cancelled from the shell (through the store's inbox): the waiting
    // step is cancelled, and the blocked one with it.
    let out = gaffer(dir, &["cancel", "--workflow", held.id()]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cancelled"),
        "{out:?}"
    );
    let doc = until(
        dir,
        &["workflow", held.id()],
        "the workflow ends cancelled",
        |d| d["workflow"]["state"] == "cancelled",
    )
    .await;
    assert_eq!(doc["workflow"]["cancelled"], true, "{doc}");
    assert_eq!(step(&doc, "hold")["state"], "cancelled", "{doc}");
    assert_eq!(step(&doc, "next")["state"], "cancelled", "{doc}");
    // Retried from the shell: the first step waits again, the next is
    // blocked behind it.
    let out = gaffer(dir, &["retry", "--workflow", held.id()]);
    assert!(out.status.success(), "{out:?}");
    let doc = until(
        dir,
        &["workflow", held.id()],
        "the workflow runs again",
        |d| d["workflow"]["state"] == "running",
    )
    .await;
    assert_eq!(step(&doc, "next")["state"], "blocked", "{doc}");
    engine.shutdown().await.unwrap();
}
