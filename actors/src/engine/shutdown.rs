//! The shutdown sequence, run in a task of the supervisor's: drain every
//! pool at once (bounded by the grace period when there is one), fail the
//! callers still waiting, stop the children, and close the queue once its
//! last user lets go.

use std::sync::Arc;
use std::time::Duration;

use taquba::Queue;
use tracing::info;

pub use crate::events::ShutdownReport;
use crate::exec::pool::PoolRef;
use crate::jobs::waiters::WaitersRef;
use crate::services::SharedQueue;

/// Extra time a bounded shutdown gives settlements and the queue's close
/// beyond the grace period.
pub(crate) const SHUTDOWN_SLACK: Duration = Duration::from_secs(2);

/// How long an unbounded shutdown waits for the last short-lived user of the
/// queue to let go before dropping it unclosed.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// What the shutdown sequence works on, taken from the supervisor's state.
pub(crate) struct Closing {
    pub(crate) cell: ractor::ActorCell,
    pub(crate) pools: Vec<(String, PoolRef)>,
    pub(crate) waiters: WaitersRef,
    pub(crate) queue: Option<Arc<SharedQueue>>,
    pub(crate) queue_back: Option<tokio::sync::oneshot::Receiver<Queue>>,
    pub(crate) grace: Option<Duration>,
}

/// The shutdown sequence, in a task of its own: the supervisor goes on
/// answering messages (a job that asks it something while it drains is
/// answered), and ignores its children's exits from now on.
pub(crate) async fn shut_down(closing: Closing) -> ShutdownReport {
    let Closing {
        cell,
        pools,
        waiters,
        queue,
        queue_back,
        grace,
    } = closing;
    let mut report = ShutdownReport::default();
    // 1. Stop claiming and let running jobs finish and their settlements
    // commit. Every pool drains at once, so the grace period is one period.
    // With a grace period the whole shutdown is bounded: settlements stuck
    // behind an unavailable store are given up on (their jobs stay claimed in
    // the store and run again after the next open).
    let deadline = grace.map(|g| tokio::time::Instant::now() + g + SHUTDOWN_SLACK);
    let drains: Vec<_> = pools
        .into_iter()
        .map(|(t, pool)| tokio::spawn(async move { (t, pool.drain(grace).await) }))
        .collect();
    for drain in drains {
        let finished = match deadline {
            Some(d) => match tokio::time::timeout_at(d, drain).await {
                Ok(finished) => finished,
                Err(_) => {
                    report.problems.push(
                        "a pool was still settling at the deadline (is the store unavailable?); \
                         its jobs run again after the next open"
                            .into(),
                    );
                    continue;
                }
            },
            None => drain.await,
        };
        match finished {
            Ok((_, Ok(abandoned))) => report.abandoned += abandoned,
            Ok((t, Err(e))) => report.problems.push(format!("pool `{t}` drain: {e}")),
            Err(e) => report.problems.push(format!("pool drain task: {e}")),
        }
    }
    // 2. Fail callers still waiting, stop every child.
    waiters.fail_all();
    cell.stop_children_and_wait(Some("shutdown".into()), Some(Duration::from_secs(10)))
        .await;
    // 3. Close the queue once the last short-lived user of it lets go: it
    // comes back on `queue_back` when its last reference drops.
    drop(queue);
    if let Some(back) = queue_back {
        let until = deadline
            .unwrap_or_else(|| tokio::time::Instant::now() + RELEASE_WAIT)
            .max(tokio::time::Instant::now() + Duration::from_secs(1));
        match tokio::time::timeout_at(until, back).await {
            Ok(Ok(queue)) => {
                let closed = match deadline {
                    Some(_) => tokio::time::timeout(SHUTDOWN_SLACK, queue.close()).await,
                    None => Ok(queue.close().await),
                };
                match closed {
                    Ok(Ok(())) => report.queue_closed = true,
                    Ok(Err(e)) => report.problems.push(format!("queue close: {e}")),
                    Err(_) => report
                        .problems
                        .push("the queue did not close in time (is the store unavailable?)".into()),
                }
            }
            Ok(Err(_)) => report
                .problems
                .push("the queue was dropped without being closed".into()),
            Err(_) => report
                .problems
                .push("the queue was still in use at the deadline; dropped without close".into()),
        }
    }
    info!(?report, "engine shut down");
    report
}
