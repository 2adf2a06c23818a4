//! Loading a daemon's or client's settings: defaults, then a TOML file, then `GRIDWISE_<ROLE>_*`
//! environment variables, then command-line flags — each layer overriding the one before.

use serde::de::DeserializeOwned;
use std::path::Path;

/// A setting that names a file or folder, by its dotted key (`*` for every element of an
/// array: `library.*.path`), and whether a bare name (no `/`) is a name something searches
/// for (a library the dynamic loader finds, a program on `PATH`) rather than a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathKey {
    pub key: &'static str,
    pub bare_is_a_name: bool,
}

impl PathKey {
    pub const fn path(key: &'static str) -> Self {
        PathKey {
            key,
            bare_is_a_name: false,
        }
    }

    pub const fn path_or_name(key: &'static str) -> Self {
        PathKey {
            key,
            bare_is_a_name: true,
        }
    }
}

/// The `[tls]` files, which every process's settings may have.
pub const TLS_PATHS: [PathKey; 3] = [
    PathKey::path("tls.ca"),
    PathKey::path("tls.cert"),
    PathKey::path("tls.key"),
];

/// `text`, a config file's TOML, with each relative path at `keys` joined to `dir`, the file's
/// folder: a file means the same wherever the process that reads it was started (systemd
/// starts daemons in `/`; `gridwise certs issue` once printed `certs/ca.pem`, which only
/// worked from the folder it was run in). Paths given by flags or the environment are not
/// touched: those are relative to where the command runs, as on any command line.
pub fn anchor_paths(text: &str, dir: &Path, keys: &[PathKey]) -> Result<String, String> {
    let mut doc: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    for k in keys {
        let parts: Vec<&str> = k.key.split('.').collect();
        anchor_at(&mut doc, &parts, dir, k.bare_is_a_name);
    }
    toml::to_string(&doc).map_err(|e| e.to_string())
}

/// [`anchor_paths`] for the text of the config file at `file`, whose folder the paths are
/// taken from.
pub fn anchor_file_paths(text: &str, file: &Path, keys: &[PathKey]) -> Result<String, String> {
    let file = std::path::absolute(file).map_err(|e| e.to_string())?;
    let dir = file.parent().unwrap_or(Path::new("/"));
    anchor_paths(text, dir, keys)
}

fn anchor_at(table: &mut toml::Table, parts: &[&str], dir: &Path, bare_is_a_name: bool) {
    let Some((first, rest)) = parts.split_first() else {
        return;
    };
    let Some(v) = table.get_mut(*first) else {
        return;
    };
    anchor_value(v, rest, dir, bare_is_a_name);
}

fn anchor_value(v: &mut toml::Value, rest: &[&str], dir: &Path, bare_is_a_name: bool) {
    match (v, rest.split_first()) {
        (toml::Value::Array(items), Some((&"*", more))) => {
            for item in items {
                anchor_value(item, more, dir, bare_is_a_name);
            }
        }
        // `services = ["a.toml", …]`: a list of paths at the key itself.
        (toml::Value::Array(items), None) => {
            for item in items {
                anchor_value(item, &[], dir, bare_is_a_name);
            }
        }
        (toml::Value::Table(t), Some(_)) => anchor_at(t, rest, dir, bare_is_a_name),
        (toml::Value::String(s), None) => {
            let p = Path::new(s.as_str());
            let named = bare_is_a_name && !s.contains('/');
            if p.is_relative() && !named && !s.is_empty() {
                *s = dir.join(p).display().to_string();
            }
        }
        _ => {}
    }
}

/// Settings that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The named file does not exist.
    #[error("config file {0} not found")]
    NotFound(String),
    /// The file or an override is malformed.
    #[error("config {source_name}: {reason}")]
    Invalid {
        /// Which file, `flag --<key>`, or "environment/flags" when no file was given.
        source_name: String,
        /// The parser's words.
        reason: String,
    },
}

/// Loads `T` from an optional TOML file (the relative paths at `paths` in it taken from its
/// folder: [`anchor_file_paths`]), environment variables with `env_prefix` (e.g.
/// `GRIDWISE_SERVER` makes `GRIDWISE_SERVER_SLOTS=4` set `slots`), and flag overrides
/// (`(key, value)` pairs; values are TOML literals parsed by type, e.g. `4`, `"x"`).
pub fn load<T: DeserializeOwned>(
    file: Option<&Path>,
    paths: &[PathKey],
    env_prefix: &str,
    overrides: &[(&str, String)],
) -> Result<T, SettingsError> {
    use config::{Config, Environment, File, FileFormat};
    let mut b = Config::builder();
    let source_name = match file {
        Some(p) => {
            if !p.exists() {
                return Err(SettingsError::NotFound(p.display().to_string()));
            }
            let shown = p.display().to_string();
            let invalid = |reason: String| SettingsError::Invalid {
                source_name: shown.clone(),
                reason,
            };
            let text = std::fs::read_to_string(p).map_err(|e| invalid(e.to_string()))?;
            let text = anchor_file_paths(&text, p, paths).map_err(invalid)?;
            b = b.add_source(File::from_str(&text, FileFormat::Toml));
            shown
        }
        None => "environment/flags".to_string(),
    };
    b = b.add_source(Environment::with_prefix(env_prefix).try_parsing(true));
    for (k, v) in overrides {
        b = b
            .set_override(*k, v.clone())
            .map_err(|e| SettingsError::Invalid {
                source_name: format!("flag --{k}"),
                reason: e.to_string(),
            })?;
    }
    let invalid = |e: config::ConfigError| SettingsError::Invalid {
        source_name: source_name.clone(),
        reason: e.to_string(),
    };
    b.build()
        .map_err(invalid)?
        .try_deserialize()
        .map_err(invalid)
}

/// The `--tls-*` flags both daemons take: the `[tls]` table from the command line.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsFlags {
    /// The grid CA for mutual TLS ([tls] ca; with --tls-cert and --tls-key).
    #[arg(long)]
    pub tls_ca: Option<std::path::PathBuf>,
    /// This daemon's certificate ([tls] cert), from `gridwise certs issue`.
    #[arg(long)]
    pub tls_cert: Option<std::path::PathBuf>,
    /// Its key ([tls] key).
    #[arg(long)]
    pub tls_key: Option<std::path::PathBuf>,
}

impl TlsFlags {
    /// The settings these flags override, for [`flag_overrides`].
    pub fn overrides(&self) -> [(&'static str, Option<String>); 3] {
        let shown = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
        [
            ("tls.ca", shown(&self.tls_ca)),
            ("tls.cert", shown(&self.tls_cert)),
            ("tls.key", shown(&self.tls_key)),
        ]
    }
}

/// The flags a user actually gave, as `(key, value)` overrides for [`load`].
pub fn flag_overrides<'a>(flags: &[(&'a str, Option<String>)]) -> Vec<(&'a str, String)> {
    flags
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (*k, v.clone())))
        .collect()
}

/// Logs to stderr at `info` unless `RUST_LOG` says otherwise (stdout is kept for the one
/// `listening <addr>` line daemons print).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tarpc=warn"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// Prints a daemon's one stdout line, `listening <addr>`: whoever started the daemon reads it
/// to learn an ephemeral port.
pub fn announce(addr: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // Nobody may be reading stdout (a daemon under systemd): ignore a closed pipe.
    let _ = writeln!(out, "listening {addr}");
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug, PartialEq)]
    #[serde(default)]
    struct S {
        listen: String,
        slots: u32,
    }

    impl Default for S {
        fn default() -> Self {
            S {
                listen: "127.0.0.1:7000".into(),
                slots: 1,
            }
        }
    }

    #[test]
    fn layers_override_in_order() {
        let dir = std::env::temp_dir().join(format!("gw-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.toml");
        std::fs::write(&f, "slots = 3\n").unwrap();
        let s: S = load(Some(&f), &[], "GRIDWISE_TEST_NOPE", &[]).unwrap();
        assert_eq!(s.slots, 3);
        assert_eq!(s.listen, "127.0.0.1:7000");
        let s: S = load(
            Some(&f),
            &[],
            "GRIDWISE_TEST_NOPE",
            &[("slots", "5".into())],
        )
        .unwrap();
        assert_eq!(s.slots, 5);
        std::fs::write(&f, "slots = \"many\"\n").unwrap();
        let e = load::<S>(Some(&f), &[], "GRIDWISE_TEST_NOPE", &[]).unwrap_err();
        assert!(e.to_string().contains("a.toml"), "{e}");
        let e = load::<S>(Some(&dir.join("missing.toml")), &[], "X", &[]).unwrap_err();
        assert!(matches!(e, SettingsError::NotFound(_)));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn relative_paths_in_a_file_are_taken_from_its_folder_and_names_are_left_alone() {
        let keys = [
            TLS_PATHS[0],
            PathKey::path("services"),
            PathKey::path_or_name("library.*.path"),
            PathKey::path("python.*.path"),
        ];
        let text = r#"
services = ["svc/a.toml", "/abs/b.toml"]
[tls]
ca = "certs/ca.pem"
[[library]]
service = "x"
path = "liblapack.so.3"
[[library]]
service = "y"
path = "./build/libmine.so"
[[python]]
service = "z"
function = "m:f"
path = ["py", "/opt/py"]
"#;
        let out: toml::Table = anchor_paths(text, Path::new("/etc/gw"), &keys)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(out["tls"]["ca"].as_str(), Some("/etc/gw/certs/ca.pem"));
        let svc: Vec<&str> = out["services"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(svc, ["/etc/gw/svc/a.toml", "/abs/b.toml"]);
        let lib = out["library"].as_array().unwrap();
        assert_eq!(lib[0]["path"].as_str(), Some("liblapack.so.3"));
        assert_eq!(lib[1]["path"].as_str(), Some("/etc/gw/./build/libmine.so"));
        let py = out["python"][0]["path"].as_array().unwrap();
        assert_eq!(py[0].as_str(), Some("/etc/gw/py"));
        assert_eq!(py[1].as_str(), Some("/opt/py"));
        // Through `load`: from the file's folder, whatever the current one; a flag's
        // path stays as given.
        #[derive(serde::Deserialize)]
        struct T {
            tls: std::collections::HashMap<String, String>,
        }
        let dir = std::env::temp_dir().join(format!("gw-anchor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(&f, "[tls]\nca = \"certs/ca.pem\"\n").unwrap();
        let t: T = load(Some(&f), &TLS_PATHS, "GRIDWISE_TEST_NOPE", &[]).unwrap();
        assert_eq!(t.tls["ca"], dir.join("certs/ca.pem").display().to_string());
        let flags = [("tls.ca", "mine/ca.pem".to_string())];
        let t: T = load(Some(&f), &TLS_PATHS, "GRIDWISE_TEST_NOPE", &flags).unwrap();
        assert_eq!(t.tls["ca"], "mine/ca.pem");
        std::fs::remove_dir_all(&dir).ok();
    }
}
