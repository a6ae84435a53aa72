//! Every configured MCP upstream together: started and refreshed, the visible tool names
//! resolved to the server and path that serve them (prefixes checked unique at start), and a
//! tool call sent or resumed, with the calls suspended on an upstream's open request kept
//! until they are resumed or dropped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

use crate::config::{McpServerConfig, McpTransport};
use crate::error::{ApiError, Code};

use super::pins::{self, Gate};
use super::tool_call::{drive, tool_params, InFlight, Live, ToolAnswer};
use super::{http, stdio};
use super::{
    AfterRefresh, Conn, Notifications, Params, Path, Paths, Server, INPUT_RELAY, LIVE_LIMIT,
    MAX_LIVE,
};

/// Every configured upstream.
pub struct Registry {
    pub servers: Vec<Arc<Server>>,
    /// Tool calls suspended on an upstream's open request, by call id (DESIGN §11).
    live: Mutex<HashMap<String, Live>>,
}

/// A tool as the pipeline routes it: the server, the name the upstream knows it by, the
/// paths that serve it, whether a call may go on ([`Gate`]), and the definition the policy
/// reads (`definition`: the pinned one, or as listed under `warn` and `off`).
#[derive(Clone)]
pub struct McpTool {
    pub server: Arc<Server>,
    pub name: String,
    pub paths: Paths,
    pub gate: Gate,
    pub definition: Option<Arc<Value>>,
}

impl Registry {
    /// Builds the connections; nothing is contacted until [`Registry::start`].
    pub fn new(
        configs: &[McpServerConfig],
        pool: Arc<crate::backends::http::Upstreams>,
        vault: Arc<crate::credentials::Vault>,
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
                    c.credentials.clone().map(|client| http::OAuthSource {
                        vault: vault.clone(),
                        client,
                        upstream: c.name.clone(),
                    }),
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
                pins: RwLock::new(HashMap::new()),
                resources: RwLock::new(HashMap::new()),
                prompts: RwLock::new(HashMap::new()),
                templates: RwLock::new(Vec::new()),
                changed,
                settled: std::sync::atomic::AtomicBool::new(false),
            }));
        }
        Ok(Registry {
            servers,
            live: Mutex::new(HashMap::new()),
        })
    }

    /// Connects to every upstream and lists its tools; one that cannot be reached is logged
    /// and left out (it is tried again every `refresh`). The caller checks the names are
    /// unique once the pins are settled ([`Registry::check_unique`]).
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
            match t.await {
                Ok((s, Err(e))) => {
                    tracing::warn!(server = %s.config.name, "MCP server not reached at start, its tools are left out: {e:?}");
                }
                Ok((s, Ok(()))) => log_reached(&s).await,
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Reads each upstream's lists again every `refresh` (30 s by default; every 5 s while it
    /// has never been reached) and when it says one changed, keeping the last good ones on
    /// failure; `after` is run on the server after each read (the gateway settles its pins
    /// there).
    pub async fn refresh_loop(
        self: Arc<Self>,
        shutdown: tokio_util::sync::CancellationToken,
        after: AfterRefresh,
    ) {
        let mut loops = Vec::new();
        for (i, _) in self.servers.iter().enumerate() {
            let (me, shutdown, after) = (self.clone(), shutdown.clone(), after.clone());
            loops.push(tokio::spawn(async move {
                let s = &me.servers[i];
                loop {
                    // An upstream never reached is tried again as soon as its refused calls
                    // are told to retry (`Retry-After: 5`), not only every `refresh`.
                    let wait = if !s.settled() {
                        s.config.refresh.min(super::pins::UNREACHED_RETRY)
                    } else {
                        s.config.refresh
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = s.changed.notified() => {
                            tracing::info!(server = %s.config.name, "MCP server's lists changed; reading them again");
                        }
                        _ = shutdown.cancelled() => break,
                    }
                    let never_reached = s.tool_count().is_none();
                    match s.refresh().await {
                        Err(e) => {
                            tracing::debug!(server = %s.config.name, "MCP server list refresh failed: {e:?}");
                        }
                        Ok(()) if never_reached => log_reached(s).await,
                        Ok(()) => {}
                    }
                    after(s.clone()).await;
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

    /// The names of upstreams never reached (for `/readyz`).
    pub fn never_reached(&self) -> Vec<String> {
        self.servers
            .iter()
            .filter(|s| !s.settled())
            .map(|s| s.config.name.clone())
            .collect()
    }

    /// Two upstreams showing the same tool name is an error (at start, the gateway does not
    /// start).
    pub fn check_unique(&self) -> Result<(), String> {
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

    /// The upstream tool behind a visible name: a listed tool, or, of an upstream never
    /// reached, a pinned one or any name under its (non-empty) prefix, whose calls are then
    /// `upstream.unavailable`.
    pub fn resolve(&self, visible: &str) -> Option<McpTool> {
        self.servers.iter().find_map(|s| {
            let name = visible.strip_prefix(s.config.prefix.as_str())?;
            let mode = s.config.pin;
            let tools = s.tools.read().unwrap_or_else(|e| e.into_inner());
            let Some(tools) = tools.as_ref().filter(|_| s.settled()) else {
                let pins = s.pins.read().unwrap_or_else(|e| e.into_inner());
                let pinned = pins.get(name).and_then(|p| p.definition.clone());
                if pinned.is_none() && s.config.prefix.is_empty() {
                    return None;
                }
                return Some(McpTool {
                    server: s.clone(),
                    name: name.to_owned(),
                    paths: Paths::default(),
                    gate: Gate::Unreached,
                    definition: pinned.map(Arc::new),
                });
            };
            let t = tools
                .iter()
                .find(|t| t.definition.get("name").and_then(Value::as_str) == Some(name))?;
            Some(McpTool {
                server: s.clone(),
                name: name.to_owned(),
                paths: t.paths,
                gate: Gate::of(mode, &t.trust),
                definition: pins::shown(mode, &t.definition, &t.trust),
            })
        })
    }

    /// Whether the upstream tool behind a visible name declares an `outputSchema`.
    pub fn declares_output_schema(&self, visible: &str) -> bool {
        self.servers.iter().any(|s| {
            visible
                .strip_prefix(s.config.prefix.as_str())
                .and_then(|name| s.listed(name))
                .is_some_and(|t| t.definition.get("outputSchema").is_some())
        })
    }

    /// The server owning a prompt (by visible name), with the upstream's name for it and the
    /// path to ask it on.
    pub fn prompt(&self, visible: &str) -> Option<(Arc<Server>, String, Option<Path>)> {
        self.servers.iter().find_map(|s| {
            let name = visible.strip_prefix(s.config.prefix.as_str())?;
            let paths = s.prompt_paths(name)?;
            Some((s.clone(), name.to_owned(), paths.want()))
        })
    }

    /// The server that listed a resource URI, else the one with a template it fits, else the
    /// only upstream there is; with the path to ask it on.
    pub fn resource(&self, uri: &str) -> Option<(Arc<Server>, Option<Path>)> {
        let found = self.servers.iter().find_map(|s| {
            let listed = s.resources.read().unwrap_or_else(|e| e.into_inner());
            listed.get(uri).map(|p| (s.clone(), p.want()))
        });
        let templated = || {
            self.servers
                .iter()
                .find_map(|s| s.resource_paths(uri).map(|p| (s.clone(), p.want())))
        };
        let only = || (self.servers.len() == 1).then(|| (self.servers[0].clone(), None));
        found.or_else(templated).or_else(only)
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
        let want = tool.paths.want();
        // The request runs in a task of its own: it carries the client's revision along.
        let relay = INPUT_RELAY.try_with(Clone::clone).unwrap_or_default();
        let request = INPUT_RELAY.scope(relay, async move {
            server
                .conn
                .request("tools/call", params, LIVE_LIMIT, notify, Some(asks), want)
                .await
        });
        drive(tool, InFlight::new(request), ask_rx).await
    }
}

/// Logs that `s` was reached: its revision and how many tools it lists.
async fn log_reached(s: &Server) {
    let revision = s.revision().await.unwrap_or("none");
    tracing::info!(
        server = %s.config.name,
        revision,
        tools = s.tool_count().unwrap_or(0),
        "MCP server reached"
    );
}
