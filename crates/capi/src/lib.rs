//! libgridwise: the GridRPC End-User API (OGF GFD.52) for C, C++ and Fortran programs, declared
//! in `include/grpc.h`. Every function here is a thin shell over
//! [`gridwise_client::grpc`]: it checks the C arguments, converts them with [`pack`], and
//! records the outcome for `grpc_get_last_error` and `gridwise_last_error_message`. The variadic
//! `grpc_call` and `grpc_call_async` are in `src/varargs.c`.
//!
//! Build: `cargo build --release -p gridwise-capi` gives `libgridwise.a`; `crates/capi/install.sh`
//! links the shared `libgridwise.so` and installs it with the header and `gridwise.pc`.

// Every `unsafe extern "C"` function below is a C entry point: its contract (pointers valid for
// the types grpc.h declares) is stated once, in include/grpc.h, not on each function.
#![allow(clippy::missing_safety_doc)]

pub mod pack;
mod state;

use gridwise_client::grpc;
use gridwise_client::{CallResult, GrpcError, SessionId};
use gridwise_proto::ErrorCode;
use pack::RawArg;
use state::{CHandle, MAGIC, Pending};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

type GrpcResult = Result<(), GrpcError>;

/// Runs `f`, records its outcome and returns the code; a panic is an error, never an unwind
/// into C.
fn api(f: impl FnOnce() -> GrpcResult) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(GrpcError::new(
            ErrorCode::OtherErrorCode,
            "libgridwise hit an internal error (a bug: please report it with the call that did it)",
        ))
    });
    state::finish(r)
}

fn other(message: impl Into<String>) -> GrpcError {
    GrpcError::new(ErrorCode::OtherErrorCode, message)
}

/// A C string argument.
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, GrpcError> {
    if p.is_null() {
        return Err(other(format!("{what} is NULL")));
    }
    // SAFETY: as promised.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| other(format!("{what} is not UTF-8")))
}

/// The handle behind a `grpc_function_handle_t *`.
///
/// # Safety
/// `h` is NULL or points at a `grpc_function_handle_t`.
unsafe fn handle<'a>(h: *mut CHandle) -> Result<&'a gridwise_client::FunctionHandle, GrpcError> {
    // GFD.52 puts the missing initialisation first: any handle, valid or not, is refused
    // with GRPC_NOT_INITIALIZED before `grpc_initialize`.
    if !grpc::is_initialized() {
        return Err(GrpcError::not_initialized());
    }
    let invalid = || {
        GrpcError::new(
            ErrorCode::InvalidFunctionHandle,
            "the function handle was never initialised, or was destructed",
        )
    };
    // SAFETY: as promised.
    let c = unsafe { h.as_ref() }.ok_or_else(invalid)?;
    if c.magic != MAGIC || c.imp.is_null() {
        return Err(invalid());
    }
    // SAFETY: set by `set_handle` and freed only by `grpc_function_handle_destruct`, which
    // clears `magic` first.
    Ok(unsafe { &*c.imp })
}

/// # Safety
/// `h` points at a `grpc_function_handle_t`.
unsafe fn set_handle(h: *mut CHandle, f: gridwise_client::FunctionHandle) -> GrpcResult {
    // SAFETY: as promised.
    let c = unsafe { h.as_mut() }.ok_or_else(|| other("the handle pointer is NULL"))?;
    c.id = c_int::try_from(f.id).unwrap_or(c_int::MAX);
    c.imp = Box::into_raw(Box::new(f));
    c.magic = MAGIC;
    Ok(())
}

fn c_id(id: SessionId) -> Result<c_int, GrpcError> {
    c_int::try_from(id.0).map_err(|_| {
        other("this process has started more than 2^31 sessions, more than a C int can name")
    })
}

fn rust_id(id: c_int) -> SessionId {
    // Negative ids (GRPC_SESSIONID_VOID) are never issued: 0 is never issued either.
    SessionId(u64::try_from(id).unwrap_or(0))
}

/// # Safety
/// `p` is NULL or valid for writing a `grpc_sessionid_t`.
unsafe fn put_id(p: *mut c_int, id: c_int) {
    if !p.is_null() {
        // SAFETY: as promised.
        unsafe { *p = id };
    }
}

/// # Safety
/// `ids` is valid for `len` ids (or `len` is 0).
unsafe fn ids(ids: *const c_int, len: usize) -> Result<Vec<SessionId>, GrpcError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if ids.is_null() {
        return Err(other("the session id array is NULL"));
    }
    // SAFETY: as promised.
    let s = unsafe { std::slice::from_raw_parts(ids, len) };
    Ok(s.iter().map(|i| rust_id(*i)).collect())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_initialize(config_file_name: *const c_char) -> c_int {
    api(|| {
        if config_file_name.is_null() {
            // No file: GRIDWISE_AGENT and GRIDWISE_TOKEN, as the command line reads them.
            let Some(cfg) = gridwise_client::ClientConfig::from_env() else {
                return Err(GrpcError::new(
                    ErrorCode::ConfigfileNotFound,
                    "grpc_initialize needs the path of the client's configuration file (TOML), \
                     or NULL with GRIDWISE_AGENT (and GRIDWISE_TOKEN) in the environment",
                ));
            };
            return grpc::initialize_with(cfg);
        }
        // SAFETY: checked non-NULL; the caller passes a C string.
        let path = unsafe { text(config_file_name, "the configuration file name")? };
        grpc::initialize(path)
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_finalize() -> c_int {
    api(|| {
        let r = grpc::finalize();
        state::forget_all();
        r
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_function_handle_default(
    h: *mut CHandle,
    func_name: *const c_char,
) -> c_int {
    api(|| {
        // SAFETY: the caller passes a C string.
        let name = unsafe { text(func_name, "the function name")? };
        let f = grpc::function_handle_default(name)?;
        // SAFETY: the caller passes a handle to fill in.
        unsafe { set_handle(h, f) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_function_handle_init(
    h: *mut CHandle,
    server: *const c_char,
    func_name: *const c_char,
) -> c_int {
    api(|| {
        // SAFETY: the caller passes C strings.
        let (server, name) = unsafe {
            (
                text(server, "the server (host:port)")?,
                text(func_name, "the function name")?,
            )
        };
        let f = grpc::function_handle_init(name, server)?;
        // SAFETY: the caller passes a handle to fill in.
        unsafe { set_handle(h, f) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_function_handle_destruct(h: *mut CHandle) -> c_int {
    api(|| {
        // SAFETY: the caller passes a handle.
        let f = unsafe { handle(h)? };
        grpc::function_handle_destruct(f)?;
        // SAFETY: `handle` checked it is an initialised handle.
        let c = unsafe { &mut *h };
        c.magic = 0;
        // SAFETY: made by `set_handle` with Box::into_raw; `magic` no longer admits it.
        drop(unsafe { Box::from_raw(c.imp) });
        c.imp = std::ptr::null_mut();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_get_handle(out: *mut *mut CHandle, session_id: c_int) -> c_int {
    api(|| {
        let id = rust_id(session_id);
        grpc::get_handle(id)?;
        let h = state::handle_of(id).ok_or_else(|| GrpcError::invalid_session(id))?;
        // SAFETY: the caller passes where to put the handle pointer.
        let out = unsafe { out.as_mut() }.ok_or_else(|| other("the handle pointer is NULL"))?;
        *out = h;
        Ok(())
    })
}

/// How each argument of the handle's service arrives in `grpc_call`'s `va_list`: `'i'`, `'d'`
/// or `'p'` (for `varargs.c`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gridwise_capi_arg_kinds(
    h: *mut CHandle,
    kinds: *mut c_char,
    capacity: usize,
    count: *mut usize,
) -> c_int {
    api(|| {
        // SAFETY: the caller passes a handle.
        let f = unsafe { handle(h)? };
        let k = pack::arg_kinds(&f.desc);
        if k.len() > capacity {
            return Err(other(format!(
                "`{}` has {} arguments, more than grpc_call takes ({capacity}): call it with \
                 grpc_call_argstack",
                f.service,
                k.len()
            )));
        }
        // SAFETY: `varargs.c` passes arrays of `capacity` and a count to fill in.
        unsafe {
            std::ptr::copy_nonoverlapping(k.as_ptr().cast::<c_char>(), kinds, k.len());
            *count = k.len();
        }
        Ok(())
    })
}

/// Calls the handle's service with `raw` arguments: synchronously, or starting a session whose
/// id goes to `session_id`.
///
/// # Safety
/// The arguments must match the service's description (see `grpc.h`).
unsafe fn call(
    h: *mut CHandle,
    session_id: Option<*mut c_int>,
    raw: &[RawArg],
    by_pointer: bool,
) -> GrpcResult {
    if let Some(p) = session_id {
        if p.is_null() {
            return Err(other("the session id pointer is NULL"));
        }
        // SAFETY: checked non-NULL.
        unsafe { *p = grpc::SESSIONID_VOID as c_int };
    }
    // SAFETY: the caller passes a handle.
    let f = unsafe { handle(h)? };
    // SAFETY: the caller's arguments match the description.
    let pack::Packed { inputs, outputs } = unsafe { pack::pack(&f.desc, raw, by_pointer)? };
    match session_id {
        None => {
            let r = grpc::call(f, inputs)?;
            // SAFETY: the output addresses were given with this very call.
            unsafe { pack::write_outputs(&f.service, &outputs, &r.outputs) }
        }
        Some(p) => {
            let pending = Pending {
                service: f.service.clone(),
                outputs,
                handle: h as usize,
            };
            let id = state::start(pending, || grpc::call_async(f, inputs))?;
            let cid = c_id(id)?;
            // SAFETY: checked non-NULL above.
            unsafe { *p = cid };
            Ok(())
        }
    }
}

/// The arguments read from `grpc_call`'s `va_list` (by `varargs.c`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gridwise_capi_call_raw(
    h: *mut CHandle,
    asynchronous: c_int,
    session_id: *mut c_int,
    args: *const RawArg,
    count: usize,
) -> c_int {
    api(|| {
        let raw = if count == 0 {
            &[][..]
        } else {
            // SAFETY: `varargs.c` passes `count` arguments.
            unsafe { std::slice::from_raw_parts(args, count) }
        };
        let session = (asynchronous != 0).then_some(session_id);
        // SAFETY: the program's arguments, read by the description's kinds.
        unsafe { call(h, session, raw, false) }
    })
}

/// An argument stack: pointers to the arguments, read when the call is made.
pub struct ArgStack {
    max: usize,
    args: Vec<*mut c_void>,
}

fn stack_raw(s: &ArgStack) -> Vec<RawArg> {
    s.args
        .iter()
        .map(|p| RawArg {
            kind: c_int::from(b'p'),
            i: 0,
            d: 0.0,
            p: *p,
        })
        .collect()
}

/// # Safety
/// `s` is NULL or made by `grpc_arg_stack_new` and not destructed.
unsafe fn stack<'a>(s: *mut ArgStack) -> Result<&'a mut ArgStack, GrpcError> {
    // SAFETY: as promised.
    unsafe { s.as_mut() }.ok_or_else(|| other("the argument stack is NULL"))
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_arg_stack_new(max_size: c_int) -> *mut ArgStack {
    let mut out = std::ptr::null_mut();
    api(|| {
        let max = usize::try_from(max_size)
            .map_err(|_| other(format!("an argument stack of {max_size} arguments")))?;
        out = Box::into_raw(Box::new(ArgStack {
            max,
            args: Vec::with_capacity(max.min(256)),
        }));
        Ok(())
    });
    out
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_arg_stack_push_arg(s: *mut ArgStack, arg: *mut c_void) -> c_int {
    api(|| {
        // SAFETY: the caller passes a stack.
        let s = unsafe { stack(s)? };
        if s.args.len() >= s.max {
            return Err(other(format!(
                "the argument stack is full ({} argument(s)): make it larger in grpc_arg_stack_new",
                s.max
            )));
        }
        s.args.push(arg);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_arg_stack_pop_arg(s: *mut ArgStack) -> *mut c_void {
    let mut out = std::ptr::null_mut();
    api(|| {
        // SAFETY: the caller passes a stack.
        let s = unsafe { stack(s)? };
        out = s
            .args
            .pop()
            .ok_or_else(|| other("the argument stack is empty"))?;
        Ok(())
    });
    out
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_arg_stack_destruct(s: *mut ArgStack) -> c_int {
    api(|| {
        if s.is_null() {
            return Err(other("the argument stack is NULL"));
        }
        // SAFETY: made by `grpc_arg_stack_new` (the caller's promise).
        drop(unsafe { Box::from_raw(s) });
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_call_argstack(h: *mut CHandle, args: *mut ArgStack) -> c_int {
    api(|| {
        // SAFETY: the caller passes a stack of pointers matching the description.
        let raw = stack_raw(unsafe { stack(args)? });
        unsafe { call(h, None, &raw, true) }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_call_argstack_async(
    h: *mut CHandle,
    session_id: *mut c_int,
    args: *mut ArgStack,
) -> c_int {
    api(|| {
        // SAFETY: the caller passes a stack of pointers matching the description.
        let raw = stack_raw(unsafe { stack(args)? });
        unsafe { call(h, Some(session_id), &raw, true) }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_probe(session_id: c_int) -> c_int {
    api(|| grpc::probe(rust_id(session_id)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_probe_or(
    ids_ptr: *const c_int,
    len: usize,
    id_ptr: *mut c_int,
) -> c_int {
    api(|| {
        // SAFETY: the caller passes `len` ids and where to put one.
        unsafe { put_id(id_ptr, grpc::SESSIONID_VOID as c_int) };
        let ids = unsafe { ids(ids_ptr, len)? };
        let id = grpc::probe_or(&ids)?;
        unsafe { put_id(id_ptr, c_id(id)?) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_cancel(session_id: c_int) -> c_int {
    api(|| grpc::cancel(rust_id(session_id)))
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_cancel_all() -> c_int {
    api(grpc::cancel_all)
}

/// A session's own outcome: its outputs written, or its error (with no outputs).
fn settle(id: SessionId, r: Result<CallResult, GrpcError>) -> GrpcResult {
    match r {
        Ok(r) => state::deliver(id, &r),
        Err(e) => {
            if e.code != ErrorCode::InvalidSessionId && e.code != ErrorCode::NotInitialized {
                state::forget(id);
            }
            Err(e)
        }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_wait(session_id: c_int) -> c_int {
    api(|| {
        let id = rust_id(session_id);
        settle(id, grpc::wait(id))
    })
}

/// After a wait for several sessions found some failed: the others finished too, so their
/// outputs are written now (GFD.52's waits end every session they name).
fn drain(ids: &[SessionId]) {
    for id in ids {
        if state::handle_of(*id).is_some() {
            let _ = settle(*id, grpc::wait(*id));
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_wait_and(ids_ptr: *const c_int, len: usize) -> c_int {
    api(|| {
        // SAFETY: the caller passes `len` ids.
        let ids = unsafe { ids(ids_ptr, len)? };
        match grpc::wait_and(&ids) {
            Ok(results) => {
                let mut first = Ok(());
                for (id, r) in ids.iter().zip(&results) {
                    if let Err(e) = state::deliver(*id, r) {
                        first = first.and(Err(e));
                    }
                }
                first
            }
            Err(e) => {
                if e.code == ErrorCode::SessionFailed {
                    drain(&ids);
                }
                Err(e)
            }
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_wait_or(
    ids_ptr: *const c_int,
    len: usize,
    id_ptr: *mut c_int,
) -> c_int {
    api(|| {
        // SAFETY: the caller passes `len` ids and where to put one.
        unsafe { put_id(id_ptr, grpc::SESSIONID_VOID as c_int) };
        let ids = unsafe { ids(ids_ptr, len)? };
        one_of(grpc::wait_or(&ids), id_ptr)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_wait_any(id_ptr: *mut c_int) -> c_int {
    api(|| {
        // SAFETY: the caller passes where to put the id.
        unsafe { put_id(id_ptr, grpc::SESSIONID_VOID as c_int) };
        one_of(grpc::wait_any(), id_ptr)
    })
}

/// The session a wait for one of several returned, named through `id_ptr` whether it
/// succeeded or failed.
fn one_of(r: Result<(SessionId, CallResult), GrpcError>, id_ptr: *mut c_int) -> GrpcResult {
    let (id, r) = match r {
        Ok((id, r)) => (id, Ok(r)),
        Err(e) => match e.session {
            Some(id) => (id, Err(e)),
            None => return Err(e),
        },
    };
    // SAFETY: the caller passed where to put the id (or NULL).
    unsafe { put_id(id_ptr, c_id(id)?) };
    settle(id, r)
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_wait_all() -> c_int {
    api(|| match grpc::wait_all() {
        Ok(done) => {
            let mut first = Ok(());
            for (id, r) in &done {
                if let Err(e) = state::deliver(*id, r) {
                    first = first.and(Err(e));
                }
            }
            first
        }
        Err(e) => {
            if e.code == ErrorCode::SessionFailed {
                drain(&state::pending_ids());
            }
            Err(e)
        }
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_get_error(session_id: c_int) -> c_int {
    // The session's error is the answer, not this call's failure: only an unknown id or a
    // missing initialisation are errors of the call itself.
    let mut code = ErrorCode::NoError as c_int;
    let r = api(|| {
        if let Some(e) = grpc::get_error(rust_id(session_id))? {
            code = e.code as c_int;
        }
        Ok(())
    });
    if r != ErrorCode::NoError as c_int {
        r
    } else {
        code
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_get_last_error() -> c_int {
    state::last_code()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn grpc_get_failed_sessionid(id_ptr: *mut c_int) -> c_int {
    api(|| {
        if id_ptr.is_null() {
            return Err(other("the session id pointer is NULL"));
        }
        let id = match grpc::get_failed_session_id()? {
            Some(id) => c_id(id)?,
            None => grpc::SESSIONID_VOID as c_int,
        };
        // SAFETY: checked non-NULL.
        unsafe { *id_ptr = id };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn grpc_error_string(code: c_int) -> *mut c_char {
    state::error_text(code)
}

#[unsafe(no_mangle)]
pub extern "C" fn gridwise_last_error_message() -> *const c_char {
    state::last_message()
}
