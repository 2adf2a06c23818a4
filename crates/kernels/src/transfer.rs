//! Kernels that only move data, one way each, for measuring transfers: `sink` takes a vector
//! and returns its length, `source` makes one. (`echo` moves data both ways, and its copy of
//! the input doubles what the server holds.) Offered only when named in `builtins`.

use crate::builtin::{arg, service};
use crate::kernel::{Kernel, KernelCtx, KernelError, int_input, missing};
use gridwise_proto::{ArgMode, Array, ServiceDesc, Value};

/// The data-moving kernels, offered when a server's `builtins` names them.
pub const TRANSFER_NAMES: [&str; 2] = ["sink", "source"];

/// `sink(in n: int, in x: vector<f64>[n], out bytes: int)`: the bytes of x that arrived.
#[derive(Debug, Clone)]
pub struct SinkKernel {
    desc: ServiceDesc,
}

impl SinkKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "sink",
                "Takes a vector and returns its size in bytes; measures sending data.",
                vec![
                    arg("n", ArgMode::In, "int", "Elements of x."),
                    arg("x", ArgMode::In, "vector<f64>[n]", "The data."),
                    arg("bytes", ArgMode::Out, "int", "Bytes of x received."),
                ],
                &["n"],
                Some("n"),
            ),
        }
    }
}

impl Default for SinkKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for SinkKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn is_instant(&self) -> bool {
        true
    }

    fn run(&self, inputs: &[Value], _ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        match inputs.get(1) {
            Some(Value::Vector(a)) => Ok(vec![Value::Int(a.data.len() as i64)]),
            other => Err(missing(1, "x", "a vector", other)),
        }
    }
}

/// `source(in n: int, out y: vector<f64>[n])`: y[i] = i.
#[derive(Debug, Clone)]
pub struct SourceKernel {
    desc: ServiceDesc,
}

impl SourceKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "source",
                "Makes a vector y[i] = i; measures receiving data.",
                vec![
                    arg("n", ArgMode::In, "int", "Elements of y."),
                    arg("y", ArgMode::Out, "vector<f64>[n]", "0, 1, …, n − 1."),
                ],
                &["n"],
                Some("n"),
            ),
        }
    }
}

impl Default for SourceKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for SourceKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let n = int_input(inputs, 0, "n")?;
        let n = u64::try_from(n)
            .map_err(|_| KernelError::Application(format!("`n` = {n} must not be negative")))?;
        let len = usize::try_from(n.saturating_mul(8))
            .map_err(|_| KernelError::Application(format!("`n` = {n} is too large")))?;
        let mut data = gridwise_proto::value::array_bytes(len).map_err(|_| {
            KernelError::Application(format!("cannot allocate {len} bytes for `y`"))
        })?;
        for i in 0..n {
            if i % (1 << 20) == 0 && ctx.cancel.is_cancelled() {
                return Err(KernelError::Cancelled);
            }
            data.extend_from_slice(&(i as f64).to_le_bytes());
        }
        Ok(vec![Value::Vector(Array {
            elem: gridwise_proto::ElemType::F64,
            rows: n,
            cols: 1,
            data,
        })])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_makes_what_sink_counts() {
        let ctx = KernelCtx::new();
        let y = SourceKernel::new().run(&[Value::Int(5)], &ctx).unwrap();
        assert_eq!(y[0], Value::vector_f64(&[0.0, 1.0, 2.0, 3.0, 4.0]));
        let got = SinkKernel::new()
            .run(&[Value::Int(5), y[0].clone()], &ctx)
            .unwrap();
        assert_eq!(got, vec![Value::Int(40)]);
        for k in [&SinkKernel::new() as &dyn Kernel, &SourceKernel::new()] {
            k.desc().validate().unwrap();
        }
        assert!(SourceKernel::new().run(&[Value::Int(-1)], &ctx).is_err());
    }
}
