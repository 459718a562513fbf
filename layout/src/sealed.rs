//! Values sealed at rest: the [`Keyring`] and the sealed value format.
//!
//! Every user-supplied value the engine keeps (a job's payload, its output
//! and errors, memo entries, staged KV writes, signals, batch manifests and
//! item records, workflow steps' jobs, a client's requests) goes through one
//! keyring on its way to the store and back: [`Keyring::seal`] where it is
//! encoded for the store, [`Keyring::open`] where it is decoded from it. An
//! empty keyring (the default) seals nothing: the bytes stored are the
//! plain ones, unchanged, and a sealed value met without its key is a
//! typed error ([`SealError::UnknownKey`]), never garbage handed on.
//!
//! A sealed value (XChaCha20-Poly1305, a fresh random 24-byte nonce per
//! value, so a key seals any number of values):
//!
//! ```text
//! C1 'G' 'S' 01   magic and format version (0xC1 never starts a MessagePack value)
//! u8              length of the key id (1-64)
//! key id          [A-Za-z0-9_.-], the key that sealed it
//! 24 bytes        nonce
//! ciphertext      the plain bytes, encrypted, and the 16-byte tag
//! ```
//!
//! The magic, version and key id are the associated data: they are
//! authenticated, so a value cannot be moved under another key id. A text
//! (an error message, which the records keep as a string) is sealed the
//! same way and kept as `gaffer-sealed:` and the sealed bytes in base64
//! (URL alphabet, no padding).
//!
//! Keys rotate: the newest key of the ring seals, every key opens what it
//! sealed. The key file (`--key-file`, `GAFFER_KEY_FILE`; the same lines in
//! `GAFFER_KEYS`) lists one key a line, `id:base64` (32 bytes, standard
//! alphabet), newest last; blank lines and lines starting with `#` are
//! skipped (docs/guide/encryption.md).

use std::borrow::Cow;
use std::sync::Arc;

pub mod blobs;

use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, OsRng, Payload, rand_core::RngCore};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde::{Deserialize, Serialize};

/// The first bytes of every sealed value: `0xC1` (a byte MessagePack never
/// uses, so no plain MessagePack value starts with it), `GS`, and the
/// format version.
pub const SEALED_MAGIC: [u8; 4] = [0xC1, b'G', b'S', 1];

/// The prefix of a sealed text.
pub const SEALED_TEXT_PREFIX: &str = "gaffer-sealed:";

/// Bytes a value grows by when sealed, besides its key id: the magic, the
/// id's length, the nonce and the tag.
pub const SEAL_OVERHEAD: usize = SEALED_MAGIC.len() + 1 + NONCE_LEN + TAG_LEN;

/// The most a sealed value can add to a plain one: [`SEAL_OVERHEAD`] and
/// the longest key id. Caps on stored values leave this much room.
pub const MAX_SEAL_OVERHEAD: usize = SEAL_OVERHEAD + MAX_KEY_ID_LEN;

/// Longest key id.
pub const MAX_KEY_ID_LEN: usize = 64;

/// The environment variable naming a key file.
pub const KEY_FILE_ENV: &str = "GAFFER_KEY_FILE";

/// The environment variable holding the keys themselves (the key file's
/// lines, separated by newlines, spaces or commas).
pub const KEYS_ENV: &str = "GAFFER_KEYS";

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const KEY_LEN: usize = 32;

/// What a key's check value seals: the store's encryption record keeps it
/// sealed under each key, so a start given another key of the same id is
/// refused before it reads anything else.
const CHECK_PLAINTEXT: &[u8] = b"gaffer key check v1";

/// Why a value could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The value was sealed under a key this keyring does not hold.
    #[error(
        "a value is sealed under key `{key_id}`, which this keyring does not hold; add that key \
         (docs/guide/encryption.md)"
    )]
    UnknownKey {
        /// The key that sealed it.
        key_id: String,
    },
    /// The keyring's key of that id does not open it: another key was given
    /// that id, or the value was changed since it was sealed.
    #[error(
        "a value sealed under key `{key_id}` does not open with this keyring's key of that id: \
         the key is not the one that sealed it, or the value was changed"
    )]
    WrongKey {
        /// The key id it names.
        key_id: String,
    },
    /// The value starts like a sealed value but is not one.
    #[error("a sealed value is malformed: {0}")]
    Malformed(String),
    /// The system's random source failed (no nonce, so nothing sealed).
    #[error("the system random source failed, so nothing could be sealed: {0}")]
    Random(String),
}

impl SealError {
    /// The key id the error is about, if it names one.
    pub fn key_id(&self) -> Option<&str> {
        match self {
            Self::UnknownKey { key_id } | Self::WrongKey { key_id } => Some(key_id),
            _ => None,
        }
    }
}

/// Why a keyring could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// A key id not of the accepted form.
    #[error("invalid key id `{0}`: 1-64 characters of [A-Za-z0-9_.-]")]
    InvalidId(String),
    /// Two keys with one id.
    #[error("key id `{0}` is given twice; each key needs an id of its own")]
    DuplicateId(String),
    /// A line of a key file that is not `id:base64`.
    #[error(
        "{source_name}, line {line}: {reason} (each line is `id:base64` of a 32-byte key; `#` \
         starts a comment)"
    )]
    BadLine {
        /// Where the keys came from (a path, an environment variable).
        source_name: String,
        /// 1-based line (entry) number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The key file could not be read.
    #[error("the key file `{path}` could not be read: {reason}")]
    Unreadable {
        /// Its path.
        path: String,
        /// The system's error.
        reason: String,
    },
    /// Both environment variables are set.
    #[error("both {KEY_FILE_ENV} and {KEYS_ENV} are set; set one")]
    BothSet,
}

struct Key {
    id: String,
    bytes: [u8; KEY_LEN],
    cipher: XChaCha20Poly1305,
}

/// The keys that seal and open stored values: the newest seals, each opens
/// what it sealed. Cheap to clone (shared). An empty keyring (the default)
/// seals nothing and opens only plain values. Its `Debug` shows the key ids,
/// never a key.
#[derive(Clone, Default)]
pub struct Keyring {
    /// Oldest first; the last one seals.
    keys: Arc<Vec<Key>>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

impl PartialEq for Keyring {
    fn eq(&self, other: &Self) -> bool {
        self.keys.len() == other.keys.len()
            && self
                .keys
                .iter()
                .zip(other.keys.iter())
                .all(|(a, b)| a.id == b.id && a.bytes == b.bytes)
    }
}

/// Whether `id` is a valid key id.
pub fn is_valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_KEY_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl Keyring {
    /// An empty keyring: nothing is sealed.
    pub fn new() -> Self {
        Self::default()
    }

    /// This keyring with `key` under `id` added as its newest: from now on
    /// it seals with it.
    pub fn with_key(self, id: &str, key: [u8; 32]) -> Result<Self, KeyringError> {
        if !is_valid_key_id(id) {
            return Err(KeyringError::InvalidId(id.to_string()));
        }
        if self.keys.iter().any(|k| k.id == id) {
            return Err(KeyringError::DuplicateId(id.to_string()));
        }
        let mut keys: Vec<Key> = self
            .keys
            .iter()
            .map(|k| Key {
                id: k.id.clone(),
                bytes: k.bytes,
                cipher: k.cipher.clone(),
            })
            .collect();
        keys.push(Key {
            id: id.to_string(),
            bytes: key,
            cipher: XChaCha20Poly1305::new(&key.into()),
        });
        Ok(Self {
            keys: Arc::new(keys),
        })
    }

    /// A keyring from a key file's text: one key a line, `id:base64` (32
    /// bytes, standard alphabet, padding optional), newest last; blank lines
    /// and lines starting with `#` are skipped. `source_name` names the
    /// text in errors.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, KeyringError> {
        Self::parse_entries(text.lines(), source_name)
    }

    fn parse_entries<'a>(
        entries: impl Iterator<Item = &'a str>,
        source_name: &str,
    ) -> Result<Self, KeyringError> {
        let mut ring = Self::new();
        for (i, line) in entries.enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| KeyringError::BadLine {
                source_name: source_name.to_string(),
                line: i + 1,
                reason: reason.to_string(),
            };
            let (id, encoded) = line
                .split_once(':')
                .ok_or_else(|| bad("no `:` between the id and the key"))?;
            let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(encoded.trim().trim_end_matches('='))
                .map_err(|_| bad("the key is not base64"))?;
            let key: [u8; KEY_LEN] = decoded
                .try_into()
                .map_err(|v: Vec<u8>| bad(&format!("the key is {} bytes, not 32", v.len())))?;
            ring = ring.with_key(id.trim(), key)?;
        }
        Ok(ring)
    }

    /// A keyring from the key file at `path` (see [`parse`](Self::parse)).
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, KeyringError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| KeyringError::Unreadable {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The keyring the environment gives: the key file named by
    /// `GAFFER_KEY_FILE`, or the keys in `GAFFER_KEYS` (entries separated
    /// by newlines, spaces or commas); `None` when neither is set.
    pub fn from_env() -> Result<Option<Self>, KeyringError> {
        let file = std::env::var_os(KEY_FILE_ENV).filter(|v| !v.is_empty());
        let keys = std::env::var(KEYS_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty());
        match (file, keys) {
            (Some(_), Some(_)) => Err(KeyringError::BothSet),
            (Some(path), None) => Self::from_file(path).map(Some),
            (None, Some(keys)) => Self::parse_entries(
                keys.split(|c: char| c == ',' || c.is_whitespace()),
                KEYS_ENV,
            )
            .map(Some),
            (None, None) => Ok(None),
        }
    }

    /// A new random key and its key file line, `id:base64`.
    pub fn generate_line(id: &str) -> Result<String, KeyringError> {
        if !is_valid_key_id(id) {
            return Err(KeyringError::InvalidId(id.to_string()));
        }
        let key = XChaCha20Poly1305::generate_key(&mut OsRng);
        Ok(format!(
            "{id}:{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        ))
    }

    /// Whether it holds no key (then nothing is sealed).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Its key ids, oldest first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.id.as_str())
    }

    /// The id of the key that seals (the newest), if any.
    pub fn newest_id(&self) -> Option<&str> {
        self.keys.last().map(|k| k.id.as_str())
    }

    /// Whether it holds a key of this id.
    pub fn holds(&self, id: &str) -> bool {
        self.keys.iter().any(|k| k.id == id)
    }

    fn key(&self, id: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// `plain` sealed under the newest key; with no key, `plain` as it is.
    pub fn seal(&self, plain: &[u8]) -> Result<Vec<u8>, SealError> {
        match self.keys.last() {
            None => Ok(plain.to_vec()),
            Some(key) => seal_with(key, plain),
        }
    }

    /// Like [`seal`](Self::seal), taking the bytes (no copy when nothing is
    /// sealed).
    pub fn seal_vec(&self, plain: Vec<u8>) -> Result<Vec<u8>, SealError> {
        match self.keys.last() {
            None => Ok(plain),
            Some(key) => seal_with(key, &plain),
        }
    }

    /// `text` sealed as a text (see the module's docs); with no key, as it is.
    pub fn seal_text(&self, text: &str) -> Result<String, SealError> {
        match self.keys.last() {
            None => Ok(text.to_string()),
            Some(key) => {
                let sealed = seal_with(key, text.as_bytes())?;
                Ok(format!(
                    "{SEALED_TEXT_PREFIX}{}",
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed)
                ))
            }
        }
    }

    /// The plain bytes of a stored value: a plain value as it is, a sealed
    /// one opened with the key it names.
    pub fn open<'a>(&self, stored: &'a [u8]) -> Result<Cow<'a, [u8]>, SealError> {
        match parse(stored)? {
            None => Ok(Cow::Borrowed(stored)),
            Some(sealed) => self.open_parsed(&sealed).map(Cow::Owned),
        }
    }

    /// Like [`open`](Self::open), taking the bytes (no copy for a plain value).
    pub fn open_vec(&self, stored: Vec<u8>) -> Result<Vec<u8>, SealError> {
        match parse(&stored)? {
            None => Ok(stored),
            Some(sealed) => self.open_parsed(&sealed),
        }
    }

    /// The plain text of a stored text: a plain text as it is, a sealed one
    /// opened.
    pub fn open_text<'a>(&self, stored: &'a str) -> Result<Cow<'a, str>, SealError> {
        let Some(bytes) = sealed_text_bytes(stored)? else {
            return Ok(Cow::Borrowed(stored));
        };
        let Some(sealed) = parse(&bytes)? else {
            return Err(SealError::Malformed(
                "a sealed text holds no sealed value".into(),
            ));
        };
        let plain = self.open_parsed(&sealed)?;
        String::from_utf8(plain)
            .map(Cow::Owned)
            .map_err(|_| SealError::Malformed("a sealed text is not UTF-8".into()))
    }

    /// A stored value sealed under the newest key, when it is not: one
    /// under an older key opened and sealed again, a plain one sealed
    /// (`None`: already under the newest key, or no key to seal with).
    pub fn renew(&self, stored: &[u8]) -> Result<Option<Vec<u8>>, SealError> {
        let Some(newest) = self.newest_id() else {
            return Ok(None);
        };
        if sealed_under(stored) == Some(newest) {
            return Ok(None);
        }
        let plain = self.open(stored)?;
        self.seal(&plain).map(Some)
    }

    /// [`renew`](Self::renew) of a stored text.
    pub fn renew_text(&self, stored: &str) -> Result<Option<String>, SealError> {
        let Some(newest) = self.newest_id() else {
            return Ok(None);
        };
        if text_sealed_under(stored).as_deref() == Some(newest) {
            return Ok(None);
        }
        let plain = self.open_text(stored)?;
        self.seal_text(&plain).map(Some)
    }

    /// `stored` as a copy of it is written again: [`renewed`](Self::renew)
    /// when it can be, else as it is (sealed under a key this keyring does
    /// not hold: it stays for a keyring that does).
    pub fn renewed(&self, stored: Vec<u8>) -> Result<Vec<u8>, SealError> {
        match self.renew(&stored) {
            Ok(Some(renewed)) => Ok(renewed),
            Ok(None) | Err(SealError::UnknownKey { .. }) => Ok(stored),
            Err(e) => Err(e),
        }
    }

    fn open_parsed(&self, sealed: &Parsed<'_>) -> Result<Vec<u8>, SealError> {
        let key = self
            .key(sealed.key_id)
            .ok_or_else(|| SealError::UnknownKey {
                key_id: sealed.key_id.to_string(),
            })?;
        key.cipher
            .decrypt(
                XNonce::from_slice(sealed.nonce),
                Payload {
                    msg: sealed.ciphertext,
                    aad: sealed.header,
                },
            )
            .map_err(|_| SealError::WrongKey {
                key_id: key.id.clone(),
            })
    }

    /// The check value of key `id` (see [`EncryptionRecord`]).
    fn check_of(&self, id: &str) -> Result<Vec<u8>, SealError> {
        let key = self.key(id).ok_or_else(|| SealError::UnknownKey {
            key_id: id.to_string(),
        })?;
        seal_with(key, CHECK_PLAINTEXT)
    }
}

fn seal_with(key: &Key, plain: &[u8]) -> Result<Vec<u8>, SealError> {
    let mut nonce = XNonce::default();
    OsRng
        .try_fill_bytes(&mut nonce)
        .map_err(|e| SealError::Random(e.to_string()))?;
    // Checked: an id is at most 64 bytes.
    let id_len = u8::try_from(key.id.len()).unwrap_or(u8::MAX);
    let mut out = Vec::with_capacity(SEAL_OVERHEAD + key.id.len() + plain.len());
    out.extend_from_slice(&SEALED_MAGIC);
    out.push(id_len);
    out.extend_from_slice(key.id.as_bytes());
    let header_len = out.len();
    let ciphertext = key
        .cipher
        .encrypt(
            &nonce,
            Payload {
                msg: plain,
                aad: &out,
            },
        )
        .map_err(|_| SealError::Malformed("the value is too large to seal".into()))?;
    debug_assert_eq!(out.len(), header_len);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ciphertext);
    Ok(out)
}

/// A sealed value's parts.
struct Parsed<'a> {
    header: &'a [u8],
    key_id: &'a str,
    nonce: &'a [u8],
    ciphertext: &'a [u8],
}

/// A stored value's parts if it is sealed (`None`: plain).
fn parse(stored: &[u8]) -> Result<Option<Parsed<'_>>, SealError> {
    if !stored.starts_with(&SEALED_MAGIC[..3]) {
        return Ok(None);
    }
    let bad = |why: &str| Err(SealError::Malformed(why.to_string()));
    if stored.len() < SEALED_MAGIC.len() + 1 {
        return bad("it is cut short");
    }
    if stored[3] != SEALED_MAGIC[3] {
        return bad(&format!(
            "format version {} (this build reads {}): upgrade gaffer",
            stored[3], SEALED_MAGIC[3]
        ));
    }
    let id_len = usize::from(stored[4]);
    let id_end = SEALED_MAGIC.len() + 1 + id_len;
    if stored.len() < id_end + NONCE_LEN + TAG_LEN {
        return bad("it is cut short");
    }
    let key_id = match std::str::from_utf8(&stored[5..id_end]) {
        Ok(id) if is_valid_key_id(id) => id,
        _ => return bad("its key id is not valid"),
    };
    Ok(Some(Parsed {
        header: &stored[..id_end],
        key_id,
        nonce: &stored[id_end..id_end + NONCE_LEN],
        ciphertext: &stored[id_end + NONCE_LEN..],
    }))
}

/// The bytes of a sealed text (`None`: a plain text).
fn sealed_text_bytes(stored: &str) -> Result<Option<Vec<u8>>, SealError> {
    let Some(encoded) = stored.strip_prefix(SEALED_TEXT_PREFIX) else {
        return Ok(None);
    };
    match base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded) {
        Ok(bytes) if bytes.starts_with(&SEALED_MAGIC[..3]) => Ok(Some(bytes)),
        // A plain text that only starts like a sealed one.
        _ => Ok(None),
    }
}

/// The key id a stored value is sealed under (`None`: plain, or malformed).
pub fn sealed_under(stored: &[u8]) -> Option<&str> {
    parse(stored).ok().flatten().map(|p| p.key_id)
}

/// The key id a stored text is sealed under (`None`: plain, or malformed).
pub fn text_sealed_under(stored: &str) -> Option<String> {
    let bytes = sealed_text_bytes(stored).ok().flatten()?;
    sealed_under(&bytes).map(str::to_string)
}

/// Whether a stored value is sealed (it may still be malformed).
pub fn is_sealed(stored: &[u8]) -> bool {
    stored.starts_with(&SEALED_MAGIC[..3])
}

/// A stored value as a reader shows it: its plain bytes, or that it is
/// sealed under a key the reader does not hold (or that does not open it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown<T> {
    /// The plain value.
    Plain(T),
    /// Sealed: not opened with this keyring.
    Encrypted(SealError),
}

impl Keyring {
    /// `stored` as a reader shows it (see [`Shown`]).
    pub fn show(&self, stored: &[u8]) -> Shown<Vec<u8>> {
        match self.open(stored) {
            Ok(plain) => Shown::Plain(plain.into_owned()),
            Err(e) => Shown::Encrypted(e),
        }
    }

    /// A stored text as a reader shows it: the text, or `encrypted (key
    /// ID)` when this keyring cannot open it.
    pub fn show_text(&self, stored: &str) -> String {
        match self.open_text(stored) {
            Ok(plain) => plain.into_owned(),
            Err(e) => encrypted_label(&e),
        }
    }
}

/// How a reader names a value it cannot open: `encrypted (key ID)`.
pub fn encrypted_label(e: &SealError) -> String {
    match e {
        SealError::UnknownKey { key_id } => format!("encrypted (key {key_id})"),
        SealError::WrongKey { key_id } => format!("encrypted (key {key_id}: wrong key given)"),
        e => format!("encrypted ({e})"),
    }
}

/// The store's encryption record at [`keys::ENCRYPTION_KEY`](crate::keys::ENCRYPTION_KEY):
/// the keys values in the store may be sealed under, each with a check
/// value (a constant sealed under it). Written by an engine with a keyring
/// at its start; an engine, a client or the command refuses to start on
/// the store unless its keyring holds every key listed, and opens each
/// check value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct EncryptionRecord {
    /// Oldest first.
    pub keys: Vec<KeyEntry>,
}

/// One key of an [`EncryptionRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyEntry {
    /// The key id.
    pub id: String,
    /// A constant sealed under the key: opening it proves a keyring holds
    /// the same key under that id.
    #[serde(with = "serde_bytes")]
    pub check: Vec<u8>,
}

impl EncryptionRecord {
    /// Check `keyring` against the record: every key listed must be held
    /// and open its check value. `Err` names the first key that is not.
    pub fn check(&self, keyring: &Keyring) -> Result<(), SealError> {
        for entry in &self.keys {
            if !keyring.holds(&entry.id) {
                return Err(SealError::UnknownKey {
                    key_id: entry.id.clone(),
                });
            }
            match keyring.open(&entry.check) {
                Ok(plain) if plain.as_ref() == CHECK_PLAINTEXT => {}
                Ok(_) => {
                    return Err(SealError::Malformed(format!(
                        "the check value of key `{}` is not sealed",
                        entry.id
                    )));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The record with `keyring`'s newest key added, if it is not listed
    /// (`None`: nothing to add).
    pub fn with_newest(&self, keyring: &Keyring) -> Result<Option<Self>, SealError> {
        let Some(newest) = keyring.newest_id() else {
            return Ok(None);
        };
        if self.keys.iter().any(|k| k.id == newest) {
            return Ok(None);
        }
        let mut next = self.clone();
        next.keys.push(KeyEntry {
            id: newest.to_string(),
            check: keyring.check_of(newest)?,
        });
        Ok(Some(next))
    }

    /// The record listing only `keyring`'s newest key (after a rekey that
    /// left no value under another).
    pub fn only_newest(keyring: &Keyring) -> Result<Self, SealError> {
        let mut keys = Vec::new();
        if let Some(newest) = keyring.newest_id() {
            keys.push(KeyEntry {
                id: newest.to_string(),
                check: keyring.check_of(newest)?,
            });
        }
        Ok(Self { keys })
    }

    /// Its key ids, oldest first.
    pub fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(ids: &[(&str, u8)]) -> Keyring {
        let mut r = Keyring::new();
        for (id, b) in ids {
            r = r.with_key(id, [*b; 32]).unwrap();
        }
        r
    }

    #[test]
    fn an_empty_keyring_stores_values_as_they_are() {
        let r = Keyring::new();
        assert_eq!(r.seal(b"\x81\xa1a\x01").unwrap(), b"\x81\xa1a\x01");
        assert_eq!(r.seal_text("boom").unwrap(), "boom");
        assert_eq!(r.open(b"plain").unwrap().as_ref(), b"plain");
    }

    #[test]
    fn a_sealed_value_opens_with_its_key_and_hides_the_plain_bytes() {
        let r = ring(&[("k1", 1)]);
        let sealed = r.seal(b"secret marker").unwrap();
        assert!(sealed.starts_with(&SEALED_MAGIC));
        assert_eq!(sealed_under(&sealed), Some("k1"));
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(sealed.len(), b"secret marker".len() + SEAL_OVERHEAD + 2);
        assert_eq!(r.open(&sealed).unwrap().as_ref(), b"secret marker");
        // A fresh nonce each time.
        assert_ne!(r.seal(b"secret marker").unwrap(), sealed);
        let text = r.seal_text("an error with a secret").unwrap();
        assert!(text.starts_with(SEALED_TEXT_PREFIX) && !text.contains("secret"));
        assert_eq!(text_sealed_under(&text).as_deref(), Some("k1"));
        assert_eq!(r.open_text(&text).unwrap(), "an error with a secret");
    }

    #[test]
    fn keys_rotate_the_newest_seals_and_older_ones_still_open() {
        let old = ring(&[("k1", 1)]);
        let sealed_old = old.seal(b"v").unwrap();
        let both = ring(&[("k1", 1), ("k2", 2)]);
        let sealed_new = both.seal(b"v").unwrap();
        assert_eq!(sealed_under(&sealed_new), Some("k2"));
        assert_eq!(both.open(&sealed_old).unwrap().as_ref(), b"v");
        let resealed = both.renew(&sealed_old).unwrap().unwrap();
        assert_eq!(sealed_under(&resealed), Some("k2"));
        assert_eq!(both.open(&resealed).unwrap().as_ref(), b"v");
        assert_eq!(both.renew(&sealed_new).unwrap(), None);
        let sealed_plain = both.renew(b"plain").unwrap().unwrap();
        assert_eq!(sealed_under(&sealed_plain), Some("k2"));
        assert_eq!(Keyring::new().renew(b"plain").unwrap(), None);
        // A copy of a value under a key it lacks stays as it is.
        assert_eq!(old.renewed(sealed_new.clone()).unwrap(), sealed_new);
        assert_eq!(
            old.open(&sealed_new).unwrap_err(),
            SealError::UnknownKey {
                key_id: "k2".into()
            }
        );
    }

    #[test]
    fn a_wrong_key_a_changed_value_or_a_cut_one_is_a_typed_error() {
        let r = ring(&[("k1", 1)]);
        let sealed = r.seal(b"value").unwrap();
        let wrong = ring(&[("k1", 9)]);
        assert_eq!(
            wrong.open(&sealed).unwrap_err(),
            SealError::WrongKey {
                key_id: "k1".into()
            }
        );
        let mut changed = sealed.clone();
        *changed.last_mut().unwrap() ^= 1;
        assert!(matches!(r.open(&changed), Err(SealError::WrongKey { .. })));
        // The key id is authenticated: renaming it does not open.
        let other = ring(&[("k1", 1), ("k2", 1)]);
        let mut renamed = sealed.clone();
        renamed[6] = b'2';
        assert!(matches!(
            other.open(&renamed),
            Err(SealError::WrongKey { .. })
        ));
        // Cut anywhere past its magic: an error (two bytes or fewer are
        // not a sealed value's start, and pass as plain bytes).
        for cut in 3..sealed.len() {
            assert!(r.open(&sealed[..cut]).is_err(), "cut at {cut}");
        }
        assert!(matches!(
            r.open(&[0xC1, b'G', b'S', 9, 1, b'a']),
            Err(SealError::Malformed(_))
        ));
        // No MessagePack value starts with 0xC1: plain values pass as they are.
        assert_eq!(r.open(b"\xc1x").unwrap().as_ref(), b"\xc1x");
    }

    #[test]
    fn key_files_parse_newest_last_and_bad_lines_name_their_line() {
        let k = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let text = format!("# keys\n\nold:{k}\nnew:{}\n", k.trim_end_matches('='));
        let r = Keyring::parse(&text, "keys.txt").unwrap();
        assert_eq!(r.ids().collect::<Vec<_>>(), ["old", "new"]);
        assert_eq!(r.newest_id(), Some("new"));
        let err = Keyring::parse("a:AAAA\n", "f").unwrap_err();
        assert!(
            matches!(&err, KeyringError::BadLine { line: 1, reason, .. } if reason.contains("3 bytes")),
            "{err}"
        );
        assert!(matches!(
            Keyring::parse(&format!("x:{k}\nx:{k}"), "f"),
            Err(KeyringError::DuplicateId(_))
        ));
        assert!(matches!(
            Keyring::parse(&format!("a b:{k}"), "f"),
            Err(KeyringError::InvalidId(_))
        ));
        assert!(matches!(
            Keyring::parse("nocolon", "f"),
            Err(KeyringError::BadLine { line: 1, .. })
        ));
        let line = Keyring::generate_line("fresh").unwrap();
        assert_eq!(
            Keyring::parse(&line, "g").unwrap().newest_id(),
            Some("fresh")
        );
        // Debug never shows a key.
        assert!(!format!("{r:?}").contains(&k[..8]));
    }

    #[test]
    fn the_encryption_record_refuses_a_missing_or_wrong_key() {
        let r = ring(&[("k1", 1)]);
        let record = EncryptionRecord::default()
            .with_newest(&r)
            .unwrap()
            .unwrap();
        assert_eq!(record.ids(), ["k1"]);
        assert_eq!(record.with_newest(&r).unwrap(), None);
        record.check(&r).unwrap();
        assert_eq!(
            record.check(&Keyring::new()).unwrap_err(),
            SealError::UnknownKey {
                key_id: "k1".into()
            }
        );
        assert_eq!(
            record.check(&ring(&[("k1", 2)])).unwrap_err(),
            SealError::WrongKey {
                key_id: "k1".into()
            }
        );
        let rotated = ring(&[("k1", 1), ("k2", 2)]);
        let next = record.with_newest(&rotated).unwrap().unwrap();
        assert_eq!(next.ids(), ["k1", "k2"]);
        next.check(&rotated).unwrap();
        assert_eq!(
            next.check(&ring(&[("k2", 2)])).unwrap_err(),
            SealError::UnknownKey {
                key_id: "k1".into()
            }
        );
    }
}
