//! Times and durations as the command and the dashboard show them (UTC,
//! no time-zone database): one implementation for both.

/// The civil date (year, month, day) of `days` since 1970-01-01
/// (H. Hinnant's algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// An epoch-ms time as `YYYY-MM-DD HH:MM:SS` UTC.
pub fn time(ms: u64) -> String {
    let secs = ms / 1000;
    let (y, m, d) = civil((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// An epoch-ms time as `YYYY-MM-DD HH:MM:SS.mmm` UTC.
pub fn time_ms(ms: u64) -> String {
    format!("{}.{:03}", time(ms), ms % 1000)
}

/// `YYYY-MM-DDTHH:MM[:SS]` (UTC, as a `datetime-local` field gives it) as
/// epoch ms; `None` when it is not one.
pub fn parse_time(s: &str) -> Option<u64> {
    let (date, clock) = s.trim().split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut c = clock.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, min) = (c.next()??, c.next()??);
    let sec = c.next().unwrap_or(Some(0))?;
    if !(1970..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..=23).contains(&h)
        || !(0..=59).contains(&min)
        || !(0..=59).contains(&sec)
    {
        return None;
    }
    // Days from civil (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + min * 60 + sec;
    u64::try_from(secs).ok().map(|s| s * 1000)
}

/// A duration in ms, short: `850ms`, `12.3s`, `4m05s`, `2h10m`.
pub fn age(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// Now, epoch ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(time_ms(0), "1970-01-01 00:00:00.000");
        assert_eq!(time_ms(1_700_000_000_123), "2023-11-14 22:13:20.123");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00");
    }

    #[test]
    fn times_read_back() {
        for ms in [0, 951_782_400_000, 1_700_000_000_000, 4_102_444_799_000] {
            let shown = time(ms).replace(' ', "T");
            assert_eq!(parse_time(&shown), Some(ms), "{shown}");
        }
        assert_eq!(parse_time("2023-11-14T22:13"), Some(1_699_999_980_000));
        assert_eq!(parse_time("2023-13-01T00:00"), None);
        assert_eq!(parse_time("yesterday"), None);
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(850), "850ms");
        assert_eq!(age(12_340), "12.3s");
        assert_eq!(age(245_000), "4m05s");
        assert_eq!(age(7_800_000), "2h10m");
    }
}
