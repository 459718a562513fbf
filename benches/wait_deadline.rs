//! How late a `wait_signal` timeout is answered: jobs that wait 400 ms for a
//! signal that never comes, one at a time, on a local-disk store at the
//! defaults; the time from submit to the job's end.
//!
//! `cargo bench --bench wait_deadline [-- N]` (N jobs, 20 by default).

use std::time::{Duration, Instant};

use gaffer::{Engine, Error, Job, JobContext, Store};
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_millis(400);

#[derive(Serialize, Deserialize)]
struct Waits;

impl Job for Waits {
    const NAME: &'static str = "waits";
    type Output = bool;
    type Error = Error;
    async fn run(&self, ctx: JobContext) -> Result<bool, Error> {
        match ctx.wait_signal::<String>("never", WAIT).await {
            Ok(_) => Ok(false),
            Err(Error::SignalTimeout { .. }) => Ok(true),
            Err(e) => Err(e),
        }
    }
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::builder()
        .store(Store::local_dir(dir.path()))
        .register::<Waits>()
        .start()
        .await
        .unwrap();
    let mut ends = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let timed_out = engine.submit(Waits).await.unwrap().await.unwrap();
        assert!(timed_out, "no signal was sent");
        ends.push(t0.elapsed());
    }
    ends.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{n} waits of {} ms: submit to end min {:.0} ms, p50 {:.0} ms, max {:.0} ms",
        WAIT.as_millis(),
        ms(ends[0]),
        ms(ends[n / 2]),
        ms(ends[n - 1])
    );
    engine.shutdown().await.unwrap();
}
