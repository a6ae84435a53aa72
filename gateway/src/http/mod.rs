//! The HTTP front end: the JSON API of DESIGN §6. This file routes a request to its handler,
//! after the open routes (`/healthz`, `/readyz`, `/metrics`) and authentication through
//! [`admit`]; the handlers live by who uses them: [`calls`] (agents), [`approvals`]
//! (approvers) and [`admin`]. Each says which roles it admits, hands the request to
//! [`crate::pipeline`], the store or the policy, and turns the answer into JSON. Every refusal
//! leaves through [`ApiError::into_response`] (`crate::body`), the one place codes become
//! statuses.

mod admin;
mod approvals;
mod calls;
pub(crate) mod openapi;
pub(crate) mod routes;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::json as strict_json;
use airlock_storage::Principal;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::auth::{Need, Role};
use crate::body::{full, json_response, read_body, Body, BodyLimits};
use crate::error::{ApiError, Code};
use crate::metrics::CloseReason;
use crate::pipeline::admit;
use crate::state::Gateway;

use routes::{Access, Lookup, Op};

/// What every authenticated route is handed: who asks, in which role, the query string and
/// the body limits.
struct Ctx<'a> {
    gw: &'a Arc<Gateway>,
    principal: Principal,
    role: Role,
    query: &'a str,
    limit: BodyLimits,
}

/// Handles one request; never fails (errors become responses).
pub async fn handle(gw: Arc<Gateway>, req: Request<Incoming>) -> Response<Body> {
    // Overload: refuse before doing any work, never run a call without a decision.
    let _permit = match admit::in_flight(&gw) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    match route(&gw, req).await {
        Ok(r) => r,
        Err(e) if e.code == Code::RequestBodyTimeout => {
            // A client too slow to send its body loses the connection, not only the request.
            gw.metrics.connection_closed(CloseReason::BodyTimeout);
            let mut r = e.into_response();
            r.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            r
        }
        Err(e) => e.into_response(),
    }
}

async fn route(gw: &Arc<Gateway>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    headers_fit(gw, &req)?;
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let (route, params) = lookup(gw, req.method(), &path, &query)?;
    if route.access != Access::Token {
        return Ok(open_route(gw, route.op));
    }
    let need = match route.path.split('/').nth(2) {
        Some("calls" | "runs") => Need::Call,
        _ => Need::Any,
    };
    let (principal, role) = admit::authenticate(gw, req.headers(), need).await?;
    let limit = BodyLimits {
        max_bytes: gw.config.max_body_bytes,
        timeout: gw.config.connections.body_timeout,
    };
    // A big body (an approver's edit, resume data, a call) is read, parsed and decided on
    // the heavy lane; `POST /v1/calls` also checks the size it read, for chunked bodies.
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    let id = params.first().copied().unwrap_or("");
    // A caller authenticated by its JWT is the subject of the token exchanges its calls need.
    let subject = crate::credentials::subject_of(&principal, req.headers());
    if gw.heavy.takes(declared) {
        let (there, op, id) = (gw.clone(), route.op, id.to_owned());
        let work = Box::pin(async move {
            let cx = Ctx {
                gw: &there,
                principal,
                role,
                query: &query,
                limit,
            };
            // Matched here, not in a helper: the dispatch future is large, and is not moved
            // into another one for the common call that has no subject.
            match subject {
                Some(s) => {
                    crate::credentials::SUBJECT
                        .scope(s, dispatch(cx, op, &id, req))
                        .await
                }
                None => dispatch(cx, op, &id, req).await,
            }
        });
        return gw.heavy.run(work).await?;
    }
    let cx = Ctx {
        gw,
        principal,
        role,
        query: &query,
        limit,
    };
    match subject {
        Some(s) => {
            crate::credentials::SUBJECT
                .scope(s, dispatch(cx, route.op, id, req))
                .await
        }
        None => dispatch(cx, route.op, id, req).await,
    }
}

/// `431` when the request's headers are larger than `server.max_header_bytes`.
fn headers_fit(gw: &Gateway, req: &Request<Incoming>) -> Result<(), ApiError> {
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if header_bytes > gw.config.max_header_bytes {
        return Err(ApiError::new(
            Code::RequestHeadersTooLarge,
            format!(
                "headers are larger than {} bytes",
                gw.config.max_header_bytes
            ),
        ));
    }
    Ok(())
}

/// The route the table has for `method path`, and its `{name}` segments; `405` (with `Allow`)
/// for a known path's other methods, `404` for an unknown path, `400` for a query parameter
/// the route does not take.
fn lookup<'p>(
    gw: &Gateway,
    method: &Method,
    path: &'p str,
    query: &str,
) -> Result<(&'static routes::Route, Vec<&'p str>), ApiError> {
    let (route, params) = match routes::find(method, path, !gw.auth.issuers().is_empty()) {
        Lookup::Route(r, params) => (r, params),
        Lookup::WrongMethod(allow) => {
            let mut e = ApiError::new(
                Code::RouteMethodNotAllowed,
                format!("`{path}` takes {allow}, not {method}"),
            );
            e.allow = Some(allow.into());
            return Err(e);
        }
        Lookup::NotFound => {
            return Err(ApiError::new(
                Code::RouteNotFound,
                format!("no route `{path}`"),
            ))
        }
    };
    if let Some(k) = route.unknown_query(query) {
        return Err(ApiError::new(
            Code::RequestUnknownField,
            match route.query {
                [] => format!("`{path}` takes no query parameters (got `{k}`)"),
                names => format!(
                    "unknown query parameter `{k}`; `{path}` takes {}",
                    names.join(", ")
                ),
            },
        ));
    }
    Ok((route, params))
}

/// Hands an authenticated request to its operation's handler; `id` is the route's `{name}`
/// segment, if it has one.
async fn dispatch(
    cx: Ctx<'_>,
    op: Op,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    match op {
        Op::CreateCall => calls::create(cx, req).await,
        Op::ListCalls => calls::list(cx).await,
        Op::GetCall => calls::get(cx, id).await,
        Op::ResumeCall => calls::resume(cx, id, req).await,
        Op::CancelCall => calls::cancel(cx, id).await,
        Op::ResumeRun => calls::resume_run(cx, id, req).await,
        Op::StreamRun => calls::stream_run(cx, id, &req),
        Op::ListApprovals => approvals::list(cx).await,
        Op::GetApproval => approvals::get(cx, id).await,
        Op::Approve => approvals::decide(cx, id, true, req).await,
        Op::Decline => approvals::decide(cx, id, false, req).await,
        Op::ApproveRun => approvals::decide_run(cx, id, true, req).await,
        Op::DeclineRun => approvals::decide_run(cx, id, false, req).await,
        Op::DeclinePrincipal => approvals::decline_principal(cx, req).await,
        Op::Events => approvals::events(cx),
        Op::GetPolicy => admin::policy(cx),
        Op::GetShadow => admin::shadow(cx),
        Op::ListGrants => approvals::grants(cx).await,
        Op::RevokeGrant => approvals::revoke_grant(cx, id).await,
        Op::EvaluatePolicy => admin::evaluate_policy(cx, req).await,
        Op::ReloadPolicy => admin::reload(cx).await,
        Op::ListTools => tools::list(cx),
        Op::GetTool => tools::get(cx, id),
        Op::ReviewTool => tools::review(cx, id).await,
        Op::ListWebhooks => admin::webhooks(cx).await,
        Op::EnableWebhook => admin::enable_webhook(cx, id).await,
        Op::TestWebhook => admin::test_webhook(cx, id).await,
        Op::ListAudit => admin::audit(cx).await,
        Op::ExportAudit => admin::export(cx).await,
        Op::PruneAudit => admin::prune(cx, req).await,
        // The open routes are answered before authentication; served the same way here.
        Op::Root
        | Op::Favicon
        | Op::Healthz
        | Op::Readyz
        | Op::Metrics
        | Op::OpenApi
        | Op::ProtectedResource
        | Op::ProtectedResourceMcp => Ok(open_route(cx.gw, op)),
    }
}

/// The routes that take no token: the banner's redirect, the favicon, liveness, readiness,
/// metrics, this API's document and the RFC 9728 metadata.
fn open_route(gw: &Gateway, op: Op) -> Response<Body> {
    match op {
        // The banner's URL, opened in a browser: the approvers' inbox is where a person goes.
        Op::Root => {
            let mut r = Response::new(full(
                "airlock: approvers sign in at /inbox/; the JSON API is under /v1 (with a token)\n",
            ));
            *r.status_mut() = StatusCode::SEE_OTHER;
            r.headers_mut().insert(
                hyper::header::LOCATION,
                hyper::header::HeaderValue::from_static("/inbox/"),
            );
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        }
        // Browsers ask for it on every page; there is none, and that needs no token.
        Op::Favicon => {
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        // RFC 9728: where an OAuth client learns which issuers' tokens `/mcp` takes (DESIGN
        // §16). The table has these routes only while issuers are configured.
        Op::ProtectedResource | Op::ProtectedResourceMcp => {
            let mut r = json_response(
                StatusCode::OK,
                &crate::api::ProtectedResourceMetadata::from(&*gw.auth.issuers()),
            );
            r.headers_mut().insert(
                hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN,
                hyper::header::HeaderValue::from_static("*"),
            );
            r
        }
        Op::OpenApi => json_response(StatusCode::OK, &openapi::document(&gw.config)),
        Op::Readyz if !gw.is_ready() => ApiError::new(
            Code::StoreUnavailable,
            "not ready: the store is unavailable or no policy has loaded",
        )
        .into_response(),
        // Ready once the policy loaded; an MCP upstream never reached is named, not a reason
        // not to serve (its calls are `upstream.unavailable` until it is reached).
        Op::Readyz => json_response(
            StatusCode::OK,
            &crate::api::Ready {
                status: crate::api::IsReady::Ready,
                policy_version: gw.policy.load().version().to_owned(),
                mcp_servers_unreached: gw.backends.mcp.never_reached(),
            },
        ),
        Op::Metrics => {
            let mut r = Response::new(full(gw.metrics.render()));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        Op::Healthz => json_response(StatusCode::OK, &crate::api::Health::OK),
        token => ApiError::new(Code::Internal, format!("{token:?} is served with a token"))
            .into_response(),
    }
}

/// `?wait=` in seconds, at most `max_hold`; not an integer is `400 request.invalid_field`.
fn wait(gw: &Gateway, query: &str) -> Result<Duration, ApiError> {
    Ok(Duration::from_secs(query_int(query, "wait")?.unwrap_or(0)).min(gw.config.max_hold))
}

/// A query parameter that must be an integer in 0..=2^53−1 when it is there.
fn query_int(query: &str, name: &str) -> Result<Option<u64>, ApiError> {
    query_param(query, name)
        .map(|v| {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n <= strict_json::MAX_SAFE_INTEGER)
                .ok_or_else(|| {
                    ApiError::new(
                        Code::RequestInvalidField,
                        format!("`{name}` must be an integer from 0 to 2^53 - 1"),
                    )
                })
        })
        .transpose()
}

/// An audit position (`after`): a plain seq, or a cursor a page handed out (DESIGN §17).
fn query_cursor(query: &str, name: &str) -> Result<airlock_storage::Cursor, ApiError> {
    let Some(text) = query_param(query, name) else {
        return Ok(airlock_storage::Cursor::default());
    };
    let cursor = text.parse::<airlock_storage::Cursor>().map_err(|e| {
        ApiError::new(
            Code::RequestInvalidField,
            format!("`{name}` must be a seq or the `next_after` of a page: {e}"),
        )
    })?;
    if matches!(cursor, airlock_storage::Cursor::Seq(n) if n > strict_json::MAX_SAFE_INTEGER) {
        return Err(ApiError::new(
            Code::RequestInvalidField,
            format!("`{name}` must be an integer from 0 to 2^53 - 1, or a cursor"),
        ));
    }
    Ok(cursor)
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// Reads a request's body within `limit` and parses it as JSON strictly (duplicate keys,
/// unsafe numbers, depth); an empty body is `{}`.
async fn body_json(req: Request<Incoming>, limit: BodyLimits) -> Result<Value, ApiError> {
    let bytes = read_body(req.into_body(), limit).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    Ok(strict_json::parse(
        &bytes,
        airlock_policy::MAX_ARGS_DEPTH + 1,
    )?)
}
