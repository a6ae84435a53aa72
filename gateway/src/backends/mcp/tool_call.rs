//! A `tools/call` at an upstream, from the request to its answer: its params, the wait for
//! the answer or for an input request ([`drive`], within the server's timeout), a 2026-07-28
//! `input_required` read as the input it asks for, and the work in flight ([`InFlight`]) that
//! can outlive its waiter when a suspended call keeps the upstream's request open ([`Live`]).
//!
//! It sends nothing itself ([`super::Registry`] starts the request on its connection) and
//! records nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::{
    not_allowed, not_relayed, note_refused, Ask, Failure, McpTool, Params, APPROVAL_KEY,
    CLIENT_ASKS, INPUT_RELAY, PROGRESS_TOKEN, RELAYED_TO_CLIENT,
};
use crate::error::{ApiError, Code};

/// What an upstream answered a `tools/call`.
pub enum ToolAnswer {
    Result(Value),
    /// It asked for input (a form elicitation): the call suspends.
    Input(InputRequest),
}

/// An upstream's form elicitation during a `tools/call`.
pub struct InputRequest {
    pub message: String,
    /// Its `requestedSchema`.
    pub schema: Value,
    /// A 2026-07-28 upstream's `input_required`: the input key and `requestState` to retry
    /// with (durable).
    pub retry: Option<(String, Option<Value>)>,
    /// A 2025-11-25 or stdio upstream's open request, waiting for the answer (in memory).
    pub live: Option<Live>,
}

impl InputRequest {
    /// What the store keeps to continue the call after a restart (only a retry can).
    pub fn retry_state(&self) -> Option<Value> {
        self.retry
            .as_ref()
            .map(|(key, state)| json!({"input_key": key, "request_state": state}))
    }
}

/// A `tools/call` still open at its upstream, waiting on the answer to its elicitation.
/// Dropped (expired, cancelled, or not resumed before shutdown), the request is abandoned and
/// the upstream told so.
pub struct Live {
    pub(super) reply: oneshot::Sender<Value>,
    pub(super) task: AbortOnDrop,
    pub(super) asks: mpsc::UnboundedReceiver<Ask>,
}

/// Work in flight (a `tools/call` to an upstream, a 2026 client's call while its upstream's
/// request is parked): polled by the task that waits for it (the common case, with no
/// hand-off between tasks), and moved to a task of its own only when it must outlive that
/// task ([`InFlight::keep`]). Dropping it drops the work.
pub(crate) enum InFlight<T> {
    Here(Pin<Box<dyn Future<Output = T> + Send>>),
    Own(AbortOnDrop<T>),
}

impl<T: Send + 'static> InFlight<T> {
    pub(crate) fn new(work: impl Future<Output = T> + Send + 'static) -> InFlight<T> {
        InFlight::Here(Box::pin(work))
    }

    /// Its output; an error only when its own task ended without one.
    pub(crate) fn poll_done(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Result<T, tokio::task::JoinError>> {
        match self {
            InFlight::Here(work) => work.as_mut().poll(cx).map(Ok),
            InFlight::Own(task) => Pin::new(&mut task.0).poll(cx),
        }
    }

    /// The work, running on in a task of its own.
    pub(crate) fn keep(self) -> AbortOnDrop<T> {
        match self {
            InFlight::Here(work) => AbortOnDrop(tokio::spawn(work)),
            InFlight::Own(task) => task,
        }
    }
}

/// The task running a request; dropping it drops the request (which tells the upstream).
pub(crate) struct AbortOnDrop<T = Result<Value, Failure>>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The `tools/call` params for a tool and its canonical arguments, which go out as the very
/// text that was fingerprinted (DESIGN §3).
pub(super) fn tool_params(
    tool: &McpTool,
    canonical_args: &str,
    mut meta: Map<String, Value>,
    progress: bool,
) -> Params {
    if progress && !meta.contains_key("progressToken") {
        // Asks the upstream for progress; the front end maps it to its client's token.
        meta.insert("progressToken".into(), Value::String(PROGRESS_TOKEN.into()));
    }
    let mut fields = Map::new();
    fields.insert("name".into(), Value::String(tool.name.clone()));
    if !meta.is_empty() {
        fields.insert("_meta".into(), Value::Object(meta));
    }
    // The canonical text is JSON (it was written from a parsed object); should it ever not
    // be, the call goes out with an empty object rather than with anything else.
    let arguments = RawValue::from_string(canonical_args.to_owned())
        .or_else(|_| RawValue::from_string("{}".to_owned()))
        .ok();
    Params {
        fields: Value::Object(fields),
        arguments,
    }
}

/// A form elicitation's message and schema; `None` for anything else (URL mode, sampling).
pub(super) fn form_elicitation(method: &str, params: &Value) -> Option<(String, Value)> {
    if method != "elicitation/create" {
        return None;
    }
    let mode = params.get("mode").and_then(Value::as_str).unwrap_or("form");
    let schema = params.get("requestedSchema")?;
    (mode == "form").then(|| {
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        (message, schema.clone())
    })
}

/// Waits for a running `tools/call` to answer, or to ask for input, each within the server's
/// timeout. Asks other than a form elicitation are refused as not relayed.
pub(super) async fn drive(
    tool: &McpTool,
    mut task: InFlight<Result<Value, Failure>>,
    mut asks: mpsc::UnboundedReceiver<Ask>,
) -> Result<ToolAnswer, ApiError> {
    let name = &tool.server.config.name;
    let deadline = tokio::time::sleep(tool.server.config.timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            answered = std::future::poll_fn(|cx| task.poll_done(cx)) => {
                let result = answered
                    .map_err(|e| Failure::Unavailable(format!("the request task ended: {e}")))
                    .and_then(|r| r)
                    .map_err(|f| match f {
                        // The upstream needs a capability the (2026) client did not declare:
                        // the client is told so, as the upstream said it (SEP-2575).
                        Failure::Rpc(e) if e.code == -32021 => missing_capability(
                            name,
                            e.data
                                .as_ref()
                                .and_then(|d| d.get("requiredCapabilities"))
                                .and_then(Value::as_object)
                                .cloned()
                                .unwrap_or_default(),
                        ),
                        // A tool's own JSON-RPC error is data for the model, like a backend's 4xx.
                        Failure::Rpc(e) => ApiError::new(
                            Code::UpstreamUnavailable,
                            format!("MCP server `{name}` refused the call: {} ({})", e.message, e.code),
                        ),
                        other => other.into_api_error(name),
                    })?;
                return input_required(name, &tool.server.config.relay, result);
            }
            Some(ask) = asks.recv() => {
                // What the server's `relay` leaves out goes nowhere, not even to the inbox as a
                // form: it is refused, and the call goes on.
                if !tool.server.config.relays(&ask.method) {
                    tracing::info!(mcp_server = %name, method = %ask.method, "an MCP server asked for something its `relay` leaves out");
                    note_refused(&ask.method);
                    let _ = ask.reply.send(not_allowed(&ask.method, name));
                    continue;
                }
                match form_elicitation(&ask.method, &ask.params) {
                    Some((message, schema)) => {
                        return Ok(ToolAnswer::Input(InputRequest {
                            message,
                            schema,
                            retry: None,
                            live: Some(Live { reply: ask.reply, task: task.keep(), asks }),
                        }));
                    }
                    // Sampling, roots and a URL elicitation go to the agent's own client
                    // when it can take them (the front end decides).
                    None if RELAYED_TO_CLIENT.contains(&ask.method.as_str()) => {
                        let unsent = match CLIENT_ASKS.try_with(Clone::clone) {
                            Ok(client) => client.send(ask).err().map(|e| e.0),
                            Err(_) => Some(ask),
                        };
                        if let Some(ask) = unsent {
                            let _ = ask.reply.send(not_relayed(&ask.method));
                        }
                    }
                    None => {
                        tracing::info!(mcp_server = %name, method = %ask.method, "an MCP server asked airlock's client something airlock does not relay");
                        let _ = ask.reply.send(not_relayed(&ask.method));
                    }
                }
            }
            _ = &mut deadline => return Err(Failure::Timeout.into_api_error(name)),
        }
    }
}

/// A 2026-07-28 `input_required` result with one form elicitation becomes the input it asks
/// for; any other input request is not relayed (the call fails), nor is one the server's
/// `relay` leaves out (a 2026 upstream cannot be answered `-32601` mid-call: the call fails).
pub(super) fn input_required(
    server: &str,
    relay: &[&str],
    result: Value,
) -> Result<ToolAnswer, ApiError> {
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return Ok(ToolAnswer::Result(result));
    }
    let requests = result
        .get("inputRequests")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if requests.contains_key(APPROVAL_KEY) {
        return Err(ApiError::new(
            Code::UpstreamInvalidResponse,
            format!("MCP server `{server}` asked for input under `{APPROVAL_KEY}`, the gateway's own key"),
        ));
    }
    let left_out: Vec<&str> = requests
        .values()
        .filter_map(|r| r.get("method").and_then(Value::as_str))
        .filter(|m| !relay.contains(m))
        .collect();
    if !left_out.is_empty() {
        for m in &left_out {
            note_refused(m);
        }
        return Err(ApiError::new(
            Code::UpstreamUnavailable,
            format!(
                "MCP server `{server}` asked the client for {}, which its `relay` leaves out",
                left_out
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    // A client that takes every one of these requests gets them as the upstream asked.
    let takes = INPUT_RELAY
        .try_with(|r| r.takes.clone())
        .unwrap_or_default();
    let relayable = !requests.is_empty()
        && requests.values().all(|r| {
            r.get("method")
                .and_then(Value::as_str)
                .is_some_and(|m| takes.contains(&m))
        });
    if relayable {
        return Ok(ToolAnswer::Result(result));
    }
    // Sampling and roots have no suspension to fall back on: a 2026 client that cannot
    // answer them is told which capability the upstream needs (SEP-2575, -32021).
    let (active, takes) = INPUT_RELAY
        .try_with(|r| (r.active, r.takes.clone()))
        .unwrap_or_default();
    if active {
        let needs: Vec<&str> = requests
            .values()
            .filter_map(|r| r.get("method").and_then(Value::as_str))
            .filter(|m| !takes.contains(m))
            .filter_map(|m| match m {
                "sampling/createMessage" => Some("sampling"),
                "roots/list" => Some("roots"),
                _ => None,
            })
            .collect();
        if !needs.is_empty() {
            let required = needs
                .into_iter()
                .map(|c| (c.to_owned(), json!({})))
                .collect();
            return Err(missing_capability(server, required));
        }
    }
    let form = match requests.iter().collect::<Vec<_>>().as_slice() {
        [(key, r)] => r
            .get("method")
            .and_then(Value::as_str)
            .and_then(|m| form_elicitation(m, r.get("params").unwrap_or(&Value::Null)))
            .map(|(message, schema)| (key.to_string(), message, schema)),
        _ => None,
    };
    let Some((key, message, schema)) = form else {
        return Err(ApiError::new(
            Code::UpstreamUnavailable,
            format!("MCP server `{server}` asked for input airlock does not relay (only one form elicitation at a time is)"),
        ));
    };
    Ok(ToolAnswer::Input(InputRequest {
        message,
        schema,
        retry: Some((key, result.get("requestState").cloned())),
        live: None,
    }))
}

/// `mcp.missing_capability`: the upstream needs client capabilities `needs` (`sampling`,
/// `roots`, …), named in the message, which is all a call's stored outcome keeps of it
/// ([`required_capabilities`] reads them back).
pub(super) fn missing_capability(server: &str, required: Map<String, Value>) -> ApiError {
    let names: Vec<&str> = required.keys().map(String::as_str).collect();
    ApiError::new(
        Code::McpMissingCapability,
        format!(
            "MCP server `{server}` needs the client's {} capability for this call, {DID_NOT_DECLARE}{}",
            names.join(" and "),
            Value::Object(required.clone()),
        ),
    )
}

/// Where a [`missing_capability`] message gives the capabilities, as JSON: the message is
/// what a call's stored outcome keeps.
const DID_NOT_DECLARE: &str = "which the client did not declare: ";

/// The capabilities a [`missing_capability`] refusal names, as a `ClientCapabilities`
/// object (`{"sampling": {}}`, `{"extensions": {…}}`).
pub fn required_capabilities(e: &ApiError) -> Value {
    e.message
        .split_once(DID_NOT_DECLARE)
        .and_then(|(_, json)| serde_json::from_str(json).ok())
        .unwrap_or_else(|| json!({}))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::backends::mcp::Envelope;

    /// A `tools/call` carries its arguments as the canonical text that was fingerprinted,
    /// byte for byte (`1e+21` stays as RFC 8785 writes it; serde would write `1e21`), beside
    /// the other params, and an `arguments` among the fields gives way to it.
    #[test]
    fn arguments_go_out_as_the_canonical_text() {
        let canonical = r#"{"big":1e+21,"list":[1,"\u007f"],"n":-0.5}"#;
        let params = Params {
            fields: json!({"name": "echo", "arguments": {"forged": true}, "_meta": {"progressToken": "p"}}),
            arguments: Some(RawValue::from_string(canonical.to_owned()).unwrap()),
        };
        let line = serde_json::to_string(&Envelope {
            jsonrpc: "2.0",
            id: 7,
            method: "tools/call",
            params: &params,
        })
        .unwrap();
        assert!(
            line.contains(&format!(r#""arguments":{canonical}"#)),
            "{line}"
        );
        assert!(!line.contains("forged"), "{line}");
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["params"]["name"], "echo");
        assert_eq!(back["params"]["_meta"]["progressToken"], "p");
        assert_eq!(back["id"], 7);
        // Without raw arguments the fields are the params, as they are.
        let plain = serde_json::to_string(&Params::from(json!({"cursor": "c"}))).unwrap();
        assert_eq!(plain, r#"{"cursor":"c"}"#);
    }
}
