//! Forwarding a call to its backend: exactly the canonical args that were fingerprinted, over
//! a pooled client with `TCP_NODELAY` and the route's timeout, or to a built-in demo tool.
//!
//! It never retries: a call that failed after approval needs a new decision. It does not
//! touch the store; the pipeline records what this returns.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::config::{Config, ToolRoute, Upstream};
use crate::error::ApiError;

/// Demo tools the gateway serves itself.
pub const BUILTINS: [&str; 3] = ["demo.echo", "demo.shell_preview", "demo.deploy"];

/// The largest backend answer kept; a larger one is `upstream.too_large`.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// What the backend answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    /// JSON, or a string when the body was not JSON.
    pub body: Value,
}

/// Headers that tie a forwarded call to its decision.
pub struct CallHeaders<'a> {
    pub call_id: &'a str,
    pub fingerprint: &'a str,
    pub approval_id: Option<&'a str>,
    /// A resume of a suspended call: sent as `airlock-resume: <call id>` (DESIGN §11).
    pub resume: bool,
}

pub struct Upstreams {
    client: reqwest::Client,
}

impl Upstreams {
    pub fn new(config: &Config) -> Result<Upstreams, String> {
        let mut builder = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &config.upstream_ca {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("server.upstream_ca: cannot read {}: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("server.upstream_ca: {}: {e}", ca.display()))?;
            builder = builder.tls_certs_only(certs);
        }
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the upstream client: {e}"))?;
        Ok(Upstreams { client })
    }

    /// Sends `canonical_args` to the route's backend.
    pub async fn forward(
        &self,
        route: &ToolRoute,
        tool: &str,
        canonical_args: &str,
        headers: CallHeaders<'_>,
    ) -> Result<(Answer, Duration), ApiError> {
        let start = Instant::now();
        let answer = match &route.upstream {
            Upstream::Builtin(name) => builtin(name, tool, canonical_args, headers.resume),
            Upstream::Http(url) => {
                self.http(url, route.timeout, canonical_args, &headers)
                    .await
            }
        }?;
        Ok((answer, start.elapsed()))
    }

    async fn http(
        &self,
        url: &str,
        timeout: Duration,
        body: &str,
        h: &CallHeaders<'_>,
    ) -> Result<Answer, ApiError> {
        let mut req = self
            .client
            .post(url)
            .timeout(timeout)
            .header("content-type", "application/json")
            .header("airlock-call-id", h.call_id)
            .header("airlock-fingerprint", h.fingerprint)
            .body(body.to_owned());
        if let Some(a) = h.approval_id {
            req = req.header("airlock-approval-id", a);
        }
        if h.resume {
            req = req.header("airlock-resume", h.call_id);
        }
        let classify = |e: reqwest::Error| {
            if e.is_timeout() {
                ApiError::new(
                    "upstream.timeout",
                    format!("the backend did not answer within {timeout:?}"),
                )
            } else {
                ApiError::new(
                    "upstream.unavailable",
                    format!("the backend could not be reached: {e}"),
                )
            }
        };
        let mut resp = req.send().await.map_err(classify)?;
        let status = resp.status().as_u16();
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(classify)? {
            if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err(ApiError::new(
                    "upstream.too_large",
                    format!("the backend's answer is larger than {MAX_RESPONSE_BYTES} bytes"),
                ));
            }
            bytes.extend_from_slice(&chunk);
        }
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer { status, body })
    }
}

/// The demo tools: they show what would run and run nothing. `demo.deploy` asks which
/// environment mid-call (it suspends, DESIGN §11) and, resumed, says where it would deploy.
fn builtin(name: &str, tool: &str, body: &str, resume: bool) -> Result<Answer, ApiError> {
    let sent: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let args = if resume {
        sent["args"].clone()
    } else {
        sent.clone()
    };
    let body = match name {
        "demo.deploy" if !resume => {
            return Ok(Answer {
                status: 202,
                body: json!({"suspend": {
                    "payload": {"question": "which environment?", "service": args.get("service")},
                    "resume_schema": {
                        "type": "object",
                        "properties": {"environment": {
                            "type": "string",
                            "enum": ["staging", "production"],
                            "description": "where to deploy",
                        }},
                        "required": ["environment"],
                        "additionalProperties": false,
                    },
                }}),
            })
        }
        "demo.deploy" => json!({
            "tool": tool,
            "service": args.get("service"),
            "environment": sent["resume_data"]["environment"],
            "deployed": false,
            "note": "demo tool: it shows where it would deploy and deploys nothing",
        }),
        "demo.echo" => json!({"tool": tool, "echo": args}),
        "demo.shell_preview" => json!({
            "tool": tool,
            "command": args.get("command").cloned().unwrap_or(Value::Null),
            "executed": false,
            "note": "demo tool: it shows the command that was approved and runs nothing",
        }),
        other => {
            return Err(ApiError::new(
                "tool.unknown",
                format!("no built-in tool `{other}`"),
            ))
        }
    };
    Ok(Answer { status: 200, body })
}
