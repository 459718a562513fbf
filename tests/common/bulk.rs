//! Fixtures of the bulk runner's tests (`bulk_*.rs`, `input_batches.rs`): the
//! [`Probe`] pipeline, an engine running it, and report helpers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use gaffer::{Batch, BulkCtx, Engine, Pipeline, bulk::ItemError};
use tokio::sync::mpsc;

use super::{Gate, within};

/// Inputs at or above this block on the probe's gate until it opens.
pub const BLOCKING: u64 = 1000;

/// The input the probe fails permanently.
pub const UNLUCKY: u64 = 13;

/// What a [`Probe`] saw.
pub struct Shared {
    runs: AtomicUsize,
    keys: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    pub gate: Gate,
    started: mpsc::UnboundedSender<String>,
}

impl Shared {
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// Item keys in the order their runs started.
    pub fn keys(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }
}

/// The workhorse pipeline: counts runs (and their keys), records one `calls`
/// of cost per attempt, fails [`UNLUCKY`] permanently, makes inputs at or over
/// [`BLOCKING`] wait for the gate, and outputs `input * 2`.
pub struct Probe(Arc<Shared>);

impl Pipeline for Probe {
    const NAME: &'static str = "probe";
    type Input = u64;
    type Output = u64;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<u64>) -> Result<u64, ItemError> {
        let s = &self.0;
        s.runs.fetch_add(1, Ordering::SeqCst);
        s.keys.lock().unwrap().push(ctx.key.clone());
        let _ = s.started.send(ctx.key.clone());
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_in_flight.fetch_max(now, Ordering::SeqCst);
        // Give other workers a chance to overlap with this one.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        if ctx.input >= BLOCKING {
            s.gate.wait().await;
        }
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        ctx.record_cost("calls", 1.0);
        if ctx.input == UNLUCKY {
            return Err(ItemError::permanent("unlucky"));
        }
        Ok(ctx.input * 2)
    }
}

/// A probe, the state it shares, and the stream of item keys as they start.
pub fn probe() -> (Probe, Arc<Shared>, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        runs: AtomicUsize::new(0),
        keys: Mutex::new(Vec::new()),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        gate: Gate::closed(),
        started: tx,
    });
    (Probe(shared.clone()), shared, rx)
}

/// Wait until `n` items have started.
pub async fn wait_started(rx: &mut mpsc::UnboundedReceiver<String>, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push(within(rx.recv()).await.expect("probe dropped"));
    }
    keys
}

/// An engine on the in-memory store with the probe registered.
pub async fn probe_engine() -> (
    Engine,
    Arc<Shared>,
    mpsc::UnboundedReceiver<String>,
    Arc<gaffer::taquba::MockClock>,
) {
    let clock = super::mock_clock();
    let (p, shared, rx) = probe();
    let engine = super::memory_builder(clock.clone())
        .pipeline(p)
        .start()
        .await
        .unwrap();
    (engine, shared, rx, clock)
}

/// Wait (without time passing) until no run of `batch` is active in this
/// process: a dropped run's coordinator stops asynchronously.
pub async fn wait_not_running<P: Pipeline>(batch: &Batch<P>) {
    for _ in 0..10_000 {
        if batch.progress().await.is_none() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the dropped run of `{}` never stopped", batch.id());
}

/// Reads `seed` from KV, stages `out/{key}`, then waits for the gate; input
/// `"fail"` stages and then fails.
pub struct Stage {
    gate: Gate,
    started: mpsc::UnboundedSender<String>,
}

impl Pipeline for Stage {
    const NAME: &'static str = "stage";
    type Input = String;
    type Output = String;
    type Error = ItemError;

    async fn run(&self, ctx: &BulkCtx<String>) -> Result<String, ItemError> {
        let seed = ctx.kv_get(b"seed").await?.unwrap_or_default();
        let seed = String::from_utf8(seed).unwrap();
        ctx.effects()
            .put(
                format!("out/{}", ctx.key),
                format!("{seed}:{}", ctx.input).into_bytes(),
            )
            .map_err(|e| ItemError::permanent(e.to_string()))?;
        let _ = self.started.send(ctx.key.clone());
        self.gate.wait().await;
        if ctx.input == "fail" {
            return Err(ItemError::permanent("staged, then failed"));
        }
        Ok(seed)
    }
}

/// A stage pipeline, its gate (closed), and the stream of item keys as they
/// have staged.
pub fn stage() -> (Stage, Gate, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let gate = Gate::closed();
    (
        Stage {
            gate: gate.clone(),
            started: tx,
        },
        gate,
        rx,
    )
}

/// `n` as the JSON output of a sink record.
pub fn json(n: u64) -> Option<serde_json::Value> {
    Some(serde_json::json!(n))
}

/// `(total, succeeded, failed)` of a report.
pub fn counts(r: &gaffer::BulkReport) -> (u64, u64, u64) {
    (r.total, r.succeeded, r.failed)
}

pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
