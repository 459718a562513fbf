//! A job's tags (`SubmitOptions::tags`) and their index, through the
//! public API on a local-disk store: a tag's jobs listed in every state
//! (`Engine::jobs_by_tag`, `Client::jobs_by_tag`), newest first and a page
//! at a time; tags refused at submit; a retry keeping them; their index
//! entries removed with the outcome records under retention (on the
//! engine's mock clock); a follow-up's and a workflow step's tags, and a
//! workflow's retry leaving the index exact.

mod common;

use std::time::Duration;

use gaffer::job::{JobState, TaggedJobs};
use gaffer::testing::layout::{inspect, tags};
use gaffer::{Engine, Error, Job, JobContext, SubmitOptions, remote::Client};
use serde::{Deserialize, Serialize};

use common::{Gate, LIMIT, eventually, shut_down_cleanly, within};

/// How an [`Order`] ends.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum End {
    Succeed,
    Fail,
    /// Waits for the engine's gate, then succeeds.
    Hold,
    /// Fails until the engine's `Fixed` is set.
    FailUntilFixed,
}

/// Whether [`End::FailUntilFixed`] succeeds yet.
#[derive(Default)]
struct Fixed(std::sync::atomic::AtomicBool);

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    n: u32,
    end: End,
}

impl Job for Order {
    const NAME: &'static str = "order";
    type Output = u32;
    type Error = std::io::Error;
    async fn run(&self, ctx: JobContext) -> Result<u32, std::io::Error> {
        match self.end {
            End::Succeed => Ok(self.n),
            End::Fail => Err(std::io::Error::other(format!("order {} failed", self.n))),
            End::Hold => {
                ctx.state::<Gate>().wait().await;
                Ok(self.n)
            }
            End::FailUntilFixed => {
                let fixed = ctx.state::<std::sync::Arc<Fixed>>();
                if fixed.0.load(std::sync::atomic::Ordering::SeqCst) {
                    Ok(self.n)
                } else {
                    Err(std::io::Error::other("not fixed yet"))
                }
            }
        }
    }
    fn classify(&self, _: &std::io::Error) -> gaffer::job::FailureKind {
        gaffer::job::FailureKind::Permanent
    }
}

fn tagged(tags: &[&str]) -> SubmitOptions {
    SubmitOptions::default().tags(tags.iter().copied())
}

/// `(id, state)` of a page, in its order.
fn listed(page: &TaggedJobs) -> Vec<(String, JobState)> {
    page.jobs.iter().map(|j| (j.id.clone(), j.state)).collect()
}

/// The index entries of `tag` in the store (a scan of its prefix).
async fn entries(engine: &Engine, tag: &str) -> usize {
    let queue = gaffer::testing::raw_queue(engine).unwrap();
    inspect::count_prefix(queue.view(), &tags::tag_prefix(tag))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tags_jobs_are_listed_in_every_state_and_leave_with_their_records() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let gate = Gate::closed();
    let engine = common::disk_builder(tmp.path(), clock.clone())
        .register::<Order>()
        .state(gate.clone())
        .retention(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let tick = || clock.advance(Duration::from_millis(1));
    let submit = async |n: u32, end: End, opts: SubmitOptions| {
        tick();
        engine
            .submit_with(Order { n, end }, opts)
            .await
            .unwrap()
            .id()
            .to_string()
    };
    let a = submit(1, End::Succeed, tagged(&["order:42", "customer:acme"])).await;
    let b = submit(2, End::Fail, tagged(&["order:42", "order:42"])).await;
    let c = submit(3, End::Hold, tagged(&["order:42"])).await;
    let later = SubmitOptions {
        run_at: Some(std::time::UNIX_EPOCH + Duration::from_millis(common::T0_MS + 3_600_000)),
        ..tagged(&["order:42"])
    };
    let d = submit(4, End::Succeed, later).await;
    let e = submit(5, End::Succeed, tagged(&["customer:acme"])).await;
    let _untagged = submit(6, End::Succeed, SubmitOptions::default()).await;
    assert_eq!(within(engine.join::<Order>(&a)).await.unwrap(), Ok(1));
    assert!(within(engine.join::<Order>(&b)).await.unwrap().is_err());
    assert_eq!(within(engine.join::<Order>(&e)).await.unwrap(), Ok(5));
    gate.wait_entered(1, LIMIT).await;

    // Every state, newest first; the repeated tag counted once.
    let page = engine.jobs_by_tag("order:42", None, 10).await.unwrap();
    assert_eq!(
        listed(&page),
        [
            (d.clone(), JobState::Scheduled),
            (c.clone(), JobState::Running),
            (b.clone(), JobState::Failed),
            (a.clone(), JobState::Succeeded),
        ]
    );
    assert_eq!(page.next, None);
    let first = &page.jobs[3];
    assert_eq!(first.job_type, "order");
    assert_eq!(first.tags, ["order:42", "customer:acme"]);
    assert!(first.finished_at_ms.is_some());
    assert_eq!(page.jobs[2].tags, ["order:42"]);
    let acme = engine.jobs_by_tag("customer:acme", None, 10).await.unwrap();
    assert_eq!(
        listed(&acme),
        [
            (e.clone(), JobState::Succeeded),
            (a.clone(), JobState::Succeeded)
        ]
    );
    assert!(
        engine
            .jobs_by_tag("order:7", None, 10)
            .await
            .unwrap()
            .jobs
            .is_empty()
    );

    // A page at a time.
    let one = engine.jobs_by_tag("order:42", None, 3).await.unwrap();
    assert_eq!(one.jobs.len(), 3);
    let two = engine
        .jobs_by_tag("order:42", one.next.as_deref(), 3)
        .await
        .unwrap();
    assert_eq!(listed(&two), [(a.clone(), JobState::Succeeded)]);
    assert_eq!(two.next, None);

    // A retry runs the failed job again under the same entries.
    engine.retry(&b).await.unwrap();
    assert!(within(engine.join::<Order>(&b)).await.unwrap().is_err());
    assert_eq!(entries(&engine, "order:42").await, 4);

    // Under retention: the ended jobs' entries leave with their records,
    // in the pass's transaction; the live ones stay.
    gate.open();
    assert_eq!(within(engine.join::<Order>(&c)).await.unwrap(), Ok(3));
    clock.advance(Duration::from_secs(61));
    engine.sweep_now().await.unwrap();
    let page = engine.jobs_by_tag("order:42", None, 10).await.unwrap();
    assert_eq!(listed(&page), [(d.clone(), JobState::Scheduled)]);
    assert_eq!(entries(&engine, "order:42").await, 1);
    assert_eq!(entries(&engine, "customer:acme").await, 0);
    shut_down_cleanly(&engine).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tags_are_refused_at_submit_naming_the_tag_and_the_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = common::disk_builder(tmp.path(), common::mock_clock())
        .register::<Order>()
        .state(Gate::opened())
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .open()
        .await
        .unwrap();
    let long = "t".repeat(65);
    let nine: Vec<String> = (0..9).map(|i| format!("t{i}")).collect();
    let order = || Order {
        n: 1,
        end: End::Succeed,
    };
    for (opts, named, rule) in [
        (tagged(&["order 42"]), "order 42", "[A-Za-z0-9_.:@=-]"),
        (tagged(&["a/b"]), "a/b", "no `/`"),
        (tagged(&[""]), "", "1 to 64"),
        (tagged(&[&long]), long.as_str(), "1 to 64"),
        (
            SubmitOptions::default().tags(nine.clone()),
            "t8",
            "at most 8",
        ),
    ] {
        for refused in [
            engine.submit_with(order(), opts.clone()).await.err(),
            client.submit_with(order(), opts.clone()).await.err(),
        ] {
            match refused {
                Some(Error::InvalidTag { tag, reason }) => {
                    assert_eq!(tag, named);
                    assert!(reason.contains(rule), "{reason}");
                }
                other => panic!("{named:?}: expected InvalidTag, got {other:?}"),
            }
        }
    }
    assert!(matches!(
        engine.jobs_by_tag("a b", None, 10).await,
        Err(Error::InvalidTag { .. })
    ));
    client.close().await;
    shut_down_cleanly(&engine).await;
}

/// A client's tagged submission travels through the inbox with its tags,
/// and the client lists the tag through its reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_submits_tagged_jobs_and_lists_them() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = common::disk_builder(tmp.path(), common::mock_clock())
        .intake_poll(Duration::from_millis(20))
        .register::<Order>()
        .state(Gate::opened())
        .start()
        .await
        .unwrap();
    let client = Client::builder()
        .store(gaffer::Store::local_dir(tmp.path()))
        .poll_interval(Duration::from_millis(20))
        .open()
        .await
        .unwrap();
    let h = client
        .submit_with(
            Order {
                n: 7,
                end: End::Succeed,
            },
            tagged(&["order:42", "customer:acme"]),
        )
        .await
        .unwrap();
    assert_eq!(within(h.join()).await.unwrap(), Ok(7));
    eventually("the client reads the tag's job", LIMIT, async || {
        let page = client.jobs_by_tag("customer:acme", None, 10).await.unwrap();
        listed(&page) == [(h.id().to_string(), JobState::Succeeded)]
    })
    .await;
    let page = engine.jobs_by_tag("order:42", None, 10).await.unwrap();
    assert_eq!(page.jobs[0].tags, ["order:42", "customer:acme"]);
    client.close().await;
    shut_down_cleanly(&engine).await;
}

/// A follow-up (`JobContext::then_with`) is tagged as its submission says,
/// indexed in its parent's success transaction.
#[derive(Debug, Serialize, Deserialize)]
struct Checkout;

impl Job for Checkout {
    const NAME: &'static str = "checkout";
    type Output = String;
    type Error = gaffer::Error;
    async fn run(&self, ctx: JobContext) -> Result<String, gaffer::Error> {
        ctx.then_with(
            Order {
                n: 9,
                end: End::Succeed,
            },
            tagged(&["order:9"]),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_is_indexed_under_its_tags() {
    let tmp = tempfile::tempdir().unwrap();
    let engine = common::disk_builder(tmp.path(), common::mock_clock())
        .register::<Order>()
        .register::<Checkout>()
        .state(Gate::opened())
        .start()
        .await
        .unwrap();
    let h = engine.submit(Checkout).await.unwrap();
    let child = within(h.join()).await.unwrap().unwrap();
    assert_eq!(within(engine.join::<Order>(&child)).await.unwrap(), Ok(9));
    let page = engine.jobs_by_tag("order:9", None, 10).await.unwrap();
    assert_eq!(listed(&page), [(child, JobState::Succeeded)]);
    shut_down_cleanly(&engine).await;
}

/// A workflow step is indexed under its tags when its job is created; a
/// retry of the workflow removes the failed step's entry with its outcome
/// record, and its new job writes it again at its new time: one entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_steps_tags_stay_exact_through_its_retry() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let fixed = std::sync::Arc::new(Fixed::default());
    let engine = common::disk_builder(tmp.path(), clock.clone())
        .register::<Order>()
        .state(Gate::opened())
        .state(fixed.clone())
        .start()
        .await
        .unwrap();
    let flow = gaffer::workflow::Workflow::new("checkout").step_with(
        "charge",
        Order {
            n: 8,
            end: End::FailUntilFixed,
        },
        tagged(&["order:8"]),
        Vec::<String>::new(),
        false,
    );
    let wf = engine.submit_workflow(flow).await.unwrap();
    assert!(within(wf.join()).await.unwrap().is_err());
    let page = engine.jobs_by_tag("order:8", None, 10).await.unwrap();
    assert_eq!(page.jobs.len(), 1);
    let step = page.jobs[0].id.clone();
    assert_eq!(page.jobs[0].state, JobState::Failed);

    fixed.0.store(true, std::sync::atomic::Ordering::SeqCst);
    clock.advance(Duration::from_millis(5));
    engine.retry_workflow(wf.id()).await.unwrap();
    assert!(within(wf.join()).await.unwrap().is_ok());
    let page = engine.jobs_by_tag("order:8", None, 10).await.unwrap();
    assert_eq!(listed(&page), [(step, JobState::Succeeded)]);
    assert_eq!(entries(&engine, "order:8").await, 1);
    shut_down_cleanly(&engine).await;
}
