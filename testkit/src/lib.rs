//! The one test kit of gaffer's own tests: the engine's (`tests/`), the
//! dashboard's (`web/tests/`) and the command's (`cli/tests/`). Each of those
//! directories keeps, in its `common` module, only what its own tests share,
//! and re-exports the rest from here.
//!
//! - Waits: [`LIMIT`] and [`POLL`], [`within`], [`eventually`] (and its
//!   kin), never a bare sleep that races what it waits for.
//! - [`events`]: waiting on the engine's events.
//! - [`process`]: child processes (this test binary's ignored tests, the
//!   built examples), killed when dropped, and their logs.
//! - [`command`]: the built `gaffer` command, run with a store's place.
//! - [`http`]: one HTTP request to a served dashboard or endpoint.
//! - [`jobs`]: the test jobs more than one test file runs.
//! - [`s3`]: moto's S3 server on loopback.
//! - [`etcd`]: an etcd cluster on loopback (Debian's `etcd-server`).
//!
//! A dev-dependency only (`publish = false`): nothing here is API.

pub mod command;
pub mod etcd;
pub mod events;
pub mod http;
pub mod jobs;
pub mod process;
pub mod s3;

use std::fmt::Display;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use gaffer::taquba::MockClock;

/// Upper bound for anything a test waits on ([`within`], [`eventually`]):
/// tokio time, so virtual under paused time, real otherwise.
///
/// One minute, for every test directory (the engine's tests had 60 s, the
/// dashboard's and the command's 30 s). The limit only turns a hang into a
/// failure, it claims nothing about speed: a passing test never waits it
/// out, so a longer one costs nothing but a later report of a real hang.
/// A shorter one is a flake on a loaded machine (CI runs about fifty test
/// binaries on two cores, several spawning processes), and under paused
/// time some tests legitimately wait tens of virtual seconds (a lease
/// expiring, a retry backoff) inside it.
pub const LIMIT: Duration = Duration::from_secs(60);

/// How often [`eventually`] and its kin look again: 5 ms of tokio time.
///
/// The engine's tests, most of them under paused time, polled at 5 ms; the
/// dashboard's at 20 ms. Under paused time the poll is how far virtual time
/// moves while a test waits for a state no event announces, so the engine's
/// tests keep the timelines they were written against; for the real-time
/// tests a shorter poll only sees the state sooner (their checks, an HTTP
/// request or a run of the command, take longer than the poll).
pub const POLL: Duration = Duration::from_millis(5);

/// Await `f`; panics after [`LIMIT`] instead of hanging the test.
pub async fn within<F: IntoFuture>(f: F) -> F::Output {
    within_for(LIMIT, f).await
}

/// Await `f`; panics after `limit` instead of hanging the test.
pub async fn within_for<F: IntoFuture>(limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

/// Poll `check` every [`POLL`] until it gives a value: `Ok`, or the last
/// `Err` seen (`None`: no poll ended) once `limit` has passed.
async fn poll<T, E>(
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> Result<T, Option<E>> {
    let mut last = None;
    let polled = tokio::time::timeout(limit, async {
        loop {
            match check().await {
                Ok(value) => return value,
                Err(seen) => last = Some(seen),
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    polled.map_err(|_| last)
}

/// Poll `check` every [`POLL`] until it says yes; panics, naming `what`, if
/// it has not said so within `limit`. For states that no event announces;
/// wait for an event with [`events::wait_event`].
pub async fn eventually(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let polled = poll(limit, async || if check().await { Ok(()) } else { Err(()) }).await;
    if polled.is_err() {
        panic!("timed out after {limit:?} waiting until {what}");
    }
}

/// [`eventually`], and a timeout's panic also says `context()` (the child
/// processes' logs, say: [`process::child_logs`]).
pub async fn eventually_or(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    let polled = poll(limit, async || if check().await { Ok(()) } else { Err(()) }).await;
    if polled.is_err() {
        panic!(
            "timed out after {limit:?} waiting until {what}; {}",
            context()
        );
    }
}

/// [`eventually`] for a check that gives a value when it is done: `Ok` ends
/// the wait with it; `Err` says what this poll saw instead, and a timeout's
/// panic says the last one.
pub async fn eventually_ok<T, E: Display>(
    what: &str,
    limit: Duration,
    check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    match poll(limit, check).await {
        Ok(value) => value,
        Err(Some(seen)) => panic!("timed out after {limit:?} waiting until {what}; last: {seen}"),
        Err(None) => panic!("timed out after {limit:?} waiting until {what} (no check ended)"),
    }
}

/// [`eventually`] for a test thread without a runtime (the parent of child
/// processes): polls `check` every [`POLL`] of real time until it says yes;
/// panics, naming `what`, if it has not said so within `limit`.
pub fn eventually_blocking(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !check() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// A fixed start time for mock clocks (2026-01-01T00:00:00Z); the layout-2
/// fixture was written at it.
pub const T0_MS: u64 = 1_767_225_600_000;

/// A mock clock at [`T0_MS`].
pub fn mock_clock() -> Arc<MockClock> {
    Arc::new(MockClock::new(T0_MS))
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_polls_until_the_check_says_yes() {
        let polls = Cell::new(0);
        eventually("the third poll", LIMIT, async || {
            polls.set(polls.get() + 1);
            polls.get() == 3
        })
        .await;
        assert_eq!(polls.get(), 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting until never; last: poll")]
    async fn eventually_ok_gives_up_at_the_limit_saying_what_it_saw_last() {
        let start = tokio::time::Instant::now();
        let polls = Cell::new(0);
        let _: () = eventually_ok("never", LIMIT, async || {
            polls.set(polls.get() + 1);
            assert!(start.elapsed() <= LIMIT + POLL, "polled past the limit");
            Err(format!("poll {}", polls.get()))
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_ok_answers_the_value_of_the_check() {
        let polls = Cell::new(0);
        let value = eventually_ok("a value", LIMIT, async || {
            polls.set(polls.get() + 1);
            if polls.get() == 2 {
                Ok(42)
            } else {
                Err("not yet")
            }
        })
        .await;
        assert_eq!(value, 42);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "did not finish within 60s")]
    async fn within_panics_instead_of_hanging() {
        within(std::future::pending::<()>()).await;
    }

    #[test]
    #[should_panic(expected = "waiting until never")]
    fn eventually_blocking_gives_up_at_its_limit() {
        eventually_blocking("never", Duration::from_millis(20), || false);
    }
}
