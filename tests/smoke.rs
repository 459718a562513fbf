mod common;
use gaffer::{Job, JobContext};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Inc(u64);
impl Job for Inc {
    const NAME: &'static str = "inc";
    type Output = u64;
    type Error = std::convert::Infallible;
    async fn run(&self, _ctx: JobContext) -> Result<u64, Self::Error> {
        Ok(self.0 + 1)
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_under_paused_time_on_the_in_memory_store() {
    let engine = common::memory_builder(common::mock_clock())
        .register::<Inc>()
        .start()
        .await
        .unwrap();
    let h = engine.submit(Inc(41)).await.unwrap();
    assert_eq!(h.await.unwrap(), 42);
    let report = engine.shutdown().await.unwrap();
    assert!(report.queue_closed, "{report:?}");
}
