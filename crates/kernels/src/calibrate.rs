//! Start-up calibration: one measured rate per kernel gives the agent a first speed estimate
//! before any real call has been observed.

use crate::kernel::{Kernel, KernelCtx};
use std::time::Instant;

/// The result of timing a kernel on its calibration inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    /// Operations per second on the calibration inputs.
    pub rate: f64,
    /// Wall time of the fastest run, in seconds.
    pub seconds: f64,
}

/// Runs the kernel's calibration inputs `repeats` times (at least once) and rates the fastest
/// run; `None` if the kernel has no calibration inputs or complexity, or a run fails.
pub fn calibrate(kernel: &dyn Kernel, repeats: usize) -> Option<Calibration> {
    let inputs = kernel.calibration_inputs()?;
    let desc = kernel.desc();
    let complexity = desc.compiled_complexity().ok()??;
    // Calibration inputs come from the kernel itself, but `run` may assume checked inputs.
    desc.check_inputs(&inputs).ok()?;
    let ops = complexity.eval(&desc.sizes(&inputs)).ok()?;
    let ctx = KernelCtx::new();
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let t0 = Instant::now();
        kernel.run(&inputs, &ctx).ok()?;
        // The fastest run is the least disturbed by other processes on the machine.
        best = best.min(t0.elapsed().as_secs_f64());
    }
    let rate = ops / best;
    (rate.is_finite() && rate > 0.0).then_some(Calibration {
        rate,
        seconds: best,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::{AddKernel, DgemmKernel, FailKernel};
    use crate::emulated::EmulatedSpec;

    #[test]
    fn dgemm_has_a_positive_finite_rate() {
        let c = calibrate(&DgemmKernel::new(), 2).unwrap();
        assert!(c.rate.is_finite() && c.rate > 0.0, "{c:?}");
        assert!(c.seconds > 0.0);
    }

    #[test]
    fn kernels_without_calibration_inputs_have_no_rate() {
        assert_eq!(calibrate(&AddKernel::new(), 3), None);
        assert_eq!(calibrate(&FailKernel::new(), 1), None);
    }

    #[test]
    fn emulated_rate_is_at_most_the_true_speed() {
        let k = EmulatedSpec {
            name: "emu".into(),
            doc: String::new(),
            param: "n".into(),
            complexity: "n^3".into(),
            speed: vec![[100.0, 1e8], [200.0, 1e8]],
            calibration_size: None,
            inputs: 0,
            output: false,
            halo_bytes: 0,
        }
        .build()
        .unwrap();
        // The sleep lasts at least C/S, so the measured rate cannot exceed S.
        let c = calibrate(&k, 0).unwrap();
        assert!(c.rate > 0.0 && c.rate <= 1e8, "{c:?}");
    }
}
