//! Workflows over a shard set: a workflow lives whole in the shard of its
//! id (given, derived from its key, or a fresh ULID fixed before it is
//! routed), so its steps, their jobs and its records share one store and
//! one transaction.

use super::{ShardedClient, ShardedEngine};
use crate::error::Result;
use crate::remote::client::ClientWorkflow;
use crate::workflow::{Workflow, WorkflowHandle, WorkflowStatus};

impl ShardedEngine {
    /// Submit a workflow to the engine of its id's shard (`NotOwned` if
    /// another process owns that shard, `Down` at once while it is down
    /// here).
    pub async fn submit_workflow(&self, workflow: Workflow) -> Result<WorkflowHandle> {
        let (id, workflow) = workflow.pin_id()?;
        self.engine_of(&id)?.submit_workflow(workflow).await
    }

    /// A handle on the workflow `id`, on its shard's running engine.
    pub fn workflow(&self, id: &str) -> Result<WorkflowHandle> {
        Ok(self.engine_of(id)?.workflow(id))
    }
}

impl ShardedClient {
    /// Submit a workflow through the inbox of its id's shard (as
    /// [`Client::submit_workflow`](crate::remote::Client::submit_workflow)).
    pub async fn submit_workflow(&self, workflow: Workflow) -> Result<ClientWorkflow> {
        let (id, workflow) = workflow.pin_id()?;
        self.client_of(&id).submit_workflow(workflow).await
    }

    /// Workflow `id` and each step's state, read in its shard.
    pub async fn workflow_status(&self, id: &str) -> Result<WorkflowStatus> {
        self.client_of(id).workflow_status(id).await
    }
}
