//! What a child measures of one phase: wall time, CPU seconds (getrusage
//! `RUSAGE_SELF`, all threads), peak RSS (`VmHWM`, reset at the phase's
//! start), handler runs; and the `PROGRESS` and `RESULT` lines it prints.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::ChildArgs;
use crate::kinds::{Engine, FlushKind, StoreKind, Workload};

/// One measured phase, as a child reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseResult {
    /// Repetition (1-based), set by the parent.
    #[serde(default)]
    pub rep: usize,
    pub workload: Workload,
    pub engine: Engine,
    pub store: StoreKind,
    pub flush: FlushKind,
    pub n: usize,
    pub conc: usize,
    pub wall_s: f64,
    pub items_per_s: f64,
    pub cpu_s: f64,
    pub peak_rss_kib: u64,
    /// Handler / pipeline executions during the phase.
    pub runs: usize,
    pub ok: bool,
    pub note: String,
    /// raw_queue only: the enqueue and claim+ack halves.
    pub enqueue_s: Option<f64>,
    pub drain_s: Option<f64>,
    /// The peers only: what an acknowledged job survives, as read from the
    /// peer's store (`SHOW synchronous_commit`, `CONFIG GET appendfsync`,
    /// `PRAGMA synchronous`) when the child ran.
    #[serde(default)]
    pub durability: Option<String>,
}

/// CPU seconds of the whole process so far (user + sys, all threads).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn proc_status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Reset VmHWM to the current RSS (Linux: `echo 5 > /proc/self/clear_refs`).
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The phase the `PROGRESS` lines name.
static PHASE: Mutex<String> = Mutex::new(String::new());
/// Items submitted, awaited or completed in the phase (what `PROGRESS` counts).
pub static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Handler / pipeline executions, across engines.
pub static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Start counting a phase of this name from zero.
pub fn set_phase(p: &str) {
    *PHASE.lock().unwrap() = p.to_string();
    COUNT.store(0, Ordering::SeqCst);
}

/// A thread printing `PROGRESS {phase} {count} {runs}` every second.
pub fn spawn_progress_ticker() {
    std::thread::spawn(|| {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let phase = PHASE.lock().unwrap().clone();
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "PROGRESS {} {} {}",
                phase,
                COUNT.load(Ordering::SeqCst),
                RUNS.load(Ordering::SeqCst)
            );
            let _ = out.flush();
        }
    });
}

/// One phase's measurement, from [`Meter::start`] to [`Meter::finish`].
pub struct Meter {
    pub start: Instant,
    cpu0: f64,
    runs0: usize,
    hwm_reset: bool,
}

impl Meter {
    /// Name the phase, reset the peak RSS, note the CPU and the runs.
    pub fn start(phase: &str) -> Self {
        set_phase(phase);
        let hwm_reset = reset_peak_rss();
        Meter {
            start: Instant::now(),
            cpu0: cpu_seconds(),
            runs0: RUNS.load(Ordering::SeqCst),
            hwm_reset,
        }
    }

    /// Handler / pipeline executions since the phase started.
    pub fn runs(&self) -> usize {
        RUNS.load(Ordering::SeqCst) - self.runs0
    }

    /// The phase's result: N over the wall time, the CPU and runs since the
    /// start, the peak RSS since the reset.
    pub fn finish(&self, a: &ChildArgs, workload: Workload, ok: bool, note: String) -> PhaseResult {
        let wall = self.start.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - self.cpu0;
        let mut note = note;
        if !self.hwm_reset {
            note.push_str(" (VmHWM not reset: peak is the process's)");
        }
        PhaseResult {
            rep: 0,
            workload,
            engine: a.engine,
            store: a.store,
            flush: a.flush,
            n: a.n,
            conc: if workload.uses_conc() {
                a.conc
            } else {
                a.job_workers
            },
            wall_s: wall,
            items_per_s: a.n as f64 / wall,
            cpu_s: cpu,
            peak_rss_kib: proc_status_kib("VmHWM:"),
            runs: RUNS.load(Ordering::SeqCst) - self.runs0,
            ok,
            note: note.trim().to_string(),
            enqueue_s: None,
            drain_s: None,
            durability: None,
        }
    }
}

/// Print one `RESULT {json}` line.
pub fn emit(r: &PhaseResult) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "RESULT {}", serde_json::to_string(r).unwrap());
    let _ = out.flush();
}
