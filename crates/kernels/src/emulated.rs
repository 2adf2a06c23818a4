//! The emulated-speed kernel: one machine cannot hold a heterogeneous grid, so an emulated
//! server sleeps for the time its configured true speed function predicts, C(x)/S(x), and the
//! agent has to learn that curve from observed calls like any other.

use crate::kernel::{Kernel, KernelCtx, KernelError, int_input};
use crate::load::LoadTrace;
pub use crate::speed::{SpeedError, SpeedFunction};
use gridwise_proto::{ArgDesc, ArgMode, Complexity, ServiceDesc, ServiceError, Value};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The end of an emulated run that is polled rather than slept: a sleeping thread wakes up to
/// 50 µs late (Linux's timer slack) plus, on a VM, the time to wake its halted CPU (40–60 µs
/// on the 2-core VM of `bench schedule`), so sleeps alone ran each call about 0.1–0.2 ms
/// longer than its speed function says — along a graph's critical path, 1–2% of the makespan
/// that no real kernel would add.
const POLLED_TAIL: Duration = Duration::from_micros(300);

/// Waits `d` as a computing kernel would take it: asleep until [`POLLED_TAIL`] before the end,
/// then polling (yielding the CPU) until the end. True if cancelled meanwhile.
fn sleep_precisely(ctx: &KernelCtx, d: Duration) -> bool {
    // A duration too long to add to "now" is as good as forever: no tail to poll.
    let Some(end) = Instant::now().checked_add(d) else {
        return ctx.cancel.wait_timeout(d);
    };
    if ctx.cancel.wait_timeout(d.saturating_sub(POLLED_TAIL)) {
        return true;
    }
    while Instant::now() < end {
        if ctx.cancel.is_cancelled() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// Default calibration budget: long enough to time reliably, short enough for start-up.
const CALIBRATION_BUDGET_S: f64 = 0.020;

/// One emulated service as written in a server's TOML config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulatedSpec {
    /// The service name clients call.
    pub name: String,
    /// One line for users; a description of the emulation is used when empty.
    #[serde(default)]
    pub doc: String,
    /// Name of the one int size parameter (default `n`); not `seconds`, which names the
    /// output that reports the time slept.
    #[serde(default = "default_param")]
    pub param: String,
    /// Operations as a function of `param`.
    #[serde(default = "default_complexity")]
    pub complexity: String,
    /// True speed points `[size, operations per second]`, by strictly increasing size.
    pub speed: Vec<[f64; 2]>,
    /// The size to calibrate with; by default the largest point size that runs in about 20 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_size: Option<i64>,
    /// Data inputs `x1..xk`, each a `vector<f64>[param]`, so that emulated calls can form task
    /// graphs whose edges carry data (their contents are ignored).
    #[serde(default)]
    pub inputs: u32,
    /// Whether the call also returns a `vector<f64>[param]` (`out`, zeros) for later calls.
    #[serde(default)]
    pub output: bool,
    /// A slab's boundary rows, bytes each (0: none): the call then takes its neighbours' rows
    /// `up` and `down` (`bytes`, contents ignored) and returns its own first and last rows,
    /// `top` and `bottom` (zeros), for the neighbours' next step.
    #[serde(default)]
    pub halo_bytes: u64,
}

fn default_param() -> String {
    "n".to_string()
}

fn default_complexity() -> String {
    "n^3".to_string()
}

/// Why an emulated service's config was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmulatedError {
    /// The speed points are unusable.
    #[error("emulated service `{service}`: speed: {source}")]
    Speed {
        service: String,
        /// What is wrong with the points.
        source: SpeedError,
    },
    /// The size parameter is not a usable argument name.
    #[error(
        "emulated service `{service}`: param `{param}` must be an identifier (letters, digits, `_`, not starting with a digit) other than `seconds`"
    )]
    BadParam { service: String, param: String },
    /// A negative calibration size.
    #[error("emulated service `{service}`: calibration_size {size} must be 0 or more")]
    BadCalibrationSize { service: String, size: i64 },
    /// The resulting service description is invalid (bad name or complexity).
    #[error(transparent)]
    Service(#[from] ServiceError),
}

fn is_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl EmulatedSpec {
    /// Size, data inputs, the halo rows in, then the data output (if any), the halo rows out,
    /// and the seconds slept.
    fn args(&self) -> Vec<ArgDesc> {
        let data = format!("vector<f64>[{}]", self.param);
        let mut args = vec![ArgDesc {
            doc: "Problem size.".into(),
            ..ArgDesc::new(&self.param, ArgMode::In, "int")
        }];
        for i in 1..=self.inputs {
            args.push(ArgDesc {
                doc: "Data from an earlier call (contents ignored).".into(),
                ..ArgDesc::new(&format!("x{i}"), ArgMode::In, &data)
            });
        }
        if self.halo_bytes > 0 {
            for (name, doc) in [
                (
                    "up",
                    "The row below this slab's first, from its upper neighbour.",
                ),
                (
                    "down",
                    "The row past this slab's last, from its lower neighbour.",
                ),
            ] {
                args.push(ArgDesc {
                    doc: doc.into(),
                    ..ArgDesc::new(name, ArgMode::In, "bytes")
                });
            }
        }
        if self.output {
            args.push(ArgDesc {
                doc: "Data for later calls (zeros).".into(),
                ..ArgDesc::new("out", ArgMode::Out, &data)
            });
        }
        if self.halo_bytes > 0 {
            for (name, doc) in [
                (
                    "top",
                    "This slab's first row, for its upper neighbour (zeros).",
                ),
                (
                    "bottom",
                    "This slab's last row, for its lower neighbour (zeros).",
                ),
            ] {
                args.push(ArgDesc {
                    doc: doc.into(),
                    ..ArgDesc::new(name, ArgMode::Out, "bytes")
                });
            }
        }
        args.push(ArgDesc {
            doc: "The emulated compute time slept, in seconds.".into(),
            ..ArgDesc::new("seconds", ArgMode::Out, "double")
        });
        args
    }

    /// Checks the spec and builds the kernel.
    pub fn build(&self) -> Result<EmulatedKernel, EmulatedError> {
        if !is_identifier(&self.param) || self.param == "seconds" {
            return Err(EmulatedError::BadParam {
                service: self.name.clone(),
                param: self.param.clone(),
            });
        }
        if let Some(size) = self.calibration_size.filter(|s| *s < 0) {
            return Err(EmulatedError::BadCalibrationSize {
                service: self.name.clone(),
                size,
            });
        }
        let speed = SpeedFunction::new(self.speed.iter().map(|p| (p[0], p[1])).collect()).map_err(
            |source| EmulatedError::Speed {
                service: self.name.clone(),
                source,
            },
        )?;
        let doc = if self.doc.is_empty() {
            format!(
                "Emulated service: sleeps ({}) / S({}) seconds for a configured true speed S.",
                self.complexity, self.param
            )
        } else {
            self.doc.clone()
        };
        let desc = ServiceDesc {
            memory: None,
            duration: None,
            name: self.name.clone(),
            doc,
            args: self.args(),
            size_params: vec![self.param.clone()],
            complexity: Some(self.complexity.clone()),
        };
        desc.validate()?;
        let complexity =
            Complexity::parse(&self.complexity, &desc.size_params).map_err(|source| {
                ServiceError::Complexity {
                    service: self.name.clone(),
                    source,
                }
            })?;
        Ok(EmulatedKernel {
            desc,
            speed,
            complexity,
            calibration_size: self.calibration_size,
            inputs: self.inputs,
            output: self.output,
            halo_bytes: self.halo_bytes,
            load: None,
        })
    }
}

/// A kernel that sleeps C(x)/S(x) seconds, emulating a server with true speed S; under a load
/// trace, as long as a time-shared CPU with that availability would take.
#[derive(Debug, Clone)]
pub struct EmulatedKernel {
    desc: ServiceDesc,
    speed: SpeedFunction,
    complexity: Complexity,
    calibration_size: Option<i64>,
    inputs: u32,
    output: bool,
    halo_bytes: u64,
    // The background load and the instant its time 0 stands for.
    load: Option<(Arc<LoadTrace>, Instant)>,
}

impl EmulatedKernel {
    /// The same kernel under the background load `trace`, whose time 0 is `origin`.
    pub fn with_load(mut self, trace: Arc<LoadTrace>, origin: Instant) -> Self {
        self.load = Some((trace, origin));
        self
    }

    /// The true speed function (for benchmarks and tests only; the agent must learn it).
    pub fn speed_function(&self) -> &SpeedFunction {
        &self.speed
    }

    /// The true compute time C(x)/S(x) in seconds, or `None` where the size cannot run.
    pub fn true_time(&self, x: i64) -> Option<f64> {
        self.emulated_time(x).ok()
    }

    fn param(&self) -> &str {
        &self.desc.size_params[0]
    }

    fn emulated_time(&self, x: i64) -> Result<f64, KernelError> {
        let p = self.param();
        if x < 0 {
            return Err(KernelError::Application(format!(
                "size {p}={x} is negative; pass a size of 0 or more"
            )));
        }
        let s = self.speed.speed(x as f64);
        if s <= 0.0 {
            return Err(KernelError::Application(format!(
                "size {p}={x} does not fit on this server (emulated memory limit)"
            )));
        }
        let ops = self
            .complexity
            .eval(&[(p.to_string(), x)])
            .map_err(|e| KernelError::Application(e.to_string()))?;
        let t = ops / s;
        if t.is_finite() {
            Ok(t)
        } else {
            Err(KernelError::Application(format!(
                "size {p}={x} would take longer than this server can emulate"
            )))
        }
    }
}

impl Kernel for EmulatedKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn sleeps(&self) -> bool {
        true
    }

    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let x = int_input(inputs, 0, self.param())?;
        let quiet = self.emulated_time(x)?;
        // Under load the same work takes as long as the availability makes it.
        let t = match &self.load {
            Some((trace, origin)) => {
                let start = origin.elapsed().as_secs_f64();
                trace.finish(start, quiet) - start
            }
            None => quiet,
        };
        let d = Duration::try_from_secs_f64(t).map_err(|_| {
            KernelError::Application(format!(
                "size {}={x} would take longer than this server can emulate",
                self.param()
            ))
        })?;
        if sleep_precisely(ctx, d) {
            return Err(KernelError::Cancelled);
        }
        let mut out = Vec::with_capacity(4);
        if self.output {
            out.push(Value::vector_f64(&vec![0.0; x.max(0) as usize]));
        }
        if self.halo_bytes > 0 {
            let row = Value::Bytes(vec![0; self.halo_bytes as usize]);
            out.extend([row.clone(), row]);
        }
        out.push(Value::Double(t));
        Ok(out)
    }

    fn calibration_inputs(&self) -> Option<Vec<Value>> {
        let size = self.calibration_size.or_else(|| {
            let runnable: Vec<(i64, f64)> = self
                .speed
                .points()
                .iter()
                .filter(|p| p.0 >= 0.0)
                .filter_map(|p| {
                    let x = p.0.round() as i64;
                    self.true_time(x).map(|t| (x, t))
                })
                .collect();
            runnable
                .iter()
                .rev()
                .find(|(_, t)| *t <= CALIBRATION_BUDGET_S)
                .or(runnable.first())
                .map(|(x, _)| *x)
        })?;
        let mut inputs = vec![Value::Int(size)];
        for _ in 0..self.inputs {
            inputs.push(Value::vector_f64(&vec![0.0; size.max(0) as usize]));
        }
        if self.halo_bytes > 0 {
            inputs.extend([Value::Bytes(Vec::new()), Value::Bytes(Vec::new())]);
        }
        Some(inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;
    use std::time::Instant;

    fn spec(speed: Vec<[f64; 2]>) -> EmulatedSpec {
        EmulatedSpec {
            name: "emu".into(),
            doc: String::new(),
            param: "n".into(),
            complexity: "n^3".into(),
            speed,
            calibration_size: None,
            inputs: 0,
            output: false,
            halo_bytes: 0,
        }
    }

    #[test]
    fn under_load_the_same_work_takes_longer() {
        // 10³ operations at 1e5/s: 10 ms quiet; at half a core, 20 ms.
        let k = spec(vec![[1.0, 1e5], [100.0, 1e5]]).build().unwrap();
        let quiet = k.run(&[Value::Int(10)], &KernelCtx::new()).unwrap();
        assert_eq!(quiet, vec![Value::Double(0.01)]);
        let half = Arc::new(LoadTrace::new(vec![(0.0, 0.5)]).unwrap());
        let loaded = k.with_load(half, Instant::now());
        let out = loaded.run(&[Value::Int(10)], &KernelCtx::new()).unwrap();
        let Value::Double(t) = out[0] else {
            panic!("{out:?}")
        };
        assert!((t - 0.02).abs() < 1e-12, "{t}");
    }

    #[test]
    fn description_validates_and_outputs_fit() {
        let k = spec(vec![[10.0, 1e6], [100.0, 1e8]]).build().unwrap();
        let d = k.desc();
        d.validate().unwrap();
        assert_eq!(d.size_params, vec!["n".to_string()]);
        assert_eq!(d.complexity.as_deref(), Some("n^3"));
        assert!(!d.doc.is_empty());
        let inputs = [Value::Int(10)];
        d.check_inputs(&inputs).unwrap();
        let out = k.run(&inputs, &KernelCtx::new()).unwrap();
        d.check_outputs(&inputs, &out).unwrap();
    }

    #[test]
    fn a_wait_shorter_than_the_polled_tail_lasts_its_length_and_a_cancel_ends_any_wait() {
        let ctx = KernelCtx::new();
        for d in [Duration::ZERO, Duration::from_micros(100), POLLED_TAIL * 2] {
            let t = Instant::now();
            assert!(!sleep_precisely(&ctx, d));
            assert!(t.elapsed() >= d, "{d:?}");
        }
        ctx.cancel.cancel();
        assert!(sleep_precisely(&ctx, Duration::from_micros(100)));
        assert!(sleep_precisely(&ctx, Duration::MAX));
    }

    #[test]
    fn run_sleeps_at_least_c_over_s() {
        // 30^3 = 27000 ops at 1e6 ops/s = 27 ms.
        let k = spec(vec![[10.0, 1e6], [100.0, 1e6]]).build().unwrap();
        let want = k.true_time(30).unwrap();
        assert!((want - 0.027).abs() < 1e-12);
        let t0 = Instant::now();
        let out = k.run(&[Value::Int(30)], &KernelCtx::new()).unwrap();
        assert!(t0.elapsed().as_secs_f64() >= want);
        assert_eq!(out, vec![Value::Double(want)]);
    }

    #[test]
    fn zero_speed_means_the_size_does_not_fit() {
        let k = spec(vec![[100.0, 1e9], [200.0, 1e9], [201.0, 0.0]])
            .build()
            .unwrap();
        let e = k.run(&[Value::Int(500)], &KernelCtx::new()).unwrap_err();
        assert_eq!(
            e,
            KernelError::Application(
                "size n=500 does not fit on this server (emulated memory limit)".into()
            )
        );
        assert_eq!(k.true_time(500), None);
        assert!(k.true_time(150).is_some());
    }

    #[test]
    fn negative_size_is_an_application_error() {
        let k = spec(vec![[1.0, 1.0]]).build().unwrap();
        let e = k.run(&[Value::Int(-2)], &KernelCtx::new()).unwrap_err();
        assert!(
            matches!(&e, KernelError::Application(m) if m.contains("n=-2")),
            "{e}"
        );
    }

    #[test]
    fn cancellation_stops_a_long_emulated_run() {
        // 1000^3 ops at 1e6 ops/s is 1000 s.
        let k = Arc::new(spec(vec![[1.0, 1e6]]).build().unwrap());
        let ctx = KernelCtx::new();
        let cancel = ctx.cancel.clone();
        let t0 = Instant::now();
        let h = thread::spawn(move || k.run(&[Value::Int(1000)], &ctx));
        thread::sleep(Duration::from_millis(30));
        cancel.cancel();
        assert_eq!(h.join().unwrap(), Err(KernelError::Cancelled));
        assert!(t0.elapsed() < Duration::from_secs(500));
    }

    #[test]
    fn parses_from_toml_with_defaults() {
        let s: EmulatedSpec = toml::from_str(
            r#"
            name = "solve"
            speed = [[100, 2e9], [1500, 2.5e9], [2000, 1e8], [2100, 0]]
            "#,
        )
        .unwrap();
        assert_eq!(s.param, "n");
        assert_eq!(s.complexity, "n^3");
        assert_eq!(s.speed[1], [1500.0, 2.5e9]);
        assert_eq!(s.calibration_size, None);
        let k = s.build().unwrap();
        assert_eq!(k.desc().name, "solve");
        assert_eq!(k.speed_function().speed(2100.0), 0.0);
    }

    #[test]
    fn parses_from_json_with_custom_param() {
        let s: EmulatedSpec = serde_json::from_str(
            r#"{"name":"fft","doc":"FFT","param":"len","complexity":"5*len*log(len, 2)",
                "speed":[[1,1e9]],"calibration_size":4096}"#,
        )
        .unwrap();
        let k = s.build().unwrap();
        assert_eq!(k.desc().args[0].name, "len");
        assert_eq!(k.desc().doc, "FFT");
        assert_eq!(k.calibration_inputs(), Some(vec![Value::Int(4096)]));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = toml::from_str::<EmulatedSpec>("name = \"x\"\nspeed = [[1, 1]]\nsped = 3\n");
        assert!(e.is_err());
    }

    #[test]
    fn bad_specs_are_explained() {
        let e = spec(vec![]).build().unwrap_err();
        assert!(matches!(
            e,
            EmulatedError::Speed {
                source: SpeedError::Empty,
                ..
            }
        ));
        assert!(e.to_string().contains("`emu`"), "{e}");
        let mut s = spec(vec![[1.0, 1.0]]);
        s.param = "seconds".into();
        assert!(matches!(s.build(), Err(EmulatedError::BadParam { .. })));
        s.param = "2n".into();
        assert!(matches!(s.build(), Err(EmulatedError::BadParam { .. })));
        let mut s = spec(vec![[1.0, 1.0]]);
        s.complexity = "m^2".into();
        let e = s.build().unwrap_err();
        assert!(matches!(e, EmulatedError::Service(_)));
        assert!(e.to_string().contains("m^2"), "{e}");
        let mut s = spec(vec![[1.0, 1.0]]);
        s.name = "bad name".into();
        assert!(matches!(s.build(), Err(EmulatedError::Service(_))));
        let mut s = spec(vec![[1.0, 1.0]]);
        s.calibration_size = Some(-1);
        assert!(matches!(
            s.build(),
            Err(EmulatedError::BadCalibrationSize { .. })
        ));
    }

    #[test]
    fn calibration_picks_the_largest_point_within_budget() {
        // n^3 / 1e9: 100 -> 1 ms, 200 -> 8 ms, 300 -> 27 ms, 400 -> 64 ms.
        let k = spec(vec![[100.0, 1e9], [200.0, 1e9], [300.0, 1e9], [400.0, 1e9]])
            .build()
            .unwrap();
        assert_eq!(k.calibration_inputs(), Some(vec![Value::Int(200)]));
        // Nothing within budget: the smallest point that runs.
        let k = spec(vec![[1000.0, 1e6], [2000.0, 1e6]]).build().unwrap();
        assert_eq!(k.calibration_inputs(), Some(vec![Value::Int(1000)]));
        // No point can run at all.
        let k = spec(vec![[10.0, 0.0]]).build().unwrap();
        assert_eq!(k.calibration_inputs(), None);
    }
}

#[cfg(test)]
mod data_tests {
    use super::*;
    use crate::kernel::KernelCtx;

    #[test]
    fn data_inputs_and_output_make_graph_nodes() {
        let spec = EmulatedSpec {
            name: "gemm".into(),
            doc: String::new(),
            param: "b".into(),
            complexity: "b".into(),
            speed: vec![[0.0, 1e6]],
            calibration_size: None,
            inputs: 2,
            output: true,
            halo_bytes: 0,
        };
        let k = spec.build().unwrap();
        let sig = k.desc().signature();
        assert!(
            sig.contains("in x1: vector<f64>[b]") && sig.contains("in x2: vector<f64>[b]"),
            "{sig}"
        );
        assert!(sig.contains("out out: vector<f64>[b]"), "{sig}");
        let inputs = k.calibration_inputs().unwrap();
        assert_eq!(inputs.len(), 3);
        k.desc().check_inputs(&inputs).unwrap();
        let out = k.run(&inputs, &KernelCtx::default()).unwrap();
        k.desc().check_outputs(&inputs, &out).unwrap();
        assert_eq!(out.len(), 2);
    }

    /// A slab's step: its neighbours' boundary rows in, its own out, each `halo_bytes` long.
    #[test]
    fn a_slab_step_takes_and_returns_boundary_rows() {
        let s = EmulatedSpec {
            name: "slab".into(),
            doc: String::new(),
            param: "n".into(),
            complexity: "n".into(),
            speed: vec![[0.0, 1e9]],
            calibration_size: None,
            inputs: 0,
            output: false,
            halo_bytes: 1000,
        };
        let k = s.build().unwrap();
        let sig = k.desc().signature();
        for arg in [
            "in up: bytes",
            "in down: bytes",
            "out top: bytes",
            "out bottom: bytes",
        ] {
            assert!(sig.contains(arg), "{sig}");
        }
        let inputs = k.calibration_inputs().unwrap();
        k.desc().check_inputs(&inputs).unwrap();
        let row = Value::Bytes(vec![1; 1000]);
        let out = k
            .run(&[Value::Int(10), row.clone(), row], &KernelCtx::default())
            .unwrap();
        k.desc().check_outputs(&inputs, &out).unwrap();
        assert_eq!(
            out[..2],
            [Value::Bytes(vec![0; 1000]), Value::Bytes(vec![0; 1000])]
        );
    }
}
