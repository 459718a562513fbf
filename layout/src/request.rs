//! The one request to create a job: what the engine's submit, a client's
//! inbox entry, a follow-up (`Effects::then`), a batch's completion job, a
//! periodic tick, a workflow step and a shard's router are made of.
//!
//! It is also the intake's wire type (the payload of
//! [`IntakeOp::Submit`](crate::intake::IntakeOp::Submit)), so its encoding
//! is stored: the field names, their order and what each encodes as are
//! fixed (`run_at` as `run_at_ms`, epoch milliseconds; `timeout` as
//! `timeout_ms`), and a field added later must have a `serde(default)`.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::EngineError;

/// A job to create, as bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitRequest {
    /// The run id of an unkeyed job, chosen by its submitter (a client in
    /// another process, which must know the id before the engine sees the
    /// request): submissions with one run id are one job, as with a key.
    /// `None` (the usual case in process) makes a fresh one. Ignored with a
    /// key (a client sends the key's run id, which is the same).
    #[serde(default)]
    pub run_id: Option<String>,
    /// Job type name; routes the job to its handler.
    pub job_type: String,
    /// The encoded job.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
    /// Idempotency key: submissions with one key are one job.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Headers stored on the job (no `gaffer.` prefix).
    #[serde(default)]
    pub headers: HashMap<String, String>,
    /// Priority (lower is claimed first); `None` = queue default.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Attempt limit; `None` = queue default.
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// Earliest time to run; `None` = now. Travels as epoch milliseconds.
    #[serde(default, rename = "run_at_ms", with = "epoch_ms_opt")]
    pub run_at: Option<SystemTime>,
    /// The W3C `traceparent` of the submitter's span, which each attempt's
    /// span becomes a child of (feature `otel`). `None` = the span current
    /// at the engine's submit, if it has an OpenTelemetry context. Set by a
    /// submitter in another process (the client), whose span is not there.
    #[serde(default)]
    pub traceparent: Option<String>,
    /// Each attempt's timeout (beats its type's `JobOptions::timeout`);
    /// `None` = its type's. Travels as milliseconds.
    #[serde(
        default,
        rename = "timeout_ms",
        with = "millis_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout: Option<Duration>,
    /// The job's tags (`SubmitOptions::tags`): stored with it and indexed
    /// (see [`tags`](crate::tags)). Left out when empty, so an untagged
    /// request encodes as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// At most one job of its key per period of this length
    /// (`SubmitOptions::unique_for`): the submitter or the engine fixes the
    /// period with [`pin_period`](Self::pin_period) before the job's id is
    /// known, which leaves this `None`. Travels as milliseconds.
    #[serde(
        default,
        rename = "unique_for_ms",
        with = "millis_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub unique_for: Option<Duration>,
    /// Debounce (`SubmitOptions::debounce`): submissions of one key within
    /// a window are one run, after the burst. `None`: a job of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<Debounce>,
}

/// How a submission is debounced: the burst of its key it joins (or
/// starts), and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Debounce {
    /// The key: submissions of one job type and key within a window are
    /// one burst.
    pub key: String,
    /// The quiet the burst waits for: its run starts this long after its
    /// last submission, milliseconds.
    pub window_ms: u64,
    /// Keep the burst's first submission (its payload and options), not
    /// its last.
    #[serde(default)]
    pub leading: bool,
    /// The longest a burst is put off from its first submission,
    /// milliseconds; `None`: the engine's `Settings::debounce_max_delay`.
    #[serde(default)]
    pub max_delay_ms: Option<u64>,
}

impl SubmitRequest {
    /// Refuse a debounced request whose other options its burst decides:
    /// a key, a run id of its own (a client's request names one; pass
    /// `allow_run_id`), a due time; and a key not of 1-256 bytes.
    pub fn check_debounce(&self, allow_run_id: bool) -> Result<(), EngineError> {
        let Some(d) = &self.debounce else {
            return Ok(());
        };
        let refuse = |what: &str| {
            Err(EngineError::InvalidSubmitOptions(format!(
                "a debounced submission cannot have {what}: its burst decides its job"
            )))
        };
        if self.idempotency_key.is_some() {
            return refuse("an idempotency key");
        }
        if self.run_id.is_some() && !allow_run_id {
            return refuse("a run id");
        }
        if self.run_at.is_some() {
            return refuse("a due time (run_at)");
        }
        if d.key.is_empty() || d.key.len() > 256 {
            return Err(EngineError::InvalidSubmitOptions(format!(
                "a debounce key is 1-256 bytes, not {}",
                d.key.len()
            )));
        }
        if d.window_ms == 0 {
            return Err(EngineError::InvalidSubmitOptions(
                "a debounce window is at least 1 ms".into(),
            ));
        }
        Ok(())
    }

    /// Fix the period of a request unique for one: its key (its
    /// idempotency key, else `{type}:{hex sha256(payload)}`, the key
    /// `payload_idempotency_key` derives) becomes `{key}@{period}ms#{n}`,
    /// `n` the number of whole periods from the epoch to `now_ms`, so
    /// submissions in one period are one job (its id that key's) and the
    /// next period's run again. A request with no period is left as it is.
    ///
    /// Errors: [`EngineError::InvalidSubmitOptions`] for a period under a
    /// millisecond.
    pub fn pin_period(&mut self, now_ms: u64) -> Result<(), EngineError> {
        let Some(period) = self.unique_for.take() else {
            return Ok(());
        };
        let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        if period_ms == 0 {
            return Err(EngineError::InvalidSubmitOptions(format!(
                "unique_for must be at least 1 ms, not {period:?}"
            )));
        }
        let key = match self.idempotency_key.take() {
            Some(key) => key,
            None => format!(
                "{}:{}",
                self.job_type,
                crate::keys::hex_sha256(&self.payload)
            ),
        };
        self.idempotency_key = Some(format!("{key}@{period_ms}ms#{}", now_ms / period_ms));
        Ok(())
    }
}

/// Milliseconds since the epoch of `t` (0 before it).
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `Option<SystemTime>` as `Option<u64>` epoch milliseconds.
mod epoch_ms_opt {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        t: &Option<SystemTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        t.map(super::epoch_ms).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<SystemTime>, D::Error> {
        match Option::<u64>::deserialize(d)? {
            None => Ok(None),
            Some(ms) => UNIX_EPOCH
                .checked_add(Duration::from_millis(ms))
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom("run_at_ms is past this platform's clock")),
        }
    }
}

/// `Option<Duration>` as `Option<u64>` milliseconds.
mod millis_opt {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        t.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The intake's submission as every engine before the one request type
    /// encoded it (`IntakeRequest`): the stored bytes must not change.
    #[derive(Serialize, Deserialize)]
    struct Before {
        run_id: String,
        job_type: String,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        idempotency_key: Option<String>,
        headers: HashMap<String, String>,
        priority: Option<u32>,
        max_attempts: Option<u32>,
        run_at_ms: Option<u64>,
        traceparent: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    }

    fn before(timeout_ms: Option<u64>) -> Before {
        Before {
            run_id: "01JREQUEST0000000000000000".into(),
            job_type: "square".into(),
            payload: vec![0x81, 0xA1, b'x', 0x09],
            idempotency_key: Some("k".into()),
            headers: HashMap::from([("tenant".into(), "acme".into())]),
            priority: Some(42),
            max_attempts: Some(7),
            run_at_ms: Some(4_102_444_800_123),
            traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
            timeout_ms,
        }
    }

    fn after(timeout: Option<Duration>) -> SubmitRequest {
        let b = before(None);
        SubmitRequest {
            run_id: Some(b.run_id),
            job_type: b.job_type,
            payload: b.payload,
            idempotency_key: b.idempotency_key,
            headers: b.headers,
            priority: b.priority,
            max_attempts: b.max_attempts,
            run_at: Some(UNIX_EPOCH + Duration::from_millis(4_102_444_800_123)),
            traceparent: b.traceparent,
            timeout,
            tags: Vec::new(),
            unique_for: None,
            debounce: None,
        }
    }

    #[test]
    fn a_request_encodes_as_the_intake_request_did_and_reads_it_back() {
        for (old, new) in [
            (before(None), after(None)),
            (before(Some(1234)), after(Some(Duration::from_millis(1234)))),
        ] {
            let old_bytes = rmp_serde::to_vec_named(&old).unwrap();
            assert_eq!(rmp_serde::to_vec_named(&new).unwrap(), old_bytes);
            let read: SubmitRequest = rmp_serde::from_slice(&old_bytes).unwrap();
            assert_eq!(read, new);
        }
    }

    #[test]
    fn a_due_time_past_the_clock_is_refused_not_a_panic() {
        let mut old = before(None);
        old.run_at_ms = Some(u64::MAX);
        let bytes = rmp_serde::to_vec_named(&old).unwrap();
        // Whether the platform's clock reaches it or not, decoding answers.
        let _ = rmp_serde::from_slice::<SubmitRequest>(&bytes);
    }
}
