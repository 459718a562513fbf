//! Aligned tables and time formatting.

use comfy_table::presets::NOTHING;

/// An aligned table with a header row.
pub struct Table(comfy_table::Table);

impl Table {
    /// A table with these column names.
    pub fn new<const N: usize>(header: [&str; N]) -> Self {
        Self::with_shard(false, &header)
    }

    /// Add a row.
    pub fn row<const N: usize>(&mut self, cells: [String; N]) {
        self.0.add_row(cells.to_vec());
    }

    /// A table with these column names, after a `SHARD` column if `shard`
    /// (a listing merged over a shard set).
    pub fn with_shard(shard: bool, header: &[&str]) -> Self {
        let mut names = Vec::with_capacity(header.len() + 1);
        if shard {
            names.push("SHARD");
        }
        names.extend_from_slice(header);
        let mut t = comfy_table::Table::new();
        t.load_preset(NOTHING).set_header(names);
        Self(t)
    }

    /// Add a row of a [`Table::with_shard`] table: `shard` first when the
    /// row has one.
    pub fn shard_row<const N: usize>(&mut self, shard: Option<usize>, cells: [String; N]) {
        let mut row = Vec::with_capacity(N + 1);
        if let Some(s) = shard {
            row.push(s.to_string());
        }
        row.extend(cells);
        self.0.add_row(row);
    }

    /// The table as text, without trailing spaces.
    pub fn render(&self) -> String {
        self.0
            .lines()
            .map(|l| l.trim_end().to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// An epoch-ms time as `YYYY-MM-DD HH:MM:SS.mmm` UTC.
pub fn time(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00.000");
        assert_eq!(time(1_700_000_000_123), "2023-11-14 22:13:20.123");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00.000");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(850), "850ms");
        assert_eq!(age(12_340), "12.3s");
        assert_eq!(age(245_000), "4m05s");
    }
}
