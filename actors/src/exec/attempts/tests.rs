use std::time::Duration;

use super::*;

/// A 60 s episode window, a one-hour memory.
const EPISODES: Episodes = Episodes {
    window_ms: 60_000,
    memory_ms: 3_600_000,
};

fn entry(outcome: AttemptOutcome, at: u64, error: Option<&str>) -> JobAttempt {
    JobAttempt {
        attempt: 0,
        claimed_at: None,
        recorded_at: at,
        outcome,
        error: error.map(str::to_string),
    }
}

/// A claimed job enqueued as gaffer does (queue limit out of reach), with
/// `limit` in its header if given.
async fn a_claim(limit: Option<&str>) -> (taquba::Queue, Claim) {
    let store = std::sync::Arc::new(taquba::object_store::memory::InMemory::new());
    let queue = taquba::Queue::open(store, "q").await.unwrap();
    let mut headers = std::collections::HashMap::new();
    if let Some(l) = limit {
        headers.insert(keys::HEADER_ATTEMPTS.to_string(), l.to_string());
    }
    queue
        .enqueue_with(
            "w",
            b"x".to_vec(),
            taquba::EnqueueOptions::default()
                .headers(headers)
                .max_attempts(keys::QUEUE_ATTEMPTS),
        )
        .await
        .unwrap();
    let claim = queue
        .claim("w", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    (queue, claim)
}

#[tokio::test]
async fn interruptions_and_releases_are_free_failures_and_expiries_count() {
    let (queue, claim) = a_claim(Some("3")).await;
    use AttemptOutcome::*;
    let history = [
        entry(Interrupted, 1_000, None),
        entry(Retried, 2_000, Some("boom")),
        entry(Retried, 3_000, Some("gaffer-released: grace over")),
        entry(Interrupted, 200_000, None),
        entry(LeaseExpired, 300_000, None),
    ];
    let a = count(&claim, 7, &Carried::default(), &history, EPISODES, 300_000);
    assert_eq!(
        a,
        Attempts {
            number: 3,
            limit: 3,
            interrupted: 2,
            episodes: 2,
            episode_starts: vec![1_000, 200_000],
        }
    );
    assert!(a.is_last());
    assert_eq!(a.fate(&Settings::default()), Fate::Run);
    queue.close().await.unwrap();
}

#[tokio::test]
async fn interruptions_within_a_window_are_one_episode_and_enough_episodes_poison() {
    let (queue, claim) = a_claim(None).await;
    use AttemptOutcome::*;
    // Fifty kills in a minute: one episode.
    let burst: Vec<_> = (0..50)
        .map(|i| entry(Interrupted, i * 1_000, None))
        .collect();
    let a = count(&claim, 7, &Carried::default(), &burst, EPISODES, 60_000);
    assert_eq!(
        (a.number, a.limit, a.interrupted, a.episodes),
        (1, 7, 50, 1)
    );
    assert_eq!(a.fate(&Settings::default()), Fate::Run);
    // Three episodes a minute or more apart: a poison pill.
    let spread: Vec<_> = (0..3)
        .map(|i| entry(Interrupted, i * 60_000, None))
        .collect();
    let a = count(&claim, 7, &Carried::default(), &spread, EPISODES, 120_000);
    assert_eq!(a.episodes, 3);
    assert!(
        matches!(a.fate(&Settings::default()), Fate::Poisoned(m) if m.contains("3 separate episodes"))
    );
    queue.close().await.unwrap();
}

#[tokio::test]
async fn the_limit_is_the_header_then_the_queue_default_then_the_records() {
    let (queue, with_header) = a_claim(Some("5")).await;
    assert_eq!(limit_of(&with_header, 3), 5);
    let (queue2, default) = a_claim(None).await;
    assert_eq!(limit_of(&default, 3), 3, "a gaffer job without a header");
    // A job enqueued by other means keeps the limit taquba holds for it.
    queue2
        .enqueue_with(
            "v",
            b"y".to_vec(),
            taquba::EnqueueOptions::default().max_attempts(4),
        )
        .await
        .unwrap();
    let foreign = queue2
        .claim("v", Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(limit_of(&foreign, 3), 4);
    queue.close().await.unwrap();
    queue2.close().await.unwrap();
}

#[tokio::test]
async fn a_revival_restarts_the_count_and_spent_attempts_exhaust() {
    let (queue, claim) = a_claim(Some("2")).await;
    use AttemptOutcome::*;
    let history = [
        entry(Retried, 1, Some("a")),
        entry(DeadLettered, 2, Some("b")),
        entry(Requeued, 3, None),
        entry(LeaseExpired, 4, None),
        entry(LeaseExpired, 5, None),
    ];
    let a = count(&claim, 7, &Carried::default(), &history, EPISODES, 5);
    assert_eq!((a.number, a.limit), (3, 2));
    assert!(matches!(a.fate(&Settings::default()), Fate::Exhausted(_)));
    queue.close().await.unwrap();
}

#[tokio::test]
async fn episodes_are_forgotten_after_the_memory_so_unrelated_crashes_hours_apart_never_poison() {
    let (queue, claim) = a_claim(None).await;
    use AttemptOutcome::*;
    let hour = 3_600_000;
    // Three episodes, each an hour and a half after the last: at the
    // fourth claim only the newest is remembered.
    let spread: Vec<_> = (0..3)
        .map(|i| entry(Interrupted, i * 90 * 60_000, None))
        .collect();
    let now = 2 * 90 * 60_000 + 1_000;
    let a = count(&claim, 7, &Carried::default(), &spread, EPISODES, now);
    assert_eq!((a.interrupted, a.episodes), (3, 1));
    assert_eq!(a.fate(&Settings::default()), Fate::Run);
    // The same three within the hour poison (claimed again 45 minutes
    // after the first: all three remembered; an hour after it, the
    // first is forgotten).
    let close: Vec<_> = (0..3)
        .map(|i| entry(Interrupted, i * 20 * 60_000, None))
        .collect();
    let a = count(&claim, 7, &Carried::default(), &close, EPISODES, hour);
    assert_eq!(a.episodes, 2);
    let a = count(
        &claim,
        7,
        &Carried::default(),
        &close,
        EPISODES,
        45 * 60_000,
    );
    assert_eq!(a.episodes, 3);
    assert!(matches!(a.fate(&Settings::default()), Fate::Poisoned(_)));
    queue.close().await.unwrap();
}

#[tokio::test]
async fn what_a_job_put_back_carries_is_counted_with_its_own_history() {
    let (queue, claim) = a_claim(Some("5")).await;
    use AttemptOutcome::*;
    // Two real attempts and one episode before it was put back.
    let carried = Carried {
        tried: 2,
        interrupted: 4,
        episodes: vec![10_000],
    };
    assert_eq!(Carried::parse(&carried.encode()), Some(carried.clone()));
    assert_eq!(
        Carried::parse("1:0:"),
        Some(Carried {
            tried: 1,
            ..Default::default()
        })
    );
    assert_eq!(Carried::parse("x"), None);
    // Since: one interruption (a new episode) and one expired lease.
    let history = [
        entry(Interrupted, 100_000, None),
        entry(LeaseExpired, 110_000, None),
    ];
    let a = count(&claim, 7, &carried, &history, EPISODES, 120_000);
    assert_eq!((a.number, a.limit, a.interrupted, a.episodes), (4, 5, 5, 2));
    // A failure of this attempt carries one more; a release does not.
    assert_eq!(carried_after(&a, true).tried, 4);
    assert_eq!(carried_after(&a, false).tried, 3);
    assert_eq!(carried_after(&a, false).episodes, vec![10_000, 100_000]);
    queue.close().await.unwrap();
}

/// `gaffer.past` is a header: a store written by someone else may carry
/// counts at `u32::MAX`. They saturate instead of overflowing (a panic in
/// a debug build, a wrapped count in a release one).
#[tokio::test]
async fn counts_carried_at_their_maximum_saturate_instead_of_overflowing() {
    let (queue, claim) = a_claim(Some("5")).await;
    use AttemptOutcome::*;
    let carried = Carried::parse(&format!("{0}:{0}:", u32::MAX)).unwrap();
    let history = [
        entry(Interrupted, 100_000, None),
        entry(LeaseExpired, 110_000, None),
        entry(Retried, 115_000, Some("failed")),
    ];
    let a = count(&claim, 7, &carried, &history, EPISODES, 120_000);
    assert_eq!((a.number, a.interrupted), (u32::MAX, u32::MAX));
    assert_eq!(carried_after(&a, true).tried, u32::MAX);
    assert_eq!(carried_after(&a, false).tried, u32::MAX - 1);
    queue.close().await.unwrap();
}

#[test]
fn gaffers_backoff_doubles_on_its_own_count_and_stops_at_the_cap() {
    let config = taquba::QueueConfig::default()
        .retry_backoff_base(Duration::from_secs(1))
        .retry_backoff_max(Duration::from_secs(300));
    let secs: Vec<u64> = [1, 2, 3, 9, 10, 40]
        .iter()
        .map(|n| backoff(&config, *n).as_secs())
        .collect();
    assert_eq!(secs, vec![1, 2, 4, 256, 300, 300]);
    let zero = config.retry_backoff_base(Duration::ZERO);
    assert_eq!(backoff(&zero, 5), Duration::ZERO);
}
