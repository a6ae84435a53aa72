//! `GET /v1/openapi.json`: the OpenAPI 3.1 document of the JSON API (DESIGN §18).
//!
//! What is derived and what is written:
//! - **derived**: the paths and methods (from [`super::routes::ROUTES`], the table the router
//!   dispatches from), which operations need a token, every error response's status and the
//!   codes listed for it (each [`Code`] through `crate::body::status_for`, the one map the
//!   gateway answers with), the servers and security schemes (from the config), and every
//!   body schema: `components/schemas` is what `schemars` derives from the types of
//!   `crate::api` that the route table names for each route's body and JSON answers (answers
//!   as they serialise, requests as they deserialise);
//! - **written**: each operation's words, parameters, the statuses of its answers, its list
//!   of codes and its links (the exhaustive [`operation`] match, so a new route does not
//!   compile without them) — data beside the types, not schemas.
//!
//! It does not serve `/mcp` or `/inbox/`: those are other front ends with protocols of their own.

mod derive;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::routes::{Access, Op, Route, ROUTES};
use crate::body::status_for;
use crate::config::Config;
use crate::error::Code;
use derive::{json_ok, Bodies, Shape};

/// What the document says of one operation, beyond its method and path.
struct Operation {
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    description: &'static str,
    params: Vec<Value>,
    /// Success statuses: (status, media type, what the body is, description).
    ok: Vec<(u16, &'static str, Shape, &'static str)>,
    /// The refusals particular to the operation; those of every route, every token route and
    /// every body are added by [`document`].
    codes: Vec<Code>,
    /// OpenAPI links from a success status: (status, target operation, its parameter, the
    /// runtime expression that fills it). Fuzzers follow them from a call to its approval.
    links: &'static [(u16, &'static str, &'static str, &'static str)],
}

/// The document as a gateway with `config` serves it.
pub(crate) fn document(config: &Config) -> Value {
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    let with_issuers = !config.issuers.is_empty();
    let mut bodies = Bodies::new();
    for route in ROUTES {
        if route.access == Access::OpenWithIssuers && !with_issuers {
            continue;
        }
        let o = path_item(config, route, &mut bodies);
        paths
            .entry(route.path)
            .or_default()
            .insert(route.method.as_str().to_ascii_lowercase(), o);
    }
    let server = config
        .public_url
        .clone()
        .map(|u| u.trim_end_matches('/').to_owned())
        .unwrap_or_else(|| "/".into());
    let mut components = bodies.components();
    components["CallRequest"]["examples"] = Value::Array(call_examples(config));
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "airlock",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The JSON API of the airlock gateway: tool calls through policy and \
                approval, approvers' decisions, and operations. Every refusal is \
                `{\"error\":{\"code\",\"message\",\"details\"}}` with a stable code; each \
                response lists the codes it can carry.",
        },
        "servers": [{"url": server}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": security_schemes(config),
            "headers": {
                "Retry-After": {"description": "Seconds to wait before trying again.",
                    "schema": {"type": "integer", "minimum": 0}},
                "WWW-Authenticate": {"description": "The bearer challenge (RFC 6750; with `resource_metadata` of RFC 9728 when issuers are configured).",
                    "schema": {"type": "string"}},
            },
        },
    })
}

/// A call to each configured tool pattern (`*` read as `example`), so a generated client's
/// users and a fuzzer start from calls that reach the policy.
fn call_examples(config: &Config) -> Vec<Value> {
    config
        .tools
        .iter()
        .map(|t| t.pattern.as_str().replace('*', "example").replace('?', "x"))
        .filter(|name| airlock_policy::ToolCall::new(name, json!({}), None).is_ok())
        .map(
            |tool| json!({"tool": tool, "args": {"text": "hello"}, "context": {"run_id": "run-1"}}),
        )
        .collect()
}

/// Refusals any route can give: overload before any work, oversized headers, a query
/// parameter it does not take.
const EVERY_ROUTE: [Code; 3] = [
    Code::GatewayOverloaded,
    Code::RequestHeadersTooLarge,
    Code::RequestUnknownField,
];

/// Refusals of any route that takes a token.
const TOKEN_ROUTES: [Code; 8] = [
    Code::AuthUnauthenticated,
    Code::AuthInvalidToken,
    Code::AuthForbidden,
    Code::AuthInsufficientScope,
    Code::AuthIssuerUnavailable,
    Code::PrincipalRateLimited,
    Code::StoreUnavailable,
    Code::Internal,
];

/// Refusals of any route that reads a JSON body.
const BODY_ROUTES: [Code; 7] = [
    Code::RequestInvalidJson,
    Code::RequestDuplicateKey,
    Code::RequestUnsafeNumber,
    Code::RequestTooDeep,
    Code::RequestTooLarge,
    Code::RequestBodyTimeout,
    Code::RequestUnknownField,
];

fn by_status(codes: &[Code]) -> BTreeMap<u16, Vec<Code>> {
    let mut out: BTreeMap<u16, Vec<Code>> = BTreeMap::new();
    for c in codes {
        let list = out.entry(status_for(*c).as_u16()).or_default();
        if !list.contains(c) {
            list.push(*c);
        }
    }
    out
}

/// One error response: the envelope (`api::ErrorBody`, inline) with its codes as an enum, and
/// the headers that come with that status.
fn refusal(status: u16, codes: &[Code], envelope: &Value) -> Value {
    let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    let description = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut schema = envelope.clone();
    schema["properties"]["error"]["properties"]["code"]["enum"] = json!(names);
    let mut v = json!({
        "description": description,
        "content": {"application/json": {"schema": schema}},
    });
    let mut headers = Map::new();
    if codes.iter().any(|c| c.carries_retry_after()) {
        headers.insert(
            "Retry-After".into(),
            json!({"$ref": "#/components/headers/Retry-After"}),
        );
    }
    if matches!(status, 401 | 403) {
        headers.insert(
            "WWW-Authenticate".into(),
            json!({"$ref": "#/components/headers/WWW-Authenticate"}),
        );
    }
    if !headers.is_empty() {
        v["headers"] = Value::Object(headers);
    }
    v
}

fn security_schemes(config: &Config) -> Value {
    let mut schemes = Map::new();
    schemes.insert(
        "bearer".into(),
        json!({"type": "http", "scheme": "bearer",
            "description": "A static token of `[[principals]]`, or a JWT of a configured issuer."}),
    );
    for issuer in &config.issuers {
        schemes.insert(
            format!("oidc-{}", issuer.id),
            json!({"type": "openIdConnect",
                "openIdConnectUrl": format!("{}/.well-known/openid-configuration", issuer.issuer.trim_end_matches('/')),
                "description": format!("Access tokens of the issuer `{}`; the gateway's metadata is at /.well-known/oauth-protected-resource.", issuer.id)}),
        );
    }
    Value::Object(schemes)
}

fn security_requirements(config: &Config) -> Value {
    let mut any = vec![json!({"bearer": []})];
    for issuer in &config.issuers {
        any.push(json!({format!("oidc-{}", issuer.id): []}));
    }
    Value::Array(any)
}

/// The largest integer a query parameter takes (2^53 − 1, as JSON numbers).
const MAX_SAFE: u64 = airlock_policy::json::MAX_SAFE_INTEGER;

fn query(name: &str, schema: Value, description: &str) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": schema, "description": description})
}

fn wait_param() -> Value {
    query(
        "wait",
        json!({"type": "integer", "minimum": 0, "maximum": MAX_SAFE}),
        "Seconds to hold the request for a decision (capped at `server.max_hold`).",
    )
}

/// The codes of reading a call's outcome: what the policy, the approvers and the backend said.
const OUTCOME: [Code; 18] = [
    Code::ToolDefinitionChanged,
    Code::CallNotFound,
    Code::PolicyDenied,
    Code::ApprovalDeclined,
    Code::ApprovalExpired,
    Code::CallCancelled,
    Code::GrantRevoked,
    Code::CallExpired,
    Code::CallInProgress,
    Code::CallInterrupted,
    Code::UpstreamUnavailable,
    Code::UpstreamTimeout,
    Code::UpstreamTooLarge,
    Code::UpstreamInvalidSuspend,
    Code::UpstreamInvalidResponse,
    Code::UpstreamCredentialsUnavailable,
    Code::CredentialsNoSubject,
    Code::GatewayShuttingDown,
];

/// Resuming a call, beyond reading its outcome.
const RESUME: [Code; 6] = [
    Code::RequestInvalidResumeData,
    Code::RequestInvalidField,
    Code::RequestMissingField,
    Code::CallNotSuspended,
    Code::CallAmbiguous,
    Code::CallFingerprintMismatch,
];

/// Deciding one approval (DESIGN §6's refusals, and an edit's).
const DECIDE: [Code; 11] = [
    Code::RequestInvalidField,
    Code::ApprovalGrantTooWide,
    Code::RequestMissingReason,
    Code::RequestInvalidArgs,
    Code::ApprovalForbidden,
    Code::ApprovalSelfApproval,
    Code::ApprovalAlreadyDecided,
    Code::ApprovalNotPending,
    Code::ApprovalNotFound,
    Code::ApprovalEditDenied,
    Code::ApprovalInvalidState,
];

/// Every code of a policy set that does not load (DESIGN §4).
fn policy_load() -> Vec<Code> {
    Code::ALL
        .iter()
        .copied()
        .filter(|c| c.as_str().starts_with("policy.") && status_for(*c).as_u16() == 422)
        .collect()
}

/// One route's operation object: its answers with their links, its refusals by status, its
/// parameters, body and security.
fn path_item(config: &Config, route: &Route, bodies: &mut Bodies) -> Value {
    let op = operation(route.op);
    let mut codes: Vec<Code> = op.codes.clone();
    codes.extend(EVERY_ROUTE);
    if route.access == Access::Token {
        codes.extend(TOKEN_ROUTES);
    }
    if route.body.is_some() {
        codes.extend(BODY_ROUTES);
    }
    let mut responses = Map::new();
    for (status, media, shape, description) in &op.ok {
        let mut answer = json!({"description": description});
        let typ = route
            .answers
            .iter()
            .find(|(s, _)| s == status)
            .map(|(_, t)| *t);
        if let Some(schema) = bodies.answer(shape, typ) {
            answer["content"] = json!({*media: {"schema": schema}});
        }
        let links: Map<String, Value> = op
            .links
            .iter()
            .filter(|(from, ..)| from == status)
            .map(|(_, target, param, expr)| {
                (
                    (*target).to_owned(),
                    json!({"operationId": target, "parameters": {*param: expr}}),
                )
            })
            .collect();
        if !links.is_empty() {
            answer["links"] = Value::Object(links);
        }
        responses.insert(status.to_string(), answer);
    }
    for (status, codes) in by_status(&codes) {
        responses.insert(
            status.to_string(),
            refusal(status, &codes, &bodies.envelope),
        );
    }
    let mut o = json!({
        "operationId": op.id,
        "tags": [op.tag],
        "summary": op.summary,
        "description": op.description,
        "responses": responses,
    });
    let mut params = op.params;
    params.extend(route.path.split('/').filter_map(|seg| {
        let name = seg.strip_prefix('{')?.strip_suffix('}')?;
        Some(json!({"name": name, "in": "path", "required": true,
            "schema": {"type": "string", "minLength": 1}}))
    }));
    if !params.is_empty() {
        o["parameters"] = Value::Array(params);
    }
    if let Some((body, required)) = route.body {
        o["requestBody"] = json!({"required": required,
            "content": {"application/json": {"schema": bodies.request(body)}}});
    }
    o["security"] = match route.access {
        Access::Token => security_requirements(config),
        _ => json!([]),
    };
    o
}

/// What the document says of `op`: its id, tag, summary, description, parameters, body,
/// answers, codes and links. The match names every route, so a route cannot be added without
/// its entry; each audience's entries are in a function of its own.
fn operation(op: Op) -> Operation {
    match op {
        Op::Root | Op::Favicon | Op::Healthz | Op::Readyz | Op::Metrics | Op::OpenApi => {
            open_operation(op)
        }
        Op::ProtectedResource | Op::ProtectedResourceMcp => identity_operation(op),
        Op::CreateCall | Op::ListCalls | Op::GetCall | Op::ResumeCall | Op::CancelCall => {
            agent_operation(op)
        }
        Op::ResumeRun | Op::StreamRun => run_operation(op),
        Op::ListApprovals
        | Op::GetApproval
        | Op::Approve
        | Op::Decline
        | Op::ApproveRun
        | Op::DeclineRun
        | Op::DeclinePrincipal
        | Op::Events
        | Op::ListGrants
        | Op::RevokeGrant
        | Op::ListTools
        | Op::GetTool
        | Op::ReviewTool => approver_operation(op),
        Op::GetPolicy
        | Op::EvaluatePolicy
        | Op::ReloadPolicy
        | Op::GetShadow
        | Op::ListWebhooks
        | Op::EnableWebhook
        | Op::TestWebhook
        | Op::ListAudit
        | Op::ExportAudit
        | Op::PruneAudit => admin_operation(op),
    }
}

/// An operation's identity and codes, with no parameters, body, answers or links yet.
fn o(
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    description: &'static str,
    codes: &[Code],
) -> Operation {
    Operation {
        id,
        tag,
        summary,
        description,
        params: vec![],
        ok: vec![],
        codes: codes.to_vec(),
        links: &[],
    }
}

/// The open routes: the redirect, the icon, health, readiness, metrics, this document.
fn open_operation(op: Op) -> Operation {
    match op {
        Op::Root => Operation {
            ok: vec![(303, "text/plain", Shape::Text, "To the approvers' inbox.")],
            ..o(
                "root",
                "operations",
                "Where a browser goes",
                "Redirects to `/inbox/`.",
                &[],
            )
        },
        Op::Favicon => Operation {
            ok: vec![(204, "", Shape::Empty, "No content.")],
            ..o(
                "favicon",
                "operations",
                "No icon",
                "Answers 204, so browsers stop asking.",
                &[],
            )
        },
        Op::Healthz => Operation {
            ok: vec![json_ok(200, "The process is up.")],
            ..o(
                "healthz",
                "operations",
                "Liveness",
                "No token. Bind it to a private address in production.",
                &[],
            )
        },
        Op::Readyz => Operation {
            ok: vec![json_ok(200, "The store is open and a policy is loaded.")],
            ..o(
                "readyz",
                "operations",
                "Readiness",
                "No token.",
                &[Code::StoreUnavailable],
            )
        },
        Op::Metrics => Operation {
            ok: vec![(200, "text/plain", Shape::Text, "Prometheus text format.")],
            ..o(
                "metrics",
                "operations",
                "Prometheus metrics",
                "No token. Bind it to a private address in production.",
                &[],
            )
        },
        Op::OpenApi => Operation {
            ok: vec![json_ok(200, "This document.")],
            ..o("openapi", "operations", "This document", "No token.", &[])
        },
        other => unreachable!("{other:?} is not one of open_operation's operations"),
    }
}

/// The identity routes: RFC 9728 metadata, served only while `[[issuers]]` are configured.
fn identity_operation(op: Op) -> Operation {
    match op {
        Op::ProtectedResource | Op::ProtectedResourceMcp => Operation {
            ok: vec![json_ok(200, "RFC 9728 metadata.")],
            ..o(
                if op == Op::ProtectedResource {
                    "protectedResource"
                } else {
                    "protectedResourceMcp"
                },
                "identity",
                "OAuth protected resource metadata",
                "Only while `[[issuers]]` are configured (identity from an OpenID provider).",
                &[],
            )
        },
        other => unreachable!("{other:?} is not one of identity_operation's operations"),
    }
}

/// Agents' routes: calls, their outcomes, resuming, cancelling.
fn agent_operation(op: Op) -> Operation {
    match op {
        Op::CreateCall => Operation {
            params: vec![json!({"name": "Prefer", "in": "header", "required": false,
                "schema": {"type": "string"},
                "description": "`wait=N`: hold up to N seconds for a decision (capped at `server.max_hold`); `respond-async`: answer 202 at once. Only calls that must wait for a decision are held."})],
            ok: vec![
                json_ok(200, "The call ran."),
                json_ok(202, "The call waits for approvers, or the tool suspended it."),
            ],
            links: &[
                (200, "getCall", "call_id", "$response.body#/call_id"),
                (202, "getCall", "call_id", "$response.body#/call_id"),
                (202, "approve", "id", "$response.body#/approval/id"),
                (202, "decline", "id", "$response.body#/approval/id"),
                (202, "getApproval", "id", "$response.body#/approval/id"),
                (202, "cancelCall", "call_id", "$response.body#/call_id"),
                (202, "resumeCall", "call_id", "$response.body#/call_id"),
            ],
            ..o("createCall", "agents", "Make a tool call",
                "Through the whole pipeline: parse, fingerprint, policy, approval, backend. Roles: agent, admin.",
                &[Code::RequestInvalidArgs, Code::RequestInvalidTool, Code::RequestInvalidContext,
                  Code::RequestAgentForbidden, Code::ToolUnknown, Code::ToolDefinitionChanged, Code::PolicyDenied, Code::PolicyUnavailable, Code::ApprovalDeclined,
                  Code::ApprovalExpired, Code::CallCancelled, Code::GrantRevoked, Code::CallInterrupted,
                  // An identical call that joined another's (DESIGN §10) answers with that
                  // call's state: executing, or expired.
                  Code::CallInProgress, Code::CallExpired,
                  Code::CallFingerprintMismatch, Code::UpstreamUnavailable, Code::UpstreamTimeout,
                  Code::UpstreamTooLarge, Code::UpstreamInvalidSuspend, Code::UpstreamInvalidResponse,
                  Code::UpstreamCredentialsUnavailable, Code::CredentialsNoSubject,
                  Code::PrincipalTooManyPending, Code::PrincipalTooManyHeld, Code::GatewayTooManyHeld, Code::GatewayShuttingDown,
                  Code::StoreCorrupt])
        },
        Op::ListCalls => Operation {
            params: vec![json!({"name": "status", "in": "query", "required": true,
                "schema": {"const": "suspended"}, "description": "The only listing there is."})],
            ok: vec![json_ok(200, "Suspended calls: all for approvers and admins, its own for an agent.")],
            ..o("listSuspendedCalls", "agents", "Suspended calls", "Calls a tool suspended mid-call, waiting for resume data.",
                &[Code::RequestInvalidField])
        },
        Op::GetCall => Operation {
            params: vec![wait_param()],
            ok: vec![
                json_ok(200, "The call ran."),
                json_ok(202, "Still waiting."),
            ],
            ..o("getCall", "agents", "A call's outcome",
                "Waits up to `wait` seconds for it; runs an approved call at most once. Roles: agent (its own), admin.",
                &[&OUTCOME[..], &[Code::RequestInvalidField, Code::PrincipalTooManyHeld, Code::GatewayTooManyHeld]].concat())
        },
        Op::ResumeCall => Operation {
            params: vec![wait_param()],
            ok: vec![
                json_ok(200, "The call ran."),
                json_ok(202, "Still waiting, or suspended again."),
            ],
            ..o("resumeCall", "agents", "Resume a call",
                "With `resume_data`, a suspended call continues; without, the outcome of an approved call, executed at most once.",
                &[&OUTCOME[..], &RESUME[..], &[Code::PrincipalTooManyHeld, Code::GatewayTooManyHeld]].concat())
        },
        Op::CancelCall => Operation {
            ok: vec![json_ok(200, "Cancelled.")],
            ..o("cancelCall", "agents", "Cancel a call", "A call still pending approval or suspended.",
                &[Code::CallNotFound, Code::CallInvalidState, Code::CallCancelled, Code::CallInProgress])
        },
        other => unreachable!("{other:?} is not one of agent_operation's operations"),
    }
}

/// A run's routes: resuming its suspended call, and its stream of events.
fn run_operation(op: Op) -> Operation {
    match op {
        Op::ResumeRun => Operation {
            ok: vec![
                json_ok(200, "The call ran."),
                json_ok(202, "Waiting again."),
            ],
            ..o(
                "resumeRun",
                "agents",
                "Resume a run's suspended call",
                "Mastra's resume by run: the run's one suspended call, or the one named by `tool_call_id`.",
                &[&OUTCOME[..], &RESUME[..]].concat(),
            )
        },
        Op::StreamRun => Operation {
            params: vec![
                json!({"name": "Last-Event-ID", "in": "header", "required": false,
                "schema": {"type": "string", "pattern": "^\\s*[0-9]+\\s*$"},
                "description": "Resume after this event id."}),
            ],
            ok: vec![(
                200,
                "text/event-stream",
                Shape::Text,
                "The run's events, as server-sent events.",
            )],
            ..o(
                "streamRun",
                "agents",
                "A run's event stream",
                "Server-sent events of the run's calls, under Mastra's chunk names (`tool-call-approval`, `tool-call-suspended`, `tool-result`, `tool-error`).",
                &[Code::RequestInvalidHeader],
            )
        },
        other => unreachable!("{other:?} is not one of run_operation's operations"),
    }
}

/// Approvers' routes: approvals, deciding them one by one or by run, the event stream, grants.
fn approver_operation(op: Op) -> Operation {
    match op {
        Op::ListApprovals => Operation {
            params: vec![
                query("status", json!({"enum": ["pending", "approved", "declined", "expired", "cancelled"]}), "Only approvals in this status."),
                query("tool", json!({"type": "string"}), "Only approvals of this tool."),
                query("run_id", json!({"type": "string"}), "Only approvals of this run."),
                query("principal", json!({"type": "string"}), "Only approvals requested by this principal."),
                query("cursor", json!({"type": "string"}), "`next_cursor` of the previous page."),
                query("limit", json!({"type": "integer", "minimum": 0, "maximum": MAX_SAFE}), "Page size: 50 unless given, at least 1, at most 500."),
            ],
            ok: vec![json_ok(200, "Newest first.")],
            links: &[
                (200, "getApproval", "id", "$response.body#/approvals/0/id"),
                (200, "approve", "id", "$response.body#/approvals/0/id"),
                (200, "decline", "id", "$response.body#/approvals/0/id"),
            ],
            ..o("listApprovals", "approvers", "List approvals", "Roles: approver, admin.",
                &[Code::RequestInvalidField])
        },
        Op::GetApproval => Operation {
            ok: vec![json_ok(200, "The approval.")],
            ..o("getApproval", "approvers", "One approval", "Roles: approver, admin.", &[Code::ApprovalNotFound])
        },
        Op::Approve => Operation {
            ok: vec![json_ok(200, "The approval after the decision.")],
            links: &[
                (200, "getApproval", "id", "$response.body#/id"),
                (200, "getCall", "call_id", "$response.body#/call_id"),
                (200, "resumeCall", "call_id", "$response.body#/call_id"),
            ],
            ..o("approve", "approvers", "Approve", "Bound to the call's fingerprint; `args` edits the call where the rule allows it. `grant` chooses what the approval grants, within the rule's `max_scope`, `max_ttl` and `max_uses` (the approval's `grant` shows them); beyond them is `400 approval.grant_too_wide`. With a quorum, the grant is, part by part, the narrowest the approvers chose.",
                &DECIDE)
        },
        Op::Decline => Operation {
            ok: vec![json_ok(200, "The approval after the decision.")],
            ..o("decline", "approvers", "Decline", "The reason is fed back to the agent.", &DECIDE)
        },
        Op::ApproveRun | Op::DeclineRun => Operation {
            ok: vec![json_ok(200, "Each pending approval of the run, decided on its own.")],
            ..o(
                if op == Op::ApproveRun { "approveRun" } else { "declineRun" },
                "approvers",
                if op == Op::ApproveRun { "Approve a run's pending calls" } else { "Decline a run's pending calls" },
                "Mastra's approveToolCall / declineToolCall by run. A run is one principal's: when several principals use the run id, name one with `principal` (else `409 call.ambiguous` lists them).",
                &[Code::ApprovalForbidden, Code::ApprovalNotFound, Code::RequestMissingReason, Code::RequestInvalidField, Code::CallAmbiguous],
            )
        },
        Op::DeclinePrincipal => Operation {
            ok: vec![json_ok(200, "Each pending approval of the principal, declined on its own.")],
            ..o("declinePrincipal", "approvers", "Decline every pending call of a principal",
                "An agent flooding its approvers is stopped in one step: every pending approval its calls opened is declined with the reason, which each waiting call is told. Role: admin.",
                &[Code::AuthForbidden, Code::RequestMissingReason, Code::RequestMissingField, Code::RequestInvalidField])
        },
        Op::Events => Operation {
            ok: vec![(200, "text/event-stream", Shape::Text, "`approval.requested`, `approval.decided`, `approval.expired`, `call.completed`.")],
            ..o("events", "approvers", "Approvers' event stream", "Server-sent events. Roles: approver, admin.", &[])
        },
        Op::ListGrants => Operation {
            ok: vec![json_ok(200, "The live grants.")],
            links: &[(200, "revokeGrant", "id", "$response.body#/grants/0/id")],
            ..o("listGrants", "approvers", "Live grants",
                "Grants with uses left that have not expired, each bound to one fingerprint (the tool and its canonical args) and one scope key. Roles: approver, admin.", &[])
        },
        Op::RevokeGrant => Operation {
            ok: vec![json_ok(200, "The grant, revoked: its uses left are gone.")],
            ..o("revokeGrant", "approvers", "Revoke a grant",
                "An approver in one of the grant's rule's groups (any approver when it names none) or an admin. Audited `grant.revoked`. Roles: approver, admin.",
                &[Code::GrantNotFound, Code::ApprovalForbidden])
        },
        Op::ListTools => Operation {
            ok: vec![json_ok(200, "Every MCP upstream tool with its pin state.")],
            links: &[(200, "getTool", "name", "$response.body#/tools/0/name")],
            ..o("listTools", "approvers", "MCP tools and their pins",
                "Each MCP upstream's tools as clients see them by name, with the upstream, the protocol paths serving it, the pin state (`pinned`, `changed`, `declined`, `unreviewed`, `unseen`, `unpinned` under `pin = \"off\"`, `unreached`), and the fingerprints of the definition listed and the one pinned. Roles: approver, admin; and agent, shown only the tools its policy does not deny it outright (a deny rule reading only the tool and the principal, or a default deny no other rule lifts).", &[])
        },
        Op::GetTool => Operation {
            ok: vec![json_ok(200, "The tool, with the definition listed and the one pinned.")],
            ..o("getTool", "approvers", "One MCP tool and its pin", "Roles: approver, admin.", &[Code::ToolUnknown])
        },
        Op::ReviewTool => Operation {
            ok: vec![json_ok(200, "The review of the tool's current definition (the one already open for it, if any).")],
            ..o("reviewTool", "approvers", "Review a tool's current definition",
                "Opens a review (an approval of kind `tool_definition`) of the definition the upstream lists now: one a reviewer declined is reviewed again, and an open review of another definition is withdrawn. Role: admin.",
                &[Code::AuthForbidden, Code::ToolUnknown, Code::ApprovalInvalidState])
        },
        other => unreachable!("{other:?} is not one of approver_operation's operations"),
    }
}

/// Admins' routes: the policy, tools, webhooks, the audit log.
fn admin_operation(op: Op) -> Operation {
    match op {
        Op::GetPolicy => Operation {
            ok: vec![json_ok(200, "The policy in force.")],
            ..o("getPolicy", "admin", "The policy in force", "Role: admin.", &[])
        },
        Op::EvaluatePolicy => Operation {
            ok: vec![json_ok(200, "What the policy would decide.")],
            ..o("evaluatePolicy", "admin", "Dry-run the policy", "No side effects. Role: admin.",
                &[Code::RequestInvalidTool, Code::RequestInvalidArgs, Code::RequestInvalidContext,
                  Code::RequestInvalidClassifier, Code::RequestInvalidField])
        },
        Op::ReloadPolicy => Operation {
            ok: vec![json_ok(200, "The new policy is in force.")],
            ..o("reloadPolicy", "admin", "Reload the policy", "A policy that does not load leaves the current one in force. Role: admin.",
                &policy_load())
        },
        Op::GetShadow => Operation {
            ok: vec![json_ok(200, "The shadow set's transitions since it loaded.")],
            ..o("getShadow", "admin", "What the shadow policy would change",
                "Every call is evaluated by the shadow set (`[server] shadow_policy`) too; its decision changes nothing. Counts of calls by live and shadow decision since the shadow set loaded, the pairs that differ first (widening ones, towards allow, before narrowing ones), each with its latest calls. `configured: false` when no shadow set is configured. Role: admin.", &[])
        },
        Op::ListWebhooks => Operation {
            ok: vec![json_ok(200, "The configured webhooks.")],
            links: &[
                (200, "enableWebhook", "id", "$response.body#/webhooks/0/id"),
                (200, "testWebhook", "id", "$response.body#/webhooks/0/id"),
            ],
            ..o("listWebhooks", "admin", "Webhooks", "Role: admin.", &[])
        },
        Op::EnableWebhook => Operation {
            ok: vec![json_ok(200, "Its parked deliveries go out again.")],
            ..o("enableWebhook", "admin", "Re-enable a webhook", "Role: admin.", &[Code::WebhookNotFound])
        },
        Op::TestWebhook => Operation {
            ok: vec![json_ok(202, "A test event, queued in the outbox.")],
            ..o("testWebhook", "admin", "Send a test event", "Role: admin.", &[Code::WebhookNotFound])
        },
        Op::ListAudit => Operation {
            params: vec![
                query("after", json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_SAFE}, {"type": "string", "pattern": "^c([0-9a-f]{2})+$"}]}), "Records after this position: a seq (of the only chain, or the oldest), or the `next_after` of a page (a position across chains)."),
                query("limit", json!({"type": "integer", "minimum": 0, "maximum": MAX_SAFE}), "Page size: 100 unless given, at least 1, at most 1000."),
            ],
            ok: vec![json_ok(200, "Records in seq order.")],
            ..o("listAudit", "admin", "Read the audit log", "Role: admin.", &[Code::RequestInvalidField])
        },
        Op::ExportAudit => Operation {
            params: vec![query("after", json!({"anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_SAFE}, {"type": "string", "pattern": "^c([0-9a-f]{2})+$"}]}), "Records after this position: a seq (of the only chain, or the oldest), or the `next_after` of a page (a position across chains).")],
            ok: vec![(200, "application/x-ndjson", Shape::Text, "One record per line, as `airlock audit verify` reads them.")],
            ..o("exportAudit", "admin", "Export the audit log", "Notes how far the log is exported, which is what a prune may drop. Role: admin.",
                &[Code::RequestInvalidField])
        },
        Op::PruneAudit => Operation {
            ok: vec![json_ok(200, "Dropped, with a checkpoint that keeps the chain verifiable.")],
            ..o("pruneAudit", "admin", "Prune exported audit records", "Role: admin.",
                &[Code::RequestInvalidField, Code::AuditNotExported])
        },
        other => unreachable!("{other:?} is not one of admin_operation's operations"),
    }
}
