//! `gaffer job ID` as a table.

use super::*;

impl Render for JobDetail {
    fn render(&self) -> String {
        let opt = |v: Option<u64>| v.map(time).unwrap_or_default();
        let mut t = Table::new(["FIELD", "VALUE"]);
        let mut kv = |k: &str, v: String| {
            if !v.is_empty() {
                t.row([k.to_string(), v]);
            }
        };
        kv("id", self.id.clone());
        kv("job id", self.job_id.clone().unwrap_or_default());
        kv("type", self.job_type.clone());
        kv("state", self.state.to_string());
        kv(
            "waiting for",
            self.waiting_for
                .as_ref()
                .map(|s| format!("the signal `{s}` (gaffer signal ID {s} JSON)"))
                .unwrap_or_default(),
        );
        if self.sleeping {
            kv("sleeping", "until its due time (JobContext::sleep)".into());
        }
        if let Some(key) = &self.debounced {
            let burst = self
                .debounced_submits
                .map(|n| format!(" (its burst open: {n} submissions so far)"))
                .unwrap_or_default();
            kv("debounced by", format!("the key `{key}`{burst}"));
        }
        kv("attempts", self.attempts.to_string());
        if self.snoozes > 0 {
            let times = if self.snoozes == 1 { "time" } else { "times" };
            kv("snoozed", format!("{} {times}", self.snoozes));
        }
        kv("tags", self.tags.join(" "));
        kv("batch", self.batch.clone().unwrap_or_default());
        kv("key", self.key.clone().unwrap_or_default());
        kv(
            "workflow",
            match (&self.workflow, &self.step) {
                (Some(w), Some(s)) => format!("{w} (step `{s}`)"),
                (Some(w), None) => w.clone(),
                _ => String::new(),
            },
        );
        kv("submitted", opt(self.submitted_at_ms));
        kv("enqueued", opt(self.enqueued_at_ms));
        kv("claimed", opt(self.claimed_at_ms));
        let due = if self.waiting_for.is_some() {
            "times out"
        } else if self.sleeping {
            "wakes at"
        } else {
            "due at"
        };
        kv(due, opt(self.run_at_ms));
        kv("finished", opt(self.finished_at_ms));
        kv(
            "output",
            self.output
                .as_ref()
                .map(|o| o.to_string())
                .unwrap_or_default(),
        );
        kv("output blob", self.output_blob.clone().unwrap_or_default());
        kv("failure", self.failure_kind.clone().unwrap_or_default());
        kv("error", self.error.clone().unwrap_or_default());
        kv("follow-ups", self.followups.join(" "));
        if self.state.ended_unsuccessfully() {
            let retry = if self.retryable {
                "gaffer retry ID".to_string()
            } else if let Some(w) = &self.workflow {
                format!("with its workflow: gaffer retry --workflow {w}")
            } else if let Some(b) = &self.batch {
                format!("with its batch (`{b}`): run it again")
            } else {
                "no: the queue no longer keeps its payload".to_string()
            };
            kv("retry", retry);
        }
        let mut s = t.render();
        if !self.history.is_empty() {
            let mut h = Table::new(["ATTEMPT", "OUTCOME", "CLAIMED", "SETTLED", "ERROR"]);
            for a in &self.history {
                h.row([
                    a.attempt.to_string(),
                    a.outcome.clone(),
                    a.claimed_at_ms.map(time).unwrap_or_default(),
                    time(a.recorded_at_ms),
                    a.error.clone().unwrap_or_default(),
                ]);
            }
            s.push_str("\n\n");
            s.push_str(&h.render());
        }
        s
    }
}
