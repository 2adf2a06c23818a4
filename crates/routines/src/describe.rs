//! Service description files: the IDL of a server owner's routines in TOML, one or more
//! services per file, each with how to call it when a library provides it.
//!
//! ```toml
//! [[service]]
//! name = "dgesv"
//! doc = "Solves A X = B for X (LAPACK dgesv)."
//! args = [
//!     { name = "n", mode = "in", type = "int" },
//!     { name = "nrhs", mode = "in", type = "int" },
//!     { name = "A", mode = "in", type = "matrix<f64>[n,n]" },
//!     { name = "B", mode = "inout", type = "matrix<f64>[n,nrhs]" },
//! ]
//! size_params = ["n", "nrhs"]
//! complexity = "2/3*n^3 + 2*n^2*nrhs"
//! memory = "8*n*n + 8*n*nrhs + 4*n"
//! library = { symbol = "dgesv_", convention = "fortran", call = ["n", "nrhs", "A", "n", "work:i32[n]", "B", "n", "info"] }
//! ```
//!
//! Types are the IDL's (`int`, `double`, `string`, `bytes`, `vector<T>[n]`, `matrix<T>[r,c]`);
//! the description is checked as the server would check one it publishes. Every error names
//! the file, the line and the service or argument.

use crate::binding::LibraryCall;
use gridwise_proto::{ArgDesc, ArgMode, ArgType, ServiceDesc};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A service as a description file gives it: its description and, if it says how, how a
/// library routine is called for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Described {
    pub desc: ServiceDesc,
    pub library: Option<LibraryCall>,
    /// The file it came from, for messages.
    pub file: PathBuf,
}

/// A description file that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct DescribeError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[serde(default)]
    service: Vec<Spanned<ServiceText>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceText {
    name: String,
    #[serde(default)]
    doc: String,
    args: Vec<Spanned<ArgText>>,
    #[serde(default)]
    size_params: Vec<String>,
    complexity: Option<String>,
    duration: Option<String>,
    memory: Option<String>,
    library: Option<Spanned<LibraryCall>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgText {
    name: String,
    mode: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    doc: String,
}

/// The line (from 1) of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// Reads the services of a description file.
pub fn read_file(path: &Path) -> Result<Vec<Described>, DescribeError> {
    let text = std::fs::read_to_string(path).map_err(|e| DescribeError {
        file: path.display().to_string(),
        line: 0,
        message: format!("cannot read the service description file: {e}"),
    })?;
    parse(&text, path)
}

/// Parses the services of a description file's `text` (read from `path`, named in errors).
pub fn parse(text: &str, path: &Path) -> Result<Vec<Described>, DescribeError> {
    let file = path.display().to_string();
    let err = |at: usize, message: String| DescribeError {
        file: file.clone(),
        line: line_of(text, at),
        message,
    };
    let parsed: FileText = toml::from_str(text).map_err(|e| {
        let at = e.span().map_or(0, |s| s.start);
        err(at, e.message().trim().to_string())
    })?;
    if parsed.service.is_empty() {
        return Err(err(0, "no [[service]] in the file".into()));
    }
    let mut out: Vec<Described> = Vec::new();
    for s in parsed.service {
        let at = s.span().start;
        let s = s.into_inner();
        let name = s.name.clone();
        let mut args = Vec::new();
        for a in s.args {
            let at = a.span().start;
            let a = a.into_inner();
            let mode = match a.mode.as_str() {
                "in" => ArgMode::In,
                "out" => ArgMode::Out,
                "inout" => ArgMode::InOut,
                m => {
                    return Err(err(
                        at,
                        format!(
                            "service `{name}` argument `{}`: mode `{m}` is not in, out or inout",
                            a.name
                        ),
                    ));
                }
            };
            let ty: ArgType = a.ty.parse().map_err(|e: String| {
                err(at, format!("service `{name}` argument `{}`: {e}", a.name))
            })?;
            args.push(ArgDesc {
                name: a.name,
                mode,
                ty,
                doc: a.doc,
            });
        }
        let desc = ServiceDesc {
            name: s.name,
            doc: s.doc,
            args,
            size_params: s.size_params,
            complexity: s.complexity,
            duration: s.duration,
            memory: s.memory,
        };
        desc.validate().map_err(|e| err(at, e.to_string()))?;
        if out.iter().any(|d| d.desc.name == desc.name) {
            return Err(err(at, format!("service `{name}` is described twice")));
        }
        let library = match s.library {
            Some(l) => {
                let at = l.span().start;
                let l = l.into_inner();
                l.check(&desc)
                    .map_err(|e| err(at, format!("service `{name}`, its library call: {e}")))?;
                Some(l)
            }
            None => None,
        };
        out.push(Described {
            desc,
            library,
            file: path.to_path_buf(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Vec<Described>, DescribeError> {
        parse(text, Path::new("lapack.toml"))
    }

    const DGESV: &str = r#"
[[service]]
name = "dgesv"
doc = "Solves A X = B."
args = [
    { name = "n", mode = "in", type = "int" },
    { name = "nrhs", mode = "in", type = "int" },
    { name = "A", mode = "in", type = "matrix<f64>[n,n]" },
    { name = "B", mode = "inout", type = "matrix<f64>[n,nrhs]" },
]
size_params = ["n", "nrhs"]
complexity = "2/3*n^3 + 2*n^2*nrhs"
memory = "8*n*n + 8*n*nrhs"
library = { symbol = "dgesv_", convention = "fortran", call = ["n", "nrhs", "A", "n", "work:i32[n]", "B", "n", "info"] }

[[service]]
name = "twice"
args = [
    { name = "x", mode = "in", type = "double" },
    { name = "y", mode = "out", type = "double" },
]
"#;

    #[test]
    fn services_are_read_with_their_library_calls() {
        let s = parse_str(DGESV).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].desc.name, "dgesv");
        assert_eq!(s[0].desc.args[3].mode, ArgMode::InOut);
        assert_eq!(s[0].desc.memory.as_deref(), Some("8*n*n + 8*n*nrhs"));
        let l = s[0].library.as_ref().unwrap();
        assert_eq!(l.symbol, "dgesv_");
        assert!(s[1].library.is_none());
    }

    #[test]
    fn mistakes_name_the_file_the_line_and_the_argument() {
        let bad_type = DGESV.replace("matrix<f64>[n,nrhs]", "matrix<f65>[n,nrhs]");
        let e = parse_str(&bad_type).unwrap_err().to_string();
        assert!(
            e.starts_with("lapack.toml:9: service `dgesv` argument `B`"),
            "{e}"
        );
        assert!(e.contains("f65"), "{e}");

        let bad_mode = DGESV.replace(r#"mode = "inout""#, r#"mode = "both""#);
        let e = parse_str(&bad_mode).unwrap_err().to_string();
        assert!(
            e.starts_with("lapack.toml:9:") && e.contains("mode `both`"),
            "{e}"
        );

        let bad_dim = DGESV.replace("matrix<f64>[n,n]", "matrix<f64>[n,m]");
        let e = parse_str(&bad_dim).unwrap_err().to_string();
        assert!(e.starts_with("lapack.toml:2:") && e.contains("`m`"), "{e}");

        let bad_call = DGESV.replace(r#""work:i32[n]""#, r#""work:i32[q]""#);
        let e = parse_str(&bad_call).unwrap_err().to_string();
        assert!(e.starts_with("lapack.toml:14:") && e.contains("`q`"), "{e}");

        let unknown = DGESV.replace("doc = \"Solves A X = B.\"", "docs = 1");
        let e = parse_str(&unknown).unwrap_err().to_string();
        assert!(e.starts_with("lapack.toml:4:") && e.contains("docs"), "{e}");

        let twice = format!("{DGESV}\n[[service]]\nname = \"twice\"\nargs = []\n");
        let e = parse_str(&twice).unwrap_err().to_string();
        assert!(e.contains("`twice` is described twice"), "{e}");

        let e = parse_str("x = 1").unwrap_err().to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = read_file(Path::new("/nonexistent/s.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/s.toml") && e.contains("cannot read"),
            "{e}"
        );
    }
}
