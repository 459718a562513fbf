//! The restart policy of a pool's workers, as a small pure type.
//!
//! A panic is a bug in one job, not proof that the type is broken: the
//! crashed worker's job is retried like any failed attempt, and the slot gets
//! a fresh worker **at once**, so a type whose jobs panic now and then keeps
//! its capacity. Panics are taken as systemic only when more attempts than
//! the type has workers have panicked in a row (no attempt ended without a
//! panic between them): from then on each crashed worker restarts after
//! `base · 2^(panics in a row − workers − 1)`, capped at
//! `restart_backoff_max`, and the first attempt that ends without a panic
//! ends the streak (the pool restarts its waiting workers then). A crash
//! loop still pauses the type: past `max_restarts` crashes within
//! `restart_window` it is paused, whatever the streak.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::settings::Settings;

/// What to do after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterCrash {
    /// Restart the worker after this delay (zero: at once).
    Restart(Duration),
    /// The type crashed too often: pause it (`recent` crashes in the window).
    Pause { recent: usize },
}

/// Recent crashes of one pool's workers.
#[derive(Debug)]
pub(crate) struct Restarts {
    times: VecDeque<Instant>,
    /// Attempts that panicked since the last one that ended without a panic.
    in_a_row: usize,
    max_restarts: usize,
    window: Duration,
    base: Duration,
    max_delay: Duration,
}

impl Restarts {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            times: VecDeque::new(),
            in_a_row: 0,
            max_restarts: settings.max_restarts,
            window: settings.restart_window,
            base: settings.restart_backoff_base,
            max_delay: settings.restart_backoff_max,
        }
    }

    /// Record a crash at `now` of one of `workers` workers and say what
    /// follows it.
    pub(crate) fn crashed(&mut self, now: Instant, workers: usize) -> AfterCrash {
        while self
            .times
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.window)
        {
            self.times.pop_front();
        }
        self.times.push_back(now);
        self.in_a_row += 1;
        let recent = self.times.len();
        if recent > self.max_restarts {
            return AfterCrash::Pause { recent };
        }
        let Some(beyond) = self.in_a_row.checked_sub(workers.max(1)).filter(|n| *n > 0) else {
            return AfterCrash::Restart(Duration::ZERO);
        };
        let doublings = beyond.clamp(1, 17) as u32 - 1;
        AfterCrash::Restart(
            self.base
                .saturating_mul(1u32 << doublings)
                .min(self.max_delay),
        )
    }

    /// An attempt ended without a panic: the streak of panics is over.
    /// Answers whether workers may be waiting out a backoff (the pool
    /// restarts them now).
    pub(crate) fn ended_normally(&mut self) -> bool {
        std::mem::take(&mut self.in_a_row) > 0
    }

    /// Forget the crashes (the type was resumed).
    pub(crate) fn clear(&mut self) {
        self.times.clear();
        self.in_a_row = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_restarts: usize) -> Restarts {
        Restarts::new(&Settings {
            max_restarts,
            restart_window: Duration::from_secs(10),
            restart_backoff_base: Duration::from_millis(50),
            restart_backoff_max: Duration::from_secs(1),
            ..Settings::default()
        })
    }

    const NOW: AfterCrash = AfterCrash::Restart(Duration::ZERO);

    #[tokio::test(start_paused = true)]
    async fn a_panic_restarts_its_worker_at_once_while_panics_are_not_systemic() {
        let mut r = policy(1000);
        let now = Instant::now();
        // Four workers: four panics in a row are still one job's bug each.
        let delays: Vec<_> = (0..4).map(|_| r.crashed(now, 4)).collect();
        assert_eq!(delays, vec![NOW; 4]);
        // One attempt ends without a panic: the next panics start afresh.
        assert!(r.ended_normally());
        assert!(!r.ended_normally());
        assert_eq!(r.crashed(now, 4), NOW);
    }

    #[tokio::test(start_paused = true)]
    async fn past_as_many_panics_in_a_row_as_workers_the_delay_doubles_up_to_the_cap() {
        let mut r = policy(1000);
        let now = Instant::now();
        let delays: Vec<_> = (0..10).map(|_| r.crashed(now, 2)).collect();
        let ms = |d: u64| AfterCrash::Restart(Duration::from_millis(d));
        assert_eq!(
            delays,
            vec![
                NOW,
                NOW,
                ms(50),
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1000),
                ms(1000),
                ms(1000)
            ]
        );
        assert!(r.ended_normally(), "waiting workers are restarted");
        assert_eq!(r.crashed(now, 2), NOW);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_limit_within_the_window_the_type_pauses_and_a_clear_starts_over() {
        let mut r = policy(2);
        let now = Instant::now();
        assert!(matches!(r.crashed(now, 16), AfterCrash::Restart(_)));
        assert!(matches!(r.crashed(now, 16), AfterCrash::Restart(_)));
        assert_eq!(r.crashed(now, 16), AfterCrash::Pause { recent: 3 });
        r.clear();
        assert_eq!(r.crashed(now, 16), NOW);
    }

    #[tokio::test(start_paused = true)]
    async fn crashes_older_than_the_window_are_forgotten_by_the_pause_count() {
        let mut r = policy(2);
        let start = Instant::now();
        r.crashed(start, 16);
        r.crashed(start, 16);
        let later = start + Duration::from_secs(11);
        assert_eq!(r.crashed(later, 16), NOW);
    }
}
