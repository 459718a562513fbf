//! An attempt that pauses its run, inside one attempt: a wait for a signal
//! that has not come (`JobContext::wait_signal`), a durable sleep
//! (`JobContext::sleep`) or a snooze (`JobContext::snooze`) suspends the
//! attempt; the worker, which runs the user's future and this suspension
//! side by side, drops the future and reports a `Verdict::Pause`. The
//! attempt ends there, holding no worker and spending no attempt; the
//! settlement puts the job back (see `exec::settle`), and the run starts
//! again from the top when the signal, the deadline or the delay comes.

use std::sync::{Arc, Mutex};

use crate::layout::records::{SleepRecord, WaitRecord};

/// Why an attempt ended without an outcome and without spending itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pause {
    /// A wait for a signal, until its deadline.
    Signal(WaitRecord),
    /// A durable sleep: the run starts again at its end, where this sleep
    /// (and every one before it) answers at once.
    Sleep(SleepRecord),
    /// A snooze: the run starts again from the top at `until_ms`. A run
    /// that already snoozed `limit` times fails instead, permanently.
    Snooze {
        /// When the job runs again, queue clock, epoch ms.
        until_ms: u64,
        /// The most snoozes its run may make (its type's
        /// `JobOptions::max_snoozes`, else `Settings::max_snoozes`).
        limit: u32,
    },
}

impl Pause {
    /// When the job runs again at the latest (epoch ms, queue clock).
    pub fn until_ms(&self) -> u64 {
        match self {
            Self::Signal(wait) => wait.until_ms,
            Self::Sleep(sleep) => sleep.until_ms,
            Self::Snooze { until_ms, .. } => *until_ms,
        }
    }

    /// What the run's history calls the claim it ended (`waited`, `slept`,
    /// `snoozed`).
    pub fn how(&self) -> &'static str {
        match self {
            Self::Signal(_) => "waited",
            Self::Sleep(_) => "slept",
            Self::Snooze { .. } => "snoozed",
        }
    }
}

/// The attempt's suspension point: set once by a pause, read by the worker.
///
/// Attempt-local, like `Effects`: a clone is handed to the user's code for
/// one delivery and read by the worker that runs it, never by an actor
/// (ARCHITECTURE.md, *Shared state*).
#[derive(Debug, Clone, Default)]
pub struct Suspend(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    pause: Mutex<Option<Pause>>,
    told: tokio::sync::Notify,
}

impl Suspend {
    /// Suspend the attempt for `pause`: the worker ends the attempt
    /// (dropping the future this is awaited in), so this never returns.
    /// The first pause of an attempt stands.
    pub async fn suspend(&self, pause: Pause) -> ! {
        {
            let mut slot = self.0.pause.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(pause);
        }
        self.0.told.notify_one();
        std::future::pending::<()>().await;
        unreachable!("a pending future never resolves")
    }

    /// Resolves once the attempt suspended, with its pause.
    pub(crate) async fn suspended(&self) -> Pause {
        loop {
            if let Some(pause) = self
                .0
                .pause
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return pause;
            }
            self.0.told.notified().await;
        }
    }
}
