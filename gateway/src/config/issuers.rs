//! `[[issuers]]` and `[inbox.oidc]` (DESIGN §16): the OpenID Connect / OAuth 2 issuers whose
//! JWTs name principals, and the one the inbox offers for sign-in.
//!
//! It checks the text only; fetching discovery documents and keys is `crate::identity`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::principals::{PrincipalConfig, Rate};
use super::raw::{RawInboxOidc, RawIssuer};
use super::{duration, err, host_name, secret, ConfigError};

/// An issuer whose bearer JWTs airlock accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerConfig {
    /// `[a-z0-9-]`: names it in principal ids (`<id>:<sub>`) and the audit log.
    pub id: String,
    /// The exact `iss`.
    pub issuer: String,
    /// Keys from here instead of discovery.
    pub jwks_uri: Option<String>,
    /// `aud` must contain it; none means `server.public_url`.
    pub audience: Option<String>,
    pub principal_claim: String,
    pub groups_claim: String,
    /// `(role, groups)`, highest role first: admin, approver, agent.
    pub roles: Vec<(String, Vec<String>)>,
    /// Required on `/v1/calls` and `/mcp`.
    pub scopes: Vec<String>,
    /// More claims the policy may read (`principal.claims`).
    pub claims: Vec<String>,
    pub ca: Option<PathBuf>,
    pub rate: Option<Rate>,
    pub max_pending: Option<usize>,
    pub jwks_ttl: Duration,
    /// The agents its principals may name in `context.agent_id` (globs); empty: only
    /// their own ids.
    pub agents: Vec<String>,
}

/// `[inbox.oidc]`: "Sign in with <issuer>" in the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxOidcConfig {
    /// The `[[issuers]]` id.
    pub issuer: String,
    pub client_id: String,
    /// None for a public client (PKCE alone).
    pub client_secret: Option<String>,
    pub scopes: Vec<String>,
    /// Whether the token form is offered beside the sign-in button.
    pub token_sign_in: bool,
}

/// Whether `url` may be fetched for keys and tokens: `https://`, or `http://` on a loopback
/// address (a local identity provider, tests).
pub fn fetchable(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let name = host_name(rest.split('/').next().unwrap_or(""));
    name == "localhost"
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(super) fn validate(
    raw: Vec<RawIssuer>,
    principals: &[PrincipalConfig],
    resolve: &dyn Fn(PathBuf) -> PathBuf,
) -> Result<Vec<IssuerConfig>, ConfigError> {
    let mut issuers: Vec<IssuerConfig> = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("issuers[{i}].{k}");
        check_names(&r, &issuers, &key)?;
        let roles = roles(&key("roles"), &r.roles)?;
        let rate = match &r.rate {
            Some(t) => Some(Rate::parse(t, r.burst).map_err(|m| err(key("rate"), m))?),
            None if r.burst.is_some() => return Err(err(key("burst"), "a burst needs a `rate`")),
            None => None,
        };
        let jwks_ttl = duration(
            &key("jwks_ttl"),
            r.jwks_ttl.as_deref(),
            Duration::from_secs(600),
        )?;
        let agents = super::principals::agent_globs(&key("agents"), r.agents)?;
        issuers.push(IssuerConfig {
            id: r.id,
            issuer: r.issuer,
            jwks_uri: r.jwks_uri,
            audience: r.audience,
            principal_claim: r.principal_claim.unwrap_or_else(|| "sub".into()),
            groups_claim: r.groups_claim.unwrap_or_else(|| "groups".into()),
            roles,
            scopes: r.scopes,
            claims: r.claims,
            ca: r.ca.map(resolve),
            rate,
            max_pending: super::principals::max_pending(r.max_pending),
            jwks_ttl,
            agents,
        });
    }
    if let Some(p) = principals.iter().find(|p| p.id.contains(':')) {
        return Err(err(
            "principals",
            format!(
                "`{}`: a static principal's id may not contain `:` (issuers' principals are `<issuer>:<sub>`)",
                p.id
            ),
        ));
    }
    Ok(issuers)
}

/// An issuer's `roles`: which groups make a principal an admin, an approver or an agent, most
/// powerful first. Only those three roles, and at least one group in all.
fn roles(
    key: &str,
    raw: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<(String, Vec<String>)>, ConfigError> {
    if let Some(name) = raw
        .keys()
        .find(|n| !matches!(n.as_str(), "agent" | "approver" | "admin"))
    {
        return Err(err(
            key,
            format!("`{name}` is not a role: agent, approver or admin"),
        ));
    }
    let roles: Vec<(String, Vec<String>)> = ["admin", "approver", "agent"]
        .into_iter()
        .filter_map(|role| raw.get(role).map(|g| (role.to_owned(), g.clone())))
        .collect();
    if roles.iter().all(|(_, g)| g.is_empty()) {
        return Err(err(
            key,
            "maps no group to a role: every token of this issuer would be refused",
        ));
    }
    Ok(roles)
}

/// An issuer's id and URLs: an id of a-z, 0-9 and `-`, neither it nor the issuer another's,
/// and URLs that are https (http only on loopback).
fn check_names(
    r: &RawIssuer,
    issuers: &[IssuerConfig],
    key: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if r.id.is_empty()
        || !r
            .id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(err(
            key("id"),
            format!("`{}` must be non-empty and only a-z, 0-9 and -", r.id),
        ));
    }
    if issuers.iter().any(|q| q.id == r.id) {
        return Err(err(key("id"), format!("`{}` is used twice", r.id)));
    }
    if issuers.iter().any(|q| q.issuer == r.issuer) {
        return Err(err(
            key("issuer"),
            format!("`{}` is another issuer's too", r.issuer),
        ));
    }
    for (k, url) in [
        ("issuer", Some(&r.issuer)),
        ("jwks_uri", r.jwks_uri.as_ref()),
    ] {
        if let Some(url) = url {
            if !fetchable(url) {
                return Err(err(
                    key(k),
                    format!("`{url}` must be https:// (http:// only on a loopback address)"),
                ));
            }
        }
    }
    Ok(())
}

pub(super) fn validate_inbox(
    raw: Option<RawInboxOidc>,
    issuers: &[IssuerConfig],
) -> Result<Option<InboxOidcConfig>, ConfigError> {
    let Some(r) = raw else { return Ok(None) };
    if !issuers.iter().any(|i| i.id == r.issuer) {
        let ids: Vec<&str> = issuers.iter().map(|i| i.id.as_str()).collect();
        return Err(err(
            "inbox.oidc.issuer",
            format!(
                "`{}` is no `[[issuers]]` id (there are: {})",
                r.issuer,
                if ids.is_empty() {
                    "none".to_owned()
                } else {
                    ids.join(", ")
                }
            ),
        ));
    }
    if r.client_id.is_empty() {
        return Err(err("inbox.oidc.client_id", "must not be empty"));
    }
    let client_secret = match r.client_secret {
        Some(s) => Some(secret("inbox.oidc.client_secret", &s)?),
        None => None,
    };
    let scopes = r
        .scopes
        .unwrap_or_else(|| vec!["openid".into(), "profile".into(), "groups".into()]);
    if !scopes.iter().any(|s| s == "openid") {
        return Err(err(
            "inbox.oidc.scopes",
            "must include `openid`: without it there is no ID token",
        ));
    }
    Ok(Some(InboxOidcConfig {
        issuer: r.issuer,
        client_id: r.client_id,
        client_secret,
        scopes,
        token_sign_in: r.token_sign_in.unwrap_or(true),
    }))
}
