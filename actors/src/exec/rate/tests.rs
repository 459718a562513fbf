use super::*;

#[test]
fn a_limit_needs_starts_and_a_period() {
    assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
    assert!(RateLimit::new(1, Duration::ZERO).is_err());
    assert_eq!(
        RateLimit::per_minute(3).unwrap().period(),
        Duration::from_secs(60)
    );
}

#[tokio::test(start_paused = true)]
async fn the_bucket_starts_empty_refills_at_the_rate_and_takes_back_what_was_not_used() {
    let mut b = Bucket::new(&RateLimit::per_second(2).unwrap(), Instant::now());
    // Empty at its start: the first token one interval on.
    assert_eq!(b.take(5), 0);
    assert_eq!(b.until_next(), Duration::from_millis(500));
    tokio::time::advance(Duration::from_millis(499)).await;
    assert_eq!(b.take(1), 0);
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(b.take(3), 1);
    assert_eq!(b.until_next(), Duration::from_millis(500));
    // A period's worth later: the burst.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(b.take(5), 2);
    assert_eq!(b.take(1), 0);
    assert_eq!(b.until_next(), Duration::from_millis(500));
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(b.take(3), 1);
    b.give_back(1);
    assert_eq!(b.take(3), 1);
    // Never more than a period's worth.
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(b.is_full());
    assert_eq!(b.take(10), 2);

    // Made long after its pool's start: what it earned since, full.
    let started = Instant::now();
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut late = Bucket::new(&RateLimit::per_second(2).unwrap(), started);
    assert!(late.is_full());
    assert_eq!(late.take(5), 2);

    let mut spaced = Bucket::new(&RateLimit::per_second(2).unwrap().burst(1), Instant::now());
    assert_eq!(spaced.take(2), 0);
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(spaced.take(2), 1);
    assert_eq!(spaced.until_next(), Duration::from_millis(500));
}

/// A pool's limiter at its start has no token for any queue (a value
/// first seen later neither), says when the first one comes, and after
/// the burst's worth of time has the burst.
#[tokio::test(start_paused = true)]
async fn a_limiter_starts_empty_for_every_queue() {
    let limit = RateLimit::per_second(2).unwrap().per_header("tenant");
    let mut l = Limiter::new("q".into(), Some(limit));
    assert!(l.learn("q..pa".into()));
    assert_eq!(l.plan(5), Vec::new());
    assert_eq!(l.until_next(), Duration::from_millis(500));
    assert_eq!(l.next_token(), Some(Duration::from_millis(500)));
    tokio::time::advance(Duration::from_millis(250)).await;
    // A value first seen now earns from the pool's start, not from now.
    assert!(l.learn("q..pb".into()));
    assert_eq!(l.until_next(), Duration::from_millis(250));
    tokio::time::advance(Duration::from_millis(250)).await;
    let mut plan = l.plan(5);
    plan.sort();
    assert_eq!(
        plan,
        vec![
            ("q".to_string(), 1),
            ("q..pa".to_string(), 1),
            ("q..pb".to_string(), 1)
        ]
    );
    // Unlimited: nothing to wait for.
    let mut plain = Limiter::new("q".into(), None);
    assert_eq!(plain.plan(3), vec![("q".to_string(), 3)]);
    assert_eq!(plain.until_next(), Duration::ZERO);
    assert_eq!(plain.next_token(), None);
}

/// A claim may wait long for jobs with its tokens reserved: the tokens
/// its jobs used count from when it returned, not from when it was
/// planned, so a token reserved while the queue was empty is not
/// banked (with a burst of 1, two jobs arriving after a quiet second
/// started together).
#[tokio::test(start_paused = true)]
async fn tokens_a_claim_used_count_from_when_it_returned() {
    for limit in [
        RateLimit::per_second(2).unwrap().burst(1),
        RateLimit::per_second(2)
            .unwrap()
            .burst(1)
            .per_header("tenant"),
    ] {
        let mut l = Limiter::new("q".into(), Some(limit));
        tokio::time::advance(Duration::from_millis(500)).await;
        let plan = l.plan(1);
        assert_eq!(plan, vec![("q".to_string(), 1)]);
        // The claim waits a second for a job, and brings one.
        tokio::time::advance(Duration::from_secs(1)).await;
        l.give_back(&plan, &HashMap::from([("q", 1)]));
        assert_eq!(l.plan(1), Vec::new(), "a second start at once");
        assert_eq!(l.until_next(), Duration::from_millis(500));
        // Nothing used: everything back, as before.
        tokio::time::advance(Duration::from_millis(500)).await;
        let plan = l.plan(1);
        assert_eq!(plan.len(), 1);
        l.give_back(&plan, &HashMap::new());
        assert_eq!(l.plan(1).len(), 1);
    }
}

/// A limit no longer per header shares the type's one bucket across
/// the partition queues an earlier configuration left: with it empty,
/// the pool waits for its next token (it was told "now" while some
/// queue had no bucket, and woke again and again until the token).
#[tokio::test(start_paused = true)]
async fn a_shared_bucket_over_several_queues_says_when_its_next_token_comes() {
    let mut shared = Limiter::new("q".into(), Some(RateLimit::per_second(2).unwrap()));
    shared.learn("q..pa".into());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(shared.plan(10).iter().map(|(_, n)| n).sum::<usize>(), 2);
    assert_eq!(shared.plan(10), Vec::new());
    assert_eq!(shared.until_next(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_plan_spreads_over_the_values_with_tokens() {
    let limit = RateLimit::per_second(2).unwrap().per_header("tenant");
    let mut l = Limiter::new("q".into(), Some(limit));
    assert!(l.learn("q..pa".into()));
    assert!(!l.learn("q..pa".into()));
    assert!(l.learn("q..pb".into()));
    // A period after the pool's start, every queue has its burst.
    tokio::time::advance(Duration::from_secs(1)).await;
    // 3 queues with 2 tokens each: 5 wanted are spread 2/2/1 or so.
    let plan = l.plan(5);
    let total: usize = plan.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 5, "{plan:?}");
    assert!(plan.iter().all(|(_, n)| *n <= 2), "{plan:?}");
    // Nothing claimed from `q..pa`: its tokens come back.
    let mut used = HashMap::new();
    for (q, n) in &plan {
        if q != "q..pa" {
            used.insert(q.as_str(), *n);
        }
    }
    l.give_back(&plan, &used);
    // `q` spent its 2; `q..pa` has its 2 back; `q..pb` its one left.
    let mut again = l.plan(10);
    again.sort();
    assert_eq!(
        again,
        vec![("q..pa".to_string(), 2), ("q..pb".to_string(), 1)],
        "{plan:?} then {again:?}"
    );
    assert_eq!(l.plan(1), Vec::new());
    assert_eq!(l.until_next(), Duration::from_millis(500));
    // An unlimited type claims from its queue, and from partition
    // queues an earlier configuration left, sharing what it wants.
    let mut plain = Limiter::new("q".into(), None);
    assert_eq!(plain.plan(7), vec![("q".to_string(), 7)]);
    assert!(plain.learn("q..pa".into()));
    let mut spread = plain.plan(7);
    spread.sort();
    assert_eq!(
        spread,
        vec![("q".to_string(), 4), ("q..pa".to_string(), 3)],
        "{spread:?}"
    );
    // A limit no longer per header: one bucket across its queues.
    let mut shared = Limiter::new("q".into(), Some(RateLimit::per_second(3).unwrap()));
    shared.learn("q..pa".into());
    tokio::time::advance(Duration::from_secs(1)).await;
    let plan = shared.plan(10);
    assert_eq!(plan.iter().map(|(_, n)| n).sum::<usize>(), 3, "{plan:?}");
    shared.give_back(&plan, &HashMap::new());
    assert_eq!(shared.plan(10).iter().map(|(_, n)| n).sum::<usize>(), 3);
}

/// A fair limiter over `n` partition queues of `q`, every one drained (out
/// of the ring, idle).
fn idle_fair_limiter(n: usize) -> Limiter {
    let mut l = Limiter::new("q".into(), None).fair(crate::exec::fair::FairConfig::default());
    let queues: Vec<String> = (0..n).map(|i| format!("q..p{i:016x}")).collect();
    for q in &queues {
        l.learn(q.clone());
    }
    l.drained(&queues);
    l.drained(&["q".to_string()]);
    l
}

/// The idle check finds an insert on a drained queue (taquba's wake-up
/// kept a permit for it) and puts the queue back in the ring, once: the
/// permit is taken.
#[tokio::test]
async fn the_idle_check_finds_an_insert_on_a_drained_queue() {
    let store = std::sync::Arc::new(taquba::object_store::memory::InMemory::new());
    let queue = taquba::Queue::open(store, "q").await.unwrap();
    let mut l = idle_fair_limiter(3);
    assert_eq!(l.check_idle(&queue), 0);
    queue
        .enqueue("q..p0000000000000001", vec![1])
        .await
        .unwrap();
    assert_eq!(l.check_idle(&queue), 1);
    assert_eq!(l.plan(4), vec![("q..p0000000000000001".to_string(), 4)]);
    // In the ring: not looked at again; drained: no insert since.
    assert_eq!(l.check_idle(&queue), 0);
    l.drained(&["q..p0000000000000001".to_string()]);
    assert_eq!(l.check_idle(&queue), 0);
    queue.close().await.unwrap();
}

/// What the idle check costs per idle value (run by hand:
/// `cargo test -p gaffer-actors --release --lib idle_check_cost -- --ignored --nocapture`).
/// Not a timed test: it prints, and asserts nothing about time.
#[tokio::test]
#[ignore = "a measurement, run by hand"]
async fn idle_check_cost() {
    let store = std::sync::Arc::new(taquba::object_store::memory::InMemory::new());
    let queue = taquba::Queue::open(store, "q").await.unwrap();
    for n in [1_000usize, 10_000, 100_000] {
        let mut l = idle_fair_limiter(n);
        // The first look makes taquba's wake-up of each queue.
        let checks = n.div_ceil(IDLE_CHECK_BATCH);
        for _ in 0..checks {
            l.check_idle(&queue);
        }
        let rounds = 20 * checks;
        let t0 = std::time::Instant::now();
        for _ in 0..rounds {
            assert_eq!(l.check_idle(&queue), 0);
        }
        let looked = rounds * n.min(IDLE_CHECK_BATCH);
        let per = t0.elapsed() / looked as u32;
        let check = t0.elapsed() / rounds as u32;
        println!(
            "idle check: {n} idle values, {per:?} per value looked at, {check:?} per check \
             (each value looked at every {checks} checks)"
        );
    }
    queue.close().await.unwrap();
}

/// A drained queue is due for a forget check once it stayed idle for the
/// window, and forgotten when the check says so: its entry and its place
/// in the queues go, the type's own queue stays.
#[tokio::test(start_paused = true)]
async fn a_queue_idle_for_the_window_is_checked_and_forgotten() {
    let after = Duration::from_secs(60);
    let mut l = idle_fair_limiter(3);
    assert_eq!(l.known_len(), 4);
    assert!(l.due_for_check(after).is_empty());
    tokio::time::advance(after).await;
    let due = l.due_for_check(after);
    assert_eq!(due.len(), 3);
    // One check at a time.
    assert!(l.due_for_check(after).is_empty());
    let found = super::ForgetCheck {
        forget: due,
        keep: Vec::new(),
    };
    assert!(l.forgot(Some(found), |_| false).is_empty());
    assert_eq!(l.known_len(), 1);
    // Learned again by a later submission.
    assert!(l.learn("q..p0000000000000001".into()));
    assert_eq!(l.known_len(), 2);
}

/// A queue that woke after its check started (a submission named it, or
/// an insert is waiting) is not forgotten; one whose check found live jobs
/// waits another window.
#[tokio::test(start_paused = true)]
async fn a_queue_that_woke_or_holds_jobs_is_kept() {
    let after = Duration::from_secs(60);
    let mut l = idle_fair_limiter(3);
    tokio::time::advance(after).await;
    let due = l.due_for_check(after);
    let (woken, inserted, live) = (due[0].clone(), due[1].clone(), due[2].clone());
    // A submission names the first while the check runs.
    l.wake(&woken.0);
    let found = super::ForgetCheck {
        forget: vec![woken, inserted.clone()],
        keep: vec![live.0],
    };
    // The second had an insert since its last look: it joins the ring.
    let joined = l.forgot(Some(found), |q| q == inserted.0);
    assert_eq!(joined, vec![inserted.0.clone()]);
    assert_eq!(l.known_len(), 4);
    // The one with live jobs is due again only after another window.
    tokio::time::advance(after / 2).await;
    assert!(l.due_for_check(after).is_empty());
    tokio::time::advance(after / 2).await;
    assert_eq!(l.due_for_check(after).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_paused_value_of_a_partitioned_limit_is_passed_over() {
    let limit = RateLimit::per_second(2).unwrap().per_header("tenant");
    let mut l = Limiter::new("q".into(), Some(limit));
    l.learn("q..pa".into());
    l.learn("q..pb".into());
    assert!(l.pause_value("q..pa", true));
    assert!(!l.pause_value("q..pa", true), "paused already");
    assert!(l.is_paused("q..pa"));
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut plan = l.plan(10);
    plan.sort();
    assert_eq!(
        plan,
        vec![("q".to_string(), 2), ("q..pb".to_string(), 2)],
        "{plan:?}"
    );
    // Its full bucket does not make the pool plan again at once.
    assert_eq!(l.until_next(), Duration::from_millis(500));
    assert!(l.pause_value("q..pa", false));
    assert!(!l.is_paused("q..pa"));
    assert_eq!(l.plan(10), vec![("q..pa".to_string(), 2)]);
}
