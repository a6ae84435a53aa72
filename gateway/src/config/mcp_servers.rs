//! `[[mcp_servers]]`: MCP upstreams over streamable HTTP or stdio, the prefix of their tools,
//! how often their lists are read, and how their tool definitions are pinned (DESIGN §20).

use std::collections::BTreeMap;
use std::time::Duration;

use super::credentials::{Credentials, Grant, OAuthClient};
use super::raw::RawMcpServer;
use super::{duration, err, secret, ConfigError};

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

/// What a tool definition that is not the pinned one does (`pin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// Clients see the pinned definition, and calls are refused `tool.definition_changed`
    /// until a reviewer approves the change (the default).
    Enforce,
    /// Clients see the new definition and calls run; the change is audited, counted and
    /// opens a review.
    Warn,
    /// Nothing is pinned: the upstream's definitions are served as they come.
    Off,
}

impl PinMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PinMode::Enforce => "enforce",
            PinMode::Warn => "warn",
            PinMode::Off => "off",
        }
    }
}

/// An MCP server airlock fronts: its tools appear to clients as `<prefix><tool>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub prefix: String,
    pub transport: McpTransport,
    pub timeout: Duration,
    pub pin: PinMode,
    /// Pin the first definition seen of a tool; with `false`, a new tool waits for review.
    pub trust_first: bool,
    /// Approver groups that review a changed definition (admins always may).
    pub reviewers: Vec<String>,
    /// How often its lists are read again (besides when it says one changed).
    pub refresh: Duration,
    /// Whether a call's args are checked against the tool's pinned `inputSchema` (DESIGN
    /// §23); off only for a server whose schemas are wrong.
    pub validate_args: bool,
    /// The requests it may send the agent's client during a call (`relay`): the methods of
    /// `sampling`, `elicitation` and `roots`, all three unless the config names fewer. Any
    /// other is answered `-32601` and audited.
    pub relay: Vec<&'static str>,
    /// An OAuth client whose token airlock attaches to every request it sends this server
    /// (`credentials = { kind = "client_credentials", … }`); a `static` one is in its
    /// transport's headers.
    pub credentials: Option<OAuthClient>,
}

impl McpServerConfig {
    /// Whether this server may ask the agent's client `method` during a call.
    pub fn relays(&self, method: &str) -> bool {
        self.relay.contains(&method)
    }
}

/// What `relay` may name, and the method each lets through.
pub const RELAYABLE: [(&str, &str); 3] = [
    ("sampling", "sampling/createMessage"),
    ("elicitation", "elicitation/create"),
    ("roots", "roots/list"),
];

/// `relay = [...]`: each a name of [`RELAYABLE`], once; left out, all of them.
fn relay(key: &str, names: Option<Vec<String>>) -> Result<Vec<&'static str>, ConfigError> {
    let Some(names) = names else {
        return Ok(RELAYABLE.iter().map(|(_, m)| *m).collect());
    };
    let mut out = Vec::new();
    for n in &names {
        let Some((_, method)) = RELAYABLE.iter().find(|(name, _)| name == n) else {
            return Err(err(
                format!("{key}.relay"),
                format!("`{n}` is not one of `sampling`, `elicitation`, `roots`"),
            ));
        };
        if out.contains(method) {
            return Err(err(format!("{key}.relay"), format!("`{n}` is named twice")));
        }
        out.push(*method);
    }
    Ok(out)
}

/// Each MCP upstream, checked: a unique name, exactly one transport with what it takes.
pub(super) fn validate(raw: Vec<RawMcpServer>) -> Result<Vec<McpServerConfig>, ConfigError> {
    let mut mcp_servers: Vec<McpServerConfig> = Vec::new();
    for (i, m) in raw.into_iter().enumerate() {
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
        let mut transport = transport(&key, m.url, m.command, m.args, m.env, m.headers)?;
        let credentials = match (m.credentials, &mut transport) {
            (None, _) => None,
            (Some(_), McpTransport::Stdio { .. }) => {
                return Err(err(
                    format!("{key}.credentials"),
                    "`credentials` are for `url`: a child process gets `env`",
                ))
            }
            (Some(c), McpTransport::Http { headers, .. }) => {
                match super::credentials::validate(&format!("{key}.credentials"), c)? {
                    _ if !headers.is_empty() => {
                        return Err(err(format!("{key}.credentials"), "give `headers` or `credentials`, not both"))
                    }
                    Credentials::Static { headers: h } => {
                        *headers = h;
                        None
                    }
                    Credentials::OAuth(o) if o.grant == Grant::TokenExchange => {
                        return Err(err(format!("{key}.credentials"), "`token_exchange` is for `[[tools]]`: one MCP session carries every agent's calls; use `client_credentials`"))
                    }
                    Credentials::OAuth(o) => Some(o),
                }
            }
        };
        let prefix = m.prefix.unwrap_or_else(|| format!("{}.", m.name));
        let timeout = duration(
            &format!("{key}.timeout"),
            m.timeout.as_deref(),
            Duration::from_secs(30),
        )?;
        let pin = pin_mode(&key, m.pin.as_deref(), m.trust_first, &m.reviewers)?;
        let refresh = duration(
            &format!("{key}.refresh"),
            m.refresh.as_deref(),
            Duration::from_secs(30),
        )?;
        if refresh < Duration::from_secs(1) {
            return Err(err(format!("{key}.refresh"), "must be at least 1s"));
        }
        mcp_servers.push(McpServerConfig {
            name: m.name,
            prefix,
            transport,
            timeout,
            pin,
            trust_first: m.trust_first.unwrap_or(true),
            reviewers: m.reviewers,
            refresh,
            validate_args: m.validate_args.unwrap_or(true),
            relay: relay(&key, m.relay)?,
            credentials,
        });
    }
    Ok(mcp_servers)
}

/// `url` (streamable HTTP, with its headers) or `command` (stdio, with its args and env):
/// exactly one, and each with only its own keys.
fn transport(
    key: &str,
    url: Option<String>,
    command: Option<String>,
    args: Vec<String>,
    env_in: BTreeMap<String, String>,
    headers_in: BTreeMap<String, String>,
) -> Result<McpTransport, ConfigError> {
    let transport = match (url, command) {
        (Some(url), None) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(err(
                    format!("{key}.url"),
                    format!("`{url}` is not an http(s) URL"),
                ));
            }
            if !args.is_empty() || !env_in.is_empty() {
                return Err(err(
                    format!("{key}.args"),
                    "`args` and `env` are for `command`",
                ));
            }
            let mut headers = Vec::new();
            for (h, v) in headers_in {
                headers.push((h.clone(), secret(&format!("{key}.headers.{h}"), &v)?));
            }
            McpTransport::Http { url, headers }
        }
        (None, Some(command)) => {
            if !headers_in.is_empty() {
                return Err(err(format!("{key}.headers"), "`headers` are for `url`"));
            }
            let mut env = Vec::new();
            for (k, v) in env_in {
                env.push((k.clone(), secret(&format!("{key}.env.{k}"), &v)?));
            }
            McpTransport::Stdio { command, args, env }
        }
        _ => {
            return Err(err(
                key,
                "give exactly one of `url` (streamable HTTP) or `command` (stdio)",
            ))
        }
    };
    Ok(transport)
}

/// `pin`, and the keys that only pinned tools take (`trust_first`, `reviewers`).
fn pin_mode(
    key: &str,
    pin: Option<&str>,
    trust_first: Option<bool>,
    reviewers: &[String],
) -> Result<PinMode, ConfigError> {
    let mode = match pin {
        None | Some("enforce") => PinMode::Enforce,
        Some("warn") => PinMode::Warn,
        Some("off") => PinMode::Off,
        Some(other) => {
            return Err(err(
                format!("{key}.pin"),
                format!("`{other}` is not one of `enforce`, `warn`, `off`"),
            ))
        }
    };
    if let Some(bad) = reviewers
        .iter()
        .find(|g| g.is_empty() || g.chars().any(char::is_whitespace))
    {
        return Err(err(
            format!("{key}.reviewers"),
            format!("`{bad}` is not a group name"),
        ));
    }
    if mode == PinMode::Off && (trust_first.is_some() || !reviewers.is_empty()) {
        return Err(err(
            format!("{key}.pin"),
            "`trust_first` and `reviewers` are for pinned tools; `pin = \"off\"` pins nothing",
        ));
    }
    Ok(mode)
}
