//! The phases a child runs, written once for every engine that runs them in
//! the same way (gaffer and the reference): the jobs phases (submit N, then
//! await every handle) and the bulk phases (one batch of N, run again), each
//! measured by a [`Meter`] and reported as one `RESULT` line; and the checks
//! behind each phase's `ok`.

use std::future::{Future, IntoFuture};
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::ChildArgs;
use crate::child::BoxErr;
use crate::kinds::Workload;
use crate::meter::{COUNT, Meter, emit, set_phase};

/// Submissions (and awaits) in flight at once.
pub const IN_FLIGHT: usize = 64;

// ---------------------------------------------------------------- the jobs

/// One job type returning input + 1, with an idempotency key.
#[derive(Serialize, Deserialize, Clone, Copy)]
pub struct Keyed {
    pub x: u64,
}

/// The same job without a key.
#[derive(Serialize, Deserialize, Clone, Copy)]
pub struct Plain {
    pub x: u64,
}

/// An engine's jobs, as the jobs phases submit them: each submission
/// answers a handle that resolves to the job's output, and whether it was
/// newly submitted.
pub trait JobsEngine {
    type SubmitError: std::fmt::Display;
    type JoinError: std::fmt::Display;
    type KeyedHandle: IntoFuture<Output = Result<u64, Self::JoinError>>;
    type PlainHandle: IntoFuture<Output = Result<u64, Self::JoinError>>;
    async fn submit_keyed(
        &self,
        job: Keyed,
    ) -> Result<(Self::KeyedHandle, bool), Self::SubmitError>;
    async fn submit_plain(
        &self,
        job: Plain,
    ) -> Result<(Self::PlainHandle, bool), Self::SubmitError>;
}

/// Run the jobs `phases` (jobs_keyed then jobs_resubmit, or jobs_plain) on
/// `engine`, one `RESULT` each: N jobs submitted (`Plain` for jobs_plain,
/// `Keyed` otherwise), every handle awaited, every result checked.
pub async fn jobs_phases(
    a: &ChildArgs,
    phases: &[Workload],
    engine: &impl JobsEngine,
) -> Result<(), BoxErr> {
    for &w in phases {
        let m = Meter::start(w.label());
        let (correct, newly) = if w == Workload::JobsPlain {
            drive_jobs(a.n, |x| engine.submit_plain(Plain { x })).await?
        } else {
            drive_jobs(a.n, |x| engine.submit_keyed(Keyed { x })).await?
        };
        let runs = m.runs();
        let (ok, note) = jobs_note(w, a.n, correct, newly, runs);
        emit(&m.finish(a, w, ok, note));
    }
    Ok(())
}

/// A batch's report, as the bulk phases check it.
pub struct Tally {
    pub succeeded: usize,
    pub failed: usize,
    pub total: usize,
}

/// An engine's batch, as the bulk phases run it.
pub trait BulkBatch {
    /// Run the batch over the inputs `0..n` to its end.
    async fn run(&self, n: usize) -> Result<Tally, BoxErr>;
    /// Items completed so far (`None`: not known yet).
    async fn completed(&self) -> Option<usize>;
}

/// Run the bulk `phases` (bulk_items then bulk_rerun: the same batch, the
/// same inputs) on `batch`, one `RESULT` each, the progress read every
/// second.
pub async fn bulk_phases(
    a: &ChildArgs,
    phases: &[Workload],
    batch: &impl BulkBatch,
) -> Result<(), BoxErr> {
    for &w in phases {
        let m = Meter::start(w.label());
        let run = batch.run(a.n);
        tokio::pin!(run);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let report = loop {
            tokio::select! {
                r = &mut run => break r,
                _ = tick.tick() => {
                    if let Some(c) = batch.completed().await {
                        COUNT.store(c, Ordering::SeqCst);
                    }
                }
            }
        };
        let report = report?;
        let runs = m.runs();
        let (ok, note) = bulk_note(w, a.n, report.succeeded, report.failed, report.total, runs);
        emit(&m.finish(a, w, ok, note));
    }
    Ok(())
}

/// The end of a child's phases: stop the engine (not timed), then mark the
/// temp dir's removal.
pub async fn shutdown(stop: impl Future<Output = Result<(), BoxErr>>) -> Result<(), BoxErr> {
    set_phase("shutdown");
    stop.await?;
    // The temp dir's removal, apart from the engine's shutdown
    // (on a discard-mounted disk, a 1M-job store takes minutes).
    set_phase("cleanup");
    Ok(())
}

// ---------------------------------------------------------------- driving and checking

/// Submit `n` jobs (at most IN_FLIGHT submissions in flight), then await every
/// handle (IN_FLIGHT awaits in flight). Returns (all results == x+1, how many
/// handles said "newly submitted").
async fn drive_jobs<H, Fut, S, SFut, E1, E2>(n: usize, submit: S) -> Result<(bool, usize), BoxErr>
where
    S: Fn(u64) -> SFut,
    SFut: std::future::Future<Output = Result<(H, bool), E1>>,
    H: std::future::IntoFuture<Output = Result<u64, E2>, IntoFuture = Fut>,
    Fut: std::future::Future<Output = Result<u64, E2>>,
    E1: std::fmt::Display,
    E2: std::fmt::Display,
{
    // `SBS_JOIN_EACH=1`: each of IN_FLIGHT tasks submits a job and awaits
    // it before the next, so the backlog stays at most IN_FLIGHT and each
    // join reads a record written moments before (as a service that awaits
    // what it submits does; #13 §4).
    if std::env::var_os("SBS_JOIN_EACH").is_some() {
        let results: Vec<Result<(bool, bool), String>> = futures::stream::iter(0..n as u64)
            .map(|x| {
                let f = submit(x);
                async move {
                    let (h, new) = f.await.map_err(|e| format!("submit failed: {e}"))?;
                    let v = h
                        .into_future()
                        .await
                        .map_err(|e| format!("job {x} failed: {e}"))?;
                    COUNT.fetch_add(1, Ordering::Relaxed);
                    Ok((v == x + 1, new))
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let mut all_ok = true;
        let mut newly = 0;
        for r in results {
            let (ok, new) = r?;
            all_ok &= ok;
            newly += new as usize;
        }
        return Ok((all_ok, newly));
    }
    let submitted: Vec<Result<(u64, H, bool), String>> = futures::stream::iter(0..n as u64)
        .map(|x| {
            let f = submit(x);
            async move {
                let r = f
                    .await
                    .map(|(h, new)| (x, h, new))
                    .map_err(|e| e.to_string());
                COUNT.fetch_add(1, Ordering::Relaxed);
                r
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut handles = Vec::with_capacity(n);
    let mut newly = 0;
    for s in submitted {
        let (x, h, new) = s.map_err(|e| format!("submit failed: {e}"))?;
        newly += new as usize;
        handles.push((x, h));
    }
    let results: Vec<Result<bool, String>> = futures::stream::iter(handles)
        .map(|(x, h)| async move {
            let r = h.into_future().await;
            COUNT.fetch_add(1, Ordering::Relaxed);
            match r {
                Ok(v) => Ok(v == x + 1),
                Err(e) => Err(format!("job {x} failed: {e}")),
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let mut all_ok = true;
    for r in results {
        all_ok &= r?;
    }
    Ok((all_ok, newly))
}

pub fn jobs_note(
    w: Workload,
    n: usize,
    correct: bool,
    newly: usize,
    runs: usize,
) -> (bool, String) {
    let mut ok = correct;
    let mut note = String::new();
    if !correct {
        note.push_str("WRONG RESULTS; ");
    }
    match w {
        Workload::JobsResubmit => {
            if runs != 0 {
                ok = false;
                note.push_str(&format!("{runs} jobs RAN on resubmit; "));
            }
            if newly != 0 {
                ok = false;
                note.push_str(&format!("{newly} handles newly_submitted; "));
            }
            if ok {
                note.push_str("none ran, all answered from records");
            }
        }
        _ => {
            if runs != n {
                note.push_str(&format!("{runs} runs for {n} jobs; "));
            }
        }
    }
    (ok, note)
}

fn bulk_note(
    w: Workload,
    n: usize,
    succeeded: usize,
    failed: usize,
    total: usize,
    runs: usize,
) -> (bool, String) {
    let mut ok = succeeded == n && failed == 0 && total == n;
    let mut note = String::new();
    if !ok {
        note.push_str(&format!(
            "report total {total} succeeded {succeeded} failed {failed}; "
        ));
    }
    if w == Workload::BulkRerun {
        if runs != 0 {
            ok = false;
            note.push_str(&format!("{runs} pipelines RAN on rerun; "));
        } else if ok {
            note.push_str("no pipeline ran, all answered from records");
        }
    } else if runs != n {
        note.push_str(&format!("{runs} runs for {n} items; "));
    }
    (ok, note)
}
