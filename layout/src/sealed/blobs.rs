//! The engine's blob store (memo entries, large outputs) through its
//! keyring: every object written is sealed, every object read is opened.
//! The engine's one seam for objects: memo writes, output writes and every
//! read of them go through it, so none of their call sites seals or opens
//! anything itself. Listings, deletes, copies and renames pass through.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use taquba::object_store::path::Path;
use taquba::object_store::{
    self, CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload,
    ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use super::Keyring;

/// A boxed future, the shape `async_trait` methods of `ObjectStore` return.
type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The name this store gives its errors (`Error::Generic { store, .. }`).
pub const SEALED_STORE_NAME: &str = "gaffer-sealed";

/// An object store whose objects are sealed with a keyring (see the
/// module's docs). With an empty keyring it reads and writes the bytes as
/// they are.
pub struct SealedStore {
    inner: Arc<dyn ObjectStore>,
    keyring: Keyring,
}

impl SealedStore {
    /// `inner` seen through `keyring`.
    pub fn new(inner: Arc<dyn ObjectStore>, keyring: Keyring) -> Self {
        Self { inner, keyring }
    }

    /// The store underneath: the stored bytes, sealed or not.
    pub fn inner(&self) -> &Arc<dyn ObjectStore> {
        &self.inner
    }
}

impl fmt::Debug for SealedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedStore")
            .field("inner", &self.inner)
            .field("keyring", &self.keyring)
            .finish()
    }
}

impl fmt::Display for SealedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SealedStore({})", self.inner)
    }
}

fn generic(e: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: SEALED_STORE_NAME,
        source: Box::new(e),
    }
}

/// What a read through the store's keyring failed on: the object's path and
/// why (a key it does not hold, a wrong one, a malformed value).
#[derive(Debug, thiserror::Error)]
#[error("object `{path}`: {error}")]
pub struct SealedObjectError {
    /// The object.
    pub path: String,
    /// Why it did not open.
    pub error: super::SealError,
}

// The trait is declared with `async_trait`; these methods are its expansion
// written out (this crate does not depend on `async_trait`).
impl ObjectStore for SealedStore {
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
            let payload = if self.keyring.is_empty() {
                payload
            } else {
                let mut plain = Vec::with_capacity(payload.content_length());
                for part in payload.iter() {
                    plain.extend_from_slice(part);
                }
                let sealed = self.keyring.seal_vec(plain).map_err(|error| {
                    generic(SealedObjectError {
                        path: location.to_string(),
                        error,
                    })
                })?;
                PutPayload::from(sealed)
            };
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
            if self.keyring.is_empty() {
                return self.inner.put_multipart_opts(location, opts).await;
            }
            // A value is sealed whole; gaffer writes its objects in one put.
            Err(object_store::Error::NotSupported {
                source: "multipart uploads through a sealing store (gaffer writes whole objects)"
                    .into(),
            })
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
            // Without a keyring objects are read as stored: the store holds
            // nothing sealed (a start with no keyring refuses a store that
            // does), and a memo entry's own bytes that only start like a
            // sealed value read as they were written.
            if options.head || self.keyring.is_empty() {
                return self.inner.get_opts(location, options).await;
            }
            if options.range.is_some() {
                return Err(object_store::Error::NotSupported {
                    source: "a range of an object read through a sealing store".into(),
                });
            }
            let found = self.inner.get_opts(location, options).await?;
            let (mut meta, attributes, extensions) = (
                found.meta.clone(),
                found.attributes.clone(),
                found.extensions.clone(),
            );
            let stored = found.bytes().await?;
            let plain = match self.keyring.open(&stored) {
                Ok(std::borrow::Cow::Borrowed(_)) => stored,
                Ok(std::borrow::Cow::Owned(plain)) => bytes::Bytes::from(plain),
                Err(error) => {
                    return Err(generic(SealedObjectError {
                        path: location.to_string(),
                        error,
                    }));
                }
            };
            meta.size = plain.len() as u64;
            let size = meta.size;
            Ok(GetResult {
                payload: GetResultPayload::Stream(
                    futures_util::stream::once(async move { Ok(plain) }).boxed(),
                ),
                meta,
                range: 0..size,
                attributes,
                extensions,
            })
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
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
        self.inner.list_with_delimiter(prefix)
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
        self.inner.copy_opts(from, to, options)
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
        self.inner.rename_opts(from, to, options)
    }
}

/// The [`SealError`](super::SealError) behind an object-store error from a
/// [`SealedStore`], if that is what it is.
pub fn seal_error(e: &object_store::Error) -> Option<&super::SealError> {
    match e {
        object_store::Error::Generic { store, source } if *store == SEALED_STORE_NAME => {
            source.downcast_ref::<SealedObjectError>().map(|s| &s.error)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taquba::object_store::ObjectStoreExt;
    use taquba::object_store::memory::InMemory;

    #[tokio::test]
    async fn objects_are_sealed_on_the_way_in_and_opened_on_the_way_out() {
        let raw: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let ring = Keyring::new().with_key("k1", [3; 32]).unwrap();
        let sealed = SealedStore::new(raw.clone(), ring);
        let path = Path::from("gaffer-blobs/v1/memo/r/x");
        sealed
            .put(&path, PutPayload::from(b"secret memo".to_vec()))
            .await
            .unwrap();
        let stored = raw.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(super::super::sealed_under(&stored), Some("k1"));
        let read = sealed.get(&path).await.unwrap();
        assert_eq!(read.meta.size, 11);
        assert_eq!(read.bytes().await.unwrap().as_ref(), b"secret memo");
        // With another key: a typed error naming the one it needs, not the
        // sealed bytes.
        let other = SealedStore::new(raw.clone(), Keyring::new().with_key("k2", [4; 32]).unwrap());
        let err = other.get(&path).await.unwrap_err();
        assert_eq!(seal_error(&err).and_then(|e| e.key_id()), Some("k1"));
        // Without a keyring: as stored.
        let keyless = SealedStore::new(raw.clone(), Keyring::new());
        let read = keyless.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(read, stored);
        // A plain object reads as it is, and an empty keyring writes plain.
        keyless
            .put(&Path::from("p"), PutPayload::from(b"plain".to_vec()))
            .await
            .unwrap();
        let plain = raw
            .get(&Path::from("p"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(plain.as_ref(), b"plain");
    }
}
