//! Jobs finished per minute over the last hour, as stacked SVG bars by
//! result (succeeded, failed, cancelled): a few lines of our own.

use std::collections::BTreeMap;

use gaffer_ops::{OpsError, Store};
use maud::{Markup, html};

/// The results a chart stacks, in order.
pub const RESULTS: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// What the server has counted of one store's finished-jobs index: per
/// (type segment, result), how far it has read and how many jobs ended in
/// each minute of the last hour. Each refresh reads only the entries
/// added since (a job counts in the minute it ended, also if retried
/// since), so a page that refreshes every 1.5 s costs a scan of what
/// finished meanwhile, not of the hour.
#[derive(Debug, Default)]
pub struct Counted {
    series: BTreeMap<(String, &'static str), Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    last: Option<Vec<u8>>,
    /// Minute start (epoch ms) → jobs.
    minutes: BTreeMap<u64, u64>,
}

impl Counted {
    /// Read the index entries added since the last update, from `from_ms`
    /// on, at most `budget` per (type, result); forget minutes before
    /// `from_ms`. Whether it caught up (read every entry).
    pub async fn update(
        &mut self,
        store: &Store,
        from_ms: u64,
        budget: usize,
    ) -> Result<bool, OpsError> {
        let mut caught_up = true;
        for seg in store.ended_types().await? {
            for result in RESULTS {
                let tally = self.series.entry((seg.clone(), result)).or_default();
                let mut read = 0;
                loop {
                    let step = store
                        .scan_ended(
                            &seg,
                            result,
                            from_ms,
                            tally.last.as_deref(),
                            (budget - read).min(1000),
                        )
                        .await?;
                    read += step.at_ms.len();
                    for at in step.at_ms {
                        *tally.minutes.entry(at - at % 60_000).or_default() += 1;
                    }
                    if let Some(last) = step.last {
                        tally.last = Some(last);
                    }
                    if !step.more {
                        break;
                    }
                    if read >= budget {
                        caught_up = false;
                        break;
                    }
                }
                tally.minutes.retain(|m, _| *m >= from_ms);
            }
        }
        Ok(caught_up)
    }

    /// Add the counts to `total` and to each type's series in `per_type`,
    /// minute `i` of a chart being the minute from `from_ms + i` minutes.
    pub fn add_to(
        &self,
        from_ms: u64,
        total: &mut Series,
        per_type: &mut BTreeMap<String, Series>,
    ) {
        for ((seg, result), tally) in &self.series {
            let per_minute: BTreeMap<usize, u64> = tally
                .minutes
                .iter()
                .filter(|(m, _)| **m >= from_ms)
                .map(|(m, n)| (((m - from_ms) / 60_000) as usize, *n))
                .collect();
            if per_minute.is_empty() {
                continue;
            }
            add(total, result, &per_minute);
            add(
                per_type.entry(seg.clone()).or_insert([[0; 3]; MINUTES]),
                result,
                &per_minute,
            );
        }
    }
}

/// Minutes a chart shows.
pub const MINUTES: usize = 60;

/// One chart's data: per minute, (succeeded, failed, cancelled).
pub type Series = [[u64; 3]; MINUTES];

/// Add the counts of `result` to `series`.
pub fn add(series: &mut Series, result: &str, per_minute: &BTreeMap<usize, u64>) {
    let r = match result {
        "succeeded" => 0,
        "failed" => 1,
        _ => 2,
    };
    for (&minute, &n) in per_minute {
        if let Some(slot) = series.get_mut(minute) {
            slot[r] += n;
        }
    }
}

/// The stacked bars of `series`, `w`×`h` pixels, titled `title`.
pub fn draw(title: &str, series: &Series, w: u32, h: u32) -> Markup {
    let top = 16.0;
    let bottom = 14.0;
    let plot = f64::from(h) - top - bottom;
    let max = series
        .iter()
        .map(|m| m.iter().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let total: [u64; 3] = series.iter().fold([0; 3], |mut acc, m| {
        for i in 0..3 {
            acc[i] += m[i];
        }
        acc
    });
    let bw = f64::from(w) / MINUTES as f64;
    let mut rects = Vec::new();
    for (i, m) in series.iter().enumerate() {
        let mut y = top + plot;
        for (k, class) in [(0usize, "s"), (1, "f"), (2, "c")] {
            if m[k] > 0 {
                let hgt = m[k] as f64 / max as f64 * plot;
                y -= hgt;
                rects.push((class, i as f64 * bw, y, hgt, m[k]));
            }
        }
    }
    let width = format!("{:.1}", (bw - 1.0).max(1.0));
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" width=(w) height=(h) viewBox={ "0 0 " (w) " " (h) }
            role="img" aria-label={ (title) ": " (total[0]) " succeeded, " (total[1]) " failed, " (total[2]) " cancelled in the last hour" } {
            text x="2" y="11" { (title) " · " (total[0]) " ok · " (total[1]) " failed · " (total[2]) " cancelled · peak " (max) "/min" }
            @for (class, x, y, hgt, n) in &rects {
                rect class=(class) x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(width) height=(format!("{hgt:.1}")) {
                    title { (n) }
                }
            }
            text x="2" y=(h - 2) { "−60 min" }
            text x=(w - 2) y=(h - 2) text-anchor="end" { "now" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_stack_by_result() {
        let mut s: Series = [[0; 3]; MINUTES];
        add(&mut s, "succeeded", &BTreeMap::from([(59, 4), (70, 9)]));
        add(&mut s, "failed", &BTreeMap::from([(59, 2)]));
        assert_eq!(s[59], [4, 2, 0]);
        let svg = draw("all", &s, 600, 100).into_string();
        assert!(svg.contains("4 ok · 2 failed · 0 cancelled"));
        assert_eq!(svg.matches("<rect").count(), 2);
    }
}
