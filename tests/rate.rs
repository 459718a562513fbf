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
        .register_with::<CallPartner>(gaffer::JobOptions {
            rate: Some(rate.clone()),
            ..Default::default()
        })
        .register::<Fast>()
        .state(starts.clone())
        .start()
        .await
        .unwrap();
    // A bucket starts empty and earns from its pool's start: a period on,
    // it holds its burst.
    tokio::time::sleep(rate.period()).await;
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

/// Starts of a type limited per header value, with the value of each.
#[derive(Debug, Default)]
struct TenantStarts(Mutex<Vec<(Option<String>, Instant)>>);

#[derive(Debug, Serialize, Deserialize)]
struct CallTenantApi(u32);

impl Job for CallTenantApi {
    const NAME: &'static str = "call-tenant-api";
    type Output = ();
    type Error = gaffer::Error;

    async fn run(&self, ctx: JobContext) -> Result<(), gaffer::Error> {
        let tenant = ctx.headers().get("tenant").cloned();
        ctx.state::<Arc<TenantStarts>>()
            .0
            .lock()
            .unwrap()
            .push((tenant, Instant::now()));
        Ok(())
    }
}

fn for_tenant(tenant: Option<&str>) -> gaffer::SubmitOptions {
    let mut opts = gaffer::SubmitOptions::default();
    if let Some(t) = tenant {
        opts.headers.insert("tenant".into(), t.into());
    }
    opts
}

/// Each tenant's starts, as offsets from `t0`, in order.
fn starts_of(starts: &TenantStarts, tenant: Option<&str>, t0: Instant) -> Vec<Duration> {
    let mut at: Vec<Duration> = starts
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| t.as_deref() == tenant)
        .map(|(_, at)| *at - t0)
        .collect();
    at.sort();
    at
}

fn assert_spaced(what: &str, at: &[Duration]) {
    for pair in at.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_millis(490),
            "{what}: starts closer than 500 ms: {at:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_limit_per_tenant_throttles_each_tenant_alone_and_a_busy_one_never_holds_back_another() {
    let starts = Arc::new(TenantStarts::default());
    let limit = RateLimit::per_second(2)
        .unwrap()
        .burst(1)
        .per_header("tenant");
    let engine = common::memory_builder(common::mock_clock())
        .register_with::<CallTenantApi>(gaffer::JobOptions {
            rate: Some(limit),
            ..Default::default()
        })
        .state(starts.clone())
        .start()
        .await
        .unwrap();
    // Up a period: every tenant's bucket has earned its burst (a value
    // first seen now earns from the pool's start).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t0 = Instant::now();
    let mut handles = Vec::new();
    // The busy tenant's backlog is submitted first: ten jobs, 4.5 s of it.
    for (jobs, tenant) in [
        (0..10, Some("acme")),
        (10..13, Some("globex")),
        (13..15, None),
    ] {
        for i in jobs {
            let opts = for_tenant(tenant);
            handles.push(engine.submit_with(CallTenantApi(i), opts).await.unwrap());
        }
    }
    for h in handles {
        common::within_for(Duration::from_secs(60), h.join())
            .await
            .unwrap()
            .unwrap();
    }
    engine.shutdown().await.unwrap();

    let acme = starts_of(&starts, Some("acme"), t0);
    let globex = starts_of(&starts, Some("globex"), t0);
    let none = starts_of(&starts, None, t0);
    assert_eq!((acme.len(), globex.len(), none.len()), (10, 3, 2));
    // Each tenant at its own rate...
    assert_spaced("acme", &acme);
    assert_spaced("globex", &globex);
    assert_spaced("no tenant", &none);
    assert!(acme[9] >= Duration::from_millis(4_490), "{acme:?}");
    // ...and the others' first jobs start at once, not behind acme's
    // backlog: their last starts come one and two intervals in, while acme
    // still has most of its jobs waiting.
    assert!(globex[0] < Duration::from_millis(100), "{globex:?}");
    assert!(none[0] < Duration::from_millis(100), "{none:?}");
    assert!(globex[2] < Duration::from_millis(1_100), "{globex:?}");
    assert!(globex[2] < acme[3], "globex {globex:?} acme {acme:?}");
}

/// Queue one job per tenant on a store whose type is paused (durably) and
/// limited per tenant; restart on `again` (registering the type its own
/// way), resume, and wait for every job. Answers the tenants of the runs
/// on the second engine, sorted.
async fn queued_per_tenant_then_restarted(
    tenants: &[&str],
    again: impl FnOnce(gaffer::EngineBuilder) -> gaffer::EngineBuilder,
) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let clock = common::mock_clock();
    let engine = common::disk_builder(dir.path(), clock.clone())
        .register_with::<CallTenantApi>(gaffer::JobOptions {
            rate: Some(RateLimit::per_second(2).unwrap().per_header("tenant")),
            ..Default::default()
        })
        .state(Arc::new(TenantStarts::default()))
        .start()
        .await
        .unwrap();
    engine.pause(CallTenantApi::NAME).await.unwrap();
    let mut ids = Vec::new();
    for (i, tenant) in tenants.iter().enumerate() {
        let h = engine
            .submit_with(CallTenantApi(i as u32), for_tenant(Some(tenant)))
            .await
            .unwrap();
        ids.push(h.id().to_string());
    }
    engine.shutdown().await.unwrap();

    let starts = Arc::new(TenantStarts::default());
    let engine = again(common::disk_builder(dir.path(), clock))
        .state(starts.clone())
        .start()
        .await
        .unwrap();
    engine.resume(CallTenantApi::NAME).await.unwrap();
    for id in &ids {
        let h = engine.handle::<CallTenantApi>(id).unwrap();
        common::within_for(Duration::from_secs(10), h.join())
            .await
            .unwrap()
            .unwrap();
    }
    engine.shutdown().await.unwrap();
    let mut ran: Vec<String> = starts
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(t, _)| t.clone())
        .collect();
    ran.sort();
    ran
}

#[tokio::test(start_paused = true)]
async fn a_tenants_waiting_jobs_are_found_again_after_a_restart() {
    // The new engine learns the partition queues from the store (no
    // submission names them), and runs every job once resumed.
    let ran = queued_per_tenant_then_restarted(&["acme", "globex", "initech"], |b| {
        b.register_with::<CallTenantApi>(gaffer::JobOptions {
            rate: Some(RateLimit::per_second(2).unwrap().per_header("tenant")),
            ..Default::default()
        })
    })
    .await;
    assert_eq!(ran, ["acme", "globex", "initech"]);
}

#[tokio::test(start_paused = true)]
async fn tenants_jobs_still_run_when_the_limit_is_no_longer_per_tenant() {
    // Registered without a limit now: the jobs waiting in the tenants'
    // queues still run.
    let ran =
        queued_per_tenant_then_restarted(&["acme", "globex"], |b| b.register::<CallTenantApi>())
            .await;
    assert_eq!(ran, ["acme", "globex"]);
}

#[tokio::test]
async fn a_limit_per_reserved_or_empty_header_is_refused_at_start() {
    for header in ["gaffer.type", ""] {
        let err = common::memory_builder(common::mock_clock())
            .register_with::<CallTenantApi>(gaffer::JobOptions {
                rate: Some(RateLimit::per_second(2).unwrap().per_header(header)),
                ..Default::default()
            })
            .start()
            .await
            .unwrap_err();
        assert!(err.to_string().contains("header"), "{header:?}: {err}");
    }
}

/// Check every window of the sorted starts `at` against `limit`: from the
/// i-th start to the j-th, at most `burst + rate × (t_j - t_i)` (with 10 ms
/// for a start's lag behind its claim).
fn assert_within_limit(what: &str, at: &[Duration], limit: &RateLimit) {
    let interval = (limit.period() / limit.starts()).as_nanos();
    for i in 0..at.len() {
        for j in i..at.len() {
            let span = at[j] - at[i] + Duration::from_millis(10);
            let allowed = u128::from(limit.max_burst()) + span.as_nanos() / interval;
            let n = (j - i + 1) as u128;
            assert!(
                n <= allowed,
                "{what}: {n} starts from {:?} to {:?}, over the {allowed} the limit allows \
                 ({} starts in all, the last at {:?})",
                at[i],
                at[j],
                at.len(),
                at.last(),
            );
        }
    }
}

/// A crash loop must not let a type run a burst per restart: an engine
/// restarted every second on its store, with a backlog larger than the
/// whole span allows, starts no more than the limit over the span.
/// Each new engine's bucket starts empty: its first start comes one
/// interval after it starts.
#[tokio::test(start_paused = true)]
async fn a_limit_holds_across_an_engine_restarted_every_second() {
    // 4 a second, bursts of 40: a burst per restart would be ten times the rate.
    let limit = RateLimit::new(40, Duration::from_secs(10)).unwrap();
    let interval = limit.period() / limit.starts();
    // A store the engines share, one after the other (nothing of a bucket
    // is stored: what matters is that each engine is new). On paused time,
    // so "every second" is exact.
    let store = common::shared_store();
    let clock = common::mock_clock();
    let starts = Arc::new(Starts::default());
    let start = || {
        common::shared_memory_builder(store.clone(), clock.clone())
            .register_with::<CallPartner>(gaffer::JobOptions {
                rate: Some(limit.clone()),
                ..Default::default()
            })
            .state(starts.clone())
            .start()
    };
    // When each engine was asked to start (its pool, and its bucket,
    // start after).
    let mut started_at = vec![Instant::now()];
    let t0 = started_at[0];
    let mut opened = (std::time::SystemTime::now(), t0);
    let mut engine = start().await.unwrap();
    for i in 0..150 {
        engine.submit(CallPartner(i)).await.unwrap();
    }
    // 4 restarts (an engine start on a store that saw many takes seconds
    // of paused time, and real ones: enough to show a burst per restart).
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        engine.shutdown().await.unwrap();
        common::let_the_store_clock_catch_up(opened);
        started_at.push(Instant::now());
        opened = (std::time::SystemTime::now(), Instant::now());
        engine = start().await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    engine.shutdown().await.unwrap();
    started_at.push(Instant::now());

    let mut all: Vec<Instant> = starts.0.lock().unwrap().clone();
    all.sort();
    let at: Vec<Duration> = all.iter().map(|s| *s - t0).collect();
    // The engines ran jobs (the bound below is not met by running none)…
    assert!(at.len() >= 12, "{} starts: {at:?}", at.len());
    // …no more than the limit allows in any window…
    assert_within_limit("across restarts", &at, &limit);
    // …and each engine's first start waited one interval.
    for pair in started_at.windows(2) {
        let first = all
            .iter()
            .find(|s| **s >= pair[0] && **s < pair[1])
            .unwrap_or_else(|| panic!("the engine started at {:?} ran nothing", pair[0] - t0));
        assert!(
            *first - pair[0] >= interval,
            "an engine started at {:?} ran a job at {:?}",
            pair[0] - t0,
            *first - t0
        );
    }
}

/// A pool restarted inside a running engine (killed every second) starts
/// its buckets empty too, each tenant's of a limit per header as well: each
/// tenant's starts stay within the limit over the span.
#[tokio::test(start_paused = true)]
async fn a_limit_per_tenant_holds_across_a_pool_killed_every_second() {
    // 4 a second, bursts of 40, for each tenant.
    let limit = RateLimit::new(40, Duration::from_secs(10))
        .unwrap()
        .per_header("tenant");
    let starts = Arc::new(TenantStarts::default());
    let engine = common::memory_builder(common::mock_clock())
        .register_with::<CallTenantApi>(gaffer::JobOptions {
            rate: Some(limit.clone()),
            ..Default::default()
        })
        .state(starts.clone())
        .start()
        .await
        .unwrap();
    let t0 = Instant::now();
    for i in 0..100 {
        for tenant in ["acme", "globex"] {
            let opts = for_tenant(Some(tenant));
            engine.submit_with(CallTenantApi(i), opts).await.unwrap();
        }
    }
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        common::kill(
            &engine,
            gaffer::testing::ChildKind::Pool(CallTenantApi::NAME.into()),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    engine.shutdown().await.unwrap();
    for tenant in ["acme", "globex"] {
        let at = starts_of(&starts, Some(tenant), t0);
        assert!(at.len() >= 12, "{tenant}: {} starts: {at:?}", at.len());
        assert_within_limit(tenant, &at, &limit);
    }
}
