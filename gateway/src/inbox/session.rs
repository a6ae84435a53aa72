//! Who is signed in to the inbox: the token form's sign-in (`POST /inbox/login`), the session
//! it starts (a random secret in an `HttpOnly`, `SameSite=Strict` cookie; the store keeps only
//! its hash, with the CSRF token and, for an issuer's principal, who it is), the session a
//! request's cookie names, and the same-origin check every form post passes. The OIDC sign-in
//! ([`super::oidc`]) ends in [`start_session`] too.

use std::sync::Arc;

use airlock_storage::{Kind, Principal};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{HeaderMap, Request, Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::auth::{random_hex, Need, Role};
use crate::body::{read_body, Body, BodyLimits};
use crate::clock::now_ms;
use crate::state::{audit_fields, Gateway};
use crate::urlencoded;

use super::{page, pages, redirect, refusal_page};

/// How long a session lasts.
pub(super) const SESSION_MS: u64 = 12 * 60 * 60 * 1000;
pub(super) const COOKIE: &str = "airlock_session";

/// A signed-in approver.
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
    /// The store key (a hash of the cookie's secret).
    pub(super) key: String,
}

/// `POST /inbox/login`: an approver's or admin's token becomes a session.
pub(super) async fn login(gw: &Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    if !same_origin(gw, req.headers()) {
        return page(
            StatusCode::FORBIDDEN,
            pages::login(
                Some("This sign-in did not come from this inbox."),
                "/inbox/",
                &sign_in(gw),
            ),
        );
    }
    if !sign_in(gw).token {
        return page(
            StatusCode::FORBIDDEN,
            pages::login(
                Some("This inbox takes no tokens: sign in with your company account."),
                "/inbox/",
                &sign_in(gw),
            ),
        );
    }
    let old = cookie(req.headers());
    let limits = BodyLimits {
        max_bytes: 16 << 10,
        timeout: gw.config.connections.body_timeout,
    };
    let body = match read_body(req.into_body(), limits).await {
        Ok(b) => b,
        Err(e) => return refusal_page(&e),
    };
    let form = urlencoded::pairs(&String::from_utf8_lossy(&body));
    let token = urlencoded::get(&form, "token")
        .unwrap_or("")
        .trim()
        .to_owned();
    let next = urlencoded::get(&form, "next")
        .filter(|n| n.starts_with("/inbox/") && !n.starts_with("//"))
        .unwrap_or("/inbox/")
        .to_owned();
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
        headers.insert(hyper::header::AUTHORIZATION, v);
    }
    let (principal, role) = match gw.auth.authenticate(&headers, Need::Any).await {
        Ok(p) => p,
        Err(_) => {
            return page(
                StatusCode::UNAUTHORIZED,
                pages::login(
                    Some("That token is not known to this gateway."),
                    &next,
                    &sign_in(gw),
                ),
            )
        }
    };
    if role == Role::Agent {
        return page(
            StatusCode::FORBIDDEN,
            pages::login(
                Some("Agents cannot sign in to the inbox: use an approver's or an admin's token."),
                &next,
                &sign_in(gw),
            ),
        );
    }
    match start_session(gw, &principal, old).await {
        Ok(cookie) => redirect(&next, Some(cookie)),
        Err(r) => r,
    }
}

/// A new session for `principal` (signed in by a token or by OIDC): stored, audited, and the
/// cookie that carries its secret. An old session of this browser ends.
pub(super) async fn start_session(
    gw: &Arc<Gateway>,
    principal: &Principal,
    old: Option<String>,
) -> Result<String, Response<Body>> {
    if let Some(old) = old {
        let key = session_key(&old);
        let fields = audit_fields(
            json!({"principal": principal.id, "auth": principal.auth_record(), "why": "new sign-in"}),
        );
        let now = now_ms();
        let _ = gw
            .store_op(move |s| s.delete_session(&key, fields, now))
            .await;
    }
    let (secret, csrf) = match (random_hex(32), random_hex(32)) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => return Err(refusal_page(&e)),
    };
    let now = now_ms();
    let key = session_key(&secret);
    let mut value = json!({"principal": principal.id, "csrf": csrf, "created_at": now, "expires_at": now + SESSION_MS});
    // A principal of an issuer is in no config file: the session keeps who it is (never a
    // token), and holds only while its issuer is configured.
    if principal.issuer.is_some() {
        value["identity"] = json!(principal);
    }
    let fields = audit_fields(json!({"principal": principal.id, "auth": principal.auth_record()}));
    if let Err(e) = gw
        .store_op(move |s| s.put_session(&key, value, Kind::InboxSignedIn, fields, now))
        .await
    {
        return Err(refusal_page(&e));
    }
    crate::slack::users::remember_identity(gw, principal, now + SESSION_MS).await;
    tracing::info!(principal = %principal.id, "signed in to the inbox");
    let secure = if gw.config.tls.is_some() {
        "; Secure"
    } else {
        ""
    };
    Ok(format!(
        "{COOKIE}={secret}; Path=/inbox; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        SESSION_MS / 1000
    ))
}

/// The session a request's cookie names, if it is valid and not expired.
pub(super) async fn session_of(gw: &Arc<Gateway>, headers: &HeaderMap) -> Option<Session> {
    let secret = cookie(headers)?;
    let key = session_key(&secret);
    let k = key.clone();
    let v = gw.store_op(move |s| s.session(&k)).await.ok()??;
    if v.get("expires_at").and_then(Value::as_u64).unwrap_or(0) <= now_ms() {
        return None;
    }
    let (principal, role) = match v.get("identity") {
        Some(identity) => {
            let p: Principal = serde_json::from_value(identity.clone()).ok()?;
            gw.auth.issuers().by_id(p.issuer.as_deref()?)?;
            let role = Role::parse(&p.role)?;
            (p, role)
        }
        None => gw.auth.principal(v.get("principal")?.as_str()?)?,
    };
    if role == Role::Agent {
        return None;
    }
    Some(Session {
        principal,
        csrf: v.get("csrf")?.as_str()?.to_owned(),
        key,
    })
}

/// How the sign-in page offers to sign in.
pub(super) fn sign_in(gw: &Gateway) -> pages::SignIn<'_> {
    let oidc = gw.config.inbox_oidc.as_ref();
    pages::SignIn {
        oidc: oidc.map(|o| o.issuer.as_str()),
        token: oidc.is_none_or(|o| o.token_sign_in),
    }
}

pub(super) fn cookie(headers: &HeaderMap) -> Option<String> {
    cookie_named(headers, COOKIE)
}

/// The value of cookie `name`, if the request carries it.
pub(super) fn cookie_named(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            c.trim()
                .strip_prefix(&format!("{name}="))
                .map(str::to_owned)
        })
        .filter(|s| !s.is_empty())
}

pub(super) fn session_key(secret: &str) -> String {
    airlock_policy::hex(&Sha256::digest(secret.as_bytes()))
}

/// A state change must come from this inbox's own pages: the `Origin` is ours, or, when a
/// browser sends none (or `null`, as it does for some same-origin form posts and for any
/// sandboxed frame), `Sec-Fetch-Site` says same-origin. Neither: refused.
pub(super) fn same_origin(gw: &Gateway, headers: &HeaderMap) -> bool {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    match get("origin").filter(|o| *o != "null") {
        Some(origin) => gw.config.origin_allowed(origin),
        None => get("sec-fetch-site") == Some("same-origin"),
    }
}

pub(super) fn clear_cookie(gw: &Gateway) -> String {
    let secure = if gw.config.tls.is_some() {
        "; Secure"
    } else {
        ""
    };
    format!("{COOKIE}=; Path=/inbox; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

pub(super) fn session_view(s: &Session) -> pages::Who {
    pages::Who {
        id: s.principal.id.clone(),
        csrf: s.csrf.clone(),
        admin: s.principal.role == "admin",
    }
}
