//! `GET /v1/tools` and `GET /v1/tools/{name}`: the MCP upstreams' tools with their pin state,
//! for approvers and admins, and the list for agents too, less what the policy denies the agent
//! outright ([`crate::visible`]); `POST /v1/tools/{name}/review` (admins) opens a review of a
//! tool's current definition. The pins are [`crate::pins`]'.

use hyper::{Response, StatusCode};

use super::Ctx;
use crate::api;
use crate::auth::{require, Role};
use crate::body::{json_response, Body};
use crate::error::{ApiError, Code};

/// `GET /v1/tools`: every tool, with its upstream, pin state and fingerprints; to an agent,
/// those it may call.
pub(super) fn list(cx: Ctx<'_>) -> Result<Response<Body>, ApiError> {
    require(cx.role, &[Role::Agent, Role::Approver, Role::Admin])?;
    let mut tools = api::Tool::all(cx.gw, false);
    if cx.role == Role::Agent {
        let items: Vec<(&str, &str)> = tools.iter().map(|t| ("", t.name.as_str())).collect();
        let hidden = cx.gw.visible.hidden(
            &cx.gw.policy.load(),
            &crate::pipeline::decide::principal_json(&cx.principal),
            airlock_policy::RequestKind::Tool,
            &items,
        );
        tools.retain(|t| !hidden.contains(&t.name));
    }
    Ok(json_response(StatusCode::OK, &crate::api::Tools { tools }))
}

/// `GET /v1/tools/{name}`: one tool (by the name clients see), with the definition listed
/// and the one pinned.
pub(super) fn get(cx: Ctx<'_>, name: &str) -> Result<Response<Body>, ApiError> {
    require(cx.role, &[Role::Approver, Role::Admin])?;
    let name = crate::urlencoded::decode_percent(name);
    api::Tool::all(cx.gw, true)
        .into_iter()
        .find(|t| t.name == name)
        .map(|t| json_response(StatusCode::OK, &t))
        .ok_or_else(|| {
            ApiError::new(
                Code::ToolUnknown,
                format!("no MCP upstream lists a tool `{name}`"),
            )
        })
}

/// `POST /v1/tools/{name}/review` (admin): a review of the tool's current definition.
pub(super) async fn review(cx: Ctx<'_>, name: &str) -> Result<Response<Body>, ApiError> {
    require(cx.role, &[Role::Admin])?;
    let name = crate::urlencoded::decode_percent(name);
    let review = crate::pins::reopen(cx.gw, &name).await?;
    Ok(json_response(
        StatusCode::OK,
        &crate::api::Approval::of(&review),
    ))
}
