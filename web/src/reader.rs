//! Each store's reader, held for the pages: opened on demand, closed when
//! no page asked for a while, and replaced by a fresh one when it has
//! followed the writer long enough.
//!
//! Why: a following `QueueReader` (SlateDB's `DbReader`) replays the WAL
//! objects it finds at each manifest poll into one new immutable memtable,
//! and only the writer's memtable flush (hours apart at a low rate, not
//! something a reader can ask for) clears them. Every scan merges them
//! all, so a reader that has followed for an hour reads through thousands
//! of tiny tables (a page took 0.73–0.93 s after five minutes at the old
//! 100 ms follow, #41). A reader opened afresh replays the same tail into
//! one table (or a few: at most 64 MiB each). So:
//!
//! - **Idle close.** With no page asked for [`IDLE_CLOSE`] the reader is
//!   closed: an idle dashboard follows nothing and costs the engine
//!   nothing. The next page opens it again (and waits for that open, at
//!   most [`OPEN_LIMIT`]; a failure is that page's error, naming the store).
//! - **Rebase.** A page that finds its reader older than [`REBASE_AFTER`]
//!   starts a fresh open in a task of its own and goes on with the old
//!   reader; the new one is swapped in when it is ready and the old one is
//!   closed once no page holds it. Pages never wait for a rebase.
//!
//! The current reader is a `tokio::sync::watch` of an `Arc<Store>`: a page
//! clones the pointer under the watch's read lock and reads without any
//! lock. Opening, swapping and closing are serialized by one
//! `tokio::sync::Mutex<()>` ([`Held::turn`]), held across an open only when
//! a page must wait for the reader anyway (none is open); a rebase opens
//! outside it and takes it only for the swap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use gaffer_layout::sealed::Keyring;
use gaffer_layout::store::Store as NamedStore;
use gaffer_ops::{OpsError, Reading, Store};
use tokio::sync::watch;
use tokio::time::Instant;

/// How often the dashboard's reader follows the writer: about as often as
/// an open tab refreshes (1.5 s), not faster. Each look replays the WAL
/// objects the writer wrote since the last one, which a busy engine feels
/// (benches/README.md, *Does an open dashboard slow the engine?*).
pub(crate) const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// With no page asked for this long, the reader closes. A visible tab
/// asks every 1.5 s and a hidden one stops, so 45 s (30 missed refreshes)
/// never closes the reader under a tab in view and does close it soon
/// after the last tab is hidden or gone; the cost of closing too early is
/// one reopen (a replay of the unflushed WAL tail: about 0.1–1 s beside a
/// live engine), paid by the next page.
pub const IDLE_CLOSE: Duration = Duration::from_secs(45);

/// A reader older than this is replaced by a fresh one. A following reader
/// adds at most one memtable per look (every second), and every scan
/// merges them all. Measured beside an engine at 4 jobs/s (`web/benches/age.rs`,
/// benches/README.md, *Dashboard cost and page time at any store age*): at
/// 4 000 unflushed WAL objects a reader held since the writer's last
/// memtable flush (about 480 looks) answered `/jobs` in 149 ms at p50
/// where one rebased every minute answered in 72 ms: 0.05–0.17 ms per
/// memtable on `/jobs`, about 0.05 ms on `/`. 60 looks then cost a page
/// 3–10 ms of the 50 ms target, for one replay of the unflushed tail a
/// minute (in the background, and only while pages are asked; the rebased
/// reader used less CPU than the held one). The rest of a page's time
/// follows the tail's size, which the writer bounds (SlateDB 0.17 flushes
/// its memtable after 4 096 WAL flushes), not the reader.
pub const REBASE_AFTER: Duration = Duration::from_secs(60);

/// The longest a page waits for the reader to open (after an idle close),
/// and a rebase for its new reader: then the page is an error naming the
/// store, and the rebase is dropped (the next tries [`REBASE_AFTER`] later).
pub const OPEN_LIMIT: Duration = Duration::from_secs(60);

/// How long a retired reader waits for the pages that still read through
/// it before it closes anyway (a page far slower than any measured).
const RETIRE_LIMIT: Duration = Duration::from_secs(120);

/// Why a page found no reader.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// The store could not be opened again after an idle close.
    #[error("the store {store} could not be opened again: {source}")]
    Reopen {
        /// The store, as the dashboard names it.
        store: String,
        /// Why.
        source: OpsError,
    },
    /// The dashboard was closed ([`crate::close`]).
    #[error("the store {store}'s reader is closed")]
    Closed {
        /// The store, as the dashboard names it.
        store: String,
    },
    /// The open did not end within [`OPEN_LIMIT`].
    #[error("the store {store} did not open within {secs} s")]
    OpenTimedOut {
        /// The store, as the dashboard names it.
        store: String,
        /// The limit.
        secs: u64,
    },
}

/// What a store's reader is doing, for a test or an operator's probe
/// ([`crate::WebConfig::reader_state`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReaderState {
    /// Whether a reader is open now.
    pub open: bool,
    /// Readers opened so far (the first, each reopen after an idle close,
    /// each rebase).
    pub opens: u64,
    /// Rebases swapped in so far.
    pub rebases: u64,
    /// Whether a rebase is under way.
    pub rebasing: bool,
    /// Rebases whose open failed (the next one waits [`REBASE_AFTER`]).
    pub rebase_failures: u64,
    /// Idle closes so far.
    pub idle_closes: u64,
}

/// How to open the store again.
#[derive(Clone)]
pub(crate) struct Opener {
    pub(crate) named: NamedStore,
    pub(crate) queue_path: String,
    pub(crate) jobs_prefix: String,
    pub(crate) bulk_prefix: String,
    /// `(index, count, url)`: the shard marker to check.
    pub(crate) shard: Option<(usize, usize, String)>,
    pub(crate) keyring: Option<Keyring>,
    /// A test's hold on rebases: a rebase waits for a permit before its
    /// swap (at most [`OPEN_LIMIT`]).
    pub(crate) hold_rebase: Option<Arc<tokio::sync::Semaphore>>,
}

impl Opener {
    async fn open(&self) -> Result<Store, OpsError> {
        let store = Store::open_named(
            &self.named,
            &self.queue_path,
            &self.jobs_prefix,
            &self.bulk_prefix,
            Reading::Following(FOLLOW_EVERY),
        )
        .await?;
        if let Some((index, count, url)) = &self.shard
            && let Err(e) = store.check_shard(*index, *count, url).await
        {
            store.close().await;
            return Err(e);
        }
        match &self.keyring {
            Some(k) => store.with_keyring(k.clone()).await,
            None => Ok(store),
        }
    }
}

/// The open reader and when it opened.
#[derive(Clone)]
struct Current {
    store: Arc<Store>,
    at: Instant,
}

/// One store's reader, as the pages get it.
pub(crate) struct Held {
    /// The store's name on the page (its URL or directory).
    name: String,
    /// `None`: a store the application opened ([`crate::WebConfig::from_stores`]),
    /// held open for the dashboard's life as before.
    opener: Option<Opener>,
    current: watch::Sender<Option<Current>>,
    /// One open, swap or close at a time (see the module's docs).
    turn: tokio::sync::Mutex<()>,
    /// When a page last asked, in ms after `born`.
    asked_ms: AtomicU64,
    born: Instant,
    /// Whether the idle watch runs (set with `current` under `turn`).
    watching: AtomicBool,
    rebasing: AtomicBool,
    /// When a rebase's open last failed, in ms after `born` (0: never): the
    /// next rebase waits [`REBASE_AFTER`] after it, not the next page.
    rebase_failed_ms: AtomicU64,
    state: watch::Sender<ReaderState>,
}

impl Held {
    /// A store opened already; `opener` opens it again.
    pub(crate) fn new(name: String, store: Store, opener: Option<Opener>) -> Arc<Self> {
        let born = Instant::now();
        Arc::new(Self {
            name,
            opener,
            current: watch::Sender::new(Some(Current {
                store: Arc::new(store),
                at: born,
            })),
            turn: tokio::sync::Mutex::new(()),
            asked_ms: AtomicU64::new(0),
            born,
            watching: AtomicBool::new(false),
            rebasing: AtomicBool::new(false),
            rebase_failed_ms: AtomicU64::new(0),
            state: watch::Sender::new(ReaderState {
                open: true,
                opens: 1,
                ..ReaderState::default()
            }),
        })
    }

    pub(crate) fn state(&self) -> watch::Receiver<ReaderState> {
        self.state.subscribe()
    }

    pub(crate) fn opener_mut(self: &mut Arc<Self>) -> Option<&mut Opener> {
        Arc::get_mut(self).and_then(|h| h.opener.as_mut())
    }

    /// Replace the held store (before serving: the keyring's check).
    pub(crate) fn take(&self) -> Option<Arc<Store>> {
        self.current.send_replace(None).map(|c| c.store)
    }

    pub(crate) fn put(&self, store: Store) {
        self.current.send_replace(Some(Current {
            store: Arc::new(store),
            at: Instant::now(),
        }));
    }

    /// The reader for a page: the open one (and a rebase started when it
    /// is old), else a new one, opened now.
    pub(crate) async fn store(self: &Arc<Self>) -> Result<Arc<Store>, ReaderError> {
        let now = Instant::now();
        self.asked_ms.fetch_max(
            now.duration_since(self.born).as_millis() as u64,
            Ordering::SeqCst,
        );
        let Some(opener) = &self.opener else {
            // Held for the dashboard's life: never closed before `close`.
            let held = self.current.borrow().as_ref().map(|c| c.store.clone());
            return held.ok_or_else(|| ReaderError::Closed {
                store: self.name.clone(),
            });
        };
        let open = self.current.borrow().clone();
        if let Some(c) = open {
            if !self.watching.load(Ordering::SeqCst) {
                let _turn = self.turn.lock().await;
                self.watch_idle();
            }
            let failed_ms = self.rebase_failed_ms.load(Ordering::SeqCst);
            let failed_long_ago = failed_ms == 0
                || now.duration_since(self.born + Duration::from_millis(failed_ms)) >= REBASE_AFTER;
            if now.duration_since(c.at) >= REBASE_AFTER
                && failed_long_ago
                && !self.rebasing.swap(true, Ordering::SeqCst)
            {
                self.rebase(opener.clone());
            }
            return Ok(c.store);
        }
        let opened = tokio::time::timeout(OPEN_LIMIT, async {
            let _turn = self.turn.lock().await;
            if let Some(c) = self.current.borrow().as_ref() {
                return Ok(c.store.clone());
            }
            let store = Arc::new(opener.open().await.map_err(|source| ReaderError::Reopen {
                store: self.name.clone(),
                source,
            })?);
            self.current.send_replace(Some(Current {
                store: store.clone(),
                at: Instant::now(),
            }));
            self.state.send_modify(|s| {
                s.open = true;
                s.opens += 1;
            });
            self.watch_idle();
            Ok(store)
        })
        .await;
        opened.unwrap_or_else(|_| {
            Err(ReaderError::OpenTimedOut {
                store: self.name.clone(),
                secs: OPEN_LIMIT.as_secs(),
            })
        })
    }

    /// Start the idle watch unless it runs (called under `turn`).
    fn watch_idle(self: &Arc<Self>) {
        if self.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let held = Arc::downgrade(self);
        tokio::spawn(idle_watch(held));
    }

    /// Open a fresh reader in a task of its own and swap it in.
    fn rebase(self: &Arc<Self>, opener: Opener) {
        self.state.send_modify(|s| s.rebasing = true);
        let held = Arc::downgrade(self);
        let name = self.name.clone();
        tokio::spawn(async move {
            // Reports the end however it comes (a panic too) and lets the
            // next old reader start another.
            let _end = RebaseEnd(held.clone());
            let fresh = match tokio::time::timeout(OPEN_LIMIT, opener.open()).await {
                Ok(Ok(fresh)) => fresh,
                Ok(Err(e)) => {
                    tracing::warn!(store = %name, error = %e, "dashboard: a rebase's open failed");
                    failed(&held);
                    return;
                }
                Err(_) => {
                    tracing::warn!(store = %name, "dashboard: a rebase's open timed out");
                    failed(&held);
                    return;
                }
            };
            if let Some(gate) = &opener.hold_rebase {
                let _ = tokio::time::timeout(OPEN_LIMIT, gate.acquire()).await;
            }
            let Some(h) = held.upgrade() else {
                fresh.close().await;
                return;
            };
            let turn = h.turn.lock().await;
            // Closed for idleness meanwhile: the fresh one is not wanted.
            if h.current.borrow().is_none() {
                drop(turn);
                fresh.close().await;
                return;
            }
            let old = h.current.send_replace(Some(Current {
                store: Arc::new(fresh),
                at: Instant::now(),
            }));
            h.state.send_modify(|s| {
                s.opens += 1;
                s.rebases += 1;
            });
            drop(turn);
            drop(h);
            if let Some(old) = old {
                retire(old.store).await;
            }
        });
    }

    /// Close the reader (the dashboard's end).
    pub(crate) async fn close(&self) {
        let _turn = self.turn.lock().await;
        if let Some(c) = self.current.send_replace(None) {
            retire(c.store).await;
        }
        self.state.send_modify(|s| s.open = false);
    }
}

/// Note a rebase's failed open: the next waits a while (`rebase_failed_ms`).
fn failed(held: &Weak<Held>) {
    if let Some(h) = held.upgrade() {
        let ms = Instant::now().duration_since(h.born).as_millis() as u64;
        h.rebase_failed_ms.store(ms.max(1), Ordering::SeqCst);
        h.state.send_modify(|s| s.rebase_failures += 1);
    }
}

/// Ends a rebase: clears the flag, says so, and warns of a panic.
struct RebaseEnd(Weak<Held>);

impl Drop for RebaseEnd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::warn!("dashboard: a rebase panicked");
        }
        if let Some(h) = self.0.upgrade() {
            h.rebasing.store(false, Ordering::SeqCst);
            h.state.send_modify(|s| s.rebasing = false);
        }
    }
}

/// Close `store` once no page reads through it (at most [`RETIRE_LIMIT`]).
async fn retire(store: Arc<Store>) {
    let until = Instant::now() + RETIRE_LIMIT;
    while Arc::strong_count(&store) > 1 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.close().await;
}

/// Close the reader of `held` once no page asked for [`IDLE_CLOSE`]; ends
/// then, or when the dashboard is gone.
async fn idle_watch(held: Weak<Held>) {
    loop {
        let Some(h) = held.upgrade() else { return };
        let asked = h.born + Duration::from_millis(h.asked_ms.load(Ordering::SeqCst));
        let due = asked + IDLE_CLOSE;
        if Instant::now() < due {
            drop(h);
            tokio::time::sleep_until(due).await;
            continue;
        }
        let turn = h.turn.lock().await;
        // A page may have asked while the lock was awaited.
        let asked = h.born + Duration::from_millis(h.asked_ms.load(Ordering::SeqCst));
        if Instant::now() < asked + IDLE_CLOSE {
            continue;
        }
        let closing = h.current.send_replace(None);
        h.watching.store(false, Ordering::SeqCst);
        h.state.send_modify(|s| {
            s.open = false;
            s.idle_closes += 1;
        });
        drop(turn);
        drop(h);
        if let Some(c) = closing {
            retire(c.store).await;
        }
        return;
    }
}
