//! Fixtures shared by the unit tests.

use gridwise_proto::{ArgDesc, ArgMode, CallProfile, Registration, ServiceDesc};

/// The real built-in `dgemm(m, n, k, A, B) -> C`, complexity `2*m*n*k`.
pub fn dgemm() -> ServiceDesc {
    gridwise_kernels::builtin("dgemm")
        .expect("dgemm is built in")
        .desc()
        .clone()
}

/// `echo(x) -> y`, no size parameters, no complexity.
pub fn echo() -> ServiceDesc {
    ServiceDesc {
        memory: None,
        duration: None,
        name: "echo".into(),
        doc: String::new(),
        args: vec![
            ArgDesc::new("x", ArgMode::In, "bytes"),
            ArgDesc::new("y", ArgMode::Out, "bytes"),
        ],
        size_params: vec![],
        complexity: None,
    }
}

/// A service with no arguments.
pub fn named(name: &str) -> ServiceDesc {
    ServiceDesc {
        memory: None,
        duration: None,
        name: name.into(),
        doc: String::new(),
        args: vec![],
        size_params: vec![],
        complexity: None,
    }
}

/// A one-slot server at 1 Gop/s offering `services`.
pub fn registration(name: &str, services: &[ServiceDesc]) -> Registration {
    Registration {
        secret: None,
        instance: String::new(),
        max_frame_bytes: u64::MAX,
        sleeping: Vec::new(),
        not_offered: Vec::new(),
        memory_budget_bytes: u64::MAX,
        name: name.into(),
        addr: format!("{name}.example:7000"),
        slots: 1,
        services: services.to_vec(),
        rates: vec![],
        default_rate: 1e9,
        memory_bytes: 1 << 30,
        cores: 4,
    }
}

/// A dgemm call profile with no byte counts.
pub fn dgemm_profile(m: i64, n: i64, k: i64) -> CallProfile {
    CallProfile {
        service: "dgemm".into(),
        sizes: vec![("m".into(), m), ("n".into(), n), ("k".into(), k)],
        in_bytes: 0,
        out_bytes: 0,
        remote_in: Vec::new(),
        inline_bytes: 0,
    }
}
