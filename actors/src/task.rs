//! Tasks an actor spawns, which tell it how they ended, a panic included.
//!
//! An actor never awaits inside its `handle`: work that waits (a retention
//! pass, a check of periodic jobs) runs in a task, and the actor learns the
//! result by message. A plain `tokio::spawn` whose task panics never sends
//! that message, and the actor waits for it forever (a pass "in flight" for
//! good). [`spawn_reported`] runs the work in one task and awaits it from a
//! second, which always reports: the work's output, or how it ended without
//! one. The returned handle aborts the work (at its next await), which also
//! reports. Used by the engine's actors and by `gaffer`'s shard keepers.

use std::future::Future;

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
    let task = tokio::spawn(work);
    let abort = task.abort_handle();
    tokio::spawn(async move {
        let ended = match task.await {
            Ok(output) => Ok(output),
            Err(e) if e.is_panic() => Err(Ended::Panicked(panic_message(e.into_panic()))),
            Err(_) => Err(Ended::Aborted),
        };
        report(ended);
    });
    abort
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
