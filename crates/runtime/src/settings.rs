//! Loading a daemon's or client's settings: defaults, then a TOML file, then `GRIDWISE_<ROLE>_*`
//! environment variables, then command-line flags — each layer overriding the one before.

use serde::de::DeserializeOwned;
use std::path::Path;

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

/// Loads `T` from an optional TOML file, environment variables with `env_prefix` (e.g.
/// `GRIDWISE_SERVER` makes `GRIDWISE_SERVER_SLOTS=4` set `slots`), and flag overrides
/// (`(key, value)` pairs; values are TOML literals parsed by type, e.g. `4`, `"x"`).
pub fn load<T: DeserializeOwned>(
    file: Option<&Path>,
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
            b = b.add_source(File::from(p).format(FileFormat::Toml).required(true));
            p.display().to_string()
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
        let s: S = load(Some(&f), "GRIDWISE_TEST_NOPE", &[]).unwrap();
        assert_eq!(s.slots, 3);
        assert_eq!(s.listen, "127.0.0.1:7000");
        let s: S = load(Some(&f), "GRIDWISE_TEST_NOPE", &[("slots", "5".into())]).unwrap();
        assert_eq!(s.slots, 5);
        std::fs::write(&f, "slots = \"many\"\n").unwrap();
        let e = load::<S>(Some(&f), "GRIDWISE_TEST_NOPE", &[]).unwrap_err();
        assert!(e.to_string().contains("a.toml"), "{e}");
        let e = load::<S>(Some(&dir.join("missing.toml")), "X", &[]).unwrap_err();
        assert!(matches!(e, SettingsError::NotFound(_)));
        std::fs::remove_dir_all(&dir).ok();
    }
}
