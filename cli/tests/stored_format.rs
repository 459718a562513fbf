//! The `gaffer` command reads the committed layout-2 fixture
//! (`tests/fixtures/layout-2`, written by the generator in the root crate's
//! `tests/stored_format.rs`; its README lists what it holds): a store
//! written by today's layout stays readable by the command of the next
//! release. Each command reads a copy; the committed files are never
//! opened.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{T0_MS, at};
use serde_json::Value;

const HOUR_MS: u64 = 3_600_000;

fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "README.md" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_store(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn a_copy() -> tempfile::TempDir {
    let fixture: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/layout-2");
    assert!(fixture.join("queue").is_dir(), "no fixture at {fixture:?}");
    let tmp = tempfile::tempdir().unwrap();
    copy_store(&fixture, tmp.path());
    tmp
}

fn json(dir: &Path, args: &[&str]) -> Value {
    at(dir).json(args)
}

fn id(key: &str) -> String {
    gaffer::job::keyed_job_id(key)
}

#[test]
fn the_command_reads_the_layout_2_fixture() {
    let tmp = a_copy();
    let dir = tmp.path();

    // Every job: the finished ones (from the finished-jobs index), the
    // queued, scheduled and running ones, and the batch's unfinished items.
    let jobs = json(dir, &["jobs"]);
    let listed: BTreeMap<String, String> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_string(),
                j["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let tick = gaffer::periodic::Tick::new("hourly", T0_MS + HOUR_MS).job_id;
    let state = |id: &str| listed.get(id).map(String::as_str);
    for (job, expected) in [
        (id("done-1"), "succeeded"),
        (id("client-taken"), "succeeded"),
        (tick.clone(), "succeeded"),
        (id("doomed-1"), "failed"),
        (id("cancelled-1"), "cancelled"),
        (id("later-1"), "scheduled"),
        (id("paused-1"), "queued"),
        (id("pending-b"), "queued"),
        (id("pending-c"), "queued"),
    ] {
        assert_eq!(state(&job), Some(expected), "{job} in {jobs}");
    }
    // Claimed when the writer was killed (unless the claim was not durable yet).
    assert!(
        matches!(state(&id("pending-a")), Some("running" | "queued")),
        "{jobs}"
    );
    let items = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["batch"] == "fixture-batch")
        .count();
    assert_eq!(items, 3, "the batch's unfinished items: {jobs}");
    assert_eq!(listed.len(), 10 + 3, "{jobs}");

    // One job, with its output; the dead letter with its error.
    let done = json(dir, &["job", &id("done-1")]);
    assert_eq!(done["state"], "succeeded");
    assert_eq!(done["output"], "echo:done-1");
    let doomed = json(dir, &["job", &id("doomed-1")]);
    assert_eq!(doomed["state"], "failed");
    assert_eq!(doomed["error"], "doomed for good");
    let dead = json(dir, &["dead"]);
    let dead = dead["dead"].as_array().unwrap();
    assert!(
        dead.iter()
            .any(|d| d["id"] == id("doomed-1").as_str() && d["error"] == "doomed for good"),
        "{dead:?}"
    );
    assert!(
        dead.iter()
            .any(|d| d["batch"] == "fixture-batch" && d["key"] == "item-2"),
        "{dead:?}"
    );

    // A queued job.
    let later = json(dir, &["job", &id("later-1")]);
    assert_eq!(later["state"], "scheduled", "{later}");

    // The half-finished batch.
    let batch = json(dir, &["batch", "fixture-batch"]);
    assert_eq!(batch["pipeline"], "square", "{batch}");
    assert_eq!(
        (
            &batch["total"],
            &batch["succeeded"],
            &batch["failed"],
            &batch["outstanding"]
        ),
        (
            &Value::from(6),
            &Value::from(2),
            &Value::from(1),
            &Value::from(3)
        ),
        "{batch}"
    );

    // The periodic records.
    let periodic = json(dir, &["periodic"]);
    let rows = periodic["periodic"].as_array().unwrap();
    let hourly = rows.iter().find(|r| r["name"] == "hourly").unwrap();
    assert_eq!(hourly["schedule"], "every 1h");
    assert_eq!(hourly["last_fired_ms"], T0_MS + HOUR_MS);
    assert_eq!(hourly["last_job_id"], tick.as_str());
    assert_eq!(hourly["fired"], 1);
    let nightly = rows.iter().find(|r| r["name"] == "nightly").unwrap();
    assert_eq!(nightly["schedule"], "cron \"30 4 * * *\" Europe/Paris");
    assert_eq!(nightly["fired"], 0);
}
