//! `[[mcp_servers]]`: MCP upstreams over streamable HTTP or stdio, and the prefix of their
//! tools.

use std::time::Duration;

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

/// An MCP server airlock fronts: its tools appear to clients as `<prefix><tool>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub prefix: String,
    pub transport: McpTransport,
    pub timeout: Duration,
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
    Ok(mcp_servers)
}
