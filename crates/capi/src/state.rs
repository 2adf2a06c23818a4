//! What the C API keeps between calls: the sessions still to be waited for (where their
//! outputs go, which handle started them) and each thread's last error.

use crate::pack::OutSlot;
use gridwise_client::{CallResult, GrpcError, SessionId};
use gridwise_proto::ErrorCode;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CString, c_char, c_int};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// `grpc_function_handle_t` (layout shared with `grpc.h`).
#[repr(C)]
pub struct CHandle {
    pub magic: u32,
    pub id: c_int,
    pub imp: *mut gridwise_client::FunctionHandle,
}

/// What an initialised handle's `magic` holds ("GRID").
pub const MAGIC: u32 = 0x4752_4944;

/// A session not yet waited for: the caller's output addresses and handle.
pub struct Pending {
    pub service: String,
    pub outputs: Vec<OutSlot>,
    pub handle: usize,
}

static PENDING: Mutex<Option<HashMap<u64, Pending>>> = Mutex::new(None);

fn pending() -> MutexGuard<'static, Option<HashMap<u64, Pending>>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a session with the table locked and remembers it under the id `start` returns: a
/// wait on another thread cannot take the session before its outputs' addresses are known.
pub fn start(
    p: Pending,
    start: impl FnOnce() -> Result<SessionId, GrpcError>,
) -> Result<SessionId, GrpcError> {
    let mut map = pending();
    let id = start()?;
    map.get_or_insert_with(HashMap::new).insert(id.0, p);
    Ok(id)
}

pub fn forget(id: SessionId) -> Option<Pending> {
    pending().as_mut()?.remove(&id.0)
}

pub fn forget_all() {
    *pending() = None;
}

/// The ids of every session still to be waited for.
pub fn pending_ids() -> Vec<SessionId> {
    pending()
        .as_ref()
        .map(|m| m.keys().map(|k| SessionId(*k)).collect())
        .unwrap_or_default()
}

/// The handle a pending session was started with.
pub fn handle_of(id: SessionId) -> Option<*mut CHandle> {
    pending()
        .as_ref()?
        .get(&id.0)
        .map(|p| p.handle as *mut CHandle)
}

/// Writes a finished session's outputs where its call said; forgets the session.
pub fn deliver(id: SessionId, r: &CallResult) -> Result<(), GrpcError> {
    match forget(id) {
        // SAFETY: the caller promised, by starting the call, that the addresses stay valid
        // until the session is waited for; this is that wait.
        Some(p) => unsafe { crate::pack::write_outputs(&p.service, &p.outputs, &r.outputs) },
        None => Ok(()),
    }
}

thread_local! {
    static LAST: RefCell<(c_int, CString)> = RefCell::new((0, CString::default()));
}

/// Records the outcome of this thread's GridRPC call and returns its code.
pub fn finish(r: Result<(), GrpcError>) -> c_int {
    let (code, message) = match r {
        Ok(()) => (ErrorCode::NoError as c_int, String::new()),
        Err(e) => (e.code as c_int, e.message),
    };
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = (code, message));
    code
}

pub fn last_code() -> c_int {
    LAST.with(|l| l.borrow().0)
}

pub fn last_message() -> *const c_char {
    LAST.with(|l| l.borrow().1.as_ptr())
}

/// `grpc_error_string`'s static texts, one per code and one for numbers that are no code.
pub fn error_text(code: c_int) -> *mut c_char {
    static TEXTS: OnceLock<Vec<CString>> = OnceLock::new();
    let texts = TEXTS.get_or_init(|| {
        ErrorCode::ALL
            .iter()
            .map(|c| CString::new(c.message()).unwrap_or_default())
            .collect()
    });
    let c = ErrorCode::from_number(i64::from(code));
    // The text is never written through: `char *` only because GFD.52 declares it so.
    texts[c as usize].as_ptr().cast_mut()
}
