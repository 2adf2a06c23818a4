//! How a library routine is called for a service: its symbol, calling convention and native
//! argument list, written in a description file as
//! `library = { symbol = "dgesv_", convention = "fortran", call = [...] }`.
//!
//! Each item of `call` is one native argument, in order:
//! - the name of a service argument (`"A"`): its value, by value or by pointer as the
//!   convention says, arrays as pointers to their elements;
//! - an integer expression over the int inputs (`"n"` when no argument is so named, `"max(1,n)"`,
//!   `"2*n"`), passed as an int — leading dimensions, counts;
//! - a number with a point (`"1.0"`, `"-1.0"`): a double; a quoted character (`"'N'"`): a char —
//!   BLAS's `trans` and `uplo` flags;
//! - `"work:T[expr]"`: a zeroed scratch array of `expr` elements of `T` (f64, f32, i32, i64);
//! - `"info"`: an int the routine sets; anything but 0 fails the call (LAPACK's convention).
//!
//! `convention = "fortran"` passes everything by reference, appends the hidden lengths of
//! character arguments (gfortran's ABI) and hands arrays over in column-major order (gridwise
//! values are row-major: they are transposed in and out). `convention = "c"` passes IN scalars
//! by value and arrays in row-major order. `order = { A = "row" }` overrides the order of one
//! array — a binding that calls BLAS with row-major data directly (swapping operands instead of
//! transposing) avoids the copies.

use gridwise_proto::{ArgMode, ArgType, Complexity, ElemType, ServiceDesc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Convention {
    #[default]
    Fortran,
    C,
}

/// The element order a routine expects of an array argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Row,
    Col,
}

/// What the routine's return value means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Returns {
    /// Nothing (Fortran subroutines, `void` C functions).
    #[default]
    Void,
    /// A C `int` status: anything but 0 fails the call.
    Status,
}

/// The library call of a service, as its description file gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibraryCall {
    /// The symbol in the shared object (`dgesv_` for Fortran LAPACK, `cblas_dgemm`, …).
    pub symbol: String,
    #[serde(default)]
    pub convention: Convention,
    /// The native arguments, in order (see the module's documentation).
    pub call: Vec<String>,
    /// Per array argument, the order the routine expects (default: column-major for Fortran,
    /// row-major for C).
    #[serde(default)]
    pub order: HashMap<String, Order>,
    /// Bits of the routine's integers: 32 (the usual LP64 BLAS/LAPACK) or 64 (ILP64).
    #[serde(default = "thirty_two")]
    pub int_bits: u8,
    #[serde(default)]
    pub returns: Returns,
}

fn thirty_two() -> u8 {
    32
}

/// One native argument of a planned call.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeArg {
    /// The service argument at this index of `desc.args`.
    Service(usize),
    /// An integer literal (a stride, a count): no expression to evaluate per call.
    Const(i64),
    Int(Complexity),
    Double(f64),
    Char(u8),
    Work {
        elem: ElemType,
        len: Complexity,
    },
    Info,
}

impl LibraryCall {
    /// The int inputs of `desc` by name: what expressions may use.
    fn int_inputs(desc: &ServiceDesc) -> Vec<String> {
        desc.args
            .iter()
            .filter(|a| a.mode.is_input() && a.ty == ArgType::Int)
            .map(|a| a.name.clone())
            .collect()
    }

    /// The native arguments, checked against `desc`.
    pub fn plan(&self, desc: &ServiceDesc) -> Result<Vec<NativeArg>, String> {
        let ints = Self::int_inputs(desc);
        let expr = |e: &str| {
            Complexity::parse(e, &ints).map_err(|err| {
                format!(
                    "`{e}` is neither an argument of the service nor an integer expression over its int inputs ({}): {err}",
                    ints.join(", ")
                )
            })
        };
        let mut out = Vec::new();
        for item in &self.call {
            let t = item.trim();
            if let Some(i) = desc.args.iter().position(|a| a.name == t) {
                out.push(NativeArg::Service(i));
            } else if t == "info" {
                out.push(NativeArg::Info);
            } else if let Some(w) = t.strip_prefix("work:") {
                let (elem, rest) = w
                    .split_once('[')
                    .ok_or_else(|| format!("`{t}`: write work:T[length], e.g. work:f64[n]"))?;
                let len = rest
                    .strip_suffix(']')
                    .ok_or_else(|| format!("`{t}`: the length ends with `]`"))?;
                out.push(NativeArg::Work {
                    elem: elem.parse()?,
                    len: expr(len)?,
                });
            } else if let Some(c) = t.strip_prefix('\'').and_then(|c| c.strip_suffix('\'')) {
                match c.as_bytes() {
                    [b] if b.is_ascii() => out.push(NativeArg::Char(*b)),
                    _ => return Err(format!("`{t}`: a character is one ASCII letter in quotes")),
                }
            } else if t.contains(['.', 'e', 'E']) && t.parse::<f64>().is_ok() {
                out.push(NativeArg::Double(t.parse::<f64>().unwrap_or_default()));
            } else if let Ok(v) = t.parse::<i64>() {
                out.push(NativeArg::Const(v));
            } else {
                out.push(NativeArg::Int(expr(t)?));
            }
        }
        for (i, a) in desc.args.iter().enumerate() {
            if a.mode.is_output() && !out.contains(&NativeArg::Service(i)) {
                return Err(format!(
                    "output `{}` is never passed to the routine, so nothing would write it",
                    a.name
                ));
            }
        }
        for name in self.order.keys() {
            let ok = desc.args.iter().any(|a| {
                a.name == *name && matches!(a.ty, ArgType::Vector { .. } | ArgType::Matrix { .. })
            });
            if !ok {
                return Err(format!(
                    "`order` names `{name}`, which is no array argument"
                ));
            }
        }
        if self.int_bits != 32 && self.int_bits != 64 {
            return Err(format!("int_bits is {}: 32 or 64", self.int_bits));
        }
        if self.symbol.trim().is_empty() {
            return Err("the symbol is empty".into());
        }
        Ok(out)
    }

    /// Checks the call against `desc` (what a description file's reader does).
    pub fn check(&self, desc: &ServiceDesc) -> Result<(), String> {
        self.plan(desc).map(|_| ())
    }

    /// The order the routine sees the array argument `name` in.
    pub fn order_of(&self, name: &str) -> Order {
        self.order
            .get(name)
            .copied()
            .unwrap_or(match self.convention {
                Convention::Fortran => Order::Col,
                Convention::C => Order::Row,
            })
    }

    /// Whether a service argument travels by value (C's IN scalars) or by pointer.
    pub fn by_value(&self, mode: ArgMode, ty: &ArgType) -> bool {
        self.convention == Convention::C
            && mode == ArgMode::In
            && matches!(ty, ArgType::Int | ArgType::Double)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::ArgDesc;

    fn desc() -> ServiceDesc {
        ServiceDesc {
            name: "dgesv".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("n", ArgMode::In, "int"),
                ArgDesc::new("nrhs", ArgMode::In, "int"),
                ArgDesc::new("A", ArgMode::In, "matrix<f64>[n,n]"),
                ArgDesc::new("B", ArgMode::InOut, "matrix<f64>[n,nrhs]"),
            ],
            size_params: vec!["n".into(), "nrhs".into()],
            complexity: None,
            duration: None,
            memory: None,
        }
    }

    fn call(items: &[&str]) -> LibraryCall {
        LibraryCall {
            symbol: "dgesv_".into(),
            convention: Convention::Fortran,
            call: items.iter().map(|s| s.to_string()).collect(),
            order: HashMap::new(),
            int_bits: 32,
            returns: Returns::Void,
        }
    }

    #[test]
    fn every_kind_of_native_argument_is_planned() {
        let c = call(&[
            "n",
            "nrhs",
            "A",
            "max(1,n)",
            "work:i32[n]",
            "B",
            "n",
            "info",
            "'N'",
            "-1.0",
        ]);
        let p = c.plan(&desc()).unwrap();
        assert_eq!(p[0], NativeArg::Service(0));
        assert!(matches!(&p[3], NativeArg::Int(e) if e.expr() == "max(1,n)"));
        assert!(matches!(
            &p[4],
            NativeArg::Work {
                elem: ElemType::I32,
                ..
            }
        ));
        assert_eq!(p[7], NativeArg::Info);
        assert_eq!(p[8], NativeArg::Char(b'N'));
        assert_eq!(p[9], NativeArg::Double(-1.0));
        assert_eq!(c.order_of("A"), Order::Col);
        assert!(!c.by_value(ArgMode::In, &ArgType::Int));
    }

    #[test]
    fn bad_calls_say_what_is_wrong() {
        let d = desc();
        let e = call(&["n", "A"]).plan(&d).unwrap_err();
        assert!(e.contains("output `B` is never passed"), "{e}");
        let e = call(&["n", "B", "q+1"]).plan(&d).unwrap_err();
        assert!(e.contains("`q+1`") && e.contains("n, nrhs"), "{e}");
        let e = call(&["B", "work:f99[n]"]).plan(&d).unwrap_err();
        assert!(e.contains("f99"), "{e}");
        let e = call(&["B", "'NT'"]).plan(&d).unwrap_err();
        assert!(e.contains("one ASCII letter"), "{e}");
        let mut c = call(&["B"]);
        c.order.insert("n".into(), Order::Row);
        assert!(c.plan(&d).unwrap_err().contains("no array argument"));
        let mut c = call(&["B"]);
        c.int_bits = 16;
        assert!(c.plan(&d).unwrap_err().contains("32 or 64"));
    }
}
