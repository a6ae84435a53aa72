//! The MCP servers airlock fronts (`[[mcp_servers]]`): connecting to each (streamable HTTP in
//! either revision, or a child process on stdio), keeping its tool list (the union of what it
//! serves on its 2026-07-28 and its 2025-11-25 path, each tool, prompt and resource called on
//! a path that serves it: [`Paths`]), and sending it the
//! calls the pipeline has decided may run, and the requests passed through unchecked
//! (resources, prompts, completion, ping, logging). What an upstream asks its client during a
//! `tools/call` comes back as an [`Ask`]: a form elicitation ends the wait with the input it
//! asks for (the call suspends, its open request kept as a [`Live`] until resumed), sampling
//! goes to the front end's client ([`CLIENT_ASKS`]), anything else is refused. A 2026-07-28
//! `input_required` becomes the same input, with its `requestState` to retry with. An
//! upstream that says a list changed is read again at once. How one `tools/call` is waited
//! for and its answer read is [`tool_call`]; the transports are [`http`] and [`stdio`]; every
//! configured upstream together, and the tool names they serve, is the [`Registry`].
//!
//! It decides nothing and records nothing: the pipeline and the front end do. Tool names are
//! prefixed here (`<server>.` by default), so a name two upstreams share is caught at start.

mod http;
pub mod pins;
mod registry;
mod requests;
mod stdio;
mod tool_call;

pub use registry::{McpTool, Registry};
pub use requests::Unrouted;

pub(crate) use tool_call::InFlight;
pub use tool_call::{required_capabilities, ToolAnswer};

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::ser::SerializeMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use airlock_storage::ToolPin;

use crate::config::{McpServerConfig, PinMode};
use crate::error::{ApiError, Code};
use pins::Trust;

/// The protocol revisions, newest first.
pub const MODERN: &str = "2026-07-28";
pub const LEGACY: &str = "2025-11-25";

/// One of an upstream's two ways in: stateless 2026-07-28 requests, or a 2025-11-25 session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    Modern,
    Legacy,
}

/// The paths on which an upstream serves one tool, prompt or resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Paths {
    pub modern: bool,
    pub legacy: bool,
}

impl Paths {
    fn of(path: Path) -> Paths {
        Paths {
            modern: path == Path::Modern,
            legacy: path == Path::Legacy,
        }
    }

    fn add(&mut self, path: Path) {
        match path {
            Path::Modern => self.modern = true,
            Path::Legacy => self.legacy = true,
        }
    }

    /// The path a request for it must take: the only one that serves it, or, when both do,
    /// `None` (the client's revision: [`client_path`]).
    pub fn want(self) -> Option<Path> {
        match (self.modern, self.legacy) {
            (true, false) => Some(Path::Modern),
            (false, true) => Some(Path::Legacy),
            _ => None,
        }
    }
}

/// The path of the request being run when it may take either: a 2025-11-25 client's
/// requests go on the upstream's 2025 path (its server requests then reach the client on the
/// call's stream, as that revision has them); a 2026-07-28 client's, and those of a caller
/// that is no MCP client (`POST /v1/calls`, the gateway's own lists), go on the 2026 path.
pub fn client_path() -> Path {
    match INPUT_RELAY.try_with(|r| r.active) {
        Ok(false) => Path::Legacy,
        _ => Path::Modern,
    }
}

/// What the refresh loop runs on a server after each read of its lists.
pub type AfterRefresh = Arc<
    dyn Fn(Arc<Server>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

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
    /// Its credential could not be had (`upstream.credentials_unavailable`): nothing was sent.
    Credentials(String),
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
            Failure::Credentials(why) => {
                ApiError::new(Code::UpstreamCredentialsUnavailable, why).retry_after(5)
            }
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

/// The key of the gateway's own approval request; an upstream may not use it.
pub const APPROVAL_KEY: &str = "airlock_approval";

/// What an upstream may ask the agent's client mid-call, through [`CLIENT_ASKS`] (a form
/// elicitation suspends the call instead).
pub const RELAYED_TO_CLIENT: [&str; 3] =
    ["sampling/createMessage", "roots/list", "elicitation/create"];

tokio::task_local! {
    /// Where the methods an upstream asked for during a call and its `relay` left out are
    /// noted, for the forward stage to audit once the call is over.
    pub static REFUSED_ASKS: RefusedAsks;
}

/// The methods refused under a server's `relay` during one call.
pub type RefusedAsks = Arc<std::sync::Mutex<Vec<String>>>;

/// Notes `method` as refused under `relay` for the call being run, if anyone listens.
pub(crate) fn note_refused(method: &str) {
    let _ = REFUSED_ASKS.try_with(|r| {
        r.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(method.to_owned())
    });
}

/// The answer to an ask a server's `relay` leaves out.
pub fn not_allowed(method: &str, server: &str) -> Value {
    json!({"error": {"code": -32601, "message": format!("airlock does not relay `{method}` from MCP server `{server}` (its `relay` leaves it out)")}})
}

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
    /// Sends one request on the path `want` asks for (a stdio child has one path only).
    async fn request(
        &self,
        method: &str,
        params: Params,
        timeout: Duration,
        notify: Option<Notifications>,
        asks: Option<Asks>,
        want: Option<Path>,
    ) -> Result<Value, Failure> {
        match self {
            Conn::Http(c) => c.request(method, params, timeout, notify, asks, want).await,
            Conn::Stdio(c) => c.request(method, params, timeout, notify, asks).await,
        }
    }

    /// The paths the upstream serves (reaching it first if needed).
    async fn paths(&self, timeout: Duration) -> Result<Vec<Path>, Failure> {
        match self {
            Conn::Http(c) => c.paths(timeout).await,
            Conn::Stdio(_) => Ok(vec![Path::Legacy]),
        }
    }

    /// The revision it is spoken to in by default, once reached.
    async fn revision(&self) -> Option<&'static str> {
        match self {
            Conn::Http(c) => c.revision().await,
            Conn::Stdio(_) => Some(LEGACY),
        }
    }
}

/// A tool as its upstream listed it, the paths that serve it, and what its pin makes of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub definition: Arc<Value>,
    /// Its definition fingerprint ([`airlock_policy::definition_fingerprint`]).
    pub fingerprint: String,
    pub paths: Paths,
    pub trust: Trust,
}

/// Items of one list gathered from every path, each once, by `key` (`name`, `uri`): the
/// first path's item wins; a later path serving the same key with another definition is
/// not counted as serving it (a request for it never goes there).
fn union(by_path: Vec<(Path, Vec<Value>)>, key: &str) -> Vec<(Value, Paths)> {
    let mut out: Vec<(Value, Paths)> = Vec::new();
    for (path, items) in by_path {
        for item in items {
            let Some(k) = item.get(key).and_then(Value::as_str) else {
                continue;
            };
            match out
                .iter_mut()
                .find(|(v, _)| v.get(key).and_then(Value::as_str) == Some(k))
            {
                Some((seen, paths)) if without_meta(seen) == without_meta(&item) => paths.add(path),
                Some(_) => {
                    tracing::warn!(item = k, ?path, "an MCP server lists another definition of this on another path; it is called on the first path only");
                }
                None => out.push((item, Paths::of(path))),
            }
        }
    }
    out
}

/// An item without its `_meta` (what two paths may differ in without serving another thing).
pub fn without_meta(item: &Value) -> Value {
    let mut item = item.clone();
    if let Some(o) = item.as_object_mut() {
        o.remove("_meta");
    }
    item
}

/// One upstream server and what it last listed.
pub struct Server {
    pub config: McpServerConfig,
    conn: Conn,
    /// Its tools as it listed them (unprefixed), or `None` while it was never reached.
    tools: RwLock<Option<Vec<Listed>>>,
    /// Its tools' pins as the store keeps them, by (unprefixed) name: loaded at start, kept
    /// up to date by [`crate::pins`]. Empty under `pin = "off"`.
    pins: RwLock<HashMap<String, ToolPin>>,
    /// Resource URIs it listed, to route `resources/read` and friends.
    resources: RwLock<HashMap<String, Paths>>,
    /// Prompt names it listed (unprefixed).
    prompts: RwLock<HashMap<String, Paths>>,
    /// The literal beginnings of the resource templates it listed (up to the first `{`).
    templates: RwLock<Vec<(String, Paths)>>,
    /// Told when it says a list changed: its lists are read again at once.
    changed: Arc<tokio::sync::Notify>,
    /// Whether its first list has been judged against the pins ([`crate::pins::settle`]):
    /// until then it counts as not reached, so a tool listed a moment ago is not refused as
    /// unreviewed while its pin is being read.
    settled: std::sync::atomic::AtomicBool,
}

impl Server {
    /// Its lists have been judged against the pins at least once.
    pub fn settled(&self) -> bool {
        self.settled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks its lists judged (after [`crate::pins::settle`]), if it was reached.
    pub fn mark_settled(&self) {
        if self.tool_count().is_some() {
            self.settled
                .store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Sends one request with this server's timeout, on the path `want` asks for.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        notify: Option<Notifications>,
        want: Option<Path>,
    ) -> Result<Value, Failure> {
        self.conn
            .request(
                method,
                params.into(),
                self.config.timeout,
                notify,
                None,
                want,
            )
            .await
    }

    /// The revision it is spoken to in by default, once reached.
    pub async fn revision(&self) -> Option<&'static str> {
        self.conn.revision().await
    }

    /// Lists its tools on every path it serves (following `nextCursor`), and its resources
    /// and prompts when it has them. A failure leaves the last good lists in place.
    pub async fn refresh(&self) -> Result<(), Failure> {
        let paths = self.conn.paths(self.config.timeout).await?;
        let mut tools = Vec::new();
        for path in &paths {
            tools.push((*path, self.list_on(*path, "tools/list", "tools").await?));
        }
        let tools = {
            let pins = self.pins.read().unwrap_or_else(|e| e.into_inner());
            union(tools, "name")
                .into_iter()
                .map(|(definition, paths)| {
                    let fingerprint = airlock_policy::definition_fingerprint(&definition);
                    let name = definition.get("name").and_then(Value::as_str).unwrap_or("");
                    let trust = pins::judge(self.config.pin, &fingerprint, pins.get(name));
                    Listed {
                        definition: Arc::new(definition),
                        fingerprint,
                        paths,
                        trust,
                    }
                })
                .collect()
        };
        *self.tools.write().unwrap_or_else(|e| e.into_inner()) = Some(tools);
        if let Ok(resources) = self
            .list_union(&paths, "resources/list", "resources", "uri")
            .await
        {
            *self.resources.write().unwrap_or_else(|e| e.into_inner()) = resources
                .into_iter()
                .filter_map(|(r, p)| Some((r.get("uri")?.as_str()?.to_owned(), p)))
                .collect();
        }
        if let Ok(templates) = self
            .list_union(
                &paths,
                "resources/templates/list",
                "resourceTemplates",
                "uriTemplate",
            )
            .await
        {
            *self.templates.write().unwrap_or_else(|e| e.into_inner()) = templates
                .into_iter()
                .filter_map(|(t, p)| {
                    let prefix = t.get("uriTemplate")?.as_str()?.split('{').next()?;
                    (!prefix.is_empty()).then(|| (prefix.to_owned(), p))
                })
                .collect();
        }
        if let Ok(prompts) = self
            .list_union(&paths, "prompts/list", "prompts", "name")
            .await
        {
            *self.prompts.write().unwrap_or_else(|e| e.into_inner()) = prompts
                .into_iter()
                .filter_map(|(p, paths)| Some((p.get("name")?.as_str()?.to_owned(), paths)))
                .collect();
        }
        Ok(())
    }

    /// Every item of a list on every path it serves, each once, by `key` ([`union`]). A path
    /// that fails to list fails the whole.
    pub async fn list_union(
        &self,
        paths: &[Path],
        method: &str,
        field: &str,
        key: &str,
    ) -> Result<Vec<(Value, Paths)>, Failure> {
        let mut by_path = Vec::new();
        for path in paths {
            by_path.push((*path, self.list_on(*path, method, field).await?));
        }
        Ok(union(by_path, key))
    }

    /// Every item of a list on every path the upstream serves ([`Server::list_union`]).
    pub async fn list_all(
        &self,
        method: &str,
        field: &str,
        key: &str,
    ) -> Result<Vec<Value>, Failure> {
        let paths = self.conn.paths(self.config.timeout).await?;
        let items = self.list_union(&paths, method, field, key).await?;
        Ok(items.into_iter().map(|(item, _)| item).collect())
    }

    /// Every item of a paginated list method on one path (following `nextCursor`, 100 pages
    /// at most).
    async fn list_on(&self, path: Path, method: &str, field: &str) -> Result<Vec<Value>, Failure> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request(method, params, None, Some(path)).await?;
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
    /// The tool list as clients see it: names prefixed, each tool as its pin allows
    /// ([`pins::shown`]); an upstream never reached shows what is pinned of it.
    fn visible_tools(&self) -> Vec<Value> {
        let prefixed = |t: &Value| {
            let name = t.get("name")?.as_str()?;
            let mut t = t.clone();
            t["name"] = Value::String(format!("{}{name}", self.config.prefix));
            Some(t)
        };
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        match tools.as_ref() {
            // A tool whose current definition a reviewer declined is not offered at all.
            Some(tools) => tools
                .iter()
                .filter(|t| {
                    !matches!(
                        pins::Gate::of(self.config.pin, &t.trust),
                        pins::Gate::Held { declined: true, .. }
                    )
                })
                .filter_map(|t| pins::shown(self.config.pin, &t.definition, &t.trust))
                .filter_map(|t| prefixed(&t))
                .collect(),
            None => {
                let pins = self.pins.read().unwrap_or_else(|e| e.into_inner());
                let mut pinned: Vec<&ToolPin> = pins.values().collect();
                pinned.sort_by(|a, b| a.tool.cmp(&b.tool));
                pinned
                    .into_iter()
                    .filter_map(|p| p.definition.as_ref())
                    .filter_map(prefixed)
                    .collect()
            }
        }
    }

    /// Keeps a pin the store returned, and judges the listed tool of its name by it again.
    pub fn set_pin(&self, pin: ToolPin) {
        let mut tools = self.tools.write().unwrap_or_else(|e| e.into_inner());
        for t in tools.iter_mut().flatten() {
            if t.definition.get("name").and_then(Value::as_str) == Some(pin.tool.as_str()) {
                t.trust = pins::judge(self.config.pin, &t.fingerprint, Some(&pin));
            }
        }
        drop(tools);
        let mut pins = self.pins.write().unwrap_or_else(|e| e.into_inner());
        pins.insert(pin.tool.clone(), pin);
    }

    /// The listed tools whose definition is not the pinned one, or not yet judged: what the
    /// store must be told of ([`crate::pins`]).
    pub fn unsettled(&self) -> Vec<Listed> {
        if self.config.pin == PinMode::Off {
            return Vec::new();
        }
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        let pins = self.pins.read().unwrap_or_else(|e| e.into_inner());
        // A pinned tool whose pin remembers declined definitions is told too: serving the
        // pinned one again forgets them (a declined one served later is reviewed anew).
        let forgets = |t: &Listed| {
            t.definition
                .get("name")
                .and_then(Value::as_str)
                .and_then(|n| pins.get(n))
                .is_some_and(|p| !p.declined.is_empty())
        };
        tools
            .iter()
            .flatten()
            .filter(|t| t.trust != Trust::Pinned || forgets(t))
            .cloned()
            .collect()
    }

    /// Every listed tool (unprefixed), as listed, or `None` while it was never reached.
    pub fn listed_tools(&self) -> Option<Vec<Listed>> {
        self.tools.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Its pins, by tool name.
    pub fn pins(&self) -> HashMap<String, ToolPin> {
        self.pins.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The tool of that (upstream) name, as listed.
    pub fn listed(&self, name: &str) -> Option<Listed> {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools
            .iter()
            .flatten()
            .find(|t| t.definition.get("name").and_then(Value::as_str) == Some(name))
            .cloned()
    }

    /// How many tools it listed, or `None` while it was never reached.
    pub fn tool_count(&self) -> Option<usize> {
        let tools = self.tools.read().unwrap_or_else(|e| e.into_inner());
        tools.as_ref().map(Vec::len)
    }

    /// The paths serving a prompt (by upstream name) or a resource, when listed.
    pub fn prompt_paths(&self, name: &str) -> Option<Paths> {
        let prompts = self.prompts.read().unwrap_or_else(|e| e.into_inner());
        prompts.get(name).copied()
    }

    pub fn resource_paths(&self, uri: &str) -> Option<Paths> {
        let listed = self.resources.read().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = listed.get(uri) {
            return Some(*p);
        }
        let templates = self.templates.read().unwrap_or_else(|e| e.into_inner());
        templates
            .iter()
            .find(|(prefix, _)| uri.starts_with(prefix.as_str()))
            .map(|(_, p)| *p)
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
