//! MCP requests other than `tools/call` that reach an upstream, judged by the live policy
//! before they are sent: `resources/read` and `resources/subscribe` (kind `resource`, by their
//! URI), `prompts/get` (`prompt`, by its visible name) and `completion/complete`
//! (`completion`, by the prompt or resource its `ref` names). Where each goes is the
//! backend's ([`crate::backends::mcp::Registry::route_request`]). The request's `params` (without `_meta`,
//! `requestState` and `inputResponses`) are what CEL reads as `args`, and what is
//! fingerprinted, with the kind and the target (`{"kind", "target", "params"}`, RFC 8785).
//!
//! - Allowed: sent on. Denied: a JSON-RPC error (`-32003`, `data.code` = `policy.denied`),
//!   since only a tool's result has `isError`. Both audited `request.decided` and counted
//!   (`airlock_requests_total`).
//! - Held: the pipeline's grant, join and hold stages, as a tool call's
//!   ([`crate::pipeline::hold_request`]); the client is told as a held tool call's is told,
//!   in its revision: a 2026-07-28 client that opens URLs gets `input_required` with the
//!   approval's inbox link and a sealed `requestState`, whose retry finds the request again; a
//!   2025-11-25 client that opens URLs gets the URL elicitation error (`-32042`), and its retry
//!   of the same request joins the approval and, once approved, runs it; any other client
//!   waits `server.hold_timeout`, then gets `-32003` with `data.code = approval.pending`. A
//!   subscription is never held (it would open upstream long after, outside the client's
//!   session): one policy would hold is refused, `data.code = approval.required`.
//!
//! Classifiers run for tool calls only: a rule of another kind that names one fails, toward
//! its rule. Unsubscribing and the lists are not judged here.

use std::sync::Arc;

use airlock_policy::{evaluate, Decision, DecisionKind, Input, OwnedRequest, ToolCall};
use airlock_storage::Principal;
use serde_json::{json, Map, Value};

use super::results::{approval_input, link};
use super::wire::{RpcError, INVALID_PARAMS};
use super::{Exchange, McpFront};
use crate::backends::mcp::Unrouted;
use crate::clock::{now_ms, to_system_time};
use crate::error::{ApiError, Code};
use crate::pipeline::{self, Front, Hold, Outcome};
use crate::state::{audit_fields, Gateway};

/// The JSON-RPC error of a request policy or an approver refused.
pub const REFUSED: i64 = -32003;

/// The 2025-11-25 error that asks the client to open a URL, then retry.
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// `data.code` of a held request still waiting for its approval.
const APPROVAL_PENDING: &str = "approval.pending";

/// `data.code` of a subscription to a resource that policy holds for approval.
const APPROVAL_REQUIRED: &str = "approval.required";

/// Where a request is answered: the gateway, the MCP front and the client's exchange.
pub(super) struct Asker<'a> {
    pub gw: &'a Arc<Gateway>,
    pub front: &'a Arc<McpFront>,
    pub principal: &'a Principal,
    pub exchange: &'a Exchange,
}

/// `resources/read|subscribe|unsubscribe`, `prompts/get`, `completion/complete`: routed,
/// judged (an unsubscription is not: it only stops what was allowed), then sent, refused or
/// held.
pub(super) async fn serve(
    ask: &Asker<'_>,
    method: &str,
    params: &Value,
    id: &Value,
) -> Result<Value, RpcError> {
    let sent = without(params, &["_meta"]);
    let judged = without(params, &["_meta", "requestState", "inputResponses"]);
    let route = match ask.gw.backends.mcp.route_request(method, &judged) {
        Ok(r) => r,
        Err(Unrouted::Nothing) => {
            return Ok(json!({"completion": {"values": [], "hasMore": false}}))
        }
        Err(Unrouted::Unknown(why)) => {
            return Err(RpcError::new(id.clone(), INVALID_PARAMS, why)
                .with_data(json!({"uri": judged.get("uri"), "name": judged.get("name")})))
        }
    };
    // The upstream's own names, and what the client sent beside the judged params (a 2026
    // upstream's `requestState` and `inputResponses`, relayed as they are).
    let mut upstream = sent;
    for (k, v) in route.params.as_object().into_iter().flatten() {
        upstream[k] = v.clone();
    }
    if method != "resources/unsubscribe" {
        let call = call_of(&route.request, judged, ask.principal, id)?;
        // A 2026 retry of a request we held: the state we sealed finds it again.
        if let Some(state) = params.get("requestState").filter(|s| ours(ask.front, s)) {
            return retried(ask, &call, state, id).await;
        }
        match judge(ask.gw, ask.principal, &route.request, &call, id).await? {
            Judged::Send => {}
            Judged::Hold(_) if method == "resources/subscribe" => {
                return Err(refused(id, APPROVAL_REQUIRED, "this resource needs an approver's yes to be read, and a subscription is never held for one: read it instead", json!({"kind": "resource"})))
            }
            Judged::Hold(held) => return hold(ask, call, *held, id).await,
        }
    }
    super::pass(&route.server, method, upstream, route.want).await
}

/// `params` without the members named.
fn without(params: &Value, keys: &[&str]) -> Value {
    let mut p = params.clone();
    if let Some(o) = p.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    p
}

/// The call policy judges for `request` with its judged `params`.
fn call_of(
    request: &OwnedRequest,
    params: Value,
    principal: &Principal,
    id: &Value,
) -> Result<ToolCall, RpcError> {
    let context = json!({"agent_id": principal.id});
    ToolCall::request(request.clone(), params, Some(context)).map_err(|e| {
        RpcError::new(id.clone(), INVALID_PARAMS, e.to_string())
            .with_data(json!({"code": e.code()}))
    })
}

/// What policy made of a request.
enum Judged {
    Send,
    /// Held: the decisions and when they were made, for the pipeline.
    Hold(Box<Held>),
}

struct Held {
    call_id: String,
    decision: Decision,
    shadow: Option<Decision>,
    now: u64,
}

/// Decides `call` (the `request` with its params) for `principal`: sent on, refused (the error
/// to answer), or held. Counted either way; an allowed or denied one is audited here
/// (`request.decided`), a held one by the pipeline with its call.
async fn judge(
    gw: &Arc<Gateway>,
    principal: &Principal,
    request: &OwnedRequest,
    call: &ToolCall,
    id: &Value,
) -> Result<Judged, RpcError> {
    let now = now_ms();
    let (decision, shadow) = decide(gw, principal, call, now);
    gw.metrics
        .requests
        .with_label_values(&[request.kind.as_str(), decision.decision.as_str()])
        .inc();
    if decision.decision == DecisionKind::RequireApproval {
        let call_id = airlock_storage::new_id("call");
        if let Some(s) = &shadow {
            gw.shadow.observe(
                &call_id,
                &request.subject(),
                &principal.id,
                now,
                &decision,
                s,
            );
        }
        return Ok(Judged::Hold(Box::new(Held {
            call_id,
            decision,
            shadow,
            now,
        })));
    }
    let request_id = airlock_storage::new_id("req");
    if let Some(s) = &shadow {
        gw.shadow.observe(
            &request_id,
            &request.subject(),
            &principal.id,
            now,
            &decision,
            s,
        );
    }
    let mut fields = audit(gw, principal, call, &decision, shadow.as_ref());
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
    match decision.decision {
        DecisionKind::Allow => Ok(Judged::Send),
        _ => Err(denial(request, &decision, id)),
    }
}

/// The live verdict on `call`, and the shadow set's (which changes nothing).
fn decide(
    gw: &Gateway,
    principal: &Principal,
    call: &ToolCall,
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
        request: call.judged_as(),
    };
    let decision = evaluate(&gw.policy.load(), &input);
    let shadow = gw.shadow.set().map(|set| evaluate(&set, &input));
    (decision, shadow)
}

/// The `request.decided` record: what a replay needs to judge it again (the params, redacted
/// as a call's args are, the context and the principal as policy saw them), the verdict, and
/// the shadow's when it differs.
fn audit(
    gw: &Gateway,
    principal: &Principal,
    call: &ToolCall,
    decision: &Decision,
    shadow: Option<&Decision>,
) -> Map<String, Value> {
    let mut fields = airlock_storage::principal_fields(principal);
    if let Some(r) = &call.request {
        fields.extend(airlock_storage::request_fields(r));
    }
    fields.extend(audit_fields(json!({
        "args": airlock_storage::redact(&call.args, &gw.config.redact),
        "context": call.context, "fingerprint": call.fingerprint.as_str(),
        "decision": decision.decision.as_str(), "rules": decision.rules,
        "errors": decision.errors, "policy_version": decision.policy_version,
    })));
    if let Some(s) = shadow.filter(|s| crate::shadow::differs(decision, s)) {
        fields.insert("shadow".into(), crate::shadow::record(decision, s));
    }
    fields
}

/// A denied request's JSON-RPC error: the deny rules' messages in words.
fn denial(request: &OwnedRequest, decision: &Decision, id: &Value) -> RpcError {
    let kind = request.kind.as_str();
    let message = if decision.messages.is_empty() {
        format!("denied by policy: this {kind} is not allowed")
    } else {
        decision
            .messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    refused(
        id,
        Code::PolicyDenied.as_str(),
        &message,
        json!({"kind": kind, "rules": decision.rules, "policy_version": decision.policy_version}),
    )
}

/// A `-32003` error with `data.code`, `data.message` and the `extra` members.
fn refused(id: &Value, code: &str, message: &str, extra: Value) -> RpcError {
    let mut data = json!({"code": code, "message": message});
    for (k, v) in extra.as_object().into_iter().flatten() {
        data[k] = v.clone();
    }
    RpcError::new(id.clone(), REFUSED, message).with_data(data)
}

/// A held request through the pipeline, answered as the client's revision and capabilities
/// allow (see the module's doc).
async fn hold(ask: &Asker<'_>, call: ToolCall, held: Held, id: &Value) -> Result<Value, RpcError> {
    let Asker {
        gw,
        principal,
        exchange,
        ..
    } = *ask;
    let hold = if exchange.url_elicitation() {
        Hold::Async
    } else {
        Hold::Wait(gw.config.hold_timeout)
    };
    let front = Front::mcp(Some(exchange.revision), exchange.session.clone());
    let outcome = pipeline::hold_request(
        gw,
        held.call_id,
        principal.clone(),
        call.clone(),
        held.decision,
        held.shadow,
        front,
        held.now,
        hold,
    )
    .await;
    answer(ask, &call, outcome, id)
}

/// A 2026-07-28 retry with the state of our `input_required`: redeemed once, then the held
/// request's outcome (run once, if it was approved), waiting `server.hold_timeout` for it.
async fn retried(
    ask: &Asker<'_>,
    call: &ToolCall,
    state: &Value,
    id: &Value,
) -> Result<Value, RpcError> {
    let Asker {
        gw,
        front,
        principal,
        exchange,
    } = *ask;
    let tag = Front::mcp(Some(exchange.revision), exchange.session.clone());
    let state = super::calls::redeem(gw, front, &tag, principal, call, state)
        .await
        .map_err(|why| {
            RpcError::new(
                id.clone(),
                INVALID_PARAMS,
                format!("invalid requestState: {why}"),
            )
            .with_data(json!({"code": Code::ApprovalInvalidState}))
        })?;
    let outcome =
        pipeline::call_outcome(gw, principal, &state.call_id, gw.config.hold_timeout, true).await;
    answer(ask, call, outcome, id)
}

/// Whether a `requestState` is one this gateway sealed (else it is an upstream's, relayed).
fn ours(front: &McpFront, state: &Value) -> bool {
    state
        .as_str()
        .is_some_and(|s| super::seal::open(&front.state_key, s).is_some())
}

/// A held request's outcome as its JSON-RPC answer.
fn answer(
    ask: &Asker<'_>,
    call: &ToolCall,
    outcome: Result<Outcome, ApiError>,
    id: &Value,
) -> Result<Value, RpcError> {
    let Asker {
        gw,
        front,
        principal,
        exchange,
    } = *ask;
    let subject = airlock_policy::subject(&call.tool, call.request.as_deref());
    match outcome {
        // The upstream's JSON-RPC answer, whole: its result, or its error as it is.
        Ok(Outcome::Completed(c)) => match c.result.get("error") {
            Some(e) => Err(RpcError {
                id: id.clone(),
                code: e["code"].as_i64().unwrap_or(-32603),
                message: e["message"].as_str().unwrap_or_default().to_owned(),
                data: e.get("data").cloned(),
            }),
            None => Ok(c.result.get("result").cloned().unwrap_or_else(|| json!({}))),
        },
        Ok(Outcome::Pending(p)) if exchange.modern() && exchange.url_elicitation() => {
            Ok(approval_input(gw, front, principal, call, &p))
        }
        Ok(Outcome::Pending(p)) if exchange.url_elicitation() => {
            let message = format!("The {subject} needs approval. Open the link to see it and decide; then ask again.");
            Err(RpcError::new(id.clone(), URL_ELICITATION_REQUIRED, message.clone()).with_data(json!({
                "elicitations": [{
                    "mode": "url", "elicitationId": p.approval_id, "url": link(gw, &p.approval_id),
                    "message": message,
                }],
            })))
        }
        Ok(Outcome::Pending(p)) => Err(refused(
            id,
            APPROVAL_PENDING,
            &format!("the {subject} waits for an approver; ask again with the same params once it is decided"),
            json!({"approval_id": p.approval_id, "call_id": p.call_id, "url": link(gw, &p.approval_id)}),
        )),
        Ok(Outcome::Suspended(_)) => Err(refused(id, Code::Internal.as_str(), "a request was suspended; only tool calls suspend", json!({}))),
        Err(e) => Err(refused(id, e.code.as_str(), &e.message, e.details.clone())),
    }
}
