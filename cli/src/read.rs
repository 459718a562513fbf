//! The store, opened read-only, and what each command reads from it: the
//! read side shared with the dashboard, in `gaffer-ops`.

pub use gaffer_ops::{Reading, StateFilter, Store};

use crate::StateArg;

impl From<StateArg> for StateFilter {
    fn from(s: StateArg) -> Self {
        match s {
            StateArg::Queued => Self::Queued,
            StateArg::Scheduled => Self::Scheduled,
            StateArg::Waiting => Self::Waiting,
            StateArg::Running => Self::Running,
            StateArg::Dead => Self::Dead,
            StateArg::Succeeded => Self::Succeeded,
            StateArg::Failed => Self::Failed,
            StateArg::Cancelled => Self::Cancelled,
        }
    }
}
