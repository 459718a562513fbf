//! Rate limits per job type (`register_with_rate`), on paused time: a
//! limited type's attempts start no faster than its limit, while another
//! type's jobs run at full speed meanwhile (the limited backlog waits in
//! its queue, not in the engine). The limit applies when the pool claims
//! jobs; a run starts within a few milliseconds of its claim (a settlement
//! or a read in between), so gaps between starts are checked to 10 ms.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gaffer::{Job, JobContext, RateLimit};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// When each limited attempt started, and when the fast jobs were done.
#[derive(Debug, Default)]
struct Starts(Mutex<Vec<Instant>>);

#[derive(Debug, Serialize, Deserialize)]
struct CallPartner(u32);

impl Job for CallPartner {
    const NAME: &'static str = "call-partner";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<(), gaffer::Error> {
        ctx.state::<Arc<Starts>>()
            .0
            .lock()
            .unwrap()
            .push(Instant::now());
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Fast(u32);

impl Job for Fast {
    const NAME: &'static str = "fast";
    type Output = u32;
    type Error = gaffer::Error;

    async fn run(&self, _: JobContext) -> Result<u32, gaffer::Error> {
        Ok(self.0)
    }
}

async fn limited_and_fast(rate: RateLimit) -> (Vec<Duration>, Duration) {
    let starts = Arc::new(Starts::default());
    let engine = common::memory_builder(common::mock_clock())
        .register_with_rate::<CallPartner>(rate)
        .register::<Fast>()
        .state(starts.clone())
        .start()
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut limited = Vec::new();
    for i in 0..10 {
        limited.push(engine.submit(CallPartner(i)).await.unwrap());
    }
    let mut fast = Vec::new();
    for i in 0..100 {
        fast.push(engine.submit(Fast(i)).await.unwrap());
    }
    for h in fast {
        common::within(h.join()).await.unwrap().unwrap();
    }
    let fast_done = t0.elapsed();
    for h in limited {
        common::within_for(Duration::from_secs(60), h.join())
            .await
            .unwrap()
            .unwrap();
    }
    engine.shutdown().await.unwrap();
    let mut at: Vec<Duration> = starts.0.lock().unwrap().iter().map(|s| *s - t0).collect();
    at.sort();
    (at, fast_done)
}

#[tokio::test(start_paused = true)]
async fn ten_jobs_at_two_a_second_start_half_a_second_apart_while_a_hundred_others_finish() {
    let (at, fast_done) = limited_and_fast(RateLimit::per_second(2).unwrap().burst(1)).await;
    assert_eq!(at.len(), 10, "{at:?}");
    for pair in at.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(490),
            "starts closer than 500 ms: {at:?}"
        );
    }
    assert!(at[9] >= Duration::from_millis(4_490), "{at:?}");
    // The limited type's backlog held no worker and no claim the fast type
    // needed: its hundred jobs were done before the limited type's second
    // start.
    assert!(
        fast_done < at[1],
        "fast done at {fast_done:?}, limited starts {at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_burst_lets_a_periods_worth_start_at_once_then_the_rate_holds() {
    let (at, _) = limited_and_fast(RateLimit::per_second(2).unwrap()).await;
    assert_eq!(at.len(), 10, "{at:?}");
    // A period's worth (2) at once, then one each 500 ms: the 10th start
    // comes 8 intervals after the burst, never sooner.
    for (i, pair) in at[1..].windows(2).enumerate() {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(490),
            "start {} came early: {at:?}",
            i + 2
        );
    }
    assert!(at[9] >= Duration::from_millis(3_990), "{at:?}");
    assert!(at[1] < Duration::from_millis(500), "the burst: {at:?}");
}
