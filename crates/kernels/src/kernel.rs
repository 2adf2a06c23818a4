//! The `Kernel` trait: what a server needs from a piece of code to offer it as a service.

use crate::cancel::CancelFlag;
use gridwise_proto::{Array, CallError, CallErrorKind, ServiceDesc, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Why a kernel returned no outputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// The computation itself refused the inputs or failed; retrying elsewhere would not help.
    #[error("{0}")]
    Application(String),
    /// The cancel flag was raised before the kernel finished.
    #[error("cancelled by the client")]
    Cancelled,
    /// The kernel broke its own contract (a bug, not the caller's fault).
    #[error("internal kernel error: {0}")]
    Internal(String),
}

impl KernelError {
    /// The wire form of this error, as the server reports it to the client.
    pub fn into_call_error(self) -> CallError {
        match self {
            KernelError::Application(m) => CallError::new(CallErrorKind::Application, m),
            KernelError::Cancelled => {
                CallError::new(CallErrorKind::Cancelled, "cancelled by the client")
            }
            KernelError::Internal(m) => CallError::new(CallErrorKind::Internal, m),
        }
    }
}

/// What a running kernel may consult besides its inputs.
#[derive(Clone, Debug, Default)]
pub struct KernelCtx {
    /// Raised when the client cancels the call or the server shuts down.
    pub cancel: CancelFlag,
    /// CPU time the call used off the thread that ran it, ns: a worker process's, all its
    /// threads'. The server times the running thread itself; the share of a core a call got
    /// is measured from both.
    cpu_elsewhere_ns: Arc<AtomicU64>,
}

impl KernelCtx {
    /// A context with a fresh, unraised cancel flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// A context with `cancel` as its flag.
    pub fn with_cancel(cancel: CancelFlag) -> Self {
        Self {
            cancel,
            ..Self::default()
        }
    }

    /// Counts CPU time the call used in another process.
    pub fn add_cpu_elsewhere(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.cpu_elsewhere_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// What [`add_cpu_elsewhere`](Self::add_cpu_elsewhere) counted.
    pub fn cpu_elsewhere(&self) -> Duration {
        Duration::from_nanos(self.cpu_elsewhere_ns.load(Ordering::Relaxed))
    }
}

/// The CPU time process `pid` has used, all its threads (a BLAS may run several), from the
/// scheduler's own count in nanoseconds (`/proc/<pid>/task/*/schedstat`): the tick counts of
/// `/proc/<pid>/stat` are 10 ms coarse, a tenth of a short call. `None` where there is no such
/// process (or no `/proc`).
pub fn process_cpu_time(pid: u32) -> Option<Duration> {
    Some(thread_cpu_times(pid)?.into_iter().map(|(_, t)| t).sum())
}

/// The CPU time each thread of process `pid` has used, by thread id (as
/// [`process_cpu_time`] reads it): what tells the thread that ran a kernel from those that
/// decoded its inputs.
pub fn thread_cpu_times(pid: u32) -> Option<Vec<(u32, Duration)>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .filter_map(|t| {
                let t = t.ok()?;
                let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
                let text = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
                let ns = text.split_whitespace().next()?.parse::<u64>().ok()?;
                Some((tid, Duration::from_nanos(ns)))
            })
            .collect(),
    )
}

/// The processes that `pid`'s threads started and that still run (a server's library
/// workers, a command's process): their CPU is the server's work.
pub fn child_pids(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A routine a server offers as a service.
pub trait Kernel: Send + Sync {
    /// The service description the server publishes and checks calls against.
    fn desc(&self) -> &ServiceDesc;

    /// Cheap kernels run inline on the server's I/O thread, saving a thread hop per call.
    fn is_instant(&self) -> bool {
        false
    }

    /// Whether its time is set by the kernel itself, not by the CPU it gets (an emulated kernel
    /// sleeps): the host's load then says nothing about how long it would take on a quiet host.
    fn sleeps(&self) -> bool {
        false
    }

    /// The threads a run keeps busy: its share of the host is counted per thread, and the
    /// CPU time it used is spread over them.
    fn threads(&self) -> u32 {
        1
    }

    /// Runs on inputs already checked against desc() (IN+INOUT values in order); returns OUT+INOUT values in order.
    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError>;

    /// Inputs for a short start-up calibration run, or None if this kernel has no meaningful rate.
    fn calibration_inputs(&self) -> Option<Vec<Value>> {
        None
    }
}

// The server checks inputs before `run`, so a mismatch here is a server bug: report it as
// Internal rather than panicking on data that came off the wire.
pub(crate) fn missing(i: usize, name: &str, want: &str, got: Option<&Value>) -> KernelError {
    KernelError::Internal(format!(
        "input {i} (`{name}`) should be {want} but is {}; the server must check inputs against the service description before running the kernel",
        got.map_or_else(|| "missing".to_string(), Value::kind)
    ))
}

/// The int input at position `i`, named `name` for error messages.
pub(crate) fn int_input(inputs: &[Value], i: usize, name: &str) -> Result<i64, KernelError> {
    inputs
        .get(i)
        .and_then(Value::as_int)
        .ok_or_else(|| missing(i, name, "an int", inputs.get(i)))
}

/// The string input at position `i`, named `name` for error messages.
pub(crate) fn str_input<'a>(
    inputs: &'a [Value],
    i: usize,
    name: &str,
) -> Result<&'a str, KernelError> {
    inputs
        .get(i)
        .and_then(Value::as_str)
        .ok_or_else(|| missing(i, name, "a string", inputs.get(i)))
}

/// The f64 elements of the array input at position `i`, named `name` for error messages.
pub(crate) fn f64_array_input(
    inputs: &[Value],
    i: usize,
    name: &str,
) -> Result<Vec<f64>, KernelError> {
    inputs
        .get(i)
        .and_then(Value::as_array)
        .and_then(Array::to_f64)
        .ok_or_else(|| missing(i, name, "an f64 array", inputs.get(i)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_call_error_kinds() {
        let e = KernelError::Application("bad n".into()).into_call_error();
        assert_eq!(e.kind, CallErrorKind::Application);
        assert_eq!(e.message, "bad n");
        let e = KernelError::Cancelled.into_call_error();
        assert_eq!(e.kind, CallErrorKind::Cancelled);
        assert_eq!(e.message, "cancelled by the client");
        let e = KernelError::Internal("oops".into()).into_call_error();
        assert_eq!(e.kind, CallErrorKind::Internal);
        assert_eq!(e.message, "oops");
    }

    #[test]
    fn messages_are_readable() {
        assert_eq!(KernelError::Application("x".into()).to_string(), "x");
        assert_eq!(
            KernelError::Cancelled.to_string(),
            "cancelled by the client"
        );
        assert!(
            KernelError::Internal("y".into())
                .to_string()
                .contains("internal")
        );
    }

    #[test]
    fn unchecked_inputs_are_internal_errors_not_panics() {
        let v = [Value::Str("s".into())];
        assert!(matches!(
            int_input(&v, 0, "x"),
            Err(KernelError::Internal(_))
        ));
        assert!(matches!(
            int_input(&[], 0, "x"),
            Err(KernelError::Internal(_))
        ));
        assert!(matches!(
            f64_array_input(&v, 0, "A"),
            Err(KernelError::Internal(_))
        ));
        assert_eq!(str_input(&v, 0, "m").ok(), Some("s"));
    }
}
