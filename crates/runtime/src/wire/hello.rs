//! The hello every connection opens with: protocol version, the role the peer claims and the
//! credential of that role, before any RPC is read.
//!
//! Roles separate what a credential allows: a **client** (may rank, call, fetch and free its own
//! data) presents the grid's client token; a **server** (may register with the agent and pull
//! values from its peers) presents the server token. A client token therefore cannot make anyone
//! a server. A client also names a *principal*, a random key of its own that the daemons record
//! as the owner of its tickets and kept values. Over mutual TLS the certificate decides: its
//! role unit must allow the role claimed, and its name becomes the principal (a server's is
//! the name it must register under). The handlers only ever see a [`Peer`].

use super::tls::CertIdentity;
use gridwise_proto::error::ErrorCode;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;

pub(crate) const MAGIC: [u8; 8] = *b"GRIDWISE";
/// The hello is read with this frame limit, so a stranger cannot make a daemon reserve more.
pub(crate) const HELLO_MAX_FRAME: usize = 64 * 1024;
/// Longest `who` or principal kept from a hello (they end up in logs and tables).
const NAME_MAX: usize = 256;

/// What a peer may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Ranks and runs calls, owns the tickets and kept values it made.
    Client,
    /// A compute server (or the agent checking one): registers, reports, pulls peers' values.
    Server,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Client => "client",
            Role::Server => "server",
        })
    }
}

/// What a connection carries after its hello.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Channel {
    /// tarpc requests and replies, many at once.
    #[default]
    Rpc,
    /// One large value at a time as raw bytes ([`super::bulk`]): servers only.
    Bulk,
}

/// Who is on the other end of an accepted connection, as its hello proved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    /// The connection's far end: for a peer that dialled, an ephemeral port, not the address
    /// it listens on.
    pub addr: SocketAddr,
    /// The role its credential allows.
    pub role: Role,
    /// The name it gave (for logs).
    pub who: String,
    /// The identity that owns what it makes: a client's own key, a server's name; over TLS,
    /// its certificate's name.
    pub principal: String,
    /// The name its TLS certificate proves, when the connection is TLS.
    pub certified: Option<String>,
    /// What the connection carries.
    pub channel: Channel,
}

impl Peer {
    /// Whether the peer is a server (or the agent).
    pub fn is_server(&self) -> bool {
        self.role == Role::Server
    }

    /// A peer for tests and in-process use.
    pub fn local(role: Role, principal: &str) -> Self {
        Peer {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            role,
            who: principal.to_string(),
            principal: principal.to_string(),
            certified: None,
            channel: Channel::Rpc,
        }
    }
}

/// The fields every version's hello starts with, read first so that a peer of another
/// version gets a version message rather than a parse error.
#[derive(Serialize, Deserialize)]
pub(crate) struct HelloHead {
    pub magic: [u8; 8],
    pub version: u32,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Hello {
    pub magic: [u8; 8],
    pub version: u32,
    pub role: Role,
    pub credential: Option<String>,
    pub who: String,
    pub principal: String,
    pub channel: Channel,
}

/// Kept byte-for-byte as in version 1, so an old peer can read why it was refused.
#[derive(Serialize, Deserialize)]
pub(crate) enum HelloReply {
    Welcome { version: u32, node: String },
    Refused { code: ErrorCode, message: String },
}

fn clip(s: &str) -> String {
    s.chars().take(NAME_MAX).collect()
}

/// The credentials an accepting daemon requires, per role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// What clients must present (none: any client is accepted).
    pub client_token: Option<String>,
    /// What servers must present (none: any server is accepted).
    pub server_token: Option<String>,
}

impl Credentials {
    /// Refuses combinations that would let a client act as a server: a client token without
    /// a server token (anyone could then register), or the same secret for both.
    pub fn check(&self) -> Result<(), String> {
        let (c, s) = (self.client_token.as_deref(), self.server_token.as_deref());
        if c == Some("") || s == Some("") {
            return Err("a token may not be empty: remove it or give it a value".into());
        }
        match (c, s) {
            (Some(_), None) => Err(
                "client_token is set but server_token is not, so anyone could register as a server: set server_token too (a different secret)".into(),
            ),
            (Some(c), Some(s)) if c == s => Err(
                "client_token and server_token are the same, so every client could register as a server: give servers their own secret".into(),
            ),
            _ => Ok(()),
        }
    }

    /// Checks a hello: the peer it describes, or the refusal to send back.
    pub(crate) fn admit(
        &self,
        hello: Hello,
        cert: Option<&CertIdentity>,
        addr: SocketAddr,
        node: &str,
    ) -> Result<Peer, (ErrorCode, String)> {
        if let Some(c) = cert
            && !c.role.allows(hello.role)
        {
            return Err((
                ErrorCode::RpcRefused,
                format!(
                    "{node} refused `{}`: its certificate is a {} certificate and cannot act as a {}; issue one with `gridwise certs issue --role {}`",
                    c.name, c.role, hello.role, hello.role
                ),
            ));
        }
        let (expected, key) = match hello.role {
            Role::Client => (&self.client_token, "token"),
            Role::Server => (&self.server_token, "server_token"),
        };
        if !token_matches(expected.as_deref(), hello.credential.as_deref()) {
            return Err((
                ErrorCode::RpcRefused,
                format!(
                    "{node} refused the {} credential: set `{key}` to the grid's {} token",
                    hello.role, hello.role
                ),
            ));
        }
        let who = clip(&hello.who);
        let principal = match (cert, hello.role) {
            (Some(c), _) => clip(&c.name),
            (None, role) => match role {
                Role::Server => who.clone(),
                // A client without a key of its own owns only what it makes on this connection.
                Role::Client if hello.principal.is_empty() => format!("anonymous@{addr}"),
                Role::Client => clip(&hello.principal),
            },
        };
        Ok(Peer {
            addr,
            role: hello.role,
            who,
            principal,
            certified: cert.map(|c| clip(&c.name)),
            channel: hello.channel,
        })
    }
}

/// What an accepting daemon makes of a connection's first frame.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Not a gridwise hello at all: the connection is closed without an answer.
    NotAHello(String),
    /// A hello that is refused (version or credential), with what to tell the peer.
    Refused(ErrorCode, String),
    /// Welcome: who the peer is.
    Welcome(Peer),
}

/// Judges a connection's first frame: the one decoder of hellos, for `accept_loop` and for
/// fuzzing.
pub fn judge(
    frame: &[u8],
    credentials: &Credentials,
    cert: Option<&CertIdentity>,
    addr: SocketAddr,
    node: &str,
) -> Verdict {
    match super::messages::decode_legacy::<HelloHead>(frame) {
        Ok(h) if h.magic == MAGIC && h.version != gridwise_proto::PROTOCOL_VERSION => {
            Verdict::Refused(
                ErrorCode::RpcRefused,
                format!(
                    "protocol version mismatch: {node} speaks version {}, the peer speaks {}; run the same gridwise release on both",
                    gridwise_proto::PROTOCOL_VERSION,
                    h.version
                ),
            )
        }
        Ok(h) if h.magic == MAGIC => match super::messages::decode_legacy::<Hello>(frame) {
            Ok(hello) => match credentials.admit(hello, cert, addr, node) {
                Ok(peer) => Verdict::Welcome(peer),
                Err((code, message)) => Verdict::Refused(code, message),
            },
            Err(_) => Verdict::NotAHello("a malformed gridwise hello".into()),
        },
        _ => Verdict::NotAHello("the first frame is not a gridwise hello".into()),
    }
}

/// Compares a presented credential with the expected one in time that depends only on the
/// expected one's length: no early exit on the first differing byte, nor on a length
/// mismatch (which used to reveal the token's length).
pub(crate) fn token_matches(expected: Option<&str>, given: Option<&str>) -> bool {
    let Some(e) = expected else { return true };
    let (e, g) = (e.as_bytes(), given.unwrap_or("").as_bytes());
    let mut diff = (e.len() != g.len()) as u8;
    for (i, b) in e.iter().enumerate() {
        diff |= b ^ g.get(i).copied().unwrap_or(!b);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::PROTOCOL_VERSION;

    #[test]
    fn tokens_compare_exactly() {
        assert!(token_matches(None, None));
        assert!(token_matches(None, Some("x")));
        assert!(token_matches(Some("abc"), Some("abc")));
        assert!(!token_matches(Some("abc"), Some("abd")));
        assert!(!token_matches(Some("abc"), None));
        assert!(!token_matches(Some("abc"), Some("abcd")));
        assert!(!token_matches(Some("abc"), Some("ab")));
        assert!(!token_matches(Some("a\0"), Some("a")));
    }

    fn hello(role: Role, credential: Option<&str>, principal: &str) -> Hello {
        Hello {
            magic: MAGIC,
            version: PROTOCOL_VERSION,
            role,
            credential: credential.map(str::to_string),
            who: "w".into(),
            principal: principal.into(),
            channel: Channel::Rpc,
        }
    }

    #[test]
    fn each_role_needs_its_own_token() {
        let c = Credentials {
            client_token: Some("c".into()),
            server_token: Some("s".into()),
        };
        c.check().unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], 5));
        let p = c
            .admit(hello(Role::Client, Some("c"), "k1"), None, addr, "n")
            .unwrap();
        assert_eq!((p.role, p.principal.as_str()), (Role::Client, "k1"));
        // The client token does not make anyone a server.
        let (code, msg) = c
            .admit(hello(Role::Server, Some("c"), ""), None, addr, "n")
            .unwrap_err();
        assert_eq!(code, ErrorCode::RpcRefused);
        assert!(msg.contains("server_token"), "{msg}");
        assert!(
            c.admit(hello(Role::Server, Some("s"), ""), None, addr, "n")
                .is_ok()
        );
        // A client without a key owns only its connection's work.
        let p = c
            .admit(hello(Role::Client, Some("c"), ""), None, addr, "n")
            .unwrap();
        assert_eq!(p.principal, "anonymous@127.0.0.1:5");
    }

    #[test]
    fn a_certificate_names_the_principal_and_bounds_the_role() {
        use crate::wire::tls::CertRole;
        let open = Credentials::default();
        let addr = SocketAddr::from(([127, 0, 0, 1], 5));
        let client = CertIdentity {
            role: CertRole::Client,
            name: "alice".into(),
        };
        let p = open
            .admit(hello(Role::Client, None, "k1"), Some(&client), addr, "n")
            .unwrap();
        assert_eq!(p.principal, "alice");
        assert_eq!(p.certified.as_deref(), Some("alice"));
        let (code, msg) = open
            .admit(hello(Role::Server, None, ""), Some(&client), addr, "n")
            .unwrap_err();
        assert_eq!(code, ErrorCode::RpcRefused);
        assert!(
            msg.contains("client certificate and cannot act as a server"),
            "{msg}"
        );
        let agent = CertIdentity {
            role: CertRole::Agent,
            name: "agent".into(),
        };
        assert!(
            open.admit(hello(Role::Server, None, ""), Some(&agent), addr, "n")
                .is_ok()
        );
    }

    #[test]
    fn unsafe_token_combinations_are_refused() {
        let only_client = Credentials {
            client_token: Some("c".into()),
            server_token: None,
        };
        assert!(only_client.check().unwrap_err().contains("server_token"));
        let same = Credentials {
            client_token: Some("x".into()),
            server_token: Some("x".into()),
        };
        assert!(same.check().unwrap_err().contains("same"));
        let only_server = Credentials {
            client_token: None,
            server_token: Some("s".into()),
        };
        only_server.check().unwrap();
        assert!(Credentials::default().check().is_ok());
    }
}
