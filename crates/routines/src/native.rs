//! A library routine called in its worker process: the shared object loaded once
//! (`libloading`), each call's native arguments built from the plan and the request, the call
//! made through `libffi` (any mix of ints, doubles and pointers, as the convention says), the
//! status checked, and the outputs left where the server reserved them.

use crate::arena::Arena;
use crate::binding::{Convention, LibraryCall, NativeArg, Order, Returns};
use crate::frame::{ArrayPlace, Item, Request};
use gridwise_proto::{ArgType, ServiceDesc};
use libffi::middle::{Arg, Cif, CodePtr, Type};
use std::ffi::{CString, c_int, c_void};

/// A loaded routine.
pub struct Routine {
    // Kept loaded for as long as `f` may be called.
    _lib: libloading::Library,
    f: *const c_void,
    desc: ServiceDesc,
    call: LibraryCall,
    plan: Vec<NativeArg>,
    /// The call interface, the same for every call: the plan fixes every argument's type.
    cif: Option<Cif>,
}

/// A scalar the routine reads or writes, kept at a fixed address for the call.
#[derive(Clone, Copy, Debug)]
enum Scalar {
    I32(i32),
    I64(i64),
    F64(f64),
    U8(u8),
    Usize(usize),
    Ptr(*mut c_void),
}

impl Scalar {
    fn ffi_type(&self) -> Type {
        match self {
            Scalar::I32(_) => Type::i32(),
            Scalar::I64(_) => Type::i64(),
            Scalar::F64(_) => Type::f64(),
            Scalar::U8(_) => Type::u8(),
            Scalar::Usize(_) => Type::usize(),
            Scalar::Ptr(_) => Type::pointer(),
        }
    }

    fn arg(&self) -> Arg {
        match self {
            Scalar::I32(x) => Arg::new(x),
            Scalar::I64(x) => Arg::new(x),
            Scalar::F64(x) => Arg::new(x),
            Scalar::U8(x) => Arg::new(x),
            Scalar::Usize(x) => Arg::new(x),
            Scalar::Ptr(x) => Arg::new(x),
        }
    }

    fn as_i64(&self) -> i64 {
        match *self {
            Scalar::I32(x) => i64::from(x),
            Scalar::I64(x) => x,
            Scalar::F64(x) => x as i64,
            Scalar::U8(x) => i64::from(x),
            Scalar::Usize(x) => x as i64,
            Scalar::Ptr(_) => 0,
        }
    }

    fn as_f64(&self) -> f64 {
        match *self {
            Scalar::F64(x) => x,
            other => other.as_i64() as f64,
        }
    }

    /// Its address, for passing by reference.
    fn addr(&mut self) -> *mut c_void {
        match self {
            Scalar::I32(x) => (x as *mut i32).cast(),
            Scalar::I64(x) => (x as *mut i64).cast(),
            Scalar::F64(x) => (x as *mut f64).cast(),
            Scalar::U8(x) => (x as *mut u8).cast(),
            Scalar::Usize(x) => (x as *mut usize).cast(),
            Scalar::Ptr(x) => (x as *mut *mut c_void).cast(),
        }
    }
}

/// Copies a row-major `rows × cols` array of `size`-byte elements into column-major order
/// (which is the row-major transpose); the same call with rows and cols swapped goes back.
fn transpose(src: &[u8], dst: &mut [u8], rows: usize, cols: usize, size: usize) {
    for r in 0..rows {
        for c in 0..cols {
            let s = (r * cols + c) * size;
            let d = (c * rows + r) * size;
            dst[d..d + size].copy_from_slice(&src[s..s + size]);
        }
    }
}

impl Routine {
    /// Loads `symbol` from the shared object at `path` (a name like `liblapack.so.3` is found
    /// as the dynamic loader finds libraries).
    pub fn load(desc: ServiceDesc, path: &str, call: LibraryCall) -> Result<Routine, String> {
        let plan = call.plan(&desc)?;
        // SAFETY: loading a library runs its initialisers: that is what the server owner
        // configured, and it runs in this worker process, not in the server.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load the library `{path}`: {e}"))?;
        let f = {
            // SAFETY: the symbol is only ever called through the description's plan.
            let sym: libloading::Symbol<'_, *const c_void> =
                unsafe { lib.get(call.symbol.as_bytes()) }
                    .map_err(|e| format!("`{path}` has no symbol `{}`: {e}", call.symbol))?;
            *sym
        };
        Ok(Routine {
            _lib: lib,
            f,
            desc,
            call,
            plan,
            cif: None,
        })
    }

    fn int(&self, v: i64) -> Scalar {
        if self.call.int_bits == 64 {
            Scalar::I64(v)
        } else {
            Scalar::I32(v as i32)
        }
    }

    /// Runs the routine on a request whose arrays are in `arena`; returns the outputs. The
    /// steps: the call's frame built from the plan and the request, the call made, its status
    /// (and `info`) checked, column-major copies written back, the outputs read.
    pub fn run(&mut self, req: &Request, arena: &mut Arena) -> Result<Vec<Item>, String> {
        if req.args.len() != self.desc.args.len() {
            return Err(format!(
                "a request with {} arguments for `{}`",
                req.args.len(),
                self.desc.name
            ));
        }
        let mut frame = self.frame(req, arena)?;
        let status = self.invoke(&mut frame);
        self.check(status, &frame)?;
        for (t, x, size) in &frame.transposed {
            let ptr = array_ptr(arena, x)?;
            // SAFETY: in bounds (checked by `array_ptr`).
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr, x.place.len as usize) };
            transpose(t, dst, x.cols as usize, x.rows as usize, *size);
        }
        self.outputs(req, &frame)
    }

    /// Every argument the routine gets, in the plan's order: scalars at fixed addresses,
    /// strings, scratch, column-major copies of arrays the routine reads that way.
    fn frame(&self, req: &Request, arena: &mut Arena) -> Result<CallFrame, String> {
        let d = &self.desc;
        let ints: Vec<(String, i64)> = d
            .args
            .iter()
            .zip(&req.args)
            .filter_map(|(a, i)| match (&a.ty, i) {
                (ArgType::Int, Item::Int(v)) if a.mode.is_input() => Some((a.name.clone(), *v)),
                _ => None,
            })
            .collect();
        let eval = |e: &gridwise_proto::Complexity| -> Result<i64, String> {
            e.eval(&ints)
                .map(|v| v.round() as i64)
                .map_err(|e| e.to_string())
        };
        let fortran = self.call.convention == Convention::Fortran;
        let by_c_value = self.call.convention == Convention::C;
        let mut f = CallFrame {
            scalars: Vec::with_capacity(self.plan.len() * 2),
            passing: Vec::with_capacity(self.plan.len() * 2),
            scalar_of: vec![None; d.args.len()],
            ..CallFrame::default()
        };
        for p in &self.plan {
            let (s, by_value) = match p {
                NativeArg::Service(i) => self.service_arg(*i, &req.args[*i], arena, &mut f)?,
                NativeArg::Const(v) => (self.int(*v), by_c_value),
                NativeArg::Int(e) => (self.int(eval(e)?), by_c_value),
                NativeArg::Double(x) => (Scalar::F64(*x), by_c_value),
                NativeArg::Char(ch) => {
                    if fortran {
                        f.hidden.push(1);
                    }
                    (Scalar::U8(*ch), !fortran)
                }
                NativeArg::Work { elem, len } => {
                    let n = usize::try_from(eval(len)?).unwrap_or(0);
                    let mut w = vec![0u8; n.max(1) * elem.size()];
                    let ptr = w.as_mut_ptr();
                    f.work.push(w);
                    (Scalar::Ptr(ptr.cast()), true)
                }
                NativeArg::Info => {
                    f.info = Some(f.scalars.len());
                    (self.int(0), false)
                }
            };
            f.passing.push((f.scalars.len(), by_value));
            f.scalars.push(s);
        }
        Ok(f)
    }

    /// Service argument `i` as the routine takes it, and whether by value.
    fn service_arg(
        &self,
        i: usize,
        item: &Item,
        arena: &mut Arena,
        f: &mut CallFrame,
    ) -> Result<(Scalar, bool), String> {
        let a = &self.desc.args[i];
        let by_value = self.call.by_value(a.mode, &a.ty);
        Ok(match (&a.ty, item) {
            (ArgType::Int, item) => {
                let v = if let Item::Int(v) = item { *v } else { 0 };
                f.scalar_of[i] = Some(f.scalars.len());
                (self.int(v), by_value)
            }
            (ArgType::Double, item) => {
                let v = if let Item::Double(v) = item { *v } else { 0.0 };
                f.scalar_of[i] = Some(f.scalars.len());
                (Scalar::F64(v), by_value)
            }
            (ArgType::Str, Item::Str(s)) => {
                let c = CString::new(s.as_bytes())
                    .map_err(|_| format!("string `{}` holds a NUL byte", a.name))?;
                if self.call.convention == Convention::Fortran {
                    f.hidden.push(s.len());
                }
                let ptr = c.as_ptr().cast_mut().cast();
                f.strings.push(c);
                (Scalar::Ptr(ptr), true)
            }
            (ArgType::Bytes, Item::Bytes(pl)) => {
                let ptr = arena
                    .slice_mut(pl.off, pl.len)
                    .ok_or("bytes out of the arena's bounds")?
                    .as_mut_ptr();
                (Scalar::Ptr(ptr.cast()), true)
            }
            (ArgType::Vector { .. } | ArgType::Matrix { .. }, Item::Array(x)) => {
                let ptr = array_ptr(arena, x)?;
                let size = x.elem.size();
                let (r, c) = (x.rows as usize, x.cols as usize);
                if self.call.order_of(&a.name) == Order::Col && r > 1 && c > 1 {
                    let mut t = vec![0u8; x.place.len as usize];
                    // SAFETY: the place is in bounds (checked by `array_ptr`).
                    let src = unsafe { std::slice::from_raw_parts(ptr, x.place.len as usize) };
                    transpose(src, &mut t, r, c, size);
                    let tp = t.as_mut_ptr();
                    f.transposed.push((t, *x, size));
                    (Scalar::Ptr(tp.cast()), true)
                } else {
                    (Scalar::Ptr(ptr.cast()), true)
                }
            }
            (ty, item) => {
                return Err(format!(
                    "argument `{}` ({ty}) cannot be passed to a library routine as {item:?}",
                    a.name
                ));
            }
        })
    }

    /// Calls the routine with `f`'s arguments (scalars by reference point into `f`, which the
    /// routine may write through); its status (0 for a routine that returns nothing).
    fn invoke(&mut self, f: &mut CallFrame) -> c_int {
        // Pointers to scalars passed by reference; `f.scalars` no longer grows from here.
        let mut refs: Vec<Scalar> = Vec::with_capacity(f.passing.len() + f.hidden.len());
        for &(k, by_value) in &f.passing {
            if by_value {
                refs.push(f.scalars[k]);
            } else {
                refs.push(Scalar::Ptr(f.scalars[k].addr()));
            }
        }
        refs.extend(f.hidden.iter().map(|h| Scalar::Usize(*h)));
        let args: Vec<Arg> = refs.iter().map(Scalar::arg).collect();
        let code = CodePtr::from_ptr(self.f);
        let returns = self.call.returns;
        let cif = self.cif.get_or_insert_with(|| {
            let types: Vec<Type> = refs.iter().map(Scalar::ffi_type).collect();
            match returns {
                Returns::Void => Cif::new(types, Type::void()),
                Returns::Status => Cif::new(types, Type::c_int()),
            }
        });
        match returns {
            // SAFETY: the routine's signature is what its description's plan says (the same
            // types on every call); the pointers point at live scalars, scratch and arena
            // memory of the sizes the description gives.
            Returns::Void => {
                unsafe { cif.call::<()>(code, &args) };
                0
            }
            // SAFETY: as above.
            Returns::Status => unsafe { cif.call::<c_int>(code, &args) },
        }
    }

    /// The routine's verdict: its status, and the `info` argument where it has one. The
    /// routine wrote through the addresses of `f.scalars` entries; they are read back from
    /// there (the call was opaque to the compiler, so nothing cached them).
    fn check(&self, status: c_int, f: &CallFrame) -> Result<(), String> {
        if status != 0 {
            return Err(format!("`{}` returned status {status}", self.call.symbol));
        }
        let Some(v) = f.info.map(|k| f.scalars[k].as_i64()).filter(|v| *v != 0) else {
            return Ok(());
        };
        Err(format!(
            "`{}` reported info = {v}{}",
            self.call.symbol,
            if v < 0 {
                format!(" (argument {} had an illegal value)", -v)
            } else {
                " (see the routine's documentation: for a factorisation, the matrix is singular or not positive definite)".into()
            }
        ))
    }

    /// The outputs: scalars read back from the frame, arrays where the server reserved them.
    fn outputs(&self, req: &Request, f: &CallFrame) -> Result<Vec<Item>, String> {
        let scalar = |i: usize| f.scalar_of[i].map(|k| f.scalars[k]);
        let mut outs = Vec::new();
        for (i, a) in self.desc.args.iter().enumerate() {
            if !a.mode.is_output() {
                continue;
            }
            outs.push(match (&a.ty, &req.args[i]) {
                (ArgType::Int, _) => Item::Int(scalar(i).map_or(0, |s| s.as_i64())),
                (ArgType::Double, _) => Item::Double(scalar(i).map_or(0.0, |s| s.as_f64())),
                (_, Item::Array(x)) => Item::Array(*x),
                (ty, _) => {
                    return Err(format!(
                        "output `{}` ({ty}) cannot come from a library routine",
                        a.name
                    ));
                }
            });
        }
        Ok(outs)
    }
}

/// Everything one call hands the routine, kept alive (the buffers at fixed addresses) until
/// it returns.
#[derive(Default)]
struct CallFrame {
    scalars: Vec<Scalar>,
    /// Per argument of the routine: (index in `scalars`, passed by value).
    passing: Vec<(usize, bool)>,
    /// Fortran's hidden string lengths, passed after the arguments.
    hidden: Vec<usize>,
    strings: Vec<CString>,
    work: Vec<Vec<u8>>,
    /// Column-major copies: (scratch, arena place, element size) to copy back after.
    transposed: Vec<(Vec<u8>, ArrayPlace, usize)>,
    /// Where each service argument's scalar is (to read outputs back).
    scalar_of: Vec<Option<usize>>,
    /// The `info` argument's scalar, where the routine has one.
    info: Option<usize>,
}

/// Where an array the request placed in `arena` starts, once its place is checked in bounds.
fn array_ptr(arena: &mut Arena, p: &ArrayPlace) -> Result<*mut u8, String> {
    if p.place.off + p.place.len > arena.len() as u64 {
        return Err("an array out of the arena's bounds".into());
    }
    // SAFETY: in bounds of the mapping, checked above.
    Ok(unsafe { arena.as_mut_slice().as_mut_ptr().add(p.place.off as usize) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposing_twice_gives_the_array_back() {
        let a: Vec<u8> = (0..6u8).collect(); // 2 x 3 of one-byte elements
        let mut t = vec![0u8; 6];
        transpose(&a, &mut t, 2, 3, 1);
        assert_eq!(t, vec![0, 3, 1, 4, 2, 5]);
        let mut back = vec![0u8; 6];
        transpose(&t, &mut back, 3, 2, 1);
        assert_eq!(back, a);
    }
}
