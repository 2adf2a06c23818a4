//! A server's own routines from its config: the description files it names and the
//! `[[library]]`, `[[python]]` and `[[command]]` entries that say where each service comes
//! from. Every mistake is refused at start-up with the file, entry and service named.
//!
//! ```toml
//! services = ["examples/services/lapack.toml"]
//! [[library]]
//! service = "dgesv"
//! path = "liblapack.so.3"
//! ```

use crate::command::{CommandKernel, CommandSpec};
use crate::describe::{Described, read_file};
use crate::worker::{Launch, LibrarySpec, Limits, WorkerKernel};
use gridwise_kernels::Kernel;
use gridwise_proto::NotOffered;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A `[[library]]` entry: the shared object that provides a described service.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibraryEntry {
    pub service: String,
    /// A path, or a name the dynamic loader finds (`liblapack.so.3`).
    pub path: String,
    /// Overrides the description's symbol.
    pub symbol: Option<String>,
    pub memory_limit_bytes: Option<u64>,
    pub time_limit_s: Option<f64>,
}

/// A `[[python]]` entry: a Python function that provides a described service.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonEntry {
    pub service: String,
    /// `module:function`; the function takes the service's inputs in order (arrays as numpy
    /// arrays) and returns its outputs (a tuple when there are several).
    pub function: String,
    /// The interpreter (default `python3`); numpy must be importable there.
    pub python: Option<String>,
    /// Folders put first on `sys.path`.
    #[serde(default)]
    pub path: Vec<PathBuf>,
    pub memory_limit_bytes: Option<u64>,
    pub time_limit_s: Option<f64>,
}

/// What a server config says about its own routines.
#[derive(Clone, Debug, Default)]
pub struct Routines<'a> {
    pub services: &'a [PathBuf],
    pub library: &'a [LibraryEntry],
    pub python: &'a [PythonEntry],
    pub command: &'a [CommandSpec],
    /// The executable started as a library worker (the server's own, normally).
    pub worker_program: Option<&'a Path>,
    /// The threads each library or Python routine's numerical library may start.
    pub threads: Option<u32>,
}

fn limits(
    memory: Option<u64>,
    time: Option<f64>,
    threads: Option<u32>,
    what: &str,
) -> Result<Limits, String> {
    if let Some(t) = time
        && !(t.is_finite() && t > 0.0)
    {
        return Err(format!(
            "{what}: time_limit_s is {t}: a positive number of seconds"
        ));
    }
    if memory == Some(0) {
        return Err(format!("{what}: memory_limit_bytes is 0"));
    }
    Ok(Limits {
        memory_bytes: memory,
        time_s: time,
        threads,
    })
}

/// What a server's routines come to: a kernel per routine with a source entry, and the
/// routines its description files describe that no entry provides.
pub struct Offered {
    pub kernels: Vec<Arc<dyn Kernel>>,
    /// Not an error (a file may describe a library's every routine, of which a server offers
    /// some), but said: a newcomer who described a routine and forgot its entry otherwise
    /// hears only "no server offers" from a client.
    pub not_offered: Vec<NotOffered>,
}

/// The kernels of the configured routines, by service.
pub fn kernels(r: &Routines<'_>) -> Result<Offered, String> {
    let mut described: Vec<Described> = Vec::new();
    for f in r.services {
        for d in read_file(f).map_err(|e| e.to_string())? {
            if let Some(other) = described.iter().find(|x| x.desc.name == d.desc.name) {
                return Err(format!(
                    "service `{}` is described in both {} and {}",
                    d.desc.name,
                    other.file.display(),
                    d.file.display()
                ));
            }
            described.push(d);
        }
    }
    let find = |service: &str, entry: &str| -> Result<&Described, String> {
        described.iter().find(|d| d.desc.name == service).ok_or_else(|| {
            format!(
                "[[{entry}]] service `{service}` is not in the description files ({}): add it to one listed in `services`",
                if r.services.is_empty() {
                    "none are listed".to_string()
                } else {
                    r.services.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                }
            )
        })
    };
    let mut out: Vec<Arc<dyn Kernel>> = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    let mut claim = |s: &str| -> Result<(), String> {
        if taken.iter().any(|t| t == s) {
            return Err(format!(
                "service `{s}` has more than one [[library]], [[python]] or [[command]] entry"
            ));
        }
        taken.push(s.to_string());
        Ok(())
    };
    for e in r.library {
        claim(&e.service)?;
        let d = find(&e.service, "library")?;
        let mut call = d.library.clone().ok_or_else(|| {
            format!(
                "[[library]] service `{}`: its description in {} has no `library = {{ symbol, convention, call }}` saying how to call it",
                e.service,
                d.file.display()
            )
        })?;
        if let Some(s) = &e.symbol {
            call.symbol = s.clone();
        }
        let program = match r.worker_program {
            Some(p) => p.to_path_buf(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find this program to start library workers: {e}"))?,
        };
        let what = format!("[[library]] service `{}`", e.service);
        out.push(Arc::new(WorkerKernel::new(
            d.desc.clone(),
            Launch::Library {
                program,
                spec: Box::new(LibrarySpec {
                    desc: d.desc.clone(),
                    path: e.path.clone(),
                    call,
                }),
            },
            limits(e.memory_limit_bytes, e.time_limit_s, r.threads, &what)?,
        )));
    }
    for e in r.python {
        claim(&e.service)?;
        let d = find(&e.service, "python")?;
        if !e.function.contains(':') {
            return Err(format!(
                "[[python]] service `{}`: function `{}` is not `module:function`",
                e.service, e.function
            ));
        }
        let what = format!("[[python]] service `{}`", e.service);
        out.push(Arc::new(WorkerKernel::new(
            d.desc.clone(),
            Launch::Python {
                python: e.python.clone().unwrap_or_else(|| "python3".into()),
                function: e.function.clone(),
                path: e.path.clone(),
            },
            limits(e.memory_limit_bytes, e.time_limit_s, r.threads, &what)?,
        )));
    }
    for e in r.command {
        claim(&e.service)?;
        let d = find(&e.service, "command")?;
        let k = CommandKernel::new(d.desc.clone(), e.clone())
            .map_err(|err| format!("[[command]] service `{}`: {err}", e.service))?;
        out.push(Arc::new(k));
    }
    let not_offered = described
        .iter()
        .filter(|d| !taken.contains(&d.desc.name))
        .map(|d| NotOffered {
            service: d.desc.name.clone(),
            file: d.file.display().to_string(),
            why: format!(
                "no [[library]], [[python]] or [[command]] entry of the server's config names it; add one saying where `{}` comes from, or ignore this if the server is not meant to offer it",
                d.desc.name
            ),
        })
        .collect();
    Ok(Offered {
        kernels: out,
        not_offered,
    })
}
