//! gridwise compute kernels: the code a server runs for a call.
//!
//! A [`Kernel`] pairs a [`ServiceDesc`](gridwise_proto::ServiceDesc) with a synchronous `run`;
//! the server checks inputs and outputs against the description, so kernels only compute.
//! Kernels are plain blocking Rust (no async runtime) and watch a [`CancelFlag`] so a cancelled
//! call frees its thread at once. Besides the [built-in services](builtin) there is the
//! [emulated kernel](emulated), which sleeps for the time a configured true speed function
//! predicts: one machine cannot hold a heterogeneous grid, so tests and benchmarks emulate one.

pub mod builtin;
pub mod calibrate;
pub mod cancel;
pub mod emulated;
pub mod inputs;
pub mod kernel;
pub mod load;
pub mod speed;
pub mod transfer;

pub use builtin::{
    AddKernel, BUILTIN_NAMES, DgemmKernel, FailKernel, LoopKernel, SleepKernel, builtin,
};
pub use calibrate::{Calibration, calibrate};
pub use cancel::CancelFlag;
pub use emulated::{EmulatedError, EmulatedKernel, EmulatedSpec};
pub use inputs::inputs_for_sizes;
pub use kernel::{Kernel, KernelCtx, KernelError, child_pids, process_cpu_time, thread_cpu_times};
pub use load::{Generated, LoadSpec, LoadTrace};
pub use speed::{SpeedError, SpeedFunction};
pub use transfer::TRANSFER_NAMES;
