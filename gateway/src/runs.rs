//! Run streams (DESIGN §11): `GET /v1/runs/{run_id}/stream`, the events of one agent run as
//! server-sent events under Mastra's chunk names (`tool-call-approval`,
//! `tool-call-suspended`, `tool-result`, `tool-error`).
//!
//! The stream is read from the audit log, not from memory: every call record that names a
//! run is indexed under it by the store, event ids are audit `seq` numbers, and a client that
//! reconnects with `Last-Event-ID` is sent exactly what came after that id. New records wake
//! the stream through the store's commit listener (never by polling). An agent sees only
//! its own calls; approvers and admins see every call in the run.
//!
//! It changes nothing: it only reads the audit log and the call records.

use std::sync::Arc;
use std::time::Duration;

use airlock_storage::{CallRecord, Kind, Principal};
use bytes::Bytes;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use airlock_storage::Cursor;

use crate::body::{sse_response, Body};
use crate::clock::rfc3339;
use crate::error::Code;
use crate::pipeline::tool_call_id;
use crate::state::{run_key, Gateway};

/// Audit records read per page.
const PAGE: usize = 256;

/// The stream of run `run_id` as `principal` may see it, from after audit position `after`
/// (an event id it sent: the plain seq with one chain, a position across chains with several).
pub fn stream(
    gw: &Arc<Gateway>,
    principal: Principal,
    run_id: String,
    after: Cursor,
) -> Response<Body> {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let gw = gw.clone();
    tokio::spawn(async move {
        let key = run_key(&run_id);
        let notify = gw.holds.watch(&key);
        if tx
            .send(Bytes::from_static(b": connected\n\n"))
            .await
            .is_ok()
        {
            follow(&gw, &principal, &run_id, after, &notify, &tx).await;
        }
        gw.holds.release(&key, notify);
    });
    sse_response(rx)
}

async fn follow(
    gw: &Arc<Gateway>,
    principal: &Principal,
    run_id: &str,
    mut last: Cursor,
    notify: &tokio::sync::Notify,
    tx: &mpsc::Sender<Bytes>,
) {
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        // Registered before reading, so a record committed in between wakes us.
        notified.as_mut().enable();
        let run = run_id.to_owned();
        let from = last.clone();
        let records = match gw.store_op(move |s| s.run_events(&run, &from, PAGE)).await {
            Ok(r) => r,
            Err(e) => {
                let _ = tx
                    .send(Bytes::from(format!(
                        "event: error\ndata: {}\n\n",
                        json!({"code": e.code, "message": e.message})
                    )))
                    .await;
                return;
            }
        };
        let full = records.len() == PAGE;
        for (at, record) in records {
            last = at.clone();
            let Some(chunk) = chunk(gw, principal, run_id, &record).await else {
                continue;
            };
            let event = format!("id: {at}\ndata: {chunk}\n\n");
            if tx.send(Bytes::from(event)).await.is_err() {
                return;
            }
        }
        if full {
            continue;
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep(Duration::from_secs(15)) => {
                if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                    return;
                }
            }
            _ = tx.closed() => return,
            _ = gw.shutdown.cancelled() => return,
        }
    }
}

/// The chunk an audit record makes, if any, for a principal who may see its call.
async fn chunk(
    gw: &Arc<Gateway>,
    principal: &Principal,
    run_id: &str,
    record: &Value,
) -> Option<Value> {
    let kind = record
        .get("kind")
        .and_then(Value::as_str)
        .and_then(Kind::parse)?;
    let call_id = record.get("call_id").and_then(Value::as_str)?.to_owned();
    let wanted = matches!(
        kind,
        Kind::CallDecided
            | Kind::ApprovalRequested
            | Kind::ApprovalDecided
            | Kind::ApprovalExpired
            | Kind::CallSuspended
            | Kind::CallCompleted
            | Kind::CallFailed
            | Kind::CallExpired
            | Kind::CallCancelled
            | Kind::CallResumeDenied
    );
    if !wanted {
        return None;
    }
    let id = call_id.clone();
    let call: CallRecord = gw.store_op(move |s| s.call(&id)).await.ok()??;
    let may_see = call.requester.id == principal.id || principal.role != "agent";
    if !may_see {
        return None;
    }
    let (name, mut payload) = payload_of(kind, record, &call)?;
    payload["toolCallId"] = Value::String(tool_call_id(&call));
    payload["toolName"] = Value::String(call.tool.clone());
    Some(json!({
        "type": name,
        "runId": run_id,
        "callId": call.call_id,
        "payload": payload,
    }))
}

/// A run event's type and payload for an audit record of `call`.
fn payload_of(kind: Kind, record: &Value, call: &CallRecord) -> Option<(&'static str, Value)> {
    let field = |k: &str| record.get(k).cloned().unwrap_or(Value::Null);
    Some(match kind {
        Kind::ApprovalRequested => (
            "tool-call-approval",
            json!({
                // The audit copy: redacted as the audit log is.
                "args": field("args"),
                "approvalId": record.get("approval_id"),
                "expiresAt": record.get("expires_at").and_then(Value::as_u64).map(rfc3339),
            }),
        ),
        Kind::CallSuspended => (
            "tool-call-suspended",
            json!({"suspendPayload": field("payload"), "resumeSchema": field("resume_schema")}),
        ),
        Kind::CallCompleted => (
            "tool-result",
            json!({"result": call.outcome.as_ref().and_then(|o| o.result.clone())}),
        ),
        _ => {
            let (code, message) = refusal(kind, record, call)?;
            (
                "tool-error",
                json!({"error": {"code": code, "message": message}}),
            )
        }
    })
}

/// The code and message of an audit record that ended `call` without a result, if it did.
fn refusal(kind: Kind, record: &Value, call: &CallRecord) -> Option<(String, String)> {
    let says = |code: Code, message: &str| Some((code.as_str().to_owned(), message.to_owned()));
    match kind {
        // A refused resume that ended the call (an MCP client's answer, DESIGN §11); one that
        // left it suspended is no event of the run: the call still waits.
        Kind::CallDecided if record.get("decision").and_then(Value::as_str) != Some("deny") => None,
        Kind::CallResumeDenied if record.get("ended") != Some(&Value::Bool(true)) => None,
        Kind::CallDecided | Kind::CallResumeDenied => {
            let messages: Vec<&str> = record
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|m| m.get("message").and_then(Value::as_str))
                .collect();
            if messages.is_empty() {
                says(Code::PolicyDenied, "denied by policy")
            } else {
                says(Code::PolicyDenied, &messages.join("; "))
            }
        }
        Kind::ApprovalDecided
            if record.get("status").and_then(Value::as_str) == Some("declined") =>
        {
            let reason = record.get("reason").and_then(Value::as_str).unwrap_or("");
            says(
                Code::ApprovalDeclined,
                &format!("declined by an approver: {reason}"),
            )
        }
        Kind::ApprovalExpired => says(
            Code::ApprovalExpired,
            "nobody approved the call in time; it is denied",
        ),
        Kind::CallFailed => {
            let o = call.outcome.as_ref();
            let code = o.and_then(|o| o.error.clone()).unwrap_or_default();
            let message = o
                .and_then(|o| o.message.clone())
                .unwrap_or_else(|| code.clone());
            Some((code, message))
        }
        Kind::CallExpired => says(
            Code::CallExpired,
            "nobody resumed the suspended call in time; it has ended",
        ),
        Kind::CallCancelled => {
            let e = crate::pipeline::cancelled(call);
            Some((e.code.as_str().to_owned(), e.message))
        }
        _ => None,
    }
}
