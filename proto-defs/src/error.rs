//! GridRPC error codes (OGF GFD.52) and the errors that cross the wire.

use crate::ids::DataHandle;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The GridRPC End-User API error codes, with the numeric values of the GFD.52 C binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum ErrorCode {
    /// GRPC_NO_ERROR
    NoError = 0,
    /// GRPC_NOT_INITIALIZED
    NotInitialized = 1,
    /// GRPC_CONFIGFILE_NOT_FOUND
    ConfigfileNotFound = 2,
    /// GRPC_CONFIGFILE_ERROR
    ConfigfileError = 3,
    /// GRPC_SERVER_NOT_FOUND
    ServerNotFound = 4,
    /// GRPC_FUNCTION_NOT_FOUND
    FunctionNotFound = 5,
    /// GRPC_INVALID_FUNCTION_HANDLE
    InvalidFunctionHandle = 6,
    /// GRPC_INVALID_SESSION_ID
    InvalidSessionId = 7,
    /// GRPC_RPC_REFUSED
    RpcRefused = 8,
    /// GRPC_COMMUNICATION_FAILED
    CommunicationFailed = 9,
    /// GRPC_SESSION_FAILED
    SessionFailed = 10,
    /// GRPC_NOT_COMPLETED
    NotCompleted = 11,
    /// GRPC_NONE_COMPLETED
    NoneCompleted = 12,
    /// GRPC_OTHER_ERROR_CODE
    OtherErrorCode = 13,
    /// GRPC_UNKNOWN_ERROR_CODE
    UnknownErrorCode = 14,
    /// GRPC_ALREADY_INITIALIZED
    AlreadyInitialized = 15,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 16] = [
        ErrorCode::NoError,
        ErrorCode::NotInitialized,
        ErrorCode::ConfigfileNotFound,
        ErrorCode::ConfigfileError,
        ErrorCode::ServerNotFound,
        ErrorCode::FunctionNotFound,
        ErrorCode::InvalidFunctionHandle,
        ErrorCode::InvalidSessionId,
        ErrorCode::RpcRefused,
        ErrorCode::CommunicationFailed,
        ErrorCode::SessionFailed,
        ErrorCode::NotCompleted,
        ErrorCode::NoneCompleted,
        ErrorCode::OtherErrorCode,
        ErrorCode::UnknownErrorCode,
        ErrorCode::AlreadyInitialized,
    ];

    /// The C binding's name, e.g. `GRPC_SESSION_FAILED`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::NoError => "GRPC_NO_ERROR",
            ErrorCode::NotInitialized => "GRPC_NOT_INITIALIZED",
            ErrorCode::ConfigfileNotFound => "GRPC_CONFIGFILE_NOT_FOUND",
            ErrorCode::ConfigfileError => "GRPC_CONFIGFILE_ERROR",
            ErrorCode::ServerNotFound => "GRPC_SERVER_NOT_FOUND",
            ErrorCode::FunctionNotFound => "GRPC_FUNCTION_NOT_FOUND",
            ErrorCode::InvalidFunctionHandle => "GRPC_INVALID_FUNCTION_HANDLE",
            ErrorCode::InvalidSessionId => "GRPC_INVALID_SESSION_ID",
            ErrorCode::RpcRefused => "GRPC_RPC_REFUSED",
            ErrorCode::CommunicationFailed => "GRPC_COMMUNICATION_FAILED",
            ErrorCode::SessionFailed => "GRPC_SESSION_FAILED",
            ErrorCode::NotCompleted => "GRPC_NOT_COMPLETED",
            ErrorCode::NoneCompleted => "GRPC_NONE_COMPLETED",
            ErrorCode::OtherErrorCode => "GRPC_OTHER_ERROR_CODE",
            ErrorCode::UnknownErrorCode => "GRPC_UNKNOWN_ERROR_CODE",
            ErrorCode::AlreadyInitialized => "GRPC_ALREADY_INITIALIZED",
        }
    }

    /// The readable message of `grpc_error_string`.
    pub fn message(self) -> &'static str {
        match self {
            ErrorCode::NoError => "no error",
            ErrorCode::NotInitialized => "GridRPC is not initialized: call initialize first",
            ErrorCode::ConfigfileNotFound => "the client configuration file was not found",
            ErrorCode::ConfigfileError => "the client configuration file could not be read",
            ErrorCode::ServerNotFound => "no server can be found for the call",
            ErrorCode::FunctionNotFound => "no server offers the requested function",
            ErrorCode::InvalidFunctionHandle => "the function handle is not valid",
            ErrorCode::InvalidSessionId => "the session id is not valid",
            ErrorCode::RpcRefused => "the remote procedure call was refused",
            ErrorCode::CommunicationFailed => "communication with the agent or a server failed",
            ErrorCode::SessionFailed => "the session failed",
            ErrorCode::NotCompleted => "the call has not completed yet",
            ErrorCode::NoneCompleted => "none of the calls has completed",
            ErrorCode::OtherErrorCode => "an error without a more specific code",
            ErrorCode::UnknownErrorCode => "the error code is unknown",
            ErrorCode::AlreadyInitialized => "GridRPC is already initialized",
        }
    }

    /// The code for a number, or `UnknownErrorCode`.
    pub fn from_number(n: i64) -> ErrorCode {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|c| *c as i64 == n)
            .unwrap_or(ErrorCode::UnknownErrorCode)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An agent-side refusal: a GridRPC code and what the caller should know or do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    pub code: ErrorCode,
    /// What was wrong and what to do.
    pub message: String,
}

impl RpcError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Why a server did not return outputs for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CallErrorKind {
    /// The server does not offer the service.
    UnknownService,
    /// The inputs do not fit the service description.
    BadArguments,
    /// The kernel ran and reported an error of its own (not retried elsewhere).
    Application,
    /// The call was cancelled before it finished.
    Cancelled,
    /// The server is shutting down or cannot take the call; another server may.
    Unavailable,
    /// The kernel broke (panicked or returned malformed outputs).
    Internal,
    /// The call needs more memory than the server's budget, or its inputs or returned outputs
    /// would not fit in one frame; refused before it ran. A larger server may take it.
    ResourceLimit,
    /// A remote input is gone: its holder died, restarted, or freed it. A graph recomputes it
    /// from its producer; retrying the call elsewhere would not help.
    InputLost,
}

/// A server-side failure of one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct CallError {
    /// Decides whether the call may be retried elsewhere ([`retryable`](Self::retryable)) and
    /// which GridRPC code a client reports ([`code`](Self::code)).
    pub kind: CallErrorKind,
    /// What happened, in words.
    pub message: String,
    /// With [`CallErrorKind::InputLost`]: the remote inputs that are gone, so that whoever made
    /// them can make them again.
    pub lost: Vec<DataHandle>,
}

impl CallError {
    /// A failure with no lost inputs; use [`input_lost`](Self::input_lost) for those.
    pub fn new(kind: CallErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            lost: Vec::new(),
        }
    }

    /// A remote input that is gone ([`CallErrorKind::InputLost`]).
    pub fn input_lost(handle: DataHandle, message: impl Into<String>) -> Self {
        Self {
            lost: vec![handle],
            ..Self::new(CallErrorKind::InputLost, message)
        }
    }

    /// Whether the call may be retried on another server (it did not run here).
    pub fn retryable(&self) -> bool {
        matches!(
            self.kind,
            CallErrorKind::Unavailable | CallErrorKind::ResourceLimit
        )
    }

    /// The GridRPC code a client reports for this failure.
    pub fn code(&self) -> ErrorCode {
        match self.kind {
            CallErrorKind::UnknownService => ErrorCode::FunctionNotFound,
            CallErrorKind::Unavailable | CallErrorKind::ResourceLimit => ErrorCode::RpcRefused,
            _ => ErrorCode::SessionFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_numbers() {
        for (i, c) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(ErrorCode::from_number(i as i64), *c);
        }
        assert_eq!(ErrorCode::from_number(99), ErrorCode::UnknownErrorCode);
    }

    #[test]
    fn only_refusals_are_retried() {
        assert!(CallError::new(CallErrorKind::Unavailable, "x").retryable());
        assert!(CallError::new(CallErrorKind::ResourceLimit, "x").retryable());
        assert!(!CallError::new(CallErrorKind::InputLost, "x").retryable());
        assert!(!CallError::new(CallErrorKind::Application, "x").retryable());
        assert_eq!(
            CallError::new(CallErrorKind::Application, "x").code(),
            ErrorCode::SessionFailed
        );
    }
}
