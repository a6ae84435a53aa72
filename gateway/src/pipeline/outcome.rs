//! What the pipeline answers, in no protocol's words: a call completed with its backend's
//! answer, or waiting for a decision. Refusals are [`crate::error::ApiError`]s with their
//! codes. Each front end turns these into its own wire format (a JSON body and a status for
//! HTTP, a tool result for MCP).

use std::collections::BTreeSet;

use airlock_storage::{Approval, CallRecord};
use serde_json::Value;

/// How a call ended, or where it waits.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The backend answered: any answer, its own 4xx and 5xx included, is data for the model.
    Completed(Completed),
    /// An approval is pending; the call runs once it is approved and its requester asks.
    Pending(Pending),
    /// The upstream suspended the call: it waits for resume data (DESIGN §11).
    Suspended(Suspended),
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

#[derive(Debug, Clone, PartialEq)]
pub struct Suspended {
    pub call_id: String,
    pub tool: String,
    /// `context.tool_call_id`, else the call id (what Mastra's chunks call `toolCallId`).
    pub tool_call_id: String,
    pub run_id: Option<String>,
    /// What the upstream said when it suspended.
    pub payload: Value,
    /// The JSON Schema resume data must satisfy.
    pub resume_schema: Value,
    /// Milliseconds since the epoch.
    pub expires_at: u64,
    /// How many times the call has suspended, this one included.
    pub count: u32,
}

impl Suspended {
    /// The view of a suspended call; `None` when it has no suspension.
    pub fn of(call: &CallRecord) -> Option<Suspended> {
        let s = call.suspension.as_ref()?;
        Some(Suspended {
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            tool_call_id: tool_call_id(call),
            run_id: call
                .context
                .get("run_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            payload: s.payload.clone(),
            resume_schema: s.resume_schema.clone(),
            expires_at: s.expires_at,
            count: s.count,
        })
    }
}

/// The id an agent framework knows a call by: `context.tool_call_id`, else the call id.
pub fn tool_call_id(call: &CallRecord) -> String {
    call.context
        .get("tool_call_id")
        .and_then(Value::as_str)
        .unwrap_or(&call.call_id)
        .to_owned()
}

/// What a suspension asks, when its payload says it in words (`message` or `question`).
pub fn question_of(payload: &Value) -> Option<&str> {
    ["message", "question"]
        .iter()
        .find_map(|k| payload.get(*k).and_then(Value::as_str))
}
