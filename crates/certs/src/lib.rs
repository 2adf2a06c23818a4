//! `gridwise certs init|issue`: a grid CA and the certificates of its agent, servers and
//! clients, for a quick start with mutual TLS (a site with its own PKI issues certificates
//! with the same subject instead: CN = the holder's name, OU = `gridwise-<role>`).
//!
//! Files go in one directory: `ca.pem` and `ca.key`, then `<name>.pem` and `<name>.key` per
//! holder. Keys are written readable by their owner only, and nothing is overwritten.

use anyhow::{Context, bail};
use gridwise_runtime::wire::CertRole;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use time::{Duration, OffsetDateTime};

/// A certificate and its key, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The CA's files in `dir`.
pub fn ca_files(dir: &Path) -> Issued {
    Issued {
        cert: dir.join("ca.pem"),
        key: dir.join("ca.key"),
    }
}

fn write_new(path: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} already exists: nothing was overwritten (remove it, or pick another name or directory)",
                path.display()
            )
        } else {
            anyhow::anyhow!("cannot write {}: {e}", path.display())
        }
    })?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = OffsetDateTime::now_utc();
    // A little in the past: a peer whose clock is a few minutes behind still accepts it.
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(days.max(1)));
}

/// Creates a grid CA in `dir` (created if missing), valid for `days`.
pub fn init(dir: &Path, grid: &str, days: u32) -> anyhow::Result<Issued> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = ca_files(dir);
    if files.cert.exists() || files.key.exists() {
        bail!(
            "{} already holds a CA (ca.pem, ca.key): nothing was overwritten; issue certificates with `gridwise certs issue`",
            dir.display()
        );
    }
    let key = KeyPair::generate()?;
    // Each CA's name is its own: two grids' CAs under one name make a peer of the other grid
    // fail on the signature ("BadSignature") instead of the issuer ("UnknownIssuer").
    let id: String = key.public_key_raw()[1..9]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{grid} grid CA {id}"));
    dn.push(DnType::OrganizationName, "gridwise");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, days);
    let cert = params.self_signed(&key)?;
    write_new(&files.key, &key.serialize_pem(), true)?;
    write_new(&files.cert, &cert.pem(), false)?;
    Ok(files)
}

/// Issues a certificate for `name` in `role`, signed by the CA in `dir`. `hosts` (names or IP
/// addresses) are where an agent or server is dialled: a peer checks the one it dialled.
pub fn issue(
    dir: &Path,
    role: CertRole,
    name: &str,
    hosts: &[String],
    days: u32,
) -> anyhow::Result<Issued> {
    if name.is_empty()
        || name == "ca"
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!(
            "`{name}` cannot name a certificate: use letters, digits, '-', '_' or '.', and not `ca`"
        );
    }
    if role != CertRole::Client && hosts.is_empty() {
        bail!(
            "a {role} certificate needs --host for every name or address it is dialled at (e.g. --host 127.0.0.1 --host node7.example)"
        );
    }
    let ca = ca_files(dir);
    let ca_key = std::fs::read_to_string(&ca.key).with_context(|| {
        format!(
            "reading the CA key {} (create a CA with `gridwise certs init {}`)",
            ca.key.display(),
            dir.display()
        )
    })?;
    let ca_pem = std::fs::read_to_string(&ca.cert)
        .with_context(|| format!("reading the CA certificate {}", ca.cert.display()))?;
    let ca_key = KeyPair::from_pem(&ca_key).context("the CA key is not a PEM private key")?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .context("the CA certificate is not a PEM certificate")?;

    let mut params = CertificateParams::new(hosts.to_vec())
        .with_context(|| format!("the hosts {hosts:?} are not all names or IP addresses"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationalUnitName, role.unit());
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Servers and the agent both accept connections and dial others.
    params.extended_key_usages = match role {
        CertRole::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        CertRole::Server | CertRole::Agent => vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
    };
    validity(&mut params, days);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let out = Issued {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
    };
    write_new(&out.key, &key.serialize_pem(), true)?;
    write_new(&out.cert, &cert.pem(), false)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_runtime::wire::{Tls, TlsFiles};

    #[test]
    fn issued_certificates_load_with_their_identity_and_nothing_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let ca = init(dir.path(), "test", 30).unwrap();
        assert!(
            init(dir.path(), "test", 30)
                .unwrap_err()
                .to_string()
                .contains("already")
        );
        let s = issue(
            dir.path(),
            CertRole::Server,
            "s1",
            &["127.0.0.1".into()],
            30,
        )
        .unwrap();
        let tls = Tls::load(&TlsFiles {
            ca: ca.cert.clone(),
            cert: s.cert.clone(),
            key: s.key.clone(),
        })
        .unwrap();
        assert_eq!(tls.identity.name, "s1");
        assert_eq!(tls.identity.role, CertRole::Server);
        // A daemon started with another role's certificate is told which one to issue.
        let as_agent = TlsFiles {
            ca: ca.cert.clone(),
            cert: s.cert.clone(),
            key: s.key.clone(),
        };
        let err = Tls::load_as(&as_agent, CertRole::Agent).unwrap_err();
        assert!(err.contains("--role agent"), "{err}");
        assert!(Tls::load_as(&as_agent, CertRole::Server).is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&s.key).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "a key readable by others: {mode:o}");
        }
        let err = issue(
            dir.path(),
            CertRole::Server,
            "s1",
            &["127.0.0.1".into()],
            30,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("already exists"), "{err}");
        let err = issue(dir.path(), CertRole::Server, "s2", &[], 30)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--host"), "{err}");
        let c = issue(dir.path(), CertRole::Client, "alice", &[], 30).unwrap();
        let tls = Tls::load(&TlsFiles {
            ca: ca.cert,
            cert: c.cert,
            key: c.key,
        })
        .unwrap();
        assert_eq!(tls.identity.role, CertRole::Client);
        // A key that does not belong to the certificate is named as such.
        let err = Tls::load(&TlsFiles {
            ca: dir.path().join("ca.pem"),
            cert: dir.path().join("s1.pem"),
            key: dir.path().join("alice.key"),
        })
        .unwrap_err();
        assert!(err.contains("do not go together"), "{err}");
    }
}
