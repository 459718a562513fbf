//! What the store underneath did, from SlateDB's own counters (`#[path]`-included
//! by the RSS benches).
//!
//! taquba (feature `metrics`, enabled for the benches only) forwards
//! SlateDB's storage metrics to the process's `metrics` recorder; this module
//! installs one that keeps them in memory, so a bench can print the KV
//! entries and bytes written per item (`slatedb.db.write_ops`,
//! `slatedb.db.memtable_write_bytes`), what left the memtables for L0
//! (`l0_flush_bytes`), the unflushed memtable + WAL estimate SlateDB applies
//! backpressure by (`total_mem_size_bytes`, last and highest), the L0 count
//! and the stalls. Histograms (taquba's latencies) are dropped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};

/// One counter or gauge: its value (f64 bits for gauges) and, for gauges,
/// the highest value seen.
#[derive(Default)]
struct Cell {
    value: AtomicU64,
    max: AtomicU64,
}

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.value.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.value.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.set(f64::from_bits(self.value.load(Ordering::Relaxed)) + value);
    }
    fn decrement(&self, value: f64) {
        self.set(f64::from_bits(self.value.load(Ordering::Relaxed)) - value);
    }
    fn set(&self, value: f64) {
        self.value.store(value.to_bits(), Ordering::Relaxed);
        let v = value.max(0.0) as u64;
        self.max.fetch_max(v, Ordering::Relaxed);
    }
}

/// The recorder: cells by metric name (labels summed into one cell).
#[derive(Default)]
pub struct StoreMetrics {
    cells: Mutex<BTreeMap<String, Arc<Cell>>>,
}

impl StoreMetrics {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.entry(key.name().to_string()).or_default().clone()
    }

    /// A counter's value (0 if never registered).
    pub fn counter(&self, name: &str) -> u64 {
        let cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells
            .get(name)
            .map_or(0, |c| c.value.load(Ordering::Relaxed))
    }

    /// A gauge's last value and the highest seen.
    pub fn gauge(&self, name: &str) -> (f64, u64) {
        let cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.get(name).map_or((0.0, 0), |c| {
            (
                f64::from_bits(c.value.load(Ordering::Relaxed)),
                c.max.load(Ordering::Relaxed),
            )
        })
    }
}

impl Recorder for StoreMetrics {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

static METRICS: OnceLock<&'static StoreMetrics> = OnceLock::new();

/// Install the recorder (once per process) and return it.
pub fn install() -> &'static StoreMetrics {
    METRICS.get_or_init(|| {
        let m: &'static StoreMetrics = Box::leak(Box::default());
        // Fails only if another recorder is installed: then nothing is counted.
        let _ = metrics::set_global_recorder(m);
        m
    })
}

const MIB: f64 = 1024.0 * 1024.0;

/// A short line of the store's state now: the unflushed estimate (memtables +
/// WAL) and the L0 count.
pub fn brief(m: &StoreMetrics) -> String {
    let (mem, _) = m.gauge("slatedb.db.total_mem_size_bytes");
    let (l0, _) = m.gauge("slatedb.db.l0_sst_count");
    format!("unflushed {:>6.1} MiB  L0 {:>2}", mem / MIB, l0 as u64)
}

/// The totals of the run, per item: entries and bytes into the memtable,
/// bytes flushed to L0 and compacted, memtable flushes, the highest
/// unflushed estimate, backpressure and L0 stalls.
pub fn summary(m: &StoreMetrics, items: u64) -> String {
    let per = |v: u64| v as f64 / items.max(1) as f64;
    let (_, mem_max) = m.gauge("slatedb.db.total_mem_size_bytes");
    let (_, l0_max) = m.gauge("slatedb.db.l0_sst_count");
    format!(
        "store: {:.2} KV entries/item ({} ops in {} write batches), {:.0} B/item into the memtable, \
         {:.0} B/item flushed to L0, {:.0} B/item compacted; {} memtable flushes, \
         highest unflushed estimate {:.1} MiB, highest L0 count {l0_max}, \
         backpressure waits {}, L0 stalls {}",
        per(m.counter("slatedb.db.write_ops")),
        m.counter("slatedb.db.write_ops"),
        m.counter("slatedb.db.write_batch_count"),
        per(m.counter("slatedb.db.memtable_write_bytes")),
        per(m.counter("slatedb.db.l0_flush_bytes")),
        per(m.counter("slatedb.compactor.bytes_compacted")),
        m.counter("slatedb.db.immutable_memtable_flushes"),
        mem_max as f64 / MIB,
        m.counter("slatedb.db.backpressure_count"),
        m.counter("slatedb.db.l0_stall_count"),
    )
}

/// One row of a per-item accounting table: what one kind of write costs.
pub struct Row {
    pub stage: &'static str,
    pub kind: &'static str,
    pub op: &'static str,
    /// Entries per item (fractions for per-transaction writes).
    pub entries: f64,
    pub key: usize,
    pub value: usize,
}

/// Print a per-item accounting table and its totals.
pub fn print_rows(title: &str, rows: &[Row]) {
    println!("{title}");
    println!(
        "  {:<8} {:<34} {:<6} {:>7} {:>6} {:>6} {:>8}",
        "stage", "kind", "op", "entries", "key B", "val B", "B/item"
    );
    let (mut entries, mut bytes) = (0.0, 0.0);
    for r in rows {
        let b = r.entries * (r.key + r.value) as f64;
        entries += r.entries;
        bytes += b;
        println!(
            "  {:<8} {:<34} {:<6} {:>7.2} {:>6} {:>6} {:>8.0}",
            r.stage, r.kind, r.op, r.entries, r.key, r.value, b
        );
    }
    println!("  total: {entries:.2} entries, {bytes:.0} B (key + value) per item");
}

/// taquba 0.16's key sizes (its `keys.rs`: `[tag, version, fields…]`, a
/// queue name led by its one-byte length).
pub mod taquba_keys {
    /// `[Pending, ver, qlen, queue, priority u32, enqueued_at u64, id]`.
    pub fn pending(queue: &str, id: &str) -> usize {
        2 + 1 + queue.len() + 4 + 8 + id.len()
    }
    /// `[Claimed, ver, qlen, queue, id]`.
    pub fn claimed(queue: &str, id: &str) -> usize {
        2 + 1 + queue.len() + id.len()
    }
    /// `[JobIndex, ver, id]` and `[AttemptHistory, ver, id]`.
    pub fn by_id(id: &str) -> usize {
        2 + id.len()
    }
    /// `[Stats, ver, qlen, queue, metric name]` (names `pending`, `claimed`,
    /// `done`: about 7 bytes); its value is an i64 delta.
    pub fn stats(queue: &str) -> usize {
        2 + 1 + queue.len() + 7
    }
    /// A user KV key: `[User, caller bytes]`.
    pub fn user(key: &[u8]) -> usize {
        1 + key.len()
    }
}
