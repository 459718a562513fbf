//! Workflows: graphs of jobs submitted in one transaction, where a step
//! starts when the steps it needs have succeeded and reads their outputs.
//!
//! - `layout`: the keys and records.
//! - `graph`: a workflow's state as read, and the plan of a step's end.
//! - `gates`: which transaction decides a waiting step (the supervisor's).
//! - `submit`: the submission, status, cancel and retry of a workflow.
//! - `settle`: a plan turned into the effects of a step's transaction.
//! - `wire`: a workflow as a client in another process sends it.
//!
//! See ARCHITECTURE.md, *Workflows*.

pub mod gates;
pub use crate::layout::workflow as layout;
pub use crate::layout::workflow::graph;
pub mod settle;
pub mod submit;
pub use crate::layout::workflow::wire;

pub use gates::{GateMessage, Gates};
pub use graph::{Decision, Flow, Node};
pub use submit::{StepSpec, StepStatus, WorkflowSpec, WorkflowStatus, WorkflowSubmitted};
