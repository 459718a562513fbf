//! How errors are made: conversions from the store's and the queue's
//! errors, the constructors, and which errors are permanent.

use std::sync::Arc;

use super::EngineError;

impl From<std::io::Error> for EngineError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(Arc::new(e))
    }
}

impl EngineError {
    /// `what` failed to encode.
    pub fn encode(
        what: impl Into<String>,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Encode {
            what: what.into(),
            reason: super::cause(e),
        }
    }

    /// `what` failed to decode.
    pub fn decode(
        what: impl Into<String>,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Decode {
            what: what.into(),
            reason: super::cause(e),
        }
    }
}

impl EngineError {
    /// True when retrying the same call cannot succeed.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::Queue(e) => e.is_permanent(),
            Self::Store(_)
            | Self::ShutDown
            | Self::ActorUnavailable { .. }
            | Self::Contended { .. }
            | Self::Internal { .. }
            | Self::Startup(_)
            | Self::BatchRunning(_)
            | Self::BatchAbandoned(_)
            | Self::BatchNotRunning(_)
            | Self::BatchActive { .. }
            | Self::Io(_) => false,
            _ => true,
        }
    }
}

impl EngineError {
    /// An actor (`actor`) that stopped before it answered.
    pub fn unavailable(actor: &'static str, reason: impl std::fmt::Display) -> Self {
        Self::ActorUnavailable {
            actor,
            reason: reason.to_string(),
        }
    }
}

impl From<taquba::Error> for EngineError {
    fn from(e: taquba::Error) -> Self {
        Self::Queue(Arc::new(e))
    }
}

impl From<taquba::object_store::Error> for EngineError {
    fn from(e: taquba::object_store::Error) -> Self {
        // An object that did not open through the engine's keyring is that
        // error, typed, not a store failure.
        match crate::sealed::blobs::seal_error(&e) {
            Some(sealed) => sealed.clone().into(),
            None => Self::Store(Arc::new(e)),
        }
    }
}

/// `Some(reason)` when `e` says the store is closed for good (fenced by
/// another writer, closed, or its background tasks died).
pub fn store_closed(e: &taquba::Error) -> Option<String> {
    match e {
        taquba::Error::Storage(s) => match s.kind() {
            slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced) => {
                Some("fenced: another process opened this store as its writer".into())
            }
            slatedb::ErrorKind::Closed(reason) => Some(format!("{reason:?}")),
            _ => None,
        },
        _ => None,
    }
}

impl From<crate::sealed::SealError> for EngineError {
    fn from(e: crate::sealed::SealError) -> Self {
        use crate::sealed::SealError;
        match e {
            SealError::UnknownKey { key_id } => Self::EncryptionKeyMissing { key_id },
            SealError::WrongKey { key_id } => Self::EncryptionKeyWrong { key_id },
            e @ (SealError::Malformed(_) | SealError::Random(_)) => {
                Self::SealedValue(e.to_string())
            }
        }
    }
}

impl From<crate::sealed::KeyringError> for EngineError {
    fn from(e: crate::sealed::KeyringError) -> Self {
        Self::InvalidKeyring(e.to_string())
    }
}
