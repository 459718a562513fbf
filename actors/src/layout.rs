//! The durable layout and its read side: every key, path and queue name
//! ([`keys`]), the records and their encoding ([`records`]), what a store's
//! records say, read through any `QueueView` with no actor and no writer
//! ([`inspect`]: the engine on its live view, the `gaffer` command and the
//! dashboard on a `QueueReader`'s), a store by URL ([`store`]: the one type every way in names a store with), and
//! the keyring every user value is sealed and opened with ([`sealed`]).
//!
//! Nothing here names an actor: this is what a process reads a store with.

pub mod inspect;
pub mod keys;
pub mod records;
pub mod sealed;
pub mod store;
