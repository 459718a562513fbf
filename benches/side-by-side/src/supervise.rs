//! One child process, watched from the parent: its `RESULT` lines
//! collected, its `PROGRESS` lines watched, killed when its progress has not
//! moved for `--hang-secs` (HUNG), its exit and stderr tail kept when it
//! fails (FAILED).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ChildArgs;
use crate::kinds::Engine;
use crate::meter::PhaseResult;

/// What happened to one child.
#[derive(Debug)]
pub enum ChildFate {
    Done,
    Failed(String),
    Hung(String),
}

/// The effectum child's binary: `SBS_EFFECTUM_BIN`, or where
/// `cargo build --release --manifest-path effectum-child/Cargo.toml` puts
/// it.
fn effectum_exe() -> std::path::PathBuf {
    match std::env::var_os("SBS_EFFECTUM_BIN") {
        Some(p) => p.into(),
        None => concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/effectum-child/target/release/sbs-effectum"
        )
        .into(),
    }
}

pub fn run_child(hang_secs: u64, ca: &ChildArgs) -> (Vec<PhaseResult>, ChildFate) {
    let exe = match ca.engine {
        Engine::Effectum => {
            let exe = effectum_exe();
            if !exe.exists() {
                let why = format!(
                    "no effectum child at {} (build it: cargo build --release --manifest-path effectum-child/Cargo.toml)",
                    exe.display()
                );
                return (vec![], ChildFate::Failed(why));
            }
            exe
        }
        _ => std::env::current_exe().expect("current_exe"),
    };
    let mut cmd = Command::new(exe);
    cmd.arg("child")
        .args(["--engine", ca.engine.label()])
        .args(["--group", ca.group.label()])
        .args(["--store", ca.store.label()])
        .args(["--flush", ca.flush.label()])
        .args(["--n", &ca.n.to_string()])
        .args(["--conc", &ca.conc.to_string()])
        .args(["--job-workers", &ca.job_workers.to_string()]);
    if let Some(d) = &ca.tmp_dir {
        cmd.arg("--tmp-dir").arg(d);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (vec![], ChildFate::Failed(format!("spawn: {e}"))),
    };
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let err_buf = Arc::new(Mutex::new(Vec::<String>::new()));
    let eb = err_buf.clone();
    let err_thread = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let mut b = eb.lock().unwrap();
            b.push(line);
            if b.len() > 40 {
                b.remove(0);
            }
        }
    });
    let hang = Duration::from_secs(hang_secs);
    let mut results = Vec::new();
    let mut last_progress = String::new();
    let mut last_change = Instant::now();
    let mut error_line = None;
    let fate = loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(line) => {
                if let Some(j) = line.strip_prefix("RESULT ") {
                    match serde_json::from_str::<PhaseResult>(j) {
                        Ok(r) => results.push(r),
                        Err(e) => println!("  unparsable RESULT ({e}): {j}"),
                    }
                    last_change = Instant::now();
                } else if let Some(p) = line.strip_prefix("PROGRESS ") {
                    // "phase count runs": any change is progress.
                    if p != last_progress {
                        last_progress = p.to_string();
                        last_change = Instant::now();
                    }
                } else if let Some(e) = line.strip_prefix("ERROR ") {
                    error_line = Some(e.to_string());
                } else {
                    println!("  child: {line}");
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait();
                let _ = err_thread.join();
                break match status {
                    Ok(s) if s.success() => ChildFate::Done,
                    Ok(s) => {
                        let tail = err_buf.lock().unwrap().join(" | ");
                        ChildFate::Failed(format!(
                            "exit {s}; error: {}; stderr tail: {}",
                            error_line.clone().unwrap_or_default(),
                            truncate(&tail, 1500)
                        ))
                    }
                    Err(e) => ChildFate::Failed(format!("wait: {e}")),
                };
            }
        }
        if last_change.elapsed() > hang {
            let _ = child.kill();
            let _ = child.wait();
            let tail = err_buf.lock().unwrap().join(" | ");
            break ChildFate::Hung(format!(
                "no progress for {} s; last progress `{}` (phase, count, runs); stderr tail: {}",
                hang_secs,
                last_progress,
                truncate(&tail, 1000)
            ));
        }
    };
    (results, fate)
}

pub fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        s.to_string()
    } else {
        let mut i = s.len() - n;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        format!("…{}", &s[i..])
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
