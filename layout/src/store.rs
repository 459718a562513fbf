//! Where a store is: [`Store`], the one type the engine's builder, the
//! client's builder, the `gaffer` command and the dashboard name a store
//! with, and its opening.
//!
//! Stores by URL: `s3://bucket/prefix`, `gs://…`, `az://…`, `file:///dir`,
//! `memory://`, opened through taquba's `open_url` and configured from the
//! provider variables of the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
//!
//! Everything an engine keeps (the queue and the blobs beside it) lives under
//! the URL's path, as it lives under a local directory: two engines with
//! different prefixes in one bucket never see each other's objects. Shared by
//! the engine and anything that reads a store from outside (the `gaffer`
//! command).

use std::path::PathBuf;
use std::sync::Arc;

use taquba::object_store::ObjectStore;
use taquba::object_store::local::LocalFileSystem;
use taquba::object_store::memory::InMemory;
use taquba::object_store::prefix::PrefixStore;

use crate::error::{EngineError, Result};

/// Where a store is: a local directory, a URL (`s3://bucket/prefix`, …),
/// an object store the caller built, or memory (tests, a scratch engine).
///
/// ```
/// use gaffer_layout::store::Store;
/// let here = Store::local_dir("gaffer-data");
/// let there = Store::url("s3://my-bucket/app");
/// assert_eq!(there.name(), "s3://my-bucket/app");
/// # let _ = here;
/// ```
#[derive(Clone)]
pub enum Store {
    /// A directory on the local disk (`local_dir`).
    LocalDir(PathBuf),
    /// A store URL, rooted at its path, and the provider variables to
    /// configure it with (`None`: the process environment, read at open).
    Url(String, Option<Vec<(String, String)>>),
    /// An object store built by the caller.
    Given(Arc<dyn ObjectStore>),
    /// A fresh in-memory store, gone with the process.
    InMemory,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::LocalDir(dir) => f.debug_tuple("LocalDir").field(dir).finish(),
            // The variables may hold credentials: never printed.
            Store::Url(url, _) => f.debug_tuple("Url").field(url).finish(),
            Store::Given(store) => f.debug_tuple("Given").field(&store.to_string()).finish(),
            Store::InMemory => f.write_str("InMemory"),
        }
    }
}

impl Store {
    /// A directory on the local disk (created at an engine's start if
    /// missing).
    pub fn local_dir(dir: impl Into<PathBuf>) -> Self {
        Store::LocalDir(dir.into())
    }

    /// A store by URL, configured from the process environment's provider
    /// variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) when it is opened. The
    /// backend's feature (`aws`, `gcp`, `azure`) must be on.
    pub fn url(url: impl Into<String>) -> Self {
        Store::Url(url.into(), None)
    }

    /// A store by URL, configured from `env` instead of the process
    /// environment.
    pub fn url_with_env<K: Into<String>, V: Into<String>>(
        url: impl Into<String>,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let env = env.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        Store::Url(url.into(), Some(env))
    }

    /// An object store the caller built (its paths are the store's root).
    pub fn object_store(store: Arc<dyn ObjectStore>) -> Self {
        Store::Given(store)
    }

    /// A fresh in-memory store.
    pub fn in_memory() -> Self {
        Store::InMemory
    }

    /// How the store is named in messages: the directory, the URL, or what
    /// the object store says of itself.
    pub fn name(&self) -> String {
        match self {
            Store::LocalDir(dir) => dir.display().to_string(),
            Store::Url(url, _) => url.clone(),
            Store::Given(store) => store.to_string(),
            Store::InMemory => "memory".into(),
        }
    }

    /// Open it for an engine, its writer: a local directory is created if
    /// missing.
    pub fn open(&self) -> Result<Arc<dyn ObjectStore>> {
        self.open_as(true)
    }

    /// Open it for a reader (a client, the command, the dashboard): a local
    /// directory must exist ([`EngineError::NoSuchStore`]), since creating
    /// one would only hide a wrong path.
    pub fn open_existing(&self) -> Result<Arc<dyn ObjectStore>> {
        self.open_as(false)
    }

    fn open_as(&self, create: bool) -> Result<Arc<dyn ObjectStore>> {
        Ok(match self {
            Store::LocalDir(dir) => {
                if create {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        EngineError::InvalidConfig(format!("cannot create {}: {e}", dir.display()))
                    })?;
                } else if !dir.is_dir() {
                    return Err(EngineError::NoSuchStore(format!(
                        "{}: the directory does not exist",
                        dir.display()
                    )));
                }
                Arc::new(LocalFileSystem::new_with_prefix(dir)?)
            }
            Store::Url(url, Some(env)) => open_store_url(url, env.iter().cloned())?,
            Store::Url(url, None) => open_store_url(url, std::env::vars())?,
            Store::Given(store) => store.clone(),
            Store::InMemory => Arc::new(InMemory::new()),
        })
    }
}

/// The backend feature a URL's scheme needs, if it needs one: `aws`, `gcp`
/// or `azure` (`None` for `file`, `memory` and plain HTTP stores).
pub fn backend_feature(url: &str) -> Option<&'static str> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split('/').next().unwrap_or_default();
    match scheme.to_ascii_lowercase().as_str() {
        "s3" | "s3a" => Some("aws"),
        "gs" => Some("gcp"),
        "az" | "adl" | "azure" | "abfs" | "abfss" => Some("azure"),
        "http" | "https" if host.ends_with(".amazonaws.com") => Some("aws"),
        "http" | "https" if host.ends_with(".r2.cloudflarestorage.com") => Some("aws"),
        "http" | "https" if host.ends_with(".windows.net") => Some("azure"),
        "http" | "https" if host.ends_with(".fabric.microsoft.com") => Some("azure"),
        "http" | "https" if host == "storage.googleapis.com" => Some("gcp"),
        _ => None,
    }
}

/// Whether this build has the backend feature `feature`.
// Without the backend features every arm but the last is `false`, which
// clippy would rewrite as `matches!`.
#[allow(clippy::match_like_matches_macro)]
fn compiled_in(feature: &str) -> bool {
    match feature {
        "aws" => cfg!(feature = "aws"),
        "gcp" => cfg!(feature = "gcp"),
        "azure" => cfg!(feature = "azure"),
        _ => true,
    }
}

/// Open the store at `url`, configured from `env` (pass `std::env::vars()`),
/// rooted at the URL's path: the returned store sees only what is under it.
/// A `file://` directory is created if it does not exist.
///
/// # Errors
///
/// [`EngineError::StoreFeatureMissing`] when the URL's backend is not built
/// in; [`EngineError::InvalidStoreUrl`] when the URL does not parse, its
/// scheme is unknown, or the provider rejects an option;
/// [`EngineError::InvalidConfig`] when a `file://` directory cannot be
/// created.
pub fn open_store_url<I, K, V>(url: &str, env: I) -> Result<Arc<dyn ObjectStore>>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: Into<String>,
{
    if let Some(feature) = backend_feature(url)
        && !compiled_in(feature)
    {
        return Err(EngineError::StoreFeatureMissing {
            url: url.to_string(),
            feature,
        });
    }
    if let Some(dir) = url.strip_prefix("file://") {
        // `file:///abs/dir`: the directory itself, created like `local_dir`.
        if !dir.starts_with('/') {
            return Err(EngineError::InvalidStoreUrl {
                url: url.to_string(),
                reason: "a file URL needs an absolute path: file:///path/to/dir".into(),
            });
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| EngineError::InvalidConfig(format!("cannot create {dir}: {e}")))?;
        let store = LocalFileSystem::new_with_prefix(dir).map_err(EngineError::from)?;
        return Ok(Arc::new(store));
    }
    let (store, path) = taquba::open_url(url, env).map_err(|e| match e {
        taquba::Error::InvalidStoreUrl { source, .. } => EngineError::InvalidStoreUrl {
            url: url.to_string(),
            reason: source.to_string(),
        },
        other => EngineError::from(other),
    })?;
    if path.as_ref().is_empty() {
        return Ok(store);
    }
    Ok(Arc::new(PrefixStore::new(store, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ENV: [(&str, &str); 0] = [];

    #[test]
    fn each_scheme_names_the_feature_it_needs() {
        assert_eq!(backend_feature("s3://bucket/app"), Some("aws"));
        assert_eq!(backend_feature("S3://bucket"), Some("aws"));
        assert_eq!(backend_feature("gs://bucket/app"), Some("gcp"));
        assert_eq!(backend_feature("az://container/app"), Some("azure"));
        assert_eq!(
            backend_feature("abfss://c@a.dfs.core.windows.net/x"),
            Some("azure")
        );
        assert_eq!(
            backend_feature("https://bucket.s3.eu-west-1.amazonaws.com/app"),
            Some("aws")
        );
        assert_eq!(
            backend_feature("https://a.blob.core.windows.net/c"),
            Some("azure")
        );
        assert_eq!(
            backend_feature("https://storage.googleapis.com/b"),
            Some("gcp")
        );
        assert_eq!(backend_feature("https://example.com/store"), None);
        assert_eq!(backend_feature("file:///tmp/x"), None);
        assert_eq!(backend_feature("memory://"), None);
        assert_eq!(backend_feature("no scheme"), None);
    }

    #[test]
    fn a_url_whose_backend_is_not_built_in_names_the_feature() {
        for (url, feature) in [
            ("s3://bucket/app", "aws"),
            ("gs://bucket/app", "gcp"),
            ("az://container/app", "azure"),
        ] {
            match open_store_url(url, NO_ENV) {
                Err(EngineError::StoreFeatureMissing { feature: f, .. }) => {
                    assert!(!compiled_in(feature));
                    assert_eq!(f, feature);
                }
                Err(other) => panic!("{url}: expected StoreFeatureMissing, got {other}"),
                Ok(_) => assert!(compiled_in(feature), "{url} opened without `{feature}`"),
            }
        }
    }

    #[test]
    fn bad_urls_are_typed_errors() {
        for url in ["no scheme", "unknown://bucket", "file://relative/dir"] {
            assert!(
                matches!(
                    open_store_url(url, NO_ENV),
                    Err(EngineError::InvalidStoreUrl { .. })
                ),
                "{url}"
            );
        }
    }

    #[tokio::test]
    async fn the_store_is_rooted_at_the_urls_path() {
        use taquba::object_store::{ObjectStoreExt, PutPayload, path::Path};
        let dir = std::env::temp_dir().join(format!("gaffer-store-url-{}", std::process::id()));
        let url = format!("file://{}/a/b", dir.display());
        let store = open_store_url(&url, NO_ENV).unwrap();
        store
            .put(&Path::from("x"), PutPayload::from_static(b"1"))
            .await
            .unwrap();
        assert!(dir.join("a/b/x").exists(), "written under the URL's path");
        let _ = std::fs::remove_dir_all(&dir);

        // A memory URL with a path: a prefix store over a fresh memory store.
        let store = open_store_url("memory:///p/q", NO_ENV).unwrap();
        store
            .put(&Path::from("y"), PutPayload::from_static(b"2"))
            .await
            .unwrap();
        assert!(store.get(&Path::from("y")).await.is_ok());
    }
}
