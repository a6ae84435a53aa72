//! Suspend and resume (DESIGN §11): an upstream that needs more input mid-call suspends it
//! with a payload and a JSON Schema; the call waits, durably, until someone resumes it with
//! data the schema accepts and policy allows, or until `server.suspend_ttl` ends it.
//!
//! Here: reading a suspension out of an upstream's answer (an HTTP backend's `202
//! {"suspend"}`, an MCP upstream's form elicitation), checking its schema, compiling it once
//! per suspension, validating resume data with every failing JSON pointer, evaluating policy
//! with `resume` bound, and resuming one call or a run's one suspended call.
//!
//! Not here: sending the resume to the upstream (the pipeline's `forward`), or how a front end
//! shows a suspension to its client (`http`, `mcp`, `inbox`).

use std::sync::Arc;

use airlock_policy::{Decision, DecisionKind, ToolCall};
use airlock_storage::{CallRecord, CallStatus, Principal};
use serde_json::{json, Map, Value};

use super::claim::respond;
use super::decide::{denied, explanation, policy};
use super::outcome::{call_not_found, claim, Unfinished};
use super::{forward, Outcome};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
pub use crate::schemas::not_suspended;
use crate::state::Gateway;

/// Who may resume a call: its requester, approvers and admins. Anyone else is told the call
/// does not exist.
fn may_resume(principal: &Principal, call: &CallRecord) -> bool {
    call.requester.id == principal.id || principal.role == "approver" || principal.is_admin()
}

/// Checks `data` against the call's resume schema: `422 request.invalid_resume_data` with
/// every failing JSON pointer.
fn validate(gw: &Gateway, call: &CallRecord, data: &Value) -> Result<(), ApiError> {
    let validator = gw.schemas.validator(call)?;
    let errors: Vec<Value> = validator
        .iter_errors(data)
        .map(|e| json!({"pointer": e.instance_path().as_str(), "message": e.to_string()}))
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    let first = errors
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                match e["pointer"].as_str() {
                    Some("") | None => "(the data)",
                    Some(p) => p,
                },
                e["message"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(ApiError::new(
        Code::RequestInvalidResumeData,
        format!("the resume data does not fit the call's resume schema: {first}"),
    )
    .with_details(json!({"call_id": call.call_id, "errors": errors})))
}

/// What a resume that policy refuses leaves behind (DESIGN §11): what the caller was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfRefused {
    /// The caller may answer again (the JSON API, the inbox): the call stays suspended, and
    /// the refusal says so (`details.suspended`).
    StaysSuspended,
    /// The caller was given a final result (MCP): the call ends there, `denied`, and can never
    /// run later.
    Ends,
}

/// `POST /v1/calls/{id}/resume {"resume_data"}`: validates, asks policy (with `resume`
/// bound), claims the call and sends the resume to its upstream; answers like any call
/// (completed, failed, or suspended again).
pub async fn resume(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call_id: &str,
    data: Value,
    if_refused: IfRefused,
) -> Result<Outcome, ApiError> {
    // `data` was parsed strictly with the rest of the request (numbers, depth, duplicates).
    let id = call_id.to_owned();
    let call = gw
        .store_op(move |s| s.call(&id))
        .await?
        .filter(|c| may_resume(principal, c))
        .ok_or_else(|| call_not_found(call_id))?;
    if call.status != CallStatus::Suspended {
        return Err(not_suspended(&call));
    }
    validate(gw, &call, &data)?;

    // Policy again, as the call's requester, with `resume` bound.
    let as_call = ToolCall::new(&call.tool, call.args.clone(), Some(call.context.clone()))?;
    let (decision, classified) = policy(gw, &as_call, &call.requester, Some(&data), now_ms()).await;
    let mut expl = explanation(&decision, &classified);
    expl.insert("decision".into(), Value::from(decision.decision.as_str()));
    if decision.decision != DecisionKind::Allow {
        return Err(refuse(gw, principal, &call, &data, &decision, expl, if_refused).await);
    }

    let (id, by, d, now) = (
        call.call_id.clone(),
        principal.clone(),
        data.clone(),
        now_ms(),
    );
    let claimed = claim(
        gw,
        move |s| s.resume_call(&id, &by, &d, expl, now),
        |c| Some(c),
    )
    .await?;
    gw.schemas.forget(&claimed.call_id);
    tracing::info!(call_id, by = %principal.id, "call resumed");
    gw.metrics.call(&claimed.decision, "resumed");
    let guard = Unfinished::arm(gw, &claimed.call_id, &claimed.decision);
    forward::run(gw, claimed, Some(&data), guard).await
}

/// A resume policy refused: audited, and the call ended or left suspended as `if_refused`
/// says; the refusal the caller gets says which.
async fn refuse(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call: &CallRecord,
    data: &Value,
    decision: &Decision,
    expl: Map<String, Value>,
    if_refused: IfRefused,
) -> ApiError {
    let ends = if_refused == IfRefused::Ends;
    let (id, by, d, now) = (
        call.call_id.clone(),
        principal.clone(),
        data.clone(),
        now_ms(),
    );
    let after = match gw
        .store_op(move |s| s.resume_denied(&id, &by, &d, expl, ends, now))
        .await
    {
        Ok(c) => c,
        Err(e) => return e,
    };
    let ended = after.status == CallStatus::Denied;
    if ended {
        // Nothing will resume it: an upstream request kept open for it goes too.
        gw.backends.abandon(&call.call_id);
        gw.schemas.forget(&call.call_id);
        gw.metrics.call(&call.decision, "denied");
    }
    tracing::info!(call_id = %call.call_id, by = %principal.id, decision = decision.decision.as_str(), ended, "resume refused by policy");
    let mut e = denied(decision);
    let what = if ended {
        "the call has ended and will not run"
    } else {
        "the call stays suspended: answer again"
    };
    e.message = if decision.decision == DecisionKind::RequireApproval {
        format!(
            "policy requires approval for this resume, and a resume cannot wait for one: it is \
             refused ({what}). {}",
            e.message
        )
    } else {
        format!("{} ({what})", e.message)
    };
    e.with_details(json!({
        "call_id": call.call_id, "decision": decision.decision.as_str(),
        "rules": decision.rules, "messages": decision.messages, "suspended": !ended,
    }))
}

/// `POST /v1/runs/{run_id}/resume`: resumes the run's one suspended call (narrowed by
/// `tool_call_id`); none is `call.not_found`, several `409 call.ambiguous` listing them.
pub async fn resume_run(
    gw: &Arc<Gateway>,
    principal: &Principal,
    run_id: &str,
    tool_call_id: Option<&str>,
    data: Value,
) -> Result<Outcome, ApiError> {
    let run = run_id.to_owned();
    let suspended: Vec<CallRecord> = gw
        .store_op(move |s| s.suspended_in_run(&run))
        .await?
        .into_iter()
        .filter(|c| may_resume(principal, c))
        .filter(|c| tool_call_id.is_none_or(|t| super::tool_call_id(c) == t))
        .collect();
    match suspended.as_slice() {
        [] => Err(ApiError::new(
            Code::CallNotFound,
            format!("run `{run_id}` has no suspended call to resume"),
        )),
        [one] => resume(gw, principal, &one.call_id, data, IfRefused::StaysSuspended).await,
        many => Err(ApiError::new(
            Code::CallAmbiguous,
            format!(
                "run `{run_id}` has {} suspended calls: resume one by `tool_call_id`, or by call id",
                many.len()
            ),
        )
        .with_details(json!({
            "calls": many.iter().map(|c| json!({
                "call_id": c.call_id, "tool": c.tool, "tool_call_id": super::tool_call_id(c),
            })).collect::<Vec<_>>(),
        }))),
    }
}

/// Whether a resume schema can be sent as an MCP form elicitation: an object whose
/// properties are all primitives (string, number, integer, boolean, single-select enums), or
/// multi-select enums (an array of strings from a list), as MCP's form mode allows.
pub fn is_flat(schema: &Value) -> bool {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return false;
    };
    let multi_select = |p: &Value| {
        p.get("items")
            .is_some_and(|i| i.get("enum").is_some() || i.get("anyOf").is_some())
    };
    schema.get("type").and_then(Value::as_str) == Some("object")
        && props
            .values()
            .all(|p| match p.get("type").and_then(Value::as_str) {
                Some("string" | "number" | "integer" | "boolean") => true,
                Some("array") => multi_select(p),
                _ => false,
            })
}

/// Whether every property of a resume schema is a single primitive (what the inbox's
/// generated form shows as one field each).
pub fn is_primitive_object(schema: &Value) -> bool {
    is_flat(schema)
        && schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| {
                p.values()
                    .all(|p| p.get("type").and_then(Value::as_str) != Some("array"))
            })
}

/// What an agent's client answered a form elicitation of a suspended call (an MCP
/// `ElicitResult`): `accept` resumes the call with `content`; `decline` and `cancel` cancel
/// the call, since nobody will give the input it waits for.
pub async fn answer_input(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call_id: &str,
    elicit_result: &Value,
) -> Result<Outcome, ApiError> {
    match elicit_result.get("action").and_then(Value::as_str) {
        Some("accept") => {
            let content = elicit_result
                .get("content")
                .cloned()
                .unwrap_or_else(|| json!({}));
            // The client gets a final result for its call: a refusal ends it.
            resume(gw, principal, call_id, content, IfRefused::Ends).await
        }
        Some(action @ ("decline" | "cancel")) => {
            super::cancel(gw, principal, call_id).await?;
            Err(ApiError::new(
                Code::CallCancelled,
                format!(
                    "the input the tool asked for was refused ({action}); the call is cancelled"
                ),
            )
            .with_details(json!({"call_id": call_id})))
        }
        _ => Err(ApiError::new(
            Code::RequestInvalidField,
            "an elicitation answer needs `action`: accept, decline or cancel",
        )),
    }
}

/// Waits up to `wait` while a suspended call is resumed elsewhere (the inbox, the API) and
/// runs, then answers with its state: completed, failed, or still suspended.
pub async fn wait_resumed(
    gw: &Arc<Gateway>,
    call_id: &str,
    wait: std::time::Duration,
) -> Result<Outcome, ApiError> {
    let call = super::wait_while(gw, call_id, wait, |s| {
        matches!(s, CallStatus::Suspended | CallStatus::Executing)
    })
    .await?;
    respond(gw, call).await
}
