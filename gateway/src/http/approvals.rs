//! The approver routes of the JSON API: listing and reading approvals, deciding one or every
//! pending approval of a run, and the approvers' event stream (DESIGN §6).

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use airlock_storage::{Approval, ApprovalFilter, ApprovalStatus};

use crate::api;
use crate::auth::{require, Role};
use crate::body::{json_response, Body};
use crate::error::{ApiError, Code};
use crate::pipeline;
use crate::state::Gateway;
use crate::urlencoded::decode_component;

use super::{body_json, query_int, query_param, Ctx};

/// `GET /v1/approvals`: filtered by status, tool, run and principal, newest first, by page.
pub(super) async fn list(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw, role, query, ..
    } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    // An empty `status=` is no status: the document says the value is one of the enum's.
    let status = match query_param(query, "status") {
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
    let page = api::ApprovalPage {
        approvals: list.iter().map(api::Approval::of).collect(),
        next_cursor: next,
    };
    Ok(json_response(StatusCode::OK, &page))
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
    Ok(json_response(StatusCode::OK, &api::Approval::of(&a)))
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
    deciders_only(role)?;
    let body = body_json(req, limit).await?;
    let (reason, edit, grant) = if approve {
        let b: api::ApproveRequest = api::parse(body)?;
        let grant = b.grant.as_ref().map(crate::grants::choice).transpose()?;
        (b.reason, b.args, grant)
    } else {
        let b: api::DeclineRequest = api::parse(body)?;
        (Some(decline_reason(b.reason)?), None, None)
    };
    let a = pipeline::decide_granting(gw, id, &principal, approve, reason, edit, grant).await?;
    Ok(json_response(StatusCode::OK, &api::Approval::of(&a)))
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
    deciders_only(role)?;
    let body = body_json(req, limit).await?;
    let (reason, tool_call_id, requester) = if approve {
        let b: api::RunApproveRequest = api::parse(body)?;
        (b.reason, b.tool_call_id, b.principal)
    } else {
        let b: api::RunDeclineRequest = api::parse(body)?;
        (Some(decline_reason(b.reason)?), b.tool_call_id, b.principal)
    };
    let targets = pipeline::run_pending(
        gw,
        &decode_component(run_id),
        requester.as_deref(),
        tool_call_id.as_deref(),
    )
    .await?;
    let mut results = Vec::new();
    for a in targets {
        let decided = pipeline::decide(gw, &a.id, &principal, approve, reason.clone(), None).await;
        results.push(run_decision((a, decided)));
    }
    Ok(json_response(
        StatusCode::OK,
        &api::RunDecisions { results },
    ))
}

/// `POST /v1/approvals/decline` (admin): every pending approval of one principal declined
/// with the reason, each on its own.
pub(super) async fn decline_principal(
    cx: Ctx<'_>,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        limit,
        ..
    } = cx;
    require(role, &[Role::Admin])?;
    let b: api::DeclinePrincipalRequest = api::parse(body_json(req, limit).await?)?;
    if b.principal.is_empty() {
        return Err(ApiError::new(
            Code::RequestInvalidField,
            "`principal` must name the principal whose pending calls are declined",
        ));
    }
    let reason = decline_reason(b.reason)?;
    let results = pipeline::decline_all(gw, &principal, &b.principal, &reason).await?;
    Ok(json_response(
        StatusCode::OK,
        &api::RunDecisions {
            results: results.into_iter().map(run_decision).collect(),
        },
    ))
}

/// One approval's result in a decision of many.
fn run_decision((a, decided): (Approval, Result<Approval, ApiError>)) -> api::RunDecision {
    match decided {
        Ok(d) => api::RunDecision {
            approval_id: d.id,
            call_id: d.call_id,
            status: Some(d.status.as_str().to_owned()),
            error: None,
        },
        Err(e) => api::RunDecision {
            approval_id: a.id,
            call_id: a.call_id,
            status: None,
            error: Some(api::RunDecisionError {
                code: e.code,
                message: e.message,
            }),
        },
    }
}

/// `GET /v1/events`.
pub(super) fn events(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, role, .. } = cx;
    require(role, &[Role::Approver, Role::Admin])?;
    Ok(event_stream(gw))
}

/// The agent role cannot decide: refused as `approval.forbidden` before the body is read.
fn deciders_only(role: Role) -> Result<(), ApiError> {
    if role == Role::Agent {
        return Err(ApiError::new(
            Code::ApprovalForbidden,
            "the agent role cannot decide approvals: use an approver's or an admin's token",
        ));
    }
    Ok(())
}

/// A decline's reason: required and not empty, since the agent reads it.
fn decline_reason(reason: Option<String>) -> Result<String, ApiError> {
    reason.filter(|r| !r.is_empty()).ok_or_else(|| {
        ApiError::new(
            Code::RequestMissingReason,
            "a decline needs a `reason`: the agent reads it",
        )
    })
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
    let grants = crate::grants::live(gw)
        .await?
        .iter()
        .map(|(g, a)| api::Grant::of(g, a.as_ref()))
        .collect();
    Ok(json_response(StatusCode::OK, &api::Grants { grants }))
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
    let (g, a) = crate::grants::revoke(gw, &principal, id).await?;
    let revoked = api::Grant::of(&g, Some(&a));
    Ok(json_response(
        StatusCode::OK,
        &api::RevokedGrant { revoked },
    ))
}
