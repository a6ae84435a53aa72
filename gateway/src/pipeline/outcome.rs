//! The record stage and what the pipeline answers, in no protocol's words: a call completed
//! with its backend's answer, waiting for a decision, or suspended. Refusals are
//! [`crate::error::ApiError`]s with their codes. Each front end turns these into its own wire
//! format (a JSON body and a status for HTTP, a tool result for MCP).
//!
//! [`record_outcome`] writes a claimed call's outcome (the last stage of a call that ran);
//! [`Unfinished`] records `call.interrupted` for a claimed call whose request went away;
//! [`record_suspension`] stores a suspension a backend asked for.

use std::collections::BTreeSet;
use std::sync::Arc;

use airlock_storage::{CallOutcome, Durability, Suspend};
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
    /// The approval it ran on, if any.
    pub approval_id: Option<String>,
    /// The grant it ran on, when it was not the approved call itself.
    pub grant_id: Option<String>,
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
    if gw.events.receiver_count() > 0 || gw.webhooks.wants(airlock_storage::Kind::CallCompleted) {
        let event = crate::approvals::call_completed_event(&record);
        let announcer = gw.clone();
        tokio::spawn(async move {
            announcer
                .announce(airlock_storage::Kind::CallCompleted, event)
                .await
        });
    }
    Ok(record)
}

/// The answer for a call that ran: 200 with the backend's answer, or its failure.
pub(super) fn finished(call: &CallRecord) -> Result<Outcome, ApiError> {
    let outcome = call.outcome.clone().unwrap_or(CallOutcome {
        upstream_status: None,
        result: None,
        error: Some(Code::CallInterrupted.as_str().into()),
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
        approval_id: call.approval_id.clone(),
        grant_id: call
            .approval_id
            .as_deref()
            .filter(|_| call.granted)
            .map(crate::grants::grant_id),
    }))
}

/// A claimed call's outcome, written if the request is dropped before it is: the client went
/// away or cancelled (an MCP `notifications/cancelled`) while the backend was being called.
/// The request to the backend is dropped with it, so whether the call ran is unknown: it is
/// recorded `call.interrupted` at once, as a crash would be at the next start, and never
/// left `executing`. Disarmed once the outcome is written.
pub(crate) struct Unfinished {
    gw: Arc<Gateway>,
    /// The call, while its outcome is still to be written.
    call_id: Option<String>,
    decision: String,
}

impl Unfinished {
    pub(crate) fn arm(gw: &Arc<Gateway>, call_id: &str, decision: &str) -> Unfinished {
        Unfinished {
            gw: gw.clone(),
            call_id: Some(call_id.to_owned()),
            decision: decision.to_owned(),
        }
    }

    /// The outcome is written (or the call was never claimed): nothing to do when dropped.
    /// Returns `pass` so an error can go through it.
    pub(crate) fn disarm<T>(mut self, pass: T) -> T {
        self.call_id = None;
        pass
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(call_id) = self.call_id.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (gw, decision) = (self.gw.clone(), std::mem::take(&mut self.decision));
        runtime.spawn(async move {
            let outcome = CallOutcome {
                upstream_status: None,
                result: None,
                error: Some(Code::CallInterrupted.as_str().into()),
                message: Some(
                    "the client went away or cancelled while the backend was being called; \
                     the request to it was dropped, so whether the call ran is unknown"
                        .into(),
                ),
            };
            match record_outcome(&gw, &call_id, None, &decision, outcome).await {
                Ok(_) => tracing::warn!(
                    call_id,
                    "the client left a running call: recorded call.interrupted"
                ),
                // Not claimed after all (the claim itself failed): nothing was left running.
                Err(e) => tracing::debug!(
                    call_id,
                    code = e.code.as_str(),
                    "no unfinished call to record"
                ),
            }
        });
    }
}

/// Runs a store operation that may claim a call (`claimed` finds it in the result), so that a
/// claim made after the request went away is not left executing: the operation finishes in a
/// task of its own, and a claim nobody is left to run is recorded `call.interrupted` at once,
/// as the request's [`Unfinished`] guard would have done.
pub(crate) async fn claim<T, F>(
    gw: &Arc<Gateway>,
    op: F,
    claimed: fn(&T) -> Option<&CallRecord>,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&airlock_storage::Store) -> Result<T, airlock_storage::StoreError> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let owner = gw.clone();
    tokio::spawn(async move {
        let result = owner.store_op(op).await;
        if let Err(Ok(unheard)) = tx.send(result) {
            if let Some(call) = claimed(&unheard) {
                // Dropped at once: it records the outcome.
                drop(Unfinished::arm(&owner, &call.call_id, &call.decision));
            }
        }
    });
    rx.await
        .map_err(|_| ApiError::new(Code::Internal, "the store task ended without an answer"))?
}

/// Stores a suspension the upstream asked for, and answers with it.
pub(super) async fn record_suspension(
    gw: &Arc<Gateway>,
    call: &CallRecord,
    s: Suspend,
) -> Result<Outcome, ApiError> {
    let id = call.call_id.clone();
    let now = now_ms();
    let record = match gw.store_op(move |st| st.suspend_call(&id, s, now)).await {
        Ok(r) => r,
        Err(e) => {
            // Not suspended: an upstream request kept open for it is abandoned.
            gw.backends.abandon(&call.call_id);
            return Err(e);
        }
    };
    gw.deadlines.notify_one();
    gw.metrics.call(&record.decision, "suspended");
    tracing::info!(call_id = %record.call_id, "call suspended by its upstream");
    Suspended::of(&record)
        .map(Outcome::Suspended)
        .ok_or_else(|| {
            ApiError::new(
                Code::StoreCorrupt,
                "a suspended call without its suspension",
            )
        })
}
