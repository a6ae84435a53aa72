//! The inbox's sign-in with OpenID Connect (DESIGN §16): the authorization code flow with
//! PKCE (S256), `state` and `nonce`, the code exchanged at the token endpoint, the ID token
//! checked like a bearer JWT (with `aud` = the client id and the `nonce`), groups from it or
//! from the userinfo endpoint.
//!
//! It speaks OAuth; the pages, cookies and the session are `crate::inbox`'s. Sign-ins under
//! way are kept in memory for 10 minutes: a restart (or another gateway behind a balancer
//! without affinity) makes the approver start again, and signs nobody in.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::keys::read_json;
use super::{check_header, parts, Issuer, Kind, Verified};
use crate::config::InboxOidcConfig;
use crate::error::{ApiError, Code};
use crate::urlencoded;

/// How long a sign-in may take, from the button to the callback.
pub const SIGN_IN_TTL: Duration = Duration::from_secs(600);
/// Sign-ins under way at once; beyond it the oldest are forgotten.
const MAX_UNDER_WAY: usize = 10_000;

/// A sign-in under way, found again by the cookie of the browser that started it.
pub struct Pending {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    /// The inbox page to go to afterwards.
    pub next: String,
    started: Instant,
}

/// Sign-ins under way, by a hash of their browser cookie's secret.
#[derive(Default)]
pub struct SignIns {
    under_way: Mutex<HashMap<String, Pending>>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn random(bytes: usize) -> Result<String, ApiError> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b)
        .map_err(|e| ApiError::new(Code::Internal, format!("no randomness from the OS: {e}")))?;
    Ok(b64(&b))
}

fn key(cookie: &str) -> String {
    airlock_policy::hex(&Sha256::digest(cookie.as_bytes()))
}

impl SignIns {
    /// Starts a sign-in: the cookie secret for the browser, and the authorization URL to send
    /// it to.
    pub fn start(
        &self,
        authorization_endpoint: &str,
        config: &InboxOidcConfig,
        redirect_uri: &str,
        next: &str,
    ) -> Result<(String, String), ApiError> {
        let (cookie, state, nonce, verifier) = (random(32)?, random(32)?, random(32)?, random(32)?);
        let challenge = b64(&Sha256::digest(verifier.as_bytes()));
        let q = |s: &str| urlencoded::encode_component(s);
        let sep = if authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        let url = format!(
            "{authorization_endpoint}{sep}response_type=code&client_id={}&redirect_uri={}&scope={}&state={}&nonce={}&code_challenge={}&code_challenge_method=S256",
            q(&config.client_id),
            q(redirect_uri),
            q(&config.scopes.join(" ")),
            q(&state),
            q(&nonce),
            q(&challenge),
        );
        let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
        under_way.retain(|_, p| p.started.elapsed() < SIGN_IN_TTL);
        if under_way.len() >= MAX_UNDER_WAY {
            if let Some(oldest) = under_way
                .iter()
                .min_by_key(|(_, p)| p.started)
                .map(|(k, _)| k.clone())
            {
                under_way.remove(&oldest);
            }
        }
        under_way.insert(
            key(&cookie),
            Pending {
                state,
                nonce,
                verifier,
                next: next.to_owned(),
                started: Instant::now(),
            },
        );
        Ok((cookie, url))
    }

    /// The sign-in this browser started, taken (each is used once), if it is not too old.
    pub fn take(&self, cookie: &str) -> Option<Pending> {
        let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
        under_way
            .remove(&key(cookie))
            .filter(|p| p.started.elapsed() < SIGN_IN_TTL)
    }
}

/// The authorization code redeemed at the token endpoint (with the PKCE verifier, and the
/// client's credentials as RFC 6749 §2.3.1 says): the provider's JSON answer.
async fn redeem_code(
    issuer: &Issuer,
    config: &InboxOidcConfig,
    token_endpoint: &str,
    redirect_uri: &str,
    code: &str,
    pending: &Pending,
) -> Result<Value, String> {
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", pending.verifier.as_str()),
    ];
    if config.client_secret.is_none() {
        form.push(("client_id", config.client_id.as_str()));
    }
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", urlencoded::encode_component(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut req = issuer
        .keys
        .client()
        .post(token_endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body);
    if let Some(secret) = &config.client_secret {
        // RFC 6749 §2.3.1: each part form-encoded before the basic credentials.
        let enc = |s: &str| urlencoded::encode_component(s);
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            enc(&config.client_id),
            enc(secret)
        ));
        req = req.header("authorization", format!("Basic {basic}"));
    }
    let answer = req
        .send()
        .await
        .map_err(|_| "the identity provider's token endpoint cannot be reached".to_owned());
    let tokens = match answer {
        Ok(r) => read_json(token_endpoint, r).await.map_err(|_| {
            "the identity provider refused the code (it may have been used already, or be too old)"
                .to_owned()
        })?,
        Err(e) => return Err(e),
    };
    Ok(tokens)
}

/// Exchanges the code, checks the ID token and names the principal. The error is said in
/// words for the page (never a token or a code).
pub async fn finish(
    issuer: &Issuer,
    config: &InboxOidcConfig,
    redirect_uri: &str,
    code: &str,
    pending: &Pending,
) -> Result<Verified, String> {
    let endpoints = issuer
        .keys
        .endpoints()
        .await
        .map_err(|e| format!("the identity provider cannot be reached ({e})"))?;
    let token_endpoint = endpoints
        .token_endpoint
        .ok_or("the identity provider's discovery document names no token endpoint")?;
    let tokens = redeem_code(issuer, config, &token_endpoint, redirect_uri, code, pending).await?;
    let id_token = tokens["id_token"]
        .as_str()
        .ok_or("the identity provider answered without an ID token")?;
    let (header, unverified) = parts(id_token).ok_or("the ID token is not a JWT")?;
    let alg = check_header(&header).map_err(|e| format!("the ID token: {}", e.message))?;
    if unverified.get("iss").and_then(Value::as_str) != Some(issuer.config.issuer.as_str()) {
        return Err("the ID token is not from this issuer".into());
    }
    let mut claims = issuer
        .check(
            id_token,
            &header,
            alg,
            std::slice::from_ref(&config.client_id),
        )
        .await
        .map_err(|e| format!("the ID token: {}", e.message))?;
    let nonce = claims.get("nonce").and_then(Value::as_str).unwrap_or("");
    // INVARIANT: the nonce ties the ID token to this browser's sign-in; compared in full.
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        nonce.as_bytes(),
        pending.nonce.as_bytes(),
    )) {
        return Err("the ID token's nonce is not this sign-in's".into());
    }
    let groups_claim = issuer.config.groups_claim.clone();
    if !claims.contains_key(&groups_claim) {
        if let (Some(userinfo), Some(access)) =
            (endpoints.userinfo_endpoint, tokens["access_token"].as_str())
        {
            let info = issuer
                .keys
                .client()
                .get(&userinfo)
                .bearer_auth(access)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(|_| "the identity provider's userinfo endpoint cannot be reached")?;
            let info = read_json(&userinfo, info)
                .await
                .map_err(|_| "the identity provider's userinfo endpoint refused")?;
            if info["sub"] != claims["sub"] {
                return Err("the userinfo answer is about someone else".into());
            }
            if let Some(g) = info.get(&groups_claim) {
                claims.insert(groups_claim, g.clone());
            }
        }
    }
    issuer.principal(claims, Kind::Oidc).map_err(|e| e.message)
}
