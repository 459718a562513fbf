use super::*;

const H: u64 = 3_600_000;
/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600_000;

fn ms(s: &str) -> u64 {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis() as u64
}

#[test]
fn intervals_tick_at_multiples_since_the_epoch() {
    let s = Schedule::every(Duration::from_secs(3600));
    assert_eq!(s.next_after(T0), Some(T0 + H));
    assert_eq!(s.next_after(T0 + 1), Some(T0 + H));
    assert_eq!(s.next_after(T0 - 1), Some(T0));
    assert_eq!(s.latest_at_or_before(T0 + H - 1), Some(T0));
    assert_eq!(s.latest_at_or_before(T0), Some(T0));
    assert_eq!(s.to_string(), "every 1h");
    assert_eq!(
        Schedule::every(Duration::from_secs(90)).to_string(),
        "every 1m30s"
    );
}

#[test]
fn cron_with_and_without_seconds() {
    let hourly = Schedule::cron("0 * * * *").unwrap();
    assert_eq!(hourly.next_after(T0), Some(T0 + H));
    assert_eq!(hourly.next_after(T0 + 500), Some(T0 + H));
    assert_eq!(hourly.latest_at_or_before(T0 + 500), Some(T0));
    let secs = Schedule::cron("*/15 * * * * *").unwrap();
    assert_eq!(secs.next_after(T0), Some(T0 + 15_000));
    assert_eq!(secs.next_after(T0 + 14_999), Some(T0 + 15_000));
    assert_eq!(hourly.to_string(), "cron \"0 * * * *\"");
}

#[test]
fn cron_in_a_time_zone_follows_its_clock() {
    // 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer.
    let s = Schedule::cron("0 9 * * *")
        .unwrap()
        .time_zone("Europe/Paris")
        .unwrap();
    assert_eq!(s.next_after(T0), Some(ms("2026-01-01T08:00:00Z")));
    assert_eq!(
        s.next_after(ms("2026-07-01T00:00:00Z")),
        Some(ms("2026-07-01T07:00:00Z"))
    );
    assert_eq!(s.to_string(), "cron \"0 9 * * *\" Europe/Paris");
    let spec = s.spec().clone();
    let back = Schedule::from_spec(&spec, Missed::Skip).unwrap();
    assert_eq!(back.next_after(T0), s.next_after(T0));
    assert_eq!(back.missed(), Missed::Skip);
}

#[test]
fn daylight_saving_changes_skip_to_after_the_gap_and_run_a_repeated_time_once() {
    let s = Schedule::cron("30 2 * * *")
        .unwrap()
        .time_zone("Europe/Paris")
        .unwrap();
    // 2026-03-29: 02:00 → 03:00 in Paris; 02:30 does not exist that day.
    let gap = s.next_after(ms("2026-03-28T23:00:00Z")).unwrap();
    assert_eq!(gap, ms("2026-03-29T01:00:00Z"), "03:00 CEST");
    // 2026-10-25: 03:00 → 02:00; 02:30 happens twice, and runs once.
    let first = s.next_after(ms("2026-10-24T23:00:00Z")).unwrap();
    assert_eq!(first, ms("2026-10-25T00:30:00Z"), "02:30 CEST");
    let next = s.next_after(first).unwrap();
    assert_eq!(next, ms("2026-10-26T01:30:00Z"), "the next day, 02:30 CET");
}

#[test]
fn bad_schedules_say_what_is_wrong() {
    let e = Schedule::cron("61 * * * *").unwrap_err();
    assert!(matches!(&e, ScheduleError::InvalidCron { expr, .. } if expr == "61 * * * *"));
    assert!(e.to_string().contains("61 * * * *"), "{e}");
    assert!(matches!(
        Schedule::cron("every hour"),
        Err(ScheduleError::InvalidCron { .. })
    ));
    assert!(matches!(
        Schedule::cron(""),
        Err(ScheduleError::InvalidCron { .. })
    ));
    assert_eq!(
        Schedule::cron("0 0 30 2 *").unwrap_err(),
        ScheduleError::NeverMatches("0 0 30 2 *".into())
    );
    assert_eq!(
        Schedule::cron("0 * * * *")
            .unwrap()
            .time_zone("Mars/Olympus")
            .unwrap_err(),
        ScheduleError::UnknownTimeZone("Mars/Olympus".into())
    );
    assert_eq!(
        Schedule::every(Duration::from_secs(60))
            .time_zone("UTC")
            .unwrap_err(),
        ScheduleError::TimeZoneOnInterval
    );
    assert_eq!(
        Schedule::every(Duration::from_millis(999)).check(),
        Err(ScheduleError::IntervalTooShort(Duration::from_millis(999)))
    );
    for n in [0, MAX_CATCH_UP + 1] {
        assert_eq!(
            Schedule::every(Duration::from_secs(1))
                .on_missed(Missed::CatchUp(n))
                .check(),
            Err(ScheduleError::CatchUpOutOfRange(n))
        );
    }
}

#[test]
fn due_ticks_follow_the_policy() {
    let hourly = Schedule::every(Duration::from_secs(3600));
    // Nothing due before the next tick.
    assert_eq!(
        hourly.due(T0, T0 + H - 1, T0),
        Due {
            fire: vec![],
            cursor: T0
        }
    );
    // One tick came due while the engine ran: it fires, whatever the policy.
    for missed in [Missed::Skip, Missed::RunOnce, Missed::CatchUp(3)] {
        let s = hourly.clone().on_missed(missed);
        assert_eq!(s.due(T0, T0 + H + 5, T0).fire, vec![T0 + H], "{missed}");
    }
    // Five ticks missed while no engine ran (started after them).
    let started = T0 + 5 * H + 10;
    let now = started + 1;
    let run_once = hourly.clone().due(T0, now, started);
    assert_eq!(run_once.fire, vec![T0 + 5 * H]);
    assert_eq!(run_once.cursor, T0 + 5 * H);
    let skip = hourly.clone().on_missed(Missed::Skip).due(T0, now, started);
    assert_eq!(skip.fire, Vec::<u64>::new());
    assert_eq!(skip.cursor, T0 + 5 * H);
    let catch_up = hourly
        .clone()
        .on_missed(Missed::CatchUp(3))
        .due(T0, now, started);
    assert_eq!(catch_up.fire, vec![T0 + 3 * H, T0 + 4 * H, T0 + 5 * H]);
    // A catch-up larger than the gap runs every missed tick, no older one.
    let all = hourly.on_missed(Missed::CatchUp(10)).due(T0, now, started);
    assert_eq!(all.fire, (1..=5).map(|k| T0 + k * H).collect::<Vec<_>>());
}

#[test]
fn due_cron_ticks_walk_back_across_the_gap() {
    let s = Schedule::cron("30 * * * *")
        .unwrap()
        .on_missed(Missed::CatchUp(2));
    let due = s.due(T0, T0 + 4 * H, T0 + 4 * H);
    assert_eq!(due.fire, vec![T0 + 2 * H + H / 2, T0 + 3 * H + H / 2]);
    assert_eq!(due.cursor, T0 + 3 * H + H / 2);
}
