//! Child processes for the tests that run real ones (to SIGKILL an engine,
//! to run several, to run a built example): this test binary's own ignored
//! tests as children, files they write whole, their logs, and [`Children`],
//! which kills what it holds when dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use crate::{LIMIT, eventually_or};

/// This test binary as a child process that runs its ignored test `test`
/// alone (`test --exact --ignored --nocapture`); the caller adds the
/// environment and where the output goes. A real process, for tests that
/// SIGKILL it or that need several processes.
pub fn test_child(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--ignored", "--nocapture"]);
    cmd
}

/// Run this test binary's ignored test `test` as a child process with
/// `{var}={dir}` set (the child reads its directory from it), its output in
/// `{dir}/child.log`: a real process, for crash tests that SIGKILL it.
pub fn spawn_test_child(test: &str, var: &str, dir: &Path) -> Child {
    let log = std::fs::File::create(dir.join("child.log")).unwrap();
    test_child(test)
        .env(var, dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// The example `name`'s binary, built by `cargo test` beside this test's
/// (`target/<profile>/examples/`).
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples (or run `cargo build --example {name}`)",
        path.display()
    );
    path
}

/// The lines of the file at `path` (none if it is missing): a log a child
/// process appends to.
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Write `contents` to `path` whole: to a file beside it first, then
/// renamed. For a file another process waits to see (it polls for it to
/// exist): a plain `std::fs::write` creates the file before it writes to it,
/// so the other could read it empty or cut short (and a kill that follows
/// at once would leave it so).
pub fn write_whole(path: &Path, contents: impl AsRef<[u8]>) {
    let mut part = path.as_os_str().to_owned();
    part.push(".part");
    std::fs::write(&part, contents).unwrap();
    std::fs::rename(&part, path).unwrap();
}

/// Wait until the child process that logs to `{dir}/child.log` has written
/// `path` ([`LIMIT`] at most, real time: a test with child processes runs
/// on the multi-threaded runtime; then panic with its log).
pub async fn wait_for_child_file(dir: &Path, path: &Path, what: &str) {
    eventually_or(
        &format!("{what} happened in the child process"),
        LIMIT,
        async || path.exists(),
        || {
            format!(
                "its log: {}",
                std::fs::read_to_string(dir.join("child.log")).unwrap_or_default()
            )
        },
    )
    .await;
}

/// The end (its last `tail` bytes, or fewer to end on a character
/// boundary) of every `*.log` file in `dir` but the `runs-*` ones, each
/// under its name: what child processes said, for a test's panic message.
pub fn child_logs(dir: &Path, tail: usize) -> String {
    let mut logs: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with("runs-"))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            let mut start = text.len().saturating_sub(tail);
            while !text.is_char_boundary(start) {
                start += 1;
            }
            format!("{:?}: {}", e.file_name(), &text[start..])
        })
        .collect();
    logs.sort();
    logs.join("\n")
}

/// Child processes by name, killed (and reaped) when dropped: a failed
/// assertion leaves none running. (A `tokio::process::Command` gets the
/// same with `kill_on_drop(true)`, as [`crate::command::Gaffer::spawn`]
/// does.)
#[derive(Default)]
pub struct Children(pub HashMap<String, Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in self.0.values_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
