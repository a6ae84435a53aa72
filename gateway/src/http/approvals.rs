//! The approver routes of the JSON API: listing and reading approvals, deciding one or every
//! pending approval of a run, and the approvers' event stream (DESIGN §6).

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};

use airlock_storage::{ApprovalFilter, ApprovalStatus};

use crate::approvals::approval_json;
use crate::auth::{require, Role};
use crate::body::{json_response, Body, BodyLimits};
use crate::error::{ApiError, Code};
use crate::pipeline;
use crate::state::Gateway;
use crate::urlencoded::decode_component;

use super::{body_json, only_fields, optional_string, query_int, query_param, Ctx};

/// `GET /v1/approvals`: filtered by status, tool, run and principal, newest first, by page.
pub(super) async fn list(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw, role, query, ..
    } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    let status = match query_param(query, "status").filter(|s| !s.is_empty()) {
        Some(s) => Some(ApprovalStatus::parse(s).ok_or_else(|| {
            ApiError::new(
                Code::RequestInvalidField,
                format!("unknown status `{s}`; the statuses are pending, approved, declined, expired and cancelled (leave `status` out for all)"),
            )
        })?),
        None => None,
    };
    let text = |k: &str| {
        query_param(query, k)
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
    let n = query_int(query, "limit")?.unwrap_or(50).clamp(1, 500) as usize;
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

/// `GET /v1/approvals/{id}`.
pub(super) async fn get(cx: Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    let id = id.to_string();
    let a = gw
        .store_op(move |s| s.approval(&id))
        .await?
        .ok_or_else(|| ApiError::new(Code::ApprovalNotFound, "no such approval"))?;
    Ok(json_response(StatusCode::OK, &approval_json(&a)))
}

/// `POST /v1/approvals/{id}/approve|decline`.
pub(super) async fn decide(
    cx: Ctx<'_>,
    id: &str,
    approve: bool,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        limit,
        ..
    } = cx;
    let fields: &[&str] = if approve {
        &["reason", "args", "grant"]
    } else {
        &["reason"]
    };
    let (body, reason) = verdict(role, approve, fields, req, limit).await?;
    let edit = if approve {
        body.get("args").cloned()
    } else {
        None
    };
    let grant = body
        .get("grant")
        .filter(|_| approve)
        .map(crate::grants::choice)
        .transpose()?;
    let a = pipeline::decide_granting(gw, id, &principal, approve, reason, edit, grant).await?;
    Ok(json_response(StatusCode::OK, &approval_json(&a)))
}

/// `POST /v1/runs/{run_id}/approve|decline`: every pending approval of a run (or of one tool
/// call in it), each decided on its own.
pub(super) async fn decide_run(
    cx: Ctx<'_>,
    run_id: &str,
    approve: bool,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        limit,
        ..
    } = cx;
    let (body, reason) = verdict(role, approve, &["reason", "tool_call_id"], req, limit).await?;
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
            tool_call_id
                .as_deref()
                .is_none_or(|t| a.context.get("tool_call_id").and_then(Value::as_str) == Some(t))
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

/// `GET /v1/events`.
pub(super) fn events(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    Ok(event_stream(gw))
}

/// The body of an approve or decline: who may send it (the agent role is refused as
/// `approval.forbidden`, as DESIGN §6 orders refusals), and a decline's required reason.
async fn verdict(
    role: Role,
    approve: bool,
    fields: &[&str],
    req: Request<Incoming>,
    limit: BodyLimits,
) -> Result<(Value, Option<String>), ApiError> {
    if role == Role::Agent {
        return Err(ApiError::new(
            Code::ApprovalForbidden,
            "the agent role cannot decide approvals: use an approver's or an admin's token",
        ));
    }
    let body = body_json(req, limit).await?;
    only_fields(&body, fields)?;
    let reason = optional_string(&body, "reason")?;
    if !approve && reason.as_deref().is_none_or(str::is_empty) {
        return Err(ApiError::new(
            Code::RequestMissingReason,
            "a decline needs a `reason`: the agent reads it",
        ));
    }
    Ok((body, reason))
}

/// `GET /v1/events`: server-sent events of approvals and completed calls.
fn event_stream(gw: &Gateway) -> Response<Body> {
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

/// `GET /v1/grants`: the live grants (uses left, not expired), with their approvals' tool,
/// args and scope.
pub(super) async fn grants(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    let list = crate::grants::live(gw).await?;
    Ok(json_response(StatusCode::OK, &json!({"grants": list})))
}

/// `DELETE /v1/grants/{id}`: an approver of the grant's rule's groups (any approver where
/// it names none) or an admin revokes it; its uses left are gone at once.
pub(super) async fn revoke_grant(cx: Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        ..
    } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    let revoked = crate::grants::revoke(gw, &principal, id).await?;
    Ok(json_response(StatusCode::OK, &json!({"revoked": revoked})))
}
