//! A job's wait for a signal, inside one attempt: `JobContext::wait_signal`
//! finds no signal and suspends the attempt; the worker, which runs the
//! user's future and this suspension side by side, drops the future and
//! reports a `Verdict::Wait`. The attempt ends there, holding no worker;
//! the settlement puts the job back to wait (see `exec::settle`), and the
//! run starts again from the top when the signal or the timeout comes.

use std::sync::{Arc, Mutex};

use crate::layout::records::WaitRecord;

/// The attempt's suspension point: set once by a wait, read by the worker.
///
/// Attempt-local, like `Effects`: a clone is handed to the user's code for
/// one delivery and read by the worker that runs it, never by an actor
/// (ARCHITECTURE.md, *Shared state*).
#[derive(Debug, Clone, Default)]
pub struct Suspend(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    wait: Mutex<Option<WaitRecord>>,
    told: tokio::sync::Notify,
}

impl Suspend {
    /// Suspend the attempt to wait for `wait`: the worker ends the attempt
    /// (dropping the future this is awaited in), so this never returns.
    pub async fn suspend(&self, wait: WaitRecord) -> ! {
        {
            let mut slot = self.0.wait.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(wait);
        }
        self.0.told.notify_one();
        std::future::pending::<()>().await;
        unreachable!("a pending future never resolves")
    }

    /// Resolves once the attempt suspended, with its wait.
    pub(crate) async fn suspended(&self) -> WaitRecord {
        loop {
            if let Some(wait) = self
                .0
                .wait
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return wait;
            }
            self.0.told.notified().await;
        }
    }
}
