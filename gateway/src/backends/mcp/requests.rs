//! Where an MCP request of another kind than a tool call goes, and its sending: a resource
//! read or subscription to the upstream that listed the URI (or has a template it fits), a
//! prompt to the upstream that serves its visible name (asked under its own name), a
//! completion to the upstream of the prompt or resource its `ref` names.
//!
//! The MCP front end routes a request here to judge it ([`Registry::route_request`]); the
//! pipeline routes it again when a held one runs ([`Registry::send_request`]), so a request
//! approved while its resource moved to another upstream is not sent to the new one. Judging
//! is not done here.

use std::sync::Arc;

use airlock_policy::{OwnedRequest, RequestKind};
use serde_json::{json, Value};

use super::{Failure, Path, Registry, Server};
use crate::error::{ApiError, Code};

/// Where a request goes: the upstream, the request as policy judges it (visible names), the
/// params the upstream is sent (its own names), and the path to ask it on.
pub struct RequestRoute {
    pub server: Arc<Server>,
    pub request: OwnedRequest,
    pub params: Value,
    pub want: Option<Path>,
}

/// Why a request has no route.
#[derive(Debug, PartialEq)]
pub enum Unrouted {
    /// A completion for a prompt or resource nobody serves: it completes to nothing.
    Nothing,
    /// No upstream serves what it names (in words).
    Unknown(String),
}

/// The method a held request of `kind` runs as (a subscription is never held).
fn method_of(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Resource => "resources/read",
        RequestKind::Prompt => "prompts/get",
        RequestKind::Completion => "completion/complete",
        RequestKind::Tool => "tools/call",
    }
}

impl Registry {
    /// Routes `method` with `params` (without `_meta`): `resources/read|subscribe|unsubscribe`,
    /// `prompts/get` or `completion/complete`.
    pub fn route_request(&self, method: &str, params: &Value) -> Result<RequestRoute, Unrouted> {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let mut upstream_params = params.clone();
        let (server, request, want) = match method {
            "prompts/get" => {
                let name = text(params, "name").unwrap_or_default();
                let (server, own, want) = self
                    .prompt(&name)
                    .ok_or_else(|| Unrouted::Unknown(format!("no prompt `{name}`")))?;
                upstream_params["name"] = Value::String(own);
                (server, request(RequestKind::Prompt, None, Some(name)), want)
            }
            "completion/complete" => {
                let r = &params["ref"];
                match text(r, "type").as_deref() {
                    Some("ref/prompt") => {
                        let name = text(r, "name").unwrap_or_default();
                        let (server, own, want) = self.prompt(&name).ok_or(Unrouted::Nothing)?;
                        upstream_params["ref"]["name"] = Value::String(own);
                        let judged = request(RequestKind::Completion, None, Some(name));
                        (server, judged, want)
                    }
                    Some("ref/resource") => {
                        let uri = text(r, "uri").unwrap_or_default();
                        let (server, want) = self.resource(&uri).ok_or(Unrouted::Nothing)?;
                        (
                            server,
                            request(RequestKind::Completion, Some(uri), None),
                            want,
                        )
                    }
                    _ => return Err(Unrouted::Nothing),
                }
            }
            _ => {
                let uri = text(params, "uri").unwrap_or_default();
                let (server, want) = self.resource(&uri).ok_or_else(|| {
                    Unrouted::Unknown(format!("no upstream listed the resource `{uri}`"))
                })?;
                // A subscription is bound to the client's session: it goes on the client's
                // revision's path; a read goes where the resource is served.
                let want = if method == "resources/read" {
                    want
                } else {
                    None
                };
                (
                    server,
                    request(RequestKind::Resource, Some(uri), None),
                    want,
                )
            }
        };
        let request = OwnedRequest {
            server: server.config.name.clone(),
            ..request
        };
        Ok(RequestRoute {
            server,
            request,
            params: upstream_params,
            want,
        })
    }

    /// Runs a held request that was approved: routed again (to the same upstream, or not at
    /// all), sent, and its JSON-RPC answer given back whole: `{"result": …}` or the
    /// upstream's `{"error": …}`, which the front end answers as it is.
    pub async fn send_request(
        &self,
        request: &OwnedRequest,
        params: &Value,
    ) -> Result<Value, ApiError> {
        let method = method_of(request.kind);
        let route = match self.route_request(method, params) {
            Ok(r) if r.request == *request => r,
            _ => {
                return Err(ApiError::new(
                    Code::UpstreamUnavailable,
                    format!(
                        "MCP server `{}` no longer serves the {} `{}` that was approved; nothing was sent",
                        request.server,
                        request.kind.as_str(),
                        request.target()
                    ),
                ))
            }
        };
        match route
            .server
            .request(method, route.params, None, route.want)
            .await
        {
            Ok(result) => Ok(json!({ "result": result })),
            Err(Failure::Rpc(e)) => {
                let mut error = json!({"code": e.code, "message": e.message});
                if let Some(data) = e.data {
                    error["data"] = data;
                }
                Ok(json!({ "error": error }))
            }
            Err(other) => Err(other.into_api_error(&request.server)),
        }
    }
}

fn request(kind: RequestKind, uri: Option<String>, prompt: Option<String>) -> OwnedRequest {
    OwnedRequest {
        kind,
        server: String::new(),
        uri,
        prompt,
    }
}
