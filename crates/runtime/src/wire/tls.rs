//! TLS on every connection (rustls), mutual: with `[tls]` configured, a daemon accepts only
//! peers whose certificate the grid's CA signed, and a peer accepts only a daemon whose
//! certificate names the host it dialled.
//!
//! A certificate is also an identity. Its common name is the holder's name and its
//! organisational unit its role (`gridwise-client`, `gridwise-server`, `gridwise-agent`, as
//! `gridwise certs issue` writes them): a client certificate cannot claim the server role, and
//! a server registers under its certificate's name or not at all. Tokens stay the simple
//! option for trusted networks; with both configured, both are checked.

use super::hello::Role;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::server::WebPkiClientVerifier;

/// Where a process finds its TLS material (PEM files).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The grid's CA certificate: the only issuer whose certificates are accepted.
    pub ca: PathBuf,
    /// This process's certificate (chain), signed by the CA.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// The role a certificate gives its holder, from its organisational unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CertRole {
    Client,
    Server,
    /// The agent: it dials servers to check them, as a server would.
    Agent,
}

impl CertRole {
    /// The organisational unit that marks the role.
    pub fn unit(self) -> &'static str {
        match self {
            CertRole::Client => "gridwise-client",
            CertRole::Server => "gridwise-server",
            CertRole::Agent => "gridwise-agent",
        }
    }

    fn from_unit(unit: &str) -> Option<Self> {
        [CertRole::Client, CertRole::Server, CertRole::Agent]
            .into_iter()
            .find(|r| r.unit() == unit)
    }

    /// Whether a hello may claim `role` with this certificate.
    pub fn allows(self, role: Role) -> bool {
        match role {
            Role::Client => self == CertRole::Client,
            Role::Server => matches!(self, CertRole::Server | CertRole::Agent),
        }
    }
}

impl fmt::Display for CertRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CertRole::Client => "client",
            CertRole::Server => "server",
            CertRole::Agent => "agent",
        })
    }
}

/// Who a verified certificate says its holder is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertIdentity {
    pub role: CertRole,
    /// The certificate's common name.
    pub name: String,
}

/// Reads the identity of a certificate (DER): its common name and role unit.
pub fn identity_of(der: &[u8]) -> Result<CertIdentity, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("unreadable certificate: {e}"))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|n| n.as_str().ok())
        .ok_or("the certificate has no common name (CN): issue it with `gridwise certs issue`")?
        .to_string();
    let role = subject
        .iter_organizational_unit()
        .filter_map(|u| u.as_str().ok())
        .find_map(CertRole::from_unit)
        .ok_or_else(|| {
            format!(
                "the certificate of `{name}` names no gridwise role (OU gridwise-client, gridwise-server or gridwise-agent): issue it with `gridwise certs issue`"
            )
        })?;
    Ok(CertIdentity { role, name })
}

/// A process's TLS settings, both ends: as the side that dials and as the side that accepts.
pub struct Tls {
    client: Arc<rustls::ClientConfig>,
    server: Arc<rustls::ServerConfig>,
    /// This process's own identity, from its certificate.
    pub identity: CertIdentity,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read the TLS {what} {}: {e}", path.display()))
}

impl Tls {
    /// Loads the files named by `[tls]`; errors name the file and what is wrong with it.
    pub fn load(files: &TlsFiles) -> Result<Arc<Tls>, String> {
        let ca = read(&files.ca, "CA certificate (ca)")?;
        let cert = read(&files.cert, "certificate (cert)")?;
        let key = read(&files.key, "key (key)")?;
        Self::from_pem(&ca, &cert, &key).map_err(|e| {
            format!(
                "[tls] ca = {}, cert = {}, key = {}: {e}",
                files.ca.display(),
                files.cert.display(),
                files.key.display()
            )
        })
    }

    /// [`load`](Self::load), for a process that must hold a `role` certificate (a daemon
    /// started with another's certificate is refused here, naming both).
    pub fn load_as(files: &TlsFiles, role: CertRole) -> Result<Arc<Tls>, String> {
        let tls = Self::load(files)?;
        if tls.identity.role != role {
            return Err(format!(
                "[tls] cert is a {} certificate (`{}`), but this process runs as the {role}: issue one with `gridwise certs issue --role {role}`",
                tls.identity.role, tls.identity.name
            ));
        }
        Ok(tls)
    }

    /// The same from PEM text.
    pub fn from_pem(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<Arc<Tls>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the CA file is not PEM certificates: {e}"))?;
        if cas.is_empty() {
            return Err("the CA file holds no certificate".into());
        }
        for c in cas {
            roots
                .add(c)
                .map_err(|e| format!("the CA certificate is not usable: {e}"))?;
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<_, _>>()
            .map_err(|e| format!("the certificate file is not PEM certificates: {e}"))?;
        let Some(leaf) = chain.first() else {
            return Err("the certificate file holds no certificate".into());
        };
        let identity = identity_of(leaf)?;
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| format!("the key file holds no PEM private key: {e}"))?;
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| format!("cannot verify peers with this CA: {e}"))?;
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("the certificate and key do not go together: {e}"))?;
        Ok(Arc::new(Tls {
            client: Arc::new(client),
            server: Arc::new(server),
            identity,
        }))
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.client.clone())
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server.clone())
    }
}

/// The name a dialled daemon's certificate must carry: the host part of `addr` (an IP address
/// or a DNS name).
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = match addr.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| format!("`{host}` is not a host name TLS can check: {e}"))
}

/// The first byte of every TLS connection (a handshake record): how a daemon tells a TLS
/// peer from a plaintext one before reading a frame.
pub(crate) const HANDSHAKE_RECORD: u8 = 0x16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_become_server_names() {
        assert!(matches!(
            server_name("127.0.0.1:9000").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("[::1]:9000").unwrap(),
            ServerName::IpAddress(_)
        ));
        assert!(matches!(
            server_name("node7.example:9000").unwrap(),
            ServerName::DnsName(_)
        ));
        assert!(server_name("bad host:1").is_err());
    }

    #[test]
    fn roles_allow_only_their_hello() {
        assert!(CertRole::Client.allows(Role::Client));
        assert!(!CertRole::Client.allows(Role::Server));
        assert!(CertRole::Server.allows(Role::Server));
        assert!(!CertRole::Server.allows(Role::Client));
        assert!(CertRole::Agent.allows(Role::Server));
    }
}
