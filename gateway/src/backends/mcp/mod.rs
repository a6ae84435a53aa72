//! The MCP servers airlock fronts (`[[mcp_servers]]`): connecting to each (streamable HTTP in
//! either revision, or a child process on stdio), keeping its tool list, and sending it the
//! calls the pipeline has decided may run, and the requests passed through unchecked
//! (resources, prompts, completion, ping, logging). What an upstream asks its client during a
//! `tools/call` comes back as an [`Ask`]: a form elicitation ends the wait with the input it
//! asks for (the call suspends, its open request kept as a [`Live`] until resumed), sampling
//! goes to the front end's client ([`CLIENT_ASKS`]), anything else is refused. A 2026-07-28
//! `input_required` becomes the same input, with its `requestState` to retry with. An
//! upstream that says a list changed is read again at once. How one `tools/call` is waited
//! for and its answer read is [`tool_call`]; the transports are [`http`] and [`stdio`].
//!
//! It decides nothing and records nothing: the pipeline and the front end do. Tool names are
//! prefixed here (`<server>.` by default), so a name two upstreams share is caught at start.

mod http;
mod stdio;
mod tool_call;

pub(crate) use tool_call::InFlight;
use tool_call::{drive, tool_params};
pub use tool_call::{required_capabilities, Live, ToolAnswer};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::config::{McpServerConfig, McpTransport};
use crate::error::{ApiError, Code};

/// The protocol revisions, newest first.
pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";

/// The progress token airlock gives an HTTP upstream (stdio upstreams get one per request).
pub const PROGRESS_TOKEN: &str = "airlock-progress";

/// How airlock presents itself to upstreams.
pub fn client_info() -> Value {
    json!({"name": "airlock", "version": env!("CARGO_PKG_VERSION")})
}

/// A JSON-RPC error an upstream answered (passed back to the client as it is).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

/// Why a request to an upstream has no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The upstream answered with a JSON-RPC error.
    Rpc(RpcError),
    /// It could not be reached, died, or answered garbage: `upstream.unavailable`.
    Unavailable(String),
    /// No answer in time: `upstream.timeout`.
    Timeout,
}

impl Failure {
    pub fn into_api_error(self, server: &str) -> ApiError {
        match self {
            // A tool's JSON-RPC error reaches the client as it is; this is only for callers
            // that cannot pass one on.
            Failure::Rpc(e) => ApiError::new(
                Code::UpstreamUnavailable,
                format!(
                    "MCP server `{server}` answered error {}: {}",
                    e.code, e.message
                ),
            ),
            Failure::Unavailable(why) => ApiError::new(
                Code::UpstreamUnavailable,
                format!("MCP server `{server}` is unavailable: {why}"),
            ),
            Failure::Timeout => ApiError::new(
                Code::UpstreamTimeout,
                format!("MCP server `{server}` did not answer in time"),
            ),
        }
    }
}

/// Notifications an upstream sends while a request runs (progress), for the front end to
/// relay to its client.
pub type Notifications = mpsc::UnboundedSender<Value>;

tokio::task_local! {
    /// Where an upstream's notifications for the call being run (progress, log messages)
    /// go: set by the MCP front end around the pipeline future of a client that can take
    /// them. INVARIANT: only the front end that set it reads what is sent; the pipeline does
    /// not touch it, and [`super::Backends::send`] only passes it to the upstream.
    pub static NOTIFICATIONS: Notifications;
}

/// A request an upstream sent its client while one of our requests ran (elicitation,
/// sampling), and where its answer goes: `{"result": …}` or `{"error": …}`.
pub struct Ask {
    pub method: String,
    pub params: Value,
    pub reply: oneshot::Sender<Value>,
}

/// Where a request's [`Ask`]s go; without one, they are answered "not relayed".
pub type Asks = mpsc::UnboundedSender<Ask>;

tokio::task_local! {
    /// Where an upstream's requests to its client during a `tools/call` go
    /// ([`RELAYED_TO_CLIENT`]): set by the MCP front end around a call whose client may take
    /// them. Without it, they are answered "not relayed".
    pub static CLIENT_ASKS: Asks;
}

/// What the client of the call being run takes of a 2026-07-28 upstream's `input_required`
/// (DESIGN §15), and a retry's answers to send back.
#[derive(Clone, Debug, Default)]
pub struct InputRelay {
    /// The call is a 2026-07-28 client's: what it cannot take of sampling or roots is
    /// refused with -32021 rather than suspended.
    pub active: bool,
    /// The methods of input requests the client declared it answers (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`).
    pub takes: Vec<&'static str>,
    /// A retry: the client's `inputResponses`, and the upstream's own `requestState`.
    pub retry: Option<(Value, Option<Value>)>,
    /// The client's declared capabilities, sent to the upstream in the request's `_meta`
    /// instead of the gateway's: an upstream asks only what this client can answer.
    pub capabilities: Option<Value>,
    /// The log level the client's request asked for (`_meta`), passed on to the upstream.
    pub log_level: Option<Value>,
}

tokio::task_local! {
    /// Set by the MCP front end around a 2026-07-28 client's call. An upstream's
    /// `input_required` whose every request the client takes is handed back unchanged (the
    /// front end seals the upstream's state into its own); without it, or when the client
    /// cannot take one of them, a form elicitation suspends the call as before.
    pub static INPUT_RELAY: InputRelay;
}

/// Whether the request being run is a 2026-07-28 client's (the front end set [`INPUT_RELAY`]).
pub fn client_is_modern() -> bool {
    INPUT_RELAY.try_with(|r| r.active).unwrap_or(false)
}

/// The key of the gateway's own approval request; an upstream may not use it.
pub const APPROVAL_KEY: &str = "airlock_approval";

/// What an upstream may ask the agent's client mid-call, through [`CLIENT_ASKS`] (a form
/// elicitation suspends the call instead).
pub const RELAYED_TO_CLIENT: [&str; 3] =
    ["sampling/createMessage", "roots/list", "elicitation/create"];

/// The answer to an ask airlock does not relay.
pub fn not_relayed(method: &str) -> Value {
    json!({"error": {"code": -32601, "message": format!("airlock does not relay `{method}` to its client")}})
}

/// Hands an upstream's request to `asks` (or refuses it), and returns the answer to send back.
pub(crate) async fn ask(asks: Option<&Asks>, request: &Value) -> Value {
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let Some(asks) = asks else {
        return not_relayed(&method);
    };
    let (reply, answer) = oneshot::channel();
    let ask = Ask {
        method: method.clone(),
        params: request.get("params").cloned().unwrap_or(Value::Null),
        reply,
    };
    if asks.send(ask).is_err() {
        return not_relayed(&method);
    }
    answer.await.unwrap_or_else(
        |_| json!({"error": {"code": -32603, "message": "the request was abandoned"}}),
    )
}

/// `notifications/{tools,prompts,resources}/list_changed`: the upstream's lists are read again
/// at once.
pub(crate) fn is_list_changed(n: &Value) -> bool {
    matches!(
        n.get("method").and_then(Value::as_str),
        Some(
            "notifications/tools/list_changed"
                | "notifications/prompts/list_changed"
                | "notifications/resources/list_changed"
        )
    )
}

/// The capabilities airlock declares to upstreams: it takes form elicitations (they suspend
/// the call, DESIGN §11), and sampling (relayed to the agent's client when it can sample,
/// else refused).
pub fn client_capabilities() -> Value {
    json!({"elicitation": {"form": {}}, "sampling": {}})
}

/// How long a tool call may stay open at an upstream while it waits for resume data; each
/// step of it (until the answer or the next ask) still has the server's own timeout.
const LIVE_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Calls suspended on an upstream's open request at once, at most.
const MAX_LIVE: usize = 10_000;

/// A request's params as sent: a JSON object, and for a `tools/call` its arguments as the
/// canonical text they were fingerprinted as, written into the message unchanged.
pub struct Params {
    pub fields: Value,
    pub arguments: Option<Box<RawValue>>,
}

impl From<Value> for Params {
    fn from(fields: Value) -> Params {
        Params {
            fields,
            arguments: None,
        }
    }
}

impl Serialize for Params {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(arguments) = &self.arguments else {
            return self.fields.serialize(s);
        };
        let mut m = s.serialize_map(None)?;
        if let Value::Object(fields) = &self.fields {
            for (k, v) in fields.iter().filter(|(k, _)| *k != "arguments") {
                m.serialize_entry(k, v)?;
            }
        }
        m.serialize_entry("arguments", arguments)?;
        m.end()
    }
}

/// A JSON-RPC request as sent, written from borrowed parts.
#[derive(Serialize)]
pub(crate) struct Envelope<'a> {
    pub(crate) jsonrpc: &'static str,
    pub(crate) id: u64,
    pub(crate) method: &'a str,
    pub(crate) params: &'a Params,
}

/// One transport to one upstream.
enum Conn {
    Http(Box<http::HttpConn>),
    Stdio(Arc<stdio::StdioConn>),
}

impl Conn {
    async fn request(
        &self,
        method: &str,
        params: Params,
        timeout: Duration,
        notify: Option<Notifications>,
        asks: Option<Asks>,
    ) -> Result<Value, Failure> {
        match self {
            Conn::Http(c) => c.request(method, params, timeout, notify, asks).await,
            Conn::Stdio(c) => c.request(method, params, timeout, notify, asks).await,
        }
    }
}

/// One upstream server and what it last listed.
pub struct Server {
    pub config: McpServerConfig,
    conn: Conn,
    /// Its tools as it listed them (unprefixed), or `None` while it was never reached.
    tools: RwLock<Option<Vec<Value>>>,
    /// Resource URIs it listed, to route `resources/read` and friends.
    resources: RwLock<HashSet<String>>,
    /// Prompt names it listed (unprefixed).
    prompts: RwLock<HashSet<String>>,
    /// The literal beginnings of the resource templates it listed (up to the first `{`).
    templates: RwLock<Vec<String>>,
    /// Told when it says a list changed: its lists are read again at once.
    changed: Arc<tokio::sync::Notify>,
}

impl Server {
    /// Sends one request with this server's timeout.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        notify: Option<Notifications>,
    ) -> Result<Value, Failure> {
        self.conn
            .request(method, params.into(), self.config.timeout, notify, None)
            .await
    }

    /// Lists its tools (following `nextCursor`), and its resources and prompts when it has
    /// them. A failure leaves the last good lists in place.
    pub async fn refresh(&self) -> Result<(), Failure> {
        let tools = self.list_all("tools/list", "tools").await?;
        *self.tools.write().unwrap_or_else(|e| e.into_inner()) = Some(tools);
        if let Ok(resources) = self.list_all("resources/list", "resources").await {
            *self.resources.write().unwrap_or_else(|e| e.into_inner()) = resources
                .iter()
                .filter_map(|r| r.get("uri").and_then(Value::as_str).map(str::to_owned))
                .collect();
        }
        if let Ok(templates) = self
            .list_all("resources/templates/list", "resourceTemplates")
            .await
        {
            *self.templates.write().unwrap_or_else(|e| e.into_inner()) = templates
                .iter()
                .filter_map(|t| t.get("uriTemplate").and_then(Value::as_str))
                .map(|t| t.split('{').next().unwrap_or("").to_owned())
                .filter(|prefix| !prefix.is_empty())
                .collect();
        }
        if let Ok(prompts) = self.list_all("prompts/list", "prompts").await {
            *self.prompts.write().unwrap_or_else(|e| e.into_inner()) = prompts
                .iter()
                .filter_map(|p| p.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect();
        }
        Ok(())
    }

    /// Every item of a paginated list method (following `nextCursor`, 100 pages at most).
    pub async fn list_all(&self, method: &str, field: &str) -> Result<Vec<Value>, Failure> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request(method, params, None).await?;
            if let Some(items) = page.get(field).and_then(Value::as_array) {
                out.extend(items.iter().cloned());
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// The tool list as clients see it: names prefixed, everything else as the upstream gave.
    fn visible_tools(&self) -> Vec<Value> {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools
            .iter()
            .flatten()
            .filter_map(|t| {
                let name = t.get("name")?.as_str()?;
                let mut t = t.clone();
                t["name"] = Value::String(format!("{}{name}", self.config.prefix));
                Some(t)
            })
            .collect()
    }

    fn tool_declares(&self, name: &str, field: &str) -> bool {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools
            .iter()
            .flatten()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(name) && t.get(field).is_some())
    }

    fn has_tool(&self, name: &str) -> bool {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools
            .iter()
            .flatten()
            .any(|t| t.get("name").and_then(Value::as_str) == Some(name))
    }
}

/// Every configured upstream.
pub struct Registry {
    pub servers: Vec<Arc<Server>>,
    /// Tool calls suspended on an upstream's open request, by call id (DESIGN §11).
    live: Mutex<HashMap<String, Live>>,
}

/// A tool as the pipeline routes it: the server, and the name the upstream knows it by.
#[derive(Clone)]
pub struct McpTool {
    pub server: Arc<Server>,
    pub name: String,
}

impl Registry {
    /// Builds the connections; nothing is contacted until [`Registry::start`].
    pub fn new(
        configs: &[McpServerConfig],
        pool: Arc<crate::backends::http::Upstreams>,
    ) -> Result<Registry, String> {
        let mut servers = Vec::new();
        for c in configs {
            let changed = Arc::new(tokio::sync::Notify::new());
            let conn = match &c.transport {
                McpTransport::Http { url, headers } => Conn::Http(Box::new(http::HttpConn::new(
                    url,
                    headers.clone(),
                    changed.clone(),
                    pool.clone(),
                )?)),
                McpTransport::Stdio { command, args, env } => Conn::Stdio(stdio::StdioConn::new(
                    &c.name,
                    command,
                    args.clone(),
                    env.clone(),
                    changed.clone(),
                )),
            };
            servers.push(Arc::new(Server {
                config: c.clone(),
                conn,
                tools: RwLock::new(None),
                resources: RwLock::new(HashSet::new()),
                prompts: RwLock::new(HashSet::new()),
                templates: RwLock::new(Vec::new()),
                changed,
            }));
        }
        Ok(Registry {
            servers,
            live: Mutex::new(HashMap::new()),
        })
    }

    /// Connects to every upstream and lists its tools; one that cannot be reached is logged
    /// and left out (it is tried again every 30 s). Two upstreams listing the same visible
    /// name is an error: the gateway does not start.
    pub async fn start(&self) -> Result<(), String> {
        let mut tasks = Vec::new();
        for s in &self.servers {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let r = s.refresh().await;
                (s, r)
            }));
        }
        for t in tasks {
            if let Ok((s, Err(e))) = t.await {
                tracing::warn!(server = %s.config.name, "MCP server not reached at start, its tools are left out: {e:?}");
            }
        }
        self.check_unique()
    }

    /// Reads each upstream's lists again every 30 s and when it says one changed, keeping the
    /// last good ones on failure.
    pub async fn refresh_loop(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut loops = Vec::new();
        for (i, _) in self.servers.iter().enumerate() {
            let (me, shutdown) = (self.clone(), shutdown.clone());
            loops.push(tokio::spawn(async move {
                let s = &me.servers[i];
                loop {
                    // Every 30 s, and at once when the upstream says a list changed.
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                        _ = s.changed.notified() => {
                            tracing::info!(server = %s.config.name, "MCP server's lists changed; reading them again");
                        }
                        _ = shutdown.cancelled() => break,
                    }
                    if let Err(e) = s.refresh().await {
                        tracing::debug!(server = %s.config.name, "MCP server list refresh failed: {e:?}");
                    }
                    if let Err(e) = me.check_unique() {
                        tracing::error!("{e}");
                    }
                }
            }));
        }
        for l in loops {
            let _ = l.await;
        }
    }

    fn check_unique(&self) -> Result<(), String> {
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for s in &self.servers {
            for t in s.visible_tools() {
                let name = t["name"].as_str().unwrap_or_default().to_owned();
                if let Some(other) = seen.insert(name.clone(), s.config.name.clone()) {
                    return Err(format!(
                        "mcp_servers: the tool name `{name}` is listed by both `{other}` and `{}`; give one of them a `prefix`",
                        s.config.name
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every upstream tool, as clients see it.
    pub fn tools(&self) -> Vec<Value> {
        self.servers
            .iter()
            .flat_map(|s| s.visible_tools())
            .collect()
    }

    /// The upstream tool behind a visible name.
    pub fn resolve(&self, visible: &str) -> Option<McpTool> {
        self.servers.iter().find_map(|s| {
            let name = visible.strip_prefix(s.config.prefix.as_str())?;
            s.has_tool(name).then(|| McpTool {
                server: s.clone(),
                name: name.to_owned(),
            })
        })
    }

    /// Whether the upstream tool behind a visible name declares an `outputSchema`.
    pub fn declares_output_schema(&self, visible: &str) -> bool {
        self.servers.iter().any(|s| {
            visible
                .strip_prefix(s.config.prefix.as_str())
                .is_some_and(|name| s.tool_declares(name, "outputSchema"))
        })
    }

    /// The server owning a prompt (by visible name), with the upstream's name for it.
    pub fn prompt(&self, visible: &str) -> Option<(Arc<Server>, String)> {
        self.servers.iter().find_map(|s| {
            let name = visible.strip_prefix(s.config.prefix.as_str())?;
            let has = s
                .prompts
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(name);
            has.then(|| (s.clone(), name.to_owned()))
        })
    }

    /// The server that listed a resource URI, else the one with a template it fits, else the
    /// only upstream there is.
    pub fn resource(&self, uri: &str) -> Option<Arc<Server>> {
        let listed = self.servers.iter().find(|s| {
            s.resources
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(uri)
        });
        let templated = || {
            self.servers.iter().find(|s| {
                s.templates
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .any(|prefix| uri.starts_with(prefix.as_str()))
            })
        };
        let only = || (self.servers.len() == 1).then(|| &self.servers[0]);
        listed.or_else(templated).or_else(only).cloned()
    }

    /// Calls a tool with the canonical arguments; the result comes back as the upstream gave
    /// it (`content`, `structuredContent`, `isError`), or as the input it asked for.
    pub async fn call_tool(
        &self,
        tool: &McpTool,
        canonical_args: &str,
        meta: Map<String, Value>,
        notify: Option<Notifications>,
    ) -> Result<ToolAnswer, ApiError> {
        let mut params = tool_params(tool, canonical_args, meta, notify.is_some());
        // A relayed retry: the client's answers, under the upstream's keys, and its state.
        if let Ok(Some((responses, state))) = INPUT_RELAY.try_with(|r| r.retry.clone()) {
            params.fields["inputResponses"] = responses;
            if let Some(s) = state.filter(|s| !s.is_null()) {
                params.fields["requestState"] = s;
            }
        }
        self.start_call(tool, params, notify).await
    }

    /// Continues a call suspended on an elicitation with the accepted `data`: on the request
    /// the upstream keeps open, or as a 2026-07-28 retry with `state` (the stored
    /// `input_key` and `request_state`). Neither (the gateway restarted while a 2025
    /// upstream waited) is `call.interrupted`: the tool's work so far is not run again.
    pub async fn resume_tool(
        &self,
        tool: &McpTool,
        call_id: &str,
        canonical_args: &str,
        data: &Value,
        state: Option<Value>,
        notify: Option<Notifications>,
    ) -> Result<ToolAnswer, ApiError> {
        let answer = json!({"action": "accept", "content": data});
        let live = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(call_id);
        if let Some(live) = live {
            let _ = live.reply.send(json!({"result": answer}));
            return drive(tool, InFlight::Own(live.task), live.asks).await;
        }
        let Some(key) = state
            .as_ref()
            .and_then(|s| s.get("input_key"))
            .and_then(Value::as_str)
        else {
            return Err(ApiError::new(
                Code::CallInterrupted,
                format!(
                    "MCP server `{}` no longer holds the request that asked for this input (the gateway restarted, or the request ended); the tool's work is not run again",
                    tool.server.config.name
                ),
            ));
        };
        let mut params = tool_params(tool, canonical_args, Map::new(), notify.is_some());
        params.fields["inputResponses"] = json!({key: answer});
        if let Some(rs) = state.as_ref().and_then(|s| s.get("request_state")) {
            if !rs.is_null() {
                params.fields["requestState"] = rs.clone();
            }
        }
        self.start_call(tool, params, notify).await
    }

    /// Keeps a call's open request until it is resumed or dropped.
    /// Refused (the request is abandoned) when `MAX_LIVE` calls already wait this way: each
    /// holds an open upstream request in memory.
    pub fn keep_live(&self, call_id: &str, live: Live) -> Result<(), ApiError> {
        let mut held = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if held.len() >= MAX_LIVE {
            return Err(ApiError::new(
                Code::UpstreamUnavailable,
                format!("{MAX_LIVE} calls already wait on an MCP server's open request for input; this one cannot be suspended"),
            ));
        }
        held.insert(call_id.to_owned(), live);
        Ok(())
    }

    /// Abandons a suspended call's open request (it expired or was cancelled).
    pub fn drop_live(&self, call_id: &str) {
        let live = self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(call_id);
        drop(live);
    }

    async fn start_call(
        &self,
        tool: &McpTool,
        params: Params,
        notify: Option<Notifications>,
    ) -> Result<ToolAnswer, ApiError> {
        let (asks, ask_rx) = mpsc::unbounded_channel();
        let server = tool.server.clone();
        // The request runs in a task of its own: it carries the client's revision along.
        let relay = INPUT_RELAY.try_with(Clone::clone).unwrap_or_default();
        let request = INPUT_RELAY.scope(relay, async move {
            server
                .conn
                .request("tools/call", params, LIVE_LIMIT, notify, Some(asks))
                .await
        });
        drive(tool, InFlight::new(request), ask_rx).await
    }
}

/// Adds a 2026-07-28 request's `_meta` envelope to `params`.
pub fn with_modern_meta(mut params: Value) -> Value {
    if !params.is_object() {
        params = json!({});
    }
    let meta = params
        .as_object_mut()
        .map(|p| p.entry("_meta").or_insert_with(|| json!({})));
    if let Some(Value::Object(m)) = meta {
        m.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            Value::String(MODERN.into()),
        );
        let caps = INPUT_RELAY
            .try_with(|r| r.capabilities.clone())
            .ok()
            .flatten()
            .unwrap_or_else(client_capabilities);
        m.insert("io.modelcontextprotocol/clientCapabilities".into(), caps);
        if let Ok(Some(level)) = INPUT_RELAY.try_with(|r| r.log_level.clone()) {
            m.insert("io.modelcontextprotocol/logLevel".into(), level);
        }
        m.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
    }
    params
}

/// Routes a JSON-RPC message an upstream sent: the answer to `id`, or a notification.
pub(crate) enum Incoming {
    Answer(Result<Value, Failure>),
    Notification(Value),
    /// A request from the server (elicitation, sampling): not relayed yet.
    Request(Value),
    Other,
}

pub(crate) fn classify(mut msg: Value, id: Option<u64>) -> Incoming {
    let has_method = msg.get("method").is_some();
    let msg_id = msg.get("id");
    if has_method && msg_id.is_some() {
        return Incoming::Request(msg);
    }
    if has_method {
        return Incoming::Notification(msg);
    }
    if id.is_some() && msg_id.and_then(Value::as_u64) != id {
        return Incoming::Other;
    }
    let Some(fields) = msg.as_object_mut() else {
        return Incoming::Other;
    };
    if let Some(r) = fields.remove("result") {
        return Incoming::Answer(Ok(r));
    }
    if let Some(e) = fields.remove("error") {
        return Incoming::Answer(Err(Failure::Rpc(RpcError {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            data: e.get("data").cloned(),
        })));
    }
    Incoming::Other
}
