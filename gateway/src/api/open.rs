//! The open routes' answers: liveness, readiness, RFC 9728 metadata, this API's document.

use schemars::JsonSchema;
use serde::Serialize;

/// The process is up.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Health::OK)]
pub(crate) struct Health {
    pub status: IsOk,
}

impl Health {
    pub(crate) const OK: Health = Health { status: IsOk::Ok };
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[schemars(inline)]
pub(crate) enum IsOk {
    #[serde(rename = "ok")]
    Ok,
}

#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[schemars(inline)]
pub(crate) enum IsReady {
    #[serde(rename = "ready")]
    Ready,
}

/// The store is open and a policy is loaded.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = Ready { status: IsReady::Ready, policy_version: "sha256:0f3a…".into(), mcp_servers_unreached: vec![] })]
pub(crate) struct Ready {
    pub status: IsReady,
    pub policy_version: String,
    /// MCP upstreams never reached since start: their calls are `upstream.unavailable` until
    /// they are.
    pub mcp_servers_unreached: Vec<String>,
}

/// RFC 9728 metadata: the issuers whose tokens this gateway takes.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(example = ProtectedResourceMetadata {
    resource: "https://airlock.example/mcp".into(),
    authorization_servers: vec!["https://idp.example".into()],
    scopes_supported: vec!["airlock.call".into()],
    bearer_methods_supported: vec!["header".into()],
})]
pub(crate) struct ProtectedResourceMetadata {
    pub resource: String,
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Vec<String>,
    pub bearer_methods_supported: Vec<String>,
}

impl From<&crate::identity::Issuers> for ProtectedResourceMetadata {
    fn from(issuers: &crate::identity::Issuers) -> Self {
        ProtectedResourceMetadata {
            resource: format!("{}/mcp", issuers.public_url()),
            authorization_servers: issuers
                .list
                .iter()
                .map(|i| i.config.issuer.clone())
                .collect(),
            scopes_supported: crate::identity::challenge::scopes(issuers),
            bearer_methods_supported: vec!["header".into()],
        }
    }
}

/// This document.
#[derive(JsonSchema)]
#[schemars(example = serde_json::json!({"openapi": "3.1.0", "info": {"title": "airlock"}, "paths": {}}))]
#[allow(dead_code, reason = "a schema: the document is built as JSON")]
pub(crate) struct OpenApiDocument {
    openapi: String,
    paths: serde_json::Map<String, serde_json::Value>,
}
