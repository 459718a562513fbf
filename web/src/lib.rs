//! gaffer's web dashboard: every job, batch, workflow and periodic job of
//! a live store, and the operator's actions on them, in a browser.
//!
//! [`router`] gives an [`axum::Router`] that a service nests under a prefix
//! of its choice (`Router::new().nest("/admin/jobs", gaffer_web::router(config))`,
//! with [`WebConfig::base_path`] the same prefix) behind its own tower
//! layers; `gaffer web --dir|--url|--shards …` serves the same router.
//!
//! - Reads go through one taquba `QueueReader` (`FollowLatest`, following
//!   every second) per store, opened by [`WebConfig::open`] and held by the
//!   router's state, and the read side the `gaffer` command uses
//!   (`gaffer-ops`): the dashboard never opens a writer and never fences.
//!   The reader closes after [`IDLE_CLOSE`] without a request (an idle
//!   dashboard reads nothing) and the next request opens it again; one
//!   older than [`REBASE_AFTER`] is replaced by a fresh one opened in the
//!   background, so a page's time does not grow with the writer's
//!   unflushed WAL.
//! - Mounted in the engine's own process, [`WebConfig::live`] reads through
//!   the engine's view instead (`gaffer::Engine::live_store`): no reader,
//!   so none of the WAL the engine writes is decoded again, and each
//!   commit shows on the next page.
//! - Actions (retry, cancel, pause, resume, submit) are requests through
//!   the store's inbox, as `gaffer retry|cancel|pause|resume|submit` send
//!   them; the page shows each request's fate.
//! - Pages are rendered on the server (maud: everything escaped), charts
//!   are SVG drawn here, and one small script of ours (compiled in) refreshes
//!   the numbers every 1.5 s while the tab is visible. No CDN, no Node.
//! - [`WebConfig::read_only`] removes every action: no button is drawn and
//!   every POST answers 403. POSTs from another site are refused (the
//!   `Sec-Fetch-Site` and `Origin` headers). [`WebConfig::auth`] asks every
//!   request for a bearer token or basic-auth credentials.
//! - No page can be framed by another (clickjacking): every response says
//!   `Content-Security-Policy: frame-ancestors 'none'` (in a policy that
//!   allows the dashboard's own script, style sheet and icon and nothing
//!   else) and `X-Frame-Options: DENY`, with `X-Content-Type-Options:
//!   nosniff` and `Referrer-Policy: same-origin`.
//! - A request whose `Host` is not a name the dashboard answers to is
//!   refused with 421 (DNS rebinding: a page of another site whose name
//!   was pointed at this server's address sends its own name). Served by
//!   `gaffer web`, it answers to the address it listens on (any IP address
//!   when that is `0.0.0.0` or `::`), `localhost` when it listens on a
//!   loopback or every address, and each `--allowed-host`. Nested in a
//!   service ([`router`] without [`WebConfig::listening_on`]), it answers
//!   to any IP address, to `localhost` and `*.localhost`, and to each
//!   [`WebConfig::allowed_host`]; a service reached by name adds its names,
//!   or one that checks `Host` itself calls [`WebConfig::any_host`].

#![warn(missing_docs, missing_debug_implementations)]

mod chart;
mod pages;
mod reader;
mod security;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::routing::{get, post};
use gaffer_layout::live::LiveStore;
use gaffer_layout::store::Store as NamedStore;
use gaffer_ops::{Reading, Store};

pub use reader::{IDLE_CLOSE, OPEN_LIMIT, REBASE_AFTER, ReaderError, ReaderState};
pub use security::Auth;

use reader::{FOLLOW_EVERY, Held, Opener};

impl Shard {
    /// The store's reader for a page (opened again if it was closed for
    /// idleness: an error names the store).
    async fn store(&self) -> Result<Arc<Store>, ReaderError> {
        self.reader.store().await
    }
}

/// Why the dashboard could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// A store could not be opened or is not a gaffer store of this build.
    #[error("{0}")]
    Open(#[from] gaffer_ops::OpsError),
    /// A shard set that is not one.
    #[error("{0}")]
    BadShards(String),
}

/// One store the dashboard reads (one shard of a set, or the only one).
struct Shard {
    index: usize,
    url: String,
    /// Its reader, opened on demand, closed when idle, rebased when old
    /// (`reader.rs`).
    reader: Arc<Held>,
    /// What the overview's chart has counted of this store's
    /// finished-jobs index (one refresh counts at a time).
    chart: tokio::sync::Mutex<chart::Counted>,
    /// The counts its pages last showed (a page load's `Store::stats`, a
    /// refresh's `Store::stats_recent`) and as of when: a refresh shows
    /// the engine's snapshot only once it is newer, so counts never step
    /// back, and reads nothing more until then. A plain mutex: held only
    /// to clone or replace the value, never across an await.
    counted: Mutex<Option<(u64, gaffer_ops::report::Stats)>>,
}

/// What the dashboard serves: the store (or a shard set), opened, and
/// how it is served.
pub struct WebConfig {
    shards: Vec<Shard>,
    base_path: String,
    read_only: bool,
    auth: Option<Auth>,
    hosts: Hosts,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("shards", &self.shards.len())
            .field("base_path", &self.base_path)
            .field("read_only", &self.read_only)
            .field("auth", &self.auth.is_some())
            .field("hosts", &self.hosts)
            .finish()
    }
}

/// The engine's default names: queue path, jobs queue prefix, pipelines'
/// queue prefix (`EngineBuilder`'s defaults, the command's too).
const DEFAULT_NAMES: (&str, &str, &str) = ("queue", "jobs", "bulk-items");

impl WebConfig {
    /// Open `store` (as the engine's builder names it: `gaffer::Store`)
    /// with the engine's default queue names: one `QueueReader`, closed
    /// when idle and opened again by the next request, rebased when old.
    pub async fn open(store: &NamedStore) -> Result<Self, WebError> {
        let (q, j, b) = DEFAULT_NAMES;
        Self::open_with(store, q, j, b).await
    }

    /// [`Self::open`] with the engine's `queue_path`, `queue_name` and
    /// `bulk_queue_name`.
    pub async fn open_with(
        store: &NamedStore,
        queue_path: &str,
        jobs_prefix: &str,
        bulk_prefix: &str,
    ) -> Result<Self, WebError> {
        let opener = Opener {
            named: store.clone(),
            queue_path: queue_path.to_string(),
            jobs_prefix: jobs_prefix.to_string(),
            bulk_prefix: bulk_prefix.to_string(),
            shard: None,
            keyring: None,
            hold_rebase: None,
        };
        let opened = Store::open_named(
            store,
            queue_path,
            jobs_prefix,
            bulk_prefix,
            Reading::Following(FOLLOW_EVERY),
        )
        .await?;
        Ok(Self::held(vec![(store.name(), opened, Some(opener))]))
    }

    /// An engine's store in this process, read through the engine's own
    /// view (`WebConfig::live(&engine.live_store()?)`): no reader, so a tab
    /// costs the engine only its pages' reads, each commit shows on the
    /// next page, and an in-memory engine has a dashboard too. Nothing
    /// closes or rebases; after the engine's shutdown pages show its error.
    pub async fn live(store: &LiveStore) -> Result<Self, WebError> {
        let opened = Store::live(store).await?;
        Ok(Self::held(vec![(store.name().to_string(), opened, None)]))
    }

    /// A shard set: the store of each shard from `template` (`{shard}` is
    /// its index, as `gaffer::ShardSet::from_template`), `count` shards,
    /// each checked against its shard marker.
    pub async fn open_shards(
        template: &str,
        count: usize,
        queue_path: &str,
        jobs_prefix: &str,
        bulk_prefix: &str,
    ) -> Result<Self, WebError> {
        use gaffer_layout::keys;
        if count == 0 || count > keys::MAX_SHARDS || !template.contains("{shard}") {
            return Err(WebError::BadShards(format!(
                "a shard set needs a template with `{{shard}}` and 1 to {} shards",
                keys::MAX_SHARDS
            )));
        }
        let mut stores = Vec::with_capacity(count);
        for shard in 0..count {
            let url = keys::shard_url(template, shard, count);
            let opened = Store::open(
                None,
                Some(&url),
                queue_path,
                jobs_prefix,
                bulk_prefix,
                Reading::Following(FOLLOW_EVERY),
            )
            .await?;
            if let Err(e) = opened.check_shard(shard, count, &url).await {
                opened.close().await;
                for (_, s, _) in stores {
                    let s: Store = s;
                    s.close().await;
                }
                return Err(e.into());
            }
            let opener = Opener {
                named: NamedStore::url(url.clone()),
                queue_path: queue_path.to_string(),
                jobs_prefix: jobs_prefix.to_string(),
                bulk_prefix: bulk_prefix.to_string(),
                shard: Some((shard, count, url.clone())),
                keyring: None,
                hold_rebase: None,
            };
            stores.push((url, opened, Some(opener)));
        }
        Ok(Self::held(stores))
    }

    /// Stores opened already (`gaffer_ops::Store::open*`, read
    /// [`Reading::Replay`] or [`Reading::Following`]), named for the page: one store, or shard `i`
    /// of a set at index `i`. The dashboard cannot open these again, so
    /// they stay open (and following) for its life: no idle close and no
    /// rebase, which [`Self::open`] and [`Self::open_shards`] do.
    pub fn from_stores(stores: Vec<(String, Store)>) -> Self {
        Self::held(stores.into_iter().map(|(u, s)| (u, s, None)).collect())
    }

    fn held(stores: Vec<(String, Store, Option<Opener>)>) -> Self {
        Self {
            shards: stores
                .into_iter()
                .enumerate()
                .map(|(index, (url, store, opener))| Shard {
                    index,
                    reader: Held::new(url.clone(), store, opener),
                    url,
                    chart: tokio::sync::Mutex::new(chart::Counted::default()),
                    counted: Mutex::new(None),
                })
                .collect(),
            base_path: String::new(),
            read_only: false,
            auth: None,
            hosts: Hosts::default(),
        }
    }

    /// What the reader of shard `i` (0 for the only store) is doing: open
    /// or closed for idleness, its opens and rebases.
    pub fn reader_state(&self, i: usize) -> Option<tokio::sync::watch::Receiver<ReaderState>> {
        self.shards.get(i).map(|s| s.reader.state())
    }

    /// Tests only: each rebase waits, its new reader open, for a permit of
    /// `gate` (at most [`OPEN_LIMIT`]) before it is swapped in.
    #[doc(hidden)]
    pub fn hold_rebases(mut self, gate: Arc<tokio::sync::Semaphore>) -> Self {
        for s in &mut self.shards {
            if let Some(o) = s.reader.opener_mut() {
                o.hold_rebase = Some(gate.clone());
            }
        }
        self
    }

    /// Show the values sealed under `keyring`'s keys (every store of the
    /// set); the others show as `encrypted (key ID)`, as they do without a
    /// keyring. A key the store names whose key here is another one is
    /// refused (`EncryptionKeyWrong`). Operator requests are sealed with it.
    pub async fn encryption(
        mut self,
        keyring: gaffer_layout::sealed::Keyring,
    ) -> Result<Self, WebError> {
        let mut failed = None;
        for shard in &mut self.shards {
            let Some(held) = shard.reader.take() else {
                continue;
            };
            // Not shared before the router is built: the only pointer.
            let store = match Arc::try_unwrap(held) {
                Ok(store) => store,
                Err(shared) => {
                    shared.close().await;
                    continue;
                }
            };
            if failed.is_some() {
                store.close().await;
                continue;
            }
            match store.with_keyring(keyring.clone()).await {
                Ok(store) => {
                    shard.reader.put(store);
                    if let Some(o) = shard.reader.opener_mut() {
                        o.keyring = Some(keyring.clone());
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            for shard in &self.shards {
                shard.reader.close().await;
            }
            return Err(e.into());
        }
        Ok(self)
    }

    /// The prefix the router is nested under (`/admin/jobs`), for the
    /// links of its pages; none by default.
    pub fn base_path(mut self, path: &str) -> Self {
        self.base_path = path.trim_end_matches('/').to_string();
        self
    }

    /// Without actions: no button is drawn and every POST answers 403.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Ask every request for these credentials (the standalone server
    /// takes them from the environment); a service that nests the router
    /// behind its own auth layer leaves this unset.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = Some(auth);
        self
    }

    /// Also answer requests sent to this name (`jobs.example.com`, any
    /// port) or name and port (`jobs.example.com:8443`): a name the
    /// dashboard is reached by (a DNS name, a reverse proxy's). Repeat for
    /// several. Any other name is refused with 421 (see the crate's docs).
    pub fn allowed_host(mut self, host: &str) -> Self {
        self.hosts.allowed.push(host.trim().to_ascii_lowercase());
        self
    }

    /// The address the server listens on (`gaffer web` sets it): the
    /// dashboard then answers to that address (any IP address when it is
    /// unspecified, `0.0.0.0` or `::`), to `localhost` when it is a
    /// loopback or unspecified one, and to the [`Self::allowed_host`]
    /// names. Without it (a router nested in a service): to any IP
    /// address, `localhost` and `*.localhost`, and the allowed names.
    pub fn listening_on(mut self, addr: std::net::SocketAddr) -> Self {
        self.hosts.listen = Some(addr);
        self
    }

    /// Answer whatever `Host` a request names: for a service that checks
    /// it itself (or a proxy in front that does). Leaves the dashboard
    /// open to DNS rebinding otherwise.
    pub fn any_host(mut self) -> Self {
        self.hosts.any = true;
        self
    }
}

/// The `Host` names the dashboard answers to (see [`WebConfig::allowed_host`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Hosts {
    /// Where the server listens, when it says.
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// Names (lowercase), each with or without a port.
    pub(crate) allowed: Vec<String>,
    /// Any name.
    pub(crate) any: bool,
}

impl Hosts {
    /// Whether a request that names `host` (its `Host` header or its URI's
    /// authority: a name or an IP address, and maybe a port) is for this
    /// dashboard.
    pub(crate) fn admits(&self, host: &str) -> bool {
        if self.any {
            return true;
        }
        let host = host.trim().to_ascii_lowercase();
        let (name, port) = split_host(&host);
        if name.is_empty() {
            return false;
        }
        let listed = self.allowed.iter().any(|a| {
            let (an, ap) = split_host(a);
            an == name && (ap.is_none() || ap == port)
        });
        if listed {
            return true;
        }
        let localhost = name == "localhost" || name.ends_with(".localhost");
        let ip = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok();
        match self.listen {
            // Nested in a service: any address (a page can reach an
            // address only by naming it), and the loopback names.
            None => ip.is_some() || localhost,
            Some(addr) if addr.ip().is_unspecified() => ip.is_some() || localhost,
            Some(addr) => ip == Some(addr.ip()) || (localhost && addr.ip().is_loopback()),
        }
    }
}

/// `name[:port]` (`[v6]:port` too) into the name and the port.
fn split_host(host: &str) -> (&str, Option<&str>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((v6, tail)) => (
                &host[..v6.len() + 2],
                tail.strip_prefix(':').filter(|p| !p.is_empty()),
            ),
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        // A bare IPv6 address has several colons: no port.
        Some((name, port)) if !name.contains(':') => (name, Some(port)),
        _ => (host, None),
    }
}

/// A batch's first sighting by this server, for its rate and time left.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    settled: u64,
}

/// The router's state: the stores, each with its one reader, and the
/// server's own memory of batch progress (not engine state).
pub(crate) struct App {
    shards: Vec<Shard>,
    base: String,
    read_only: bool,
    auth: Option<Auth>,
    hosts: Hosts,
    samples: Mutex<HashMap<(usize, String), Sample>>,
}

impl App {
    /// The store of shard `i`.
    fn shard(&self, i: usize) -> Option<&Shard> {
        self.shards.get(i)
    }

    /// The shard of job or batch `id`.
    fn shard_of(&self, id: &str) -> &Shard {
        let i = gaffer_layout::keys::shard_of(id, self.shards.len());
        &self.shards[i.min(self.shards.len() - 1)]
    }

    /// A link inside the dashboard.
    fn href(&self, path: &str) -> String {
        if path == "/" && !self.base.is_empty() {
            return self.base.clone();
        }
        format!("{}{path}", self.base)
    }

    /// The rate (settled items per second) of a batch since this server
    /// first saw it, when it moved since.
    fn rate(&self, shard: usize, id: &str, settled: u64) -> Option<f64> {
        let now = Instant::now();
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let first = *samples
            .entry((shard, id.to_string()))
            .or_insert(Sample { at: now, settled });
        let secs = now.duration_since(first.at).as_secs_f64();
        (secs >= 1.0 && settled > first.settled).then(|| (settled - first.settled) as f64 / secs)
    }
}

/// The dashboard's router, to serve or to nest under
/// [`WebConfig::base_path`]. Without a store in `config` every request
/// answers 503.
pub fn router(config: WebConfig) -> Router {
    let app = Arc::new(App {
        shards: config.shards,
        base: config.base_path,
        read_only: config.read_only,
        auth: config.auth,
        hosts: config.hosts,
        samples: Mutex::new(HashMap::new()),
    });
    Router::new()
        .route("/", get(pages::overview))
        .route("/jobs", get(pages::jobs))
        .route("/jobs/{id}", get(pages::job))
        .route("/jobs/{id}/retry", post(pages::retry))
        .route("/jobs/{id}/cancel", post(pages::cancel))
        .route("/jobs/{id}/signal", post(pages::signal))
        .route("/failed", get(pages::failed))
        .route("/failed/retry", post(pages::retry_selected))
        .route(
            "/failed/retry-all",
            get(pages::retry_all_confirm).post(pages::retry_all),
        )
        .route("/batches", get(pages::batches))
        .route("/batches/{id}", get(pages::batch))
        .route("/batches/{id}/item", get(pages::item))
        .route("/workflows", get(pages::workflows))
        .route("/workflows/{id}", get(pages::workflow))
        .route("/workflows/{id}/cancel", post(pages::cancel_workflow))
        .route("/workflows/{id}/retry", post(pages::retry_workflow))
        .route("/periodic", get(pages::periodic))
        .route("/queues", get(pages::queues))
        .route("/queues/pause", post(pages::pause_named))
        .route("/queues/{name}/pause", post(pages::pause))
        .route("/queues/{name}/resume", post(pages::resume))
        .route("/queues/{name}/values", get(pages::queue_values))
        .route("/queues/{name}/values/pause", post(pages::pause_value))
        .route("/queues/{name}/values/resume", post(pages::resume_value))
        .route("/submit", get(pages::submit_form).post(pages::submit))
        .route("/requests", get(pages::requests))
        .route("/assets/app.js", get(view::script))
        .route("/assets/app.css", get(view::style))
        .route("/assets/icon.svg", get(view::icon))
        .route("/favicon.ico", get(view::icon))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            security::guard,
        ))
        .layer(axum::middleware::from_fn(security::headers))
        .with_state(app)
}

/// Close the readers of `config` without serving it.
pub async fn close(config: WebConfig) {
    for s in config.shards {
        s.reader.close().await;
    }
}
