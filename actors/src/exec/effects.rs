//! Staged effects: KV writes and follow-up jobs a handler asks for, applied
//! atomically with its successful settlement and never otherwise.
//!
//! Clones share one accumulator: the accumulator is attempt-local (it lives for
//! one delivery of one job and is sealed when the job returns), so it is the
//! one `Arc<Mutex<…>>` of the engine. It holds no engine state; see
//! ARCHITECTURE.md, "Shared state".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::error::{EngineError, Result};
use crate::jobs::request::SubmitRequest;
use crate::layout::keys::{self, RESERVED_HEADER_PREFIX, RESERVED_KV_PREFIX};

/// The largest value an effect puts: the KV value cap, less what sealing
/// it under the engine's keyring may add (so a value accepted here is
/// accepted by the store whether or not the engine encrypts).
pub const MAX_EFFECT_VALUE: usize =
    taquba::MAX_KV_VALUE_SIZE - crate::layout::sealed::MAX_SEAL_OVERHEAD;

/// What one attempt staged.
#[derive(Debug, Default)]
pub struct StagedEffects {
    /// KV writes: `Some(v)` puts, `None` deletes.
    pub kv: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Follow-up jobs, with the run id each gets.
    pub followups: Vec<(String, SubmitRequest)>,
}

#[derive(Debug, Default)]
struct Inner {
    staged: StagedEffects,
    sealed: bool,
}

/// A handle to stage KV writes for the successful settlement of one attempt.
#[derive(Debug, Clone, Default)]
pub struct Effects {
    inner: Arc<Mutex<Inner>>,
}

impl Effects {
    /// Stage a put of `value` at `key`: at most [`MAX_EFFECT_VALUE`] bytes
    /// (the KV cap, less the room a sealed value takes).
    pub fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        let (key, value) = (key.into(), value.into());
        if value.len() > MAX_EFFECT_VALUE {
            return Err(EngineError::ValueTooLarge {
                size: value.len(),
                max: MAX_EFFECT_VALUE,
            });
        }
        self.stage(key, Some(value))
    }

    /// Stage a delete of `key`.
    pub fn delete(&self, key: impl Into<Vec<u8>>) -> Result<()> {
        self.stage(key.into(), None)
    }

    fn stage(&self, key: Vec<u8>, value: Option<Vec<u8>>) -> Result<()> {
        if key.starts_with(RESERVED_KV_PREFIX.as_bytes()) {
            return Err(EngineError::ReservedKvKey(
                String::from_utf8_lossy(&key).into_owned(),
            ));
        }
        // A poisoned lock only means another clone panicked mid-stage; the map is
        // still a valid map, so keep using it.
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.sealed {
            return Err(EngineError::EffectsSealed);
        }
        if let Some(existing) = inner.staged.kv.get(&key)
            && existing.is_some() != value.is_some()
        {
            return Err(EngineError::ConflictingKvEffect(
                String::from_utf8_lossy(&key).into_owned(),
            ));
        }
        inner.staged.kv.insert(key, value);
        Ok(())
    }

    /// Stage a follow-up job of the run `parent`: it is created, with its
    /// run record, in the transaction that records the parent's success, and
    /// never otherwise. Returns its run id, derived from the parent's and the
    /// follow-up's position among them (an attempt that stages the same
    /// follow-ups in the same order names them alike; only the attempt that
    /// succeeds creates them). The request's idempotency key and run id are
    /// not used; without a `traceparent` of its own it takes the current
    /// span's (feature `otel`).
    pub fn then(&self, parent: &str, mut request: SubmitRequest) -> Result<String> {
        if let Some(h) = request
            .headers
            .keys()
            .find(|h| h.starts_with(RESERVED_HEADER_PREFIX))
        {
            return Err(EngineError::ReservedHeader(h.clone()));
        }
        if request.traceparent.is_none() {
            request.traceparent = crate::telemetry::current_traceparent();
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.sealed {
            return Err(EngineError::EffectsSealed);
        }
        let run_id = keys::followup_run_id(parent, inner.staged.followups.len());
        inner.staged.followups.push((run_id.clone(), request));
        Ok(run_id)
    }

    /// Seal the handle and take what was staged. Later staging fails with
    /// [`EngineError::EffectsSealed`].
    pub fn seal(&self) -> StagedEffects {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.sealed = true;
        std::mem::take(&mut inner.staged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_validates_keys_values_and_conflicts() {
        let e = Effects::default();
        assert!(matches!(
            e.put("gaffer/x", "v"),
            Err(EngineError::ReservedKvKey(_))
        ));
        assert!(matches!(
            e.put("k", vec![0; taquba::MAX_KV_VALUE_SIZE + 1]),
            Err(EngineError::ValueTooLarge { .. })
        ));
        e.put("k", "v").unwrap();
        e.put("k", "w").unwrap();
        assert!(matches!(
            e.delete("k"),
            Err(EngineError::ConflictingKvEffect(_))
        ));
        e.delete("gone").unwrap();
        let staged = e.seal();
        assert_eq!(staged.kv.get(b"k".as_slice()), Some(&Some(b"w".to_vec())));
        assert_eq!(staged.kv.get(b"gone".as_slice()), Some(&None));
    }

    #[test]
    fn a_sealed_handle_rejects_staging_and_clones_share_one_accumulator() {
        let e = Effects::default();
        let clone = e.clone();
        clone.put("a", "1").unwrap();
        let staged = e.seal();
        assert_eq!(staged.kv.len(), 1);
        assert!(matches!(
            clone.put("b", "2"),
            Err(EngineError::EffectsSealed)
        ));
        assert!(matches!(
            clone.then("p", SubmitRequest::default()),
            Err(EngineError::EffectsSealed)
        ));
    }

    #[test]
    fn follow_ups_are_named_by_parent_and_position() {
        let first = Effects::default();
        let a = first.then("parent", SubmitRequest::default()).unwrap();
        let b = first.then("parent", SubmitRequest::default()).unwrap();
        assert_ne!(a, b);
        assert!(keys::is_valid_id(&a));
        // Another attempt of the same parent names them alike.
        let again = Effects::default();
        assert_eq!(again.then("parent", SubmitRequest::default()).unwrap(), a);
        assert_ne!(
            Effects::default()
                .then("other", SubmitRequest::default())
                .unwrap(),
            a
        );
        let reserved = SubmitRequest {
            headers: [("gaffer.run".to_string(), "x".to_string())].into(),
            ..Default::default()
        };
        assert!(matches!(
            first.then("parent", reserved),
            Err(EngineError::ReservedHeader(_))
        ));
        assert_eq!(first.seal().followups.len(), 2);
    }
}

/// The cost meter of one attempt (`record_cost`): attempt-local like
/// [`Effects`], read once when the attempt returns.
#[derive(Debug, Clone, Default)]
pub struct CostMeter {
    inner: Arc<Mutex<crate::layout::records::Cost>>,
}

impl CostMeter {
    /// Add `amount` to `metric`.
    pub fn record(&self, metric: &str, amount: f64) {
        let mut cost = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *cost.entry(metric.to_string()).or_insert(0.0) += amount;
    }

    /// What was recorded so far.
    pub fn snapshot(&self) -> crate::layout::records::Cost {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
