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
use crate::pipeline::admit;
use crate::serve::guards::CloseReason;
use crate::state::Gateway;

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
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();

    if let Some(open) = open_route(gw, &method, &segments) {
        return Ok(open);
    }

    let need = match segments.as_slice() {
        ["v1", "calls" | "runs", ..] => Need::Call,
        _ => Need::Any,
    };
    let (principal, role) = admit::authenticate(gw, req.headers(), need).await?;
    let cx = Ctx {
        gw,
        principal,
        role,
        query: &query,
        limit: BodyLimits {
            max_bytes: gw.config.max_body_bytes,
            timeout: gw.config.connections.body_timeout,
        },
    };
    match (method, segments.as_slice()) {
        (Method::POST, ["v1", "calls"]) => calls::create(cx, req).await,
        (Method::GET, ["v1", "calls"]) => calls::list(cx).await,
        (Method::GET, ["v1", "calls", id]) => calls::get(cx, id).await,
        (Method::POST, ["v1", "calls", id, "resume"]) => calls::resume(cx, id, req).await,
        (Method::POST, ["v1", "calls", id, "cancel"]) => calls::cancel(cx, id).await,
        (Method::POST, ["v1", "runs", run, "resume"]) => calls::resume_run(cx, run, req).await,
        (Method::GET, ["v1", "runs", run, "stream"]) => calls::stream_run(cx, run, &req),
        (Method::GET, ["v1", "approvals"]) => approvals::list(cx).await,
        (Method::GET, ["v1", "approvals", id]) => approvals::get(cx, id).await,
        (Method::POST, ["v1", "approvals", id, verb @ ("approve" | "decline")]) => {
            approvals::decide(cx, id, verb, req).await
        }
        (Method::POST, ["v1", "runs", run, verb @ ("approve" | "decline")]) => {
            approvals::decide_run(cx, run, verb, req).await
        }
        (Method::GET, ["v1", "events"]) => approvals::events(cx),
        (Method::GET, ["v1", "policy"]) => admin::policy(cx),
        (Method::POST, ["v1", "policy", "evaluate"]) => admin::evaluate_policy(cx, req).await,
        (Method::POST, ["v1", "policy", "reload"]) => admin::reload(cx),
        (Method::GET, ["v1", "webhooks"]) => admin::webhooks(cx).await,
        (Method::POST, ["v1", "webhooks", id, "enable"]) => admin::enable_webhook(cx, id).await,
        (Method::POST, ["v1", "webhooks", id, "test"]) => admin::test_webhook(cx, id).await,
        (Method::GET, ["v1", "audit"]) => admin::audit(cx).await,
        (Method::GET, ["v1", "audit", "export"]) => admin::export(cx).await,
        (Method::POST, ["v1", "audit", "prune"]) => admin::prune(cx, req).await,
        _ if is_known_path(&segments) => Err(ApiError::new(
            Code::RouteMethodNotAllowed,
            "this route does not take that method",
        )),
        _ => Err(ApiError::new(
            Code::RouteNotFound,
            format!("no route `{path}`"),
        )),
    }
}

/// The routes that take no token: liveness, readiness, metrics, and `/` and `/favicon.ico`
/// for browsers.
fn open_route(gw: &Gateway, method: &Method, segments: &[&str]) -> Option<Response<Body>> {
    match (method, segments) {
        // The banner's URL, opened in a browser: the approvers' inbox is where a person goes.
        (&Method::GET, [""]) => {
            let mut r = Response::new(full(
                "airlock: approvers sign in at /inbox/; the JSON API is under /v1 (with a token)\n",
            ));
            *r.status_mut() = StatusCode::SEE_OTHER;
            r.headers_mut().insert(
                hyper::header::LOCATION,
                hyper::header::HeaderValue::from_static("/inbox/"),
            );
            Some(r)
        }
        // Browsers ask for it on every page; there is none, and that needs no token.
        (&Method::GET, ["favicon.ico"]) => {
            let mut r = Response::new(full(""));
            *r.status_mut() = StatusCode::NO_CONTENT;
            Some(r)
        }
        // RFC 9728: where an OAuth client learns which issuers' tokens `/mcp` takes (DESIGN
        // §16). Without issuers there is nothing to discover.
        (&Method::GET, [".well-known", "oauth-protected-resource", rest @ ..])
            if !gw.auth.issuers.is_empty() && matches!(rest, [] | ["mcp"]) =>
        {
            let mut r = json_response(
                StatusCode::OK,
                &crate::identity::challenge::metadata(&gw.auth.issuers),
            );
            r.headers_mut().insert(
                hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN,
                hyper::header::HeaderValue::from_static("*"),
            );
            Some(r)
        }
        (&Method::GET, ["healthz"]) => {
            Some(json_response(StatusCode::OK, &json!({"status": "ok"})))
        }
        (&Method::GET, ["readyz"]) => Some(if gw.is_ready() {
            json_response(
                StatusCode::OK,
                &json!({"status": "ready", "policy_version": gw.policy.load().version()}),
            )
        } else {
            ApiError::new(
                Code::StoreUnavailable,
                "not ready: the store is unavailable or no policy has loaded",
            )
            .into_response()
        }),
        (&Method::GET, ["metrics"]) => {
            let mut r = Response::new(full(gw.metrics.render()));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            Some(r)
        }
        _ => None,
    }
}

/// `?wait=` in seconds, at most `max_hold`.
fn wait(gw: &Gateway, query: &str) -> Duration {
    Duration::from_secs(
        query_param(query, "wait")
            .and_then(|w| w.parse().ok())
            .unwrap_or(0),
    )
    .min(gw.config.max_hold)
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

fn optional_string(v: &Value, key: &str) -> Result<Option<String>, ApiError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::new(
            Code::RequestInvalidField,
            format!("`{key}` must be a string"),
        )),
    }
}

fn is_known_path(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["v1", "calls"]
            | ["v1", "calls", _]
            | ["v1", "calls", _, "resume" | "cancel"]
            | ["v1", "approvals"]
            | ["v1", "approvals", _]
            | ["v1", "approvals", _, "approve" | "decline"]
            | ["v1", "runs", _, "approve" | "decline" | "resume" | "stream"]
            | ["v1", "events"]
            | ["v1", "webhooks"]
            | ["v1", "webhooks", _, "enable" | "test"]
            | ["v1", "policy"]
            | ["v1", "policy", "evaluate" | "reload"]
            | ["v1", "audit"]
            | ["v1", "audit", "prune" | "export"]
            | ["healthz" | "readyz" | "metrics"]
    )
}
