//! `[[tools]]`: which backend serves a tool name pattern, and how long it may take.

use std::time::Duration;

use airlock_policy::Glob;

use super::raw::RawTool;
use super::target::{Target, BUILTINS};
use super::{duration, err, ConfigError};

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

/// Each route, checked: a valid pattern, an http(s) URL or a known built-in, a timeout.
pub(super) fn validate(raw: Vec<RawTool>) -> Result<Vec<ToolRoute>, ConfigError> {
    let mut tools = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let key = format!("tools[{i}]");
        let pattern = Glob::new(&t.name).map_err(|m| err(format!("{key}.name"), m))?;
        let upstream = if t.upstream.starts_with("http://") || t.upstream.starts_with("https://") {
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
    Ok(tools)
}
