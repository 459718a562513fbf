//! `gaffer job ID`'s document: [`JobDetail`] and its attempts.

use serde::Serialize;

/// `gaffer job ID`: one job.
#[derive(Debug, Clone, Serialize)]
pub struct JobDetail {
    /// The job's id (its run id).
    pub id: String,
    /// The queue job id of its current or last delivery.
    pub job_id: Option<String>,
    /// The job type (or pipeline).
    pub job_type: String,
    /// As in [`JobRow::state`](super::JobRow::state).
    pub state: crate::listing::ListedState,
    /// Attempts started or used.
    pub attempts: u32,
    /// When it was submitted (live runs).
    pub submitted_at_ms: Option<u64>,
    /// When its delivery was enqueued.
    pub enqueued_at_ms: Option<u64>,
    /// When its delivery was last claimed.
    pub claimed_at_ms: Option<u64>,
    /// When it is due (scheduled jobs).
    pub run_at_ms: Option<u64>,
    /// When it ended.
    pub finished_at_ms: Option<u64>,
    /// The output, decoded to JSON (succeeded jobs with an inline output).
    pub output: Option<serde_json::Value>,
    /// The object path of an output too large for KV.
    pub output_blob: Option<String>,
    /// The failure message.
    pub error: Option<String>,
    /// `Transient` or `Permanent` (failed jobs).
    pub failure_kind: Option<String>,
    /// The batch of a bulk item.
    pub batch: Option<String>,
    /// The item key of a bulk item.
    pub key: Option<String>,
    /// Each settled claim, in order: the queue's attempt history, or for a
    /// job that succeeded after earlier claims, the one its outcome record kept.
    pub history: Vec<AttemptRow>,
    /// The ids of the follow-up jobs its success created (`ctx.then`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub followups: Vec<String>,
    /// The workflow whose step it is (`gaffer retry --workflow` retries
    /// it; the step alone cannot be), while the queue keeps its delivery.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Its step's name in [`Self::workflow`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// A waiting job: the signal it waits for (`gaffer signal ID NAME`);
    /// its wait times out at `run_at_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// A job in a durable sleep (`JobContext::sleep`): it wakes at
    /// `run_at_ms`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sleeping: bool,
    /// How many times its run snoozed (`JobContext::snooze`): its run
    /// record's count while it lives; once it ended, its snoozed claims
    /// among those its outcome record keeps (the last 64).
    #[serde(skip_serializing_if = "is_zero")]
    pub snoozes: u32,
    /// The debounce key its run was debounced by (`SubmitOptions::debounce`),
    /// while the queue keeps its job (or its burst's timer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debounced: Option<String>,
    /// An open burst's submissions so far (its run has not started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debounced_submits: Option<u32>,
    /// Whether `gaffer retry ID` can run it again: it failed or was
    /// cancelled, the queue keeps its payload (its dead letter), and it is
    /// neither a workflow step (retry the workflow) nor a batch item (run
    /// the batch again).
    pub retryable: bool,
    /// Its payload as the queue keeps it (MessagePack for jobs submitted
    /// through the API), while the queue keeps its delivery; not in the
    /// command's JSON.
    #[serde(skip)]
    pub payload: Option<Vec<u8>>,
    /// The object path of a payload too large for its record.
    #[serde(skip)]
    pub payload_ref: Option<String>,
    /// When the payload shown is that of an earlier delivery (the dead
    /// letter of an attempt series an operator retried): its queue job id.
    #[serde(skip)]
    pub payload_source: Option<String>,
    /// Its tags (`SubmitOptions::tags`), from its run or outcome record.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// One settled attempt.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRow {
    /// The queue's claim number (it counts interrupted and released claims,
    /// which the job's `attempts` do not).
    pub attempt: u32,
    /// How the claim ended: `failed` (retried), `released` (given back
    /// without spending an attempt), `lease-expired`, `interrupted` (the
    /// process exited), `revived` (an operator requeued the dead job),
    /// `dead-lettered`, `completed`.
    pub outcome: String,
    /// When it was claimed.
    pub claimed_at_ms: Option<u64>,
    /// When it was settled.
    pub recorded_at_ms: u64,
    /// Its error.
    pub error: Option<String>,
}

/// Whether a count is zero (a field left out of the JSON then).
fn is_zero(n: &u32) -> bool {
    *n == 0
}
