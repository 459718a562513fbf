//! Shared test helpers: engines on the in-memory store (paused-time friendly)
//! or a local directory, a mock clock, and event waiting without sleeps.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use gaffer::taquba::{MockClock, OpenOptions, QueueConfig};
use gaffer::{EngineBuilder, EngineEvent};

/// A fixed start time for mock clocks (2026-01-01T00:00:00Z).
pub const T0_MS: u64 = 1_767_225_600_000;

/// A mock clock at [`T0_MS`].
pub fn mock_clock() -> Arc<MockClock> {
    Arc::new(MockClock::new(T0_MS))
}

/// Queue options for tests: a 1 ms flush, zero retry backoff (retries are
/// immediate), the given clock.
pub fn test_options(clock: Arc<MockClock>) -> OpenOptions {
    OpenOptions::default()
        .flush_interval(Duration::from_millis(1))
        .clock(clock)
        .default_queue_config(QueueConfig::default().retry_backoff_base(Duration::ZERO))
}

/// A builder on the in-memory store with [`test_options`].
pub fn memory_builder(clock: Arc<MockClock>) -> EngineBuilder {
    gaffer::Engine::builder()
        .in_memory()
        .open_options(test_options(clock))
        .poll_interval(Duration::from_millis(20))
}

/// A builder on a local directory with [`test_options`].
pub fn disk_builder(dir: &std::path::Path, clock: Arc<MockClock>) -> EngineBuilder {
    gaffer::Engine::builder()
        .local_dir(dir)
        .open_options(test_options(clock))
        .poll_interval(Duration::from_millis(20))
}

/// Receive events until one matches `pred`; panics after `limit` of wall/virtual time.
pub async fn wait_event(
    rx: &mut tokio::sync::broadcast::Receiver<EngineEvent>,
    limit: Duration,
    mut pred: impl FnMut(&EngineEvent) -> bool,
) -> EngineEvent {
    tokio::time::timeout(limit, async {
        loop {
            match rx.recv().await {
                Ok(ev) if pred(&ev) => return ev,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("event channel closed: {e}"),
            }
        }
    })
    .await
    .expect("the expected event did not arrive in time")
}
