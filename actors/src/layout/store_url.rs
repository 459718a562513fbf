//! Stores by URL: `s3://bucket/prefix`, `gs://…`, `az://…`, `file:///dir`,
//! `memory://`, opened through taquba's `open_url` and configured from the
//! provider variables of the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
//!
//! Everything an engine keeps (the queue and the blobs beside it) lives under
//! the URL's path, as it lives under a local directory: two engines with
//! different prefixes in one bucket never see each other's objects. Shared by
//! the engine and anything that reads a store from outside (the `gaffer`
//! command).

use std::sync::Arc;

use taquba::object_store::ObjectStore;
use taquba::object_store::local::LocalFileSystem;
use taquba::object_store::prefix::PrefixStore;

use crate::error::{EngineError, Result};

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
