//! Approvals as the outside world sees them: the JSON view of an approval record (the API,
//! events, webhook payloads), the links to decide it, and a finished call's event. Views only:
//! deciding is [`crate::pipeline::decide`], storing is the store's.

use std::time::Duration;

use airlock_policy::format_duration;
use airlock_storage::Approval;
use serde_json::{json, Value};

use crate::clock::rfc3339;
use crate::config::Config;

/// An approval as the API shows it.
pub fn approval_json(a: &Approval) -> Value {
    json!({
        "id": a.id,
        "kind": a.kind.as_str(),
        "call_id": a.call_id,
        "tool": a.tool,
        "args": a.args,
        "fingerprint": a.fingerprint,
        "requester": {"principal": a.requester.id, "actor": a.requester.actor, "context": a.context},
        "policy_version": a.policy_version,
        "rules": a.rules,
        "explanation": a.explanation,
        "approvers": a.approvers,
        "quorum": a.quorum,
        "status": a.status.as_str(),
        "decisions": a.decisions.iter().map(|d| json!({
            "by": d.by, "decision": d.decision, "reason": d.reason, "at": rfc3339(d.at), "fingerprint": d.fingerprint, "auth": d.auth,
        })).collect::<Vec<_>>(),
        "created_at": rfc3339(a.created_at),
        "expires_at": rfc3339(a.expires_at),
        "decided_at": a.decided_at.map(rfc3339),
        "grant": terms_json(a),
        "edited_args": a.edited_args,
        "edited_fingerprint": a.edited_fingerprint,
    })
}

/// An approval as events (SSE, webhooks) carry it: the record plus links to decide it (the
/// API's) and to see it (its inbox page, where a person signs in and decides).
pub fn approval_event(config: &Config, a: &Approval) -> Value {
    let mut v = approval_json(a);
    let base = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen));
    v["links"] = json!({
        "approve": format!("{base}/v1/approvals/{}/approve", a.id),
        "decline": format!("{base}/v1/approvals/{}/decline", a.id),
        "self": format!("{base}/v1/approvals/{}", a.id),
        "inbox": inbox_link(config, &a.id),
    });
    v
}

/// The inbox page of an approval: `<public_url>/inbox/approvals/{id}`.
pub fn inbox_link(config: &Config, approval_id: &str) -> String {
    format!("{}/inbox/approvals/{approval_id}", public_base(config))
}

/// The inbox page where a suspended call's resume form is (DESIGN §11).
pub fn resume_link(config: &Config, call_id: &str) -> String {
    format!("{}/inbox/calls/{call_id}", public_base(config))
}

fn public_base(config: &Config) -> String {
    let base = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen));
    base.trim_end_matches('/').to_owned()
}

/// A finished call as `call.completed` events carry it.
pub fn call_completed_event(call: &airlock_storage::CallRecord) -> Value {
    json!({
        "call_id": call.call_id,
        "tool": call.tool,
        "status": call.status.as_str(),
        "approval_id": call.approval_id,
        "upstream_status": call.outcome.as_ref().and_then(|o| o.upstream_status),
    })
}

/// What an approval lets its approver choose: the rule's terms and the maxima.
pub fn terms_json(a: &Approval) -> Value {
    let max = a.grant.maxima();
    json!({
        "uses": a.grant.uses,
        "ttl": format_duration(Duration::from_millis(a.grant.ttl_ms)),
        "scope": a.grant.scope,
        "max_uses": max.uses,
        "max_ttl": format_duration(Duration::from_millis(max.ttl_ms)),
        "max_scope": max.scope.as_str(),
    })
}
