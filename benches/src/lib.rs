//! Shared builders for the benches in `benches/`; see the README for the commands and figures.

use std::collections::BTreeSet;

use airlock_storage::{Approval, ApprovalStatus, CallRecord, CallStatus, GrantTerms, Principal};
use serde_json::json;

pub fn principal(id: &str, role: &str) -> Principal {
    Principal {
        id: id.into(),
        role: role.into(),
        groups: vec![],
    }
}

/// A held call and its approval, as the gateway would create them.
pub fn held(call_id: &str, fingerprint: &str, now: u64) -> (CallRecord, Approval) {
    let requester = principal("agent-1", "agent");
    let args = json!({"amount": 900, "currency": "EUR", "customer": "cus_1", "order": call_id});
    let call = CallRecord {
        call_id: call_id.into(),
        tool: "payments.refund".into(),
        args: args.clone(),
        fingerprint: fingerprint.into(),
        requester: requester.clone(),
        context: json!({"run_id": "run-1", "agent_id": "support-bot"}),
        decision: "require_approval".into(),
        status: CallStatus::PendingApproval,
        approval_id: None,
        reason: None,
        edited: false,
        run_by: None,
        outcome: None,
        suspension: None,
        created_at: now,
        updated_at: now,
    };
    let approval = Approval {
        id: airlock_storage::new_id("apr"),
        call_id: call_id.into(),
        tool: call.tool.clone(),
        args,
        fingerprint: fingerprint.into(),
        requester,
        context: call.context.clone(),
        policy_version: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
            .into(),
        explanation: json!({"rules": ["approve-medium"], "messages": []}),
        rules: vec!["approve-medium".into()],
        approvers: BTreeSet::from(["finance".to_owned()]),
        quorum: 1,
        status: ApprovalStatus::Pending,
        decisions: vec![],
        created_at: now,
        expires_at: now + 900_000,
        grant: GrantTerms {
            uses: 1,
            ttl_ms: 600_000,
            scope: "call".into(),
            scope_key: format!("call:{call_id}"),
        },
        edited_args: None,
        edited_fingerprint: None,
        decided_at: None,
    };
    (call, approval)
}
