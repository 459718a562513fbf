//! A step's end and what it decides, as effects of the one transaction
//! that ends the step (its settlement, or a cancel while it is queued).

use std::collections::HashMap;

use taquba::SettlementEffects;

use crate::error::{EngineError, Result};
use crate::jobs::request::SubmitRequest;
use crate::layout::keys;
use crate::layout::records::{self, Outcome, OutcomeRecord, StepOf};
use crate::services::Services;
use crate::workflows::gates::{GateMessage, Plan};
use crate::workflows::graph::Decision;
use crate::workflows::layout::{
    HEADER_STEP, HEADER_WORKFLOW, HeldJob, StepEnd, StepKey, StepRecord, step_run_id,
};

/// Reads of held steps at once, when one end releases many (a fan-out).
const READS_AT_ONCE: usize = 32;

/// Ask the gates what ending `step` with `end` decides. Ends when the
/// steps in flight it depends on end (see `gates`), or with `ShutDown`
/// when the supervisor is gone.
pub(crate) async fn begin(services: &Services, step: &StepOf, end: StepEnd) -> Result<Plan> {
    let gates = services.gates()?;
    let (tx, rx) = ractor::concurrency::oneshot();
    gates
        .send_message(GateMessage::Begin {
            workflow: step.workflow.clone(),
            step: step.step.clone(),
            end,
            reply: tx.into(),
        })
        .map_err(|_| EngineError::ShutDown)?;
    rx.await.map_err(|_| EngineError::ShutDown)?
}

/// `fx` plus the end of `step` (its marker) and what its plan decided:
/// each released step's run record and first job, each cancelled step's
/// outcome record.
pub(crate) async fn with_plan(
    services: &Services,
    mut fx: SettlementEffects,
    step: &StepOf,
    end: StepEnd,
    plan: &Plan,
) -> Result<SettlementEffects> {
    let decided = &plan.decided;
    let wf = step.workflow.as_str();
    fx = fx.kv_put(StepKey::Ended.of(wf, &step.step), vec![end.byte()]);
    if let Some(record) = &plan.completes {
        fx = completed(services, fx, wf, record.clone())?;
    }
    if plan.records.len() != decided.len() {
        return Err(EngineError::CorruptRecord {
            key: String::from_utf8_lossy(&crate::workflows::layout::workflow_dir(wf)).into_owned(),
            reason: crate::layout::error::cause("a decided step has no record"),
        });
    }
    let held = if plan.scan_held {
        scan_held(services, wf, decided).await?
    } else {
        let mut held = Vec::with_capacity(decided.len());
        for chunk in decided.chunks(READS_AT_ONCE) {
            let reads = chunk.iter().map(|(name, _)| read_held(services, wf, name));
            held.extend(futures_util::future::try_join_all(reads).await?);
        }
        held
    };
    let records = plan.records.iter().cloned();
    for (((name, decision), record), job) in decided.iter().zip(records).zip(held) {
        fx = match decision {
            Decision::Release => release(services, fx, wf, name, record, job)?,
            Decision::Cancel(reason) => cancel_held(services, fx, wf, name, &record, &job, reason)?,
        };
    }
    Ok(fx)
}

/// A step's job, opened.
async fn read_held(services: &Services, wf: &str, name: &str) -> Result<HeldJob> {
    let hk = StepKey::Held.of(wf, name);
    let h = services.queue()?.view().kv_get(&hk).await?;
    let h = h.ok_or_else(|| missing(&hk))?;
    let job: HeldJob = records::decode(&hk, &h)?;
    Ok(job.opened(services.keyring())?)
}

/// The jobs of the steps `decided`, in its order, opened: from one scan of
/// the workflow's held jobs.
async fn scan_held(
    services: &Services,
    wf: &str,
    decided: &[(String, Decision)],
) -> Result<Vec<HeldJob>> {
    use futures_util::TryStreamExt;
    let queue = services.queue()?;
    let wanted: std::collections::HashSet<&str> =
        decided.iter().map(|(name, _)| name.as_str()).collect();
    let prefix = [crate::workflows::layout::workflow_dir(wf).as_slice(), b"h/"].concat();
    let view = queue.view();
    let entries = view.kv_entries(&prefix, .., taquba::KvOrder::Ascending, 1000);
    let mut entries = std::pin::pin!(entries);
    let mut found: HashMap<String, HeldJob> = HashMap::with_capacity(decided.len());
    while let Some((key, value)) = entries.try_next().await? {
        let Some((_, name)) = StepKey::parse(wf, &key) else {
            continue;
        };
        if wanted.contains(name) {
            let job: HeldJob = records::decode(&key, &value)?;
            found.insert(name.to_string(), job.opened(services.keyring())?);
        }
    }
    decided
        .iter()
        .map(|(name, _)| {
            found
                .remove(name)
                .ok_or_else(|| missing(&StepKey::Held.of(wf, name)))
        })
        .collect()
}

fn missing(key: &[u8]) -> EngineError {
    EngineError::CorruptRecord {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: crate::layout::error::cause("a workflow step's record is missing"),
    }
}

/// A step's record and its job.
pub(crate) async fn read_step(
    services: &Services,
    wf: &str,
    name: &str,
) -> Result<(StepRecord, HeldJob)> {
    let queue = services.queue()?;
    let (gk, hk) = (StepKey::Graph.of(wf, name), StepKey::Held.of(wf, name));
    let (g, h) = tokio::try_join!(queue.view().kv_get(&gk), queue.view().kv_get(&hk))?;
    let g = g.ok_or_else(|| missing(&gk))?;
    let h = h.ok_or_else(|| missing(&hk))?;
    let job: HeldJob = records::decode(&hk, &h)?;
    Ok((records::decode(&gk, &g)?, job.opened(services.keyring())?))
}

/// The request that creates step `name`'s job.
pub(crate) fn request(wf: &str, name: &str, record: StepRecord, job: HeldJob) -> SubmitRequest {
    let mut headers: HashMap<String, String> = job.headers;
    headers.insert(HEADER_WORKFLOW.into(), wf.to_string());
    headers.insert(HEADER_STEP.into(), name.to_string());
    SubmitRequest {
        job_type: record.job_type,
        payload: job.payload,
        idempotency_key: None,
        run_id: None,
        headers,
        priority: job.priority,
        max_attempts: job.max_attempts,
        run_at: None,
        traceparent: None,
        timeout: job.timeout_ms.map(std::time::Duration::from_millis),
        unique_for: None,
        debounce: None,
        tags: job.tags,
    }
}

/// `fx` plus the creation of step `name`'s job (its run record, naming the
/// step, and its first queue job) and its released marker.
pub(crate) fn release(
    services: &Services,
    fx: SettlementEffects,
    wf: &str,
    name: &str,
    record: StepRecord,
    job: HeldJob,
) -> Result<SettlementEffects> {
    let req = request(wf, name, record, job);
    let step = StepOf {
        workflow: wf.to_string(),
        step: name.to_string(),
    };
    Ok(services
        .step_creation_effects(fx, &req, &step_run_id(wf, name), Some(step))?
        .kv_put(StepKey::Released.of(wf, name), Vec::new()))
}

/// `fx` plus the end of the held step `name` as cancelled, with `reason`:
/// its outcome record (as a job cancelled before it ran) and its marker.
pub(crate) fn cancel_held(
    services: &Services,
    fx: SettlementEffects,
    wf: &str,
    name: &str,
    record: &StepRecord,
    job: &HeldJob,
    reason: &str,
) -> Result<SettlementEffects> {
    let run_id = step_run_id(wf, name);
    let outcome = OutcomeRecord {
        job_id: String::new(),
        job_type: record.job_type.clone(),
        input_hash: keys::input_hash(&record.job_type, &job.payload),
        attempts: 0,
        finished_at_ms: services.clock().now_ms(),
        outcome: Outcome::Cancelled,
        history: Vec::new(),
        followups: Vec::new(),
        reason: Some(reason.to_string()),
        // Its job was never created, so its tags were never indexed.
        tags: None,
    };
    let mut fx = fx;
    let end = services.terminal_effects(&run_id, &outcome)?;
    fx.kv_writes.extend(end.kv_writes);
    fx.kv_deletes.extend(end.kv_deletes);
    fx.expiry_entries.extend(end.expiry_entries);
    Ok(fx.kv_put(StepKey::Ended.of(wf, name), vec![StepEnd::Cancelled.byte()]))
}

/// `fx` plus the end of workflow `wf` (every step ended): its record with
/// the end time and, under the engine's retention, its expiry entry.
pub(crate) fn completed(
    services: &Services,
    fx: SettlementEffects,
    wf: &str,
    mut record: crate::workflows::layout::WorkflowRecord,
) -> Result<SettlementEffects> {
    let now = services.clock().now_ms();
    record.ended_at_ms = Some(now);
    let fx = fx.kv_put(
        crate::workflows::layout::workflow_key(wf),
        records::encode(&record)?,
    );
    Ok(if services.settings().retention.is_some() {
        fx.expiry_entry(services.workflow_expiry(), now, wf.as_bytes())
    } else {
        fx
    })
}
