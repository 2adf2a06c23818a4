//! `gridwise certs init|issue`: the files `gridwise-certs` writes, and the `[tls]` lines that
//! use them.

use gridwise_certs::Issued;
use gridwise_runtime::wire::CertRole;
use std::path::Path;

/// `gridwise certs init DIR`.
pub fn init(dir: &Path, grid: &str, days: u32) -> anyhow::Result<()> {
    let ca = gridwise_certs::init(dir, grid, days)?;
    println!(
        "grid CA written: {} (key {})",
        ca.cert.display(),
        ca.key.display()
    );
    println!(
        "keep ca.key where certificates are issued; daemons and clients need only ca.pem. Next:\n  gridwise certs issue {} --role agent --name agent --host 127.0.0.1",
        dir.display()
    );
    Ok(())
}

/// `gridwise certs issue DIR --role R --name N [--host H ...]`.
pub fn issue(
    dir: &Path,
    role: &str,
    name: &str,
    hosts: &[String],
    days: u32,
) -> anyhow::Result<()> {
    let role = match role {
        "client" => CertRole::Client,
        "server" => CertRole::Server,
        "agent" => CertRole::Agent,
        other => anyhow::bail!("--role {other}: use client, server or agent"),
    };
    let Issued { cert, key } = gridwise_certs::issue(dir, role, name, hosts, days)?;
    let ca = gridwise_certs::ca_files(dir).cert;
    // Absolute, so the lines work in a config file anywhere (a relative path in a config file
    // is taken from the file's folder, not from here).
    let (ca, cert, key) = (
        std::path::absolute(&ca)?,
        std::path::absolute(&cert)?,
        std::path::absolute(&key)?,
    );
    println!(
        "{role} certificate for `{name}` written: {}",
        cert.display()
    );
    println!(
        "in its config file (agent.toml, server.toml or the client's):\n\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"",
        ca.display(),
        cert.display(),
        key.display()
    );
    Ok(())
}
