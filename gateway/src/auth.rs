//! Bearer-token authentication. A bearer that is a compact JWS is checked against the issuer
//! its `iss` names (`crate::identity`); any other is hashed with SHA-256 and compared, in
//! constant time, with every configured hash. Either names the principal and its role.
//!
//! It never stores or logs a token, and it does not decide what a role may do: each route
//! says which roles it admits. Refusals carry the `WWW-Authenticate` challenge of DESIGN §16.

use std::sync::Arc;

use airlock_storage::Principal;
use arc_swap::ArcSwap;
use hyper::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{Config, PrincipalConfig};
use crate::error::{ApiError, Code};
use crate::identity::{self, challenge, Audience, Issuers};

/// Where a request is authenticated, for the audience and the scopes its token must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A route of `/v1` that makes or answers calls (`/v1/calls`, `/v1/runs`): the issuer's
    /// `scopes` are required.
    Call,
    /// `/mcp`: the scopes, and the audience may also be `<public_url>/mcp`.
    Mcp,
    /// Any other route.
    Any,
}

pub use crate::identity::Role;

/// The principals tokens stand for. Both the configured principals and the issuers are
/// swapped whole by a reload (`crate::reconfigure`): a removed token is refused at once, a
/// new one works at once, and a request already authenticated goes on as it was.
pub struct Auth {
    principals: ArcSwap<Vec<(PrincipalConfig, Role)>>,
    /// The demo makes new tokens at every start; its 401 says so.
    demo: bool,
    issuers: ArcSwap<Issuers>,
    /// The inbox's OIDC sign-ins under way.
    pub sign_ins: identity::oidc::SignIns,
}

impl Auth {
    pub fn new(config: &Config) -> Result<Auth, String> {
        Ok(Auth {
            demo: config.banner.is_some(),
            principals: ArcSwap::from_pointee(principals_of(config)),
            issuers: ArcSwap::from_pointee(Issuers::new(config)?),
            sign_ins: Default::default(),
        })
    }

    /// The issuers in force.
    pub fn issuers(&self) -> Arc<Issuers> {
        self.issuers.load_full()
    }

    /// Puts `config`'s principals in force, and its issuers when `issuers_changed` (an
    /// issuer kept as it was keeps its keys and the tokens it verified).
    pub fn replace(&self, config: &Config, issuers_changed: bool) -> Result<(), String> {
        if issuers_changed {
            self.issuers.store(Arc::new(Issuers::new(config)?));
        }
        self.principals.store(Arc::new(principals_of(config)));
        Ok(())
    }

    /// The principal behind the request's bearer token. A refusal carries its challenge.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        need: Need,
    ) -> Result<(Principal, Role), ApiError> {
        let sent = headers.contains_key(hyper::header::AUTHORIZATION);
        let result = self.identify(headers, need).await;
        result.map_err(|mut e| {
            e.challenge = match e.code {
                Code::AuthUnauthenticated | Code::AuthInvalidToken => {
                    Some(challenge::unauthorized(&self.issuers.load(), sent))
                }
                _ => e.challenge,
            };
            e
        })
    }

    async fn identify(
        &self,
        headers: &HeaderMap,
        need: Need,
    ) -> Result<(Principal, Role), ApiError> {
        let unauthenticated = || {
            let message = if self.demo {
                "a valid `Authorization: Bearer <token>` is required; this is the demo, whose \
                 tokens are new at every start: export the ones `airlock serve` printed last"
            } else {
                "a valid `Authorization: Bearer <token>` is required"
            };
            ApiError::new(Code::AuthUnauthenticated, message)
        };
        let token = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(unauthenticated)?;
        let issuers = self.issuers.load_full();
        if !issuers.is_empty() {
            let audience = match need {
                Need::Mcp => Audience::Mcp,
                _ => Audience::Api,
            };
            if let Some(v) = issuers.authenticate(token, audience).await {
                let v = v?;
                if need != Need::Any {
                    v.has_required_scopes(&issuers)?;
                }
                return Ok((v.principal, v.role));
            }
        }
        let presented = airlock_policy::hex(&Sha256::digest(token.as_bytes()));
        // INVARIANT: every configured hash is compared, match or not, in constant time, so
        // timing reveals neither which principal matched nor how much of a hash did.
        let mut found = None;
        let principals = self.principals.load();
        for (p, role) in principals.iter() {
            if bool::from(presented.as_bytes().ct_eq(p.token_sha256.as_bytes())) {
                found = Some((p, *role));
            }
        }
        let (p, role) = found.ok_or_else(unauthenticated)?;
        Ok((static_principal(p), role))
    }
}

impl Auth {
    /// The configured principal `id`, for a session that names it (the inbox).
    pub fn principal(&self, id: &str) -> Option<(Principal, Role)> {
        self.principals
            .load()
            .iter()
            .find(|(p, _)| p.id == id)
            .map(|(p, role)| (static_principal(p), *role))
    }
}

/// The configured principals of `config`, with their roles.
fn principals_of(config: &Config) -> Vec<(PrincipalConfig, Role)> {
    config
        .principals
        .iter()
        .filter_map(|p| Some((p.clone(), Role::parse(&p.role)?)))
        .collect()
}

/// The principal a configured static token stands for.
fn static_principal(p: &PrincipalConfig) -> Principal {
    Principal {
        id: p.id.clone(),
        role: p.role.clone(),
        groups: p.groups.clone(),
        agents: p.agents.clone(),
        ..Default::default()
    }
}

/// `bytes` random bytes from the OS, hex-encoded: session secrets, CSRF tokens, session ids
/// and nonces. If the OS has no randomness to give, it is an error, never a guessable value.
pub fn random_hex(bytes: usize) -> Result<String, ApiError> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b)
        .map_err(|e| ApiError::new(Code::Internal, format!("no randomness from the OS: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Refuses a principal whose role is not among `allowed`.
pub fn require(role: Role, allowed: &[Role]) -> Result<(), ApiError> {
    if allowed.contains(&role) {
        return Ok(());
    }
    let names: Vec<&str> = allowed.iter().map(|r| r.as_str()).collect();
    let who = match names.as_slice() {
        [one] => format!("{one}s"),
        [rest @ .., last] => format!("{}s and {last}s", rest.join("s, ")),
        [] => "nobody".to_owned(),
    };
    Err(ApiError::new(
        Code::AuthForbidden,
        // agent, approver, admin: each takes "an".
        format!(
            "this route is for {who}, and this is an {}'s token",
            role.as_str()
        ),
    )
    .with_details(serde_json::json!({"role": role.as_str(), "allowed": names})))
}
