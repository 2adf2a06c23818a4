//! The services every server can offer without configuration: a trivial one to measure call
//! overhead (`add`), one that measures moving data (`echo`), ones that exercise timing,
//! cancellation and failure paths (`sleep`, `loop`, `fail`), and a real compute kernel with a
//! meaningful performance curve (`dgemm`).

use crate::kernel::{
    Kernel, KernelCtx, KernelError, f64_array_input, int_input, missing, str_input,
};
use gridwise_proto::{ArgDesc, ArgMode, Array, ServiceDesc, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The names [`builtin`] knows, in a stable order for listings.
pub const BUILTIN_NAMES: [&str; 6] = ["add", "echo", "sleep", "loop", "fail", "dgemm"];

/// The built-in kernel called `name` (one of [`BUILTIN_NAMES`], offered by default, or of
/// [`crate::transfer::TRANSFER_NAMES`], offered when named), or `None`.
pub fn builtin(name: &str) -> Option<Arc<dyn Kernel>> {
    Some(match name {
        "add" => Arc::new(AddKernel::new()),
        "echo" => Arc::new(EchoKernel::new()),
        "sleep" => Arc::new(SleepKernel::new()),
        "loop" => Arc::new(LoopKernel::new()),
        "fail" => Arc::new(FailKernel::new()),
        "dgemm" => Arc::new(DgemmKernel::new()),
        "sink" => Arc::new(crate::transfer::SinkKernel::new()),
        "source" => Arc::new(crate::transfer::SourceKernel::new()),
        _ => return None,
    })
}

pub(crate) fn arg(name: &str, mode: ArgMode, ty: &str, doc: &str) -> ArgDesc {
    ArgDesc {
        doc: doc.to_string(),
        ..ArgDesc::new(name, mode, ty)
    }
}

pub(crate) fn service(
    name: &str,
    doc: &str,
    args: Vec<ArgDesc>,
    size_params: &[&str],
    complexity: Option<&str>,
) -> ServiceDesc {
    ServiceDesc {
        memory: None,
        duration: None,
        name: name.to_string(),
        doc: doc.to_string(),
        args,
        size_params: size_params.iter().map(|s| s.to_string()).collect(),
        complexity: complexity.map(str::to_string),
    }
}

/// `add(in x: int, out y: int)`: y = x + 1.
#[derive(Debug, Clone)]
pub struct AddKernel {
    desc: ServiceDesc,
}

impl AddKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "add",
                "Returns x + 1; measures pure call overhead.",
                vec![
                    arg("x", ArgMode::In, "int", "The number to increment."),
                    arg("y", ArgMode::Out, "int", "x + 1."),
                ],
                &[],
                Some("1"),
            ),
        }
    }
}

impl Default for AddKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for AddKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn is_instant(&self) -> bool {
        true
    }

    fn run(&self, inputs: &[Value], _ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let x = int_input(inputs, 0, "x")?;
        let y = x.checked_add(1).ok_or_else(|| {
            KernelError::Application(format!(
                "x = {x} is the largest int, so x + 1 overflows; pass a smaller x"
            ))
        })?;
        Ok(vec![Value::Int(y)])
    }
}

/// `echo(in n: int, in x: vector<f64>[n], out y: vector<f64>[n])`: y = x. What a call costs
/// when it is all data: two transfers and nothing else.
#[derive(Debug, Clone)]
pub struct EchoKernel {
    desc: ServiceDesc,
}

impl EchoKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "echo",
                "Returns its input; measures moving data.",
                vec![
                    arg("n", ArgMode::In, "int", "Elements of x."),
                    arg("x", ArgMode::In, "vector<f64>[n]", "The data."),
                    arg("y", ArgMode::Out, "vector<f64>[n]", "The same data."),
                ],
                &["n"],
                Some("n"),
            ),
        }
    }
}

impl Default for EchoKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for EchoKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn run(&self, inputs: &[Value], _ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        match inputs.get(1) {
            Some(v @ Value::Vector(_)) => Ok(vec![v.clone()]),
            other => Err(missing(1, "x", "a vector", other)),
        }
    }
}

/// `sleep(in seconds: int, out slept: double)`: waits, stopping at once when cancelled.
#[derive(Debug, Clone)]
pub struct SleepKernel {
    desc: ServiceDesc,
}

impl SleepKernel {
    /// The kernel with its service description: its time is its argument on every server,
    /// which the description declares (`duration`), so the agent knows the queue it makes.
    pub fn new() -> Self {
        let mut desc = service(
            "sleep",
            "Waits the given number of seconds; for testing timeouts and cancellation.",
            vec![
                arg("seconds", ArgMode::In, "int", "How long to wait (>= 0)."),
                arg("slept", ArgMode::Out, "double", "Seconds actually waited."),
            ],
            &["seconds"],
            None,
        );
        desc.duration = Some("seconds".into());
        Self { desc }
    }
}

impl Default for SleepKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for SleepKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let seconds = int_input(inputs, 0, "seconds")?;
        let seconds = u64::try_from(seconds).map_err(|_| {
            KernelError::Application(format!("seconds = {seconds} is negative; pass 0 or more"))
        })?;
        let t0 = Instant::now();
        if ctx.cancel.wait_timeout(Duration::from_secs(seconds)) {
            return Err(KernelError::Cancelled);
        }
        Ok(vec![Value::Double(t0.elapsed().as_secs_f64())])
    }
}

/// `loop(in x: int, out y: int)`: never finishes on its own; only cancellation ends it.
#[derive(Debug, Clone)]
pub struct LoopKernel {
    desc: ServiceDesc,
}

impl LoopKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "loop",
                "Runs until cancelled; for testing cancellation of a call that never ends.",
                vec![
                    arg("x", ArgMode::In, "int", "Ignored."),
                    arg("y", ArgMode::Out, "int", "Never produced."),
                ],
                &[],
                None,
            ),
        }
    }
}

impl Default for LoopKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for LoopKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn run(&self, _inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        // Block rather than spin: test machines are small and a spinning loop would distort
        // every timing measured next to it.
        ctx.cancel.wait();
        Err(KernelError::Cancelled)
    }
}

/// `fail(in message: string, out y: int)`: always fails with the given message.
#[derive(Debug, Clone)]
pub struct FailKernel {
    desc: ServiceDesc,
}

impl FailKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "fail",
                "Always fails with the given message; for testing error reporting.",
                vec![
                    arg(
                        "message",
                        ArgMode::In,
                        "string",
                        "The error message to report.",
                    ),
                    arg("y", ArgMode::Out, "int", "Never produced."),
                ],
                &[],
                None,
            ),
        }
    }
}

impl Default for FailKernel {
    fn default() -> Self {
        Self::new()
    }
}

impl Kernel for FailKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn is_instant(&self) -> bool {
        true
    }

    fn run(&self, inputs: &[Value], _ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let message = str_input(inputs, 0, "message")?;
        Err(KernelError::Application(if message.is_empty() {
            "the fail service always fails".to_string()
        } else {
            message.to_string()
        }))
    }
}

/// `dgemm(in m,n,k: int, in A: matrix<f64>[m,k], in B: matrix<f64>[k,n], out C: matrix<f64>[m,n])`.
#[derive(Debug, Clone)]
pub struct DgemmKernel {
    desc: ServiceDesc,
}

/// Side of the square calibration problem: large enough to reach steady-state speed, small
/// enough (about 34 MFLOP) to keep server start-up quick.
const DGEMM_CALIBRATION_SIZE: u64 = 256;

impl DgemmKernel {
    pub fn new() -> Self {
        Self {
            desc: service(
                "dgemm",
                "Dense matrix product C = A*B in double precision.",
                vec![
                    arg("m", ArgMode::In, "int", "Rows of A and C."),
                    arg("n", ArgMode::In, "int", "Columns of B and C."),
                    arg("k", ArgMode::In, "int", "Columns of A, rows of B."),
                    arg(
                        "A",
                        ArgMode::In,
                        "matrix<f64>[m,k]",
                        "Left factor, row-major.",
                    ),
                    arg(
                        "B",
                        ArgMode::In,
                        "matrix<f64>[k,n]",
                        "Right factor, row-major.",
                    ),
                    arg(
                        "C",
                        ArgMode::Out,
                        "matrix<f64>[m,n]",
                        "The product A*B, row-major.",
                    ),
                ],
                &["m", "n", "k"],
                Some("2*m*n*k"),
            ),
        }
    }
}

impl Default for DgemmKernel {
    fn default() -> Self {
        Self::new()
    }
}

fn dim(name: &str, v: i64) -> Result<usize, KernelError> {
    usize::try_from(v).map_err(|_| {
        KernelError::Application(format!("`{name}` = {v} must be a non-negative size"))
    })
}

fn stride(v: usize) -> Result<isize, KernelError> {
    isize::try_from(v)
        .map_err(|_| KernelError::Application(format!("dimension {v} is too large to index")))
}

fn check_len(name: &str, got: usize, rows: usize, cols: usize) -> Result<(), KernelError> {
    if rows.checked_mul(cols) == Some(got) {
        Ok(())
    } else {
        Err(KernelError::Internal(format!(
            "`{name}` has {got} elements, not {rows}x{cols}; the server must check inputs first"
        )))
    }
}

/// Deterministic, non-trivial matrix entries in [-0.5, 0.5) so calibration is reproducible.
fn calibration_matrix(rows: u64, cols: u64, seed: u64) -> Value {
    let values: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 37 + seed) % 101) as f64 / 101.0 - 0.5)
        .collect();
    Value::matrix_f64(rows, cols, &values)
}

impl Kernel for DgemmKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let m = dim("m", int_input(inputs, 0, "m")?)?;
        let n = dim("n", int_input(inputs, 1, "n")?)?;
        let k = dim("k", int_input(inputs, 2, "k")?)?;
        let a = f64_array_input(inputs, 3, "A")?;
        let b = f64_array_input(inputs, 4, "B")?;
        check_len("A", a.len(), m, k)?;
        check_len("B", b.len(), k, n)?;
        // The product itself cannot be interrupted, so at least skip it if already cancelled.
        if ctx.cancel.is_cancelled() {
            return Err(KernelError::Cancelled);
        }
        // With k = 0 the inputs are empty but C may still be huge: fail instead of aborting.
        let too_big = || {
            KernelError::Application(format!(
                "the {m}x{n} result C does not fit in this server's memory; use smaller m or n"
            ))
        };
        let len = m.checked_mul(n).ok_or_else(too_big)?;
        let mut c: Vec<f64> = Vec::new();
        c.try_reserve_exact(len).map_err(|_| too_big())?;
        c.resize(len, 0.0);
        let (rsa, rsb, rsc) = (stride(k)?, stride(n)?, stride(n)?);
        // SAFETY: `a`, `b` and `c` hold exactly m*k, k*n and m*n elements (checked above), laid
        // out row-major with row strides k, n, n and column stride 1, so every index matrixmultiply
        // forms stays in bounds; `c` does not alias the inputs.
        unsafe {
            matrixmultiply::dgemm(
                m,
                k,
                n,
                1.0,
                a.as_ptr(),
                rsa,
                1,
                b.as_ptr(),
                rsb,
                1,
                0.0,
                c.as_mut_ptr(),
                rsc,
                1,
            );
        }
        // The server's memory budget counted this copy; allocate it fallibly all the same.
        let out = Array::try_from_f64(m as u64, n as u64, &c).ok_or_else(too_big)?;
        Ok(vec![Value::Matrix(out)])
    }

    fn calibration_inputs(&self) -> Option<Vec<Value>> {
        let s = DGEMM_CALIBRATION_SIZE;
        let si = s as i64;
        Some(vec![
            Value::Int(si),
            Value::Int(si),
            Value::Int(si),
            calibration_matrix(s, s, 11),
            calibration_matrix(s, s, 53),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::thread;

    fn run(k: &dyn Kernel, inputs: &[Value]) -> Result<Vec<Value>, KernelError> {
        k.desc().check_inputs(inputs).expect("test inputs fit");
        let out = k.run(inputs, &KernelCtx::new());
        if let Ok(out) = &out {
            k.desc().check_outputs(inputs, out).expect("outputs fit");
        }
        out
    }

    /// Starts `kernel` on another thread, cancels it after a moment, and returns its result
    /// with the time from start to return.
    fn run_then_cancel(
        kernel: Arc<dyn Kernel>,
        inputs: Vec<Value>,
    ) -> (Result<Vec<Value>, KernelError>, Duration) {
        let ctx = KernelCtx::new();
        let cancel = ctx.cancel.clone();
        let t0 = Instant::now();
        let h = thread::spawn(move || kernel.run(&inputs, &ctx));
        thread::sleep(Duration::from_millis(50));
        cancel.cancel();
        let r = h.join().expect("kernel thread did not panic");
        (r, t0.elapsed())
    }

    #[test]
    fn every_builtin_exists_and_validates() {
        for name in BUILTIN_NAMES {
            let k = builtin(name).expect("listed built-in exists");
            let d = k.desc();
            assert_eq!(d.name, name);
            d.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!d.doc.is_empty(), "{name} has no doc");
            for a in &d.args {
                assert!(!a.doc.is_empty(), "{name}.{} has no doc", a.name);
            }
        }
        assert!(builtin("nope").is_none());
    }

    #[test]
    fn add_increments_and_reports_overflow() {
        let k = AddKernel::new();
        assert!(k.is_instant());
        assert_eq!(run(&k, &[Value::Int(41)]).unwrap(), vec![Value::Int(42)]);
        assert_eq!(run(&k, &[Value::Int(-1)]).unwrap(), vec![Value::Int(0)]);
        let e = run(&k, &[Value::Int(i64::MAX)]).unwrap_err();
        assert!(
            matches!(&e, KernelError::Application(m) if m.contains("overflow")),
            "{e}"
        );
    }

    #[test]
    fn fail_returns_its_message() {
        let k = FailKernel::new();
        assert_eq!(
            run(&k, &["disk on fire".into()]).unwrap_err(),
            KernelError::Application("disk on fire".into())
        );
        assert_eq!(
            run(&k, &["".into()]).unwrap_err(),
            KernelError::Application("the fail service always fails".into())
        );
    }

    #[test]
    fn sleep_zero_returns_well_formed_output() {
        let out = run(&SleepKernel::new(), &[Value::Int(0)]).unwrap();
        assert!(out[0].as_double().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn sleep_rejects_negative_seconds() {
        let e = run(&SleepKernel::new(), &[Value::Int(-3)]).unwrap_err();
        assert!(
            matches!(&e, KernelError::Application(m) if m.contains("-3")),
            "{e}"
        );
    }

    #[test]
    fn sleep_stops_when_cancelled() {
        let (r, took) = run_then_cancel(Arc::new(SleepKernel::new()), vec![Value::Int(30)]);
        assert_eq!(r, Err(KernelError::Cancelled));
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }

    #[test]
    fn loop_stops_when_cancelled() {
        let (r, took) = run_then_cancel(Arc::new(LoopKernel::new()), vec![Value::Int(0)]);
        assert_eq!(r, Err(KernelError::Cancelled));
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }

    fn dgemm_inputs(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<Value> {
        vec![
            Value::Int(m as i64),
            Value::Int(n as i64),
            Value::Int(k as i64),
            Value::matrix_f64(m as u64, k as u64, a),
            Value::matrix_f64(k as u64, n as u64, b),
        ]
    }

    fn naive(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[i * k + p] * b[p * n + j];
                }
            }
        }
        c
    }

    fn check_dgemm(
        m: usize,
        n: usize,
        k: usize,
        a: &[f64],
        b: &[f64],
    ) -> Result<(), TestCaseError> {
        let out = run(&DgemmKernel::new(), &dgemm_inputs(m, n, k, a, b)).unwrap();
        let got = out[0].as_array().and_then(Array::to_f64).unwrap();
        let want = naive(m, n, k, a, b);
        prop_assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 1e-9 * (1.0 + w.abs()), "{} vs {}", g, w);
        }
        Ok(())
    }

    fn shape_and_data() -> impl Strategy<Value = (usize, usize, usize, Vec<f64>, Vec<f64>)> {
        (0usize..9, 0usize..9, 0usize..9).prop_flat_map(|(m, n, k)| {
            (
                Just(m),
                Just(n),
                Just(k),
                proptest::collection::vec(-10.0f64..10.0, m * k),
                proptest::collection::vec(-10.0f64..10.0, k * n),
            )
        })
    }

    proptest! {
        #[test]
        fn dgemm_matches_naive_product((m, n, k, a, b) in shape_and_data()) {
            check_dgemm(m, n, k, &a, &b)?;
        }
    }

    #[test]
    fn dgemm_zero_and_non_square_cases() {
        check_dgemm(0, 3, 2, &[], &[1.0; 6]).unwrap();
        check_dgemm(2, 3, 0, &[], &[]).unwrap();
        check_dgemm(3, 0, 2, &[1.0; 6], &[]).unwrap();
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2x3
        let b = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0]; // 3x2
        let out = run(&DgemmKernel::new(), &dgemm_inputs(2, 2, 3, &a, &b)).unwrap();
        assert_eq!(out[0], Value::matrix_f64(2, 2, &[58.0, 64.0, 139.0, 154.0]));
    }

    #[test]
    fn dgemm_calibration_inputs_fit_and_are_non_trivial() {
        let k = DgemmKernel::new();
        let inputs = k.calibration_inputs().unwrap();
        k.desc().check_inputs(&inputs).unwrap();
        let a = inputs[3].as_array().and_then(Array::to_f64).unwrap();
        assert!(a.iter().any(|x| *x != a[0]));
        assert_eq!(
            k.desc().sizes(&inputs),
            vec![("m".into(), 256), ("n".into(), 256), ("k".into(), 256)]
        );
    }

    #[test]
    fn dgemm_skips_work_when_already_cancelled() {
        let ctx = KernelCtx::new();
        ctx.cancel.cancel();
        let inputs = dgemm_inputs(1, 1, 1, &[1.0], &[1.0]);
        assert_eq!(
            DgemmKernel::new().run(&inputs, &ctx),
            Err(KernelError::Cancelled)
        );
    }
}
