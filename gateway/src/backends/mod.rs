//! The backends a decided call is forwarded to, behind one interface: [`Backends::route`]
//! names where a tool's calls go, [`Backends::send`] sends a claimed call's canonical args
//! (and resume data) there and reads the answer as an [`Answer`] — a result, or a request to
//! suspend the call (DESIGN §11) — whichever kind of backend it is:
//!
//! - [`http`]: `[[tools]]` routes, HTTP(S) backends over pooled connections, and the demo
//!   tools built in;
//! - [`mcp`]: the tools of `[[mcp_servers]]` upstreams, over streamable HTTP or stdio.
//!
//! It decides nothing and records nothing: the pipeline claims a call before it is sent and
//! records what this returns.

pub mod http;
pub mod mcp;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use airlock_storage::{CallRecord, Suspend};
use serde_json::{json, Map, Value};

use crate::config::{Config, Credentials, ToolRoute};
use crate::error::{ApiError, Code};
use crate::metrics::Metrics;
use http::{CallHeaders, Upstreams};
use mcp::{McpTool, Registry, ToolAnswer};

/// What a backend answered a forwarded call.
pub enum Answer {
    /// Its answer: the HTTP status (none for MCP) and body.
    Result(Option<u16>, Value),
    /// It asked to suspend the call.
    Suspend(Suspend),
}

/// Where a tool's calls go.
pub enum Route<'a> {
    /// An `[[tools]]` route: an HTTP backend or a built-in demo tool.
    Http(&'a ToolRoute),
    /// A tool of an `[[mcp_servers]]` upstream.
    Mcp(McpTool),
}

/// Every backend the gateway forwards to.
pub struct Backends {
    /// HTTP backends' connection pools (one per serving thread) and the demo tools.
    pub http: Arc<Upstreams>,
    /// The MCP servers airlock fronts, and their tools.
    pub mcp: Arc<Registry>,
    /// How long a suspension the backend asks for may wait (`server.suspend_ttl`), in ms.
    suspend_ttl_ms: u64,
    /// The upstreams' OAuth tokens airlock fetches and holds.
    pub vault: Arc<crate::credentials::Vault>,
}

impl Backends {
    pub fn new(
        http: Arc<Upstreams>,
        mcp: Arc<Registry>,
        vault: Arc<crate::credentials::Vault>,
        config: &Config,
    ) -> Backends {
        Backends {
            http,
            mcp,
            suspend_ttl_ms: config.suspend_ttl.as_millis() as u64,
            vault,
        }
    }

    /// Where `tool`'s calls go: an MCP upstream's tool of that exact name first, else the
    /// first `[[tools]]` route that matches.
    pub fn route<'a>(&self, config: &'a Config, tool: &str) -> Option<Route<'a>> {
        if let Some(t) = self.mcp.resolve(tool) {
            return Some(Route::Mcp(t));
        }
        config.route(tool).map(Route::Http)
    }

    /// Sends a claimed call to the backend `route` names: its canonical args, or, resuming a
    /// suspended call, `resume` data too. Times the exchange by the route's configured name.
    pub async fn send(
        &self,
        route: Route<'_>,
        call: &CallRecord,
        canonical: &str,
        resume: Option<&Value>,
        metrics: &Metrics,
    ) -> Result<Answer, ApiError> {
        match route {
            Route::Mcp(tool) => self.send_mcp(tool, call, canonical, resume, metrics).await,
            Route::Http(route) => {
                self.send_http(route, call, canonical, resume, metrics)
                    .await
            }
        }
    }

    /// [`Backends::send`] to an MCP upstream's tool: a `tools/call`, or, resuming, the
    /// answer to the upstream's elicitation.
    async fn send_mcp(
        &self,
        tool: McpTool,
        call: &CallRecord,
        canonical: &str,
        resume: Option<&Value>,
        metrics: &Metrics,
    ) -> Result<Answer, ApiError> {
        let start = Instant::now();
        let notify = mcp::NOTIFICATIONS.try_with(Clone::clone).ok();
        let r = match resume {
            None => {
                self.mcp
                    .call_tool(&tool, canonical, Map::new(), notify)
                    .await
            }
            Some(data) => {
                // On the request the upstream keeps open, or as a retry of the `tools/call`
                // with the `requestState` it gave.
                let state = call
                    .suspension
                    .as_ref()
                    .and_then(|s| s.upstream_state.clone());
                self.mcp
                    .resume_tool(&tool, &call.call_id, canonical, data, state, notify)
                    .await
            }
        };
        metrics
            .upstream_seconds
            .with_label_values(&[tool.server.config.name.as_str()])
            .observe(start.elapsed().as_secs_f64());
        r.and_then(|answer| self.mcp_answer(call, answer))
    }

    /// [`Backends::send`] to an `[[tools]]` route: the canonical args as the body, or, resuming,
    /// `{"args", "resume_data"}`.
    async fn send_http(
        &self,
        route: &ToolRoute,
        call: &CallRecord,
        canonical: &str,
        resume: Option<&Value>,
        metrics: &Metrics,
    ) -> Result<Answer, ApiError> {
        // The route's credential, attached now that the call may run: never the agent's own.
        let credential = self.credential(route, call).await?;
        let headers = CallHeaders {
            call_id: &call.call_id,
            fingerprint: &call.fingerprint,
            approval_id: call.approval_id.as_deref(),
            resume: resume.is_some(),
            credential: &credential,
        };
        // Both canonical, and the keys in JCS order: the body is itself canonical JSON.
        let body = match resume {
            None => Cow::Borrowed(canonical),
            Some(data) => Cow::Owned(format!(
                "{{\"args\":{canonical},\"resume_data\":{}}}",
                airlock_policy::canonicalize(data)
            )),
        };
        let (answer, elapsed) = self.http.forward(route, &call.tool, &body, headers).await?;
        metrics
            .upstream_seconds
            .with_label_values(&[route.pattern.as_str()])
            .observe(elapsed.as_secs_f64());
        self.http_answer(answer)
    }

    /// The headers of `route`'s `credentials` for `call`: fixed ones, or a bearer token from
    /// the vault.
    async fn credential(
        &self,
        route: &ToolRoute,
        call: &CallRecord,
    ) -> Result<Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>, ApiError> {
        Ok(match &route.credentials {
            None => Vec::new(),
            Some(Credentials::Static { headers }) => headers
                .iter()
                .filter_map(|(h, v)| {
                    let name = hyper::header::HeaderName::from_bytes(h.as_bytes()).ok()?;
                    let mut value = hyper::header::HeaderValue::from_str(v).ok()?;
                    value.set_sensitive(true);
                    Some((name, value))
                })
                .collect(),
            Some(Credentials::OAuth(client)) => {
                let value = self
                    .vault
                    .authorization(route.pattern.as_str(), client, &call.requester.id)
                    .await
                    .map_err(crate::credentials::Refused::into_api_error)?;
                vec![(hyper::header::AUTHORIZATION, value)]
            }
        })
    }

    /// The call will not be resumed after all (its suspension failed to store, or was
    /// refused): a request an upstream keeps open for it is abandoned.
    pub fn abandon(&self, call_id: &str) {
        self.mcp.drop_live(call_id);
    }

    /// Reads an HTTP backend's answer: `202 {"suspend": {"payload", "resume_schema"}}`
    /// suspends the call; anything else is its result.
    fn http_answer(&self, answer: http::Answer) -> Result<Answer, ApiError> {
        let suspend = match (&answer.body, answer.status) {
            (Value::Object(body), 202) => body.get("suspend").cloned(),
            _ => None,
        };
        let Some(suspend) = suspend else {
            return Ok(Answer::Result(Some(answer.status), answer.body));
        };
        let Some(schema) = suspend.get("resume_schema").cloned() else {
            return Err(ApiError::new(
                Code::UpstreamInvalidSuspend,
                "the backend suspended the call without a `resume_schema`",
            ));
        };
        Ok(Answer::Suspend(Suspend {
            payload: suspend.get("payload").cloned().unwrap_or(Value::Null),
            resume_schema: schema,
            upstream_state: None,
            ttl_ms: self.suspend_ttl_ms,
        }))
    }

    /// Reads an MCP upstream's answer: a form elicitation during `tools/call` suspends the
    /// call, with the request's message as payload and its `requestedSchema` as resume
    /// schema. A live elicitation (the upstream waits on an open request) is kept in memory
    /// until the resume. An MCP upstream has no HTTP status: its result says `isError` itself.
    fn mcp_answer(&self, call: &CallRecord, answer: ToolAnswer) -> Result<Answer, ApiError> {
        match answer {
            ToolAnswer::Result(v) => Ok(Answer::Result(None, v)),
            ToolAnswer::Input(input) => {
                let payload = json!({"message": input.message});
                let upstream_state = input.retry_state();
                if let Some(live) = input.live {
                    self.mcp.keep_live(&call.call_id, live)?;
                }
                Ok(Answer::Suspend(Suspend {
                    payload,
                    resume_schema: input.schema,
                    upstream_state,
                    ttl_ms: self.suspend_ttl_ms,
                }))
            }
        }
    }
}
