//! [`FaultyStore`],
//! an object store that injects errors and latency.
//!
//! [`FaultyStore`] wraps any `Arc<dyn ObjectStore>` (usually a shared
//! `InMemory`, so a second engine can open what the first one left) and passes
//! every call through, except that, as told by its [`FaultControl`]:
//!
//! - operations of chosen kinds ([`Ops`]) fail with
//!   `object_store::Error::Generic { store: "faulty", .. }` whose source is an
//!   [`InjectedFault`] (its message starts with `injected fault`), until
//!   [`FaultControl::heal`];
//! - or only the next *n* such operations fail ([`FaultControl::fail_next`]);
//! - only paths under a prefix or containing a substring are affected
//!   ([`FaultControl::only_prefix`], [`FaultControl::only_containing`]);
//! - every operation first sleeps a fixed latency
//!   ([`FaultControl::set_latency`]; `tokio::time::sleep`, so paused test time
//!   applies);
//! - every operation and every injected fault is counted
//!   ([`FaultControl::stats`]).
//!
//! A fault is injected *before* the inner store is called: a failed write
//! never happened. The control handle is a cheap clone over shared atomics and
//! can be flipped at any time from the test, while the engine runs.
//!
//! Note on what a fault does to gaffer: the queue (taquba over SlateDB) writes
//! its WAL and manifests through the store, and SlateDB retries a `Generic`
//! error with backoff, without limit, so a put outage *stalls* queue commits
//! (submissions, claims, settlements) until the faults stop; it does not fail
//! them. gaffer's own object writes (memo entries, large outputs) and taquba's
//! offloaded payloads are not retried by SlateDB: they fail at once with the
//! injected error.
//!
//! ```
//! # async fn demo() {
//! use std::sync::Arc;
//! use gaffer_actors::testing::{FaultyStore, Ops};
//! use taquba::object_store::memory::InMemory;
//!
//! let (store, faults) = FaultyStore::wrap(Arc::new(InMemory::new()));
//! faults.only_prefix("gaffer-blobs/");
//! faults.fail(Ops::PUT);
//! // … run the engine on `store`; memo writes fail …
//! faults.heal();
//! eprintln!("{}", faults.stats());
//! # let _ = store;
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use taquba::object_store::path::Path;
use taquba::object_store::{
    self, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    UploadPart,
};

/// A boxed future, the shape `async_trait` methods of `ObjectStore` return.
type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The store name of injected errors (`Error::Generic { store, .. }`).
pub const FAULTY_STORE_NAME: &str = "faulty";

/// One kind of object-store operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `put_opts` (every single-request write, conditional or not).
    Put,
    /// `put_multipart_opts`, and each part and completion of such an upload.
    Multipart,
    /// `get_opts`: reads, range reads and `head` (each range of `get_ranges`
    /// is one read).
    Get,
    /// `list`, `list_with_offset` and `list_with_delimiter`.
    List,
    /// Each location of `delete_stream` (so every `delete`).
    Delete,
    /// `copy_opts` and `rename_opts`.
    Copy,
}

impl Op {
    /// Every kind, in the order of [`FaultStats::per_op`].
    pub const ALL: [Op; 6] = [
        Op::Put,
        Op::Multipart,
        Op::Get,
        Op::List,
        Op::Delete,
        Op::Copy,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn bit(self) -> u8 {
        1 << self.index()
    }

    /// A short lower-case name (`put`, `get`, …).
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Multipart => "multipart",
            Op::Get => "get",
            Op::List => "list",
            Op::Delete => "delete",
            Op::Copy => "copy",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of operation kinds; combine with `|` (`Ops::PUT | Ops::DELETE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ops(u8);

impl Ops {
    /// No operation.
    pub const NONE: Ops = Ops(0);
    /// Single-request writes.
    pub const PUT: Ops = Ops(1 << 0);
    /// Multipart uploads (creation, parts, completion).
    pub const MULTIPART: Ops = Ops(1 << 1);
    /// Reads (`get`, ranges, `head`).
    pub const GET: Ops = Ops(1 << 2);
    /// Listings.
    pub const LIST: Ops = Ops(1 << 3);
    /// Deletions.
    pub const DELETE: Ops = Ops(1 << 4);
    /// Copies and renames.
    pub const COPY: Ops = Ops(1 << 5);
    /// Everything that changes the store: puts, multipart, deletes, copies.
    pub const WRITES: Ops = Ops(Self::PUT.0 | Self::MULTIPART.0 | Self::DELETE.0 | Self::COPY.0);
    /// Everything that only reads: gets and listings.
    pub const READS: Ops = Ops(Self::GET.0 | Self::LIST.0);
    /// Every operation.
    pub const ALL: Ops = Ops(Self::WRITES.0 | Self::READS.0);

    /// Whether `op` is in the set.
    pub fn contains(self, op: Op) -> bool {
        self.0 & op.bit() != 0
    }
}

impl From<Op> for Ops {
    fn from(op: Op) -> Self {
        Ops(op.bit())
    }
}

impl std::ops::BitOr for Ops {
    type Output = Ops;
    fn bitor(self, rhs: Ops) -> Ops {
        Ops(self.0 | rhs.0)
    }
}

/// Which paths faults apply to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PathFilter {
    /// Every path (the default).
    #[default]
    Any,
    /// Paths starting with this string (compared on the path's text, so
    /// `"gaffer-blobs/"` matches every memo entry and output blob).
    Prefix(String),
    /// Paths containing this string.
    Contains(String),
}

impl PathFilter {
    /// Whether `path` is selected.
    pub fn matches(&self, path: &str) -> bool {
        match self {
            PathFilter::Any => true,
            PathFilter::Prefix(p) => path.starts_with(p.as_str()),
            PathFilter::Contains(s) => path.contains(s.as_str()),
        }
    }
}

/// The error an injected fault carries as the source of
/// `object_store::Error::Generic { store: "faulty", .. }`; downcast to tell an
/// injected fault from a real one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFault {
    /// The operation that was failed.
    pub op: Op,
    /// The path it was on (a listing's prefix; empty for the root).
    pub path: String,
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "injected fault: {} of `{}` failed on purpose (FaultyStore)",
            self.op, self.path
        )
    }
}

impl std::error::Error for InjectedFault {}

impl InjectedFault {
    fn into_error(self) -> object_store::Error {
        object_store::Error::Generic {
            store: FAULTY_STORE_NAME,
            source: Box::new(self),
        }
    }
}

/// Whether `e` is an error [`FaultyStore`] injected.
pub fn is_injected(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::Generic { store, source }
            if *store == FAULTY_STORE_NAME && source.downcast_ref::<InjectedFault>().is_some()
    )
}

/// Counters of a [`FaultyStore`], from [`FaultControl::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultStats {
    /// Operations started (faulted or not).
    pub operations: u64,
    /// Operations failed on purpose.
    pub injected: u64,
    /// `(operations, injected)` per kind, indexed in the order of [`Op::ALL`].
    pub per_op: [(u64, u64); 6],
}

impl FaultStats {
    /// `(operations, injected)` of one kind.
    pub fn of(&self, op: Op) -> (u64, u64) {
        self.per_op[op.index()]
    }
}

impl fmt::Display for FaultStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations, {} injected faults (",
            self.operations, self.injected
        )?;
        for (i, op) in Op::ALL.iter().enumerate() {
            let (n, k) = self.per_op[i];
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{op} {n}/{k}")?;
        }
        f.write_str(" ops/faults)")
    }
}

#[derive(Default)]
struct ControlState {
    /// Kinds that fail until healed.
    failing: AtomicU8,
    /// Kinds the countdown applies to.
    next_ops: AtomicU8,
    /// Operations of `next_ops` still to fail.
    next_remaining: AtomicU64,
    /// Latency before each operation, per kind, in nanoseconds.
    latency_nanos: [AtomicU64; 6],
    /// Which paths faults (not latency) apply to.
    filter: Mutex<PathFilter>,
    operations: [AtomicU64; 6],
    injected: [AtomicU64; 6],
}

/// The control handle of a [`FaultyStore`]: cheap to clone (an `Arc` over
/// atomics), shared by every clone; changes apply to operations that start
/// after them.
#[derive(Clone, Default)]
pub struct FaultControl {
    state: Arc<ControlState>,
}

impl fmt::Debug for FaultControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.state;
        f.debug_struct("FaultControl")
            .field("failing", &Ops(s.failing.load(Ordering::SeqCst)))
            .field("next_ops", &Ops(s.next_ops.load(Ordering::SeqCst)))
            .field("next_remaining", &s.next_remaining.load(Ordering::SeqCst))
            .field("latency", &self.latency())
            .field("filter", &self.filter())
            .field("stats", &self.stats())
            .finish()
    }
}

impl FaultControl {
    /// A control with no faults, no latency and zero counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fail every operation of kinds `ops` (on the paths of the filter) from
    /// now until [`heal`](Self::heal) or [`stop`](Self::stop). Adds to the
    /// kinds already failing.
    pub fn fail(&self, ops: impl Into<Ops>) {
        self.state.failing.fetch_or(ops.into().0, Ordering::SeqCst);
    }

    /// Stop failing operations of kinds `ops` (others keep failing).
    pub fn stop(&self, ops: impl Into<Ops>) {
        self.state
            .failing
            .fetch_and(!ops.into().0, Ordering::SeqCst);
    }

    /// Fail the next `n` operations of kinds `ops` (on the paths of the
    /// filter), then let them pass. Replaces an earlier countdown.
    pub fn fail_next(&self, ops: impl Into<Ops>, n: u64) {
        self.state.next_remaining.store(0, Ordering::SeqCst);
        self.state.next_ops.store(ops.into().0, Ordering::SeqCst);
        self.state.next_remaining.store(n, Ordering::SeqCst);
    }

    /// Operations the countdown of [`fail_next`](Self::fail_next) still fails.
    pub fn remaining_next(&self) -> u64 {
        self.state.next_remaining.load(Ordering::SeqCst)
    }

    /// Stop every fault: nothing fails, the countdown is cleared and the path
    /// filter is reset to every path. Latency and counters are kept.
    pub fn heal(&self) {
        self.state.failing.store(0, Ordering::SeqCst);
        self.state.next_remaining.store(0, Ordering::SeqCst);
        self.state.next_ops.store(0, Ordering::SeqCst);
        self.set_filter(PathFilter::Any);
    }

    /// Faults apply only to paths starting with `prefix` (text comparison).
    pub fn only_prefix(&self, prefix: impl Into<String>) {
        self.set_filter(PathFilter::Prefix(prefix.into()));
    }

    /// Faults apply only to paths containing `needle`.
    pub fn only_containing(&self, needle: impl Into<String>) {
        self.set_filter(PathFilter::Contains(needle.into()));
    }

    /// Faults apply to every path again.
    pub fn any_path(&self) {
        self.set_filter(PathFilter::Any);
    }

    /// Set the path filter of faults (latency ignores it).
    pub fn set_filter(&self, filter: PathFilter) {
        *self.state.filter.lock().unwrap_or_else(|p| p.into_inner()) = filter;
    }

    /// The path filter of faults.
    pub fn filter(&self) -> PathFilter {
        self.state
            .filter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sleep `latency` (tokio time) before every operation; zero turns it off.
    pub fn set_latency(&self, latency: Duration) {
        self.set_latency_on(Ops::ALL, latency);
    }

    /// Sleep `latency` before every operation of kinds `ops` only (the
    /// others: none).
    pub fn set_latency_on(&self, ops: impl Into<Ops>, latency: Duration) {
        let ops = ops.into();
        for op in Op::ALL {
            let l = if ops.contains(op) {
                latency
            } else {
                Duration::ZERO
            };
            self.set_op_latency(op, l);
        }
    }

    /// Sleep `latency` before every operation of kind `op`, leaving the
    /// other kinds' latency as it is (what an object store costs: e.g.
    /// 20 ms per put, 10 ms per get).
    pub fn set_op_latency(&self, op: Op, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.state.latency_nanos[op.index()].store(nanos, Ordering::SeqCst);
    }

    /// The largest latency added to an operation kind.
    pub fn latency(&self) -> Duration {
        Op::ALL
            .iter()
            .map(|op| self.op_latency(*op))
            .max()
            .unwrap_or_default()
    }

    /// The latency added to each operation of kind `op`.
    pub fn op_latency(&self, op: Op) -> Duration {
        Duration::from_nanos(self.state.latency_nanos[op.index()].load(Ordering::SeqCst))
    }

    /// The counters so far.
    pub fn stats(&self) -> FaultStats {
        let mut stats = FaultStats::default();
        for op in Op::ALL {
            let i = op.index();
            let n = self.state.operations[i].load(Ordering::SeqCst);
            let k = self.state.injected[i].load(Ordering::SeqCst);
            stats.per_op[i] = (n, k);
            stats.operations += n;
            stats.injected += k;
        }
        stats
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.stats().injected
    }

    /// Operations started so far.
    pub fn operations(&self) -> u64 {
        self.stats().operations
    }

    /// Zero the counters.
    pub fn reset_stats(&self) {
        for i in 0..Op::ALL.len() {
            self.state.operations[i].store(0, Ordering::SeqCst);
            self.state.injected[i].store(0, Ordering::SeqCst);
        }
    }

    /// Start one operation: count it, sleep the latency, and decide whether it
    /// fails (counting the fault).
    async fn begin(&self, op: Op, path: &str) -> object_store::Result<()> {
        if let Some(latency) = self.count(op) {
            tokio::time::sleep(latency).await;
        }
        self.decide(op, path)
    }

    /// Count one operation of kind `op`; the latency it must wait, if any.
    fn count(&self, op: Op) -> Option<Duration> {
        self.state.operations[op.index()].fetch_add(1, Ordering::SeqCst);
        let latency = self.op_latency(op);
        (!latency.is_zero()).then_some(latency)
    }

    fn decide(&self, op: Op, path: &str) -> object_store::Result<()> {
        let s = &self.state;
        let failing = Ops(s.failing.load(Ordering::SeqCst)).contains(op);
        let counted = Ops(s.next_ops.load(Ordering::SeqCst)).contains(op);
        if !failing && !counted {
            return Ok(());
        }
        if !self.filter().matches(path) {
            return Ok(());
        }
        let fault = failing
            || (counted
                && s.next_remaining
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok());
        if !fault {
            return Ok(());
        }
        s.injected[op.index()].fetch_add(1, Ordering::SeqCst);
        Err(InjectedFault {
            op,
            path: path.to_string(),
        }
        .into_error())
    }
}

/// An [`ObjectStore`] that passes every call to an inner store, injecting
/// the errors and latency its [`FaultControl`] asks for. See the module docs.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    control: FaultControl,
}

impl FaultyStore {
    /// Wrap `inner` with a fresh control (no faults yet).
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::with_control(inner, FaultControl::new())
    }

    /// Wrap `inner`, driven by an existing control.
    pub fn with_control(inner: Arc<dyn ObjectStore>, control: FaultControl) -> Self {
        Self { inner, control }
    }

    /// Wrap `inner`: the store (ready for `EngineBuilder::object_store`) and
    /// its control.
    pub fn wrap(inner: Arc<dyn ObjectStore>) -> (Arc<dyn ObjectStore>, FaultControl) {
        let store = Self::new(inner);
        let control = store.control();
        (Arc::new(store), control)
    }

    /// The control handle (a clone sharing the same state).
    pub fn control(&self) -> FaultControl {
        self.control.clone()
    }

    /// The wrapped store, without faults.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

fn prefix_text(prefix: Option<&Path>) -> String {
    prefix.map(|p| p.to_string()).unwrap_or_default()
}

/// A listing that starts with [`FaultControl::begin`]: latency, then either
/// the injected error or the inner listing.
fn gated_listing(
    control: FaultControl,
    path: String,
    listing: BoxStream<'static, object_store::Result<ObjectMeta>>,
) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
    futures_util::stream::once(async move {
        match control.begin(Op::List, &path).await {
            Ok(()) => listing,
            Err(e) => futures_util::stream::once(async move { Err(e) }).boxed(),
        }
    })
    .flatten()
    .boxed()
}

// The trait is declared with `async_trait`; these methods are its expansion
// written out (this crate does not depend on `async_trait`).
impl ObjectStore for FaultyStore {
    fn put_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> BoxFut<'async_trait, object_store::Result<PutResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.control.begin(Op::Put, location.as_ref()).await?;
            self.inner.put_opts(location, payload, opts).await
        })
    }

    fn put_multipart_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        opts: PutMultipartOptions,
    ) -> BoxFut<'async_trait, object_store::Result<Box<dyn MultipartUpload>>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.control.begin(Op::Multipart, location.as_ref()).await?;
            let upload = self.inner.put_multipart_opts(location, opts).await?;
            Ok(Box::new(FaultyUpload {
                upload,
                control: self.control.clone(),
                path: location.to_string(),
            }) as Box<dyn MultipartUpload>)
        })
    }

    fn get_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        options: GetOptions,
    ) -> BoxFut<'async_trait, object_store::Result<GetResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.control.begin(Op::Get, location.as_ref()).await?;
            self.inner.get_opts(location, options).await
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        // Each location is decided (and deleted) on its own, so a fault fails
        // exactly the locations it selects.
        let inner = self.inner.clone();
        let control = self.control.clone();
        locations
            .then(move |location| {
                let inner = inner.clone();
                let control = control.clone();
                async move {
                    let path = location?;
                    control.begin(Op::Delete, path.as_ref()).await?;
                    inner.delete(&path).await?;
                    Ok(path)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        gated_listing(
            self.control.clone(),
            prefix_text(prefix),
            self.inner.list(prefix),
        )
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        gated_listing(
            self.control.clone(),
            prefix_text(prefix),
            self.inner.list_with_offset(prefix, offset),
        )
    }

    fn list_with_delimiter<'life0, 'life1, 'async_trait>(
        &'life0 self,
        prefix: Option<&'life1 Path>,
    ) -> BoxFut<'async_trait, object_store::Result<ListResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.control.begin(Op::List, &prefix_text(prefix)).await?;
            self.inner.list_with_delimiter(prefix).await
        })
    }

    fn copy_opts<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        from: &'life1 Path,
        to: &'life2 Path,
        options: CopyOptions,
    ) -> BoxFut<'async_trait, object_store::Result<()>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            // The destination is the path a copy changes.
            self.control.begin(Op::Copy, to.as_ref()).await?;
            self.inner.copy_opts(from, to, options).await
        })
    }

    fn rename_opts<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        from: &'life1 Path,
        to: &'life2 Path,
        options: RenameOptions,
    ) -> BoxFut<'async_trait, object_store::Result<()>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.control.begin(Op::Copy, to.as_ref()).await?;
            self.inner.rename_opts(from, to, options).await
        })
    }
}

/// A multipart upload whose parts and completion go through the control
/// (kind [`Op::Multipart`]).
#[derive(Debug)]
struct FaultyUpload {
    upload: Box<dyn MultipartUpload>,
    control: FaultControl,
    path: String,
}

impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        // Decided now, in call order (a countdown fails the parts issued
        // first), and a failed part never reaches the inner upload; the latency
        // is awaited with the part.
        let latency = self.control.count(Op::Multipart);
        let part = self
            .control
            .decide(Op::Multipart, &self.path)
            .map(|()| self.upload.put_part(data));
        Box::pin(async move {
            if let Some(latency) = latency {
                tokio::time::sleep(latency).await;
            }
            part?.await
        })
    }

    fn complete<'life0, 'async_trait>(
        &'life0 mut self,
    ) -> BoxFut<'async_trait, object_store::Result<PutResult>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.control.begin(Op::Multipart, &self.path).await?;
            self.upload.complete().await
        })
    }

    fn abort<'life0, 'async_trait>(
        &'life0 mut self,
    ) -> BoxFut<'async_trait, object_store::Result<()>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        // An abort is cleanup: never failed, not counted.
        Box::pin(async move { self.upload.abort().await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::TryStreamExt;
    use taquba::object_store::memory::InMemory;

    fn store() -> (Arc<dyn ObjectStore>, FaultControl) {
        FaultyStore::wrap(Arc::new(InMemory::new()))
    }

    async fn put(store: &Arc<dyn ObjectStore>, path: &str) -> object_store::Result<PutResult> {
        store
            .put(&Path::from(path), PutPayload::from_static(b"x"))
            .await
    }

    #[tokio::test]
    async fn faults_follow_kinds_paths_and_countdowns_and_are_counted() {
        let (store, faults) = store();
        put(&store, "a/1").await.unwrap();

        faults.fail(Ops::PUT);
        let err = put(&store, "a/2").await.unwrap_err();
        assert!(is_injected(&err), "{err}");
        assert!(
            err.to_string().contains("injected fault: put of `a/2`"),
            "{err}"
        );
        // Reads pass, and the failed put never reached the inner store.
        store.get(&Path::from("a/1")).await.unwrap();
        assert!(matches!(
            store.get(&Path::from("a/2")).await,
            Err(object_store::Error::NotFound { .. })
        ));

        faults.only_prefix("b/");
        put(&store, "a/3").await.unwrap();
        assert!(put(&store, "b/1").await.is_err());
        faults.only_containing("/x/");
        assert!(put(&store, "c/x/1").await.is_err());
        put(&store, "c/y/1").await.unwrap();

        faults.heal();
        faults.fail_next(Ops::PUT | Ops::GET, 2);
        assert!(store.get(&Path::from("a/1")).await.is_err());
        assert!(put(&store, "a/4").await.is_err());
        assert_eq!(faults.remaining_next(), 0);
        put(&store, "a/4").await.unwrap();

        let stats = faults.stats();
        assert_eq!(stats.of(Op::Put), (8, 4), "{stats}");
        assert_eq!(stats.of(Op::Get), (3, 1), "{stats}");
        assert_eq!(stats.injected, 5);
        faults.reset_stats();
        assert_eq!(faults.operations(), 0);
    }

    #[tokio::test]
    async fn listings_and_deletes_fail_per_location() {
        let (store, faults) = store();
        for p in ["a/1", "a/2", "b/1"] {
            put(&store, p).await.unwrap();
        }
        faults.fail(Ops::LIST);
        let listed: object_store::Result<Vec<_>> =
            store.list(Some(&Path::from("a"))).try_collect().await;
        assert!(is_injected(&listed.unwrap_err()));
        assert!(store.list_with_delimiter(None).await.is_err());
        faults.heal();
        let listed: Vec<_> = store.list(None).try_collect().await.unwrap();
        assert_eq!(listed.len(), 3);

        faults.only_prefix("a/");
        faults.fail(Ops::DELETE);
        let paths = ["a/1", "b/1"].map(|p| Ok(Path::from(p)));
        let results: Vec<_> = store
            .delete_stream(futures_util::stream::iter(paths).boxed())
            .collect()
            .await;
        assert!(results[0].as_ref().is_err_and(is_injected));
        assert_eq!(results[1].as_ref().unwrap().as_ref(), "b/1");
        faults.heal();
        let left: Vec<_> = store.list(None).try_collect().await.unwrap();
        assert_eq!(left.len(), 2);
        assert_eq!(faults.stats().of(Op::Delete), (2, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_tokio_time() {
        let (store, faults) = store();
        faults.set_latency(Duration::from_millis(5));
        let start = tokio::time::Instant::now();
        put(&store, "a").await.unwrap();
        store.get(&Path::from("a")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(10));
        faults.set_latency_on(Ops::GET, Duration::from_secs(1));
        let start = tokio::time::Instant::now();
        put(&store, "b").await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        // What an object store costs: each kind its own.
        faults.set_op_latency(Op::Put, Duration::from_millis(20));
        faults.set_op_latency(Op::Get, Duration::from_millis(10));
        let start = tokio::time::Instant::now();
        put(&store, "c").await.unwrap();
        store.get(&Path::from("c")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(30));
        assert_eq!(faults.latency(), Duration::from_millis(20));
    }

    #[tokio::test]
    async fn multipart_parts_and_completion_can_fail() {
        let (store, faults) = store();
        let mut upload = store.put_multipart(&Path::from("m")).await.unwrap();
        faults.fail_next(Ops::MULTIPART, 1);
        assert!(
            upload
                .put_part(PutPayload::from_static(b"1"))
                .await
                .is_err()
        );
        upload
            .put_part(PutPayload::from_static(b"2"))
            .await
            .unwrap();
        upload.complete().await.unwrap();
        let bytes = store.get(&Path::from("m")).await.unwrap().bytes().await;
        assert_eq!(bytes.unwrap().as_ref(), b"2");
        assert_eq!(faults.stats().of(Op::Multipart), (4, 1));
    }
}
