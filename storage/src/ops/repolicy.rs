//! A reloaded policy applied to a pending approval (DESIGN §5): a call it denies is declined
//! with its call denied; stricter settings apply at once, looser ones never. The comparison is
//! made here, inside the transaction that writes the approval, so a decision or another
//! gateway's reload in between is never overwritten by a looser one.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::audit::Kind;
use crate::error::StoreError;
use crate::keys::{self, Ks, EXPIRE_APPROVAL};
use crate::model::{
    Approval, ApprovalDecision, ApprovalKind, ApprovalStatus, CallStatus, GrantTerms, Millis,
};
use crate::writer::Tx;
use crate::Store;

use super::approval_rows::set_status_index;
use super::{fields, get, load_call, put};

/// Who a decline by a reloaded policy is recorded as (an issuer principal would be
/// `issuer:subject`; no issuer is called `airlock`).
pub const POLICY_DECIDER: &str = "airlock:policy";

/// What the policy now in force says of a pending approval's call.
#[derive(Debug, Clone, PartialEq)]
pub enum Repolicy {
    /// It denies the call: the approval is declined and the call denied, with `reason`.
    Deny {
        reason: String,
        rules: Vec<String>,
        policy_version: String,
    },
    /// It still requires approval, with these settings; only the stricter parts apply.
    Tighten {
        quorum: u32,
        /// Approver groups; empty means any approver.
        approvers: BTreeSet<String>,
        /// `created_at` plus the new approval ttl.
        expires_at: Millis,
        grant: GrantTerms,
        policy_version: String,
    },
}

/// How narrow a grant scope is: `call` < `run` < `principal`.
fn scope_rank(scope: &str) -> u8 {
    match scope {
        "call" => 0,
        "run" => 1,
        _ => 2,
    }
}

/// `a` with the stricter parts of the new settings; the names of what changed.
fn tighten(
    a: &mut Approval,
    quorum: u32,
    approvers: BTreeSet<String>,
    expires_at: Millis,
    grant: GrantTerms,
) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if quorum > a.quorum {
        a.quorum = quorum;
        changed.push("quorum");
    }
    // Fewer groups: the new ones are a part of the old (any approver, when the old named none).
    let fewer = !approvers.is_empty()
        && approvers != a.approvers
        && (a.approvers.is_empty() || approvers.is_subset(&a.approvers));
    if fewer {
        a.approvers = approvers;
        changed.push("approvers");
        // An approval given by someone in none of the new groups no longer counts: the quorum
        // is of the groups the policy names now. One whose decider's groups were not kept
        // (written before they were) cannot be shown to be in them, and stops counting too.
        let why = format!(
            "a policy reload narrowed the approver groups to {}",
            a.approvers.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        for d in &mut a.decisions {
            let outside = match &d.groups {
                Some(groups) => !groups.iter().any(|g| a.approvers.contains(g)),
                None => true,
            };
            if d.decision == "approve" && d.voided.is_none() && outside {
                d.voided = Some(why.clone());
            }
        }
    }
    if expires_at < a.expires_at {
        a.expires_at = expires_at;
        changed.push("expires_at");
    }
    if grant.uses < a.grant.uses {
        a.grant.uses = grant.uses;
        changed.push("grant.uses");
    }
    if grant.ttl_ms < a.grant.ttl_ms {
        a.grant.ttl_ms = grant.ttl_ms;
        changed.push("grant.ttl");
    }
    if scope_rank(&grant.scope) < scope_rank(&a.grant.scope) {
        a.grant.scope = grant.scope;
        a.grant.scope_key = grant.scope_key;
        changed.push("grant.scope");
    }
    changed
}

impl Store {
    /// Applies a reloaded policy's word to the pending call approval `approval_id`. Returns
    /// the approval when it changed; `None` when it is no longer pending, is not a call's, or
    /// nothing in the new settings is stricter. Audited: `approval.decided` by
    /// [`POLICY_DECIDER`] for a denied call, `approval.tightened` with what changed.
    pub fn repolicy_approval(
        &self,
        approval_id: &str,
        change: Repolicy,
        now: Millis,
    ) -> Result<Option<Approval>, StoreError> {
        let redact_ptrs = self.redact.clone();
        let approval_id = approval_id.to_owned();
        self.writer.submit(move |tx| {
            let Some(mut a): Option<Approval> = get(tx, Ks::Approvals, approval_id.as_bytes())?
            else {
                return Ok(None);
            };
            if a.status != ApprovalStatus::Pending || a.kind != ApprovalKind::Call {
                return Ok(None);
            }
            let old_expiry = a.expires_at;
            match change {
                Repolicy::Deny {
                    reason,
                    rules,
                    policy_version,
                } => deny(tx, &redact_ptrs, &mut a, reason, rules, policy_version, now)?,
                Repolicy::Tighten {
                    quorum,
                    approvers,
                    expires_at,
                    grant,
                    policy_version,
                } => {
                    let counted: Vec<bool> = a.decisions.iter().map(|d| d.voided.is_none()).collect();
                    let changed = tighten(&mut a, quorum, approvers, expires_at, grant);
                    if changed.is_empty() {
                        return Ok(None);
                    }
                    if a.expires_at != old_expiry {
                        tx.delete(
                            Ks::Expiry,
                            keys::expiry_key(old_expiry, EXPIRE_APPROVAL, a.id.as_bytes()),
                        );
                        tx.put(
                            Ks::Expiry,
                            keys::expiry_key(a.expires_at, EXPIRE_APPROVAL, a.id.as_bytes()),
                            Vec::new(),
                        );
                    }
                    // The approvals this reload stopped counting.
                    let voided: Vec<&str> = a
                        .decisions
                        .iter()
                        .zip(counted)
                        .filter(|(d, counted)| *counted && d.voided.is_some())
                        .map(|(d, _)| d.by.as_str())
                        .collect();
                    let f = json!({
                        "approval_id": a.id, "call_id": a.call_id, "tool": a.tool,
                        "changed": changed, "voided": voided, "quorum": a.quorum, "approvers": a.approvers,
                        "expires_at": a.expires_at, "grant": a.grant,
                        "policy_version": policy_version,
                    });
                    tx.audit(now, Kind::ApprovalTightened, fields(f));
                }
            }
            put(tx, Ks::Approvals, a.id.as_bytes(), &a)?;
            Ok(Some(a))
        })
    }
}

/// A pending call approval the reloaded policy denies: declined by [`POLICY_DECIDER`] with the
/// rules' reason, its call denied, audited.
fn deny(
    tx: &mut Tx<'_>,
    redact_ptrs: &[String],
    a: &mut Approval,
    reason: String,
    rules: Vec<String>,
    policy_version: String,
    now: Millis,
) -> Result<(), StoreError> {
    let old_expiry = a.expires_at;
    let mut call =
        load_call(tx, &a.call_id)?.ok_or_else(|| StoreError::CallNotFound(a.call_id.clone()))?;
    a.decisions.push(ApprovalDecision {
        by: POLICY_DECIDER.into(),
        decision: "decline".into(),
        reason: Some(reason.clone()),
        at: now,
        fingerprint: a.effective_fingerprint().to_owned(),
        auth: None,
        grant: None,
        groups: None,
        voided: None,
    });
    a.status = ApprovalStatus::Declined;
    a.decided_at = Some(now);
    set_status_index(tx, a, ApprovalStatus::Pending)?;
    tx.delete(
        Ks::Expiry,
        keys::expiry_key(old_expiry, EXPIRE_APPROVAL, a.id.as_bytes()),
    );
    call.status = CallStatus::Denied;
    call.decision = "deny".into();
    call.reason = Some(reason.clone());
    call.updated_at = now;
    let mut f = Store::call_fields(redact_ptrs, &call);
    f.insert("approval_id".into(), Value::from(a.id.clone()));
    f.insert("by".into(), Value::from(POLICY_DECIDER));
    f.insert("decision".into(), Value::from("decline"));
    f.insert("reason".into(), Value::from(reason));
    f.insert("status".into(), Value::from(a.status.as_str()));
    f.insert("rules".into(), json!(rules));
    f.insert("policy_version".into(), Value::from(policy_version));
    // The code the held caller is answered with, so the record says why as the caller heard it.
    f.insert("code".into(), Value::from("policy.denied"));
    tx.audit(now, Kind::ApprovalDecided, f);
    put(tx, Ks::Calls, call.call_id.as_bytes(), &call)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(quorum: u32, groups: &[&str]) -> Approval {
        serde_json::from_value(json!({
            "id": "apr_1", "call_id": "c1", "tool": "t", "args": {}, "fingerprint": "f",
            "requester": {"id": "agent", "role": "agent"}, "context": {},
            "policy_version": "v", "explanation": {}, "rules": [], "approvers": groups,
            "quorum": quorum, "status": "pending", "decisions": [], "created_at": 0,
            "expires_at": 1000,
            "grant": {"uses": 5, "ttl_ms": 1000, "scope": "run", "scope_key": "run:agent:r"},
            "edited_args": null, "edited_fingerprint": null, "decided_at": null,
        }))
        .unwrap()
    }

    fn grant(uses: u32, ttl_ms: u64, scope: &str) -> GrantTerms {
        GrantTerms {
            uses,
            ttl_ms,
            scope: scope.into(),
            scope_key: format!("{scope}:key"),
            max: None,
        }
    }

    #[test]
    fn only_the_stricter_parts_apply() {
        let mut a = approval(1, &[]);
        let changed = tighten(
            &mut a,
            2,
            ["dba".to_string()].into(),
            500,
            grant(1, 100, "call"),
        );
        assert_eq!(
            changed,
            [
                "quorum",
                "approvers",
                "expires_at",
                "grant.uses",
                "grant.ttl",
                "grant.scope"
            ]
        );
        assert_eq!((a.quorum, a.expires_at, a.grant.uses), (2, 500, 1));
        assert_eq!(a.grant.scope_key, "call:key");

        // Looser in every way: nothing changes.
        let mut b = approval(2, &["dba"]);
        let before = b.clone();
        let looser = tighten(
            &mut b,
            1,
            BTreeSet::new(),
            5000,
            grant(9, 9000, "principal"),
        );
        assert!(looser.is_empty());
        assert_eq!(b, before);

        // Other groups, not fewer: kept.
        let mut c = approval(1, &["dba"]);
        assert!(tighten(
            &mut c,
            1,
            ["finance".to_string()].into(),
            1000,
            grant(5, 1000, "run")
        )
        .is_empty());
        // More groups: kept.
        assert!(tighten(
            &mut c,
            1,
            ["dba".to_string(), "finance".to_string()].into(),
            1000,
            grant(5, 1000, "run")
        )
        .is_empty());
        assert_eq!(c.approvers, ["dba".to_string()].into());
    }

    fn approve(by: &str, groups: Option<&[&str]>) -> ApprovalDecision {
        ApprovalDecision {
            by: by.into(),
            decision: "approve".into(),
            reason: None,
            at: 10,
            fingerprint: "f".into(),
            auth: None,
            grant: None,
            groups: groups.map(|g| g.iter().map(|s| s.to_string()).collect()),
            voided: None,
        }
    }

    #[test]
    fn narrowed_groups_void_the_approvals_given_from_outside_them() {
        let mut a = approval(3, &["dba", "finance"]);
        a.decisions = vec![
            approve("fin1", Some(&["finance"])),
            approve("dba1", Some(&["dba", "ops"])),
            // Recorded before a decider's groups were kept: cannot be shown to be in them.
            approve("old", None),
        ];
        let mut decline = approve("fin2", Some(&["finance"]));
        decline.decision = "decline".into();
        a.decisions.push(decline);
        assert_eq!(a.approvals_counted(), 3);

        let changed = tighten(
            &mut a,
            3,
            ["dba".to_string()].into(),
            1000,
            grant(5, 1000, "run"),
        );
        assert_eq!(changed, ["approvers"]);
        let voided: Vec<&str> = a
            .decisions
            .iter()
            .filter(|d| d.voided.is_some())
            .map(|d| d.by.as_str())
            .collect();
        assert_eq!(voided, ["fin1", "old"]);
        assert!(a.decisions[0].voided.as_deref().unwrap().contains("dba"));
        assert_eq!(a.approvals_counted(), 1, "dba1's approval still counts");

        // Groups that do not narrow (other groups, or more) void nothing.
        let mut b = approval(2, &["dba"]);
        b.decisions = vec![approve("dba1", Some(&["dba"])), approve("ops", Some(&[]))];
        tighten(
            &mut b,
            2,
            ["finance".to_string()].into(),
            1000,
            grant(5, 1000, "run"),
        );
        assert!(b.decisions.iter().all(|d| d.voided.is_none()));
    }
}
