//! Running means of kernel times: the time model of last resort, and the only one for
//! services whose time no complexity formula gives (e.g. a simulation step).

/// Running mean of the kernel times of successful calls.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KernelHistory {
    /// Calls the mean is over.
    pub calls: u64,
    /// Mean kernel time, seconds.
    pub mean_s: f64,
}

impl KernelHistory {
    /// Adds one kernel time; negative and non-finite times are ignored (a broken clock must not
    /// poison the mean).
    pub fn record(&mut self, kernel_s: f64) {
        if !(kernel_s.is_finite() && kernel_s >= 0.0) {
            return;
        }
        self.calls += 1;
        self.mean_s += (kernel_s - self.mean_s) / self.calls as f64;
    }
}
