use super::*;

fn ring(weights: &[(&str, u32)], limit: Option<usize>) -> Ring {
    ring_of_turn(weights, limit, 1)
}

fn ring_of_turn(weights: &[(&str, u32)], limit: Option<usize>, turn: u32) -> Ring {
    Ring::new(FairConfig {
        weights: weights.iter().map(|(q, w)| (q.to_string(), *w)).collect(),
        limit,
        turn,
    })
}

fn plan(r: &mut Ring, want: usize) -> Vec<(String, usize)> {
    r.plan(want, &HashMap::new(), |_, n| n)
}

fn p(entries: &[(&str, usize)]) -> Vec<(String, usize)> {
    entries.iter().map(|(q, n)| (q.to_string(), *n)).collect()
}

#[test]
fn config_errors_and_weights_clamped() {
    assert!(matches!(
        Concurrency::per_header("tenant", 0),
        Err(EngineError::InvalidConfig(_))
    ));
    assert_eq!(Concurrency::per_header("tenant", 2).unwrap().limit(), 2);
    let f = Fairness::header("tenant")
        .weight("a", 0)
        .weight("b", 5000)
        .weight("c", 3)
        .weight("c", 4);
    assert_eq!(
        f.weights(),
        &[("a".into(), 1), ("b".into(), MAX_WEIGHT), ("c".into(), 4)]
    );
    let config = FairConfig::new("q", Some(&f), None);
    assert_eq!(
        config
            .weights
            .get(&crate::layout::keys::partition_queue("q", "c")),
        Some(&4)
    );
}

#[test]
fn the_plan_goes_round_robin_from_where_the_last_left_off() {
    let mut r = ring(&[], None);
    for q in ["a", "b", "c"] {
        assert!(r.enter(q));
    }
    assert!(!r.enter("a"), "in the ring already");
    assert_eq!(plan(&mut r, 2), p(&[("a", 1), ("b", 1)]));
    assert_eq!(plan(&mut r, 1), p(&[("c", 1)]));
    assert_eq!(plan(&mut r, 1), p(&[("a", 1)]));
    // More slots than queues: passes repeat, each value one per pass.
    assert_eq!(plan(&mut r, 7), p(&[("b", 3), ("c", 2), ("a", 2)]));
}

#[test]
fn a_weight_is_its_values_slots_per_turn_even_one_slot_at_a_time() {
    let mut r = ring(&[("big", 4)], None);
    r.enter("big");
    r.enter("small");
    assert_eq!(plan(&mut r, 10), p(&[("big", 8), ("small", 2)]));
    // One slot per plan (jobs finishing one by one): the turn carries
    // over plans, so the split stays 4:1.
    let mut counts = HashMap::new();
    for _ in 0..50 {
        for (q, n) in plan(&mut r, 1) {
            *counts.entry(q).or_insert(0) += n;
        }
    }
    assert_eq!(counts["big"], 40);
    assert_eq!(counts["small"], 10);
}

#[test]
fn a_turn_is_claimed_whole_and_the_weights_hold() {
    let mut r = ring_of_turn(&[("big", 2)], None, 8);
    for q in ["big", "a", "b"] {
        r.enter(q);
    }
    // Many values, few slots: one queue (one claim) fills the plan, and a
    // turn of weight 1 (8) is claimed whole, the 2 beyond the free slots
    // claimed ahead (they wait in the pool's backlog).
    assert_eq!(plan(&mut r, 6), p(&[("big", 8)]));
    // Big's turn (2 x 8) goes on at the next plan, then the next value's
    // turn, whole: at most 7 ahead of the free slots.
    assert_eq!(plan(&mut r, 12), p(&[("big", 8), ("a", 8)]));
    assert_eq!(plan(&mut r, 1), p(&[("b", 8)]));
    // One free slot at a time: a turn of weight 1 per plan, and over whole
    // turns the weights hold: 16 : 8 : 8.
    let mut counts = HashMap::new();
    for _ in 0..400 {
        for (q, n) in plan(&mut r, 1) {
            *counts.entry(q).or_insert(0) += n;
        }
    }
    assert_eq!((counts["big"], counts["a"], counts["b"]), (1600, 800, 800));
}

#[test]
fn a_turn_is_not_claimed_ahead_past_a_limit_per_key() {
    let mut r = ring_of_turn(&[], Some(3), 8);
    r.enter("a");
    r.enter("b");
    assert_eq!(plan(&mut r, 1), p(&[("a", 3)]));
}

#[test]
fn the_turn_is_clamped_and_defaults_to_eight() {
    assert_eq!(Fairness::header("t").turn_jobs(), DEFAULT_TURN);
    assert_eq!(DEFAULT_TURN, 8);
    assert_eq!(Fairness::header("t").turn(0).turn_jobs(), 1);
    assert_eq!(Fairness::header("t").turn(5000).turn_jobs(), MAX_TURN);
    let f = Fairness::header("t").turn(3);
    assert_eq!(FairConfig::new("q", Some(&f), None).turn, 3);
    assert_eq!(FairConfig::new("q", None, None).turn, DEFAULT_TURN);
}

#[test]
fn a_drained_value_leaves_the_ring_and_comes_back_when_woken() {
    let mut r = ring(&[], None);
    r.enter("a");
    r.enter("b");
    r.drained("a");
    assert_eq!(r.len(), 1);
    assert!(!r.is_active("a"));
    assert_eq!(plan(&mut r, 3), p(&[("b", 3)]));
    // Back in (a submission, the idle check): at the back of the ring.
    assert!(r.enter("a"));
    assert_eq!(plan(&mut r, 2), p(&[("b", 1), ("a", 1)]));
    // A success settles: not back; anything else may have put it back.
    r.drained("a");
    assert!(!r.settled("a", false));
    assert!(r.settled("a", true));
}

#[test]
fn a_value_at_its_limit_is_not_planned_until_a_job_of_it_settles() {
    let mut r = ring(&[("a", 4)], Some(2));
    r.enter("a");
    r.enter("b");
    let held = HashMap::from([("b", 1)]);
    // a: room 2 (weight 4), b: room 1.
    assert_eq!(r.plan(10, &held, |_, n| n), p(&[("a", 2), ("b", 1)]));
    let held = HashMap::from([("a", 2), ("b", 2)]);
    assert_eq!(r.plan(10, &held, |_, n| n), Vec::new());
    assert_eq!(r.len(), 0, "both blocked");
    assert!(r.is_active("a"));
    // A success of b settles: b may run one more.
    assert!(r.settled("b", false));
    assert!(!r.settled("c", false), "not blocked, not returned");
    let held = HashMap::from([("a", 2), ("b", 1)]);
    assert_eq!(r.plan(10, &held, |_, n| n), p(&[("b", 1)]));
}

#[test]
fn a_value_without_tokens_is_passed_over() {
    let mut r = ring(&[], None);
    r.enter("a");
    r.enter("b");
    let plan = r.plan(4, &HashMap::new(), |q, n| if q == "a" { 0 } else { n });
    assert_eq!(plan, p(&[("b", 4)]));
    // Nobody has tokens: one pass, then it stops.
    assert_eq!(r.plan(4, &HashMap::new(), |_, _| 0), Vec::new());
    assert!(r.visits <= 3, "{} visits", r.visits);
}

#[test]
fn a_plan_costs_the_queues_it_visits_not_the_ring() {
    let mut r = ring(&[], None);
    for i in 0..10_000 {
        r.enter(&format!("q{i}"));
    }
    let plan = plan(&mut r, 4);
    assert_eq!(plan.len(), 4);
    assert_eq!(r.visits, 4);
    // Half of them drained: the stale entries are dropped as reached, once.
    for i in 4..5_004 {
        r.drained(&format!("q{i}"));
    }
    let _ = r.plan(4, &HashMap::new(), |_, n| n);
    assert!(r.visits <= 5_004, "{}", r.visits);
    let _ = r.plan(4, &HashMap::new(), |_, n| n);
    assert_eq!(r.visits, 4);
    // Queues that come and go keep the ring compact.
    for _ in 0..100 {
        for i in 0..5_004 {
            let q = format!("q{i}");
            r.drained(&q);
            r.enter(&q);
        }
    }
    assert!(r.ring.len() <= 2 * r.members.len() + 64 + 1);
}

/// A plan that fills a value's room does not block it: its claim may come
/// back short (the submission that named the queue not committed yet) and
/// then nothing of it is held, so no settlement would ever unblock it.
/// It is planned again; once its claim is held, the next plan blocks it.
#[test]
fn a_value_filled_only_by_a_plan_is_planned_again_if_its_claim_came_back_short() {
    let mut r = ring(&[], Some(1));
    r.enter("a");
    assert_eq!(r.plan(4, &HashMap::new(), |_, n| n), p(&[("a", 1)]));
    assert!(r.visits <= 2, "{} visits", r.visits);
    assert_eq!(r.len(), 1, "still in the ring");
    // Its claim found nothing (and was not drained): nothing held.
    assert_eq!(r.plan(4, &HashMap::new(), |_, n| n), p(&[("a", 1)]));
    // Its claim is held now: at its limit, it leaves the ring.
    let held = HashMap::from([("a", 1)]);
    assert_eq!(r.plan(4, &held, |_, n| n), Vec::new());
    assert_eq!(r.len(), 0);
    assert!(r.is_active("a"), "blocked");
}

#[test]
fn a_paused_value_stays_out_of_the_ring_until_resumed() {
    let mut r = ring(&[], Some(1));
    r.enter("a");
    r.enter("b");
    assert!(r.pause("a"));
    assert!(!r.pause("a"), "paused already");
    assert_eq!(r.len(), 1);
    // Nothing lets it in while paused: a submission, a settlement, the
    // idle check (all `enter`).
    assert!(!r.enter("a"));
    assert!(!r.settled("a", true));
    assert!(!r.is_active("a"));
    assert_eq!(plan(&mut r, 3), p(&[("b", 1)]));
    // A blocked value paused leaves `blocked` too.
    let held = HashMap::from([("b", 1)]);
    assert_eq!(r.plan(3, &held, |_, n| n), Vec::new());
    assert!(r.is_active("b"));
    assert!(r.pause("b"));
    assert!(!r.is_active("b"));
    // Resumed: back at the ring's back.
    assert!(r.resume("a"));
    assert!(!r.resume("a"), "not paused any more");
    assert!(r.resume("b"));
    assert_eq!(plan(&mut r, 3), p(&[("a", 1), ("b", 1)]));
}
