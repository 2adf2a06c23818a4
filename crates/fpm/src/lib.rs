//! Functional performance models (seed 003, Higgins 2010): the speed of one server running one
//! routine as a function of problem size, S(x); time(x) = C(x)/S(x). Pure: no I/O, no clocks.
//!
//! - [`model`]: the piecewise-linear [`model::Fpm`] (1-D and multi-parameter) with per-vertex samples;
//! - [`spec`], [`build`], [`gbbp`], [`multi`], [`baseline`]: model construction (GBBP and the
//!   naive / naive-bisect / random / uniform-N baselines), driven through the [`build::Bench`] trait;
//! - [`eval`]: accuracy of a built model against a dense ground truth;
//! - [`load`], [`band`]: load history → load functions → speed band → adjusted FPM;
//! - [`partition`]: splitting divisible work across servers by their models.

// --- construction and model (one owner) ---
pub mod baseline;
pub mod build;
pub mod eval;
pub mod gbbp;
pub mod model;
pub mod multi;
pub mod spec;
pub mod stats;

// --- load, band and partitioning (another owner) ---
pub mod band;
pub mod load;
pub mod partition;
