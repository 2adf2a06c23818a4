//! The GFD.52-style global API: `initialize` once per process, then free functions that act on
//! one process-wide blocking [`Client`], and `finalize` at the end.
//!
//! Every function returns `NotInitialized` before [`initialize`] and after [`finalize`].

use crate::blocking::Client;
use crate::client::CallResult;
use crate::config::ClientConfig;
use crate::error::GrpcError;
use crate::handle::FunctionHandle;
use crate::session::SessionId;
use gridwise_proto::{ErrorCode, Value};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

static GLOBAL: Mutex<Option<Arc<Client>>> = Mutex::new(None);

fn global() -> MutexGuard<'static, Option<Arc<Client>>> {
    GLOBAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The client, if initialized (the lock is released before the caller uses it).
fn client() -> Result<Arc<Client>, GrpcError> {
    global().clone().ok_or_else(GrpcError::not_initialized)
}

/// Reads the configuration file and connects to its agent (`grpc_initialize`).
pub fn initialize(config_path: impl AsRef<Path>) -> Result<(), GrpcError> {
    if global().is_some() {
        return Err(GrpcError::already_initialized());
    }
    initialize_with(ClientConfig::from_file(config_path)?)
}

/// Connects with a configuration built in code.
pub fn initialize_with(cfg: ClientConfig) -> Result<(), GrpcError> {
    if global().is_some() {
        return Err(GrpcError::already_initialized());
    }
    let fresh = Arc::new(Client::connect(cfg)?);
    let mut g = global();
    if g.is_some() {
        // Another thread initialized meanwhile; ours is dropped once the lock is released.
        drop(g);
        drop(fresh);
        return Err(GrpcError::already_initialized());
    }
    *g = Some(fresh);
    Ok(())
}

/// Cancels the running sessions and disconnects (`grpc_finalize`). Calls still running on
/// other threads finish first.
pub fn finalize() -> Result<(), GrpcError> {
    let taken = global().take().ok_or_else(GrpcError::not_initialized)?;
    let _ = taken.cancel_all();
    drop(taken);
    Ok(())
}

/// Whether [`initialize`] has been called (and [`finalize`] not since).
pub fn is_initialized() -> bool {
    global().is_some()
}

/// See [`crate::GridClient::function_handle_default`].
pub fn function_handle_default(service: &str) -> Result<FunctionHandle, GrpcError> {
    client()?.function_handle_default(service)
}

/// See [`crate::GridClient::function_handle_init`]: `server` is a registered name or a
/// `host:port`.
pub fn function_handle_init(service: &str, server: &str) -> Result<FunctionHandle, GrpcError> {
    client()?.function_handle_init(service, server)
}

/// See [`crate::GridClient::function_handle_destruct`].
pub fn function_handle_destruct(h: &FunctionHandle) -> Result<(), GrpcError> {
    client()?.function_handle_destruct(h)
}

/// See [`crate::GridClient::get_handle`].
pub fn get_handle(id: SessionId) -> Result<FunctionHandle, GrpcError> {
    client()?.get_handle(id)
}

/// See [`crate::GridClient::call`].
pub fn call(h: &FunctionHandle, inputs: Vec<Value>) -> Result<CallResult, GrpcError> {
    client()?.call(h, inputs)
}

/// See [`crate::GridClient::call_async`].
pub fn call_async(h: &FunctionHandle, inputs: Vec<Value>) -> Result<SessionId, GrpcError> {
    client()?.call_async(h, inputs)
}

/// See [`crate::GridClient::probe`].
pub fn probe(id: SessionId) -> Result<(), GrpcError> {
    client()?.probe(id)
}

/// See [`crate::GridClient::probe_or`].
pub fn probe_or(ids: &[SessionId]) -> Result<SessionId, GrpcError> {
    client()?.probe_or(ids)
}

/// See [`crate::GridClient::wait`].
pub fn wait(id: SessionId) -> Result<CallResult, GrpcError> {
    client()?.wait(id)
}

/// See [`crate::GridClient::wait_and`].
pub fn wait_and(ids: &[SessionId]) -> Result<Vec<CallResult>, GrpcError> {
    client()?.wait_and(ids)
}

/// See [`crate::GridClient::wait_or`].
pub fn wait_or(ids: &[SessionId]) -> Result<(SessionId, CallResult), GrpcError> {
    client()?.wait_or(ids)
}

/// See [`crate::GridClient::wait_all`].
pub fn wait_all() -> Result<Vec<(SessionId, CallResult)>, GrpcError> {
    client()?.wait_all()
}

/// See [`crate::GridClient::wait_any`].
pub fn wait_any() -> Result<(SessionId, CallResult), GrpcError> {
    client()?.wait_any()
}

/// See [`crate::GridClient::cancel`].
pub fn cancel(id: SessionId) -> Result<(), GrpcError> {
    client()?.cancel(id)
}

/// See [`crate::GridClient::cancel_all`].
pub fn cancel_all() -> Result<(), GrpcError> {
    client()?.cancel_all()
}

/// See [`crate::GridClient::get_error`]; `NotInitialized` outside initialize/finalize.
pub fn get_error(id: SessionId) -> Result<Option<GrpcError>, GrpcError> {
    client()?.get_error(id)
}

/// See [`crate::GridClient::get_failed_session_id`]; `NotInitialized` outside
/// initialize/finalize.
pub fn get_failed_session_id() -> Result<Option<SessionId>, GrpcError> {
    Ok(client()?.get_failed_session_id())
}

/// The readable message for an error code (`grpc_error_string`).
pub fn error_string(code: ErrorCode) -> &'static str {
    code.message()
}

/// The readable message for an error code given as the C API's integer; a number that is no
/// code gets `GRPC_UNKNOWN_ERROR_CODE`'s message, as GFD.52 asks.
pub fn error_string_of(code: i32) -> &'static str {
    ErrorCode::from_number(i64::from(code)).message()
}

/// `GRPC_SESSIONID_VOID`: the id a failed asynchronous call leaves, and the one `wait_any`
/// gives when it had no session to name.
pub const SESSIONID_VOID: i64 = -1;

/// `GRPC_LAST_ERROR_CODE`: one above the highest code (16), where loops over the codes stop.
pub const LAST_ERROR_CODE: i32 = ErrorCode::ALL.len() as i32;

/// A GFD.52 argument stack: the arguments of one call pushed one by one, for programs that
/// build a call's arguments at run time (`grpc_arg_stack_*`, `grpc_call_argstack`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArgStack {
    max: usize,
    args: Vec<Value>,
}

impl ArgStack {
    /// A stack for at most `max` arguments (`grpc_arg_stack_new`).
    pub fn new(max: usize) -> Self {
        Self {
            max,
            args: Vec::with_capacity(max.min(64)),
        }
    }

    /// Pushes the next argument (`grpc_arg_stack_push_arg`); `OtherErrorCode` when the stack
    /// already holds `max`.
    pub fn push_arg(&mut self, v: Value) -> Result<(), GrpcError> {
        if self.args.len() >= self.max {
            return Err(GrpcError::new(
                ErrorCode::OtherErrorCode,
                format!(
                    "the argument stack is full ({} argument(s)): make it larger in arg_stack_new",
                    self.max
                ),
            ));
        }
        self.args.push(v);
        Ok(())
    }

    /// Takes the last argument off (`grpc_arg_stack_pop_arg`).
    pub fn pop_arg(&mut self) -> Option<Value> {
        self.args.pop()
    }

    /// The arguments, first pushed first.
    pub fn args(&self) -> &[Value] {
        &self.args
    }
}

/// Calls with the arguments on `stack` (`grpc_call_argstack`).
pub fn call_argstack(h: &FunctionHandle, stack: &ArgStack) -> Result<CallResult, GrpcError> {
    call(h, stack.args.clone())
}

/// Starts a call with the arguments on `stack` (`grpc_call_argstack_async`).
pub fn call_argstack_async(h: &FunctionHandle, stack: &ArgStack) -> Result<SessionId, GrpcError> {
    call_async(h, stack.args.clone())
}
