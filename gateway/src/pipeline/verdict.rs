//! The verdict stage: an approver's word on an approval (DESIGN §5). An edit is
//! fingerprinted and evaluated again as its requester's call first (policy must not deny it);
//! then the store applies the verdict (who may decide, quorum, separation of duties) and the
//! event stream and webhooks are told. The held call wakes from the store's notice of the
//! call it changed.

use std::sync::Arc;

use airlock_policy::{DecisionKind, ToolCall};
use airlock_storage::{Approval, ApprovalKind, ApprovalStatus, GrantChoice, Principal, Verdict};
use serde_json::{json, Value};

use crate::clock::now_ms;
use crate::error::{ApiError, Code};
use crate::state::Gateway;

/// An approver's verdict on one approval, with an edit checked by policy first; tells the
/// event stream. The held call wakes from the store's notice of the call it changed.
pub async fn decide(
    gw: &Arc<Gateway>,
    approval_id: &str,
    by: &Principal,
    approve: bool,
    reason: Option<String>,
    edited_args: Option<Value>,
) -> Result<Approval, ApiError> {
    decide_granting(gw, approval_id, by, approve, reason, edited_args, None).await
}

/// The pending approvals a run decision reaches (DESIGN §23): those of run `run_id` (narrowed
/// to one tool call by `tool_call_id`) of one principal. A run is a principal's own: when the
/// run id is used by several principals and the decider named none, `409 call.ambiguous`
/// lists them, so one agent can never slip its calls into another's run decision. None is
/// `404 approval.not_found`. Up to 500.
pub async fn run_pending(
    gw: &Arc<Gateway>,
    run_id: &str,
    principal: Option<&str>,
    tool_call_id: Option<&str>,
) -> Result<Vec<Approval>, ApiError> {
    let filter = airlock_storage::ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        run_id: Some(run_id.to_owned()),
        ..Default::default()
    };
    let (pending, _) = gw
        .store_op(move |s| s.list_approvals(&filter, None, 500))
        .await?;
    let targets: Vec<Approval> = pending
        .into_iter()
        .filter(|a| {
            tool_call_id
                .is_none_or(|t| a.context.get("tool_call_id").and_then(Value::as_str) == Some(t))
        })
        .filter(|a| principal.is_none_or(|p| a.requester.id == p))
        .collect();
    let mut principals: Vec<&str> = targets.iter().map(|a| a.requester.id.as_str()).collect();
    principals.sort_unstable();
    principals.dedup();
    if principals.len() > 1 {
        return Err(ApiError::new(
            Code::CallAmbiguous,
            format!(
                "run `{run_id}` has pending calls of {} principals ({}): a run is one \
                 principal's; name it with `principal`",
                principals.len(),
                principals.join(", ")
            ),
        )
        .with_details(json!({"run_id": run_id, "principals": principals})));
    }
    if targets.is_empty() {
        return Err(ApiError::new(
            Code::ApprovalNotFound,
            "no pending approval matches this run",
        ));
    }
    Ok(targets)
}

/// Declines every pending call approval of `requester` with `reason`, as `by` (an admin; the
/// caller checks): an agent flooding its approvers is stopped in one step (DESIGN §23). Each
/// is decided on its own, as one decline would be; each approval with what it got.
pub async fn decline_all(
    gw: &Arc<Gateway>,
    by: &Principal,
    requester: &str,
    reason: &str,
) -> Result<Vec<(Approval, Result<Approval, ApiError>)>, ApiError> {
    let mut out = Vec::new();
    loop {
        let filter = airlock_storage::ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            principal: Some(requester.to_owned()),
            ..Default::default()
        };
        let (pending, _) = gw
            .store_op(move |s| s.list_approvals(&filter, None, 500))
            .await?;
        let pending: Vec<Approval> = pending
            .into_iter()
            .filter(|a| a.kind == ApprovalKind::Call)
            .filter(|a| !out.iter().any(|(o, _): &(Approval, _)| o.id == a.id))
            .collect();
        if pending.is_empty() {
            return Ok(out);
        }
        for a in pending {
            let decided = decide(gw, &a.id, by, false, Some(reason.to_owned()), None).await;
            out.push((a, decided));
        }
    }
}

/// An approver's edit of a held call's args: the edited call, as its requester's call, must
/// not be denied by policy. The args and fingerprint that are approved instead.
async fn edit(
    gw: &Arc<Gateway>,
    approval_id: &str,
    args: Value,
) -> Result<(Value, String), ApiError> {
    let id = approval_id.to_owned();
    let a = gw
        .store_op(move |s| s.approval(&id))
        .await?
        .ok_or_else(|| {
            ApiError::new(
                Code::ApprovalNotFound,
                format!("no approval `{approval_id}`"),
            )
        })?;
    if a.kind == ApprovalKind::ToolDefinition {
        return Err(ApiError::new(
            Code::RequestInvalidField,
            "`args`: a tool definition's review is approved as it is; it has no args to edit",
        ));
    }
    if let Some(r) = &a.request {
        return Err(ApiError::new(
            Code::RequestInvalidField,
            format!(
                "`args`: a held {} is approved as it was asked; its params cannot be edited",
                r.kind.as_str()
            ),
        ));
    }
    let edited = ToolCall::new(&a.tool, args, Some(a.context.clone()))?;
    let (d, _) = super::decide::policy(gw, &edited, &a.requester, None, now_ms()).await;
    if d.decision == DecisionKind::Deny {
        return Err(
            ApiError::new(Code::ApprovalEditDenied, "policy denies the edited call")
                .with_details(json!({"rules": d.rules, "messages": d.messages})),
        );
    }
    Ok((edited.args, edited.fingerprint.to_string()))
}

/// [`decide`], where an approve may choose the grant within the rule's maxima (DESIGN §22).
pub async fn decide_granting(
    gw: &Arc<Gateway>,
    approval_id: &str,
    by: &Principal,
    approve: bool,
    reason: Option<String>,
    edited_args: Option<Value>,
    grant: Option<GrantChoice>,
) -> Result<Approval, ApiError> {
    let verdict = if approve {
        let edit = match edited_args {
            None => None,
            Some(args) => Some(edit(gw, approval_id, args).await?),
        };
        Verdict::Approve { reason, edit }
    } else {
        Verdict::Decline {
            reason: reason.unwrap_or_default(),
        }
    };
    let (id, who, now) = (approval_id.to_owned(), by.clone(), now_ms());
    let a = gw
        .store_op(move |s| s.decide_granting(&id, &who, verdict, grant, now))
        .await?;
    if a.kind == ApprovalKind::ToolDefinition {
        // A tool definition's review: its pin, as the decision left it, is kept here at once.
        crate::pins::reviewed(gw, &a).await;
    } else if a.status != ApprovalStatus::Pending {
        // An approval may have made a grant, which has a deadline of its own.
        gw.deadlines.notify_one();
        gw.approval_closed(&a.requester.id);
        gw.metrics
            .approvals
            .approval_wait_seconds
            .observe(now.saturating_sub(a.created_at) as f64 / 1000.0);
        if a.status == ApprovalStatus::Declined {
            gw.metrics.call("require_approval", "declined");
        }
    }
    tracing::info!(
        approval_id = %a.id,
        call_id = %a.call_id,
        tool = %a.tool,
        by = %by.id,
        decision = if approve { "approve" } else { "decline" },
        status = a.status.as_str(),
        "approval decided"
    );
    let event = gw.approval_event(&a);
    gw.announce(airlock_storage::Kind::ApprovalDecided, event)
        .await;
    Ok(a)
}
