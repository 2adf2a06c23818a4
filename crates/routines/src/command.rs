//! Command kernels: a service that runs an executable. Its inputs are written as files into a
//! scratch directory made for the call (or fed on stdin), its argument template names them,
//! and its outputs are read back from files (or stdout) in the declared format. A non-zero
//! exit fails the call with the tail of what it printed on stderr; a time limit and a cancel
//! kill its whole process group; the scratch directory is always removed.
//!
//! ```toml
//! [[command]]
//! service = "scale"                       # described in a description file
//! program = "/opt/tools/scale"
//! args = ["--factor", "{k}", "{x}", "{y}"]  # {name}: an input number's or string's value, else the file's path
//! format = "npy"                          # raw | npy | text
//! stdin = "x"                             # optional: this input on stdin instead
//! stdout = "y"                            # optional: this output from stdout
//! time_limit_s = 60
//! ```

use crate::npy;
use gridwise_kernels::{Kernel, KernelCtx, KernelError};
use gridwise_proto::{ArgType, Array, Dim, ElemType, ServiceDesc, Value};
use serde::Deserialize;
use std::collections::VecDeque;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How arrays (and strings and bytes) are written to and read from files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Little-endian elements, row-major, no header.
    Raw,
    /// NumPy's `.npy`.
    #[default]
    Npy,
    /// Numbers separated by white space, one matrix row per line.
    Text,
}

/// A `[[command]]` entry of a server config.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandSpec {
    pub service: String,
    pub program: PathBuf,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub format: Format,
    pub stdin: Option<String>,
    pub stdout: Option<String>,
    pub time_limit_s: Option<f64>,
}

/// Bytes of stderr kept for the message of a failed run.
const STDERR_TAIL: usize = 2048;

/// A service run as a command.
#[derive(Debug)]
pub struct CommandKernel {
    desc: ServiceDesc,
    spec: CommandSpec,
}

impl CommandKernel {
    /// Checks the entry against the service's description: every `{name}` names an argument,
    /// `stdin` an input and `stdout` an output.
    pub fn new(desc: ServiceDesc, spec: CommandSpec) -> Result<Self, String> {
        let known = |n: &str| n == "scratch" || desc.args.iter().any(|a| a.name == n);
        for a in &spec.args {
            for name in placeholders(a)? {
                if !known(&name) {
                    return Err(format!(
                        "`{{{name}}}` in args names no argument of `{}` (it has {})",
                        desc.name,
                        desc.args
                            .iter()
                            .map(|a| a.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
        if let Some(s) = &spec.stdin
            && !desc.inputs().any(|a| a.name == *s)
        {
            return Err(format!("stdin = `{s}` is no input of `{}`", desc.name));
        }
        if let Some(s) = &spec.stdout
            && !desc.outputs().any(|a| a.name == *s)
        {
            return Err(format!("stdout = `{s}` is no output of `{}`", desc.name));
        }
        if let Some(t) = spec.time_limit_s
            && !(t.is_finite() && t > 0.0)
        {
            return Err(format!("time_limit_s is {t}: a positive number of seconds"));
        }
        Ok(CommandKernel { desc, spec })
    }

    fn file_of(&self, dir: &Path, name: &str) -> PathBuf {
        let ext = match self.spec.format {
            Format::Raw => "bin",
            Format::Npy => "npy",
            Format::Text => "txt",
        };
        dir.join(format!("{name}.{ext}"))
    }

    fn encode(&self, v: &Value) -> Vec<u8> {
        match (v, self.spec.format) {
            (Value::Int(i), _) => i.to_string().into_bytes(),
            (Value::Double(d), _) => format!("{d:?}").into_bytes(),
            (Value::Str(s), _) => s.clone().into_bytes(),
            (Value::Bytes(b), _) => b.clone(),
            (Value::Vector(a) | Value::Matrix(a), Format::Raw) => a.data.clone(),
            (Value::Vector(a), Format::Npy) => npy::write(a, true),
            (Value::Matrix(a), Format::Npy) => npy::write(a, false),
            (Value::Vector(a) | Value::Matrix(a), Format::Text) => npy::to_text(a),
            (Value::Ref(_), _) => Vec::new(),
        }
    }

    fn decode(
        &self,
        name: &str,
        ty: &ArgType,
        bytes: Vec<u8>,
        inputs: &[Value],
    ) -> Result<Value, String> {
        let text = || {
            String::from_utf8(bytes.clone())
                .map_err(|_| format!("output `{name}` is not UTF-8 text"))
        };
        let dim = |d: &Dim| -> Result<u64, String> {
            match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Arg(a) => self
                    .desc
                    .inputs()
                    .zip(inputs)
                    .find(|(x, _)| x.name == *a)
                    .and_then(|(_, v)| v.as_int())
                    .and_then(|v| u64::try_from(v).ok())
                    .ok_or_else(|| format!("no value for dimension `{a}`")),
            }
        };
        Ok(match ty {
            ArgType::Int => Value::Int(text()?.trim().parse().map_err(|_| {
                format!(
                    "output `{name}` is not an int: `{}`",
                    text().unwrap_or_default().trim()
                )
            })?),
            ArgType::Double => Value::Double(text()?.trim().parse().map_err(|_| {
                format!(
                    "output `{name}` is not a number: `{}`",
                    text().unwrap_or_default().trim()
                )
            })?),
            ArgType::Str => Value::Str(text()?),
            ArgType::Bytes => Value::Bytes(bytes),
            ArgType::Vector { elem, len } => {
                Value::Vector(self.array(name, *elem, dim(len)?, 1, bytes)?)
            }
            ArgType::Matrix { elem, rows, cols } => {
                Value::Matrix(self.array(name, *elem, dim(rows)?, dim(cols)?, bytes)?)
            }
        })
    }

    fn array(
        &self,
        name: &str,
        elem: ElemType,
        rows: u64,
        cols: u64,
        bytes: Vec<u8>,
    ) -> Result<Array, String> {
        let a = match self.spec.format {
            Format::Raw => Array {
                elem,
                rows,
                cols,
                data: bytes,
            },
            Format::Npy => npy::read(&bytes, elem).map_err(|e| format!("output `{name}`: {e}"))?,
            Format::Text => {
                npy::from_text(&bytes, elem, cols).map_err(|e| format!("output `{name}`: {e}"))?
            }
        };
        if a.rows.saturating_mul(a.cols) != rows.saturating_mul(cols) || !a.is_well_formed() {
            return Err(format!(
                "output `{name}` holds {} element(s) where the description declares {rows}x{cols}",
                a.rows.saturating_mul(a.cols)
            ));
        }
        Ok(Array { rows, cols, ..a })
    }

    fn run_in(
        &self,
        dir: &Path,
        inputs: &[Value],
        ctx: &KernelCtx,
    ) -> Result<Vec<Value>, KernelError> {
        let app = KernelError::Application;
        let mut values = std::collections::HashMap::new();
        for (a, v) in self.desc.inputs().zip(inputs) {
            values.insert(a.name.clone(), v);
        }
        // Inputs to files (INOUT ones are the file the command rewrites); numbers and strings
        // go on the command line.
        for (a, v) in self.desc.inputs().zip(inputs) {
            let on_stdin = self.spec.stdin.as_deref() == Some(a.name.as_str());
            if !matches!(a.ty, ArgType::Int | ArgType::Double | ArgType::Str)
                || a.mode.is_output()
                || on_stdin
            {
                std::fs::write(self.file_of(dir, &a.name), self.encode(v))
                    .map_err(|e| app(format!("cannot write input `{}`: {e}", a.name)))?;
            }
        }
        let subst = |word: &str| -> String {
            let mut out = String::new();
            for part in split_template(word) {
                let name = match part {
                    Err(text) => {
                        out.push_str(text);
                        continue;
                    }
                    Ok(name) => name,
                };
                let arg = self.desc.args.iter().find(|a| a.name == name);
                match (name, arg, values.get(name)) {
                    ("scratch", _, _) => out.push_str(&dir.display().to_string()),
                    (_, Some(a), Some(Value::Int(x))) if !a.mode.is_output() => {
                        out.push_str(&x.to_string())
                    }
                    (_, Some(a), Some(Value::Double(x))) if !a.mode.is_output() => {
                        out.push_str(&format!("{x:?}"))
                    }
                    (_, Some(a), Some(Value::Str(x))) if !a.mode.is_output() => out.push_str(x),
                    _ => out.push_str(&self.file_of(dir, name).display().to_string()),
                }
            }
            out
        };
        let mut cmd = Command::new(&self.spec.program);
        cmd.args(self.spec.args.iter().map(|a| subst(a)))
            .current_dir(dir)
            .process_group(0)
            .stderr(Stdio::piped());
        match &self.spec.stdin {
            Some(name) => {
                let f = std::fs::File::open(self.file_of(dir, name))
                    .map_err(|e| app(format!("cannot open input `{name}` for stdin: {e}")))?;
                cmd.stdin(f);
            }
            None => {
                cmd.stdin(Stdio::null());
            }
        }
        let stdout_file = dir.join(".stdout");
        match &self.spec.stdout {
            Some(_) => {
                let f = std::fs::File::create(&stdout_file)
                    .map_err(|e| app(format!("cannot capture stdout: {e}")))?;
                cmd.stdout(f);
            }
            None => {
                cmd.stdout(Stdio::null());
            }
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| app(format!("cannot run `{}`: {e}", self.spec.program.display())))?;
        let pgid = child.id() as i32;
        let mut stderr = child.stderr.take();
        let tail = std::thread::spawn(move || {
            let mut t: VecDeque<u8> = VecDeque::new();
            let mut buf = [0u8; 1024];
            while let Some(Ok(n)) = stderr.as_mut().map(|s| s.read(&mut buf)) {
                if n == 0 {
                    break;
                }
                t.extend(&buf[..n]);
                while t.len() > STDERR_TAIL {
                    t.pop_front();
                }
            }
            String::from_utf8_lossy(&t.into_iter().collect::<Vec<u8>>())
                .trim()
                .to_string()
        });
        let deadline = self
            .spec
            .time_limit_s
            .map(|s| Instant::now() + Duration::from_secs_f64(s));
        let kill = |child: &mut std::process::Child| {
            // SAFETY: signals the process group this kernel started.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
        };
        let status = loop {
            if let Some((s, cpu)) = reap(child.id()).map_err(|e| app(e.to_string()))? {
                // Anything it left running in its group goes with it.
                // SAFETY: as above.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                ctx.add_cpu_elsewhere(cpu);
                break s;
            }
            if ctx.cancel.is_cancelled() {
                kill(&mut child);
                return Err(KernelError::Cancelled);
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                kill(&mut child);
                return Err(app(format!(
                    "`{}` ran past its time limit of {} s and was stopped",
                    self.spec.program.display(),
                    self.spec.time_limit_s.unwrap_or(0.0)
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let err = tail.join().unwrap_or_default();
        if !status.success() {
            let how = match (status.code(), status.signal()) {
                (Some(c), _) => format!("exited with status {c}"),
                (None, Some(s)) => format!("was killed by signal {s}"),
                _ => "failed".into(),
            };
            return Err(app(format!(
                "`{}` {how}{}",
                self.spec.program.display(),
                if err.is_empty() {
                    String::new()
                } else {
                    format!(": {err}")
                }
            )));
        }
        self.desc
            .outputs()
            .map(|a| {
                let path = if self.spec.stdout.as_deref() == Some(a.name.as_str()) {
                    stdout_file.clone()
                } else {
                    self.file_of(dir, &a.name)
                };
                let bytes = std::fs::read(&path).map_err(|e| {
                    app(format!(
                        "`{}` wrote no output `{}` ({}): {e}",
                        self.spec.program.display(),
                        a.name,
                        path.display()
                    ))
                })?;
                self.decode(&a.name, &a.ty, bytes, inputs).map_err(app)
            })
            .collect()
    }
}

/// Whether `s` is a placeholder's name (braces around anything else, as in an awk program,
/// are left as they are).
fn is_name(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The `{name}` placeholders of a template word, and the text between them.
fn split_template(word: &str) -> Vec<Result<&str, &str>> {
    let mut out = Vec::new();
    let mut rest = word;
    while let Some(i) = rest.find('{') {
        match rest[i..].find('}') {
            Some(j) if is_name(&rest[i + 1..i + j]) => {
                out.push(Err(&rest[..i]));
                out.push(Ok(&rest[i + 1..i + j]));
                rest = &rest[i + j + 1..];
            }
            _ => {
                out.push(Err(&rest[..=i]));
                rest = &rest[i + 1..];
            }
        }
    }
    out.push(Err(rest));
    out
}

/// The `{name}` placeholders of a template word.
fn placeholders(word: &str) -> Result<Vec<String>, String> {
    Ok(split_template(word)
        .into_iter()
        .filter_map(|p| p.ok().map(str::to_string))
        .collect())
}

/// Reaps process `pid` if it has ended: how, and the CPU time it used (with the children it
/// waited for), which `Child::try_wait` does not tell.
fn reap(pid: u32) -> std::io::Result<Option<(std::process::ExitStatus, Duration)>> {
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits, without blocking, for the child this kernel started and still owns.
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, libc::WNOHANG, &mut usage) };
    match r {
        0 => Ok(None),
        r if r < 0 => Err(std::io::Error::last_os_error()),
        _ => {
            let time = |t: libc::timeval| {
                Duration::from_secs(t.tv_sec.max(0) as u64)
                    + Duration::from_micros(t.tv_usec.max(0) as u64)
            };
            let cpu = time(usage.ru_utime) + time(usage.ru_stime);
            Ok(Some((std::process::ExitStatus::from_raw(status), cpu)))
        }
    }
}

impl Kernel for CommandKernel {
    fn desc(&self) -> &ServiceDesc {
        &self.desc
    }

    fn run(&self, inputs: &[Value], ctx: &KernelCtx) -> Result<Vec<Value>, KernelError> {
        let dir = tempfile::Builder::new()
            .prefix("gridwise-call-")
            .tempdir()
            .map_err(|e| {
                KernelError::Application(format!("cannot make a scratch directory: {e}"))
            })?;
        // The directory goes when `dir` drops, whatever happened.
        self.run_in(dir.path(), inputs, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::{ArgDesc, ArgMode};

    fn desc() -> ServiceDesc {
        ServiceDesc {
            name: "scale".into(),
            doc: String::new(),
            args: vec![
                ArgDesc::new("n", ArgMode::In, "int"),
                ArgDesc::new("x", ArgMode::In, "vector<f64>[n]"),
                ArgDesc::new("y", ArgMode::Out, "vector<f64>[n]"),
            ],
            size_params: vec!["n".into()],
            complexity: None,
            duration: None,
            memory: None,
        }
    }

    fn spec(program: &str, args: &[&str], format: Format) -> CommandSpec {
        CommandSpec {
            service: "scale".into(),
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            format,
            stdin: None,
            stdout: None,
            time_limit_s: Some(20.0),
        }
    }

    fn inputs() -> Vec<Value> {
        vec![Value::Int(3), Value::vector_f64(&[1.0, 2.0, 3.5])]
    }

    #[test]
    fn a_shell_command_round_trips_text() {
        // awk doubles each number of the text file.
        let k = CommandKernel::new(
            desc(),
            spec(
                "sh",
                &[
                    "-c",
                    "awk '{for(i=1;i<=NF;i++) printf \"%s \", 2*$i}' {x} > {y}",
                ],
                Format::Text,
            ),
        )
        .unwrap();
        let out = k.run(&inputs(), &KernelCtx::new()).unwrap();
        assert_eq!(out, vec![Value::vector_f64(&[2.0, 4.0, 7.0])]);
    }

    #[test]
    fn raw_files_and_stdout() {
        let mut s = spec("cat", &[], Format::Raw);
        s.stdin = Some("x".into());
        s.stdout = Some("y".into());
        let k = CommandKernel::new(desc(), s).unwrap();
        assert_eq!(
            k.run(&inputs(), &KernelCtx::new()).unwrap(),
            vec![inputs()[1].clone()]
        );
    }

    #[test]
    fn failures_say_why_and_leave_nothing_behind() {
        let k = CommandKernel::new(
            desc(),
            spec("sh", &["-c", "echo bad input >&2; exit 3"], Format::Npy),
        )
        .unwrap();
        let e = k.run(&inputs(), &KernelCtx::new()).unwrap_err().to_string();
        assert!(e.contains("exited with status 3: bad input"), "{e}");
        let k = CommandKernel::new(desc(), spec("sh", &["-c", "true"], Format::Npy)).unwrap();
        let e = k.run(&inputs(), &KernelCtx::new()).unwrap_err().to_string();
        assert!(e.contains("wrote no output `y`"), "{e}");
        let k = CommandKernel::new(desc(), spec("sh", &["-c", "echo 1 2 > {y}"], Format::Text))
            .unwrap();
        let e = k.run(&inputs(), &KernelCtx::new()).unwrap_err().to_string();
        assert!(
            e.contains("holds 2 element(s) where the description declares 3x1"),
            "{e}"
        );
        let mut s = spec("sleep", &["30"], Format::Npy);
        s.time_limit_s = Some(0.2);
        let k = CommandKernel::new(desc(), s).unwrap();
        let t = Instant::now();
        let e = k.run(&inputs(), &KernelCtx::new()).unwrap_err().to_string();
        assert!(
            e.contains("time limit of 0.2 s") && t.elapsed() < Duration::from_secs(10),
            "{e}"
        );
        let e = CommandKernel::new(desc(), spec("x", &["{nope}"], Format::Npy)).unwrap_err();
        assert!(e.contains("`{nope}`") && e.contains("n, x, y"), "{e}");
    }

    #[test]
    fn cancel_kills_the_whole_process_group() {
        // A grandchild that would outlive a plain kill of the command; its odd duration
        // finds it again.
        let marker = format!("sleep 30.{}", std::process::id());
        let k = CommandKernel::new(
            desc(),
            spec(
                "sh",
                &["-c", &format!("sh -c '{marker}' & wait")],
                Format::Npy,
            ),
        )
        .unwrap();
        let ctx = KernelCtx::new();
        let c = ctx.cancel.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            c.cancel();
        });
        let e = k.run(&inputs(), &ctx).unwrap_err();
        canceller.join().unwrap();
        assert!(matches!(e, KernelError::Cancelled), "{e}");
        std::thread::sleep(Duration::from_millis(100));
        let left = Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "left behind: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
}
