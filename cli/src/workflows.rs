//! Workflows as text: the listing (`gaffer workflows`) and one workflow's
//! graph (`gaffer workflow ID`).

use gaffer_ops::report::{StepCounts, StepRow, WorkflowDetail, WorkflowRow, Workflows};

use crate::report::Render;
use crate::table::{Table, time};

/// Most dependency names a step's row shows (the JSON has them all).
const DEPS_SHOWN: usize = 8;

/// The ended steps by result, and the others by where they are:
/// `2 succeeded, 1 running, 1 blocked`; zeros left out.
fn counts_text(c: &StepCounts) -> String {
    let parts: Vec<String> = [
        (c.succeeded, "succeeded"),
        (c.failed, "failed"),
        (c.cancelled, "cancelled"),
        (c.running, "running"),
        (c.queued, "queued"),
        (c.scheduled, "scheduled"),
        (c.waiting, "waiting"),
        (c.blocked, "blocked"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    parts.join(", ")
}

/// What a step needs: `← a, b`, `(cleanup)` for a step that runs
/// whichever way they end; empty for a step that needs none.
pub fn needs_text(step: &StepRow) -> String {
    if step.deps.is_empty() {
        return String::new();
    }
    let mut names = step
        .deps
        .iter()
        .take(DEPS_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if step.deps.len() > DEPS_SHOWN {
        names.push_str(&format!(" (+{} more)", step.deps.len() - DEPS_SHOWN));
    }
    let cleanup = if step.regardless { " (cleanup)" } else { "" };
    format!("← {names}{cleanup}")
}

impl Render for Workflows {
    fn render(&self) -> String {
        let mut s = if self.workflows.is_empty() {
            "no workflows".to_string()
        } else {
            let mut t = Table::new([
                "ID",
                "NAME",
                "CREATED",
                "STEPS",
                "DONE",
                "FAILED",
                "CANCELLED",
                "ACTIVE",
                "BLOCKED",
                "STATE",
            ]);
            for w in &self.workflows {
                let c = &w.counts;
                t.row([
                    w.id.clone(),
                    w.name.clone(),
                    time(w.created_at_ms),
                    w.steps.to_string(),
                    c.succeeded.to_string(),
                    c.failed.to_string(),
                    c.cancelled.to_string(),
                    c.active().to_string(),
                    c.blocked.to_string(),
                    w.state.to_string(),
                ]);
            }
            t.render()
        };
        if let Some(next) = &self.next {
            s.push_str(&format!("\n(more: pass --after {next})"));
        }
        s
    }
}

fn head(w: &WorkflowRow) -> String {
    let mut t = Table::new(["FIELD", "VALUE"]);
    t.row(["id".into(), w.id.clone()]);
    t.row(["name".into(), w.name.clone()]);
    t.row(["state".into(), w.state.into()]);
    t.row(["created".into(), time(w.created_at_ms)]);
    if let Some(at) = w.ended_at_ms {
        t.row(["ended".into(), time(at)]);
    }
    if w.cancelled {
        t.row(["cancelled".into(), "yes".into()]);
    }
    t.row([
        "steps".into(),
        format!("{} ({})", w.steps, counts_text(&w.counts)),
    ]);
    t.render()
}

impl Render for WorkflowDetail {
    fn render(&self) -> String {
        let mut t = Table::new(["STEP", "STATE", "TYPE", "JOB", "NEEDS"]);
        for s in &self.steps {
            t.row([
                s.name.clone(),
                s.state.into(),
                s.job_type.clone(),
                s.job.clone(),
                needs_text(s),
            ]);
        }
        format!("{}\n\n{}", head(&self.workflow), t.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(deps: &[&str], regardless: bool) -> StepRow {
        StepRow {
            name: "s".into(),
            state: "blocked",
            job_type: "t".into(),
            job: "j".into(),
            deps: deps.iter().map(|d| d.to_string()).collect(),
            regardless,
        }
    }

    #[test]
    fn a_step_shows_what_it_needs() {
        assert_eq!(needs_text(&step(&[], false)), "");
        assert_eq!(needs_text(&step(&["a", "b"], false)), "← a, b");
        assert_eq!(needs_text(&step(&["sum"], true)), "← sum (cleanup)");
        let many: Vec<String> = (0..10).map(|n| format!("l{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            needs_text(&step(&many, false)),
            "← l0, l1, l2, l3, l4, l5, l6, l7 (+2 more)"
        );
    }

    #[test]
    fn counts_leave_zeros_out() {
        let c = StepCounts {
            succeeded: 2,
            running: 1,
            blocked: 3,
            ..StepCounts::default()
        };
        assert_eq!(counts_text(&c), "2 succeeded, 1 running, 3 blocked");
    }
}
