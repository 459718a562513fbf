//! The restart policy of a pool's workers, as a small pure type: each crash
//! is recorded; past `max_restarts` crashes within `restart_window` the job
//! type is paused; otherwise the crashed worker restarts after
//! `base · 2^(recent crashes − 1)`, capped at `restart_backoff_max`.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::settings::Settings;

/// What to do after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterCrash {
    /// Restart the worker after this delay.
    Restart(Duration),
    /// The type crashed too often: pause it (`recent` crashes in the window).
    Pause { recent: usize },
}

/// Recent crashes of one pool's workers.
#[derive(Debug)]
pub(crate) struct Restarts {
    times: VecDeque<Instant>,
    max_restarts: usize,
    window: Duration,
    base: Duration,
    max_delay: Duration,
}

impl Restarts {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            times: VecDeque::new(),
            max_restarts: settings.max_restarts,
            window: settings.restart_window,
            base: settings.restart_backoff_base,
            max_delay: settings.restart_backoff_max,
        }
    }

    /// Record a crash at `now` and say what follows it.
    pub(crate) fn crashed(&mut self, now: Instant) -> AfterCrash {
        while self
            .times
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.window)
        {
            self.times.pop_front();
        }
        self.times.push_back(now);
        let recent = self.times.len();
        if recent > self.max_restarts {
            return AfterCrash::Pause { recent };
        }
        let doublings = recent.clamp(1, 17) as u32 - 1;
        AfterCrash::Restart(
            self.base
                .saturating_mul(1u32 << doublings)
                .min(self.max_delay),
        )
    }

    /// Forget the crashes (the type was resumed).
    pub(crate) fn clear(&mut self) {
        self.times.clear();
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

    #[tokio::test(start_paused = true)]
    async fn the_delay_doubles_per_recent_crash_up_to_the_cap() {
        let mut r = policy(100);
        let now = Instant::now();
        let delays: Vec<_> = (0..7).map(|_| r.crashed(now)).collect();
        let ms = |d: u64| AfterCrash::Restart(Duration::from_millis(d));
        assert_eq!(
            delays,
            vec![
                ms(50),
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1000),
                ms(1000)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn crashes_older_than_the_window_are_forgotten() {
        let mut r = policy(100);
        let start = Instant::now();
        r.crashed(start);
        r.crashed(start);
        let later = start + Duration::from_secs(11);
        assert_eq!(
            r.crashed(later),
            AfterCrash::Restart(Duration::from_millis(50))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_limit_within_the_window_the_type_pauses_and_a_clear_starts_over() {
        let mut r = policy(2);
        let now = Instant::now();
        assert!(matches!(r.crashed(now), AfterCrash::Restart(_)));
        assert!(matches!(r.crashed(now), AfterCrash::Restart(_)));
        assert_eq!(r.crashed(now), AfterCrash::Pause { recent: 3 });
        r.clear();
        assert_eq!(
            r.crashed(now),
            AfterCrash::Restart(Duration::from_millis(50))
        );
    }
}
