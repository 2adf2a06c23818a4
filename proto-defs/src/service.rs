//! Service descriptions (the IDL): named, typed, moded arguments, the size parameters the
//! performance model is indexed by, and the complexity. A description is data: servers publish
//! it, the agent reasons with it, and clients check and pack arguments with it.

use crate::complexity::{Complexity, ComplexityError};
use crate::messages::CallProfile;
use crate::value::{ElemType, Value};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Whether an argument goes in, comes out, or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgMode {
    /// Sent to the server.
    In,
    /// Returned by the server.
    Out,
    /// Sent, and returned (possibly changed).
    InOut,
}

impl ArgMode {
    /// The word description files and signatures spell it with.
    pub fn as_str(self) -> &'static str {
        match self {
            ArgMode::In => "in",
            ArgMode::Out => "out",
            ArgMode::InOut => "inout",
        }
    }

    /// Whether the client sends this argument.
    pub fn is_input(self) -> bool {
        matches!(self, ArgMode::In | ArgMode::InOut)
    }

    /// Whether the server returns this argument.
    pub fn is_output(self) -> bool {
        matches!(self, ArgMode::Out | ArgMode::InOut)
    }
}

/// An array dimension: a fixed number, or the value of an `int` input argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A number in the IDL, e.g. the `3` of `vector<f64>[3]`.
    Fixed(u64),
    /// The value of the named int input argument.
    Arg(String),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Arg(a) => f.write_str(a),
        }
    }
}

impl FromStr for Dim {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Dim::Fixed(n));
        }
        let ok = s
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ok {
            Ok(Dim::Arg(s.to_string()))
        } else {
            Err(format!(
                "dimension `{s}` is neither a number nor an argument name"
            ))
        }
    }
}

/// An argument type. Written in the IDL as `int`, `double`, `string`, `bytes`,
/// `vector<f64>[n]` or `matrix<f64>[m,k]` (element types f64, f32, i32, i64).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ArgType {
    /// A 64-bit integer.
    Int,
    /// A 64-bit float.
    Double,
    /// A UTF-8 string.
    Str,
    /// Opaque bytes. Like a string, its size is unknown until produced, so output estimates
    /// count it as 0.
    Bytes,
    /// A vector of `len` elements.
    Vector { elem: ElemType, len: Dim },
    /// A row-major rows × cols matrix.
    Matrix {
        elem: ElemType,
        rows: Dim,
        cols: Dim,
    },
}

impl fmt::Display for ArgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgType::Int => f.write_str("int"),
            ArgType::Double => f.write_str("double"),
            ArgType::Str => f.write_str("string"),
            ArgType::Bytes => f.write_str("bytes"),
            ArgType::Vector { elem, len } => write!(f, "vector<{elem}>[{len}]"),
            ArgType::Matrix { elem, rows, cols } => write!(f, "matrix<{elem}>[{rows},{cols}]"),
        }
    }
}

impl FromStr for ArgType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t {
            "int" => return Ok(ArgType::Int),
            "double" => return Ok(ArgType::Double),
            "string" => return Ok(ArgType::Str),
            "bytes" => return Ok(ArgType::Bytes),
            _ => {}
        }
        let bad = || {
            format!(
                "type `{t}` is not one of int, double, string, bytes, vector<T>[n], matrix<T>[r,c]"
            )
        };
        let (kind, rest) = t.split_once('<').ok_or_else(bad)?;
        let (elem, rest) = rest.split_once('>').ok_or_else(bad)?;
        let elem: ElemType = elem.parse()?;
        let dims = rest
            .trim()
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .ok_or_else(bad)?;
        let dims: Vec<&str> = dims.split(',').collect();
        match (kind.trim(), dims.as_slice()) {
            ("vector", [n]) => Ok(ArgType::Vector {
                elem,
                len: n.parse()?,
            }),
            ("matrix", [r, c]) => Ok(ArgType::Matrix {
                elem,
                rows: r.parse()?,
                cols: c.parse()?,
            }),
            _ => Err(bad()),
        }
    }
}

impl TryFrom<String> for ArgType {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ArgType> for String {
    fn from(t: ArgType) -> String {
        t.to_string()
    }
}

/// One argument of a service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArgDesc {
    /// Name, unique within the service.
    pub name: String,
    pub mode: ArgMode,
    /// Type, in IDL spelling when written in a config file.
    #[serde(rename = "type")]
    pub ty: ArgType,
    /// One line for users.
    #[serde(default)]
    pub doc: String,
}

impl ArgDesc {
    /// An argument from its parts; `ty` in IDL spelling (panics on a bad literal, so use it for
    /// descriptions written in code, not for user input).
    pub fn new(name: &str, mode: ArgMode, ty: &str) -> Self {
        Self {
            name: name.to_string(),
            mode,
            ty: ty
                .parse()
                .unwrap_or_else(|e| panic!("bad built-in type: {e}")),
            doc: String::new(),
        }
    }
}

/// A remote routine as servers offer it and clients call it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceDesc {
    /// The name clients call, e.g. `dgemm`.
    pub name: String,
    /// One line for users.
    #[serde(default)]
    pub doc: String,
    /// Arguments in call order.
    pub args: Vec<ArgDesc>,
    /// The int input arguments the performance model is indexed by, e.g. `[m, n, k]`.
    #[serde(default)]
    pub size_params: Vec<String>,
    /// Operations as a function of the size parameters, e.g. `2*m*n*k`.
    #[serde(default)]
    pub complexity: Option<String>,
    /// Seconds a call takes on any server, for services whose time is set by their arguments
    /// rather than by a machine's speed (e.g. `sleep`: `seconds`); an expression over the size
    /// parameters. The agent then knows such a call's time before any has run.
    #[serde(default)]
    pub duration: Option<String>,
    /// Bytes a call needs on the server as a function of the size parameters (e.g. `24*n*n`
    /// for three n×n matrices), where its inputs and outputs do not say it all (work arrays):
    /// a server whose forecast free memory is smaller is not offered the call.
    #[serde(default)]
    pub memory: Option<String>,
}

/// A service description that does not hold together.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServiceError {
    /// Two arguments share a name.
    #[error("service `{service}`: argument `{arg}` is declared twice")]
    DuplicateArg { service: String, arg: String },
    /// A dimension or size parameter names something that is not an int input.
    #[error(
        "service `{service}`: `{name}` (used by {used_by}) must name an int input argument declared in the service"
    )]
    NotAnIntInput {
        service: String,
        name: String,
        /// For the message: `size_params`, or the shape of the argument that uses `name`.
        used_by: String,
    },
    /// The complexity is not a valid expression over the size parameters.
    #[error("service `{service}`: {source}")]
    Complexity {
        service: String,
        source: ComplexityError,
    },
    /// The duration is not a valid expression over the size parameters.
    #[error("service `{service}`, in its duration: {source}")]
    Duration {
        service: String,
        source: ComplexityError,
    },
    /// The memory formula is not a valid expression over the size parameters.
    #[error("service `{service}`, in its memory formula: {source}")]
    Memory {
        service: String,
        source: ComplexityError,
    },
    /// The name is empty or has characters other than letters, digits, `_`, `-`, `.`.
    #[error("service name `{0}` must be non-empty and use only letters, digits, `_`, `-` or `.`")]
    BadName(String),
}

/// Inputs that do not fit a service description.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgError {
    /// Wrong number of input values.
    #[error("`{service}` takes {expected} input argument(s) ({names}), but {got} were given")]
    WrongCount {
        service: String,
        /// Values the description declares: its inputs, or its outputs when a kernel's outputs
        /// are checked ([`ServiceDesc::check_outputs`]).
        expected: usize,
        got: usize,
        /// The expected arguments' names in order, for the message (inputs with their types).
        names: String,
    },
    /// A value of the wrong kind.
    #[error("`{service}` argument `{arg}` must be {expected}, but a {got} was given")]
    WrongType {
        service: String,
        arg: String,
        /// The declared type.
        expected: String,
        /// The given value's kind in IDL words ([`Value::kind`]).
        got: String,
    },
    /// An array whose shape or buffer does not match its declared dimensions.
    #[error("`{service}` argument `{arg}`: {detail}")]
    WrongShape {
        service: String,
        arg: String,
        /// What does not match.
        detail: String,
    },
}

impl ServiceDesc {
    /// Checks the description itself: unique argument names, dimensions and size parameters
    /// that name int inputs, and a complexity over the size parameters.
    pub fn validate(&self) -> Result<(), ServiceError> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !name_ok {
            return Err(ServiceError::BadName(self.name.clone()));
        }
        for (i, a) in self.args.iter().enumerate() {
            if self.args[..i].iter().any(|b| b.name == a.name) {
                return Err(ServiceError::DuplicateArg {
                    service: self.name.clone(),
                    arg: a.name.clone(),
                });
            }
        }
        let int_input = |n: &str| {
            self.args
                .iter()
                .any(|a| a.name == n && a.mode.is_input() && a.ty == ArgType::Int)
        };
        for a in &self.args {
            let dims: Vec<&Dim> = match &a.ty {
                ArgType::Vector { len, .. } => vec![len],
                ArgType::Matrix { rows, cols, .. } => vec![rows, cols],
                _ => vec![],
            };
            for d in dims {
                if let Dim::Arg(n) = d
                    && !int_input(n)
                {
                    return Err(ServiceError::NotAnIntInput {
                        service: self.name.clone(),
                        name: n.clone(),
                        used_by: format!("the shape of `{}`", a.name),
                    });
                }
            }
        }
        for p in &self.size_params {
            if !int_input(p) {
                return Err(ServiceError::NotAnIntInput {
                    service: self.name.clone(),
                    name: p.clone(),
                    used_by: "size_params".into(),
                });
            }
        }
        self.compiled_complexity()?;
        self.compiled_duration()?;
        self.compiled_memory()?;
        Ok(())
    }

    /// The parsed memory formula, if the service declares one.
    pub fn compiled_memory(&self) -> Result<Option<Complexity>, ServiceError> {
        self.memory
            .as_deref()
            .map(|e| Complexity::parse(e, &self.size_params))
            .transpose()
            .map_err(|source| ServiceError::Memory {
                service: self.name.clone(),
                source,
            })
    }

    /// The parsed duration, if the service declares one.
    pub fn compiled_duration(&self) -> Result<Option<Complexity>, ServiceError> {
        self.duration
            .as_deref()
            .map(|e| Complexity::parse(e, &self.size_params))
            .transpose()
            .map_err(|source| ServiceError::Duration {
                service: self.name.clone(),
                source,
            })
    }

    /// The parsed complexity, if the service declares one.
    pub fn compiled_complexity(&self) -> Result<Option<Complexity>, ServiceError> {
        self.complexity
            .as_deref()
            .map(|e| Complexity::parse(e, &self.size_params))
            .transpose()
            .map_err(|source| ServiceError::Complexity {
                service: self.name.clone(),
                source,
            })
    }

    /// The arguments the client sends, in order.
    pub fn inputs(&self) -> impl Iterator<Item = &ArgDesc> {
        self.args.iter().filter(|a| a.mode.is_input())
    }

    /// The arguments the server returns, in order.
    pub fn outputs(&self) -> impl Iterator<Item = &ArgDesc> {
        self.args.iter().filter(|a| a.mode.is_output())
    }

    /// The value of an int input by name.
    fn int_input(&self, inputs: &[Value], name: &str) -> Option<i64> {
        self.inputs()
            .zip(inputs)
            .find(|(a, _)| a.name == name)
            .and_then(|(_, v)| v.as_int())
    }

    fn resolve(&self, inputs: &[Value], d: &Dim) -> Option<i64> {
        match d {
            Dim::Fixed(n) => i64::try_from(*n).ok(),
            Dim::Arg(a) => self.int_input(inputs, a),
        }
    }

    fn check_value(&self, inputs: &[Value], a: &ArgDesc, v: &Value) -> Result<(), ArgError> {
        let wrong_type = || ArgError::WrongType {
            service: self.name.clone(),
            arg: a.name.clone(),
            expected: a.ty.to_string(),
            got: v.kind(),
        };
        let shape = |detail: String| ArgError::WrongShape {
            service: self.name.clone(),
            arg: a.name.clone(),
            detail,
        };
        let (elem, want_rows, want_cols, arr) = match (&a.ty, v) {
            (ArgType::Int, Value::Int(_))
            | (ArgType::Double, Value::Double(_))
            | (ArgType::Str, Value::Str(_))
            | (ArgType::Bytes, Value::Bytes(_)) => return Ok(()),
            (ArgType::Vector { elem, len }, Value::Vector(arr)) => {
                (elem, self.resolve(inputs, len), Some(1), arr)
            }
            (ArgType::Matrix { elem, rows, cols }, Value::Matrix(arr)) => (
                elem,
                self.resolve(inputs, rows),
                self.resolve(inputs, cols),
                arr,
            ),
            // A remote value is checked by the server that runs the call, once it has pulled
            // it; ints cannot be remote, since sizes must be known to rank servers.
            (ty, Value::Ref(_)) if *ty != ArgType::Int => return Ok(()),
            _ => return Err(wrong_type()),
        };
        if arr.elem != *elem {
            return Err(wrong_type());
        }
        let (Some(r), Some(c)) = (want_rows, want_cols) else {
            return Err(shape(format!(
                "its dimensions in `{}` cannot be resolved from the int inputs",
                a.ty
            )));
        };
        if r < 0 || c < 0 {
            return Err(shape(format!(
                "its dimensions in `{}` resolve to {r}x{c}; sizes must not be negative",
                a.ty
            )));
        }
        if arr.rows != r as u64 || arr.cols != c as u64 {
            return Err(shape(format!(
                "`{}` means {r}x{c}, but a {}x{} array was given",
                a.ty, arr.rows, arr.cols
            )));
        }
        if !arr.is_well_formed() {
            return Err(shape(format!(
                "a {}x{} {} array needs {} bytes, but its buffer has {}",
                arr.rows,
                arr.cols,
                arr.elem,
                arr.len().saturating_mul(arr.elem.size() as u64),
                arr.data.len()
            )));
        }
        Ok(())
    }

    /// Checks input values (the IN and INOUT arguments, in order) against the description.
    pub fn check_inputs(&self, inputs: &[Value]) -> Result<(), ArgError> {
        let expected: Vec<&ArgDesc> = self.inputs().collect();
        if expected.len() != inputs.len() {
            return Err(ArgError::WrongCount {
                service: self.name.clone(),
                expected: expected.len(),
                got: inputs.len(),
                names: expected
                    .iter()
                    .map(|a| format!("{}: {}", a.name, a.ty))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        // Scalars first: array shapes refer to int inputs, which must be right before use.
        for (a, v) in expected.iter().zip(inputs) {
            if !matches!(a.ty, ArgType::Vector { .. } | ArgType::Matrix { .. }) {
                self.check_value(inputs, a, v)?;
            }
        }
        for (a, v) in expected.iter().zip(inputs) {
            self.check_value(inputs, a, v)?;
        }
        Ok(())
    }

    /// Checks a kernel's outputs (the OUT and INOUT arguments, in order) for the given inputs.
    pub fn check_outputs(&self, inputs: &[Value], outputs: &[Value]) -> Result<(), ArgError> {
        let expected: Vec<&ArgDesc> = self.outputs().collect();
        if expected.len() != outputs.len() {
            return Err(ArgError::WrongCount {
                service: self.name.clone(),
                expected: expected.len(),
                got: outputs.len(),
                names: expected
                    .iter()
                    .map(|a| a.name.clone())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        for (a, v) in expected.iter().zip(outputs) {
            self.check_value(inputs, a, v)?;
        }
        Ok(())
    }

    /// The values of the size parameters, in declared order (inputs must be checked first).
    pub fn sizes(&self, inputs: &[Value]) -> Vec<(String, i64)> {
        self.size_params
            .iter()
            .map(|p| (p.clone(), self.int_input(inputs, p).unwrap_or(0)))
            .collect()
    }

    /// The bytes the outputs will take, as far as their shapes are known from the inputs.
    pub fn output_bytes_estimate(&self, inputs: &[Value]) -> u64 {
        self.output_bytes(inputs).iter().sum()
    }

    /// The bytes each output (OUT and INOUT arguments, in order) will take, as far as its shape
    /// is known from the inputs: scalars 8, strings and bytes 0 (unknown until produced).
    pub fn output_bytes(&self, inputs: &[Value]) -> Vec<u64> {
        self.outputs()
            .map(|a| match &a.ty {
                ArgType::Int | ArgType::Double => 8,
                ArgType::Str | ArgType::Bytes => 0,
                ArgType::Vector { elem, len } => (self.resolve(inputs, len).unwrap_or(0).max(0)
                    as u64)
                    .saturating_mul(elem.size() as u64),
                ArgType::Matrix { elem, rows, cols } => {
                    let r = self.resolve(inputs, rows).unwrap_or(0).max(0) as u64;
                    let c = self.resolve(inputs, cols).unwrap_or(0).max(0) as u64;
                    r.saturating_mul(c).saturating_mul(elem.size() as u64)
                }
            })
            .collect()
    }

    /// Checks the inputs and builds the call profile the agent ranks servers with.
    pub fn profile(&self, inputs: &[Value]) -> Result<CallProfile, ArgError> {
        self.check_inputs(inputs)?;
        let remote_in = inputs
            .iter()
            .filter_map(|v| match v {
                Value::Ref(r) => Some((r.holder.clone(), r.bytes)),
                _ => None,
            })
            .collect();
        Ok(CallProfile {
            service: self.name.clone(),
            sizes: self.sizes(inputs),
            in_bytes: inputs
                .iter()
                .filter(|v| !matches!(v, Value::Ref(_)))
                .map(Value::payload_bytes)
                .sum(),
            out_bytes: self.output_bytes_estimate(inputs),
            remote_in,
            inline_bytes: inputs.iter().map(Value::inline_bytes).sum(),
        })
    }

    /// A call profile from size-parameter values alone (no inputs): array byte counts come
    /// from dimensions that are fixed or named by a size parameter. For "what would this cost"
    /// questions, e.g. `gridwise status --service dgemm --size m=1000,n=1000,k=1000`.
    pub fn profile_for_sizes(&self, sizes: &[(String, i64)]) -> Result<CallProfile, String> {
        for (k, _) in sizes {
            if !self.size_params.contains(k) {
                return Err(format!(
                    "`{k}` is not a size parameter of `{}` (size parameters: {})",
                    self.name,
                    self.size_params.join(", ")
                ));
            }
        }
        let mut ordered = Vec::with_capacity(self.size_params.len());
        for p in &self.size_params {
            let v = sizes
                .iter()
                .find(|(k, _)| k == p)
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("`{}` needs a value for size parameter `{p}`", self.name))?;
            ordered.push((p.clone(), v));
        }
        let dim = |d: &Dim| -> u64 {
            match d {
                Dim::Fixed(n) => *n,
                Dim::Arg(a) => ordered
                    .iter()
                    .find(|(k, _)| k == a)
                    .map(|(_, v)| (*v).max(0) as u64)
                    .unwrap_or(0),
            }
        };
        let bytes = |a: &ArgDesc| -> u64 {
            match &a.ty {
                ArgType::Int | ArgType::Double => 8,
                ArgType::Str | ArgType::Bytes => 0,
                ArgType::Vector { elem, len } => dim(len) * elem.size() as u64,
                ArgType::Matrix { elem, rows, cols } => dim(rows)
                    .saturating_mul(dim(cols))
                    .saturating_mul(elem.size() as u64),
            }
        };
        Ok(CallProfile {
            service: self.name.clone(),
            in_bytes: self.inputs().map(bytes).sum(),
            out_bytes: self.outputs().map(bytes).sum(),
            sizes: ordered,
            remote_in: Vec::new(),
            // Unknown without the values: nothing is ruled out by a server's frame limit.
            inline_bytes: 0,
        })
    }

    /// The payload bytes of each output (OUT and INOUT arguments, in order) when the int
    /// inputs named in `sizes` take those values: what each output puts on the wire, e.g. the
    /// bytes a later call pulls when it uses that output. Dimensions resolve like
    /// [`profile_for_sizes`](Self::profile_for_sizes) does, except that `sizes` may name any int
    /// input (not only size parameters); a dimension named by nothing in `sizes` counts as 0, a
    /// negative one as 0, scalars as 8 bytes, strings and bytes (unknown length) as 0.
    pub fn output_bytes_for_sizes(&self, sizes: &[(String, i64)]) -> Vec<u64> {
        let dim = |d: &Dim| -> u64 {
            match d {
                Dim::Fixed(n) => *n,
                Dim::Arg(a) => sizes
                    .iter()
                    .find(|(k, _)| k == a)
                    .map(|(_, v)| (*v).max(0) as u64)
                    .unwrap_or(0),
            }
        };
        self.outputs()
            .map(|a| match &a.ty {
                ArgType::Int | ArgType::Double => 8,
                ArgType::Str | ArgType::Bytes => 0,
                ArgType::Vector { elem, len } => dim(len).saturating_mul(elem.size() as u64),
                ArgType::Matrix { elem, rows, cols } => dim(rows)
                    .saturating_mul(dim(cols))
                    .saturating_mul(elem.size() as u64),
            })
            .collect()
    }

    /// A one-line signature, e.g. `dgemm(in m: int, in A: matrix<f64>[m,k], out C: …)`.
    pub fn signature(&self) -> String {
        let args: Vec<String> = self
            .args
            .iter()
            .map(|a| format!("{} {}: {}", a.mode.as_str(), a.name, a.ty))
            .collect();
        format!("{}({})", self.name, args.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Array;

    fn dgemm() -> ServiceDesc {
        ServiceDesc {
            memory: None,
            duration: None,
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
            complexity: Some("2*m*n*k".into()),
        }
    }

    #[test]
    fn idl_types_round_trip() {
        for t in [
            "int",
            "double",
            "string",
            "bytes",
            "vector<f32>[n]",
            "matrix<i64>[3,k]",
        ] {
            let parsed: ArgType = t.parse().unwrap();
            assert_eq!(parsed.to_string(), t);
        }
        assert!("matrix<f64>[m]".parse::<ArgType>().is_err());
        assert!("vector<u8>[n]".parse::<ArgType>().is_err());
        assert!("float".parse::<ArgType>().is_err());
    }

    #[test]
    fn description_validates() {
        dgemm().validate().unwrap();
        let mut bad = dgemm();
        bad.args[3].ty = "matrix<f64>[m,q]".parse().unwrap();
        assert!(matches!(
            bad.validate(),
            Err(ServiceError::NotAnIntInput { .. })
        ));
        let mut bad = dgemm();
        bad.complexity = Some("2*m*z".into());
        assert!(bad.validate().is_err());
        let mut bad = dgemm();
        bad.args.push(ArgDesc::new("m", ArgMode::In, "int"));
        assert!(matches!(
            bad.validate(),
            Err(ServiceError::DuplicateArg { .. })
        ));
    }

    #[test]
    fn good_inputs_make_a_profile() {
        let d = dgemm();
        let a = Value::matrix_f64(2, 3, &[0.0; 6]);
        let b = Value::matrix_f64(3, 4, &[0.0; 12]);
        let p = d
            .profile(&[Value::Int(2), Value::Int(4), Value::Int(3), a, b])
            .unwrap();
        assert_eq!(
            p.sizes,
            vec![("m".into(), 2), ("n".into(), 4), ("k".into(), 3)]
        );
        assert_eq!(p.in_bytes, 24 + 48 + 96);
        assert_eq!(p.out_bytes, 64);
    }

    #[test]
    fn wrong_shape_and_type_are_explained() {
        let d = dgemm();
        let a = Value::matrix_f64(2, 2, &[0.0; 4]);
        let b = Value::matrix_f64(3, 4, &[0.0; 12]);
        let e = d
            .check_inputs(&[Value::Int(2), Value::Int(4), Value::Int(3), a, b.clone()])
            .unwrap_err();
        assert!(e.to_string().contains("means 2x3"), "{e}");
        let e = d
            .check_inputs(&[
                Value::Double(2.0),
                Value::Int(4),
                Value::Int(3),
                b.clone(),
                b.clone(),
            ])
            .unwrap_err();
        assert!(matches!(e, ArgError::WrongType { .. }), "{e}");
        let e = d.check_inputs(&[Value::Int(1)]).unwrap_err();
        assert!(e.to_string().contains("takes 5 input"), "{e}");
        let f32m = Value::Matrix(Array::from_f32(2, 3, &[0.0; 6]));
        let e = d
            .check_inputs(&[Value::Int(2), Value::Int(4), Value::Int(3), f32m, b])
            .unwrap_err();
        assert!(matches!(e, ArgError::WrongType { .. }), "{e}");
    }

    #[test]
    fn remote_values_stand_for_anything_but_ints() {
        use crate::ids::DataHandle;
        use crate::value::RemoteRef;
        let d = dgemm();
        let r = Value::Ref(RemoteRef {
            handle: DataHandle::new_random(),
            holder: "h:1".into(),
            bytes: 48,
            kind: "matrix<f64>[2,3]".into(),
            idle_ttl_ms: 0,
        });
        let b = Value::matrix_f64(3, 4, &[0.0; 12]);
        let p = d
            .profile(&[Value::Int(2), Value::Int(4), Value::Int(3), r.clone(), b])
            .unwrap();
        assert_eq!(
            p.in_bytes,
            24 + 96,
            "the remote input is not sent by the client"
        );
        assert_eq!(p.remote_in, vec![("h:1".to_string(), 48)]);
        let e = d
            .check_inputs(&[r.clone(), Value::Int(4), Value::Int(3), r.clone(), r])
            .unwrap_err();
        assert!(matches!(e, ArgError::WrongType { .. }), "{e}");
    }

    #[test]
    fn negative_dimension_is_refused() {
        let d = dgemm();
        let a = Value::matrix_f64(0, 0, &[]);
        let e = d
            .check_inputs(&[Value::Int(-1), Value::Int(0), Value::Int(0), a.clone(), a])
            .unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
    }

    #[test]
    fn profile_from_sizes_alone() {
        let d = dgemm();
        let p = d
            .profile_for_sizes(&[("k".into(), 3), ("m".into(), 2), ("n".into(), 4)])
            .unwrap();
        assert_eq!(p.sizes[0], ("m".to_string(), 2));
        assert_eq!(p.in_bytes, 24 + 48 + 96);
        assert_eq!(p.out_bytes, 64);
        assert!(
            d.profile_for_sizes(&[("m".into(), 2)])
                .unwrap_err()
                .contains("`n`")
        );
        assert!(d.profile_for_sizes(&[("q".into(), 2)]).is_err());
    }

    #[test]
    fn output_bytes_per_output_from_sizes() {
        let d = dgemm();
        let sizes = [("m".into(), 2), ("n".into(), 4), ("k".into(), 3)];
        assert_eq!(d.output_bytes_for_sizes(&sizes), vec![64]);
        assert_eq!(
            d.output_bytes_for_sizes(&sizes).iter().sum::<u64>(),
            d.profile_for_sizes(&sizes).unwrap().out_bytes
        );
        // Several outputs, in order: an inout vector, a scalar, a fixed-size f32 matrix.
        let mut s = dgemm();
        s.args
            .push(ArgDesc::new("x", ArgMode::InOut, "vector<f64>[n]"));
        s.args.push(ArgDesc::new("norm", ArgMode::Out, "double"));
        s.args
            .push(ArgDesc::new("t", ArgMode::Out, "matrix<f32>[2,3]"));
        s.args.push(ArgDesc::new("log", ArgMode::Out, "string"));
        assert_eq!(s.output_bytes_for_sizes(&sizes), vec![64, 32, 8, 24, 0]);
        // Unknown and negative dimensions count as empty.
        assert_eq!(
            s.output_bytes_for_sizes(&[("m".into(), -1)]),
            vec![0, 0, 8, 24, 0]
        );
    }

    #[test]
    fn toml_style_description_parses() {
        let json = r#"{"name":"solve","args":[{"name":"n","mode":"in","type":"int"},
            {"name":"x","mode":"inout","type":"vector<f64>[n]"}],"size_params":["n"],"complexity":"n^3"}"#;
        let d: ServiceDesc = serde_json::from_str(json).unwrap();
        d.validate().unwrap();
        assert_eq!(d.outputs().count(), 1);
        assert_eq!(d.signature(), "solve(in n: int, inout x: vector<f64>[n])");
    }
}
