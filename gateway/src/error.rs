//! The one refusal type every stage returns: a stable code (DESIGN §6), a message for people
//! (and models), details for programs, and an optional retry delay.
//!
//! It is protocol-neutral: the HTTP front end turns it into a status and a JSON error body
//! ([`crate::http::body`]), MCP into an `isError` result or a JSON-RPC error.

use airlock_policy::RequestError;
use airlock_storage::StoreError;
use serde_json::{json, Value};

/// A refusal: a stable code, a message for people (and models), and details for programs.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: &'static str,
    pub message: String,
    pub details: Value,
    /// Seconds, for `Retry-After` on overload.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            details: json!({}),
            retry_after: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = details;
        self
    }

    pub fn retry_after(mut self, seconds: u64) -> ApiError {
        self.retry_after = Some(seconds);
        self
    }
}

impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        ApiError::new(e.code(), e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let mut err = ApiError::new(e.code(), e.to_string());
        if e.code() == "store.unavailable" {
            err = err.retry_after(5);
        }
        err
    }
}
