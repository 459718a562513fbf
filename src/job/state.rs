//! Application state registered on the builder, by exact type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// Application state registered on the builder, by exact type.
pub(crate) type StateMap = HashMap<TypeId, Arc<dyn Any + Send + Sync>>;
