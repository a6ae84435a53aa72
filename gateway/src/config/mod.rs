//! `airlock.toml`: parsed raw with unknown keys refused, then validated into [`Config`], with
//! every error naming the key and the value (DESIGN §7). Also the built-in demo config that
//! `airlock serve` uses when it is given none.
//!
//! The text is read into [`raw`]'s structs first (unknown keys refused there), then each
//! section is checked by its own `validate`: [`server`], [`principals`], [`tools`] (with the
//! backend URLs of [`target`]), [`classifiers`], [`webhooks`], [`mcp_servers`] and [`store`].
//! Errors come in that order, the first one wins.
//!
//! It reads files and environment variables (`env:VAR` secrets) but starts nothing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_policy::{parse_duration, Glob};
use sha2::{Digest, Sha256};

mod classifiers;
mod credentials;
mod email;
mod issuers;
mod mcp_servers;
mod principals;
mod raw;
mod server;
mod slack;
mod store;
mod target;
mod tools;
mod webhooks;

pub use classifiers::{ClassifierConfig, ClassifierKind};
pub use credentials::{Credentials, Endpoint, Grant, OAuthClient};
pub use email::{EmailConfig, SmtpTls};
pub use issuers::{fetchable, InboxOidcConfig, IssuerConfig};
pub use mcp_servers::{McpServerConfig, McpTransport, PinMode};
pub use principals::{PrincipalConfig, Rate};
pub use server::ConnectionLimits;
pub use slack::SlackConfig;
pub use store::StoreKind;
pub use target::{Target, BUILTINS};
pub use tools::{ToolRoute, Upstream};
pub use webhooks::WebhookConfig;

use raw::RawConfig;

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

/// Where the policy set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    /// A file or folder, reloaded on SIGHUP, on change and on `POST /v1/policy/reload`.
    Path(PathBuf),
    /// Built into the binary (the demo).
    Embedded(Vec<(PathBuf, String)>),
}

/// The validated config.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub policy: PolicySource,
    /// `[server] shadow_policy`: a second set every call is evaluated by too, whose decision
    /// changes nothing (reloaded with the live one).
    pub shadow_policy: Option<PathBuf>,
    pub hold_timeout: Duration,
    pub max_hold: Duration,
    /// How long a suspended call waits for resume data (DESIGN §11).
    pub suspend_ttl: Duration,
    pub max_body_bytes: usize,
    /// Evaluation steps one call's decision may use, all rules together (DESIGN §19).
    pub policy_budget: u64,
    pub max_header_bytes: usize,
    /// Held requests at once; beyond it a call that would wait gets 429.
    pub max_held: usize,
    /// Held requests of one principal at once; beyond it `429 principal.too_many_held`.
    pub max_held_per_principal: usize,
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
    /// Host names besides the listen address and `public_url`'s by which clients reach `/mcp`
    /// and `/inbox/` (DESIGN §15).
    pub allowed_hosts: Vec<String>,
    /// `sync`: an allowed call's decision and claim are fsynced before it runs; `batched`:
    /// they are fsynced within `flush_interval`, not awaited (DESIGN §13).
    pub batched: bool,
    /// How soon writes not awaited for an fsync are fsynced.
    pub flush_interval: Duration,
    /// Where the store lives (DESIGN §14).
    pub store: StoreKind,
    /// Identity providers whose JWTs name principals (DESIGN §16).
    pub issuers: Vec<IssuerConfig>,
    /// The inbox's "Sign in with …".
    pub inbox_oidc: Option<InboxOidcConfig>,
    /// `[email]`: approval mail to the approver groups' addresses (DESIGN §22).
    pub email: Option<EmailConfig>,
    /// `[slack]`: approvals posted to the approver groups' channels, decided by a click
    /// (DESIGN §22).
    pub slack: Option<SlackConfig>,
    /// The file it was read from, read again on reload (principals, issuers, webhooks, TLS
    /// files); none for the demo.
    pub file: Option<PathBuf>,
    /// The keys the command line set over the file's (`--listen`, `--data-dir`): a reload
    /// keeps them.
    pub overridden: Vec<&'static str>,
}

/// A `Host` value's name, lower-case, without its port (`[::1]:8080` → `[::1]`).
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or("").to_owned();
    }
    host.split(':').next().unwrap_or("").to_owned()
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
        Config::parse_from(&text, base, Some(path))
    }

    /// Validates a config text; `base` resolves relative paths. A TOML syntax error names
    /// `file` with its line and column (`airlock.toml:3:7`, as an editor takes it), or the
    /// line and column alone for a text of no file.
    fn parse_from(text: &str, base: &Path, file: Option<&Path>) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
                    match file {
                        Some(f) => format!("{}:{line}:{col}", f.display()),
                        None => format!("line {line}, column {col}"),
                    }
                })
                .or_else(|| file.map(|f| f.display().to_string()))
                .unwrap_or_default();
            err(at, e.message().trim())
        })?;
        let resolve = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let server = server::validate(raw.server, &resolve)?;
        let principals = principals::validate(raw.principals)?;
        let tools = tools::validate(raw.tools, &resolve)?;
        let classifiers = classifiers::validate(raw.classifiers)?;
        let webhooks = webhooks::validate(raw.webhooks, &principals)?;
        for (i, p) in raw.audit.redact.iter().enumerate() {
            if !p.starts_with('/') {
                return Err(err(
                    format!("audit.redact[{i}]"),
                    format!("`{p}` is not a JSON pointer (it must start with `/`)"),
                ));
            }
        }
        let mcp_servers = mcp_servers::validate(raw.mcp_servers)?;
        let store = store::validate(raw.store, &server.data_dir, &resolve)?;
        let issuers = issuers::validate(raw.issuers, &principals, &resolve)?;
        let inbox_oidc = issuers::validate_inbox(raw.inbox.oidc, &issuers)?;
        let email = email::validate(raw.email, &resolve)?;
        let slack = slack::validate(raw.slack, &principals, &issuers)?;
        Ok(Config {
            listen: server.listen,
            data_dir: server.data_dir,
            policy: server.policy,
            shadow_policy: server.shadow_policy,
            hold_timeout: server.hold_timeout,
            max_hold: server.max_hold,
            suspend_ttl: server.suspend_ttl,
            max_body_bytes: server.max_body_bytes,
            policy_budget: server.policy_budget,
            max_header_bytes: server.max_header_bytes,
            max_held: server.max_held,
            max_held_per_principal: server.max_held_per_principal,
            max_in_flight: server.max_in_flight,
            tls: server.tls,
            upstream_ca: server.upstream_ca,
            json_logs: server.json_logs,
            public_url: server.public_url,
            allowed_origins: server.allowed_origins,
            allowed_hosts: server.allowed_hosts,
            classifier_cache_ttl: server.classifier_cache_ttl,
            connections: server.connections,
            batched: server.batched,
            flush_interval: server.flush_interval,
            store,
            principals,
            tools,
            redact: raw.audit.redact,
            classifiers,
            webhooks,
            mcp_servers,
            issuers,
            inbox_oidc,
            email,
            slack,
            banner: None,
            file: file.map(Path::to_path_buf),
            overridden: Vec::new(),
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
            max_pending: Some(principals::DEFAULT_MAX_PENDING),
            agents: vec![],
        };
        let tools = BUILTINS
            .iter()
            .filter_map(|name| {
                Some(ToolRoute {
                    pattern: Glob::new(name).ok()?,
                    upstream: Upstream::Builtin((*name).into()),
                    timeout: Duration::from_secs(5),
                    schema: None,
                    credentials: None,
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
            shadow_policy: None,
            hold_timeout: Duration::from_secs(30),
            max_hold: Duration::from_secs(300),
            suspend_ttl: Duration::from_secs(24 * 3600),
            max_body_bytes: 1 << 20,
            policy_budget: airlock_policy::DEFAULT_BUDGET,
            max_header_bytes: 16 << 10,
            max_held: 10_000,
            max_held_per_principal: 1_000,
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
            allowed_hosts: vec![],
            batched: false,
            flush_interval: Duration::from_millis(5),
            issuers: vec![],
            inbox_oidc: None,
            email: None,
            slack: None,
            file: None,
            overridden: Vec::new(),
        }
    }

    /// The route for `tool`: the first configured pattern that matches.
    pub fn route(&self, tool: &str) -> Option<&ToolRoute> {
        self.tools.iter().find(|t| t.pattern.matches(tool))
    }

    /// Whether a request's `Host` names this gateway (DESIGN §15): the host of `public_url`,
    /// of the listen address, `localhost`, `127.0.0.1` or `[::1]` when it listens on loopback,
    /// or one of `allowed_hosts`; ports are not compared. Listening on every address
    /// (`0.0.0.0`), any IP literal names it too: DNS rebinding needs a DNS name.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        let of_url = |url: &str| {
            let rest = url.split_once("://").map_or(url, |(_, r)| r);
            host_name(rest.split('/').next().unwrap_or(""))
        };
        let ip = self.listen.ip();
        let literal = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .ok();
        self.public_url.as_deref().map(of_url).as_deref() == Some(name.as_str())
            || literal == Some(ip)
            || (ip.is_loopback() && matches!(name.as_str(), "localhost" | "127.0.0.1" | "[::1]"))
            || (ip.is_unspecified() && literal.is_some())
            || self.allowed_hosts.iter().any(|h| host_name(h) == name)
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
        names.sort_by_key(|n| (airlock_policy::edit_distance(n, tool), *n));
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse_from(text, Path::new("/etc/airlock"), None)
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
            ("[[principals]]\nid = \"a\"\nrole = \"agent\"\ntoken_sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\nagents = [\"a b\"]\n", "principals[0].agents"),
            ("[store]\nkind = \"sqlite\"\n", "store.kind"),
            ("[store]\nkind = \"postgres\"\n", "store.url"),
            ("[store]\nkind = \"postgres\"\nurl = \"env:AIRLOCK_TEST_UNSET_VAR\"\n", "store.url"),
            ("[store]\nurl = \"host=/tmp\"\n", "store.url"),
            ("[store]\nkind = \"postgres\"\nurl = \"host=/tmp\"\ninstance = \" \"\n", "store.instance"),
            ("[store]\nkind = \"postgres\"\nurl = \"host=/tmp\"\ninstance = \"gw\\u0000\"\n", "store.instance"),
            ("[store]\nkind = \"postgres\"\nurl = \"host=/tmp\"\nwitness_interval = \"0s\"\n", "store.witness_interval"),
            ("[store]\nwitness_interval = \"5s\"\n", "store.witness_interval"),
            ("[store]\ndsn = \"x\"\n", "line 2"),
            ("[store]\nca = \"db-ca.pem\"\n", "store.ca"),
            // Ids that name airlock's own channels in the outbox.
            ("[[webhooks]]\nid = \"email:ops\"\nurl = \"http://x\"\nsecret = \"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"\n", "webhooks[0].id"),
            ("[[webhooks]]\nid = \"slack:ops\"\nurl = \"http://x\"\nsecret = \"whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"\n", "webhooks[0].id"),
        ];
        for (text, key) in cases {
            let e = parse(text).unwrap_err();
            assert!(e.key.starts_with(key), "{text}: {e}");
        }
    }

    #[test]
    fn credentials_are_checked_and_their_secrets_never_printed() {
        let tool = "[[tools]]\nname = \"crm.*\"\nupstream = \"https://crm.internal/x\"\n";
        let mcp = "[[mcp_servers]]\nname = \"gh\"\nurl = \"https://mcp.internal/mcp\"\n";
        let cc = "kind = \"client_credentials\", client_id = \"a\", client_secret = \"s3cr3t\"";
        let cases = [
            (format!("{tool}credentials = {{ {cc} }}\n"), "tools[0].credentials"),
            (format!("{tool}credentials = {{ {cc}, token_url = \"https://i/t\", issuer = \"https://i\" }}\n"), "tools[0].credentials"),
            (format!("{tool}credentials = {{ {cc}, token_url = \"ftp://i/t\" }}\n"), "tools[0].credentials.token_url"),
            (format!("{tool}credentials = {{ {cc}, issuer = \"https://i\", audience = \"x\" }}\n"), "tools[0].credentials.audience"),
            (format!("{tool}credentials = {{ kind = \"user_oauth\", client_id = \"a\" }}\n"), "line "),
            (format!("{tool}credentials = {{ kind = \"static\", headers = {{ \"bad header\" = \"x\" }} }}\n"), "tools[0].credentials.headers"),
            (format!("{tool}credentials = {{ kind = \"static\", headers = {{ authorization = \"env:AIRLOCK_TEST_UNSET_VAR\" }} }}\n"), "tools[0].credentials.headers.authorization"),
            (format!("{tool}credentials = {{ kind = \"static\", headers = {{ authorization = \"Bearer a\\nb\" }} }}\n"), "tools[0].credentials.headers.authorization"),
            ("[[tools]]\nname = \"x\"\nupstream = \"https://u:p@crm.internal/x\"\ncredentials = { kind = \"static\", headers = { a = \"b\" } }\n".to_owned(), "tools[0].credentials"),
            ("[[tools]]\nname = \"x\"\nupstream = \"builtin:demo.echo\"\ncredentials = { kind = \"static\", headers = { a = \"b\" } }\n".to_owned(), "tools[0].credentials"),
            (format!("{mcp}credentials = {{ kind = \"token_exchange\", client_id = \"a\", client_secret = \"b\", token_url = \"https://i/t\" }}\n"), "mcp_servers[0].credentials"),
            (format!("{mcp}headers = {{ a = \"b\" }}\ncredentials = {{ kind = \"static\", headers = {{ a = \"b\" }} }}\n"), "mcp_servers[0].credentials"),
        ];
        for (text, key) in cases {
            let e = parse(&text).unwrap_err();
            assert!(e.key.starts_with(key), "{text}: {e}");
        }
        let c = parse(&format!("{tool}credentials = {{ {cc}, issuer = \"https://idp.internal/\", scopes = [\"crm\"] }}\n")).unwrap();
        let Some(Credentials::OAuth(o)) = &c.tools[0].credentials else {
            panic!("{:?}", c.tools[0].credentials)
        };
        assert_eq!(o.endpoint, Endpoint::Issuer("https://idp.internal".into()));
        assert!(!format!("{o:?}").contains("s3cr3t"));
        // A static credential on an MCP server is its headers.
        let c = parse(&format!("{mcp}credentials = {{ kind = \"static\", headers = {{ authorization = \"Bearer x\" }} }}\n")).unwrap();
        assert_eq!(
            c.mcp_servers[0].transport,
            McpTransport::Http {
                url: "https://mcp.internal/mcp".into(),
                headers: vec![("authorization".into(), "Bearer x".into())]
            }
        );
    }

    #[test]
    fn issuers_are_checked_before_any_key_is_fetched() {
        let roles = "roles = { agent = [\"agents\"] }\n";
        let cases = [
            (format!("[[issuers]]\nid = \"Corp\"\nissuer = \"https://idp\"\n{roles}"), "issuers[0].id"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"http://idp.example.com\"\n{roles}"), "issuers[0].issuer"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\njwks_uri = \"http://keys.example.com/jwks\"\n{roles}"), "issuers[0].jwks_uri"),
            ("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\nroles = { root = [\"x\"] }\n".to_owned(), "issuers[0].roles"),
            ("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n".to_owned(), "issuers[0].roles"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n{roles}rate = \"lots\"\n"), "issuers[0].rate"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n{roles}jwks_ttl = \"a while\"\n"), "issuers[0].jwks_ttl"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n{roles}[[issuers]]\nid = \"corp\"\nissuer = \"https://other\"\n{roles}"), "issuers[1].id"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n{roles}[[issuers]]\nid = \"two\"\nissuer = \"https://idp\"\n{roles}"), "issuers[1].issuer"),
            ("[[principals]]\nid = \"corp:alice\"\nrole = \"agent\"\ntoken_sha256 = \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n".to_owned(), "principals"),
            ("[inbox.oidc]\nissuer = \"corp\"\nclient_id = \"inbox\"\n".to_owned(), "inbox.oidc.issuer"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n{roles}[inbox.oidc]\nissuer = \"corp\"\nclient_id = \"inbox\"\nscopes = [\"profile\"]\n"), "inbox.oidc.scopes"),
            (format!("[[issuers]]\nid = \"corp\"\nissuer = \"https://idp\"\n{roles}[inbox.oidc]\nissuer = \"corp\"\nclient_id = \"inbox\"\nclient_secret = \"env:AIRLOCK_TEST_UNSET_VAR\"\n"), "inbox.oidc.client_secret"),
        ];
        for (text, key) in cases {
            let e = parse(&text).unwrap_err();
            assert!(e.key.starts_with(key), "{text}: {e}");
        }
        // Loopback may be http (a local provider); the defaults are §16's.
        let c = parse("[[issuers]]\nid = \"corp\"\nissuer = \"http://127.0.0.1:9000\"\nroles = { approver = [\"sec\"], agent = [\"agents\"] }\n[inbox.oidc]\nissuer = \"corp\"\nclient_id = \"inbox\"\n").unwrap();
        let i = &c.issuers[0];
        assert_eq!(
            (i.principal_claim.as_str(), i.groups_claim.as_str()),
            ("sub", "groups")
        );
        assert_eq!(i.jwks_ttl, Duration::from_secs(600));
        assert_eq!(i.roles[0].0, "approver", "highest role first");
        let o = c.inbox_oidc.unwrap();
        assert_eq!(o.scopes, ["openid", "profile", "groups"]);
        assert!(o.token_sign_in && o.client_secret.is_none());
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
                witness_interval: Duration::from_secs(5),
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
