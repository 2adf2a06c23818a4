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

/// See [`crate::GridClient::function_handle_init`].
pub fn function_handle_init(service: &str, server_name: &str) -> Result<FunctionHandle, GrpcError> {
    client()?.function_handle_init(service, server_name)
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
    Ok(client()?.get_error(id))
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
