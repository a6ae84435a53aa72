//! A reload reaches what is pending: when the live policy set changes, every pending call
//! approval is evaluated again under the new set, with the inputs recorded when it was opened
//! (tool, canonical args as they would run, context, requester, classifier results, time).
//! A call the new set denies is declined and its held caller told `policy.denied`; stricter
//! approval settings (a larger quorum, fewer approver groups, a shorter ttl, a narrower grant)
//! apply at once; looser ones never do. The store applies a change only while the approval is
//! still pending, and only the parts that are stricter than what it holds, so gateways on one
//! database that each reload the same set agree.
//!
//! It does not touch tool-definition reviews (a policy does not decide them), decided
//! approvals, or grants already given.

use std::sync::Arc;

use airlock_policy::cases::fixed_classifiers;
use airlock_policy::{evaluate, Decision, DecisionKind, Input, PolicySet, ToolCall};
use airlock_storage::{
    Approval, ApprovalFilter, ApprovalKind, ApprovalStatus, GrantTerms, Kind, Repolicy,
};

use crate::clock::{now_ms, to_system_time};
use crate::pipeline::decide::{definition_of, principal_json};
use crate::pipeline::grant::scope_key;
use crate::state::Gateway;

/// Evaluates every pending call approval again under the policy now in force and applies what
/// it says. Errors are logged: an approval the store could not change keeps its settings, and
/// is still decided by people (nothing is approved by an error).
pub async fn pending(gw: &Arc<Gateway>) {
    let filter = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        ..Default::default()
    };
    let pending = match gw
        .store_op(move |s| s.list_approvals(&filter, None, usize::MAX))
        .await
    {
        Ok((list, _)) => list,
        Err(e) => {
            tracing::error!(
                code = e.code.as_str(),
                "cannot list pending approvals to apply the reloaded policy: {}",
                e.message
            );
            return;
        }
    };
    let policy = gw.policy.load_full();
    for a in pending.into_iter().filter(|a| a.kind == ApprovalKind::Call) {
        let Some(change) = judge(gw, &policy, &a) else {
            continue;
        };
        let (id, now) = (a.id.clone(), now_ms());
        match gw
            .store_op(move |s| s.repolicy_approval(&id, change, now))
            .await
        {
            Ok(Some(after)) if after.status == ApprovalStatus::Declined => {
                tracing::info!(approval_id = %after.id, policy_version = policy.version(), "a pending approval's call is denied by the reloaded policy");
                gw.approval_closed(&after.requester.id);
                gw.metrics.call("require_approval", "denied");
                let event = gw.approval_event(&after);
                gw.announce(Kind::ApprovalDecided, event).await;
            }
            Ok(Some(after)) => {
                tracing::info!(approval_id = %after.id, quorum = after.quorum, "the reloaded policy tightened a pending approval");
            }
            Ok(None) => {}
            Err(e) => tracing::error!(
                approval_id = %a.id,
                code = e.code.as_str(),
                "cannot apply the reloaded policy to a pending approval: {}",
                e.message
            ),
        }
    }
}

/// What `policy` says of the pending approval `a`: `None` when it allows the call or asks for
/// an approval no stricter than `a`'s (the store keeps only what is stricter).
fn judge(gw: &Gateway, policy: &PolicySet, a: &Approval) -> Option<Repolicy> {
    let call = match ToolCall::again(
        &a.tool,
        a.request.as_deref(),
        a.effective_args().clone(),
        Some(a.context.clone()),
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(approval_id = %a.id, "a pending approval's call does not parse again: {e}");
            return None;
        }
    };
    let classifiers = a
        .explanation
        .get("classifiers")
        .map(fixed_classifiers)
        .transpose()
        .unwrap_or_else(|e| {
            tracing::error!(approval_id = %a.id, "a pending approval's classifier results do not read: {e}");
            None
        })
        .unwrap_or_default();
    let principal = principal_json(&a.requester);
    let definition = if policy.reads("definition") {
        definition_of(gw, &a.tool)
    } else {
        None
    };
    let decision = evaluate(
        policy,
        &Input {
            tool: &call.tool,
            args: &call.args,
            context: &call.context,
            principal: &principal,
            fingerprint: call.fingerprint.as_str(),
            now: to_system_time(a.created_at),
            classifiers: &classifiers,
            resume: None,
            definition: definition.as_deref(),
            request: airlock_policy::Request::TOOL,
        },
    );
    word_of(a, &call, decision)
}

/// What a reloaded policy's decision on a pending approval's call means for the approval: a
/// deny declines it, an approval's settings may tighten it, anything else leaves it.
fn word_of(a: &Approval, call: &ToolCall, decision: Decision) -> Option<Repolicy> {
    let version = decision.policy_version.clone();
    match (decision.decision, decision.approval) {
        (DecisionKind::Deny, _) => {
            let said: Vec<&str> = decision
                .messages
                .iter()
                .map(|m| m.message.as_str())
                .collect();
            let reason = if said.is_empty() {
                format!("denied by the reloaded policy ({version})")
            } else {
                format!(
                    "denied by the reloaded policy ({version}): {}",
                    said.join("; ")
                )
            };
            Some(Repolicy::Deny {
                reason,
                rules: decision.rules,
                policy_version: version,
            })
        }
        (DecisionKind::RequireApproval, Some(s)) => {
            let scope = s.grant.scope;
            Some(Repolicy::Tighten {
                quorum: s.quorum,
                approvers: s.approvers,
                expires_at: a
                    .created_at
                    .saturating_add(s.approval_ttl.as_millis() as u64),
                grant: GrantTerms {
                    uses: s.grant.uses,
                    ttl_ms: s.grant.ttl.as_millis() as u64,
                    scope: format!("{scope:?}").to_lowercase(),
                    scope_key: scope_key(scope, &a.call_id, call, &a.requester),
                    max: Some(crate::grants::maxima(&s.grant)),
                },
                policy_version: version,
            })
        }
        _ => None,
    }
}
