//! The record stage and what the pipeline answers, in no protocol's words: a call completed
//! with its backend's answer, waiting for a decision, or suspended. Refusals are
//! [`crate::error::ApiError`]s with their codes. Each front end turns these into its own wire
//! format (a JSON body and a status for HTTP, a tool result for MCP).
//!
//! [`record_outcome`] writes a claimed call's outcome (the last stage of a call that ran);
//! [`respond`] answers for a call in whatever state it is in, running it when it may.

use std::collections::BTreeSet;
use std::sync::Arc;

use airlock_storage::{CallOutcome, CallStatus, Durability};
use serde_json::json;

use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

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

/// Answers for a call in whatever state it is in, executing it when it may run.
pub(super) async fn respond(gw: &Arc<Gateway>, call: CallRecord) -> Result<Outcome, ApiError> {
    match call.status {
        CallStatus::Allowed | CallStatus::Approved => super::claim::execute(gw, call).await,
        CallStatus::Executing => Err(ApiError::new(
            Code::CallInProgress,
            "the call is executing; ask again for its outcome",
        )
        .retry_after(1)),
        CallStatus::Completed | CallStatus::Failed => finished(&call),
        CallStatus::PendingApproval => {
            let id = call.approval_id.clone().unwrap_or_default();
            let approval = gw.store_op(move |s| s.approval(&id)).await?;
            match approval {
                Some(a) => Ok(Outcome::Pending(Pending::of(&a))),
                None => Err(ApiError::new(
                    Code::ApprovalNotFound,
                    "the call's approval is missing",
                )),
            }
        }
        CallStatus::Denied => Err(ApiError::new(
            Code::PolicyDenied,
            "the call was denied by policy",
        )),
        CallStatus::Declined => Err(declined(&call)),
        CallStatus::Suspended => match Suspended::of(&call) {
            Some(v) => Ok(Outcome::Suspended(v)),
            None => Err(ApiError::new(
                Code::StoreCorrupt,
                "a suspended call without its suspension",
            )),
        },
        CallStatus::Expired if call.suspension.is_some() => Err(ApiError::new(
            Code::CallExpired,
            "nobody resumed the suspended call in time; it has ended",
        )
        .with_details(json!({"call_id": call.call_id}))),
        CallStatus::Expired => Err(ApiError::new(
            Code::ApprovalExpired,
            "nobody approved the call in time; it is denied",
        )),
        CallStatus::Cancelled => Err(ApiError::new(Code::CallCancelled, "the call was cancelled")),
    }
}

/// `call.not_found`, saying so when the id is an approval's (they look alike otherwise).
pub fn call_not_found(id: &str) -> ApiError {
    let message = if id.starts_with("apr_") {
        format!(
            "`{id}` is an approval id, not a call id: the approval's `call_id` \
             (GET /v1/approvals/{id}, or `airlock approvals show {id}`) names its call"
        )
    } else {
        format!("no call `{id}`")
    };
    ApiError::new(Code::CallNotFound, message)
}

pub(super) fn declined(call: &CallRecord) -> ApiError {
    let reason = call.reason.clone().unwrap_or_default();
    ApiError::new(
        Code::ApprovalDeclined,
        format!("declined by an approver: {reason}"),
    )
    .with_details(json!({
        "reason": reason, "call_id": call.call_id, "approval_id": call.approval_id,
    }))
}

/// Writes a claimed call's outcome (not awaited for an fsync: a crash before it leaves the call
/// `call.interrupted`, its claim was durable, never re-run), counts it and tells listeners;
/// whoever waits on the call wakes from the store's notice of the change. `claimed` is the
/// record this request's claim stored, when it has it (the store then does not read it
/// back); else the call is read by `call_id`.
pub(super) async fn record_outcome(
    gw: &Arc<Gateway>,
    call_id: &str,
    claimed: Option<CallRecord>,
    decision: &str,
    outcome: CallOutcome,
) -> Result<CallRecord, ApiError> {
    let failed = outcome.error.is_some();
    let now = now_ms();
    let record = match claimed {
        Some(call) => {
            gw.store_async(gw.store.complete_claimed_async(
                call,
                outcome,
                now,
                Durability::Lazy,
                gw.alone(),
            ))
            .await?
        }
        None => {
            gw.store_async(
                gw.store
                    .complete_call_async(call_id, outcome, now, Durability::Lazy),
            )
            .await?
        }
    };
    gw.metrics
        .call(decision, if failed { "failed" } else { "completed" });
    // Told in the background: the agent's answer does not wait for the notification. Nobody
    // listening (no event stream open, no webhook subscribed): nothing to build or send.
    if gw.events.receiver_count() > 0 || gw.webhooks.wants("call.completed") {
        let event = crate::approvals::call_completed_event(&record);
        let announcer = gw.clone();
        tokio::spawn(async move { announcer.announce("call.completed", event).await });
    }
    Ok(record)
}

/// The answer for a call that ran: 200 with the backend's answer, or its failure.
pub(super) fn finished(call: &CallRecord) -> Result<Outcome, ApiError> {
    let outcome = call.outcome.clone().unwrap_or(CallOutcome {
        upstream_status: None,
        result: None,
        error: Some("call.interrupted".into()),
        message: None,
    });
    if let Some(stored) = outcome.error {
        // INVARIANT: a stored code reads back as itself; one this build does not know is
        // reported as unreadable, never as another code.
        let Some(code) = Code::parse(&stored) else {
            return Err(ApiError::new(
                Code::StoreCorrupt,
                format!("the call's stored outcome names an unknown code `{stored}`"),
            )
            .with_details(json!({"call_id": call.call_id})));
        };
        return Err(ApiError::new(
            code,
            outcome.message.unwrap_or_else(|| code.as_str().to_owned()),
        )
        .with_details(json!({"call_id": call.call_id})));
    }
    Ok(Outcome::Completed(Completed {
        call_id: call.call_id.clone(),
        decision: call.decision.clone(),
        fingerprint: call.fingerprint.clone(),
        upstream_status: outcome.upstream_status,
        result: outcome.result.unwrap_or(Value::Null),
        edited_args: call.edited.then(|| call.args.clone()),
    }))
}
