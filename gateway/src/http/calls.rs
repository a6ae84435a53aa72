//! The call routes of the JSON API: making a call, reading its outcome, resuming and cancelling
//! it, a run's suspended calls and its event stream. Each hands the request to the pipeline and
//! turns the protocol-neutral [`Outcome`] into the API's JSON (DESIGN §6, §11).

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};

use crate::api;
use crate::auth::{require, Role};
use crate::body::{json_response, read_body, Body};
use crate::error::{ApiError, Code};
use crate::pipeline::{self, parse_prefer, Outcome};
use crate::state::Gateway;
use crate::urlencoded::decode_component;

use super::{body_json, query_param, wait, Ctx};

/// `POST /v1/calls`: a tool call, through the whole pipeline.
pub(super) async fn create(
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
    let prefer = req
        .headers()
        .get("prefer")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    require(role, &[Role::Agent, Role::Admin])?;
    let body = read_body(req.into_body(), limit).await?;
    let hold = parse_prefer(
        prefer.as_deref(),
        gw.config.hold_timeout,
        gw.config.max_hold,
    );
    // A big body is parsed, decided and recorded on the heavy lane, away from other callers.
    if gw.heavy.takes(body.len()) {
        let there = gw.clone();
        let work = Box::pin(async move {
            let outcome = pipeline::handle_call(&there, principal, &body, hold).await;
            outcome.map(|o| outcome_response(&there, o))
        });
        return gw.heavy.run(work).await?;
    }
    pipeline::handle_call(gw, principal, &body, hold)
        .await
        .map(|o| outcome_response(gw, o))
}

/// `GET /v1/calls?status=suspended`: suspended calls waiting for input (DESIGN §11).
pub(super) async fn list(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        query,
        ..
    } = cx;
    // Suspended calls waiting for input (DESIGN §11): approvers and admins see all,
    // an agent its own.
    match query_param(query, "status") {
        Some("suspended") => {}
        _ => {
            return Err(ApiError::new(
                Code::RequestInvalidField,
                "list calls with `status=suspended` (the only listing there is)",
            ))
        }
    }
    let calls = gw.store_op(|s| s.suspended_calls(1000)).await?;
    let calls = calls
        .iter()
        .filter(|c| role != Role::Agent || c.requester.id == principal.id)
        .filter_map(pipeline::Suspended::of)
        .map(|v| suspended(gw, v))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &api::SuspendedCalls { calls },
    ))
}

/// `GET /v1/calls/{id}`: a call's outcome, waiting up to `wait` seconds for it.
pub(super) async fn get(cx: Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        query,
        ..
    } = cx;
    require(role, &[Role::Agent, Role::Admin])?;
    pipeline::call_outcome(gw, &principal, id, wait(gw, query)?, false)
        .await
        .map(|o| outcome_response(gw, o))
}

/// `POST /v1/calls/{id}/resume`.
pub(super) async fn resume(
    cx: Ctx<'_>,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        query,
        limit,
    } = cx;
    let body: api::ResumeRequest = api::parse(body_json(req, limit).await?)?;
    // With `resume_data`: a suspended call continues (the requester, approvers and
    // admins may); without: the call's outcome (the requester).
    if let Some(data) = body.resume_data {
        return pipeline::suspend::resume(
            gw,
            &principal,
            id,
            data,
            pipeline::suspend::IfRefused::StaysSuspended,
        )
        .await
        .map(|o| outcome_response(gw, o));
    }
    require(role, &[Role::Agent, Role::Admin])?;
    pipeline::call_outcome(gw, &principal, id, wait(gw, query)?, true)
        .await
        .map(|o| outcome_response(gw, o))
}

/// `POST /v1/runs/{run_id}/resume`: the suspended call of a run (or of one of its tool calls).
pub(super) async fn resume_run(
    cx: Ctx<'_>,
    run_id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        limit,
        ..
    } = cx;
    let body: api::RunResumeRequest = api::parse(body_json(req, limit).await?)?;
    let tool_call_id = body.tool_call_id;
    let data = body.resume_data.ok_or_else(|| {
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

/// `GET /v1/runs/{run_id}/stream`: the run's events, after `Last-Event-ID`.
pub(super) fn stream_run(
    cx: Ctx<'_>,
    run_id: &str,
    req: &Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let Ctx { gw, principal, .. } = cx;
    let run_id = decode_component(run_id);
    let last = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim().parse::<airlock_storage::Cursor>().map_err(|_| {
                ApiError::new(
                    Code::RequestInvalidHeader,
                    "`Last-Event-ID` must be an event id from this stream",
                )
            })
        })
        .transpose()?
        .unwrap_or_default();
    Ok(crate::runs::stream(gw, principal, run_id, last))
}

/// `POST /v1/calls/{id}/cancel`.
pub(super) async fn cancel(cx: Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let Ctx {
        gw,
        principal,
        role,
        ..
    } = cx;
    require(role, &[Role::Agent, Role::Admin])?;
    let call = pipeline::cancel(gw, &principal, id).await?;
    let cancelled = api::CallCancelled {
        call_id: call.call_id,
        status: api::IsCancelled::Is,
    };
    Ok(json_response(StatusCode::OK, &cancelled))
}

/// A call's outcome as the API answers it: 200 with the backend's answer, or 202 with the
/// approval or the resume data to wait for.
fn outcome_response(gw: &Gateway, outcome: Outcome) -> Response<Body> {
    match outcome {
        Outcome::Completed(c) => json_response(StatusCode::OK, &api::CallCompleted::of(c)),
        Outcome::Pending(p) => {
            let link = crate::approvals::inbox_link(&gw.config, &p.approval_id);
            let waiting = api::CallWaiting::Pending(api::CallPending::of(p, link));
            json_response(StatusCode::ACCEPTED, &waiting)
        }
        Outcome::Suspended(v) => json_response(
            StatusCode::ACCEPTED,
            &api::CallWaiting::Suspended(suspended(gw, v)),
        ),
    }
}

/// A suspended call as the API shows it.
fn suspended(gw: &Gateway, v: pipeline::Suspended) -> api::CallSuspended {
    let link = crate::approvals::resume_link(&gw.config, &v.call_id);
    api::CallSuspended::of(v, link)
}
