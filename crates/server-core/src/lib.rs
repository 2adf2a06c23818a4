//! What a server decides about a call, on values: the daemon (`services/server`) asks and
//! carries the answer out (waits for memory, runs the kernel, sends the reply). Nothing here
//! touches a socket, a thread or a clock, so every rule is tested on numbers.

pub mod admission;
pub mod cgroup;
pub mod heartbeat;
pub mod share;
pub mod slots;
pub mod start_gate;

pub use admission::{Admission, CallSizes, UNCHARGED_BELOW};
pub use heartbeat::HostNow;
pub use share::{Reading, ShareSensor};
pub use slots::{Place, SlotQueue};
pub use start_gate::StartGate;
