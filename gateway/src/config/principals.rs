//! `[[principals]]`: who a bearer token stands for, its role, groups, the agents it may name,
//! its rate and pending limit.

use std::time::Duration;

use super::raw::RawPrincipal;
use super::{err, secret, ConfigError};

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
    /// Pending approvals this principal's calls may hold open at once (none: no limit).
    pub max_pending: Option<usize>,
    /// The agents it may name in `context.agent_id` (globs); empty: only its own id.
    pub agents: Vec<String>,
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

/// Each principal, checked: a known role, a unique id, a SHA-256 (never a token), a rate.
pub(super) fn validate(raw: Vec<RawPrincipal>) -> Result<Vec<PrincipalConfig>, ConfigError> {
    let mut principals = Vec::new();
    for (i, p) in raw.into_iter().enumerate() {
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
            Some(r) => Some(Rate::parse(r, p.burst).map_err(|m| err(format!("{key}.rate"), m))?),
            None if p.burst.is_some() => {
                return Err(err(format!("{key}.burst"), "a burst needs a `rate`"))
            }
            None => None,
        };
        let agents = agent_globs(&format!("{key}.agents"), p.agents)?;
        principals.push(PrincipalConfig {
            id: p.id,
            role: p.role,
            token_sha256: hash,
            groups: p.groups,
            rate,
            max_pending: max_pending(p.max_pending),
            agents,
        });
    }
    Ok(principals)
}

/// The pending approvals a principal may hold open (DESIGN §23): 100 unless its config says,
/// and `0` for no limit.
pub(super) fn max_pending(configured: Option<usize>) -> Option<usize> {
    match configured {
        None => Some(DEFAULT_MAX_PENDING),
        Some(0) => None,
        Some(n) => Some(n),
    }
}

/// What `max_pending` is when the config does not say.
pub const DEFAULT_MAX_PENDING: usize = 100;

/// `agents = ["support-bot", "billing-*"]`: each a glob over agent ids.
pub(super) fn agent_globs(key: &str, agents: Vec<String>) -> Result<Vec<String>, ConfigError> {
    for a in &agents {
        airlock_policy::Glob::new(a).map_err(|m| err(key.to_owned(), m))?;
    }
    Ok(agents)
}
