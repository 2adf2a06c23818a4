//! C arguments to gridwise values and back, as the service description says: which arguments
//! arrive by value and which by pointer, where array dimensions come from, and where each
//! output is written. Everything a pointer points at is read when the call is made and
//! written when it completes; nothing is kept of the caller's memory in between but the
//! output addresses.

use gridwise_client::GrpcError;
use gridwise_proto::value::Array;
use gridwise_proto::{ArgMode, ArgType, Dim, ElemType, ErrorCode, ServiceDesc, Value};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};

/// One argument as the C side read it from a `va_list` (layout shared with `varargs.c`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawArg {
    /// `'i'`, `'d'` or `'p'`.
    pub kind: c_int,
    pub i: c_int,
    pub d: f64,
    pub p: *mut c_void,
}

/// A `bytes` argument (layout shared with `grpc.h`).
#[repr(C)]
pub struct CBytes {
    pub data: *mut c_void,
    pub size: usize,
}

/// How each argument of `desc` arrives in a variadic call: an IN `int` as a C `int`, an IN
/// `double` as a `double`, everything else as a pointer.
pub fn arg_kinds(desc: &ServiceDesc) -> Vec<u8> {
    desc.args
        .iter()
        .map(|a| match (&a.ty, a.mode) {
            (ArgType::Int, ArgMode::In) => b'i',
            (ArgType::Double, ArgMode::In) => b'd',
            _ => b'p',
        })
        .collect()
}

/// Where an output goes: the caller's address and what must fit there.
#[derive(Debug)]
pub struct OutSlot {
    arg: String,
    ty: ArgType,
    dest: *mut c_void,
    /// Elements the caller's buffer holds, for arrays.
    elems: Option<u64>,
}

/// A call's inputs, and where its outputs go.
#[derive(Debug)]
pub struct Packed {
    pub inputs: Vec<Value>,
    pub outputs: Vec<OutSlot>,
}

// Output addresses move with their session to whichever thread waits for it; the caller
// promised, by making the call, that they stay valid until then (GFD.52's contract).
unsafe impl Send for OutSlot {}

fn bad(desc: &ServiceDesc, arg: &str, what: impl std::fmt::Display) -> GrpcError {
    GrpcError::new(
        ErrorCode::OtherErrorCode,
        format!("`{}` argument `{arg}`: {what}", desc.name),
    )
}

/// The arguments of a call of `desc`. With `by_pointer` (argument stacks) every argument is a
/// pointer, scalars included; otherwise IN scalars came by value.
///
/// # Safety
/// Every pointer must be valid for what the description says it points at: an `int`, a
/// `double`, a NUL-terminated string, a [`CBytes`], or an array of the declared dimensions.
pub unsafe fn pack(
    desc: &ServiceDesc,
    raw: &[RawArg],
    by_pointer: bool,
) -> Result<Packed, GrpcError> {
    if raw.len() != desc.args.len() {
        return Err(GrpcError::new(
            ErrorCode::OtherErrorCode,
            format!(
                "`{}` takes {} argument(s) ({}), but {} were given",
                desc.name,
                desc.args.len(),
                desc.args
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                raw.len()
            ),
        ));
    }
    // Int inputs first: array dimensions name them, wherever they stand.
    let mut ints: HashMap<&str, i64> = HashMap::new();
    for (a, r) in desc.args.iter().zip(raw) {
        if a.ty == ArgType::Int && a.mode.is_input() {
            let v = if a.mode == ArgMode::In && !by_pointer {
                r.i
            } else {
                // SAFETY: the caller's contract: a pointer to an int.
                unsafe { *non_null(desc, &a.name, r.p)?.cast::<c_int>() }
            };
            ints.insert(&a.name, i64::from(v));
        }
    }
    let dim = |arg: &str, d: &Dim| -> Result<u64, GrpcError> {
        let v = match d {
            Dim::Fixed(n) => return Ok(*n),
            Dim::Arg(name) => ints.get(name.as_str()).copied().unwrap_or(-1),
        };
        u64::try_from(v).map_err(|_| bad(desc, arg, format_args!("dimension `{d}` is {v}")))
    };
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    for (a, r) in desc.args.iter().zip(raw) {
        let shape = match &a.ty {
            ArgType::Vector { elem, len } => Some((*elem, dim(&a.name, len)?, 1)),
            ArgType::Matrix { elem, rows, cols } => {
                Some((*elem, dim(&a.name, rows)?, dim(&a.name, cols)?))
            }
            _ => None,
        };
        let elems = match shape {
            Some((_, r, c)) => Some(
                r.checked_mul(c)
                    .ok_or_else(|| bad(desc, &a.name, "its dimensions overflow"))?,
            ),
            None => None,
        };
        if a.mode.is_input() {
            let by_value = a.mode == ArgMode::In && !by_pointer;
            // SAFETY: as the caller promised for this argument's type.
            let v = unsafe { read_input(desc, &a.name, &a.ty, r, by_value, &ints, shape)? };
            inputs.push(v);
        }
        if a.mode.is_output() {
            outputs.push(OutSlot {
                arg: a.name.clone(),
                ty: a.ty.clone(),
                dest: non_null(desc, &a.name, r.p)?,
                elems,
            });
        }
    }
    Ok(Packed { inputs, outputs })
}

fn non_null(desc: &ServiceDesc, arg: &str, p: *mut c_void) -> Result<*mut c_void, GrpcError> {
    if p.is_null() {
        Err(bad(desc, arg, "a NULL pointer was given"))
    } else {
        Ok(p)
    }
}

/// One input value.
///
/// # Safety
/// As for [`pack`].
unsafe fn read_input(
    desc: &ServiceDesc,
    arg: &str,
    ty: &ArgType,
    r: &RawArg,
    by_value: bool,
    ints: &HashMap<&str, i64>,
    shape: Option<(ElemType, u64, u64)>,
) -> Result<Value, GrpcError> {
    Ok(match ty {
        ArgType::Int => Value::Int(ints[arg]),
        ArgType::Double if by_value => Value::Double(r.d),
        // SAFETY: a pointer to a double.
        ArgType::Double => Value::Double(unsafe { *non_null(desc, arg, r.p)?.cast::<f64>() }),
        ArgType::Str => {
            let p = non_null(desc, arg, r.p)?.cast::<c_char>();
            // SAFETY: a NUL-terminated string.
            let s = unsafe { CStr::from_ptr(p) };
            Value::Str(
                s.to_str()
                    .map_err(|_| bad(desc, arg, "the string is not UTF-8"))?
                    .to_string(),
            )
        }
        ArgType::Bytes => {
            // SAFETY: a gridwise_bytes_t.
            let b = unsafe { &*non_null(desc, arg, r.p)?.cast::<CBytes>() };
            Value::Bytes(unsafe { copy_in(desc, arg, b.data, b.size)? })
        }
        ArgType::Vector { .. } | ArgType::Matrix { .. } => {
            let (elem, rows, cols) = shape.expect("arrays have a shape");
            let bytes = rows
                .checked_mul(cols)
                .and_then(|n| n.checked_mul(elem.size() as u64))
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| bad(desc, arg, "its dimensions overflow"))?;
            // SAFETY: an array of rows × cols elements.
            let data = unsafe { copy_in(desc, arg, r.p, bytes)? };
            let a = Array {
                elem,
                rows,
                cols,
                data,
            };
            if matches!(ty, ArgType::Vector { .. }) {
                Value::Vector(a)
            } else {
                Value::Matrix(a)
            }
        }
    })
}

/// `len` bytes from `p` (which may be NULL only when `len` is 0).
///
/// # Safety
/// `p` must be valid for `len` bytes.
unsafe fn copy_in(
    desc: &ServiceDesc,
    arg: &str,
    p: *const c_void,
    len: usize,
) -> Result<Vec<u8>, GrpcError> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let p = non_null(desc, arg, p.cast_mut())?;
    let mut v = gridwise_proto::value::array_bytes(len).map_err(|_| {
        bad(
            desc,
            arg,
            format_args!("cannot allocate {len} bytes for it"),
        )
    })?;
    // SAFETY: the caller's buffer holds `len` bytes.
    v.extend_from_slice(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) });
    Ok(v)
}

/// Writes a completed call's outputs to where the call said they go.
///
/// # Safety
/// The addresses given when the call was packed must still be valid.
pub unsafe fn write_outputs(
    service: &str,
    slots: &[OutSlot],
    outputs: &[Value],
) -> Result<(), GrpcError> {
    let wrong = |slot: &OutSlot, what: String| {
        GrpcError::new(
            ErrorCode::OtherErrorCode,
            format!("`{service}` output `{}`: {what}", slot.arg),
        )
    };
    if slots.len() != outputs.len() {
        return Err(GrpcError::new(
            ErrorCode::OtherErrorCode,
            format!(
                "`{service}` returned {} output(s) where its description declares {}",
                outputs.len(),
                slots.len()
            ),
        ));
    }
    for (slot, v) in slots.iter().zip(outputs) {
        match (&slot.ty, v) {
            (ArgType::Int, Value::Int(x)) => {
                let x = c_int::try_from(*x)
                    .map_err(|_| wrong(slot, format!("{x} does not fit a C int")))?;
                // SAFETY: an int the caller provided.
                unsafe { *slot.dest.cast::<c_int>() = x };
            }
            // SAFETY: a double the caller provided.
            (ArgType::Double, Value::Double(x)) => unsafe { *slot.dest.cast::<f64>() = *x },
            (ArgType::Str, Value::Str(s)) => {
                let p = malloc_copy(s.as_bytes(), true)
                    .ok_or_else(|| wrong(slot, "out of memory".into()))?;
                // SAFETY: a char * the caller provided.
                unsafe { *slot.dest.cast::<*mut c_char>() = p.cast() };
            }
            (ArgType::Bytes, Value::Bytes(b)) => {
                let p = malloc_copy(b, false).ok_or_else(|| wrong(slot, "out of memory".into()))?;
                // SAFETY: a gridwise_bytes_t the caller provided.
                let out = unsafe { &mut *slot.dest.cast::<CBytes>() };
                out.data = p;
                out.size = b.len();
            }
            (ArgType::Vector { elem, .. } | ArgType::Matrix { elem, .. }, Value::Vector(a))
            | (ArgType::Vector { elem, .. } | ArgType::Matrix { elem, .. }, Value::Matrix(a)) => {
                if a.elem != *elem || Some(a.len()) != slot.elems || !a.is_well_formed() {
                    return Err(wrong(
                        slot,
                        format!(
                            "the server returned {} {} element(s) where the caller's buffer holds {} {elem}",
                            a.len(),
                            a.elem,
                            slot.elems.unwrap_or(0)
                        ),
                    ));
                }
                // SAFETY: the caller's buffer holds exactly this many elements.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        a.data.as_ptr(),
                        slot.dest.cast::<u8>(),
                        a.data.len(),
                    )
                };
            }
            (ty, v) => {
                return Err(wrong(
                    slot,
                    format!("declared {ty}, but the server returned a {}", v.kind()),
                ));
            }
        }
    }
    Ok(())
}

/// A `malloc`ed copy (the caller frees it with `free`), NUL-terminated when asked.
fn malloc_copy(b: &[u8], nul: bool) -> Option<*mut c_void> {
    let n = b.len() + usize::from(nul);
    // SAFETY: a fresh allocation of at least one byte, filled before it is handed out.
    unsafe {
        let p = libc::malloc(n.max(1));
        if p.is_null() {
            return None;
        }
        std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len());
        if nul {
            *p.cast::<u8>().add(b.len()) = 0;
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::ArgDesc;

    fn dgemm() -> ServiceDesc {
        ServiceDesc {
            name: "dgemm".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("m", ArgMode::In, "int"),
                ArgDesc::new("n", ArgMode::In, "int"),
                ArgDesc::new("k", ArgMode::In, "int"),
                ArgDesc::new("A", ArgMode::In, "matrix<f64>[m,k]"),
                ArgDesc::new("B", ArgMode::In, "matrix<f64>[k,n]"),
                ArgDesc::new("C", ArgMode::Out, "matrix<f64>[m,n]"),
            ],
            size_params: vec!["m".into(), "n".into(), "k".into()],
            complexity: None,
            duration: None,
            memory: None,
        }
    }

    fn int(i: c_int) -> RawArg {
        RawArg {
            kind: c_int::from(b'i'),
            i,
            d: 0.0,
            p: std::ptr::null_mut(),
        }
    }

    fn ptr<T>(p: *mut T) -> RawArg {
        RawArg {
            kind: c_int::from(b'p'),
            i: 0,
            d: 0.0,
            p: p.cast(),
        }
    }

    #[test]
    fn arrays_take_their_dimensions_from_the_int_arguments() {
        let d = dgemm();
        assert_eq!(arg_kinds(&d), b"iiippp");
        let mut a = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2 x 3
        let mut b = [1.0f64, 0.0, 0.0]; // 3 x 1
        let mut c = [0.0f64; 2];
        let raw = [
            int(2),
            int(1),
            int(3),
            ptr(a.as_mut_ptr()),
            ptr(b.as_mut_ptr()),
            ptr(c.as_mut_ptr()),
        ];
        let p = unsafe { pack(&d, &raw, false) }.unwrap();
        assert_eq!(p.inputs.len(), 5);
        match &p.inputs[3] {
            Value::Matrix(m) => {
                assert_eq!((m.rows, m.cols, m.to_f64().unwrap()), (2, 3, a.to_vec()))
            }
            v => panic!("{v:?}"),
        }
        let out = Value::Matrix(Array::from_f64(2, 1, &[7.0, 8.0]));
        unsafe { write_outputs("dgemm", &p.outputs, &[out]) }.unwrap();
        assert_eq!(c, [7.0, 8.0]);
        // A result of another size is refused, not written past the caller's buffer.
        let big = Value::Matrix(Array::from_f64(3, 1, &[1.0, 2.0, 3.0]));
        let e = unsafe { write_outputs("dgemm", &p.outputs, &[big]) }.unwrap_err();
        assert!(e.message.contains("buffer holds 2"), "{e}");
        assert_eq!(c, [7.0, 8.0]);
    }

    #[test]
    fn stacks_pass_scalars_by_pointer_and_bad_input_is_refused() {
        let d = ServiceDesc {
            name: "add".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("x", ArgMode::In, "int"),
                ArgDesc::new("y", ArgMode::Out, "int"),
            ],
            size_params: vec![],
            complexity: None,
            duration: None,
            memory: None,
        };
        let (mut x, mut y): (c_int, c_int) = (41, 0);
        let p = unsafe { pack(&d, &[ptr(&mut x), ptr(&mut y)], true) }.unwrap();
        assert_eq!(p.inputs, vec![Value::Int(41)]);
        unsafe { write_outputs("add", &p.outputs, &[Value::Int(42)]) }.unwrap();
        assert_eq!(y, 42);
        let e = unsafe { write_outputs("add", &p.outputs, &[Value::Int(1 << 40)]) }.unwrap_err();
        assert!(e.message.contains("does not fit a C int"), "{e}");
        let e = unsafe { pack(&d, &[ptr(&mut x)], true) }.unwrap_err();
        assert!(
            e.message.contains("takes 2 argument(s) (x, y), but 1"),
            "{e}"
        );
        let e =
            unsafe { pack(&d, &[int(1), ptr(std::ptr::null_mut::<c_int>())], false) }.unwrap_err();
        assert!(e.message.contains("`y`: a NULL pointer"), "{e}");
        let neg = ServiceDesc {
            args: vec![
                ArgDesc::new("n", ArgMode::In, "int"),
                ArgDesc::new("v", ArgMode::In, "vector<f64>[n]"),
            ],
            ..d.clone()
        };
        let mut v = [0.0f64];
        let e = unsafe { pack(&neg, &[int(-3), ptr(v.as_mut_ptr())], false) }.unwrap_err();
        assert!(e.message.contains("dimension `n` is -3"), "{e}");
    }

    #[test]
    fn strings_and_bytes_come_back_malloced() {
        let d = ServiceDesc {
            name: "echo".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("s", ArgMode::In, "string"),
                ArgDesc::new("t", ArgMode::Out, "string"),
                ArgDesc::new("b", ArgMode::InOut, "bytes"),
            ],
            size_params: vec![],
            complexity: None,
            duration: None,
            memory: None,
        };
        let mut s = *b"hi\0";
        let mut t: *mut c_char = std::ptr::null_mut();
        let mut payload = [1u8, 2, 3];
        let mut b = CBytes {
            data: payload.as_mut_ptr().cast(),
            size: 3,
        };
        let raw = [ptr(s.as_mut_ptr()), ptr(&mut t), ptr(&mut b)];
        let p = unsafe { pack(&d, &raw, false) }.unwrap();
        assert_eq!(
            p.inputs,
            vec![Value::Str("hi".into()), Value::Bytes(vec![1, 2, 3])]
        );
        let outs = [Value::Str("héllo".into()), Value::Bytes(vec![9; 5])];
        unsafe { write_outputs("echo", &p.outputs, &outs) }.unwrap();
        unsafe {
            assert_eq!(CStr::from_ptr(t).to_str().unwrap(), "héllo");
            assert_eq!(
                std::slice::from_raw_parts(b.data.cast::<u8>(), b.size),
                &[9; 5]
            );
            libc::free(t.cast());
            libc::free(b.data);
        }
    }
}
