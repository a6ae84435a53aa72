//! Admission, the first stage, the same for every front end (the JSON API, MCP, the inbox):
//!
//! - [`in_flight`]: a permit under `server.max_in_flight`, or `503 gateway.overloaded`;
//! - [`authenticate`]: the bearer token names a principal and its role, and the principal's
//!   request rate admits it (`429 principal.rate_limited`, audited once per burst);
//! - [`intake`]: a call's strict parse and fingerprint (`airlock_policy`), its
//!   `context.agent_id` bound to the principal ([`bind_agent`]), its route, and its args
//!   against the tool's input schema (`crate::schemas`); any refusal there is recorded by
//!   [`reject`] as `call.rejected` with its code and front.
//!
//! Identity providers plug in at [`authenticate`]. What a role may do is each route's own
//! business (`crate::auth::require`), not admission's.

use std::sync::Arc;

use airlock_policy::{ToolCall, MAX_ARGS_DEPTH};
use airlock_storage::{Kind, Principal};
use hyper::HeaderMap;
use serde_json::{json, Map, Value};
use tokio::sync::SemaphorePermit;

use super::Front;
use crate::auth::{Need, Role};
use crate::backends::mcp::McpTool;
use crate::backends::Route;
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::limits::Refusal;
use crate::state::{audit_fields, Gateway};

/// Whether the request's `Host` (or HTTP/2 authority) names this gateway (DESIGN §15): a page
/// or an MCP endpoint reached through someone else's DNS name is how DNS rebinding gets a
/// browser to talk to a local gateway. `403 auth.forbidden_host` otherwise. A request that
/// names no host at all is no browser's, and passes.
pub fn host(gw: &Gateway, req: &hyper::Request<hyper::body::Incoming>) -> Result<(), ApiError> {
    let named = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    match named {
        Some(host) if !gw.config.host_allowed(&host) => Err(ApiError::new(
            Code::AuthForbiddenHost,
            format!(
                "`{host}` is not this gateway's host name: add it to `server.allowed_hosts` \
                 (or set `server.public_url`) if it is"
            ),
        )),
        _ => Ok(()),
    }
}

/// A permit for one request in flight, or `503 gateway.overloaded`: refused before any work,
/// so no call ever runs without a decision.
pub fn in_flight(gw: &Gateway) -> Result<SemaphorePermit<'_>, ApiError> {
    gw.in_flight.try_acquire().map_err(|_| {
        ApiError::new(Code::GatewayOverloaded, "too many requests in flight").retry_after(1)
    })
}

/// The principal behind the request's bearer token, admitted by its request rate.
pub async fn authenticate(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    need: Need,
) -> Result<(Principal, Role), ApiError> {
    let (principal, role) = gw.auth.authenticate(headers, need).await?;
    rate(gw, &principal).await?;
    Ok((principal, role))
}

/// Whether the principal's request rate admits one more request (`429
/// principal.rate_limited` otherwise).
pub async fn rate(gw: &Arc<Gateway>, principal: &Principal) -> Result<(), ApiError> {
    match gw.limits.take(&principal.id, std::time::Instant::now()) {
        Ok(()) => Ok(()),
        Err(refusal) => {
            Err(principal_refused(gw, principal, Code::PrincipalRateLimited, refusal).await)
        }
    }
}

/// A per-principal limit refused a request: counted, audited once at the start of each burst
/// of refusals (not once per refused request), answered 429 with `Retry-After`.
pub(crate) async fn principal_refused(
    gw: &Arc<Gateway>,
    who: &Principal,
    code: Code,
    refusal: Refusal,
) -> ApiError {
    let principal = who.id.as_str();
    let reason = code.as_str().trim_start_matches("principal.");
    // An issuer's principals are counted under `<issuer>:*`: one series per issuer, not per
    // user.
    let label = match principal.split_once(':') {
        Some((issuer, _)) => format!("{issuer}:*"),
        None => principal.to_owned(),
    };
    gw.metrics
        .approvals
        .principal_refusals
        .with_label_values(&[label.as_str(), reason])
        .inc();
    let retry = refusal.retry_after.as_secs_f64().ceil().max(1.0) as u64;
    if refusal.first_of_burst {
        tracing::warn!(
            principal,
            code = code.as_str(),
            "per-principal limit reached"
        );
        let record =
            audit_fields(json!({"principal": principal, "auth": who.auth_record(), "code": code}));
        let now = now_ms();
        if let Err(e) = gw
            .store_op(move |s| s.append_audit(Kind::PrincipalLimited, record, now))
            .await
        {
            tracing::error!(
                code = e.code.as_str(),
                "cannot audit a limit: {}",
                e.message
            );
        }
    }
    let message = match code {
        Code::PrincipalRateLimited => {
            format!("`{principal}` is over its request rate; retry in {retry}s")
        }
        Code::PrincipalTooManyHeld => format!(
            "`{principal}` has as many calls held waiting for a decision as it may; retry in \
             {retry}s, or send `Prefer: respond-async`"
        ),
        _ => format!(
            "`{principal}` has as many pending approvals as it may; wait for decisions (retry in {retry}s)"
        ),
    };
    ApiError::new(code, message).retry_after(retry)
}

/// A call as a front end read it, before the strict intake of DESIGN §3.
pub enum Raw<'a> {
    /// `POST /v1/calls`: the whole body, `{"tool","args","context"?}`.
    Body(&'a [u8]),
    /// A call whose message the front end already parsed strictly (MCP `tools/call`): the
    /// tool name, `arguments` (depth counts from them as level 1) and the context it built.
    Parts {
        tool: &'a str,
        args: Value,
        context: Value,
    },
}

/// Parses and fingerprints a call, and checks that its tool has a route. A refusal is
/// recorded (`call.rejected`, with the code and the front) before it is returned.
pub async fn intake(
    gw: &Arc<Gateway>,
    principal: &Principal,
    raw: Raw<'_>,
    front: &Front,
) -> Result<ToolCall, ApiError> {
    let (parsed, tool) = match raw {
        Raw::Body(body) => (ToolCall::from_body(body).map_err(ApiError::from), None),
        Raw::Parts {
            tool,
            args,
            context,
        } => {
            let parsed = if depth(&args) > MAX_ARGS_DEPTH {
                Err(airlock_policy::RequestError::TooDeep {
                    limit: MAX_ARGS_DEPTH,
                }
                .into())
            } else {
                ToolCall::new(tool, args, Some(context)).map_err(ApiError::from)
            };
            (parsed, Some(tool))
        }
    };
    let routed = match parsed.and_then(|call| bind_agent(principal, call)) {
        Err(e) => Err(e),
        Ok(call) => match gw.route(&call.tool) {
            // An MCP tool whose definition waits for review, or whose upstream was never
            // reached, is refused here (DESIGN §20).
            Some(Route::Mcp(t)) => crate::pins::admit(gw, t, &call.tool, false)
                .await
                .and_then(|t| mcp_args_fit(gw, &t, &call))
                .map(|_| call),
            Some(Route::Http(r)) => match &r.schema {
                Some(schema) => gw
                    .schemas
                    .check_args(&call.tool, schema, schema, &call.args)
                    .map(|_| call),
                None => Ok(call),
            },
            None => Err(unknown_tool(gw, &call.tool)),
        },
    };
    if let Err(e) = &routed {
        reject(gw, principal, e.code, front, tool).await;
    }
    routed
}

/// Whether a call's args fit its MCP tool's pinned `inputSchema` (DESIGN §23), unless its
/// server says `validate_args = false`. A tool with no definition or no `inputSchema` has
/// nothing to check against.
fn mcp_args_fit(gw: &Gateway, tool: &McpTool, call: &ToolCall) -> Result<(), ApiError> {
    if !tool.server.config.validate_args {
        return Ok(());
    }
    let Some(definition) = &tool.definition else {
        return Ok(());
    };
    let Some(schema) = definition.get("inputSchema") else {
        return Ok(());
    };
    gw.schemas
        .check_args(&call.tool, definition, schema, &call.args)
}

/// Binds `context.agent_id` to the principal (DESIGN §23): absent, it is the principal's own
/// id; present, it must be that id or match one of the principal's `agents` globs, or the call
/// is refused `403 request.agent_forbidden`. So `[agents."X"]` flags and rules that read
/// `context.agent_id` bind the agents they name, whatever the caller writes.
pub fn bind_agent(principal: &Principal, mut call: ToolCall) -> Result<ToolCall, ApiError> {
    let Some(context) = call.context.as_object_mut() else {
        return Ok(call);
    };
    match context.get("agent_id").and_then(Value::as_str) {
        None => {
            context.insert("agent_id".into(), Value::String(principal.id.clone()));
            Ok(call)
        }
        Some(agent) if may_name(principal, agent) => Ok(call),
        Some(agent) => Err(ApiError::new(
            Code::RequestAgentForbidden,
            format!(
                "`{}` may not call as agent `{agent}`: a principal names only its own id or \
                 the agents its config lists (`agents`)",
                principal.id
            ),
        )
        .with_details(json!({"agent_id": agent, "principal": principal.id}))),
    }
}

/// Whether `principal` may speak for `agent`.
fn may_name(principal: &Principal, agent: &str) -> bool {
    agent == principal.id
        || principal
            .agents
            .iter()
            .filter_map(|g| airlock_policy::Glob::new(g).ok())
            .any(|g| g.matches(agent))
}

/// Records a refused call: counted as `rejected` with its code, and audited as
/// `call.rejected` with who sent it, the code, the front (and its MCP revision
/// and session) and the tool name when it was readable.
pub async fn reject(
    gw: &Arc<Gateway>,
    principal: &Principal,
    code: Code,
    front: &Front,
    tool: Option<&str>,
) {
    gw.metrics.call("rejected", code.as_str());
    let mut record = audit_fields(
        json!({"principal": principal.id, "auth": principal.auth_record(), "code": code}),
    );
    front.tag(&mut record);
    record
        .entry("front")
        .or_insert_with(|| Value::String("http".into()));
    if let Some(t) = tool {
        record.insert("tool".into(), Value::String(t.into()));
    }
    record_rejection(gw, record).await;
}

/// Appends a `call.rejected` record; a store that cannot take it is logged, not answered
/// (the refusal stands either way).
pub(crate) async fn record_rejection(gw: &Arc<Gateway>, record: Map<String, Value>) {
    let now = now_ms();
    if let Err(e) = gw
        .store_op(move |s| s.append_audit(Kind::CallRejected, record, now))
        .await
    {
        tracing::error!(
            code = e.code.as_str(),
            "cannot audit a rejected call: {}",
            e.message
        );
    }
}

/// `tool.unknown`, naming the tools there are, nearest first.
pub fn unknown_tool(gw: &Gateway, tool: &str) -> ApiError {
    let mut known: Vec<String> = gw
        .config
        .tools_nearest(tool)
        .into_iter()
        .map(str::to_owned)
        .collect();
    known.extend(
        gw.backends
            .mcp
            .tools()
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned)),
    );
    ApiError::new(
        Code::ToolUnknown,
        format!(
            "no upstream is configured for tool `{tool}`; configured tools, nearest first: {}",
            known.join(", ")
        ),
    )
    .with_details(json!({"tools": known}))
}

/// How deep a value nests: a scalar is 0, an empty object or array 1.
fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({})), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": {}}]})), 4);
    }
}
