//! What a running step reads of the steps it needs (`JobContext::dep` and
//! `deps`): its own record's dependency list, then their outcome records
//! straight from the store, many at once.
//!
//! A dependency's outcome is read as committed, without the waiters'
//! check that its commit is durable (`Engine::outcome`'s peek): a step's
//! job is created by the transaction that ends its last dependency (or a
//! later one, a retry's), and every other dependency ended in an earlier
//! transaction, so a step that runs sees its dependencies' ends committed
//! no later than its own creation. A name the step does not declare, or a
//! record not found, is asked the ordinary way (the caller falls back).

use crate::error::{EngineError, Result};
use crate::layout::records::{self, OutcomeRecord, StepOf};
use crate::services::Services;
use crate::workflows::layout::{StepKey, StepRecord};

/// Outcome records read at once.
const READS_AT_ONCE: usize = 64;

impl Services {
    /// The steps `step` needs, by name, as its record says.
    pub async fn step_deps(&self, step: &StepOf) -> Result<Vec<String>> {
        let key = StepKey::Graph.of(&step.workflow, &step.step);
        match self.queue()?.view().kv_get(&key).await? {
            Some(bytes) => Ok(records::decode::<StepRecord>(&key, &bytes)?.deps),
            None => Err(EngineError::WorkflowNotFound(step.workflow.clone())),
        }
    }

    /// The outcome records of `run_ids`, as committed (see the module), in
    /// their order, outputs and errors opened; `None` where there is none.
    pub async fn committed_outcomes(
        &self,
        run_ids: &[String],
    ) -> Result<Vec<Option<OutcomeRecord>>> {
        let queue = self.queue()?;
        let view = queue.view();
        let mut found = Vec::with_capacity(run_ids.len());
        for chunk in run_ids.chunks(READS_AT_ONCE) {
            let reads = chunk
                .iter()
                .map(|run_id| crate::layout::inspect::outcome_record(view, run_id));
            for record in futures_util::future::try_join_all(reads).await? {
                found.push(match record {
                    Some(record) => Some(record.opened(self.keyring())?),
                    None => None,
                });
            }
        }
        Ok(found)
    }
}
