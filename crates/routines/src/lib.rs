//! Users' own routines as gridwise services, with no Rust: [service description
//! files](describe) give a routine's arguments, sizes, complexity and memory; a server config
//! then says where each one comes from:
//!
//! - a **library** routine (C or Fortran calling convention, BLAS and LAPACK among them),
//!   called in a worker process ([`worker`], [`native`]);
//! - a **Python** function `module:function` taking and returning NumPy arrays, in a worker
//!   process (`python_worker.py`);
//! - a **command**: an executable with an argument template and files in a scratch directory
//!   ([`command`]).
//!
//! Library and Python routines never run in the server: a crash, an abort or a runaway
//! allocation fails one call, and the next gets a fresh worker.

pub mod arena;
pub mod binding;
pub mod command;
pub mod describe;
pub mod frame;
pub mod marshal;
pub mod native;
pub mod npy;
pub mod setup;
pub mod worker;

pub use binding::LibraryCall;
pub use command::{CommandKernel, CommandSpec};
pub use describe::{DescribeError, Described, read_file};
pub use setup::{LibraryEntry, Offered, PythonEntry, Routines, kernels};
pub use worker::{Launch, LibrarySpec, Limits, WorkerKernel, run_if_worker};
