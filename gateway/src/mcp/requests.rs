//! MCP requests other than `tools/call` that reach an upstream, judged by the live policy
//! before they are sent: `resources/read` and `resources/subscribe` (kind `resource`, by their
//! URI), `prompts/get` (`prompt`, by its visible name) and `completion/complete`
//! (`completion`, by the prompt or resource its `ref` names). The request's `params` (without
//! `_meta`) are what CEL reads as `args`, and what is fingerprinted, with the kind and the
//! target (`{"kind", "target", "params"}`, RFC 8785).
//!
//! A refused request is a JSON-RPC error (`-32003`, `data.code` = `policy.denied`), since only
//! a tool's result has `isError`; every decision is audited (`request.decided`) and counted
//! (`airlock_requests_total`). Such requests are allowed or denied, never held: the policy
//! loader refuses `require_approval` for them, and one that a failing rule would hold is
//! refused. Classifiers run for tool calls only: a rule of another kind that names one fails,
//! and is refused. Unsubscribing and the lists are not judged here.

use std::sync::Arc;

use airlock_policy::{evaluate, Decision, DecisionKind, Input, OwnedRequest, ToolCall};
use airlock_storage::Principal;
use serde_json::{json, Map, Value};

use super::wire::{RpcError, INVALID_PARAMS};
use crate::clock::{now_ms, to_system_time};
use crate::error::Code;
use crate::state::{audit_fields, Gateway};

/// The JSON-RPC error of a request policy refused.
pub const REFUSED: i64 = -32003;

/// Decides `request` (with its `params`) for `principal`: `Ok` to send it on, or the error to
/// answer. Audited and counted either way.
pub(super) async fn judge(
    gw: &Arc<Gateway>,
    principal: &Principal,
    request: &OwnedRequest,
    params: &Value,
    id: &Value,
) -> Result<(), RpcError> {
    let context = json!({"agent_id": principal.id});
    let call = ToolCall::request(
        request.kind,
        request.target(),
        params.clone(),
        Some(context),
    )
    .map_err(|e| {
        RpcError::new(id.clone(), INVALID_PARAMS, e.to_string())
            .with_data(json!({"code": e.code()}))
    })?;
    let now = now_ms();
    let request_id = airlock_storage::new_id("req");
    let (decision, shadow) = decide(gw, principal, request, &call, &request_id, now);
    let allowed = decision.decision == DecisionKind::Allow;
    gw.metrics
        .requests
        .with_label_values(&[
            request.kind.as_str(),
            if allowed { "allow" } else { "deny" },
        ])
        .inc();
    let mut fields = audit(gw, principal, request, &call, &decision, shadow.as_ref());
    fields.insert("request_id".into(), request_id.into());
    if let Err(e) = gw
        .store_op(move |s| s.append_audit(airlock_storage::Kind::RequestDecided, fields, now))
        .await
    {
        // Not audited: not sent.
        return Err(
            RpcError::new(id.clone(), -32603, e.message.clone()).with_data(json!({"code": e.code}))
        );
    }
    if allowed {
        Ok(())
    } else {
        Err(refusal(request, &decision, id))
    }
}

/// The live verdict on `call`, and the shadow set's (which it shows, and which changes
/// nothing).
fn decide(
    gw: &Gateway,
    principal: &Principal,
    request: &OwnedRequest,
    call: &ToolCall,
    request_id: &str,
    now: u64,
) -> (Decision, Option<Decision>) {
    let who = crate::pipeline::decide::principal_json(principal);
    let none = Default::default();
    let input = Input {
        tool: "",
        args: &call.args,
        context: &call.context,
        principal: &who,
        fingerprint: call.fingerprint.as_str(),
        now: to_system_time(now),
        classifiers: &none,
        resume: None,
        definition: None,
        request: request.as_request(),
    };
    let decision = evaluate(&gw.policy.load(), &input);
    let shadow = gw.shadow.set().map(|set| evaluate(&set, &input));
    if let Some(s) = &shadow {
        let what = format!("{} {}", request.kind.as_str(), request.target());
        gw.shadow
            .observe(request_id, &what, &principal.id, now, &decision, s);
    }
    (decision, shadow)
}

/// The `request.decided` record: what a replay needs to judge it again (the params, redacted
/// as a call's args are, the context and the principal as policy saw them), the verdict, and
/// the shadow's when it differs.
fn audit(
    gw: &Gateway,
    principal: &Principal,
    request: &OwnedRequest,
    call: &ToolCall,
    decision: &Decision,
    shadow: Option<&Decision>,
) -> Map<String, Value> {
    let mut fields = airlock_storage::principal_fields(principal);
    fields.extend(audit_fields(json!({
        "request_kind": request.kind.as_str(), "server": request.server, "uri": request.uri,
        "prompt": request.prompt, "args": airlock_storage::redact(&call.args, &gw.config.redact),
        "context": call.context, "fingerprint": call.fingerprint.as_str(),
        "decision": decision.decision.as_str(), "rules": decision.rules,
        "errors": decision.errors, "policy_version": decision.policy_version,
    })));
    if let Some(s) = shadow.filter(|s| crate::shadow::differs(decision, s)) {
        fields.insert("shadow".into(), crate::shadow::record(decision, s));
    }
    fields
}

/// A refused request's JSON-RPC error: the deny rules' messages in words, or why a request a
/// failing rule would hold is refused.
fn refusal(request: &OwnedRequest, decision: &Decision, id: &Value) -> RpcError {
    let kind = request.kind.as_str();
    let message = match decision.decision {
        DecisionKind::RequireApproval => format!(
            "a rule for this {kind} failed to evaluate ({}), and a {kind} is never held for approval: refused",
            decision
                .errors
                .iter()
                .map(|e| format!("`{}`: {}", e.rule, e.reason))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        _ if decision.messages.is_empty() => format!("denied by policy: this {kind} is not allowed"),
        _ => decision
            .messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    };
    RpcError::new(id.clone(), REFUSED, message.clone()).with_data(json!({
        "code": Code::PolicyDenied, "message": message, "kind": kind,
        "rules": decision.rules, "policy_version": decision.policy_version,
    }))
}
