//! Approvals as events carry them: an approval's face (handed in by the door, see
//! [`crate::events::ApprovalFace`]) with the links to decide and see it, the inbox's links,
//! the one line that says why a call waits, and a finished call's event. Views only: deciding
//! is [`crate::pipeline::decide`], storing is the store's.

use serde_json::{json, Value};

use crate::config::Config;

/// An approval as events (SSE, webhooks) carry it: its face (`face`, the JSON API's view of
/// approval `id`) plus links to decide it (the API's) and to see it (its inbox page, where a
/// person signs in and decides).
pub fn approval_event(config: &Config, id: &str, face: Value) -> Value {
    let mut v = face;
    let base = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", config.listen));
    v["links"] = json!({
        "approve": format!("{base}/v1/approvals/{id}/approve"),
        "decline": format!("{base}/v1/approvals/{id}/decline"),
        "self": format!("{base}/v1/approvals/{id}"),
        "inbox": inbox_link(config, id),
    });
    v
}

/// What an approval's face (JSON) holds: the kind (a tool call, or an MCP request's), and in
/// words the tool's name or what the request asks.
pub fn subject_of(face: &Value) -> (airlock_policy::RequestKind, String) {
    let request =
        serde_json::from_value::<airlock_policy::OwnedRequest>(face["request"].clone()).ok();
    let tool = face["tool"].as_str().unwrap_or("");
    (
        request
            .as_ref()
            .map_or(airlock_policy::RequestKind::Tool, |r| r.kind),
        airlock_policy::subject(tool, request.as_ref()),
    )
}

/// The inbox page of an approval: `<public_url>/inbox/approvals/{id}`.
pub fn inbox_link(config: &Config, approval_id: &str) -> String {
    format!("{}/inbox/approvals/{approval_id}", public_base(config))
}

/// The inbox's list of pending approvals.
pub fn inbox_home(config: &Config) -> String {
    format!("{}/inbox/", public_base(config))
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

/// Why an approval's call waits, on one line for Slack and mail: the rules that matched and
/// those that failed to evaluate, with their reasons (a failed rule yields its decision or
/// `on_error`, so it is part of why), or the policy's defaults when there are neither.
pub fn rules_line(rules: &[&str], explanation: &Value) -> String {
    let mut parts: Vec<String> = rules.iter().map(|r| (*r).to_owned()).collect();
    for e in explanation
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
        parts.push(format!(
            "{} (failed to evaluate: {})",
            text("rule"),
            text("reason")
        ));
    }
    if parts.is_empty() {
        "the policy's defaults".to_owned()
    } else {
        parts.join(", ")
    }
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
