//! The command's tests: the built `gaffer` binary, run on a store's
//! directory. The runner, the limits and waits, and the job types these
//! tests run on a live engine are the test kit's (`gaffer-testkit`),
//! re-exported here.
#![allow(dead_code, unused_imports)]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

pub use gaffer_testkit::command::Gaffer;
pub use gaffer_testkit::events::wait_event;
pub use gaffer_testkit::jobs::{Approval, Approve, Boom, Explode, Greet};
pub use gaffer_testkit::{LIMIT, T0_MS, eventually, eventually_ok, within};

/// The built `gaffer` binary (cargo builds it for these tests), no
/// argument yet.
pub fn bin() -> Gaffer {
    Gaffer::new(env!("CARGO_BIN_EXE_gaffer"))
}

/// The binary on the store in `dir` (`--dir DIR`).
pub fn at(dir: &Path) -> Gaffer {
    bin().arg("--dir").arg(dir)
}

/// Run `gaffer --dir DIR args`; its status and output.
pub fn gaffer(dir: &Path, args: &[&str]) -> Output {
    at(dir).run(args)
}

/// Run `gaffer --dir DIR args`, which must succeed; its stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    at(dir).ok(args)
}

/// Run `gaffer --dir DIR args --json`, which must succeed; its document.
pub fn json(dir: &Path, args: &[&str]) -> Value {
    at(dir).json(args)
}

/// The first line a child prints on its stdout (piped: [`Gaffer::spawn`]),
/// read within [`LIMIT`]: `gaffer web` says where it listens. Read a byte
/// at a time, so nothing after the line is taken, and the pipe stays with
/// the child's handle (a command whose reader went away ends).
pub async fn first_line(child: &mut tokio::process::Child) -> String {
    use tokio::io::AsyncReadExt;
    let stdout = child.stdout.as_mut().expect("its stdout is piped");
    within(async {
        let mut line = Vec::new();
        loop {
            match stdout.read_u8().await {
                Ok(b'\n') => return String::from_utf8_lossy(&line).into_owned(),
                Ok(byte) => line.push(byte),
                Err(e) => panic!("its stdout ended before a whole line ({e}): {line:?}"),
            }
        }
    })
    .await
}

/// The URL in `line` ("gaffer web: http://127.0.0.1:PORT/ops (…)"),
/// without its `http://`: `127.0.0.1:PORT/ops`.
pub fn url_in(line: &str) -> String {
    line.split("http://")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string()
}
