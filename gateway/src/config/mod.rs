//! `airlock.toml`: parsed raw with unknown keys refused, then validated into [`Config`], with
//! every error naming the key and the value (DESIGN §7). Also the built-in demo config that
//! `airlock serve` uses when it is given none.
//!
//! It reads files and environment variables (`env:VAR` secrets) but starts nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_policy::{parse_duration, Glob};
use airlock_storage::Kind;
use serde::Deserialize;
use sha2::{Digest, Sha256};

mod target;
pub use target::{Target, BUILTINS};

/// A config problem, naming the key and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

fn err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    principals: Vec<RawPrincipal>,
    #[serde(default)]
    tools: Vec<RawTool>,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    webhooks: Vec<RawWebhook>,
    #[serde(default)]
    classifiers: Vec<RawClassifier>,
    #[serde(default)]
    mcp_servers: Vec<RawMcpServer>,
    #[serde(default)]
    store: RawStore,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawStore {
    kind: Option<String>,
    url: Option<String>,
    instance: Option<String>,
    ca: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMcpServer {
    name: String,
    url: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    prefix: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    id: String,
    url: String,
    secret: String,
    events: Option<Vec<String>>,
    principal: Option<String>,
    retry_schedule: Option<Vec<String>>,
    timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClassifier {
    name: String,
    kind: String,
    url: Option<String>,
    timeout: Option<String>,
    on_error: Option<String>,
    #[serde(default)]
    allow_hosts: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    policy: Option<PathBuf>,
    hold_timeout: Option<String>,
    max_hold: Option<String>,
    suspend_ttl: Option<String>,
    max_body_bytes: Option<usize>,
    max_header_bytes: Option<usize>,
    max_held: Option<usize>,
    max_in_flight: Option<usize>,
    tls: Option<RawTls>,
    upstream_ca: Option<PathBuf>,
    log_format: Option<String>,
    classifier_cache_ttl: Option<String>,
    public_url: Option<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    durability: Option<String>,
    flush_interval: Option<String>,
    header_timeout: Option<String>,
    tls_handshake_timeout: Option<String>,
    idle_timeout: Option<String>,
    body_timeout: Option<String>,
    max_connections: Option<usize>,
    max_connections_per_client: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: PathBuf,
    key: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    id: String,
    role: String,
    token_sha256: String,
    #[serde(default)]
    groups: Vec<String>,
    rate: Option<String>,
    burst: Option<u32>,
    max_pending: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    name: String,
    upstream: String,
    timeout: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    #[serde(default)]
    redact: Vec<String>,
}

/// Where the policy set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// A file or folder, reloaded on SIGHUP, on change and on `POST /v1/policy/reload`.
    Path(PathBuf),
    /// Built into the binary (the demo).
    Embedded(Vec<(PathBuf, String)>),
}

/// A principal a bearer token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrincipalConfig {
    pub id: String,
    pub role: String,
    /// Lower-case hex SHA-256 of the token.
    pub token_sha256: String,
    pub groups: Vec<String>,
    /// Requests this principal may make (a token bucket); none means no limit.
    pub rate: Option<Rate>,
    /// Pending approvals this principal's calls may hold open at once.
    pub max_pending: Option<usize>,
}

/// A token bucket: `count` requests per `per`, and at most `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
    pub burst: u32,
}

impl Rate {
    /// Parses `"50/s"`, `"600/m"` or `"1000/h"`; the burst defaults to the count.
    pub fn parse(text: &str, burst: Option<u32>) -> Result<Rate, String> {
        let bad = || format!("`{text}` is not a rate like \"50/s\", \"600/m\" or \"1000/h\"");
        let (count, unit) = text.split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let per = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        if count == 0 {
            return Err(format!("`{text}`: the rate must be at least 1"));
        }
        let burst = burst.unwrap_or(count);
        if burst == 0 {
            return Err("the burst must be at least 1".into());
        }
        Ok(Rate { count, per, burst })
    }
}

/// How the gateway reaches an MCP server (`[[mcp_servers]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// Streamable HTTP, either protocol revision; `headers` are airlock's own credentials.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
    /// A child process speaking JSON-RPC on stdin and stdout; it gets only `env` and `PATH`.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
}

/// An MCP server airlock fronts: its tools appear to clients as `<prefix><tool>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub prefix: String,
    pub transport: McpTransport,
    pub timeout: Duration,
}

/// How the listener treats slow and numerous clients (`[server]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From a connection's first byte (or its accept) to a request's complete headers.
    pub header_timeout: Duration,
    pub tls_handshake_timeout: Duration,
    /// A keep-alive connection with no request in flight and no bytes for this long is closed.
    pub idle_timeout: Duration,
    /// From a request's headers to its complete body.
    pub body_timeout: Duration,
    /// Open connections at once; beyond it new ones are refused at once.
    pub max_connections: usize,
    /// Open connections from one client address; beyond it that client's new ones are
    /// refused, so one flooding client leaves room for the others.
    pub max_connections_per_client: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            max_connections_per_client: 5_000,
        }
    }
}

/// Where a tool's calls go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// `http://` or `https://` URL receiving POST with the canonical args.
    Http(Target),
    /// A demo tool the gateway serves itself.
    Builtin(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRoute {
    pub pattern: Glob,
    pub upstream: Upstream,
    pub timeout: Duration,
}

/// The events a webhook can receive.
pub const EVENTS: [Kind; 4] = [
    Kind::ApprovalRequested,
    Kind::ApprovalDecided,
    Kind::ApprovalExpired,
    Kind::CallCompleted,
];

/// A webhook approver or notification endpoint (DESIGN §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    pub id: String,
    pub url: String,
    /// The decoded key of its `whsec_` secret.
    pub key: Vec<u8>,
    pub events: Vec<Kind>,
    /// The approver a synchronous decision is recorded as.
    pub principal: Option<String>,
    pub retry_schedule: Vec<Duration>,
    pub timeout: Duration,
}

/// How a classifier runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassifierKind {
    /// The local classifier; URLs to hosts outside `allow_hosts` count as exfiltration.
    Builtin { allow_hosts: Vec<String> },
    /// A remote classifier service.
    Http { url: String, timeout: Duration },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifierConfig {
    pub name: String,
    pub kind: ClassifierKind,
    /// What a rule naming this classifier yields when it fails; never allow.
    pub on_error: airlock_policy::DecisionKind,
}

/// The validated config.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub policy: PolicySource,
    pub hold_timeout: Duration,
    pub max_hold: Duration,
    /// How long a suspended call waits for resume data (DESIGN §11).
    pub suspend_ttl: Duration,
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    /// Held requests at once; beyond it a call that would wait gets 429.
    pub max_held: usize,
    /// Requests in flight at once; beyond it 503.
    pub max_in_flight: usize,
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Extra CA certificates (PEM) trusted for https upstreams, instead of the built-in roots.
    pub upstream_ca: Option<PathBuf>,
    pub json_logs: bool,
    pub principals: Vec<PrincipalConfig>,
    pub tools: Vec<ToolRoute>,
    pub redact: Vec<String>,
    pub classifiers: Vec<ClassifierConfig>,
    pub webhooks: Vec<WebhookConfig>,
    /// The gateway's URL as approvers reach it, for the links in webhook payloads; defaults to
    /// the listening address.
    pub public_url: Option<String>,
    /// How long a classifier result is reused for the same (classifier, fingerprint).
    pub classifier_cache_ttl: Duration,
    /// Printed at start-up: the demo's tokens.
    pub banner: Option<String>,
    pub connections: ConnectionLimits,
    pub mcp_servers: Vec<McpServerConfig>,
    /// Origins besides `public_url`'s that may call `/mcp` from a browser.
    pub allowed_origins: Vec<String>,
    /// `sync`: an allowed call's decision and claim are fsynced before it runs; `batched`:
    /// they are fsynced within `flush_interval`, not awaited (DESIGN §13).
    pub batched: bool,
    /// How soon writes not awaited for an fsync are fsynced.
    pub flush_interval: Duration,
    /// Where the store lives (DESIGN §14).
    pub store: StoreKind,
}

/// Where the store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// Embedded fjall in `data_dir`, held by this process alone.
    Fjall,
    /// A PostgreSQL database shared by any number of gateways. `instance` names this gateway
    /// among them: a restarted gateway recovers only the calls it left executing. `ca`: PEM
    /// certificates to verify the database's TLS certificate with, instead of the system's.
    Postgres {
        url: String,
        instance: String,
        ca: Option<PathBuf>,
    },
}

impl std::fmt::Debug for StoreKind {
    // The URL may carry a password: it is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreKind::Fjall => f.write_str("Fjall"),
            StoreKind::Postgres { instance, ca, .. } => f
                .debug_struct("Postgres")
                .field("instance", instance)
                .field("ca", ca)
                .finish_non_exhaustive(),
        }
    }
}

/// A gateway's default name among those sharing a database: its host and its `data_dir`, which
/// stay the same across its restarts and differ between gateways on one host.
fn default_instance(data_dir: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!("{host}:{}", dir.display())
}

/// Resolves `env:VAR` to the variable's value.
fn secret(key: &str, value: &str) -> Result<String, ConfigError> {
    match value.strip_prefix("env:") {
        Some(var) => std::env::var(var)
            .map_err(|_| err(key, format!("environment variable `{var}` is not set"))),
        None => Ok(value.to_owned()),
    }
}

fn duration(key: &str, value: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        Some(v) => parse_duration(v).map_err(|m| err(key, m)),
        None => Ok(default),
    }
}

/// A duration that must not be zero (a zero timeout would close every connection).
fn positive(key: &str, value: Option<&str>, default: Duration) -> Result<Duration, ConfigError> {
    let d = duration(key, value, default)?;
    if d.is_zero() {
        return Err(err(key, "must be longer than zero"));
    }
    Ok(d)
}

impl Config {
    /// Reads and validates `path`. Relative paths in it are relative to its folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(path.display().to_string(), format!("cannot read: {e}")))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, base)
    }

    /// Validates a config text; `base` resolves relative paths.
    pub fn parse(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    format!("line {}", before.matches('\n').count() + 1)
                })
                .unwrap_or_default();
            err(at, e.message().trim())
        })?;
        let s = raw.server;
        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let listen_text = s.listen.unwrap_or_else(|| "127.0.0.1:8080".into());
        let listen = listen_text.parse().map_err(|_| {
            err(
                "server.listen",
                format!("`{listen_text}` is not an address like 127.0.0.1:8080"),
            )
        })?;
        let hold_timeout = duration(
            "server.hold_timeout",
            s.hold_timeout.as_deref(),
            Duration::from_secs(30),
        )?;
        let max_hold = duration(
            "server.max_hold",
            s.max_hold.as_deref(),
            Duration::from_secs(300),
        )?;
        let suspend_ttl = duration(
            "server.suspend_ttl",
            s.suspend_ttl.as_deref(),
            Duration::from_secs(24 * 3600),
        )?;
        let log_format = s.log_format.unwrap_or_else(|| "text".into());
        if log_format != "text" && log_format != "json" {
            return Err(err(
                "server.log_format",
                format!("`{log_format}` must be `text` or `json`"),
            ));
        }
        let mut principals = Vec::new();
        for (i, p) in raw.principals.into_iter().enumerate() {
            let key = format!("principals[{i}]");
            if !matches!(p.role.as_str(), "agent" | "approver" | "admin") {
                return Err(err(
                    format!("{key}.role"),
                    format!("`{}` must be agent, approver or admin", p.role),
                ));
            }
            if p.id.is_empty() || principals.iter().any(|q: &PrincipalConfig| q.id == p.id) {
                return Err(err(
                    format!("{key}.id"),
                    format!("`{}` is empty or used twice", p.id),
                ));
            }
            let hash = secret(&format!("{key}.token_sha256"), &p.token_sha256)?;
            if hash.len() != 64
                || !hash
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(err(
                    format!("{key}.token_sha256"),
                    "must be 64 lower-case hex digits: the SHA-256 of the token, never the token",
                ));
            }
            let rate = match &p.rate {
                Some(r) => {
                    Some(Rate::parse(r, p.burst).map_err(|m| err(format!("{key}.rate"), m))?)
                }
                None if p.burst.is_some() => {
                    return Err(err(format!("{key}.burst"), "a burst needs a `rate`"))
                }
                None => None,
            };
            if p.max_pending == Some(0) {
                return Err(err(
                    format!("{key}.max_pending"),
                    "must be at least 1 (leave it out for no limit)",
                ));
            }
            principals.push(PrincipalConfig {
                id: p.id,
                role: p.role,
                token_sha256: hash,
                groups: p.groups,
                rate,
                max_pending: p.max_pending,
            });
        }
        let mut tools = Vec::new();
        for (i, t) in raw.tools.into_iter().enumerate() {
            let key = format!("tools[{i}]");
            let pattern = Glob::new(&t.name).map_err(|m| err(format!("{key}.name"), m))?;
            let upstream = if t.upstream.starts_with("http://")
                || t.upstream.starts_with("https://")
            {
                Upstream::Http(
                    Target::parse(&t.upstream).map_err(|m| err(format!("{key}.upstream"), m))?,
                )
            } else if let Some(name) = t.upstream.strip_prefix("builtin:") {
                if !BUILTINS.contains(&name) {
                    return Err(err(
                        format!("{key}.upstream"),
                        format!("unknown built-in tool `{name}`"),
                    ));
                }
                Upstream::Builtin(name.to_owned())
            } else {
                return Err(err(
                    format!("{key}.upstream"),
                    format!(
                        "`{}` must be an http:// or https:// URL, or builtin:<name>",
                        t.upstream
                    ),
                ));
            };
            let timeout = duration(
                &format!("{key}.timeout"),
                t.timeout.as_deref(),
                Duration::from_secs(30),
            )?;
            tools.push(ToolRoute {
                pattern,
                upstream,
                timeout,
            });
        }
        let mut classifiers: Vec<ClassifierConfig> = Vec::new();
        for (i, c) in raw.classifiers.into_iter().enumerate() {
            let key = format!("classifiers[{i}]");
            if c.name.is_empty() || classifiers.iter().any(|x| x.name == c.name) {
                return Err(err(
                    format!("{key}.name"),
                    format!("`{}` is empty or used twice", c.name),
                ));
            }
            let kind = match (c.kind.as_str(), c.url) {
                ("builtin", None) => ClassifierKind::Builtin {
                    allow_hosts: c.allow_hosts,
                },
                ("builtin", Some(_)) => {
                    return Err(err(
                        format!("{key}.url"),
                        "a builtin classifier takes no url",
                    ))
                }
                ("http", Some(url))
                    if url.starts_with("http://") || url.starts_with("https://") =>
                {
                    ClassifierKind::Http {
                        url,
                        timeout: duration(
                            &format!("{key}.timeout"),
                            c.timeout.as_deref(),
                            Duration::from_millis(300),
                        )?,
                    }
                }
                ("http", other) => {
                    return Err(err(
                        format!("{key}.url"),
                        format!("an http classifier needs an http(s) url, got {other:?}"),
                    ))
                }
                (other, _) => {
                    return Err(err(
                        format!("{key}.kind"),
                        format!("`{other}` must be builtin or http"),
                    ))
                }
            };
            let on_error = match c.on_error.as_deref().unwrap_or("require_approval") {
                "require_approval" => airlock_policy::DecisionKind::RequireApproval,
                "deny" => airlock_policy::DecisionKind::Deny,
                other => return Err(err(format!("{key}.on_error"), format!("`{other}` must be require_approval or deny: a failing classifier never allows"))),
            };
            classifiers.push(ClassifierConfig {
                name: c.name,
                kind,
                on_error,
            });
        }
        let mut webhooks: Vec<WebhookConfig> = Vec::new();
        for (i, w) in raw.webhooks.into_iter().enumerate() {
            let key = format!("webhooks[{i}]");
            if w.id.is_empty() || webhooks.iter().any(|x| x.id == w.id) {
                return Err(err(
                    format!("{key}.id"),
                    format!("`{}` is empty or used twice", w.id),
                ));
            }
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return Err(err(
                    format!("{key}.url"),
                    format!("`{}` must be an http:// or https:// URL", w.url),
                ));
            }
            let secret = secret(&format!("{key}.secret"), &w.secret)?;
            let signing_key =
                crate::signing::secret_key(&secret).map_err(|m| err(format!("{key}.secret"), m))?;
            let events = match w.events {
                None => EVENTS.to_vec(),
                Some(names) => names
                    .iter()
                    .map(|name| {
                        Kind::parse(name)
                            .filter(|k| EVENTS.contains(k))
                            .ok_or_else(|| {
                                let known: Vec<&str> = EVENTS.iter().map(|k| k.as_str()).collect();
                                err(
                                    format!("{key}.events"),
                                    format!(
                                        "unknown event `{name}`; events are {}",
                                        known.join(", ")
                                    ),
                                )
                            })
                    })
                    .collect::<Result<_, _>>()?,
            };
            if let Some(p) = &w.principal {
                if !principals
                    .iter()
                    .any(|q| &q.id == p && (q.role == "approver" || q.role == "admin"))
                {
                    return Err(err(
                        format!("{key}.principal"),
                        format!(
                            "`{p}` must be a configured principal with role approver (or admin)"
                        ),
                    ));
                }
            }
            let schedule_text = w.retry_schedule.unwrap_or_else(|| {
                ["5s", "30s", "2m", "10m", "30m", "1h", "3h", "6h"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            });
            let mut retry_schedule = Vec::new();
            for (j, d) in schedule_text.iter().enumerate() {
                retry_schedule.push(
                    parse_duration(d).map_err(|m| err(format!("{key}.retry_schedule[{j}]"), m))?,
                );
            }
            let timeout = duration(
                &format!("{key}.timeout"),
                w.timeout.as_deref(),
                Duration::from_secs(10),
            )?;
            webhooks.push(WebhookConfig {
                id: w.id,
                url: w.url,
                key: signing_key,
                events,
                principal: w.principal,
                retry_schedule,
                timeout,
            });
        }
        let classifier_cache_ttl = duration(
            "server.classifier_cache_ttl",
            s.classifier_cache_ttl.as_deref(),
            Duration::from_secs(60),
        )?;
        for (i, p) in raw.audit.redact.iter().enumerate() {
            if !p.starts_with('/') {
                return Err(err(
                    format!("audit.redact[{i}]"),
                    format!("`{p}` is not a JSON pointer (it must start with `/`)"),
                ));
            }
        }
        let mut mcp_servers: Vec<McpServerConfig> = Vec::new();
        for (i, m) in raw.mcp_servers.into_iter().enumerate() {
            let key = format!("mcp_servers[{i}]");
            if !m
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
                || m.name.is_empty()
                || mcp_servers.iter().any(|o| o.name == m.name)
            {
                return Err(err(
                    format!("{key}.name"),
                    format!(
                        "`{}` must be a unique name of letters, digits, `_` and `-`",
                        m.name
                    ),
                ));
            }
            let transport = match (m.url, m.command) {
                (Some(url), None) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(err(
                            format!("{key}.url"),
                            format!("`{url}` is not an http(s) URL"),
                        ));
                    }
                    if !m.args.is_empty() || !m.env.is_empty() {
                        return Err(err(
                            format!("{key}.args"),
                            "`args` and `env` are for `command`",
                        ));
                    }
                    let mut headers = Vec::new();
                    for (h, v) in m.headers {
                        headers.push((h.clone(), secret(&format!("{key}.headers.{h}"), &v)?));
                    }
                    McpTransport::Http { url, headers }
                }
                (None, Some(command)) => {
                    if !m.headers.is_empty() {
                        return Err(err(format!("{key}.headers"), "`headers` are for `url`"));
                    }
                    let mut env = Vec::new();
                    for (k, v) in m.env {
                        env.push((k.clone(), secret(&format!("{key}.env.{k}"), &v)?));
                    }
                    McpTransport::Stdio {
                        command,
                        args: m.args,
                        env,
                    }
                }
                _ => {
                    return Err(err(
                        key,
                        "give exactly one of `url` (streamable HTTP) or `command` (stdio)",
                    ))
                }
            };
            let prefix = m.prefix.unwrap_or_else(|| format!("{}.", m.name));
            let timeout = duration(
                &format!("{key}.timeout"),
                m.timeout.as_deref(),
                Duration::from_secs(30),
            )?;
            mcp_servers.push(McpServerConfig {
                name: m.name,
                prefix,
                transport,
                timeout,
            });
        }
        let defaults = ConnectionLimits::default();
        let max_connections = s.max_connections.unwrap_or(defaults.max_connections);
        if max_connections == 0 {
            return Err(err("server.max_connections", "must be at least 1"));
        }
        let connections = ConnectionLimits {
            header_timeout: positive(
                "server.header_timeout",
                s.header_timeout.as_deref(),
                defaults.header_timeout,
            )?,
            tls_handshake_timeout: positive(
                "server.tls_handshake_timeout",
                s.tls_handshake_timeout.as_deref(),
                defaults.tls_handshake_timeout,
            )?,
            idle_timeout: positive(
                "server.idle_timeout",
                s.idle_timeout.as_deref(),
                defaults.idle_timeout,
            )?,
            body_timeout: positive(
                "server.body_timeout",
                s.body_timeout.as_deref(),
                defaults.body_timeout,
            )?,
            max_connections,
            max_connections_per_client: s
                .max_connections_per_client
                .unwrap_or(max_connections.div_ceil(2))
                .clamp(1, max_connections),
        };
        let batched = match s.durability.as_deref().unwrap_or("sync") {
            "sync" => false,
            "batched" => true,
            other => {
                return Err(err(
                    "server.durability",
                    format!("`{other}` must be `sync` or `batched`"),
                ))
            }
        };
        let flush_interval = positive(
            "server.flush_interval",
            s.flush_interval.as_deref(),
            Duration::from_millis(5),
        )?;
        let data_dir = resolve(s.data_dir.unwrap_or_else(|| "airlock-data".into()));
        let store = match raw.store.kind.as_deref().unwrap_or("fjall") {
            "fjall" => {
                if raw.store.url.is_some() {
                    return Err(err("store.url", "is only for `kind = \"postgres\"`"));
                }
                if raw.store.ca.is_some() {
                    return Err(err("store.ca", "is only for `kind = \"postgres\"`"));
                }
                StoreKind::Fjall
            }
            "postgres" => {
                let Some(url) = raw.store.url.as_deref() else {
                    return Err(err(
                        "store.url",
                        "is required with `kind = \"postgres\"` (e.g. `env:AIRLOCK_DATABASE_URL`)",
                    ));
                };
                let url = secret("store.url", url)?;
                let instance = match raw.store.instance {
                    Some(i) => {
                        let i = secret("store.instance", &i)?;
                        if i.trim().is_empty() {
                            return Err(err("store.instance", "must not be empty"));
                        }
                        i
                    }
                    None => default_instance(&data_dir),
                };
                StoreKind::Postgres {
                    url,
                    instance,
                    ca: raw.store.ca.map(resolve),
                }
            }
            other => {
                return Err(err(
                    "store.kind",
                    format!("`{other}` must be `fjall` or `postgres`"),
                ))
            }
        };
        Ok(Config {
            batched,
            flush_interval,
            store,
            connections,
            mcp_servers,
            allowed_origins: s.allowed_origins,
            listen,
            data_dir,
            policy: PolicySource::Path(resolve(
                s.policy.unwrap_or_else(|| "policies/default".into()),
            )),
            hold_timeout,
            max_hold,
            suspend_ttl,
            max_body_bytes: s.max_body_bytes.unwrap_or(1 << 20),
            max_header_bytes: s.max_header_bytes.unwrap_or(16 << 10),
            max_held: s.max_held.unwrap_or(10_000),
            max_in_flight: s.max_in_flight.unwrap_or(4096),
            tls: s.tls.map(|t| (resolve(t.cert), resolve(t.key))),
            upstream_ca: s.upstream_ca.map(resolve),
            json_logs: log_format == "json",
            principals,
            tools,
            redact: raw.audit.redact,
            classifiers,
            webhooks,
            public_url: s.public_url,
            classifier_cache_ttl,
            banner: None,
        })
    }

    /// The demo: the `default` policy set, the built-in demo tools, and fresh random tokens
    /// for an agent, an approver and an admin, printed at start-up.
    pub fn demo() -> Config {
        let token = |_: &str| format!("al_{}", uuid::Uuid::new_v4().simple());
        let (agent, approver, admin) = (token("agent"), token("approver"), token("admin"));
        let hash = |t: &str| airlock_policy::hex(&Sha256::digest(t.as_bytes()));
        let principal = |id: &str, role: &str, t: &str, groups: &[&str]| PrincipalConfig {
            id: id.into(),
            role: role.into(),
            token_sha256: hash(t),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            rate: None,
            max_pending: None,
        };
        let tools = BUILTINS
            .iter()
            .filter_map(|name| {
                Some(ToolRoute {
                    pattern: Glob::new(name).ok()?,
                    upstream: Upstream::Builtin((*name).into()),
                    timeout: Duration::from_secs(5),
                })
            })
            .collect();
        let banner = format!(
            "airlock demo: policy `default` (built in), tools demo.echo, demo.shell_preview and demo.deploy\n\
             tokens (new each start):\n  \
             agent     export AIRLOCK_TOKEN={agent}\n  \
             approver  export AIRLOCK_APPROVER_TOKEN={approver}\n  \
             admin     export AIRLOCK_ADMIN_TOKEN={admin}"
        );
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("airlock-demo-data"),
            store: StoreKind::Fjall,
            policy: PolicySource::Embedded(vec![(
                PathBuf::from("default/policy.toml"),
                include_str!("../../../policies/default/policy.toml").to_owned(),
            )]),
            hold_timeout: Duration::from_secs(30),
            max_hold: Duration::from_secs(300),
            suspend_ttl: Duration::from_secs(24 * 3600),
            max_body_bytes: 1 << 20,
            max_header_bytes: 16 << 10,
            max_held: 10_000,
            max_in_flight: 4096,
            tls: None,
            upstream_ca: None,
            json_logs: false,
            principals: vec![
                principal("demo-agent", "agent", &agent, &[]),
                principal("demo-approver", "approver", &approver, &["oncall"]),
                principal("demo-admin", "admin", &admin, &[]),
            ],
            tools,
            redact: vec!["/password".into()],
            classifiers: vec![ClassifierConfig {
                name: "risk".into(),
                kind: ClassifierKind::Builtin {
                    allow_hosts: vec![],
                },
                on_error: airlock_policy::DecisionKind::RequireApproval,
            }],
            classifier_cache_ttl: Duration::from_secs(60),
            webhooks: vec![],
            public_url: None,
            banner: Some(banner),
            connections: ConnectionLimits::default(),
            mcp_servers: vec![],
            allowed_origins: vec![],
            batched: false,
            flush_interval: Duration::from_millis(5),
        }
    }

    /// The route for `tool`: the first configured pattern that matches.
    pub fn route(&self, tool: &str) -> Option<&ToolRoute> {
        self.tools.iter().find(|t| t.pattern.matches(tool))
    }

    /// Whether a browser `Origin` may call: `public_url`'s own, or one of `allowed_origins`.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let own = self.public_url.as_deref().map(|url| {
            let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
            format!("{scheme}://{}", rest.split('/').next().unwrap_or(""))
        });
        own.as_deref() == Some(origin) || self.allowed_origins.iter().any(|o| o == origin)
    }

    /// The configured tool names and patterns, nearest to `tool` first (by edit distance),
    /// for the message of `tool.unknown`.
    pub fn tools_nearest(&self, tool: &str) -> Vec<&str> {
        let mut names: Vec<&str> = self.tools.iter().map(|t| t.pattern.as_str()).collect();
        names.sort_by_key(|n| (edit_distance(n, tool), *n));
        names.dedup();
        names
    }
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_char_edits() {
        assert_eq!(edit_distance("demo.echo", "demo.echo"), 0);
        assert_eq!(edit_distance("demo.ech", "demo.echo"), 1);
        assert_eq!(edit_distance("demo.ecko", "demo.echo"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/airlock"))
    }

    #[test]
    fn defaults_and_relative_paths() {
        let c = parse("").unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("/etc/airlock/airlock-data"));
        assert_eq!(c.hold_timeout, Duration::from_secs(30));
    }

    #[test]
    fn errors_name_the_key_and_value() {
        let cases = [
            ("[server]\nbogus = 1\n", "line 2"),
            ("[server]\nlisten = \"nowhere\"\n", "server.listen"),
            ("[server]\nhold_timeout = \"soon\"\n", "server.hold_timeout"),
            ("[[principals]]\nid = \"a\"\nrole = \"root\"\ntoken_sha256 = \"x\"\n", "principals[0].role"),
            ("[[principals]]\nid = \"a\"\nrole = \"agent\"\ntoken_sha256 = \"secret-token\"\n", "principals[0].token_sha256"),
            ("[[principals]]\nid = \"a\"\nrole = \"agent\"\ntoken_sha256 = \"env:AIRLOCK_TEST_UNSET_VAR\"\n", "principals[0].token_sha256"),
            ("[[tools]]\nname = \"a b\"\nupstream = \"http://x\"\n", "tools[0].name"),
            ("[[tools]]\nname = \"a\"\nupstream = \"ftp://x\"\n", "tools[0].upstream"),
            ("[[tools]]\nname = \"a\"\nupstream = \"http://exa mple/x\"\n", "tools[0].upstream"),
            ("[audit]\nredact = [\"password\"]\n", "audit.redact[0]"),
            ("[[classifiers]]\nname = \"r\"\nkind = \"magic\"\n", "classifiers[0].kind"),
            ("[[classifiers]]\nname = \"r\"\nkind = \"http\"\n", "classifiers[0].url"),
            ("[[classifiers]]\nname = \"r\"\nkind = \"builtin\"\non_error = \"allow\"\n", "classifiers[0].on_error"),

            ("[server]\nheader_timeout = \"0s\"\n", "server.header_timeout"),
            ("[server]\nidle_timeout = \"forever\"\n", "server.idle_timeout"),
            ("[server]\nmax_connections = 0\n", "server.max_connections"),
            ("[[principals]]\nid = \"a\"\nrole = \"agent\"\ntoken_sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nrate = \"fast\"\n", "principals[0].rate"),
            ("[[principals]]\nid = \"a\"\nrole = \"agent\"\ntoken_sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nburst = 3\n", "principals[0].burst"),
            ("[[principals]]\nid = \"a\"\nrole = \"agent\"\ntoken_sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nmax_pending = 0\n", "principals[0].max_pending"),
            ("[store]\nkind = \"sqlite\"\n", "store.kind"),
            ("[store]\nkind = \"postgres\"\n", "store.url"),
            ("[store]\nkind = \"postgres\"\nurl = \"env:AIRLOCK_TEST_UNSET_VAR\"\n", "store.url"),
            ("[store]\nurl = \"host=/tmp\"\n", "store.url"),
            ("[store]\nkind = \"postgres\"\nurl = \"host=/tmp\"\ninstance = \" \"\n", "store.instance"),
            ("[store]\ndsn = \"x\"\n", "line 2"),
            ("[store]\nca = \"db-ca.pem\"\n", "store.ca"),
        ];
        for (text, key) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.key.starts_with(key), "{text}: {e}");
        }
    }

    #[test]
    fn the_store_is_fjall_unless_postgres_is_named() {
        assert_eq!(parse("").unwrap().store, StoreKind::Fjall);
        let c = parse("[store]\nkind = \"postgres\"\nurl = \"host=/run/pg user=airlock password=hunter2\"\ninstance = \"gw-1\"\n").unwrap();
        assert_eq!(
            c.store,
            StoreKind::Postgres {
                url: "host=/run/pg user=airlock password=hunter2".into(),
                instance: "gw-1".into(),
                ca: None,
            }
        );
        assert!(
            !format!("{c:?}").contains("hunter2"),
            "the URL is never printed"
        );
        // Without a name, a gateway is its host and data_dir: stable across restarts.
        let c = parse("[store]\nkind = \"postgres\"\nurl = \"host=/run/pg\"\n").unwrap();
        let StoreKind::Postgres { instance, .. } = &c.store else {
            panic!("postgres")
        };
        assert!(
            instance.ends_with(":/etc/airlock/airlock-data"),
            "{instance}"
        );
    }

    #[test]
    fn the_demo_is_valid() {
        let c = Config::demo();
        assert_eq!(c.principals.len(), 3);
        assert!(c.route("demo.echo").is_some());
        assert!(c.route("shell.exec").is_none());
        assert!(c.banner.unwrap().contains("AIRLOCK_TOKEN=al_"));
    }
}
