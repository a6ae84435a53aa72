//! Principals named by an identity provider (DESIGN §16): bearer JWTs from `[[issuers]]`
//! checked with `jsonwebtoken` on the aws-lc that rustls brings, and the principal each names.
//!
//! - [`Issuers::verify`]: a JWS's header and claims checked as §16 lists, its signature with
//!   the issuer's key (from [`keys`]), and the principal, role and scopes it stands for;
//! - [`oidc`]: the inbox's sign-in (authorization code with PKCE) and its ID token;
//! - [`challenge`]: the `WWW-Authenticate` values and the RFC 9728 metadata.
//!
//! It never stores or logs a token. Static tokens stay in `crate::auth`, which calls this for
//! a bearer that looks like a JWS (and re-exports [`Role`], defined here so the two name roles
//! without importing each other); what a role may do is each route's business.

pub mod keys;
pub mod oidc;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use airlock_storage::Principal;
use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::config::{Config, IssuerConfig};
use crate::error::{ApiError, Code};
use keys::{IssuerKeys, Lookup};

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

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "agent" => Some(Role::Agent),
            "approver" => Some(Role::Approver),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// The leeway on `exp`, `nbf` and a future `iat`, in seconds.
pub const LEEWAY: u64 = 60;

/// The algorithms accepted, and nothing else: never `none`, never HMAC.
const ALGORITHMS: [(&str, Algorithm); 4] = [
    ("RS256", Algorithm::RS256),
    ("PS256", Algorithm::PS256),
    ("ES256", Algorithm::ES256),
    ("EdDSA", Algorithm::EdDSA),
];

pub struct Issuer {
    pub config: IssuerConfig,
    pub keys: IssuerKeys,
}

/// Every configured issuer, found by its `iss`.
pub struct Issuers {
    pub list: Vec<Arc<Issuer>>,
    by_iss: HashMap<String, usize>,
    /// Tokens already verified, by a hash of the audience and the token (never the token).
    verified: Mutex<HashMap<[u8; 32], Remembered>>,
    /// `server.public_url`: the default audience, and (with `/mcp`) the resource.
    public_url: String,
}

/// What a JWT proved: who, in which role, with which scopes.
#[derive(Clone)]
pub struct Verified {
    pub principal: Principal,
    pub role: Role,
    pub scopes: Vec<String>,
    /// The issuer's required scopes.
    pub required: Vec<String>,
}

impl Verified {
    /// `403 auth.insufficient_scope`, with its challenge, unless the token carries every scope
    /// its issuer requires.
    pub fn has_required_scopes(&self, issuers: &Issuers) -> Result<(), ApiError> {
        let missing: Vec<String> = self
            .required
            .iter()
            .filter(|s| !self.scopes.contains(s))
            .map(|s| format!("`{s}`"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut e = ApiError::new(
            Code::AuthInsufficientScope,
            format!(
                "the token lacks the scope {} that issuer `{}` requires here",
                missing.join(", "),
                self.principal.issuer.as_deref().unwrap_or("")
            ),
        );
        e.challenge = Some(challenge::insufficient_scope(issuers, &self.required));
        Err(e)
    }
}

/// A verified token, remembered until it expires: an agent sends the same access token on
/// every call, and an ES256 check costs about 100 µs here (README, Speed).
struct Remembered {
    verified: Verified,
    /// `exp` + the leeway, in seconds: not valid after.
    until: u64,
    issuer: usize,
    /// The issuer's key generation it was verified under.
    generation: u64,
}

/// Tokens remembered at most; beyond it the expired are dropped, then all.
const MAX_REMEMBERED: usize = 10_000;

/// Where a token is presented: `/mcp` also accepts `<public_url>/mcp` as the audience.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Api,
    Mcp,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(Code::AuthInvalidToken, message)
}

/// A JWS's header and claims, read before any check (base64url JSON objects), or `None` for
/// a bearer that is not a compact JWS (a static token).
pub fn parts(token: &str) -> Option<(Map<String, Value>, Map<String, Value>)> {
    let mut it = token.split('.');
    let (h, c, _s) = (it.next()?, it.next()?, it.next()?);
    if it.next().is_some() {
        return None;
    }
    let object = |part: &str| -> Option<Map<String, Value>> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .ok()?;
        match serde_json::from_slice(&bytes).ok()? {
            Value::Object(m) => Some(m),
            _ => None,
        }
    };
    let header = object(h)?;
    header.get("alg")?;
    Some((header, object(c).unwrap_or_default()))
}

impl Issuers {
    pub fn new(config: &Config) -> Result<Issuers, String> {
        let mut list = Vec::new();
        let mut by_iss = HashMap::new();
        for (i, c) in config.issuers.iter().enumerate() {
            by_iss.insert(c.issuer.clone(), i);
            list.push(Arc::new(Issuer {
                keys: IssuerKeys::new(c.clone())?,
                config: c.clone(),
            }));
        }
        Ok(Issuers {
            list,
            by_iss,
            verified: Mutex::new(HashMap::new()),
            public_url: config
                .public_url
                .clone()
                .unwrap_or_default()
                .trim_end_matches('/')
                .to_owned(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn public_url(&self) -> &str {
        &self.public_url
    }

    pub fn by_id(&self, id: &str) -> Option<&Arc<Issuer>> {
        self.list.iter().find(|i| i.config.id == id)
    }

    /// The principal a bearer JWT names, or `None` for a bearer that is not a compact JWS (a
    /// static token). A token verified before, under the same keys and not expired, is found
    /// again by its hash; any other is checked in full by [`Issuers::verify`].
    pub async fn authenticate(
        &self,
        token: &str,
        audience: Audience,
    ) -> Option<Result<Verified, ApiError>> {
        if token.bytes().filter(|&b| b == b'.').count() != 2 {
            return None;
        }
        let mut h = Sha256::new();
        h.update([audience as u8]);
        h.update(token.as_bytes());
        let key: [u8; 32] = h.finalize().into();
        let now = jsonwebtoken::get_current_timestamp();
        {
            let remembered = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = remembered.get(&key) {
                let generation = self.list[r.issuer].keys.generation.load(Ordering::Acquire);
                if now <= r.until && r.generation == generation {
                    return Some(Ok(r.verified.clone()));
                }
            }
        }
        let (header, claims) = parts(token)?;
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let issuer = self.by_iss.get(iss).copied();
        let generation = issuer.map(|i| self.list[i].keys.generation.load(Ordering::Acquire));
        let result = self.verify(token, &header, &claims, audience).await;
        if let (Ok(v), Some(issuer), Some(generation)) = (&result, issuer, generation) {
            let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
            let mut remembered = self.verified.lock().unwrap_or_else(|e| e.into_inner());
            if remembered.len() >= MAX_REMEMBERED {
                remembered.retain(|_, r| now <= r.until);
                if remembered.len() >= MAX_REMEMBERED {
                    remembered.clear();
                }
            }
            remembered.insert(
                key,
                Remembered {
                    verified: v.clone(),
                    until: exp + LEEWAY,
                    issuer,
                    generation,
                },
            );
        }
        Some(result)
    }

    /// Checks a bearer JWS (its `header` and unverified `claims` as [`parts`] read them) and
    /// names its principal.
    pub async fn verify(
        &self,
        token: &str,
        header: &Map<String, Value>,
        claims: &Map<String, Value>,
        audience: Audience,
    ) -> Result<Verified, ApiError> {
        let alg = check_header(header)?;
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        let issuer = self
            .by_iss
            .get(iss)
            .map(|&i| &self.list[i])
            .ok_or_else(|| invalid(format!("the token's `iss` {iss:?} is no configured issuer")))?;
        let aud = issuer
            .config
            .audience
            .clone()
            .unwrap_or_else(|| self.public_url.clone());
        let mut audiences = vec![aud];
        if audience == Audience::Mcp {
            audiences.push(format!("{}/mcp", self.public_url));
        }
        let claims = issuer.check(token, header, alg, &audiences).await?;
        issuer.principal(claims, Kind::Jwt)
    }
}

/// How a principal proved itself, for its `auth` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A bearer JWT.
    Jwt,
    /// An inbox session signed in with OIDC.
    Oidc,
}

/// The header's algorithm, if it is one we accept and the header asks for no key of its own.
fn check_header(header: &Map<String, Value>) -> Result<Algorithm, ApiError> {
    let name = header.get("alg").and_then(Value::as_str).unwrap_or("");
    let Some(&(_, alg)) = ALGORITHMS.iter().find(|(n, _)| *n == name) else {
        return Err(invalid(format!(
            "the token's `alg` {name:?} is not accepted (only RS256, PS256, ES256 and EdDSA)"
        )));
    };
    for k in ["jku", "x5u", "jwk", "x5c"] {
        if header.contains_key(k) {
            return Err(invalid(format!(
                "the token's header names a key of its own (`{k}`): keys come only from the issuer"
            )));
        }
    }
    if !header.get("kid").is_some_and(Value::is_string) {
        return Err(invalid("the token's header has no `kid`"));
    }
    Ok(alg)
}

impl Issuer {
    /// The token's signature with the issuer's key named by its `kid`, and its registered
    /// claims: `iss`, `aud` among `audiences`, `exp` and `nbf` within the leeway, no `iat` in
    /// the future. The claims, once they hold.
    async fn check(
        &self,
        token: &str,
        header: &Map<String, Value>,
        alg: Algorithm,
        audiences: &[String],
    ) -> Result<Map<String, Value>, ApiError> {
        let kid = header.get("kid").and_then(Value::as_str).unwrap_or("");
        let (keys, i) = match self.keys.find(kid).await {
            Lookup::Found(keys, i) => (keys, i),
            Lookup::UnknownKid => {
                return Err(invalid(format!(
                    "the token's `kid` {kid:?} is none of issuer `{}`'s keys",
                    self.config.id
                )))
            }
            Lookup::Unavailable(wait, why) => {
                return Err(ApiError::new(
                    Code::AuthIssuerUnavailable,
                    format!(
                        "issuer `{}` cannot be reached for its keys ({why}); retry in {wait}s",
                        self.config.id
                    ),
                )
                .retry_after(wait))
            }
        };
        let key = &keys[i];
        let name = header.get("alg").and_then(Value::as_str).unwrap_or("");
        if key.alg.as_deref().is_some_and(|a| a != name) {
            return Err(invalid(format!(
                "the token's `alg` {name} is not its key's ({})",
                key.alg.as_deref().unwrap_or("")
            )));
        }
        let mut v = Validation::new(alg);
        v.leeway = LEEWAY;
        v.validate_nbf = true;
        v.set_issuer(&[&self.config.issuer]);
        v.set_audience(audiences);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &v)
            .map_err(|e| invalid(refusal(&e, audiences)))?;
        let now = jsonwebtoken::get_current_timestamp();
        if data
            .claims
            .get("iat")
            .and_then(Value::as_u64)
            .is_some_and(|iat| iat > now + LEEWAY)
        {
            return Err(invalid("the token was issued in the future (`iat`)"));
        }
        Ok(data.claims)
    }

    /// The principal a checked token (or ID token) names: `<issuer>:<principal_claim>`, the
    /// highest role its groups map to, and the claims the policy may read. A token with an
    /// `act` claim is an agent acting for its `sub`.
    pub fn principal(&self, claims: Map<String, Value>, kind: Kind) -> Result<Verified, ApiError> {
        let c = &self.config;
        let value = match claims.get(&c.principal_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(invalid(format!(
                    "the token has no `{}` claim to name its principal",
                    c.principal_claim
                )))
            }
        };
        let groups = strings(claims.get(&c.groups_claim), |s| vec![s.to_owned()]);
        let role = c
            .roles
            .iter()
            .find(|(_, want)| want.iter().any(|g| groups.contains(g)))
            .map(|(r, _)| r.as_str());
        let Some(role) = role else {
            return Err(ApiError::new(
                Code::AuthForbidden,
                format!(
                    "`{}:{value}` is in no group that issuer `{}` maps to a role (its groups: {})",
                    c.id,
                    c.id,
                    if groups.is_empty() {
                        "none".to_owned()
                    } else {
                        groups.join(", ")
                    }
                ),
            ));
        };
        let act = claims
            .get("act")
            .and_then(|a| a.get("sub"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        // An agent acting for a user calls tools, never decides, whatever the user may do.
        let role = if act.is_some() { "agent" } else { role };
        let auth = auth_record(&c.id, &claims, kind, act.as_deref());
        let scopes = strings(claims.get("scope").or_else(|| claims.get("scp")), |s| {
            s.split_whitespace().map(str::to_owned).collect()
        });
        let kept = c
            .claims
            .iter()
            .filter_map(|k| Some((k.clone(), claims.get(k)?.clone())))
            .collect();
        let role_enum = match role {
            "admin" => Role::Admin,
            "approver" => Role::Approver,
            _ => Role::Agent,
        };
        Ok(Verified {
            principal: Principal {
                id: format!("{}:{value}", c.id),
                role: role.to_owned(),
                groups,
                issuer: Some(c.id.clone()),
                actor: act.map(|a| format!("{}:{a}", c.id)),
                claims: kept,
                auth: Some(auth),
                agents: c.agents.clone(),
            },
            role: role_enum,
            scopes,
            required: c.scopes.clone(),
        })
    }
}

/// A claim that is a string (read by `one`) or an array of strings; none otherwise.
fn strings(claim: Option<&Value>, one: impl Fn(&str) -> Vec<String>) -> Vec<String> {
    match claim {
        Some(Value::String(s)) => one(s),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    }
}

/// How a principal proved who it is, for the audit log: the kind of token, the issuer, `sub`,
/// and for a JWT its `jti` and the `act.sub` acting for it. Never the token.
fn auth_record(issuer: &str, claims: &Map<String, Value>, kind: Kind, act: Option<&str>) -> Value {
    let mut auth = Map::new();
    let kind_name = match kind {
        Kind::Jwt => "jwt",
        Kind::Oidc => "oidc",
    };
    auth.insert("kind".into(), json!(kind_name));
    auth.insert("issuer".into(), json!(issuer));
    if let Some(s) = claims.get("sub").and_then(Value::as_str) {
        auth.insert("sub".into(), json!(s));
    }
    if kind == Kind::Jwt {
        if let Some(j) = claims.get("jti").and_then(Value::as_str) {
            auth.insert("jti".into(), json!(j));
        }
        if let Some(a) = act {
            auth.insert("act".into(), json!(a));
        }
    }
    Value::Object(auth)
}

/// Which check a token failed, in words (never the token).
fn refusal(e: &jsonwebtoken::errors::Error, audiences: &[String]) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => "the token has expired (`exp`)".into(),
        K::ImmatureSignature => "the token is not valid yet (`nbf`)".into(),
        K::InvalidIssuer => "the token's `iss` is not its issuer's".into(),
        K::InvalidAudience => format!(
            "the token's `aud` does not contain {}",
            audiences
                .iter()
                .map(|a| format!("`{a}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        ),
        K::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
        K::InvalidClaimFormat(c) => format!("the token's `{c}` claim is malformed"),
        K::InvalidSignature => "the token's signature does not verify".into(),
        K::InvalidAlgorithm => "the token's `alg` does not fit its key".into(),
        _ => format!("the token does not verify ({e})"),
    }
}

/// The `WWW-Authenticate` challenges and the protected resource metadata (RFC 9728).
pub mod challenge {
    use super::Issuers;

    /// Where a client finds the protected resource metadata.
    pub fn metadata_url(issuers: &Issuers) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            issuers.public_url()
        )
    }

    pub fn scopes(issuers: &Issuers) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for i in &issuers.list {
            for s in &i.config.scopes {
                if !all.contains(s) {
                    all.push(s.clone());
                }
            }
        }
        all
    }

    /// The challenge of a 401: `resource_metadata` with issuers configured (and `error` when a
    /// token was sent, `scope` when scopes are required); a bare `Bearer` without.
    pub fn unauthorized(issuers: &Issuers, token_sent: bool) -> String {
        if issuers.is_empty() {
            return "Bearer".into();
        }
        let mut c = format!("Bearer resource_metadata=\"{}\"", metadata_url(issuers));
        if token_sent {
            c.push_str(", error=\"invalid_token\"");
        }
        let s = scopes(issuers);
        if !s.is_empty() {
            c.push_str(&format!(", scope=\"{}\"", s.join(" ")));
        }
        c
    }

    /// The challenge of a `403 auth.insufficient_scope`.
    pub fn insufficient_scope(issuers: &Issuers, required: &[String]) -> String {
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
            required.join(" "),
            metadata_url(issuers)
        )
    }
}
