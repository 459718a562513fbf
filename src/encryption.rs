//! Values encrypted at rest (docs/guide/encryption.md): the [`Keyring`] given to
//! [`EngineBuilder::encryption`](crate::EngineBuilder::encryption),
//! `ClientBuilder::encryption`, the `gaffer` command (`--key-file`) and the
//! dashboard; what it seals and what stays readable.

pub use gaffer_actors::layout::sealed::{KEY_FILE_ENV, KEYS_ENV, Keyring, KeyringError, SealError};
pub use gaffer_actors::maintenance::rekey::RekeyReport;
