//! Waiting on the engine's events ([`gaffer::Engine::subscribe`]), bounded.

use std::time::Duration;

use gaffer::EngineEvent;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;

/// Receive events until one matches `pred`; panics after `limit` of
/// wall/virtual time. A lagging receiver skips what it missed.
pub async fn wait_event(
    rx: &mut Receiver<EngineEvent>,
    limit: Duration,
    mut pred: impl FnMut(&EngineEvent) -> bool,
) -> EngineEvent {
    tokio::time::timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(ev) if pred(&ev) => return ev,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {}
                Err(e) => panic!("event channel closed: {e}"),
            }
        }
    })
    .await
    .expect("the expected event did not arrive in time")
}

/// Receive events (keeping them all) until `done` says the collection is
/// complete; panics after `limit` of wall/virtual time, or if the receiver
/// lagged (an event of the collection may be lost).
pub async fn collect_events_until(
    rx: &mut Receiver<EngineEvent>,
    limit: Duration,
    mut done: impl FnMut(&[EngineEvent]) -> bool,
) -> Vec<EngineEvent> {
    let mut seen = Vec::new();
    let outcome = tokio::time::timeout(limit, async {
        loop {
            if done(&seen) {
                return;
            }
            match rx.recv().await {
                Ok(ev) => seen.push(ev),
                Err(RecvError::Lagged(n)) => {
                    panic!("event subscriber lagged by {n} events")
                }
                Err(e) => panic!("event channel closed: {e}"),
            }
        }
    })
    .await;
    if outcome.is_err() {
        panic!("the expected events did not arrive in time; saw {seen:#?}");
    }
    seen
}
