//! The approval state machine: creating an approval with its call, an approver's verdict
//! (who may decide, quorum over distinct approvers, edits), and listing approvals by index.

use serde_json::{json, Map, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_APPROVAL, EXPIRE_GRANT};
use crate::model::{
    scope_key, Approval, ApprovalDecision, ApprovalKind, ApprovalStatus, CallRecord, CallStatus,
    Grant, GrantChoice, Millis, Principal,
};
use crate::writer::Tx;
use crate::Store;

use super::approval_rows::{put_new_approval, set_status_index};
use super::outbox::{stage_deliveries, NewDelivery};
use super::{
    create_call, get, load_call, put, run_id, IDX_ALL, IDX_PRINCIPAL, IDX_RUN, IDX_STATUS, IDX_TOOL,
};

/// An approver's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// `edit` carries edited canonical args and their fingerprint, already checked by policy.
    Approve {
        reason: Option<String>,
        edit: Option<(Value, String)>,
    },
    Decline {
        reason: String,
    },
}

/// Filters for listing approvals; all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovalFilter {
    pub status: Option<ApprovalStatus>,
    pub tool: Option<String>,
    pub run_id: Option<String>,
    pub principal: Option<String>,
}

/// Who may decide `a` (the store checks it again in the transaction that decides; front ends
/// ask it first only to say no early): approvers and admins, never the requester. Where `a` names groups, an
/// approval counts toward its quorum only from a principal in one of them, admins included:
/// an admin outside them may decline (or cancel), and its approve is refused with the groups
/// named; an approver outside them decides nothing. A tool definition's review is the
/// exception: admins always review it.
pub fn check_decider(a: &Approval, by: &Principal, approving: bool) -> Result<(), StoreError> {
    if by.id == a.requester.id {
        return Err(StoreError::SelfApproval);
    }
    let in_groups = a.approvers.is_empty() || by.groups.iter().any(|g| a.approvers.contains(g));
    // Admins always review a tool's definition (DESIGN §20, §23): `reviewers` adds approver
    // groups, it never takes admins away.
    let review = a.kind == ApprovalKind::ToolDefinition;
    let groups = a
        .approvers
        .iter()
        .map(|g| format!("`{g}`"))
        .collect::<Vec<_>>()
        .join(", ");
    match by.role.as_str() {
        "admin" if approving && !in_groups && !review => {
            return Err(StoreError::Forbidden(format!(
                "`{}` is an admin in none of the approver groups ({groups}): only their members' approvals count toward the quorum; an admin may decline",
                by.id
            )))
        }
        "admin" => {}
        "approver" if !in_groups && review => {
            return Err(StoreError::Forbidden(format!(
                "`{}` is not a reviewer of this tool's definition: its upstream's `reviewers` are the groups {groups}, and admins",
                by.id
            )))
        }
        "approver" if !in_groups => {
            return Err(StoreError::Forbidden(format!(
                "`{}` is in none of the approver groups ({groups}) this approval names",
                by.id
            )))
        }
        "approver" => {}
        other => {
            return Err(StoreError::Forbidden(format!(
                "the `{other}` role cannot decide approvals"
            )))
        }
    }
    Ok(())
}

/// The quorum is reached: the call takes the approved args, and the grant is made, part by
/// part the narrowest the counted approvers chose, bound to the fingerprint approved.
fn quorum_reached(
    tx: &mut Tx<'_>,
    a: &mut Approval,
    call: &mut CallRecord,
    now: Millis,
) -> Result<(), StoreError> {
    a.status = ApprovalStatus::Approved;
    call.status = CallStatus::Approved;
    call.args = a.effective_args().clone();
    call.fingerprint = a.effective_fingerprint().to_owned();
    call.edited = a.edited_fingerprint.is_some();
    let fp = a.effective_fingerprint().to_owned();
    let (call_id, requester) = (a.call_id.clone(), a.requester.id.clone());
    let run = run_id(&a.context).map(str::to_owned);
    a.grant = a.grant.chosen(
        a.decisions
            .iter()
            .filter(|d| d.counts_for(&fp))
            .map(|d| d.grant.as_ref()),
        |scope| scope_key(scope, &call_id, run.as_deref(), &requester),
    );
    // INVARIANT: the approved call itself is the first use, reserved for it: it
    // may start until the grant's ttl runs out. The grant holds only the uses
    // left for later identical calls, so none of them can take the approved
    // call's turn.
    let expires_at = now.saturating_add(a.grant.ttl_ms);
    call.run_by = Some(expires_at);
    if a.grant.uses > 1 {
        let grant = Grant {
            fingerprint: call.fingerprint.clone(),
            scope_key: a.grant.scope_key.clone(),
            approval_id: a.id.clone(),
            uses_left: a.grant.uses - 1,
            expires_at,
        };
        let gk = keys::grant_key(&grant.fingerprint, &grant.scope_key);
        put(tx, Ks::Grants, &gk, &grant)?;
        tx.put(
            Ks::Expiry,
            keys::expiry_key(grant.expires_at, EXPIRE_GRANT, &gk),
            Vec::new(),
        );
    }
    Ok(())
}

/// Whether `by` may decide `a` now, in the order of refusals [`Store::decide`] gives; the
/// grant an approve chose, when it is within the rule's maxima (a decline chooses none).
fn decidable(
    a: &Approval,
    by: &Principal,
    verdict: &Verdict,
    grant: Option<GrantChoice>,
    now: Millis,
) -> Result<Option<GrantChoice>, StoreError> {
    let approving = matches!(verdict, Verdict::Approve { .. });
    check_decider(a, by, approving)?;
    if a.decisions.iter().any(|d| d.by == by.id) {
        return Err(StoreError::AlreadyDecided(by.id.clone()));
    }
    if a.status != ApprovalStatus::Pending {
        return Err(StoreError::NotPending(a.status.as_str()));
    }
    if now >= a.expires_at {
        return Err(StoreError::NotPending("expired"));
    }
    let grant = grant.filter(|_| approving);
    if let Some(why) = grant.as_ref().and_then(|g| a.grant.too_wide(g)) {
        return Err(StoreError::GrantTooWide(why));
    }
    if a.kind == ApprovalKind::ToolDefinition && grant.is_some() {
        return Err(StoreError::GrantTooWide(
            "a tool definition's review grants nothing to choose".into(),
        ));
    }
    Ok(grant)
}

/// What an `approval.decided` record says beside the call's fields.
fn decided_fields(
    f: &mut Map<String, Value>,
    a: &Approval,
    by: &Principal,
    decision: &str,
    reason: Option<&str>,
) {
    f.insert("approval_id".into(), Value::from(a.id.clone()));
    f.insert("by".into(), Value::from(by.id.clone()));
    f.insert("auth".into(), by.auth_record());
    if let Some(via) = by.auth.as_ref().and_then(|a| a.get("via")) {
        // A decision made in Slack names it beside the principal (DESIGN §22).
        f.insert("via".into(), via.clone());
    }
    f.insert("decision".into(), Value::from(decision));
    f.insert("reason".into(), json!(reason));
    f.insert("status".into(), Value::from(a.status.as_str()));
    f.insert("approvals".into(), Value::from(a.approvals_counted()));
    f.insert("quorum".into(), Value::from(a.quorum));
    if a.edited_fingerprint.is_some() {
        f.insert("edited".into(), Value::from(true));
    }
}

impl Store {
    /// Holds a call for approval: the call record, the approval, its indexes and expiry entry,
    /// and the `call.decided` and `approval.requested` audit records, in one batch.
    pub fn create_approval(
        &self,
        call: CallRecord,
        approval: Approval,
        explanation: Map<String, Value>,
    ) -> Result<Approval, StoreError> {
        self.create_approval_notifying(call, approval, explanation, Vec::new())
    }

    /// [`Store::create_approval`], with webhook deliveries announcing it put in the outbox in
    /// the same batch: the approval and its notifications are durable together.
    pub fn create_approval_notifying(
        &self,
        mut call: CallRecord,
        approval: Approval,
        explanation: Map<String, Value>,
        deliveries: Vec<NewDelivery>,
    ) -> Result<Approval, StoreError> {
        let redact_ptrs = self.redact.clone();
        self.writer.submit(move |tx| {
            let now = call.created_at;
            stage_deliveries(tx, deliveries, now)?;
            if approval.status != ApprovalStatus::Pending || approval.call_id != call.call_id {
                return Err(StoreError::Corrupt(
                    "a new approval must be pending and name its call".into(),
                ));
            }
            call.status = CallStatus::PendingApproval;
            call.approval_id = Some(approval.id.clone());
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("decision".into(), Value::from(call.decision.clone()));
            f.extend(explanation);
            tx.audit(call.created_at, Kind::CallDecided, f);
            let mut f = Self::call_fields(&redact_ptrs, &call);
            f.insert("approval_id".into(), Value::from(approval.id.clone()));
            f.insert("approvers".into(), json!(approval.approvers));
            f.insert("quorum".into(), Value::from(approval.quorum));
            f.insert("expires_at".into(), Value::from(approval.expires_at));
            tx.audit(call.created_at, Kind::ApprovalRequested, f);
            create_call(tx, &call)?;
            put_new_approval(tx, &approval)?;
            Ok(approval)
        })
    }

    /// An approver decides. Refusals, in this order: `approval.not_found`,
    /// `approval.forbidden` (not an approver or admin, or outside the approval's groups),
    /// `approval.self_approval`, `approval.already_decided`, `approval.not_pending` (also for
    /// a pending approval already past its expiry: silence never approves).
    pub fn decide(
        &self,
        approval_id: &str,
        by: &Principal,
        verdict: Verdict,
        now: Millis,
    ) -> Result<Approval, StoreError> {
        self.decide_granting(approval_id, by, verdict, None, now)
    }

    /// [`Store::decide`], where an approve may choose the grant within the rule's maxima
    /// (DESIGN §22): beyond them is `approval.grant_too_wide`, and nothing is decided. The
    /// grant made when the quorum is reached is, part by part, the narrowest the counted
    /// approvers chose (one who chose nothing chose the rule's own terms).
    pub fn decide_granting(
        &self,
        approval_id: &str,
        by: &Principal,
        verdict: Verdict,
        grant: Option<GrantChoice>,
        now: Millis,
    ) -> Result<Approval, StoreError> {
        let redact_ptrs = self.redact.clone();
        let approval_id = approval_id.to_owned();
        let by = by.clone();
        self.writer.submit(move |tx| {
            let mut a: Approval = get(tx, Ks::Approvals, approval_id.as_bytes())?
                .ok_or_else(|| StoreError::ApprovalNotFound(approval_id.clone()))?;
            let grant = decidable(&a, &by, &verdict, grant, now)?;
            let old_status = a.status;
            if a.kind == ApprovalKind::ToolDefinition {
                return decide_review(tx, a, &by, &verdict, now);
            }
            let mut call = load_call(tx, &a.call_id)?
                .ok_or_else(|| StoreError::CallNotFound(a.call_id.clone()))?;
            let (decision, reason) = match &verdict {
                Verdict::Approve { reason, edit } => {
                    if let Some((args, fingerprint)) = edit {
                        a.edited_args = Some(args.clone());
                        a.edited_fingerprint = Some(fingerprint.clone());
                    }
                    ("approve", reason.clone())
                }
                Verdict::Decline { reason } => ("decline", Some(reason.clone())),
            };
            a.decisions.push(ApprovalDecision {
                by: by.id.clone(),
                decision: decision.into(),
                reason: reason.clone(),
                at: now,
                fingerprint: a.effective_fingerprint().to_owned(),
                auth: Some(by.auth_record()),
                grant,
                groups: Some(by.groups.clone()),
                voided: None,
            });
            if decision == "decline" {
                a.status = ApprovalStatus::Declined;
                call.status = CallStatus::Declined;
                call.reason = reason.clone();
            } else if a.approvals_counted() >= a.quorum as usize {
                quorum_reached(tx, &mut a, &mut call, now)?;
            }
            let mut f = Self::call_fields(&redact_ptrs, &call);
            decided_fields(&mut f, &a, &by, decision, reason.as_deref());
            tx.audit(now, Kind::ApprovalDecided, f);
            if a.status != old_status {
                a.decided_at = Some(now);
                set_status_index(tx, &a, old_status)?;
                tx.delete(
                    Ks::Expiry,
                    keys::expiry_key(a.expires_at, EXPIRE_APPROVAL, a.id.as_bytes()),
                );
                call.updated_at = now;
                put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
            }
            put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
            Ok(a)
        })
    }

    /// Lists approvals newest first. `cursor` is the last id of the previous page.
    pub fn list_approvals(
        &self,
        filter: &ApprovalFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Approval>, Option<String>), StoreError> {
        self.shared.check()?;
        let (field, value) = if let Some(r) = &filter.run_id {
            (IDX_RUN, r.as_str())
        } else if let Some(t) = &filter.tool {
            (IDX_TOOL, t.as_str())
        } else if let Some(p) = &filter.principal {
            (IDX_PRINCIPAL, p.as_str())
        } else if let Some(s) = filter.status {
            (IDX_STATUS, s.as_str())
        } else {
            (IDX_ALL, "")
        };
        let prefix = keys::index_prefix(field, value);
        let end = match cursor {
            Some(c) => keys::index_key(field, value, c),
            None => {
                let mut e = prefix.clone();
                e.push(0xff);
                e
            }
        };
        let mut out = Vec::new();
        for entry in self
            .shared
            .backend
            .iter(Ks::ApprovalIndex, prefix.clone(), Some(end), true)
        {
            let (key, _) = entry?;
            let id = String::from_utf8_lossy(&key[prefix.len()..]).into_owned();
            let Some(a) = self.approval(&id)? else {
                continue;
            };
            let keep = filter.status.is_none_or(|s| a.status == s)
                && filter.tool.as_deref().is_none_or(|t| a.tool == t)
                && filter
                    .run_id
                    .as_deref()
                    .is_none_or(|r| run_id(&a.context) == Some(r))
                && filter
                    .principal
                    .as_deref()
                    .is_none_or(|p| a.requester.id == p);
            if keep {
                out.push(a);
                if out.len() == limit {
                    break;
                }
            }
        }
        let next = (out.len() == limit)
            .then(|| out.last().map(|a| a.id.clone()))
            .flatten();
        Ok((out, next))
    }
}

/// A verdict on a tool definition's review (DESIGN §20): no call, no edit, no grant; one
/// approval from a reviewer pins the definition, one decline keeps the tool refused
/// ([`super::pins::review_decided`]).
fn decide_review(
    tx: &mut Tx<'_>,
    mut a: Approval,
    by: &Principal,
    verdict: &Verdict,
    now: Millis,
) -> Result<Approval, StoreError> {
    let (decision, reason) = match verdict {
        Verdict::Approve { edit: Some(_), .. } => {
            return Err(StoreError::Forbidden(
                "a tool definition's review is approved as it is: it cannot be edited".into(),
            ))
        }
        Verdict::Approve { reason, .. } => ("approve", reason.clone()),
        Verdict::Decline { reason } => ("decline", Some(reason.clone())),
    };
    a.decisions.push(ApprovalDecision {
        by: by.id.clone(),
        decision: decision.into(),
        reason: reason.clone(),
        at: now,
        fingerprint: a.fingerprint.clone(),
        auth: Some(by.auth_record()),
        grant: None,
        groups: Some(by.groups.clone()),
        voided: None,
    });
    let old = a.status;
    a.status = if decision == "decline" {
        ApprovalStatus::Declined
    } else if a.approvals_counted() >= a.quorum as usize {
        ApprovalStatus::Approved
    } else {
        ApprovalStatus::Pending
    };
    let mut f = super::fields(
        json!({"approval_id": a.id, "kind": a.kind.as_str(), "tool": a.tool,
        "fingerprint": a.fingerprint, "by": by.id, "auth": by.auth_record(),
        "decision": decision, "reason": reason, "status": a.status.as_str(),
        "approvals": a.approvals_counted(), "quorum": a.quorum}),
    );
    if let Some(via) = by.auth.as_ref().and_then(|a| a.get("via")) {
        f.insert("via".into(), via.clone());
    }
    tx.audit(now, Kind::ApprovalDecided, f);
    if a.status != old {
        a.decided_at = Some(now);
        set_status_index(tx, &a, old)?;
        tx.delete(
            Ks::Expiry,
            keys::expiry_key(a.expires_at, EXPIRE_APPROVAL, a.id.as_bytes()),
        );
        super::pins::review_decided(tx, &a, &by.id, now)?;
    }
    put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
    Ok(a)
}
