//! The TOML shape of `airlock.toml`, as serde reads it: every table refuses keys it does not
//! know. Nothing here is checked beyond its type; each section's `validate` does that.

use std::path::PathBuf;

use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub(super) server: RawServer,
    #[serde(default)]
    pub(super) principals: Vec<RawPrincipal>,
    #[serde(default)]
    pub(super) tools: Vec<RawTool>,
    #[serde(default)]
    pub(super) audit: RawAudit,
    #[serde(default)]
    pub(super) webhooks: Vec<RawWebhook>,
    #[serde(default)]
    pub(super) classifiers: Vec<RawClassifier>,
    #[serde(default)]
    pub(super) mcp_servers: Vec<RawMcpServer>,
    #[serde(default)]
    pub(super) store: RawStore,
    #[serde(default)]
    pub(super) issuers: Vec<RawIssuer>,
    #[serde(default)]
    pub(super) inbox: RawInbox,
    pub(super) email: Option<super::email::RawEmail>,
    pub(super) slack: Option<super::slack::RawSlack>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    pub(super) kind: Option<String>,
    pub(super) url: Option<String>,
    pub(super) instance: Option<String>,
    pub(super) ca: Option<PathBuf>,
    pub(super) witness_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    pub(super) name: String,
    pub(super) url: Option<String>,
    pub(super) command: Option<String>,
    #[serde(default)]
    pub(super) args: Vec<String>,
    #[serde(default)]
    pub(super) env: std::collections::BTreeMap<String, String>,
    pub(super) prefix: Option<String>,
    #[serde(default)]
    pub(super) headers: std::collections::BTreeMap<String, String>,
    pub(super) timeout: Option<String>,
    pub(super) pin: Option<String>,
    pub(super) trust_first: Option<bool>,
    #[serde(default)]
    pub(super) reviewers: Vec<String>,
    pub(super) refresh: Option<String>,
    pub(super) validate_args: Option<bool>,
    pub(super) relay: Option<Vec<String>>,
    pub(super) credentials: Option<super::credentials::RawCredentials>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) id: String,
    pub(super) url: String,
    pub(super) secret: String,
    pub(super) events: Option<Vec<String>>,
    pub(super) principal: Option<String>,
    pub(super) retry_schedule: Option<Vec<String>>,
    pub(super) timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawClassifier {
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) url: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) on_error: Option<String>,
    #[serde(default)]
    pub(super) allow_hosts: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub(super) listen: Option<String>,
    pub(super) data_dir: Option<PathBuf>,
    pub(super) policy: Option<PathBuf>,
    pub(super) shadow_policy: Option<PathBuf>,
    pub(super) hold_timeout: Option<String>,
    pub(super) max_hold: Option<String>,
    pub(super) suspend_ttl: Option<String>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) policy_budget: Option<u64>,
    pub(super) max_header_bytes: Option<usize>,
    pub(super) max_held: Option<usize>,
    pub(super) max_held_per_principal: Option<usize>,
    pub(super) max_in_flight: Option<usize>,
    pub(super) tls: Option<RawTls>,
    pub(super) upstream_ca: Option<PathBuf>,
    pub(super) log_format: Option<String>,
    pub(super) classifier_cache_ttl: Option<String>,
    pub(super) public_url: Option<String>,
    #[serde(default)]
    pub(super) allowed_origins: Vec<String>,
    #[serde(default)]
    pub(super) allowed_hosts: Vec<String>,
    pub(super) durability: Option<String>,
    pub(super) flush_interval: Option<String>,
    pub(super) header_timeout: Option<String>,
    pub(super) tls_handshake_timeout: Option<String>,
    pub(super) idle_timeout: Option<String>,
    pub(super) body_timeout: Option<String>,
    pub(super) max_connections: Option<usize>,
    pub(super) max_connections_per_client: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) cert: PathBuf,
    pub(super) key: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrincipal {
    pub(super) id: String,
    pub(super) role: String,
    pub(super) token_sha256: String,
    #[serde(default)]
    pub(super) groups: Vec<String>,
    pub(super) rate: Option<String>,
    pub(super) burst: Option<u32>,
    pub(super) max_pending: Option<usize>,
    #[serde(default)]
    pub(super) agents: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    pub(super) name: String,
    pub(super) upstream: String,
    pub(super) timeout: Option<String>,
    pub(super) schema: Option<PathBuf>,
    pub(super) credentials: Option<super::credentials::RawCredentials>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    #[serde(default)]
    pub(super) redact: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIssuer {
    pub(super) id: String,
    pub(super) issuer: String,
    pub(super) jwks_uri: Option<String>,
    pub(super) audience: Option<String>,
    pub(super) principal_claim: Option<String>,
    pub(super) groups_claim: Option<String>,
    #[serde(default)]
    pub(super) roles: std::collections::BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub(super) scopes: Vec<String>,
    #[serde(default)]
    pub(super) claims: Vec<String>,
    pub(super) ca: Option<PathBuf>,
    pub(super) rate: Option<String>,
    pub(super) burst: Option<u32>,
    pub(super) max_pending: Option<usize>,
    pub(super) jwks_ttl: Option<String>,
    #[serde(default)]
    pub(super) agents: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInbox {
    pub(super) oidc: Option<RawInboxOidc>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInboxOidc {
    pub(super) issuer: String,
    pub(super) client_id: String,
    pub(super) client_secret: Option<String>,
    pub(super) scopes: Option<Vec<String>>,
    pub(super) token_sign_in: Option<bool>,
}
