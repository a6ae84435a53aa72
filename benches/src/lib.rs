//! Shared builders for the benches in `benches/`; see the README for the commands and figures.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Instant;

use airlock_storage::{
    Approval, ApprovalStatus, Begin, CallRecord, CallStatus, GrantTerms, Principal, Store, Verdict,
};
use serde_json::{json, Map};

/// One approval cycle: create (held call + approval), approve, begin execution (spends the
/// grant); each step durable before the next.
pub fn cycle(store: &Store, id: &str) {
    let (call, approval) = held(id, &format!("sha256:{id}"), 1000);
    let a = store.create_approval(call, approval, Map::new()).unwrap();
    store
        .decide(
            &a.id,
            &principal("bob", "admin"),
            Verdict::Approve {
                reason: None,
                edit: None,
            },
            1100,
        )
        .unwrap();
    match store.begin_execution(id, 1200).unwrap() {
        Begin::Run(_) => {}
        other => panic!("the approved call must run: {other:?}"),
    }
}

/// Approval cycles per second with `threads` threads, each doing `per_thread` cycles.
pub fn cycle_rate(store: &Store, threads: usize, per_thread: usize, tag: &str) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let store = store.clone();
            s.spawn(move || {
                for i in 0..per_thread {
                    cycle(&store, &format!("{tag}-{t}-{i}"));
                }
            });
        }
    });
    (threads * per_thread) as f64 / start.elapsed().as_secs_f64()
}

pub fn principal(id: &str, role: &str) -> Principal {
    Principal {
        id: id.into(),
        role: role.into(),
        groups: vec![],
        ..Default::default()
    }
}

/// A held call and its approval, as the gateway would create them.
pub fn held(call_id: &str, fingerprint: &str, now: u64) -> (CallRecord, Approval) {
    let requester = principal("agent-1", "agent");
    let args = json!({"amount": 900, "currency": "EUR", "customer": "cus_1", "order": call_id});
    let call = CallRecord {
        call_id: call_id.into(),
        tool: "payments.refund".into(),
        request: None,
        args: args.clone(),
        fingerprint: fingerprint.into(),
        requester: requester.clone(),
        context: json!({"run_id": "run-1", "agent_id": "support-bot"}),
        decision: "require_approval".into(),
        status: CallStatus::PendingApproval,
        approval_id: None,
        reason: None,
        code: None,
        edited: false,
        granted: false,
        run_by: None,
        outcome: None,
        suspension: None,
        created_at: now,
        updated_at: now,
    };
    let approval = Approval {
        kind: airlock_storage::ApprovalKind::Call,
        id: airlock_storage::new_id("apr"),
        call_id: call_id.into(),
        tool: call.tool.clone(),
        request: None,
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
            max: None,
        },
        edited_args: None,
        edited_fingerprint: None,
        decided_at: None,
    };
    (call, approval)
}
