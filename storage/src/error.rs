//! The store's one error type, with stable codes.
//!
//! Domain refusals (who may decide, what state allows what) carry the codes of DESIGN §6;
//! `store.unavailable` means the database failed (I/O error, poisoned after a failed fsync,
//! or locked by another process) and nothing more can be promised.

/// Why a store operation did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// Another process (a running gateway) holds the embedded store's lock.
    #[error("{0}")]
    Locked(String),
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    #[error("approval `{0}` not found")]
    ApprovalNotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("the requester of a call cannot decide it")]
    SelfApproval,
    #[error("`{0}` has already decided this approval")]
    AlreadyDecided(String),
    #[error("the approval is {0}, not pending")]
    NotPending(&'static str),
    #[error("call `{0}` not found")]
    CallNotFound(String),
    #[error("call `{0}` already exists")]
    CallExists(String),
    #[error("call is {0} and cannot {1}")]
    CallState(&'static str, &'static str),
    #[error("the grant for this approval has expired or been used up")]
    GrantGone,
    #[error("{0}")]
    GrantTooWide(String),
    #[error("grant `{0}` not found (revoked, used up or expired)")]
    GrantNotFound(String),
    #[error("delivery `{0}` not found")]
    DeliveryNotFound(String),
    #[error("{0}")]
    NoStore(String),
    #[error("{0}")]
    NotExported(String),
    #[error("the call is {0}, not suspended: there is nothing to resume")]
    NotSuspended(&'static str),
    #[error("the call's suspension expired: it can no longer be resumed")]
    SuspensionExpired,
    #[error("the database's schema is version {found}, newer than this binary's {supported}: run a newer airlock")]
    SchemaTooNew { found: i32, supported: i32 },
}

impl StoreError {
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) | StoreError::Locked(_) => "store.unavailable",
            StoreError::Corrupt(_) => "store.corrupt",
            StoreError::ApprovalNotFound(_) => "approval.not_found",
            StoreError::Forbidden(_) => "approval.forbidden",
            StoreError::SelfApproval => "approval.self_approval",
            StoreError::AlreadyDecided(_) => "approval.already_decided",
            StoreError::NotPending(_) => "approval.not_pending",
            StoreError::CallNotFound(_) => "call.not_found",
            StoreError::CallExists(_) => "call.exists",
            StoreError::CallState(..) => "call.invalid_state",
            StoreError::GrantGone => "approval.expired",
            StoreError::GrantTooWide(_) => "approval.grant_too_wide",
            StoreError::GrantNotFound(_) => "grant.not_found",
            StoreError::DeliveryNotFound(_) => "delivery.not_found",
            StoreError::NoStore(_) => "store.not_found",
            StoreError::NotExported(_) => "audit.not_exported",
            StoreError::SchemaTooNew { .. } => "store.schema_too_new",
            StoreError::NotSuspended(_) => "call.not_suspended",
            StoreError::SuspensionExpired => "call.expired",
        }
    }
}

impl From<fjall::Error> for StoreError {
    fn from(e: fjall::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}
