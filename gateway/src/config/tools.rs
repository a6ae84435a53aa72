//! `[[tools]]`: which backend serves a tool name pattern, how long it may take, and the
//! schema its args must fit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock_policy::Glob;
use serde_json::Value;

use super::credentials::Credentials;
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
    /// The JSON Schema (2020-12) its calls' args must fit (`schema = "file.json"`), read and
    /// checked to compile when the config loads.
    pub schema: Option<Arc<Value>>,
    /// What airlock attaches to the calls it sends (`credentials`).
    pub credentials: Option<Credentials>,
}

/// Each route, checked: a valid pattern, an http(s) URL or a known built-in, a timeout.
pub(super) fn validate(
    raw: Vec<RawTool>,
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Vec<ToolRoute>, ConfigError> {
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
        let schema = match t.schema {
            None => None,
            Some(path) => Some(Arc::new(schema(&format!("{key}.schema"), &resolve(path))?)),
        };
        let credentials = match t.credentials {
            None => None,
            Some(_) if matches!(upstream, Upstream::Builtin(_)) => {
                return Err(err(
                    format!("{key}.credentials"),
                    "a built-in tool takes no credentials",
                ))
            }
            Some(_) if matches!(&upstream, Upstream::Http(t) if t.basic.is_some()) => {
                return Err(err(
                    format!("{key}.credentials"),
                    "the upstream URL carries a user and password already: give one credential",
                ))
            }
            Some(c) => Some(super::credentials::validate(
                &format!("{key}.credentials"),
                c,
            )?),
        };
        tools.push(ToolRoute {
            pattern,
            upstream,
            timeout,
            schema,
            credentials,
        });
    }
    Ok(tools)
}

/// A tool's `schema` file: JSON, and a JSON Schema 2020-12 that compiles.
fn schema(key: &str, path: &std::path::Path) -> Result<Value, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        err(
            key.to_owned(),
            format!("cannot read `{}`: {e}", path.display()),
        )
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| {
        err(
            key.to_owned(),
            format!("`{}` is not JSON: {e}", path.display()),
        )
    })?;
    crate::schemas::check_schema(&value).map_err(|e| {
        err(
            key.to_owned(),
            format!("`{}` is not a JSON Schema 2020-12: {e}", path.display()),
        )
    })?;
    Ok(value)
}
