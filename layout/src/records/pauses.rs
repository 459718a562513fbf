//! What a run's pauses and a debounce burst keep: the records a wait, a
//! sleep and an open burst write (see `RunRecord::wait`, `RunRecord::sleep`
//! and `keys::debounce_key`).

use serde::{Deserialize, Serialize};

/// The open burst of a debounce key at [`keys::debounce_key`](crate::keys::debounce_key): the run the
/// burst's submissions are, and what it will run (see `jobs::debounce`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebounceRecord {
    /// The burst's run: every submission of the burst answers its id.
    pub run_id: String,
    /// Its timer's queue job (on [`keys::debounce_queue`](crate::keys::debounce_queue)), which its run
    /// record names until the burst closes.
    pub timer_id: String,
    /// The burst's first submission, queue clock, epoch ms.
    pub first_ms: u64,
    /// Its latest submission, epoch ms.
    pub last_ms: u64,
    /// When the burst closes and its run starts, epoch ms: its latest
    /// submission plus the window, at most `until_ms`.
    pub due_ms: u64,
    /// The latest it closes: the first submission plus the max delay.
    pub until_ms: u64,
    /// Submissions in the burst.
    pub submits: u32,
    /// What the run is made of: the latest submission (the first, for a
    /// leading debounce), its payload sealed under the engine's keyring.
    pub request: crate::request::SubmitRequest,
}

/// A run's durable sleep (`JobContext::sleep`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SleepRecord {
    /// Which of the run's sleeps, in the order it makes them (0 first).
    pub index: u32,
    /// When it ends, queue clock, epoch ms.
    pub until_ms: u64,
    /// When it began, epoch ms.
    pub since_ms: u64,
}

/// A job's wait for a signal (`JobContext::wait_signal`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRecord {
    /// The signal's name.
    pub name: String,
    /// When the wait times out, queue clock, epoch ms: the job runs again
    /// then without the signal, and the wait answers a timeout.
    pub until_ms: u64,
    /// When the wait began, epoch ms.
    pub since_ms: u64,
}
