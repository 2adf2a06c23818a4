//! The client's error: a GridRPC (GFD.52) code with a readable message.

use crate::call::SessionId;
use gridwise_proto::{ArgError, CallError, ErrorCode, RpcError};
use gridwise_runtime::wire::WireError;

/// A failed GridRPC operation: the GFD.52 code and what happened, in words.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct GrpcError {
    /// What to match on: the message is for people and may change between releases.
    pub code: ErrorCode,
    /// What was wrong and, where possible, what to do about it.
    pub message: String,
    /// The session the error belongs to, when a wait for any of several sessions found one
    /// that failed (`grpc_wait_or` and `grpc_wait_any` name it together with the error).
    pub session: Option<SessionId>,
}

impl GrpcError {
    /// For codes the constructors below do not cover.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            session: None,
        }
    }

    /// The same error, naming the session it belongs to.
    pub fn in_session(self, id: SessionId) -> Self {
        Self {
            session: Some(id),
            ..self
        }
    }

    /// `GRPC_NOT_INITIALIZED`: a [`grpc`](crate::grpc) function was called before `initialize`
    /// or after `finalize`.
    pub fn not_initialized() -> Self {
        Self::new(
            ErrorCode::NotInitialized,
            "GridRPC is not initialized: call initialize first",
        )
    }

    /// `GRPC_ALREADY_INITIALIZED`: `initialize` was called again without `finalize`.
    pub fn already_initialized() -> Self {
        Self::new(
            ErrorCode::AlreadyInitialized,
            "GridRPC is already initialized: call finalize before initializing again",
        )
    }

    /// `GRPC_INVALID_SESSION_ID` for one id.
    pub fn invalid_session(id: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::InvalidSessionId,
            format!("session {id} is not known (never started, or already waited for)"),
        )
    }

    /// `GRPC_COMMUNICATION_FAILED` with a message.
    pub fn communication(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::CommunicationFailed, message)
    }

    /// `GRPC_SESSION_FAILED` with a message.
    pub fn session_failed(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::SessionFailed, message)
    }

    /// The error of a cancelled session (`GRPC_SESSION_FAILED`, "cancelled").
    pub fn cancelled(what: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::SessionFailed,
            format!("{what} was cancelled by the client"),
        )
    }

    /// A tarpc transport failure while talking to `peer` (`GRPC_COMMUNICATION_FAILED`).
    pub fn transport(peer: &str, e: &tarpc::client::RpcError) -> Self {
        Self::communication(format!("{peer}: {}", transport_text(e)))
    }
}

/// A tarpc error with its causes, in words.
pub(crate) fn transport_text(e: &tarpc::client::RpcError) -> String {
    use tarpc::client::RpcError as E;
    match e {
        E::Shutdown => "the connection was closed".to_string(),
        E::DeadlineExceeded => "no answer before the deadline".to_string(),
        E::Server(s) => format!("the peer aborted the request ({:?}: {})", s.kind, s.detail),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}

impl From<RpcError> for GrpcError {
    fn from(e: RpcError) -> Self {
        Self::new(e.code, e.message)
    }
}

impl From<CallError> for GrpcError {
    fn from(e: CallError) -> Self {
        let code = e.code();
        Self::new(code, e.to_string())
    }
}

impl From<WireError> for GrpcError {
    fn from(e: WireError) -> Self {
        Self::new(e.code(), e.to_string())
    }
}

impl From<ArgError> for GrpcError {
    fn from(e: ArgError) -> Self {
        Self::new(ErrorCode::OtherErrorCode, e.to_string())
    }
}

impl From<tarpc::client::RpcError> for GrpcError {
    fn from(e: tarpc::client::RpcError) -> Self {
        Self::communication(transport_text(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gridwise_proto::CallErrorKind;

    #[test]
    fn conversions_keep_the_codes() {
        let e: GrpcError = RpcError::new(ErrorCode::FunctionNotFound, "no dgemm").into();
        assert_eq!(e.code, ErrorCode::FunctionNotFound);
        assert_eq!(e.to_string(), "GRPC_FUNCTION_NOT_FOUND: no dgemm");
        let e: GrpcError = CallError::new(CallErrorKind::Application, "boom").into();
        assert_eq!(e.code, ErrorCode::SessionFailed);
        assert!(e.message.contains("boom"));
        let e: GrpcError = CallError::new(CallErrorKind::UnknownService, "x").into();
        assert_eq!(e.code, ErrorCode::FunctionNotFound);
        let e = GrpcError::transport("10.0.0.1:7000", &tarpc::client::RpcError::Shutdown);
        assert_eq!(e.code, ErrorCode::CommunicationFailed);
        assert!(e.message.contains("10.0.0.1:7000"));
        let e: GrpcError = WireError::Refused {
            addr: "a:1".into(),
            message: "token".into(),
        }
        .into();
        assert_eq!(e.code, ErrorCode::RpcRefused);
    }
}
