//! `[server]`: where the gateway listens and keeps its data, how long calls may be held, the
//! request and connection limits, and how writes are made durable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::raw::RawServer;
use super::{duration, err, positive, ConfigError, PolicySource};

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

/// The `[server]` table, checked: what [`super::Config`] takes from it.
pub(super) struct Server {
    pub(super) listen: SocketAddr,
    pub(super) data_dir: PathBuf,
    pub(super) policy: PolicySource,
    pub(super) shadow_policy: Option<PathBuf>,
    pub(super) hold_timeout: Duration,
    pub(super) max_hold: Duration,
    pub(super) suspend_ttl: Duration,
    pub(super) max_body_bytes: usize,
    pub(super) policy_budget: u64,
    pub(super) max_header_bytes: usize,
    pub(super) max_held: usize,
    pub(super) max_held_per_principal: usize,
    pub(super) max_in_flight: usize,
    pub(super) tls: Option<(PathBuf, PathBuf)>,
    pub(super) upstream_ca: Option<PathBuf>,
    pub(super) json_logs: bool,
    pub(super) public_url: Option<String>,
    pub(super) allowed_origins: Vec<String>,
    pub(super) allowed_hosts: Vec<String>,
    pub(super) classifier_cache_ttl: Duration,
    pub(super) connections: ConnectionLimits,
    pub(super) batched: bool,
    pub(super) flush_interval: Duration,
}

/// The server section, checked; `resolve` makes its relative paths relative to the config.
pub(super) fn validate(
    s: RawServer,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Server, ConfigError> {
    let listen = listen_address(s.listen.as_deref())?;
    let max_held = s.max_held.unwrap_or(10_000);
    // One principal's share of the held requests (DESIGN §23): a tenth by default.
    let max_held_per_principal = s.max_held_per_principal.unwrap_or((max_held / 10).max(1));
    if max_held_per_principal == 0 {
        return Err(err(
            "server.max_held_per_principal",
            "must be at least 1 (a principal whose calls may never wait cannot be approved)",
        ));
    }
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
    let json_logs = either(
        "server.log_format",
        s.log_format.as_deref(),
        ["text", "json"],
    )?;
    let classifier_cache_ttl = duration(
        "server.classifier_cache_ttl",
        s.classifier_cache_ttl.as_deref(),
        Duration::from_secs(60),
    )?;
    let connections = connections(&s)?;
    let policy_budget = match s.policy_budget {
        Some(0) => {
            return Err(err(
                "server.policy_budget",
                "`0` must be a positive number of evaluation steps",
            ))
        }
        n => n.unwrap_or(airlock_policy::DEFAULT_BUDGET),
    };
    let batched = either(
        "server.durability",
        s.durability.as_deref(),
        ["sync", "batched"],
    )?;
    let flush_interval = positive(
        "server.flush_interval",
        s.flush_interval.as_deref(),
        Duration::from_millis(5),
    )?;
    Ok(Server {
        listen,
        data_dir: resolve(s.data_dir.unwrap_or_else(|| "airlock-data".into())),
        policy: PolicySource::Path(resolve(
            s.policy.unwrap_or_else(|| "policies/default".into()),
        )),
        shadow_policy: s.shadow_policy.map(resolve),
        hold_timeout,
        max_hold,
        suspend_ttl,
        max_body_bytes: s.max_body_bytes.unwrap_or(1 << 20),
        policy_budget,
        max_header_bytes: s.max_header_bytes.unwrap_or(16 << 10),
        max_held,
        max_held_per_principal,
        max_in_flight: s.max_in_flight.unwrap_or(4096),
        tls: s.tls.map(|t| (resolve(t.cert), resolve(t.key))),
        upstream_ca: s.upstream_ca.map(resolve),
        json_logs,
        public_url: s.public_url,
        allowed_origins: s.allowed_origins,
        allowed_hosts: s.allowed_hosts,
        classifier_cache_ttl,
        connections,
        batched,
        flush_interval,
    })
}

/// The listener's limits: timeouts that must be longer than zero, at least one connection.
fn connections(s: &RawServer) -> Result<ConnectionLimits, ConfigError> {
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
    Ok(connections)
}

/// A setting that is one of two words, the first its default: whether it is the second.
fn either(key: &str, value: Option<&str>, words: [&str; 2]) -> Result<bool, ConfigError> {
    match value.unwrap_or(words[0]) {
        w if w == words[0] => Ok(false),
        w if w == words[1] => Ok(true),
        other => Err(err(
            key,
            format!("`{other}` must be `{}` or `{}`", words[0], words[1]),
        )),
    }
}

/// `server.listen`, by default `127.0.0.1:8080`.
fn listen_address(text: Option<&str>) -> Result<std::net::SocketAddr, ConfigError> {
    let text = text.unwrap_or("127.0.0.1:8080");
    text.parse().map_err(|_| {
        err(
            "server.listen",
            format!("`{text}` is not an address like 127.0.0.1:8080"),
        )
    })
}
