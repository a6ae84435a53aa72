//! The approver inbox (DESIGN §12): web pages under `/inbox/` where approvers and admins see
//! pending calls and decide them, on the same listener as the API.
//!
//! - sign-in with an approver or admin token → a server-side session (kept in the store
//!   under a hash of its secret; cookie `HttpOnly`, `SameSite=Strict`, `Secure` under TLS,
//!   12 h, new at every sign-in; sign-out deletes it): [`session`];
//! - every state change carries the session's CSRF token and passes a same-origin check
//!   (`Origin`, or `Sec-Fetch-Site: same-origin` without it);
//! - pages are rendered by [`pages`] with compile-time templates (maud), which escape every
//!   value: what an agent wrote is always text. CSP `default-src 'self'`, no inline script.
//!
//! Deciding goes through [`crate::pipeline::decide`], under the same rules as the API. The
//! `/v1` API never reads the session cookie.

mod grants;
mod oidc;
mod pages;
mod review;
mod session;
mod shadow;
mod suspended;

use std::sync::Arc;

use airlock_storage::{ApprovalFilter, ApprovalKind, ApprovalStatus};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{full, read_body, Body, BodyLimits};
use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::{audit_fields, Gateway};
use crate::urlencoded;

use session::{
    clear_cookie, cookie, cookie_named, login, same_origin, session_of, session_view, sign_in,
    start_session, Session,
};

/// Handles one request under `/inbox`; never fails (errors become pages).
pub async fn handle(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    let Ok(_permit) = crate::pipeline::admit::in_flight(&gw) else {
        return page(
            StatusCode::SERVICE_UNAVAILABLE,
            pages::message("Busy", "The gateway is busy; try again in a moment."),
        );
    };
    if let Err(e) = crate::pipeline::admit::host(&gw, &req) {
        return page(StatusCode::FORBIDDEN, pages::message("Refused", &e.message));
    }
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let method = req.method().clone();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, segments.as_slice()) {
        (&Method::GET, ["inbox", "assets", "app.css"]) => {
            return asset(include_str!("assets/app.css"), "text/css; charset=utf-8")
        }
        (&Method::GET, ["inbox", "assets", "app.js"]) => {
            return asset(
                include_str!("assets/app.js"),
                "text/javascript; charset=utf-8",
            )
        }
        (&Method::GET, ["inbox", "login"]) => {
            let next = urlencoded::get(&urlencoded::pairs(&query), "next")
                .map(str::to_owned)
                .unwrap_or_default();
            return page(StatusCode::OK, pages::login(None, &next, &sign_in(&gw)));
        }
        (&Method::POST, ["inbox", "login"]) => return login(&gw, req).await,
        (&Method::GET, ["inbox", "oidc", "start"]) => return oidc::start(&gw, &query).await,
        (&Method::GET, ["inbox", "oidc", "callback"]) => {
            return oidc::callback(&gw, req.headers(), &query).await
        }
        _ => {}
    }
    let session = match session_of(&gw, req.headers()).await {
        Some(s) => s,
        None if method == Method::GET => {
            let next = urlencoded::encode_component(&path);
            return redirect(&format!("/inbox/login?next={next}"), None);
        }
        None => {
            return page(
                StatusCode::UNAUTHORIZED,
                pages::message(
                    "Signed out",
                    "Your session has ended. Sign in again to decide.",
                ),
            )
        }
    };
    if method == Method::POST {
        return checked_post(&gw, session, &segments, req).await;
    }
    match segments.as_slice() {
        ["inbox"] => list(&gw, &session, &query, false).await,
        ["inbox", "pending"] => list(&gw, &session, &query, true).await,
        ["inbox", "events"] => events(&gw),
        ["inbox", "approvals", id] => approval(&gw, &session, id, None).await,
        ["inbox", "history"] => history(&gw, &session).await,
        ["inbox", "suspended"] => suspended(&gw, &session).await,
        ["inbox", "calls", id] => call_page(&gw, &session, id, None).await,
        ["inbox", "audit"] => audit(&gw, &session).await,
        ["inbox", "shadow"] => shadow_page(&gw, &session),
        ["inbox", "grants"] => grants_page(&gw, &session, None).await,
        _ => page(
            StatusCode::NOT_FOUND,
            pages::message("Not found", "There is no such page in the inbox."),
        ),
    }
}

/// A form post of a signed-in approver: read, then refused unless it comes from this inbox
/// with the session's CSRF token; a big one is handled on the heavy lane.
async fn checked_post(
    gw: &Arc<Gateway>,
    session: Session,
    segments: &[&str],
    req: Request<Incoming>,
) -> Response<Body> {
    let limits = BodyLimits {
        max_bytes: gw.config.max_body_bytes,
        timeout: gw.config.connections.body_timeout,
    };
    let same_origin = same_origin(gw, req.headers());
    let body = match read_body(req.into_body(), limits).await {
        Ok(b) => b,
        Err(e) => return refusal_page(&e),
    };
    let form = urlencoded::pairs(&String::from_utf8_lossy(&body));
    // INVARIANT: no state changes without both checks.
    if !same_origin || urlencoded::get(&form, "csrf") != Some(session.csrf.as_str()) {
        return page(
            StatusCode::FORBIDDEN,
            pages::message(
                "Refused",
                "This form did not come from this inbox (a missing or wrong CSRF token, or another origin). Nothing was decided.",
            ),
        );
    }
    if gw.heavy.takes(body.len()) {
        return post_on_lane(gw, session, segments, form).await;
    }
    post(gw, &session, segments, &form).await
}

/// A big form (an edit of big args) is parsed and decided on the heavy lane.
async fn post_on_lane(
    gw: &Arc<Gateway>,
    session: Session,
    segments: &[&str],
    form: Vec<(String, String)>,
) -> Response<Body> {
    let there = gw.clone();
    let segments: Vec<String> = segments.iter().map(|s| (*s).to_owned()).collect();
    let work = Box::pin(async move {
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        post(&there, &session, &segments, &form).await
    });
    match gw.heavy.run(work).await {
        Ok(response) => response,
        Err(e) => refusal_page(&e),
    }
}

async fn post(
    gw: &Arc<Gateway>,
    session: &Session,
    segments: &[&str],
    form: &[(String, String)],
) -> Response<Body> {
    let reason = urlencoded::get(form, "reason")
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    match segments {
        ["inbox", "logout"] => {
            let key = session.key.clone();
            let fields = audit_fields(
                json!({"principal": session.principal.id, "auth": session.principal.auth_record()}),
            );
            let now = now_ms();
            let _ = gw
                .store_op(move |s| s.delete_session(&key, fields, now))
                .await;
            redirect("/inbox/login", Some(clear_cookie(gw)))
        }
        ["inbox", "approvals", id, verb @ ("approve" | "decline")] => {
            decide_one(gw, session, id, *verb == "approve", reason, form).await
        }
        ["inbox", "approvals", id, "preview"] => preview(gw, id, form).await,
        ["inbox", "grants", id, "revoke"] => {
            let note = match crate::grants::revoke(gw, &session.principal, id).await {
                Ok((_, a)) => format!(
                    "Revoked the grant for {}: it lets nothing run any more.",
                    a.tool
                ),
                Err(e) => pages::in_words(&e),
            };
            grants_page(gw, session, Some(&note)).await
        }
        ["inbox", "calls", id, "resume"] => {
            let data = match resume_data(gw, id, form).await {
                Ok(d) => d,
                Err(e) => return call_page(gw, session, id, Some(e)).await,
            };
            match crate::pipeline::suspend::resume(
                gw,
                &session.principal,
                id,
                data,
                crate::pipeline::suspend::IfRefused::StaysSuspended,
            )
            .await
            {
                Ok(_) => redirect(&format!("/inbox/calls/{id}"), None),
                Err(e) => call_page(gw, session, id, Some(e)).await,
            }
        }
        ["inbox", "runs", "decide"] => decide_run(gw, session, form, reason).await,
        ["inbox", "principals", "decline"] => decline_principal(gw, session, form, reason).await,
        _ => page(
            StatusCode::NOT_FOUND,
            pages::message("Not found", "There is no such action in the inbox."),
        ),
    }
}

/// A decline without a reason, refused: the agent reads the reason.
fn missing_reason() -> ApiError {
    ApiError::new(
        Code::RequestMissingReason,
        "a decline needs a reason: the agent reads it",
    )
}

/// Approve or decline one approval from its page, with edited args when the form has them;
/// a refusal is shown on the approval's page.
async fn decide_one(
    gw: &Arc<Gateway>,
    session: &Session,
    id: &str,
    approve: bool,
    reason: Option<String>,
    form: &[(String, String)],
) -> Response<Body> {
    if !approve && reason.is_none() {
        return approval(gw, session, id, Some(missing_reason())).await;
    }
    let edit = match urlencoded::get(form, "args").filter(|a| !a.trim().is_empty()) {
        None => None,
        Some(text) => {
            match airlock_policy::json::parse(text.as_bytes(), airlock_policy::MAX_ARGS_DEPTH) {
                Ok(v) => Some(v),
                Err(e) => return approval(gw, session, id, Some(ApiError::from(e))).await,
            }
        }
    };
    let grant = match grant_choice(form) {
        Ok(g) => g.filter(|_| approve),
        Err(e) => return approval(gw, session, id, Some(e)).await,
    };
    match crate::pipeline::decide_granting(gw, id, &session.principal, approve, reason, edit, grant)
        .await
    {
        Ok(_) => redirect(&format!("/inbox/approvals/{id}"), None),
        Err(e) => approval(gw, session, id, Some(e)).await,
    }
}

/// The grant an approver chose on the page (`grant_scope`, `grant_ttl`, `grant_uses`), read
/// as the API reads `grant`; `None` when the form offers no choice or none was made.
fn grant_choice(
    form: &[(String, String)],
) -> Result<Option<airlock_storage::GrantChoice>, ApiError> {
    let field = |k: &str| {
        urlencoded::get(form, k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let mut m = serde_json::Map::new();
    if let Some(s) = field("grant_scope") {
        m.insert("scope".into(), Value::from(s));
    }
    if let Some(t) = field("grant_ttl") {
        m.insert("ttl".into(), Value::from(t));
    }
    if let Some(u) = field("grant_uses") {
        let n: u64 = u.parse().map_err(|_| {
            ApiError::new(
                Code::RequestInvalidField,
                "`grant`: uses must be a whole number",
            )
        })?;
        m.insert("uses".into(), Value::from(n));
    }
    if m.is_empty() {
        return Ok(None);
    }
    crate::grants::choice(&Value::Object(m)).map(Some)
}

/// Approve or decline every pending approval of a run (up to 500), each under the same rules
/// as one; the page lists what each got.
async fn decide_run(
    gw: &Arc<Gateway>,
    session: &Session,
    form: &[(String, String)],
    reason: Option<String>,
) -> Response<Body> {
    let run = urlencoded::get(form, "run_id").unwrap_or("").to_owned();
    let approve = urlencoded::get(form, "verb") == Some("approve");
    if !approve && reason.is_none() {
        return page(StatusCode::BAD_REQUEST, pages::refusal(&missing_reason()));
    }
    let requester = urlencoded::get(form, "principal").filter(|p| !p.is_empty());
    let pending = match crate::pipeline::run_pending(gw, &run, requester, None).await {
        Ok(list) => list,
        Err(e) => return refusal_page(&e),
    };
    let mut results = Vec::new();
    for a in pending {
        let r =
            crate::pipeline::decide(gw, &a.id, &session.principal, approve, reason.clone(), None)
                .await;
        results.push((a.id, a.tool, r.err()));
    }
    page(
        StatusCode::OK,
        pages::run_result(&session_view(session), &run, &results),
    )
}

/// An admin declines every pending call approval of one principal at once (an agent flooding
/// its approvers); the page lists what each got.
async fn decline_principal(
    gw: &Arc<Gateway>,
    session: &Session,
    form: &[(String, String)],
    reason: Option<String>,
) -> Response<Body> {
    if !session.principal.is_admin() {
        return refusal_page(&ApiError::new(
            Code::AuthForbidden,
            "only an admin declines every pending call of a principal",
        ));
    }
    let Some(reason) = reason else {
        return page(StatusCode::BAD_REQUEST, pages::refusal(&missing_reason()));
    };
    let requester = urlencoded::get(form, "principal").unwrap_or("").to_owned();
    let results =
        match crate::pipeline::decline_all(gw, &session.principal, &requester, &reason).await {
            Ok(r) => r,
            Err(e) => return refusal_page(&e),
        };
    let results: Vec<(String, String, Option<ApiError>)> = results
        .into_iter()
        .map(|(a, r)| (a.id, a.tool, r.err()))
        .collect();
    page(
        StatusCode::OK,
        pages::principal_declined(&session_view(session), &requester, &results),
    )
}

/// The new decision and a diff for edited args, before they are submitted.
async fn preview(gw: &Arc<Gateway>, id: &str, form: &[(String, String)]) -> Response<Body> {
    let owned = id.to_owned();
    let a = match gw.store_op(move |s| s.approval(&owned)).await {
        Ok(Some(a)) => a,
        Ok(None) => return fragment(pages::preview_error("No such approval.")),
        Err(e) => return fragment(pages::preview_error(&e.message)),
    };
    let text = urlencoded::get(form, "args").unwrap_or("");
    let args = match airlock_policy::json::parse(text.as_bytes(), airlock_policy::MAX_ARGS_DEPTH) {
        Ok(v) => v,
        Err(e) => return fragment(pages::preview_error(&format!("{e} ({})", e.code()))),
    };
    let call = match airlock_policy::ToolCall::new(&a.tool, args, Some(a.context.clone())) {
        Ok(c) => c,
        Err(e) => return fragment(pages::preview_error(&format!("{e} ({})", e.code()))),
    };
    let (decision, _) =
        crate::pipeline::decide::policy(gw, &call, &a.requester, None, crate::clock::now_ms())
            .await;
    let old = serde_json::to_string_pretty(&a.args).unwrap_or_default();
    let new = serde_json::to_string_pretty(&call.args).unwrap_or_default();
    fragment(pages::preview(&decision, &old, &new))
}

async fn list(
    gw: &Arc<Gateway>,
    session: &Session,
    query: &str,
    fragment_only: bool,
) -> Response<Body> {
    let q = urlencoded::pairs(query);
    let text = |k: &str| {
        urlencoded::get(&q, k)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let filters = pages::Filters {
        tool: text("tool"),
        agent: text("agent"),
        run: text("run"),
    };
    let all = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        ..Default::default()
    };
    let list = match gw
        .store_op(move |s| s.list_approvals(&all, None, 1000))
        .await
    {
        Ok((l, _)) => l,
        Err(e) => return refusal_page(&e),
    };
    // The title's count is what `GET /v1/approvals?status=pending` gives this approver.
    let count = list.len();
    let shown: Vec<_> = list
        .into_iter()
        .filter(|a| {
            filters.tool.as_deref().is_none_or(|t| a.tool == t)
                && filters.agent.as_deref().is_none_or(|g| {
                    a.context.get("agent_id").and_then(Value::as_str) == Some(g)
                        || a.requester.id == g
                })
                && filters
                    .run
                    .as_deref()
                    .is_none_or(|r| a.context.get("run_id").and_then(Value::as_str) == Some(r))
        })
        .collect();
    let now = now_ms();
    if fragment_only {
        let mut r = fragment(pages::pending_table(&shown, now));
        if let Ok(v) = HeaderValue::from_str(&count.to_string()) {
            r.headers_mut().insert("x-pending-count", v);
        }
        return r;
    }
    page(
        StatusCode::OK,
        pages::list(&session_view(session), &shown, count, &filters, now),
    )
}

async fn approval(
    gw: &Arc<Gateway>,
    session: &Session,
    id: &str,
    error: Option<ApiError>,
) -> Response<Body> {
    let owned = id.to_owned();
    let found = gw.store_op(move |s| s.approval(&owned)).await;
    // Once it is decided, the approver's next stop: the oldest other pending approval.
    let decided = matches!(&found, Ok(Some(a)) if a.status != ApprovalStatus::Pending);
    let next = if decided {
        let filter = ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            ..Default::default()
        };
        gw.store_op(move |s| s.list_approvals(&filter, None, 500))
            .await
            .map(|(list, _)| list.into_iter().rev().find(|a| a.id != id))
            .unwrap_or_default()
    } else {
        None
    };
    record_page(found, "approval", error, |a, e| {
        let who = session_view(session);
        match a.kind {
            ApprovalKind::ToolDefinition => review::review(&who, a, e, now_ms(), next.as_ref()),
            ApprovalKind::Call => pages::approval(&who, a, e, now_ms(), next.as_ref()),
        }
    })
}

/// A record's page, with the refusal that brought the approver back (its status is the
/// page's); a record that is not there is a 404 page naming `what`.
fn record_page<T>(
    found: Result<Option<T>, ApiError>,
    what: &str,
    error: Option<ApiError>,
    render: impl FnOnce(&T, Option<&ApiError>) -> maud::Markup,
) -> Response<Body> {
    let record = match found {
        Ok(Some(r)) => r,
        Ok(None) => {
            return page(
                StatusCode::NOT_FOUND,
                pages::message("Not found", &format!("There is no such {what}.")),
            )
        }
        Err(e) => return refusal_page(&e),
    };
    let status = error.as_ref().map(|e| e.status()).unwrap_or(StatusCode::OK);
    page(status, render(&record, error.as_ref()))
}

/// The resume data a call's form gives: the generated fields typed by the schema (a value
/// that is not of its type is passed on as text, for the schema check to name), or the JSON
/// box parsed strictly.
async fn resume_data(
    gw: &Arc<Gateway>,
    id: &str,
    form: &[(String, String)],
) -> Result<Value, ApiError> {
    let owned = id.to_owned();
    let call = gw
        .store_op(move |s| s.call(&owned))
        .await?
        .ok_or_else(|| crate::pipeline::call_not_found(id))?;
    let schema = call
        .suspension
        .map(|s| s.resume_schema)
        .unwrap_or(Value::Null);
    let Some(fields) = suspended::form_fields(&schema) else {
        let text = urlencoded::get(form, "resume_data").unwrap_or("");
        return Ok(airlock_policy::json::parse(
            text.as_bytes(),
            airlock_policy::MAX_ARGS_DEPTH,
        )?);
    };
    let mut data = serde_json::Map::new();
    for f in fields {
        let Some(raw) = urlencoded::get(form, &format!("f.{}", f.name)) else {
            continue;
        };
        if raw.is_empty() && !f.required {
            continue;
        }
        let typed = match f.kind.as_str() {
            "integer" => raw.trim().parse::<i64>().map(Value::from).ok(),
            "number" => raw
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number),
            "boolean" => match raw {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            _ => None,
        };
        data.insert(
            f.name,
            typed.unwrap_or_else(|| Value::String(raw.to_owned())),
        );
    }
    Ok(Value::Object(data))
}

async fn suspended(gw: &Arc<Gateway>, session: &Session) -> Response<Body> {
    match gw.store_op(|s| s.suspended_calls(500)).await {
        Ok(calls) => page(
            StatusCode::OK,
            suspended::suspended(&session_view(session), &calls, now_ms()),
        ),
        Err(e) => refusal_page(&e),
    }
}

async fn call_page(
    gw: &Arc<Gateway>,
    session: &Session,
    id: &str,
    error: Option<ApiError>,
) -> Response<Body> {
    let owned = id.to_owned();
    let found = gw.store_op(move |s| s.call(&owned)).await;
    record_page(found, "call", error, |c, e| {
        suspended::call(&session_view(session), c, e, now_ms())
    })
}

async fn history(gw: &Arc<Gateway>, session: &Session) -> Response<Body> {
    let all = ApprovalFilter::default();
    match gw
        .store_op(move |s| s.list_approvals(&all, None, 200))
        .await
    {
        Ok((list, _)) => {
            let decided: Vec<_> = list
                .into_iter()
                .filter(|a| a.status != ApprovalStatus::Pending)
                .collect();
            page(
                StatusCode::OK,
                pages::history(&session_view(session), &decided),
            )
        }
        Err(e) => refusal_page(&e),
    }
}

async fn audit(gw: &Arc<Gateway>, session: &Session) -> Response<Body> {
    // Verifying reads the whole chain (about 0.8M records a second here).
    let checked = gw
        .store_op(|s| {
            let verified = s.verify_audit()?;
            let tail = s.audit_tail(50)?;
            Ok((verified, tail))
        })
        .await;
    match checked {
        Ok((verified, tail)) => {
            let chain = verified.map(|v| v.records()).map_err(|e| e.to_string());
            page(
                StatusCode::OK,
                pages::audit(&session_view(session), &tail, chain),
            )
        }
        Err(e) => refusal_page(&e),
    }
}

/// The live grants, with revoke.
async fn grants_page(gw: &Arc<Gateway>, session: &Session, note: Option<&str>) -> Response<Body> {
    match crate::grants::live(gw).await {
        Ok(live) => {
            let list: Vec<crate::api::Grant> = live
                .iter()
                .map(|(g, a)| crate::api::Grant::of(g, a.as_ref()))
                .collect();
            page(
                StatusCode::OK,
                grants::grants(&session_view(session), &list, note),
            )
        }
        Err(e) => refusal_page(&e),
    }
}

/// The shadow policy's transitions: admins only, as `GET /v1/policy/shadow`.
fn shadow_page(gw: &Arc<Gateway>, session: &Session) -> Response<Body> {
    if session.principal.role != "admin" {
        return page(
            StatusCode::FORBIDDEN,
            pages::message("Admins only", "The shadow policy's page is for admins."),
        );
    }
    let summary = crate::api::ShadowSummary::from(&gw.shadow.summary(gw.policy.load().version()));
    page(
        StatusCode::OK,
        shadow::shadow(&session_view(session), &summary),
    )
}

/// Pending-list changes, for the page's live refresh: one `changed` event per approval
/// event (the page then fetches its rows again).
fn events(gw: &Arc<Gateway>) -> Response<Body> {
    let changed = || Bytes::from_static(b"event: changed\ndata: {}\n\n");
    crate::body::event_stream(
        gw.events.subscribe(),
        gw.shutdown.clone(),
        move |e| e.kind.as_str().starts_with("approval.").then(changed),
        move |_| changed(),
    )
}

/// Security headers on every inbox answer.
fn secure(mut r: Response<Body>) -> Response<Body> {
    let h = r.headers_mut();
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.entry(CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}

fn page(status: StatusCode, markup: maud::Markup) -> Response<Body> {
    let mut r = Response::new(full(markup.into_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure(r)
}

fn fragment(markup: maud::Markup) -> Response<Body> {
    page(StatusCode::OK, markup)
}

fn refusal_page(e: &ApiError) -> Response<Body> {
    page(e.status(), pages::refusal(e))
}

fn asset(text: &'static str, content_type: &'static str) -> Response<Body> {
    let mut r = Response::new(full(text));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    secure(r)
}

fn redirect(to: &str, cookie: Option<String>) -> Response<Body> {
    let mut r = Response::new(full(Vec::new()));
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(LOCATION, v);
    }
    if let Some(c) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(SET_COOKIE, c);
    }
    secure(r)
}
