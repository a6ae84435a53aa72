//! Bearer-token authentication: a token is hashed with SHA-256 and compared, in constant time,
//! with every configured hash; the match names the principal and its role.
//!
//! It never stores or logs a token, and it does not decide what a role may do: each route
//! says which roles it admits.

use airlock_storage::Principal;
use hyper::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::PrincipalConfig;
use crate::error::{ApiError, Code};

/// Who may call what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Agent,
    Approver,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        match s {
            "agent" => Some(Role::Agent),
            "approver" => Some(Role::Approver),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// The principals tokens stand for.
pub struct Auth {
    principals: Vec<(PrincipalConfig, Role)>,
    /// The demo makes new tokens at every start; its 401 says so.
    demo: bool,
}

impl Auth {
    pub fn new(principals: &[PrincipalConfig], demo: bool) -> Auth {
        Auth {
            demo,
            principals: principals
                .iter()
                .filter_map(|p| Some((p.clone(), Role::parse(&p.role)?)))
                .collect(),
        }
    }

    /// The principal behind the request's bearer token.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(Principal, Role), ApiError> {
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
        let presented = airlock_policy::hex(&Sha256::digest(token.as_bytes()));
        // INVARIANT: every configured hash is compared, match or not, in constant time, so
        // timing reveals neither which principal matched nor how much of a hash did.
        let mut found = None;
        for (p, role) in &self.principals {
            if bool::from(presented.as_bytes().ct_eq(p.token_sha256.as_bytes())) {
                found = Some((p, *role));
            }
        }
        let (p, role) = found.ok_or_else(unauthenticated)?;
        Ok((
            Principal {
                id: p.id.clone(),
                role: p.role.clone(),
                groups: p.groups.clone(),
            },
            role,
        ))
    }
}

impl Auth {
    /// The configured principal `id`, for a session that names it (the inbox).
    pub fn principal(&self, id: &str) -> Option<(Principal, Role)> {
        self.principals
            .iter()
            .find(|(p, _)| p.id == id)
            .map(|(p, role)| {
                (
                    Principal {
                        id: p.id.clone(),
                        role: p.role.clone(),
                        groups: p.groups.clone(),
                    },
                    *role,
                )
            })
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
