//! What every gridwise process runs on besides the messages (`gridwise-proto`): its
//! connections ([`wire`]: TLS identities and the roles they carry, the hello, connection and
//! frame limits, memory budgets, bulk transfer) and its [`settings`] (configuration files,
//! environment, logging).

pub mod settings;
pub mod wire;

#[doc(hidden)]
pub mod __reexport {
    pub use futures;
    pub use tarpc;
    pub use tokio_util::sync::CancellationToken;
    pub use tracing;
}
