//! Builders shared by the store tests.
#![allow(dead_code)]

use std::collections::BTreeSet;

use airlock_storage::{Approval, ApprovalStatus, CallRecord, CallStatus, GrantTerms, Principal};
use serde_json::{json, Map, Value};

pub fn agent(id: &str) -> Principal {
    Principal {
        id: id.into(),
        role: "agent".into(),
        groups: vec![],
    }
}

pub fn approver(id: &str, groups: &[&str]) -> Principal {
    Principal {
        id: id.into(),
        role: "approver".into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

pub fn admin(id: &str) -> Principal {
    Principal {
        id: id.into(),
        role: "admin".into(),
        groups: vec![],
    }
}

pub fn call(
    call_id: &str,
    fingerprint: &str,
    requester: &Principal,
    decision: &str,
    now: u64,
) -> CallRecord {
    CallRecord {
        call_id: call_id.into(),
        tool: "payments.refund".into(),
        args: json!({"amount": 900, "password": "hunter2"}),
        fingerprint: fingerprint.into(),
        requester: requester.clone(),
        context: json!({"run_id": "run-1"}),
        decision: decision.into(),
        status: if decision == "allow" {
            CallStatus::Allowed
        } else if decision == "deny" {
            CallStatus::Denied
        } else {
            CallStatus::PendingApproval
        },
        approval_id: None,
        reason: None,
        edited: false,
        run_by: None,
        outcome: None,
        suspension: None,
        created_at: now,
        updated_at: now,
    }
}

pub struct Held {
    pub call: CallRecord,
    pub approval: Approval,
}

/// A call held for approval by `groups` with `quorum`, expiring `ttl_ms` after `now`.
#[allow(clippy::too_many_arguments)]
pub fn held(
    call_id: &str,
    fingerprint: &str,
    requester: &Principal,
    groups: &[&str],
    quorum: u32,
    uses: u32,
    now: u64,
    ttl_ms: u64,
) -> Held {
    let c = call(call_id, fingerprint, requester, "require_approval", now);
    let approval = Approval {
        id: airlock_storage::new_id("apr"),
        call_id: call_id.into(),
        tool: c.tool.clone(),
        args: c.args.clone(),
        fingerprint: fingerprint.into(),
        requester: requester.clone(),
        context: c.context.clone(),
        policy_version: "sha256:00".into(),
        explanation: json!({"rules": ["large-refund"]}),
        rules: vec!["large-refund".into()],
        approvers: groups
            .iter()
            .map(|g| g.to_string())
            .collect::<BTreeSet<_>>(),
        quorum,
        status: ApprovalStatus::Pending,
        decisions: vec![],
        created_at: now,
        expires_at: now + ttl_ms,
        grant: GrantTerms {
            uses,
            ttl_ms: 600_000,
            scope: "run".into(),
            scope_key: "run:run-1".into(),
        },
        edited_args: None,
        edited_fingerprint: None,
        decided_at: None,
    };
    Held { call: c, approval }
}

pub fn no_fields() -> Map<String, Value> {
    Map::new()
}
