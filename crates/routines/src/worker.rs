//! Routines that run in worker processes the server supervises: a pool per service, started
//! when the first call needs one, replaced when one dies. A segfault, an abort, an `exit()`,
//! memory beyond the limit or time beyond the limit fails that call with an error saying
//! which, and the next call gets a fresh worker; the server itself never runs the routine.

use crate::arena::{Arena, WORKER_FD};
use crate::binding::LibraryCall;
use crate::frame::{Reply, Request, read_frame, write_frame};
use crate::marshal;
use gridwise_kernels::{Kernel, KernelCtx, KernelError};
use gridwise_proto::{ServiceDesc, Value};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::{self, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The first argument that makes a gridwise executable a library worker.
pub const WORKER_FLAG: &str = "--gridwise-routine-worker";
/// Where a worker finds what to run (JSON of [`LibrarySpec`], or of the Python spec).
pub const SPEC_ENV: &str = "GRIDWISE_WORKER_SPEC";

/// How long a new worker may take to load its routine (importing a Python module can be slow).
const START_LIMIT: Duration = Duration::from_secs(60);
/// Bytes of a worker's stderr kept for the message when it dies.
const STDERR_TAIL: usize = 2048;

const PYTHON_WORKER: &str = include_str!("python_worker.py");

/// What a library worker runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LibrarySpec {
    pub desc: ServiceDesc,
    /// The shared object: a path, or a name the dynamic loader finds.
    pub path: String,
    pub call: LibraryCall,
}

/// How a worker is started.
#[derive(Clone, Debug)]
pub enum Launch {
    /// `program WORKER_FLAG` with a [`LibrarySpec`].
    Library {
        program: PathBuf,
        spec: Box<LibrarySpec>,
    },
    /// `python -c <worker>` running `function` (`module:function`) with `path` on `sys.path`.
    Python {
        python: String,
        function: String,
        path: Vec<PathBuf>,
    },
}

/// Per-call limits of a worker.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    /// The worker's address space, bytes (`RLIMIT_AS`): an allocation beyond it fails in the
    /// worker, not on the host.
    pub memory_bytes: Option<u64>,
    /// A call running longer is stopped (its worker killed) and fails.
    pub time_s: Option<f64>,
    /// The threads the routine's BLAS or OpenMP may start (`OPENBLAS_NUM_THREADS`,
    /// `OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `BLIS_NUM_THREADS`). Unset, a library worker
    /// leaves its library to choose (OpenBLAS takes every core) and a Python one runs one.
    pub threads: Option<u32>,
}

/// One live worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    arena: Arena,
    stderr: Arc<Mutex<VecDeque<u8>>>,
}

/// What waiting for a worker's frame gave.
enum Waited {
    Frame(Reply, Vec<u8>),
    /// Nothing yet within the wait.
    Nothing,
    /// The worker is gone (end of its output, or a broken frame).
    Gone,
}

impl Worker {
    /// Waits up to `wait` for the worker's next frame, reading it on this thread (no hand-off
    /// between threads on a call's path).
    fn next(&mut self, wait: Duration) -> Waited {
        if self.stdout.buffer().is_empty() {
            let mut fds = libc::pollfd {
                fd: self.stdout.get_ref().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = wait.as_millis().min(i32::MAX as u128) as i32;
            // SAFETY: one pollfd, on a pipe this worker owns.
            let n = unsafe { libc::poll(&mut fds, 1, ms) };
            if n == 0 {
                return Waited::Nothing;
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                return if e.kind() == io::ErrorKind::Interrupted {
                    Waited::Nothing
                } else {
                    Waited::Gone
                };
            }
        }
        match read_frame::<Reply>(&mut self.stdout) {
            Ok(Some((r, blob))) => Waited::Frame(r, blob),
            _ => Waited::Gone,
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A service whose routine runs in workers.
pub struct WorkerKernel {
    desc: ServiceDesc,
    launch: Launch,
    limits: Limits,
    /// What the routine is, for messages (`dgesv_ in liblapack.so.3`, `model:f`).
    what: String,
    idle: Mutex<Vec<Worker>>,
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV, a segmentation fault",
        libc::SIGABRT => "SIGABRT, an abort",
        libc::SIGBUS => "SIGBUS, a bus error",
        libc::SIGFPE => "SIGFPE, an arithmetic error",
        libc::SIGILL => "SIGILL, an illegal instruction",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

impl WorkerKernel {
    pub fn new(desc: ServiceDesc, launch: Launch, limits: Limits) -> Self {
        let what = match &launch {
            Launch::Library { spec, .. } => format!("`{}` in {}", spec.call.symbol, spec.path),
            Launch::Python { function, .. } => format!("Python `{function}`"),
        };
        WorkerKernel {
            desc,
            launch,
            limits,
            what,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn spawn(&self) -> Result<Worker, String> {
        let arena =
            Arena::new().map_err(|e| format!("cannot make a worker's shared memory: {e}"))?;
        let mut cmd = match &self.launch {
            Launch::Library { program, spec } => {
                let mut c = Command::new(program);
                c.arg(WORKER_FLAG).env(
                    SPEC_ENV,
                    serde_json::to_string(spec).map_err(|e| e.to_string())?,
                );
                if let Some(t) = self.limits.threads {
                    set_threads(&mut c, t);
                }
                c
            }
            Launch::Python {
                python,
                function,
                path,
            } => {
                let mut c = Command::new(python);
                let spec =
                    serde_json::json!({ "desc": self.desc, "function": function, "path": path });
                c.args(["-u", "-c", PYTHON_WORKER])
                    .env(SPEC_ENV, spec.to_string());
                // Unless told, one thread: numpy's own pool would compete with the server's
                // other slots.
                set_threads(&mut c, self.limits.threads.unwrap_or(1));
                c
            }
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let fd = arena.fd();
        let memory = self.limits.memory_bytes;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if fd == WORKER_FD {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, WORKER_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                // A worker never outlives its server.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(m) = memory {
                    let lim = libc::rlimit {
                        rlim_cur: m as libc::rlim_t,
                        rlim_max: m as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start a worker for {}: {e}", self.what))?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err("a worker was started without its pipes".into());
        };
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let t = tail.clone();
        std::thread::Builder::new()
            .name("gridwise-worker-err".into())
            .spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stderr.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend(&buf[..n]);
                    while t.len() > STDERR_TAIL {
                        t.pop_front();
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        let mut w = Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            arena,
            stderr: tail,
        };
        match w.next(START_LIMIT) {
            Waited::Frame(Reply::Ready, _) => Ok(w),
            Waited::Frame(Reply::Error(e), _) => Err(e),
            Waited::Nothing => Err(format!(
                "a worker for {} did not start within {} s",
                self.what,
                START_LIMIT.as_secs()
            )),
            _ => Err(format!(
                "a worker for {} could not start: {}",
                self.what,
                self.death(&mut w)
            )),
        }
    }

    /// Why a worker is gone (it is reaped), in words.
    fn death(&self, w: &mut Worker) -> String {
        let status = match w.child.try_wait() {
            Ok(Some(s)) => Some(s),
            _ => {
                // The pipe closed first: give it a moment to finish dying.
                std::thread::sleep(Duration::from_millis(50));
                let _ = w.child.kill();
                w.child.wait().ok()
            }
        };
        let how = match status {
            Some(s) if s.signal().is_some() => {
                let sig = s.signal().unwrap_or(0);
                format!("killed by signal {sig} ({})", signal_name(sig))
            }
            Some(s) => format!("exited with status {}", s.code().unwrap_or(-1)),
            None => "vanished".into(),
        };
        let tail = {
            let t = w.stderr.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&t.iter().copied().collect::<Vec<u8>>())
                .trim()
                .to_string()
        };
        let memory = self
            .limits
            .memory_bytes
            .map(|m| format!("; its memory limit is {m} bytes"))
            .unwrap_or_default();
        if tail.is_empty() {
            format!("{how}{memory}")
        } else {
            format!("{how}{memory}; it said: {tail}")
        }
    }

    fn take(&self) -> Result<Worker, String> {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match idle {
            Some(w) => Ok(w),
            None => self.spawn(),
        }
    }

    fn give_back(&self, w: Worker) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(w);
    }

    fn call(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let mut w = self.take().map_err(KernelError::Application)?;
        let pid = w.child.id();
        let cpu_before = gridwise_kernels::process_cpu_time(pid);
        let req: Request =
            marshal::request(&self.desc, inputs, &mut w.arena).map_err(KernelError::Internal)?;
        if write_frame(&mut w.stdin, &req, &[]).is_err() {
            let why = self.death(&mut w);
            return Err(KernelError::Application(format!(
                "the worker running {} died before the call reached it: {why}",
                self.what
            )));
        }
        let deadline = self
            .limits
            .time_s
            .map(|s| Instant::now() + Duration::from_secs_f64(s));
        loop {
            match w.next(Duration::from_millis(10)) {
                Waited::Frame(Reply::Ok(items), blob) => {
                    if let (Some(a), Some(b)) =
                        (cpu_before, gridwise_kernels::process_cpu_time(pid))
                    {
                        ctx.add_cpu_elsewhere(b.saturating_sub(a));
                    }
                    let outs = marshal::outputs(&self.desc, &items, &mut w.arena, &blob)
                        .map_err(|e| KernelError::Application(format!("{}: {e}", self.what)));
                    self.give_back(w);
                    return outs;
                }
                Waited::Frame(Reply::Error(e), _) => {
                    self.give_back(w);
                    return Err(KernelError::Application(format!("{}: {e}", self.what)));
                }
                Waited::Frame(Reply::Ready, _) => {
                    return Err(KernelError::Internal(format!(
                        "the worker running {} answered a call with `ready`",
                        self.what
                    )));
                }
                Waited::Gone => {
                    return Err(KernelError::Application(format!(
                        "{} crashed: its worker was {}. The server is unaffected; the next call gets a new worker.",
                        self.what,
                        self.death(&mut w)
                    )));
                }
                Waited::Nothing => {
                    if ctx.cancel.is_cancelled() {
                        // Dropping the worker kills it: the routine cannot be interrupted
                        // any other way.
                        drop(w);
                        return Err(KernelError::Cancelled);
                    }
                    if deadline.is_some_and(|d| Instant::now() > d) {
                        drop(w);
                        return Err(KernelError::Application(format!(
                            "{} ran past its time limit of {} s and was stopped",
                            self.what,
                            self.limits.time_s.unwrap_or(0.0)
                        )));
                    }
                }
            }
        }
    }
}

/// Tells the numerical libraries a worker may load how many threads to start.
fn set_threads(c: &mut Command, threads: u32) {
    let t = threads.max(1).to_string();
    for var in [
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "BLIS_NUM_THREADS",
    ] {
        c.env(var, &t);
    }
}

impl Kernel for WorkerKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    /// A library left to choose its threads is counted as one: how many it starts is not
    /// known here.
    fn threads(&self) -> u32 {
        self.limits.threads.unwrap_or(1).max(1)
    }

    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        self.call(inputs, ctx)
    }
}

/// Runs this process as a library worker when it was started as one (its first argument is
/// [`WORKER_FLAG`]); returns otherwise. Every gridwise executable that can be a server calls
/// this first thing in `main`.
pub fn run_if_worker() {
    if std::env::args().nth(1).as_deref() != Some(WORKER_FLAG) {
        return;
    }
    let code = match library_worker() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gridwise library worker: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn library_worker() -> io::Result<()> {
    use std::os::fd::FromRawFd;
    let spec: LibrarySpec = serde_json::from_str(
        &std::env::var(SPEC_ENV).map_err(|_| io::Error::other(format!("{SPEC_ENV} is not set")))?,
    )
    .map_err(io::Error::other)?;
    // Frames go to a copy of stdout; whatever the routine prints goes to stderr instead of
    // into the protocol.
    // SAFETY: plain fd calls on this process's own stdout and stderr.
    let frames = unsafe {
        let fd = libc::dup(1);
        if fd < 0 || libc::dup2(2, 1) < 0 {
            return Err(io::Error::last_os_error());
        }
        std::fs::File::from_raw_fd(fd)
    };
    let mut out = io::BufWriter::new(frames);
    let mut input = io::BufReader::new(io::stdin().lock());
    let mut routine = match crate::native::Routine::load(spec.desc, &spec.path, spec.call) {
        Ok(r) => {
            write_frame(&mut out, &Reply::Ready, &[])?;
            r
        }
        Err(e) => return write_frame(&mut out, &Reply::Error(e), &[]),
    };
    // SAFETY: the server put the arena at this fd for this process alone.
    let mut arena = unsafe { Arena::inherited(WORKER_FD) };
    while let Some((req, _)) = read_frame::<Request>(&mut input)? {
        let reply = match arena.map(req.arena_len as usize) {
            Ok(()) => match routine.run(&req, &mut arena) {
                Ok(items) => Reply::Ok(items),
                Err(e) => Reply::Error(e),
            },
            Err(e) => Reply::Error(format!("cannot map the call's data: {e}")),
        };
        write_frame(&mut out, &reply, &[])?;
    }
    Ok(())
}
