//! The pipeline's outcome as an MCP `tools/call` result (DESIGN §10), for [`super::calls`]
//! and [`super::tasks`] alike:
//!
//! - completed: the upstream's result unchanged (an HTTP backend's answer is wrapped as text
//!   and `structuredContent`); an upstream's own `input_required`, relayed, its state sealed
//!   inside ours;
//! - refused (deny, decline, expiry, upstream failure): an `isError` result whose
//!   `structuredContent.error` (or `_meta["airlock/error"]` for a tool with an
//!   `outputSchema`) names the code, for the model to read;
//! - waiting for approval or input, for a 2026-07-28 client that takes it: `input_required`
//!   with a sealed, single-use `requestState`; else an `approval.pending` or
//!   `call.suspended` result.
//!
//! It shapes answers; it runs nothing and waits for nothing.

use airlock_policy::ToolCall;
use airlock_storage::Principal;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::seal::{self, State};
use super::wire::{self, RpcError};
use super::{rpc_error, Exchange, McpFront};
use crate::auth::random_hex;
use crate::backends::mcp::required_capabilities;
use crate::body::{json_bytes_response, Body};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::pipeline::{self, suspend, Outcome};
use crate::state::Gateway;

/// The key of our one input request in an `input_required` result.
const INPUT_KEY: &str = "airlock_approval";

/// The key of a suspended call's input request (DESIGN §11).
pub(super) const SUSPEND_KEY: &str = "airlock_input";

/// The pipeline's answer as a JSON-RPC response.
pub fn answer(
    gw: &Gateway,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    id: Value,
    call: &ToolCall,
    outcome: Result<Outcome, ApiError>,
) -> Response<Body> {
    if let Err(e) = &outcome {
        if e.code == Code::McpMissingCapability {
            let required = required_capabilities(e);
            let e = RpcError::new(id, wire::MISSING_CAPABILITY, e.message.clone())
                .with_data(json!({"requiredCapabilities": required}));
            return rpc_error(&e, exchange.modern());
        }
    }
    let result = tool_result(gw, front, principal, exchange, call, outcome);
    json_bytes_response(StatusCode::OK, wire::result_bytes(&id, &result))
}

/// The MCP result for an outcome.
pub fn tool_result(
    gw: &Gateway,
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    call: &ToolCall,
    outcome: Result<Outcome, ApiError>,
) -> Value {
    let modern = exchange.modern();
    let refusal = !matches!(outcome, Ok(Outcome::Completed(_)));
    let result = match outcome {
        // An upstream's own input request, relayed (only when the client takes it): its
        // keys and params unchanged, its state sealed inside ours.
        Ok(Outcome::Completed(c)) if is_input_required(&c) => {
            return relayed_input(front, principal, call, c)
        }
        Ok(Outcome::Completed(c)) => match c.upstream_status {
            // An MCP upstream's result, unchanged.
            None => c.result,
            Some(status) => {
                let mut r = json!({
                    "content": [{"type": "text", "text": text_of(&c.result)}],
                    "isError": status >= 400,
                });
                if c.result.is_object() {
                    r["structuredContent"] = c.result.clone();
                }
                r
            }
        },
        Ok(Outcome::Pending(p)) if modern && exchange.url_elicitation() => {
            return approval_input(gw, front, principal, call, &p)
        }
        Ok(Outcome::Suspended(v))
            if modern && (exchange.url_elicitation() || exchange.form_elicitation()) =>
        {
            let form = exchange.form_elicitation() && suspend::is_flat(&v.resume_schema);
            let state = State {
                v: 1,
                nonce: String::new(),
                approval_id: String::new(),
                call_id: v.call_id.clone(),
                principal: principal.id.clone(),
                tool: call.tool.clone(),
                fingerprint: call.fingerprint.to_string(),
                expires_at: v.expires_at,
                suspension: Some(v.count),
                by_url: !form,
                relay: None,
                parked: None,
            };
            return sealed_input(front, SUSPEND_KEY, input_request(gw, &v, form), state);
        }
        Ok(Outcome::Suspended(v)) => error_result(
            Code::CallSuspended.as_str(),
            &format!(
                "`{}` is suspended, waiting for input: {}. Resume it with data fitting `resume_schema` (POST /v1/calls/{}/resume, or the link).",
                call.tool, text_of(&v.payload), v.call_id
            ),
            json!({
                "call_id": v.call_id, "payload": v.payload, "resume_schema": v.resume_schema,
                "link": crate::approvals::resume_link(&gw.config, &v.call_id),
            }),
        ),
        Ok(Outcome::Pending(p)) => error_result(
            "approval.pending",
            &format!(
                "`{}` is waiting for approval ({}). Call the tool again later with exactly the same arguments to get its result.",
                call.tool, p.approval_id
            ),
            json!({"approval_id": p.approval_id, "call_id": p.call_id, "link": link(gw, &p.approval_id)}),
        ),
        Err(e) => refusal_result(gw, &e),
    };
    finish_refusal(gw, modern, &call.tool, refusal, result)
}

/// A call refused before it reached the pipeline's decision (its tool's definition waits for
/// review, its upstream was never reached): an `isError` result the model reads, as any
/// refusal of a call.
pub fn refused_tool(gw: &Gateway, exchange: &Exchange, tool: &str, e: &ApiError) -> Value {
    finish_refusal(gw, exchange.modern(), tool, true, refusal_result(gw, e))
}

fn finish_refusal(
    gw: &Gateway,
    modern: bool,
    tool: &str,
    refusal: bool,
    mut result: Value,
) -> Value {
    if refusal && gw.backends.mcp.declares_output_schema(tool) {
        refusal_into_meta(&mut result);
    }
    if modern {
        if let Some(o) = result.as_object_mut() {
            o.entry("resultType")
                .or_insert(Value::String("complete".into()));
        }
    }
    result
}

/// A refusal as an `isError` result: the code, the message, and what of its details the model
/// can use (the rules, the reason, the approval and its link).
fn refusal_result(gw: &Gateway, e: &ApiError) -> Value {
    let mut extra = json!({});
    if let Some(d) = e.details.as_object() {
        for k in ["rules", "reason", "approval_id", "call_id", "declined"] {
            if let Some(v) = d.get(k) {
                extra[k] = v.clone();
            }
        }
    }
    if let Some(a) = extra
        .get("approval_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
    {
        extra["link"] = Value::String(link(gw, &a));
    }
    error_result(e.code.as_str(), &e.message, extra)
}

/// An upstream's own `input_required`, relayed to a client that takes it: its keys and params
/// unchanged, its `requestState` sealed inside ours (DESIGN §15).
fn relayed_input(
    front: &McpFront,
    principal: &Principal,
    call: &ToolCall,
    c: pipeline::Completed,
) -> Value {
    let state = State {
        v: 1,
        nonce: String::new(),
        approval_id: String::new(),
        call_id: c.call_id.clone(),
        principal: principal.id.clone(),
        tool: call.tool.clone(),
        fingerprint: call.fingerprint.to_string(),
        expires_at: now_ms() + RELAY_TTL_MS,
        suspension: None,
        by_url: false,
        relay: Some(seal::Relayed {
            upstream_state: c.result.get("requestState").cloned(),
        }),
        parked: None,
    };
    let mut r = c.result;
    r["requestState"] = match random_hex(16) {
        Ok(nonce) => Value::String(seal::seal(&front.state_key, &State { nonce, ..state })),
        Err(e) => return error_result(e.code.as_str(), &e.message, json!({})),
    };
    r
}

/// A 2026-07-28 client that opens URLs is asked to open the approval's inbox page; its retry
/// brings back the sealed state that finds the call again.
pub(super) fn approval_input(
    gw: &Gateway,
    front: &McpFront,
    principal: &Principal,
    call: &ToolCall,
    p: &pipeline::Pending,
) -> Value {
    let request = json!({
        "method": "elicitation/create",
        "params": {
            "mode": "url",
            "url": link(gw, &p.approval_id),
            "message": format!("`{}` needs approval. Open the link to see the call and decide; then the call continues.", airlock_policy::subject(&call.tool, call.request.as_deref())),
        },
    });
    let state = State {
        v: 1,
        nonce: String::new(),
        approval_id: p.approval_id.clone(),
        call_id: p.call_id.clone(),
        principal: principal.id.clone(),
        tool: call.tool.clone(),
        fingerprint: call.fingerprint.to_string(),
        // The approval's own expiry, plus time to come back once it is decided.
        expires_at: p.expires_at + 15 * 60 * 1000,
        suspension: None,
        by_url: false,
        relay: None,
        parked: None,
    };
    sealed_input(front, INPUT_KEY, request, state)
}

/// Clients validate `structuredContent` against the tool's `outputSchema`, error or not (the
/// TypeScript SDK 1.x, the Inspector): for such a tool our refusal goes in `_meta` instead, and
/// its text content says the same (DESIGN §10).
fn refusal_into_meta(result: &mut Value) {
    if let Some(error) = result
        .as_object_mut()
        .and_then(|o| o.remove("structuredContent"))
        .and_then(|mut s| s.get_mut("error").map(Value::take))
    {
        result["_meta"] = json!({"airlock/error": error});
    }
}

/// A 2026-07-28 `input_required` result asking `request` under `key`, with `state` sealed
/// under a fresh single-use nonce (what a retry must bring back).
pub(super) fn sealed_input(front: &McpFront, key: &str, request: Value, mut state: State) -> Value {
    state.nonce = match random_hex(16) {
        Ok(n) => n,
        Err(e) => return error_result(e.code.as_str(), &e.message, json!({})),
    };
    json!({
        "resultType": "input_required",
        "inputRequests": {key: request},
        "requestState": seal::seal(&front.state_key, &state),
    })
}

/// How long a relayed input request's state may be answered.
const RELAY_TTL_MS: u64 = 60 * 60 * 1000;

/// An MCP upstream's `input_required`, handed back by the backend because the client takes it.
pub(super) fn is_input_required(c: &pipeline::Completed) -> bool {
    c.upstream_status.is_none()
        && c.result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// An `isError` result the model reads: the code and message as text, and in
/// `structuredContent.error`.
fn error_result(code: &str, message: &str, extra: Value) -> Value {
    let mut error = json!({"code": code, "message": message});
    if let Some(x) = extra.as_object() {
        for (k, v) in x {
            error[k] = v.clone();
        }
    }
    json!({
        "content": [{"type": "text", "text": format!("{code}: {message}")}],
        "structuredContent": {"error": error},
        "isError": true,
    })
}

/// The `elicitation/create` params asking for a suspended call's input: the form itself
/// when `form`, else the link to the inbox's resume form.
pub fn input_request(gw: &Gateway, v: &pipeline::Suspended, form: bool) -> Value {
    let message = match pipeline::question_of(&v.payload) {
        Some(m) => m.to_owned(),
        None => format!(
            "`{}` needs input to continue: {}",
            v.tool,
            text_of(&v.payload)
        ),
    };
    let params = if form {
        json!({"mode": "form", "message": message, "requestedSchema": v.resume_schema})
    } else {
        json!({
            "mode": "url",
            "url": crate::approvals::resume_link(&gw.config, &v.call_id),
            "elicitationId": format!("{}-{}", v.call_id, v.count),
            "message": format!("{message} (open the link to answer)"),
        })
    };
    json!({"method": "elicitation/create", "params": params})
}

pub(super) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The inbox page of an approval.
pub fn link(gw: &Gateway, approval_id: &str) -> String {
    crate::approvals::inbox_link(&gw.config, approval_id)
}
