//! The MCP front end: `POST /mcp`, streamable HTTP, both protocol revisions on one endpoint,
//! chosen per request (DESIGN §10):
//!
//! - 2025-11-25: `initialize` opens a session (`MCP-Session-Id`, bound to the principal that
//!   opened it); later requests carry it; `DELETE` ends it;
//! - 2026-07-28: every request stands alone, carrying its protocol version and client
//!   capabilities in `params._meta`, with `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
//!   headers that must agree with the body (`-32020`); results carry `resultType`.
//!
//! Every `tools/call` goes through the one flow ([`calls`] → [`crate::pipeline`]); resource
//! reads and subscriptions, prompts and completions are judged by policy ([`requests`]) and
//! then passed to the owning upstream ([`upstream`]); the lists are answered here
//! ([`lists`]). This module translates; it decides nothing itself.

pub mod calls;
mod front;
mod lists;
pub mod parked;
mod relay;
mod requests;
pub mod results;
pub mod seal;
mod stream;
pub mod tasks;
pub mod wire;

use std::sync::Arc;

use airlock_storage::Principal;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::auth::{Need, Role};
use crate::backends::mcp::{self as upstream, LEGACY, MODERN};
use crate::body::{json_bytes_response, json_response, read_body, Body, BodyLimits};
use crate::error::Code;
use crate::pipeline::{admit, Front};
use crate::state::Gateway;
pub use front::McpFront;
use lists::{aggregate, paginate};
use wire::{Message, RpcError};

/// The versions this endpoint speaks, oldest first.
pub const SUPPORTED: [&str; 2] = [LEGACY, MODERN];

/// Earlier revisions a 2025-11-25 session accepts in its `MCP-Protocol-Version` header.
const EARLIER_2025: [&str; 2] = ["2025-03-26", "2025-06-18"];

/// Methods the 2026-07-28 revision removed: asked in that revision, they do not exist.
const REMOVED_IN_MODERN: [&str; 6] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    "notifications/initialized",
];

/// The methods whose 2026-07-28 results carry `ttlMs` and `cacheScope`.
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
];

/// Page size of the list methods.
const PAGE: usize = 100;

/// Which revision a request speaks, and what its client can do.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub revision: &'static str,
    /// The 2025 session, if any.
    pub session: Option<String>,
    pub capabilities: Value,
    /// The client accepts a server-sent event stream in answer.
    pub accepts_sse: bool,
    /// The client wants the upstream's log messages (`notifications/message`): a 2025
    /// session always (its level is the session's), a 2026-07-28 request only when its
    /// `_meta` sets `io.modelcontextprotocol/logLevel`.
    pub logs: bool,
}

impl Exchange {
    pub fn modern(&self) -> bool {
        self.revision == MODERN
    }

    /// The client can open a URL we send it (elicitation, `url` mode).
    pub fn url_elicitation(&self) -> bool {
        wire::at(&self.capabilities, &["elicitation", "url"]).is_some_and(Value::is_object)
    }

    /// The client fills in forms we send it (elicitation, `form` mode; an `elicitation`
    /// capability naming no mode means form).
    pub fn form_elicitation(&self) -> bool {
        match self.capabilities.get("elicitation") {
            Some(Value::Object(e)) => e.is_empty() || e.get("form").is_some_and(Value::is_object),
            _ => false,
        }
    }
}

/// Handles one request to `/mcp`; never fails (errors become responses).
pub async fn handle(
    gw: Arc<Gateway>,
    front: Arc<McpFront>,
    req: Request<Incoming>,
) -> Response<Body> {
    let _permit = match admit::in_flight(&gw) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = admit::host(&gw, &req) {
        return e.into_response();
    }
    if let Some(origin) = req.headers().get("origin").and_then(|v| v.to_str().ok()) {
        if !gw.config.origin_allowed(origin) {
            return http_refusal(
                StatusCode::FORBIDDEN,
                Code::AuthForbiddenOrigin,
                &format!("requests from origin `{origin}` are not accepted"),
            );
        }
    }
    // Refusals carry the challenge an OAuth client starts its discovery from (DESIGN §16).
    let (principal, role) = match gw.auth.authenticate(req.headers(), Need::Mcp).await {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if role == Role::Approver {
        return http_refusal(
            StatusCode::FORBIDDEN,
            Code::AuthForbidden,
            "`/mcp` is for agents (and admins); approvers decide through the API or the inbox",
        );
    }
    if let Err(e) = admit::rate(&gw, &principal).await {
        return e.into_response();
    }
    match *req.method() {
        Method::POST => {
            // A caller authenticated by its JWT is the subject of its calls' token exchanges.
            // Matched here: the large request future is not moved into another for the
            // common call that has no subject.
            match crate::credentials::subject_of(&principal, req.headers()) {
                Some(s) => {
                    crate::credentials::SUBJECT
                        .scope(s, post(&gw, &front, principal, req))
                        .await
                }
                None => post(&gw, &front, principal, req).await,
            }
        }
        Method::DELETE => {
            let session = header(&req, "mcp-session-id");
            let mut sessions = front.sessions.lock().unwrap_or_else(|e| e.into_inner());
            match session {
                Some(s)
                    if sessions
                        .get(&s)
                        .is_some_and(|x| x.principal == principal.id) =>
                {
                    sessions.remove(&s);
                    empty(StatusCode::NO_CONTENT)
                }
                Some(_) => empty(StatusCode::NOT_FOUND),
                None => empty(StatusCode::METHOD_NOT_ALLOWED),
            }
        }
        // No standalone server stream: list changes are not pushed yet.
        _ => empty(StatusCode::METHOD_NOT_ALLOWED),
    }
}

fn header(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(crate::body::full(Vec::new()));
    *r.status_mut() = status;
    r
}

/// A refusal before any JSON-RPC is read: the API's error body.
fn http_refusal(status: StatusCode, code: Code, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"code": code, "message": message, "details": {}}}),
    )
}

/// The HTTP status for a JSON-RPC error code on this endpoint.
fn status_for(code: i64, modern: bool) -> StatusCode {
    match code {
        wire::PARSE_ERROR | wire::INVALID_REQUEST => StatusCode::BAD_REQUEST,
        wire::HEADER_MISMATCH | wire::UNSUPPORTED_PROTOCOL_VERSION | wire::MISSING_CAPABILITY => {
            StatusCode::BAD_REQUEST
        }
        wire::INVALID_PARAMS if modern => StatusCode::BAD_REQUEST,
        wire::METHOD_NOT_FOUND if modern => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

pub fn rpc_error(e: &RpcError, modern: bool) -> Response<Body> {
    json_response(status_for(e.code, modern), &e.to_json())
}

async fn post(
    gw: &Arc<Gateway>,
    front: &Arc<McpFront>,
    principal: Principal,
    req: Request<Incoming>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let limits = BodyLimits {
        max_bytes: gw.config.max_body_bytes,
        timeout: gw.config.connections.body_timeout,
    };
    let body = match read_body(body, limits).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    // A big message is parsed, decided and answered on the heavy lane (DESIGN §19).
    if gw.heavy.takes(body.len()) {
        let (there, front) = (gw.clone(), front.clone());
        let work =
            Box::pin(
                async move { message(&there, &front, principal, &parts.headers, &body).await },
            );
        return match gw.heavy.run(work).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        };
    }
    message(gw, front, principal, &parts.headers, &body).await
}

/// One JSON-RPC message, read whole, to its answer.
async fn message(
    gw: &Arc<Gateway>,
    front: &Arc<McpFront>,
    principal: Principal,
    headers: &hyper::HeaderMap,
    body: &[u8],
) -> Response<Body> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let msg = match wire::parse(body) {
        Ok(m) => m,
        Err(e) => {
            // A strict-intake refusal (DESIGN §3) before any method is read: audited as a
            // refused call, in the revision the headers name. A message that is not JSON-RPC
            // at all (a batch, no `jsonrpc`) carries no airlock code and is no call.
            let code = e
                .data
                .as_ref()
                .and_then(|d| d["code"].as_str())
                .and_then(Code::parse);
            if let Some(code) = code {
                admit::reject(gw, &principal, code, &front_of_headers(&get), None).await;
            }
            return rpc_error(&e, false);
        }
    };
    let exchange = match exchange_of(front, &principal, &msg, &get) {
        Ok(x) => x,
        Err(refused) => return *refused,
    };
    let Some(method) = msg.method.clone() else {
        // A response to a request of ours (a form elicitation of a suspended call), within
        // the session that was asked; anything else is dropped.
        if let (Some(sid), Some(id), Some(response)) = (&exchange.session, &msg.id, msg.response) {
            if !front.reply(sid, id, response) {
                tracing::debug!(session = %sid, "a response to no outstanding request of ours");
            }
        }
        return empty(StatusCode::ACCEPTED);
    };
    if msg.id.is_none() {
        // Notifications (initialized, cancelled, progress): acknowledged. A 2025 client's
        // cancel stops its call (a 2026 client cancels by closing the response stream).
        if method == "notifications/cancelled" {
            if let (Some(sid), Some(rid)) = (&exchange.session, msg.params.get("requestId")) {
                front.cancel(sid, rid);
            }
        }
        return empty(StatusCode::ACCEPTED);
    }
    let id = msg.id();
    match method.as_str() {
        "initialize" => initialize(front, &principal, &exchange, id),
        "tools/call" => calls::call(gw, front, principal, exchange, msg).await,
        m if m.starts_with("tasks/") => {
            // An upstream's task is asked of it in the client's revision and capabilities.
            let relay = relay::input_relay(&exchange, &msg);
            let answer = crate::backends::mcp::INPUT_RELAY
                .scope(
                    relay,
                    tasks::method(gw, front, &principal, &exchange, m, &msg),
                )
                .await;
            respond(answer, id, &method, exchange.modern())
        }
        _ => {
            // A 2026 client's prompts and resources are asked of the upstream in 2026 too,
            // so its input requests (`input_required`) reach the client as they are.
            let relay = relay::input_relay(&exchange, &msg);
            let answer = crate::backends::mcp::INPUT_RELAY
                .scope(
                    relay,
                    answer(gw, front, &principal, &exchange, &method, &msg),
                )
                .await;
            respond(answer, id, &method, exchange.modern())
        }
    }
}

/// The revision and session a message is in: `initialize` opens a 2025 session, a session id
/// names one, a 2026-07-28 request carries its `_meta`. Anything else is refused.
fn exchange_of(
    front: &McpFront,
    principal: &Principal,
    msg: &Message,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Exchange, Box<Response<Body>>> {
    let accepts_sse = get("accept").is_some_and(|a| a.contains("text/event-stream"));
    let version_header = get("mcp-protocol-version");
    let meta = msg.params.get("_meta").unwrap_or(&Value::Null);
    let meta_version = meta.get("io.modelcontextprotocol/protocolVersion");
    let modern_signal = meta_version.is_some() || version_header.as_deref() == Some(MODERN);
    if let Some(removed) = msg.method.as_deref().filter(|m| {
        modern_signal && get("mcp-session-id").is_none() && REMOVED_IN_MODERN.contains(m)
    }) {
        // Asked as a 2026-07-28 request, a method that revision removed does not exist: no
        // session is opened and nothing goes upstream.
        let e = RpcError::new(
            msg.id(),
            wire::METHOD_NOT_FOUND,
            format!("`{removed}` does not exist in the 2026-07-28 revision"),
        );
        return Err(Box::new(rpc_error(&e, true)));
    }
    let exchange = if msg.method.as_deref() == Some("initialize") {
        Exchange {
            revision: LEGACY,
            session: None,
            capabilities: msg
                .params
                .get("capabilities")
                .cloned()
                .unwrap_or(Value::Null),
            accepts_sse,
            logs: true,
        }
    } else if let Some(sid) = get("mcp-session-id") {
        // Another principal's session is as unknown as a made-up one.
        match front.session(&sid, &principal.id) {
            // A 2025 session speaks its own revision; a request naming another is refused,
            // as the 2025 transport says. The earlier 2025 revisions are read as this one:
            // clients (and the conformance suite) send them inside such a session.
            Some(_)
                if version_header
                    .as_deref()
                    .is_some_and(|v| v != LEGACY && !EARLIER_2025.contains(&v)) =>
            {
                let e = RpcError::new(
                    msg.id(),
                    wire::INVALID_REQUEST,
                    format!(
                        "this session speaks {LEGACY}; the MCP-Protocol-Version header says {}",
                        version_header.as_deref().unwrap_or("")
                    ),
                );
                return Err(Box::new(rpc_error(&e, false)));
            }
            Some(s) => Exchange {
                revision: LEGACY,
                session: Some(sid),
                capabilities: s.capabilities,
                accepts_sse,
                logs: true,
            },
            None => {
                let e = RpcError::new(
                    msg.id(),
                    wire::INVALID_REQUEST,
                    "unknown or ended session: initialize again",
                );
                return Err(Box::new(json_response(StatusCode::NOT_FOUND, &e.to_json())));
            }
        }
    } else if meta_version.is_some() || version_header.as_deref() == Some(MODERN) {
        if let Err(e) = check_modern(msg, meta, version_header.as_deref(), get) {
            return Err(Box::new(rpc_error(&e, true)));
        }
        Exchange {
            revision: MODERN,
            session: None,
            capabilities: meta
                .get("io.modelcontextprotocol/clientCapabilities")
                .cloned()
                .unwrap_or(Value::Null),
            accepts_sse,
            logs: meta.get("io.modelcontextprotocol/logLevel").is_some(),
        }
    } else if let Some(v) = version_header.filter(|v| !SUPPORTED.contains(&v.as_str())) {
        return Err(Box::new(rpc_error(&unsupported(msg.id(), &v), true)));
    } else {
        let e = RpcError::new(
            msg.id(),
            wire::INVALID_REQUEST,
            "no session: send `initialize` first (2025-11-25), or a 2026-07-28 request with its `_meta`",
        );
        return Err(Box::new(rpc_error(&e, false)));
    };
    Ok(exchange)
}

/// `initialize` (2025-11-25): a new session, named in the `mcp-session-id` header.
fn initialize(
    front: &McpFront,
    principal: &Principal,
    exchange: &Exchange,
    id: Value,
) -> Response<Body> {
    let sid = match front.open_session(&principal.id, exchange.capabilities.clone()) {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let mut r = json_response(
        StatusCode::OK,
        &wire::result(
            id,
            json!({
                "protocolVersion": LEGACY,
                "capabilities": capabilities(false),
                "serverInfo": server_info(),
                "instructions": INSTRUCTIONS,
            }),
        ),
    );
    if let Ok(v) = hyper::header::HeaderValue::from_str(&sid) {
        r.headers_mut().insert("mcp-session-id", v);
    }
    r
}

/// The result of every method but `initialize` and `tools/call`: the gateway's own answers,
/// and the upstreams' resources, prompts and completions, passed through.
async fn answer(
    gw: &Arc<Gateway>,
    front: &Arc<McpFront>,
    principal: &Principal,
    exchange: &Exchange,
    method: &str,
    msg: &Message,
) -> Result<Value, RpcError> {
    let (id, modern) = (msg.id(), exchange.modern());
    match method {
        // The 2026-07-28 schema puts the server's identity in `_meta`.
        "server/discover" => Ok(json!({
            "supportedVersions": SUPPORTED,
            "capabilities": capabilities(true),
            "instructions": INSTRUCTIONS,
            "_meta": {"io.modelcontextprotocol/serverInfo": server_info()},
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(paginate(
            lists::visible_tools(gw, principal, modern),
            "tools",
            &msg.params,
        )),
        "resources/list" => Ok(aggregate(
            gw,
            principal,
            "resources/list",
            "resources",
            "uri",
            &msg.params,
        )
        .await),
        "resources/templates/list" => Ok(aggregate(
            gw,
            principal,
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
            &msg.params,
        )
        .await),
        "prompts/list" => Ok(aggregate(
            gw,
            principal,
            "prompts/list",
            "prompts",
            "name",
            &msg.params,
        )
        .await),
        "resources/read"
        | "resources/subscribe"
        | "resources/unsubscribe"
        | "prompts/get"
        | "completion/complete" => {
            let ask = requests::Asker {
                gw,
                front,
                principal,
                exchange,
            };
            requests::serve(&ask, method, &msg.params, &id).await
        }
        "logging/setLevel" => {
            for s in &gw.backends.mcp.servers {
                let _ = s.request(method, strip_meta(&msg.params), None, None).await;
            }
            Ok(json!({}))
        }
        other => Err(RpcError::new(
            id.clone(),
            wire::METHOD_NOT_FOUND,
            format!("method `{other}` is not supported"),
        )),
    }
}

/// A method's answer as JSON-RPC, in the revision's shape: a 2026-07-28 result says it is
/// complete and, when cacheable, for how long.
fn respond(
    answer: Result<Value, RpcError>,
    id: Value,
    method: &str,
    modern: bool,
) -> Response<Body> {
    match answer {
        Ok(mut result) => {
            if modern {
                if let Some(o) = result.as_object_mut() {
                    o.entry("resultType")
                        .or_insert(Value::String("complete".into()));
                    // Cacheable results must say how long (2026-07-28): never, since lists
                    // follow the upstreams and policy.
                    if CACHEABLE.contains(&method) {
                        o.entry("ttlMs").or_insert(json!(0));
                        o.entry("cacheScope").or_insert(json!("private"));
                    }
                }
            }
            json_bytes_response(StatusCode::OK, wire::result_bytes(&id, &result))
        }
        Err(mut e) => {
            e.id = id;
            rpc_error(&e, modern)
        }
    }
}

/// The front a request's headers name, for a refusal before its body could be read: a 2025
/// session's, or a 2026-07-28 request's.
fn front_of_headers(get: &dyn Fn(&str) -> Option<String>) -> Front {
    let session = get("mcp-session-id");
    let revision = match get("mcp-protocol-version").as_deref() {
        _ if session.is_some() => Some(LEGACY),
        Some(MODERN) => Some(MODERN),
        Some(LEGACY) => Some(LEGACY),
        _ => None,
    };
    Front::mcp(revision, session)
}

/// The 2026-07-28 checks, in the order the revision gives them: the `_meta` envelope, the
/// headers against the body, then the version.
fn check_modern(
    msg: &Message,
    meta: &Value,
    version_header: Option<&str>,
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<(), RpcError> {
    let id = msg.id();
    let version = meta.get("io.modelcontextprotocol/protocolVersion");
    if version.is_none()
        || meta
            .get("io.modelcontextprotocol/clientCapabilities")
            .is_none()
    {
        return Err(RpcError::new(
            id,
            wire::INVALID_PARAMS,
            "params._meta must carry `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`",
        ));
    }
    if msg.method.is_some() {
        if version_header.is_none() || version.and_then(Value::as_str) != version_header {
            return Err(RpcError::new(
                id,
                wire::HEADER_MISMATCH,
                "the MCP-Protocol-Version header does not match params._meta",
            ));
        }
        if get("mcp-method") != msg.method {
            return Err(RpcError::new(
                id,
                wire::HEADER_MISMATCH,
                "the Mcp-Method header does not match the body's method",
            ));
        }
        let name_key = match msg.method.as_deref() {
            Some("tools/call" | "prompts/get") => Some("name"),
            Some("resources/read") => Some("uri"),
            Some("tasks/get" | "tasks/update" | "tasks/cancel") => Some("taskId"),
            _ => None,
        };
        if let Some(k) = name_key {
            let body_name = msg.params.get(k).and_then(Value::as_str).map(str::to_owned);
            if get("mcp-name") != body_name {
                return Err(RpcError::new(
                    id,
                    wire::HEADER_MISMATCH,
                    format!("the Mcp-Name header does not match the body's `{k}`"),
                ));
            }
        }
    }
    match version.and_then(Value::as_str) {
        Some(MODERN) => Ok(()),
        Some(other) => Err(unsupported(id, other)),
        None => Err(RpcError::new(
            id,
            wire::INVALID_PARAMS,
            "the protocol version must be a string",
        )),
    }
}

fn unsupported(id: Value, requested: &str) -> RpcError {
    RpcError::new(
        id,
        wire::UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
    )
    .with_data(json!({"supported": SUPPORTED, "requested": requested}))
}

/// What the server offers, in the revision's words: tasks are the `tasks` capability of
/// 2025-11-25 and an extension in 2026-07-28.
fn capabilities(modern: bool) -> Value {
    let mut c = json!({
        "tools": {"listChanged": false},
        "resources": {},
        "prompts": {},
        "completions": {},
        "logging": {},
    });
    if modern {
        c["extensions"] = json!({tasks::EXTENSION: {}});
    } else {
        c["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    c
}

fn server_info() -> Value {
    json!({"name": "airlock", "version": env!("CARGO_PKG_VERSION")})
}

const INSTRUCTIONS: &str = "airlock checks every tool call against policy. A call may be denied, or held for a person to approve: when a result says `approval.pending`, call the tool again later with exactly the same arguments.";

fn strip_meta(params: &Value) -> Value {
    let mut p = params.clone();
    if let Some(o) = p.as_object_mut() {
        o.remove("_meta");
    }
    p
}

/// A request passed to its upstream unchecked, on the path `want` asks for; its answer (or
/// error) comes back as it is.
async fn pass(
    server: &upstream::Server,
    method: &str,
    params: Value,
    want: Option<upstream::Path>,
) -> Result<Value, RpcError> {
    server
        .request(method, params, None, want)
        .await
        .map_err(|f| match f {
            upstream::Failure::Rpc(e) => RpcError {
                id: Value::Null,
                code: e.code,
                message: e.message,
                data: e.data,
            },
            other => {
                let e = other.into_api_error(&server.config.name);
                RpcError::new(Value::Null, -32603, e.message).with_data(json!({"code": e.code}))
            }
        })
}
