//! Workflows: graphs of jobs submitted in one transaction, where a step
//! starts when the steps it needs have succeeded and reads their outputs.
//!
//! - `layout`: the keys and records.
//! - `graph`: a workflow's state as read, and the plan of a step's end.
//! - `gates`: which transaction decides a waiting step (the supervisor's).
//! - `submit`: the submission, status, cancel and retry of a workflow.
//! - `deps`: what a running step reads of the steps it needs.
//! - `settle`: a plan turned into the effects of a step's transaction.
//! - `wire`: a workflow as a client in another process sends it.
//!
//! See ARCHITECTURE.md, *Workflows*.

mod deps;
pub(crate) mod gates;
pub use crate::layout::workflow as layout;
pub use crate::layout::workflow::graph;
pub(crate) mod settle;
pub(crate) mod submit;
pub use crate::layout::workflow::wire;

pub use crate::layout::workflow::spec::{StepSpec, WorkflowSpec, WorkflowSubmitted};
pub use crate::layout::workflow::status::{StepStatus, WorkflowStatus};
pub use gates::{GateMessage, Gates};
pub use graph::{Decision, Flow, Node};
