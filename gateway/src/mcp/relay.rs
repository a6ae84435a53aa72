//! What passes between an upstream and the agent's client while a call runs over MCP: which
//! of an upstream's requests the client declared it takes, what a 2026-07-28 request carries
//! to the upstream for them (its capabilities and log level), and the `mcp.relayed` audit of
//! each request and answer that passed (keys and methods, never what they carry).
//!
//! It does not carry them: [`super::stream`] does on a 2025 session's event stream,
//! [`super::parked`] as `input_required` to a 2026 client.

use std::sync::Arc;

use airlock_policy::ToolCall;
use airlock_storage::Principal;
use serde_json::{json, Map, Value};

use super::results::is_input_required;
use super::wire::{self, Message};
use super::Exchange;
use crate::backends::mcp::InputRelay;
use crate::clock::now_ms;
use crate::error::ApiError;
use crate::pipeline::Outcome;
use crate::state::{audit_fields, Gateway};

/// The log level a 2026-07-28 request's `_meta` asks for.
fn log_level(msg: &Message) -> Option<Value> {
    wire::at(&msg.params, &["_meta", "io.modelcontextprotocol/logLevel"]).cloned()
}

/// What a 2026-07-28 client's request carries to the upstream and takes back of its input
/// requests: its capabilities and log level, and the methods of the capabilities it declared.
/// A 2025 session's client gets requests on its stream instead.
pub(super) fn input_relay(exchange: &Exchange, msg: &Message) -> InputRelay {
    let mut takes = Vec::new();
    if exchange.modern() {
        if exchange.form_elicitation() || exchange.url_elicitation() {
            takes.push("elicitation/create");
        }
        takes.extend(
            client_asks_taken(exchange)
                .into_iter()
                .filter(|m| *m != "elicitation/create"),
        );
    }
    InputRelay {
        active: exchange.modern(),
        takes,
        retry: None,
        capabilities: exchange.modern().then(|| exchange.capabilities.clone()),
        log_level: log_level(msg),
    }
}

/// What of a 2025 upstream's requests mid-call ([`CLIENT_ASKS`]) the client declared it
/// answers: sampling, roots, and a URL elicitation (a form one suspends the call instead).
pub(super) fn client_asks_taken(exchange: &Exchange) -> Vec<&'static str> {
    let caps = &exchange.capabilities;
    let mut takes = Vec::new();
    if exchange.url_elicitation() {
        takes.push("elicitation/create");
    }
    if caps.get("sampling").is_some_and(Value::is_object) {
        takes.push("sampling/createMessage");
    }
    if caps.get("roots").is_some_and(Value::is_object) {
        takes.push("roots/list");
    }
    takes
}

/// Audits an upstream's input requests on their way to the client, if the outcome is one.
pub(super) async fn relayed_out(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call: &ToolCall,
    outcome: &Result<Outcome, ApiError>,
) {
    if let Ok(Outcome::Completed(c)) = outcome {
        if is_input_required(c) {
            let requests = c.result.get("inputRequests").cloned().unwrap_or_default();
            audit_relay(gw, principal, call, "to_client", &requests).await;
        }
    }
}

/// `mcp.relayed`: which keys (and, going to the client, which methods) passed, never what
/// they carry.
pub(super) async fn audit_relay(
    gw: &Arc<Gateway>,
    principal: &Principal,
    call: &ToolCall,
    direction: &str,
    entries: &Value,
) {
    let empty = Map::new();
    let entries = entries.as_object().unwrap_or(&empty);
    let keys: Vec<&String> = entries.keys().collect();
    let methods: Vec<&str> = entries
        .values()
        .filter_map(|r| r.get("method").and_then(Value::as_str))
        .collect();
    let mut fields = audit_fields(json!({
        "principal": principal.id, "auth": principal.auth_record(), "tool": call.tool,
        "fingerprint": call.fingerprint.as_str(), "direction": direction, "keys": keys,
    }));
    if direction == "to_client" {
        fields.insert("methods".into(), json!(methods));
    }
    let now = now_ms();
    if let Err(e) = gw
        .store_op(move |s| s.append_audit(airlock_storage::Kind::McpRelayed, fields, now))
        .await
    {
        tracing::error!(
            code = e.code.as_str(),
            "cannot audit a relayed request: {}",
            e.message
        );
    }
}
