//! The inbox's sign-in with an identity provider ("Sign in with …"): `GET /inbox/oidc/start`
//! sends the browser to the identity provider with a sign-in bound to it by a cookie
//! (`HttpOnly`, `SameSite=Lax` so the provider's redirect carries it, `Path=/inbox/oidc`, 10
//! minutes); `GET /inbox/oidc/callback` takes that sign-in (once), checks `state` (and RFC 9207 `iss`), has
//! `crate::identity::oidc` exchange the code and check the ID token, and starts the session of
//! §12. Each failure is a page that says what failed; nobody is signed in by one.
//!
//! The OAuth itself is `crate::identity::oidc`'s; the session is the inbox's own.

use std::sync::Arc;

use hyper::{HeaderMap, Response, StatusCode};
use subtle::ConstantTimeEq;

use super::{cookie, cookie_named, page, pages, redirect, start_session};
use crate::auth::Role;
use crate::body::Body;
use crate::identity::oidc::{finish, SIGN_IN_TTL};
use crate::state::Gateway;
use crate::urlencoded;

const COOKIE: &str = "airlock_oidc";

fn redirect_uri(gw: &Gateway) -> String {
    format!("{}/inbox/oidc/callback", gw.auth.issuers().public_url())
}

fn failed(text: &str) -> Response<Body> {
    page(
        StatusCode::UNAUTHORIZED,
        pages::message(
            "Not signed in",
            // The API's messages quote names in backticks; a page says them plainly.
            &format!(
                "{} Nobody was signed in; start again from the sign-in page.",
                text.replace('`', "")
            ),
        ),
    )
}

fn clear(gw: &Gateway) -> String {
    let secure = if gw.config.tls.is_some() {
        "; Secure"
    } else {
        ""
    };
    format!("{COOKIE}=; Path=/inbox/oidc; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
}

/// `GET /inbox/oidc/start?next=…`: to the identity provider.
pub async fn start(gw: &Arc<Gateway>, query: &str) -> Response<Body> {
    let Some(config) = gw.config.inbox_oidc.as_ref() else {
        return page(
            StatusCode::NOT_FOUND,
            pages::message(
                "Not found",
                "This inbox has no sign-in with an identity provider.",
            ),
        );
    };
    let next = urlencoded::get(&urlencoded::pairs(query), "next")
        .filter(|n| n.starts_with("/inbox/") && !n.starts_with("//"))
        .unwrap_or("/inbox/")
        .to_owned();
    let Some(issuer) = gw.auth.issuers().by_id(&config.issuer).cloned() else {
        return failed("The configured issuer is not known.");
    };
    let endpoint = match issuer.keys.endpoints().await {
        Ok(e) => e.authorization_endpoint,
        Err(e) => {
            tracing::warn!(issuer = %config.issuer, "sign-in: {e}");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::message(
                    "Not signed in",
                    &format!(
                        "The identity provider `{}` cannot be reached; try again in a moment.",
                        config.issuer
                    ),
                ),
            );
        }
    };
    let Some(endpoint) = endpoint else {
        return failed(
            "The identity provider's discovery document names no authorization endpoint.",
        );
    };
    match gw
        .auth
        .sign_ins
        .start(&endpoint, config, &redirect_uri(gw), &next)
    {
        Ok((secret, url)) => {
            let secure = if gw.config.tls.is_some() {
                "; Secure"
            } else {
                ""
            };
            let cookie = format!(
                "{COOKIE}={secret}; Path=/inbox/oidc; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
                SIGN_IN_TTL.as_secs()
            );
            redirect(&url, Some(cookie))
        }
        Err(e) => super::refusal_page(&e),
    }
}

/// `GET /inbox/oidc/callback?code=…&state=…`: back from the identity provider.
pub async fn callback(gw: &Arc<Gateway>, headers: &HeaderMap, query: &str) -> Response<Body> {
    let mut r = finish_sign_in(gw, headers, query).await;
    if let Ok(v) = hyper::header::HeaderValue::from_str(&clear(gw)) {
        r.headers_mut().append(hyper::header::SET_COOKIE, v);
    }
    r
}

async fn finish_sign_in(gw: &Arc<Gateway>, headers: &HeaderMap, query: &str) -> Response<Body> {
    let Some(config) = gw.config.inbox_oidc.as_ref() else {
        return failed("This inbox has no sign-in with an identity provider.");
    };
    let Some(issuer) = gw.auth.issuers().by_id(&config.issuer).cloned() else {
        return failed("The configured issuer is not known.");
    };
    let q = urlencoded::pairs(query);
    // The sign-in this browser started, used up whatever happens next.
    let Some(pending) = cookie_named(headers, COOKIE).and_then(|c| gw.auth.sign_ins.take(&c))
    else {
        return failed("This browser has no sign-in under way (it took longer than 10 minutes, was already used, or began elsewhere).");
    };
    let state = urlencoded::get(&q, "state").unwrap_or("");
    if !bool::from(state.as_bytes().ct_eq(pending.state.as_bytes())) {
        tracing::warn!(issuer = %config.issuer, "sign-in refused: wrong state");
        return failed("The answer from the identity provider is not for this sign-in (its `state` does not match).");
    }
    if let Some(iss) = urlencoded::get(&q, "iss") {
        if iss != issuer.config.issuer {
            return failed("The answer names another identity provider (`iss`).");
        }
    }
    if let Some(error) = urlencoded::get(&q, "error") {
        let said = urlencoded::get(&q, "error_description").unwrap_or("");
        return failed(&format!(
            "The identity provider refused the sign-in: {error}{}{said}.",
            if said.is_empty() { "" } else { ": " }
        ));
    }
    let Some(code) = urlencoded::get(&q, "code").filter(|c| !c.is_empty()) else {
        return failed("The identity provider sent no code.");
    };
    let verified = match finish(&issuer, config, &redirect_uri(gw), code, &pending).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(issuer = %config.issuer, "sign-in refused: {e}");
            return failed(&format!("{}.", capitalised(&e)));
        }
    };
    if verified.role == Role::Agent {
        return page(
            StatusCode::FORBIDDEN,
            pages::message(
                "Not signed in",
                &format!(
                    "{} is an agent: agents call tools, they cannot sign in to the inbox or decide. Nobody was signed in.",
                    verified.principal.id
                ),
            ),
        );
    }
    match start_session(gw, &verified.principal, cookie(headers)).await {
        Ok(session) => {
            let mut r = page(
                StatusCode::OK,
                pages::signed_in(&verified.principal.id, &pending.next),
            );
            if let Ok(v) = hyper::header::HeaderValue::from_str(&session) {
                r.headers_mut().append(hyper::header::SET_COOKIE, v);
            }
            r
        }
        Err(r) => r,
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
