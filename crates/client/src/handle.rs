//! Function handles: a service, bound to the agent's choice or to one server.

use gridwise_proto::ServiceDesc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where calls through a handle may run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Binding {
    /// Wherever the agent ranks best (`grpc_function_handle_default`).
    Default,
    /// Only on the named server (`grpc_function_handle_init`).
    Server(String),
}

impl Binding {
    /// The pinned server's name, if any.
    pub fn server(&self) -> Option<&str> {
        match self {
            Binding::Default => None,
            Binding::Server(s) => Some(s),
        }
    }
}

/// A service ready to be called, with its description (fetched once, when the handle is made).
#[derive(Clone, Debug)]
pub struct FunctionHandle {
    /// Unique within the client that made it.
    pub id: u64,
    /// The same as `desc.name`.
    pub service: String,
    /// Fixed when the handle is made: `function_handle_default` or `function_handle_init`.
    pub binding: Binding,
    /// The service description, for checking and packing arguments.
    pub desc: Arc<ServiceDesc>,
    /// Cleared by `function_handle_destruct` (shared by every clone of the handle).
    pub(crate) live: Arc<AtomicBool>,
}

impl FunctionHandle {
    /// A handle not yet destructed, with a `live` flag of its own that its clones will share.
    pub(crate) fn new(id: u64, binding: Binding, desc: Arc<ServiceDesc>) -> Self {
        Self {
            id,
            service: desc.name.clone(),
            binding,
            desc,
            live: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Whether the handle may still be used (not destructed).
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }

    /// Marks the handle destructed; false if it already was.
    pub(crate) fn destruct(&self) -> bool {
        self.live.swap(false, Ordering::AcqRel)
    }
}

impl PartialEq for FunctionHandle {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id && Arc::ptr_eq(&self.live, &other.live)
    }
}
