//! The HTTP front end: the JSON API of DESIGN §6. Routing, who may use each route, and
//! translating requests into calls on [`crate::pipeline`], the store and the policy, and the
//! pipeline's outcomes back into JSON bodies. Every refusal leaves through
//! [`ApiError::into_response`] ([`body`]), the one place codes become statuses.

use std::sync::Arc;
use std::time::Duration;

use airlock_policy::cases::{decision_json, fixed_classifiers, EvalRequest};
use airlock_policy::{evaluate, json as strict_json, ToolCall};
use airlock_storage::{ApprovalFilter, ApprovalStatus};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};

use crate::approvals::approval_json;
use crate::auth::{require, Role};
use crate::body::{full, json_response, read_body, Body, BodyLimits};
use crate::clock::{now_ms, rfc3339, to_system_time};
use crate::error::{ApiError, Code};
use crate::pipeline::{self, admit, parse_prefer, Outcome};
use crate::serve::guards::CloseReason;
use crate::state::Gateway;
use crate::urlencoded::decode_component;

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

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// Parses a JSON request body strictly (duplicate keys, unsafe numbers, depth).
fn body_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    Ok(strict_json::parse(
        bytes,
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

    // Open routes.
    match (&method, segments.as_slice()) {
        (&Method::GET, ["healthz"]) => {
            return Ok(json_response(StatusCode::OK, &json!({"status": "ok"})))
        }
        (&Method::GET, ["readyz"]) => {
            return Ok(if gw.is_ready() {
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
            })
        }
        (&Method::GET, ["metrics"]) => {
            let mut r = Response::new(full(gw.metrics.render()));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return Ok(r);
        }
        _ => {}
    }

    let (principal, role) = admit::authenticate(gw, req.headers()).await?;
    let prefer = req
        .headers()
        .get("prefer")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let limit = BodyLimits {
        max_bytes: gw.config.max_body_bytes,
        timeout: gw.config.connections.body_timeout,
    };
    let wait = |q: &str| {
        Duration::from_secs(
            query_param(q, "wait")
                .and_then(|w| w.parse().ok())
                .unwrap_or(0),
        )
        .min(gw.config.max_hold)
    };

    match (method, segments.as_slice()) {
        (Method::POST, ["v1", "calls"]) => {
            require(role, &[Role::Agent, Role::Admin])?;
            let body = read_body(req.into_body(), limit).await?;
            let hold = parse_prefer(
                prefer.as_deref(),
                gw.config.hold_timeout,
                gw.config.max_hold,
            );
            pipeline::handle_call(gw, principal, &body, hold)
                .await
                .map(|o| outcome_response(gw, o))
        }
        (Method::GET, ["v1", "calls"]) => {
            // Suspended calls waiting for input (DESIGN §11): approvers and admins see all,
            // an agent its own.
            match query_param(&query, "status") {
                Some("suspended") => {}
                _ => {
                    return Err(ApiError::new(
                        Code::RequestInvalidField,
                        "list calls with `status=suspended` (the only listing there is)",
                    ))
                }
            }
            let calls = gw.store_op(|s| s.suspended_calls(1000)).await?;
            let shown: Vec<Value> = calls
                .iter()
                .filter(|c| role != Role::Agent || c.requester.id == principal.id)
                .filter_map(pipeline::Suspended::of)
                .map(|v| suspended_json(gw, &v))
                .collect();
            Ok(json_response(StatusCode::OK, &json!({"calls": shown})))
        }
        (Method::GET, ["v1", "calls", id]) => {
            require(role, &[Role::Agent, Role::Admin])?;
            pipeline::call_outcome(gw, &principal, id, wait(&query), false)
                .await
                .map(|o| outcome_response(gw, o))
        }
        (Method::POST, ["v1", "calls", id, "resume"]) => {
            let body = body_json(&read_body(req.into_body(), limit).await?)?;
            // With `resume_data`: a suspended call continues (the requester, approvers and
            // admins may); without: §6's resume, the call's outcome (the requester).
            if let Some(data) = resume_data(&body, &["resume_data"])? {
                return pipeline::suspend::resume(gw, &principal, id, data)
                    .await
                    .map(|o| outcome_response(gw, o));
            }
            require(role, &[Role::Agent, Role::Admin])?;
            pipeline::call_outcome(gw, &principal, id, wait(&query), true)
                .await
                .map(|o| outcome_response(gw, o))
        }
        (Method::POST, ["v1", "runs", run_id, "resume"]) => {
            let body = body_json(&read_body(req.into_body(), limit).await?)?;
            let tool_call_id = optional_string(&body, "tool_call_id")?;
            let data = resume_data(&body, &["resume_data", "tool_call_id"])?.ok_or_else(|| {
                ApiError::new(
                    Code::RequestMissingField,
                    "a run resume needs `resume_data`",
                )
            })?;
            let run_id = decode_component(run_id);
            pipeline::suspend::resume_run(gw, &principal, &run_id, tool_call_id.as_deref(), data)
                .await
                .map(|o| outcome_response(gw, o))
        }
        (Method::GET, ["v1", "runs", run_id, "stream"]) => {
            let run_id = decode_component(run_id);
            let last = req
                .headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        ApiError::new(
                            Code::RequestInvalidHeader,
                            "`Last-Event-ID` must be an event id from this stream (an integer)",
                        )
                    })
                })
                .transpose()?
                .unwrap_or(0);
            Ok(crate::runs::stream(gw, principal, run_id, last))
        }
        (Method::POST, ["v1", "calls", id, "cancel"]) => {
            require(role, &[Role::Agent, Role::Admin])?;
            let call = pipeline::cancel(gw, &principal, id).await?;
            Ok(json_response(
                StatusCode::OK,
                &json!({"call_id": call.call_id, "status": "cancelled"}),
            ))
        }

        (Method::GET, ["v1", "approvals"]) => {
            require(role, &[Role::Approver, Role::Admin])?;
            let status = match query_param(&query, "status").filter(|s| !s.is_empty()) {
                Some(s) => Some(ApprovalStatus::parse(s).ok_or_else(|| {
                    ApiError::new(
                        Code::RequestInvalidField,
                        format!("unknown status `{s}`; the statuses are pending, approved, declined, expired and cancelled (leave `status` out for all)"),
                    )
                })?),
                None => None,
            };
            let text = |k: &str| {
                query_param(&query, k)
                    .filter(|s| !s.is_empty())
                    .map(decode_component)
            };
            let filter = ApprovalFilter {
                status,
                tool: text("tool"),
                run_id: text("run_id"),
                principal: text("principal"),
            };
            let cursor = text("cursor");
            let n = query_param(&query, "limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(50usize)
                .clamp(1, 500);
            let (list, next) = gw
                .store_op(move |s| s.list_approvals(&filter, cursor.as_deref(), n))
                .await?;
            Ok(json_response(
                StatusCode::OK,
                &json!({
                    "approvals": list.iter().map(approval_json).collect::<Vec<_>>(),
                    "next_cursor": next,
                }),
            ))
        }
        (Method::GET, ["v1", "approvals", id]) => {
            require(role, &[Role::Approver, Role::Admin])?;
            let id = id.to_string();
            let a = gw
                .store_op(move |s| s.approval(&id))
                .await?
                .ok_or_else(|| ApiError::new(Code::ApprovalNotFound, "no such approval"))?;
            Ok(json_response(StatusCode::OK, &approval_json(&a)))
        }
        (Method::POST, ["v1", "approvals", id, verb @ ("approve" | "decline")]) => {
            let (body, approve, reason) = verdict(role, verb, req, limit).await?;
            let edit = if approve {
                body.get("args").cloned()
            } else {
                None
            };
            let a = pipeline::decide(gw, id, &principal, approve, reason, edit).await?;
            Ok(json_response(StatusCode::OK, &approval_json(&a)))
        }
        (Method::POST, ["v1", "runs", run_id, verb @ ("approve" | "decline")]) => {
            let (body, approve, reason) = verdict(role, verb, req, limit).await?;
            let tool_call_id = optional_string(&body, "tool_call_id")?;
            let filter = ApprovalFilter {
                status: Some(ApprovalStatus::Pending),
                run_id: Some(decode_component(run_id)),
                ..Default::default()
            };
            let (pending, _) = gw
                .store_op(move |s| s.list_approvals(&filter, None, 500))
                .await?;
            let targets: Vec<_> = pending
                .into_iter()
                .filter(|a| {
                    tool_call_id.as_deref().is_none_or(|t| {
                        a.context.get("tool_call_id").and_then(Value::as_str) == Some(t)
                    })
                })
                .collect();
            if targets.is_empty() {
                return Err(ApiError::new(
                    Code::ApprovalNotFound,
                    "no pending approval matches this run",
                ));
            }
            let mut results = Vec::new();
            for a in targets {
                match pipeline::decide(gw, &a.id, &principal, approve, reason.clone(), None).await {
                    Ok(a) => results.push(json!({"approval_id": a.id, "call_id": a.call_id, "status": a.status.as_str()})),
                    Err(e) => results.push(json!({"approval_id": a.id, "call_id": a.call_id, "error": {"code": e.code, "message": e.message}})),
                }
            }
            Ok(json_response(StatusCode::OK, &json!({"results": results})))
        }
        (Method::GET, ["v1", "events"]) => {
            require(role, &[Role::Approver, Role::Admin])?;
            Ok(event_stream(gw))
        }

        (Method::GET, ["v1", "policy"]) => {
            require(role, &[Role::Admin])?;
            let p = gw.policy.load();
            let rules: Vec<Value> = p.rules().iter().map(|r| json!({
                "id": r.id, "tools": r.tools.iter().map(|g| g.as_str()).collect::<Vec<_>>(), "when": r.when,
                "decision": r.decision, "message": r.message, "classifiers": r.classifiers,
                "location": format!("{}:{}:{}", r.location.file.display(), r.location.line, r.location.col),
            })).collect();
            Ok(json_response(
                StatusCode::OK,
                &json!({"version": p.version(), "sources": p.sources(), "rules": rules}),
            ))
        }
        (Method::POST, ["v1", "policy", "evaluate"]) => {
            require(role, &[Role::Admin])?;
            let body = body_json(&read_body(req.into_body(), limit).await?)?;
            let tool = body
                .get("tool")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let args = body.get("args").cloned().unwrap_or(Value::Null);
            let call = ToolCall::new(&tool, args, body.get("context").cloned())?;
            let principal = body
                .get("principal")
                .cloned()
                .unwrap_or_else(airlock_policy::cases::default_principal);
            let classifiers = match body.get("classifier") {
                Some(c) => fixed_classifiers(c)
                    .map_err(|e| ApiError::new(Code::RequestInvalidClassifier, e))?,
                None => Default::default(),
            };
            let request = EvalRequest {
                call,
                principal,
                classifiers,
                now: to_system_time(now_ms()),
                resume: body.get("resume").cloned().filter(|r| !r.is_null()),
            };
            let decision = evaluate(&gw.policy.load(), &request.input());
            Ok(json_response(
                StatusCode::OK,
                &decision_json(&decision, &request.call),
            ))
        }
        (Method::POST, ["v1", "policy", "reload"]) => {
            require(role, &[Role::Admin])?;
            match gw.reload("api") {
                Ok(version) => Ok(json_response(StatusCode::OK, &json!({"version": version}))),
                Err(errors) => Err(ApiError::of_crate(errors.code(), "the policy does not load; the current one stays in force".into()).with_details(json!({
                    "errors": errors.0.iter().map(|e| json!({"code": e.code, "file": e.file, "line": e.line, "col": e.col, "rule": e.rule, "message": e.message})).collect::<Vec<_>>(),
                }))),
            }
        }
        (Method::GET, ["v1", "webhooks"]) => {
            require(role, &[Role::Admin])?;
            let mut list = Vec::new();
            for h in &gw.webhooks.hooks {
                let id = h.id.clone();
                let disabled = gw.store_op(move |s| s.webhook_disabled(&id)).await?;
                list.push(json!({"id": h.id, "url": h.url, "events": h.events, "principal": h.principal, "disabled": disabled}));
            }
            Ok(json_response(StatusCode::OK, &json!({"webhooks": list})))
        }
        (Method::POST, ["v1", "webhooks", id, "enable"]) => {
            require(role, &[Role::Admin])?;
            webhook_exists(gw, id)?;
            let (id, now) = (id.to_string(), now_ms());
            let requeued = gw.store_op(move |s| s.enable_webhook(&id, now)).await?;
            gw.webhooks.wake.notify_one();
            Ok(json_response(
                StatusCode::OK,
                &json!({"enabled": true, "requeued": requeued}),
            ))
        }
        (Method::POST, ["v1", "webhooks", id, "test"]) => {
            require(role, &[Role::Admin])?;
            webhook_exists(gw, id)?;
            let delivery = airlock_storage::NewDelivery {
                webhook: id.to_string(),
                event: "webhook.test".into(),
                payload: crate::webhooks::payload(
                    "webhook.test",
                    &json!({"webhook": id, "message": "a test event from airlock"}),
                ),
            };
            let now = now_ms();
            let queued = gw
                .store_op(move |s| s.enqueue_deliveries(vec![delivery], now))
                .await?;
            gw.webhooks.wake.notify_one();
            Ok(json_response(
                StatusCode::ACCEPTED,
                &json!({"delivery_id": queued.first().map(|d| d.id.clone())}),
            ))
        }
        (Method::GET, ["v1", "audit", "export"]) => {
            require(role, &[Role::Admin])?;
            // The online `airlock audit export`: JSONL of the records after `after`; once it
            // is all written, the store notes how far the log is exported (what a prune may
            // drop).
            let after = query_param(&query, "after")
                .and_then(|a| a.parse().ok())
                .unwrap_or(0u64);
            let bytes = gw
                .store_op(move |s| {
                    let mut out = Vec::new();
                    s.export_audit(after, &mut out)?;
                    Ok(out)
                })
                .await?;
            let mut r = Response::new(full(bytes));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/x-ndjson"),
            );
            Ok(r)
        }
        (Method::POST, ["v1", "audit", "prune"]) => {
            require(role, &[Role::Admin])?;
            let body = body_json(&read_body(req.into_body(), limit).await?)?;
            let before = body.get("before").and_then(Value::as_u64).ok_or_else(|| {
                ApiError::new(
                    Code::RequestInvalidField,
                    "`before` must be a seq (an integer)",
                )
            })?;
            let now = now_ms();
            let (dropped, checkpoint) = gw.store_op(move |s| s.prune_audit(before, now)).await?;
            Ok(json_response(
                StatusCode::OK,
                &json!({"dropped": dropped, "checkpoint_seq": checkpoint}),
            ))
        }
        (Method::GET, ["v1", "audit"]) => {
            require(role, &[Role::Admin])?;
            let after = query_param(&query, "after")
                .and_then(|a| a.parse().ok())
                .unwrap_or(0u64);
            let n = query_param(&query, "limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(100usize)
                .clamp(1, 1000);
            let records = gw.store_op(move |s| s.audit_after(after, n)).await?;
            let next = records
                .last()
                .and_then(|r| r.get("seq"))
                .and_then(Value::as_u64);
            Ok(json_response(
                StatusCode::OK,
                &json!({"records": records, "next_after": next}),
            ))
        }
        (_, ["v1", ..]) | (_, ["healthz" | "readyz" | "metrics"]) if is_known_path(&segments) => {
            Err(ApiError::new(
                Code::RouteMethodNotAllowed,
                "this route does not take that method",
            ))
        }
        _ => Err(ApiError::new(
            Code::RouteNotFound,
            format!("no route `{path}`"),
        )),
    }
}

/// A call's outcome as the API answers it (DESIGN §6): 200 with the backend's answer, or 202
/// with the approval to wait for.
fn outcome_response(gw: &Gateway, outcome: Outcome) -> Response<Body> {
    match outcome {
        Outcome::Completed(c) => {
            let mut body = json!({
                "call_id": c.call_id,
                "status": "completed",
                "decision": c.decision,
                "fingerprint": c.fingerprint,
                "upstream_status": c.upstream_status,
                "result": c.result,
            });
            if let Some(args) = c.edited_args {
                body["edited"] = Value::Bool(true);
                body["args"] = args;
            }
            json_response(StatusCode::OK, &body)
        }
        Outcome::Pending(p) => json_response(
            StatusCode::ACCEPTED,
            &json!({
                "call_id": p.call_id,
                "status": "pending_approval",
                "approval": {
                    "id": p.approval_id,
                    "expires_at": rfc3339(p.expires_at),
                    "approvers": p.approvers,
                    "quorum": p.quorum,
                    "link": crate::approvals::inbox_link(&gw.config, &p.approval_id),
                },
            }),
        ),
        Outcome::Suspended(v) => json_response(StatusCode::ACCEPTED, &suspended_json(gw, &v)),
    }
}

/// A suspended call as the API shows it (DESIGN §11).
pub fn suspended_json(gw: &Gateway, v: &pipeline::Suspended) -> Value {
    json!({
        "call_id": v.call_id,
        "status": "suspended",
        "tool": v.tool,
        "tool_call_id": v.tool_call_id,
        "run_id": v.run_id,
        "suspend": {"payload": v.payload, "resume_schema": v.resume_schema},
        "expires_at": rfc3339(v.expires_at),
        "suspensions": v.count,
        "link": crate::approvals::resume_link(&gw.config, &v.call_id),
    })
}

/// The `resume_data` of a resume body, if it has one (`null` counts as data). A field the
/// route does not take is refused, so a misspelt `resume_data` is not read as no data.
fn resume_data(body: &Value, allowed: &[&str]) -> Result<Option<Value>, ApiError> {
    let Some(fields) = body.as_object() else {
        return Err(ApiError::new(
            Code::RequestInvalidJson,
            "the body must be a JSON object",
        ));
    };
    if let Some(k) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::new(
            Code::RequestUnknownField,
            format!(
                "unknown field `{k}`; this route takes {}",
                allowed.join(", ")
            ),
        ));
    }
    Ok(fields.get("resume_data").cloned())
}

/// The body of an approve or decline: who may send it (the agent role is refused as
/// `approval.forbidden`, as DESIGN §6 orders refusals), and a decline's required reason.
async fn verdict(
    role: Role,
    verb: &str,
    req: Request<Incoming>,
    limit: BodyLimits,
) -> Result<(Value, bool, Option<String>), ApiError> {
    if role == Role::Agent {
        return Err(ApiError::new(
            Code::ApprovalForbidden,
            "the agent role cannot decide approvals: use an approver's or an admin's token",
        ));
    }
    let body = body_json(&read_body(req.into_body(), limit).await?)?;
    let reason = optional_string(&body, "reason")?;
    let approve = verb == "approve";
    if !approve && reason.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::new(
            Code::RequestMissingReason,
            "a decline needs a `reason`: the agent reads it",
        ));
    }
    Ok((body, approve, reason))
}

fn webhook_exists(gw: &Gateway, id: &str) -> Result<(), ApiError> {
    if gw.webhooks.hooks.iter().any(|h| h.id == id) {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::WebhookNotFound,
            format!("no webhook `{id}` is configured"),
        ))
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
            | ["v1", "policy"]
            | ["v1", "policy", "evaluate" | "reload"]
            | ["v1", "audit"]
            | ["v1", "audit", "prune" | "export"]
            | ["healthz" | "readyz" | "metrics"]
    )
}

/// `GET /v1/events`: server-sent events of approvals and completed calls.
fn event_stream(gw: &Arc<Gateway>) -> Response<Body> {
    crate::body::event_stream(
        gw.events.subscribe(),
        gw.shutdown.clone(),
        |e| {
            Some(Bytes::from(format!(
                "event: {}\ndata: {}\n\n",
                e.kind, e.data
            )))
        },
        |n| Bytes::from(format!(": {n} events dropped, the client is too slow\n\n")),
    )
}
