//! What the pipeline answers, in no protocol's words: a call completed with its backend's
//! answer, or waiting for a decision. Refusals are [`crate::error::ApiError`]s with their
//! codes. Each front end turns these into its own wire format (a JSON body and a status for
//! HTTP, a tool result for MCP).

use std::collections::BTreeSet;

use airlock_storage::Approval;
use serde_json::Value;

/// How a call ended, or where it waits.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The backend answered: any answer, its own 4xx and 5xx included, is data for the model.
    Completed(Completed),
    /// An approval is pending; the call runs once it is approved and its requester asks.
    Pending(Pending),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    pub call_id: String,
    /// `allow`, or `require_approval` for a call that ran on an approval or a grant.
    pub decision: String,
    pub fingerprint: String,
    pub upstream_status: Option<u16>,
    /// The backend's body: JSON, or a string when it was not JSON.
    pub result: Value,
    /// The args that ran, when an approver edited them.
    pub edited_args: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub call_id: String,
    pub approval_id: String,
    /// Milliseconds since the epoch.
    pub expires_at: u64,
    pub approvers: BTreeSet<String>,
    pub quorum: u32,
}

impl Pending {
    pub fn of(a: &Approval) -> Pending {
        Pending {
            call_id: a.call_id.clone(),
            approval_id: a.id.clone(),
            expires_at: a.expires_at,
            approvers: a.approvers.clone(),
            quorum: a.quorum,
        }
    }
}
