//! Tasks an actor spawns, which tell it how they ended, a panic included.
//!
//! An actor never awaits inside its `handle`: work that waits (a retention
//! pass, a check of periodic jobs) runs in a task, and the actor learns the
//! result by message. A plain `tokio::spawn` whose task panics never sends
//! that message, and the actor waits for it forever (a pass "in flight" for
//! good). [`spawn_reported`] runs the work in one task that always reports:
//! the work's output, its panic (caught where the work is polled), or, when
//! the task is aborted or dropped before it ended, that it was (a guard the
//! task owns reports as it is dropped). The returned handle aborts the work
//! (at its next await), which also reports. Used by the engine's actors
//! (each settlement and each late waiter's read is one: one task each, not
//! a second one awaiting the first) and by `gaffer`'s shard keepers.

use std::future::Future;

use futures_util::FutureExt;

/// How a task ended without its output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ended {
    /// It panicked; the panic's message.
    #[error("the task panicked: {0}")]
    Panicked(String),
    /// It was aborted (its owner stopped).
    #[error("the task was aborted")]
    Aborted,
}

/// Spawn `work`; `report` gets its output, or how it ended without one. The
/// handle aborts the work.
pub fn spawn_reported<T: Send + 'static>(
    work: impl Future<Output = T> + Send + 'static,
    report: impl FnOnce(Result<T, Ended>) + Send + 'static,
) -> tokio::task::AbortHandle {
    let mut report = Report(Some(report), std::marker::PhantomData);
    let task = tokio::spawn(async move {
        let ended = match std::panic::AssertUnwindSafe(work).catch_unwind().await {
            Ok(output) => Ok(output),
            Err(payload) => Err(Ended::Panicked(panic_message(payload))),
        };
        report.send(ended);
    });
    task.abort_handle()
}

/// A task's report, sent once: with how the work ended, or, if the task is
/// dropped first (aborted, or its runtime stopped), as `Aborted`.
struct Report<T, F: FnOnce(Result<T, Ended>)>(Option<F>, std::marker::PhantomData<fn(T)>);

impl<T, F: FnOnce(Result<T, Ended>)> Report<T, F> {
    fn send(&mut self, ended: Result<T, Ended>) {
        if let Some(report) = self.0.take() {
            report(ended);
        }
    }
}

impl<T, F: FnOnce(Result<T, Ended>)> Drop for Report<T, F> {
    fn drop(&mut self) {
        self.send(Err(Ended::Aborted));
    }
}

/// The text a panic carried (`panic!("…")`'s message, when it has one).
pub fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ended<T: Send + 'static>(
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, Ended> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        spawn_reported(work, move |r| {
            let _ = tx.send(r);
        });
        rx.await.expect("a report always comes")
    }

    #[tokio::test]
    async fn the_output_a_panic_or_an_abort_is_reported() {
        assert_eq!(ended(async { 7 }).await, Ok(7));
        assert_eq!(
            ended(async { panic!("bang") }).await,
            Err::<(), _>(Ended::Panicked("bang".into()))
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        let abort = spawn_reported(std::future::pending::<()>(), move |r| {
            let _ = tx.send(r);
        });
        abort.abort();
        assert_eq!(rx.await.unwrap(), Err(Ended::Aborted));
    }
}
