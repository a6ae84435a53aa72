//! The store's behaviour, one capability at a time: who may decide, quorum, edits, grants,
//! at-most-once execution, expiry, listing, the outbox, the audit chain and reopening.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use airlock_storage::{
    ApprovalFilter, ApprovalStatus, Begin, CallOutcome, CallStatus, Durability, Kind, NewDelivery,
    Store, StoreOptions, Verdict,
};
use support::*;

fn open(place: &Place) -> Store {
    place
        .open(StoreOptions {
            redact: vec!["/password".into()],
            ..Default::default()
        })
        .unwrap()
}

fn approve() -> Verdict {
    Verdict::Approve {
        reason: None,
        edit: None,
    }
}

#[test]
fn refusals_come_in_the_documented_order() {
    let dir = Place::new();
    let store = open(&dir);
    let requester = approver("alice", &["finance"]);
    let h = held(
        "c1",
        "sha256:aa",
        &requester,
        &["finance"],
        2,
        1,
        1000,
        60_000,
    );
    let a = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();

    let code =
        |r: Result<_, airlock_storage::StoreError>| r.map(|_| "ok").unwrap_or_else(|e| e.code());
    assert_eq!(
        code(store.decide("nope", &approver("bob", &["finance"]), approve(), 2000)),
        "approval.not_found"
    );
    assert_eq!(
        code(store.decide(&a.id, &agent("bot"), approve(), 2000)),
        "approval.forbidden"
    );
    assert_eq!(
        code(store.decide(&a.id, &approver("eve", &["ops"]), approve(), 2000)),
        "approval.forbidden"
    );
    // The requester is an approver of the right group, but still cannot approve its own call.
    assert_eq!(
        code(store.decide(&a.id, &requester, approve(), 2000)),
        "approval.self_approval"
    );
    assert_eq!(
        code(store.decide(&a.id, &approver("bob", &["finance"]), approve(), 2000)),
        "ok"
    );
    assert_eq!(
        code(store.decide(&a.id, &approver("bob", &["finance"]), approve(), 2001)),
        "approval.already_decided"
    );
    // An admin outside the approval's groups counts for nothing toward its quorum.
    assert_eq!(
        code(store.decide(&a.id, &admin("root"), approve(), 2002)),
        "approval.forbidden"
    );
    assert_eq!(
        code(store.decide(&a.id, &approver("carol", &["finance"]), approve(), 2003)),
        "ok"
    );
    assert_eq!(
        code(store.decide(&a.id, &approver("dave", &["finance"]), approve(), 2004)),
        "approval.not_pending"
    );
    assert_eq!(
        store.approval(&a.id).unwrap().unwrap().status,
        ApprovalStatus::Approved
    );
}

#[test]
fn quorum_counts_distinct_approvers_and_one_decline_ends_it() {
    let dir = Place::new();
    let store = open(&dir);
    let h = held("c1", "sha256:aa", &agent("bot"), &[], 2, 1, 1000, 60_000);
    let a = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    let a = store
        .decide(&a.id, &approver("bob", &[]), approve(), 1100)
        .unwrap();
    assert_eq!(
        (a.status, a.approvals_counted()),
        (ApprovalStatus::Pending, 1)
    );
    let a = store
        .decide(&a.id, &approver("carol", &[]), approve(), 1200)
        .unwrap();
    assert_eq!(a.status, ApprovalStatus::Approved);
    assert_eq!(
        store.call("c1").unwrap().unwrap().status,
        CallStatus::Approved
    );

    let h = held("c2", "sha256:bb", &agent("bot"), &[], 2, 1, 1000, 60_000);
    let b = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    store
        .decide(&b.id, &approver("bob", &[]), approve(), 1100)
        .unwrap();
    let b = store
        .decide(
            &b.id,
            &approver("carol", &[]),
            Verdict::Decline {
                reason: "too much".into(),
            },
            1200,
        )
        .unwrap();
    assert_eq!(b.status, ApprovalStatus::Declined);
    let c2 = store.call("c2").unwrap().unwrap();
    assert_eq!(
        (c2.status, c2.reason.as_deref()),
        (CallStatus::Declined, Some("too much"))
    );
    assert!(store.grant("sha256:bb", "run:run-1").unwrap().is_none());
}

#[test]
fn an_edit_binds_the_grant_to_the_edited_fingerprint_and_resets_earlier_approvals() {
    let dir = Place::new();
    let store = open(&dir);
    let h = held("c1", "sha256:orig", &agent("bot"), &[], 2, 2, 1000, 60_000);
    let a = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    store
        .decide(&a.id, &approver("bob", &[]), approve(), 1100)
        .unwrap();
    let edit = Verdict::Approve {
        reason: Some("smaller".into()),
        edit: Some((serde_json::json!({"amount": 90}), "sha256:edit".into())),
    };
    let a = store
        .decide(&a.id, &approver("carol", &[]), edit, 1200)
        .unwrap();
    // Bob approved the original args; that does not count toward the edited ones.
    assert_eq!(
        (a.status, a.approvals_counted()),
        (ApprovalStatus::Pending, 1)
    );
    let a = store
        .decide(&a.id, &approver("dave", &[]), approve(), 1300)
        .unwrap();
    assert_eq!(a.status, ApprovalStatus::Approved);
    let call = store.call("c1").unwrap().unwrap();
    assert_eq!(
        (call.fingerprint.as_str(), &call.args),
        ("sha256:edit", &serde_json::json!({"amount": 90}))
    );
    assert!(call.edited);
    // Uses: 2. The edited call is the first; the grant for the one after it binds the
    // edited fingerprint.
    assert_eq!(
        store
            .grant("sha256:edit", "run:run-1")
            .unwrap()
            .unwrap()
            .uses_left,
        1
    );
    assert!(store.grant("sha256:orig", "run:run-1").unwrap().is_none());
}

#[test]
fn an_approved_call_runs_once_and_later_calls_spend_the_remaining_uses() {
    let dir = Place::new();
    let store = open(&dir);
    let h = held("c1", "sha256:aa", &agent("bot"), &[], 1, 2, 1000, 60_000);
    let a = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    assert!(matches!(
        store.begin_execution("c1", 1050).unwrap(),
        Begin::Pending(_)
    ));
    store
        .decide(&a.id, &approver("bob", &[]), approve(), 1100)
        .unwrap();
    assert!(matches!(
        store.begin_execution("c1", 1200).unwrap(),
        Begin::Run(_)
    ));
    assert!(matches!(
        store.begin_execution("c1", 1201).unwrap(),
        Begin::InProgress(_)
    ));
    let done = store
        .complete_call(
            "c1",
            CallOutcome {
                upstream_status: Some(200),
                result: Some(serde_json::json!({"ok": true})),
                error: None,
                message: None,
            },
            1300,
        )
        .unwrap();
    assert_eq!(done.status, CallStatus::Completed);
    match store.begin_execution("c1", 1400).unwrap() {
        Begin::Finished(c) => assert_eq!(c.outcome.unwrap().upstream_status, Some(200)),
        other => panic!("{other:?}"),
    }
    // Uses: 2. The approved call is the first; one identical call may follow, not two.
    assert_eq!(
        store
            .grant("sha256:aa", "run:run-1")
            .unwrap()
            .unwrap()
            .uses_left,
        1
    );
    let again = call("c2", "sha256:aa", &agent("bot"), "require_approval", 1500);
    assert!(store
        .call_with_grant(again, "run:run-1", no_fields(), false)
        .unwrap()
        .is_some());
    let third = call("c3", "sha256:aa", &agent("bot"), "require_approval", 1600);
    assert!(store
        .call_with_grant(third, "run:run-1", no_fields(), false)
        .unwrap()
        .is_none());
    assert!(
        store.call("c3").unwrap().is_none(),
        "a refused grant use writes nothing"
    );
    // Another scope key, or another fingerprint, never matches.
    let other = call("c4", "sha256:aa", &agent("bot"), "require_approval", 1600);
    assert!(store
        .call_with_grant(other, "run:run-2", no_fields(), false)
        .unwrap()
        .is_none());
}

#[test]
fn expiry_is_a_deny_and_an_expired_grant_is_never_spent() {
    let dir = Place::new();
    let store = open(&dir);
    let h = held("c1", "sha256:aa", &agent("bot"), &[], 1, 1, 1000, 5_000);
    let a = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    assert!(store.expire_due(5_999).unwrap().approvals.is_empty());
    // Past expiry but before the sweep, a decision is still refused.
    assert_eq!(
        store
            .decide(&a.id, &approver("bob", &[]), approve(), 6_000)
            .unwrap_err()
            .code(),
        "approval.not_pending"
    );
    let expired = store.expire_due(6_000).unwrap().approvals;
    assert_eq!(expired.len(), 1);
    assert_eq!(
        store.call("c1").unwrap().unwrap().status,
        CallStatus::Expired
    );
    assert_eq!(
        store
            .decide(&a.id, &approver("bob", &[]), approve(), 6_001)
            .unwrap_err()
            .code(),
        "approval.not_pending"
    );

    // A grant: ttl 600 s from the approval at 10_000.
    let h = held("c2", "sha256:bb", &agent("bot"), &[], 1, 3, 10_000, 5_000);
    let b = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    store
        .decide(&b.id, &approver("bob", &[]), approve(), 10_000)
        .unwrap();
    let late = call(
        "c3",
        "sha256:bb",
        &agent("bot"),
        "require_approval",
        610_000,
    );
    assert!(
        store
            .call_with_grant(late, "run:run-1", no_fields(), false)
            .unwrap()
            .is_none(),
        "expired but not yet swept"
    );
    store.expire_due(610_000).unwrap();
    assert!(store.grant("sha256:bb", "run:run-1").unwrap().is_none());
    // The approved call itself cannot run on an expired grant either.
    assert_eq!(
        store.begin_execution("c2", 610_001).unwrap_err().code(),
        "approval.expired"
    );
}

#[test]
fn cancel_is_for_the_requester_or_an_admin_and_only_before_execution() {
    let dir = Place::new();
    let store = open(&dir);
    let h = held("c1", "sha256:aa", &agent("bot"), &[], 1, 1, 1000, 60_000);
    let a = store
        .create_approval(h.call, h.approval, no_fields())
        .unwrap();
    assert_eq!(
        store
            .cancel("c1", &agent("other"), 1100)
            .unwrap_err()
            .code(),
        "approval.forbidden"
    );
    assert_eq!(
        store.cancel("c1", &agent("bot"), 1100).unwrap().status,
        CallStatus::Cancelled
    );
    assert_eq!(
        store.approval(&a.id).unwrap().unwrap().status,
        ApprovalStatus::Cancelled
    );
    assert_eq!(
        store
            .decide(&a.id, &approver("bob", &[]), approve(), 1200)
            .unwrap_err()
            .code(),
        "approval.not_pending"
    );
    assert_eq!(
        store.cancel("c1", &agent("bot"), 1300).unwrap_err().code(),
        "call.invalid_state"
    );
    assert_eq!(
        store.cancel("zz", &agent("bot"), 1300).unwrap_err().code(),
        "call.not_found"
    );
}

#[test]
fn listing_filters_newest_first_with_a_cursor() {
    let dir = Place::new();
    let store = open(&dir);
    let mut ids = Vec::new();
    for i in 0..7 {
        let requester = agent(if i % 2 == 0 { "even" } else { "odd" });
        let mut h = held(
            &format!("c{i}"),
            &format!("sha256:{i}"),
            &requester,
            &[],
            1,
            1,
            1000 + i,
            60_000,
        );
        if i == 3 {
            h.approval.tool = "db.exec".into();
            h.call.tool = "db.exec".into();
        }
        ids.push(
            store
                .create_approval(h.call, h.approval, no_fields())
                .unwrap()
                .id,
        );
    }
    store
        .decide(&ids[6], &approver("bob", &[]), approve(), 2000)
        .unwrap();
    let pending = ApprovalFilter {
        status: Some(ApprovalStatus::Pending),
        ..Default::default()
    };
    let (page1, cursor) = store.list_approvals(&pending, None, 4).unwrap();
    assert_eq!(
        page1.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
        vec![
            ids[5].clone(),
            ids[4].clone(),
            ids[3].clone(),
            ids[2].clone()
        ]
    );
    let (page2, end) = store
        .list_approvals(&pending, cursor.as_deref(), 4)
        .unwrap();
    assert_eq!(
        page2.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
        vec![ids[1].clone(), ids[0].clone()]
    );
    assert!(end.is_none());
    let odd = ApprovalFilter {
        principal: Some("odd".into()),
        status: Some(ApprovalStatus::Pending),
        ..Default::default()
    };
    assert_eq!(store.list_approvals(&odd, None, 10).unwrap().0.len(), 3);
    let db = ApprovalFilter {
        tool: Some("db.exec".into()),
        ..Default::default()
    };
    assert_eq!(store.list_approvals(&db, None, 10).unwrap().0[0].id, ids[3]);
    let run = ApprovalFilter {
        run_id: Some("run-1".into()),
        ..Default::default()
    };
    assert_eq!(store.list_approvals(&run, None, 10).unwrap().0.len(), 7);
}

#[test]
fn outbox_leases_acks_retries_and_dead_letters() {
    let dir = Place::new();
    let store = open(&dir);
    let new = |event: &str| NewDelivery {
        webhook: "oncall".into(),
        event: event.into(),
        payload: "{}".into(),
    };
    let ds = store
        .enqueue_deliveries(
            vec![new("approval.requested"), new("approval.decided")],
            1000,
        )
        .unwrap();
    let leased = store.lease_deliveries(1000, 30_000, 10).unwrap();
    assert_eq!(leased.len(), 2);
    assert!(
        store.lease_deliveries(2000, 30_000, 10).unwrap().is_empty(),
        "leased ones are not handed out twice"
    );
    store.ack_delivery(&ds[0].id, 2000).unwrap();
    store.retry_delivery(&ds[1].id, 7000, "503").unwrap();
    assert!(store.lease_deliveries(6999, 30_000, 10).unwrap().is_empty());
    let again = store.lease_deliveries(7000, 30_000, 10).unwrap();
    assert_eq!(
        (again.len(), again[0].id.clone(), again[0].attempts),
        (1, ds[1].id.clone(), 2)
    );
    // Its worker dies: the lease runs out and it comes back, with the same id.
    let back = store.lease_deliveries(37_000, 30_000, 10).unwrap();
    assert_eq!(
        (back[0].id.clone(), back[0].attempts),
        (ds[1].id.clone(), 3)
    );
    store.dead_letter(&ds[1].id, "gave up", 40_000).unwrap();
    assert!(store
        .lease_deliveries(1_000_000, 30_000, 10)
        .unwrap()
        .is_empty());
    assert_eq!(store.delivery(&ds[1].id).unwrap().unwrap().state, "dead");
    // An acked delivery is never handed out again, even if acked twice.
    assert_eq!(
        store.ack_delivery(&ds[0].id, 50_000).unwrap().state,
        "delivered"
    );
    assert_eq!(store.outbox_stats(100).unwrap().undelivered, 0);
}

#[test]
fn every_change_is_audited_redacted_and_survives_reopening() {
    let dir = Place::new();
    let approval_id;
    {
        let store = open(&dir);
        store
            .record_call(
                call("c0", "sha256:00", &agent("bot"), "allow", 900),
                no_fields(),
                false,
            )
            .unwrap();
        let h = held("c1", "sha256:aa", &agent("bot"), &[], 1, 1, 1000, 60_000);
        approval_id = store
            .create_approval(h.call, h.approval, no_fields())
            .unwrap()
            .id;
        store
            .decide(&approval_id, &approver("bob", &[]), approve(), 1100)
            .unwrap();
        assert!(matches!(
            store.begin_execution("c1", 1200).unwrap(),
            Begin::Run(_)
        ));
    }
    // Reopening after the call was claimed but not completed: its outcome is unknown, so it is
    // failed, never re-run.
    let store = open(&dir);
    let c1 = store.call("c1").unwrap().unwrap();
    assert_eq!(
        (c1.status, c1.outcome.unwrap().error.as_deref()),
        (CallStatus::Failed, Some("call.interrupted"))
    );
    assert_eq!(
        store.approval(&approval_id).unwrap().unwrap().status,
        ApprovalStatus::Approved
    );

    let records = store.audit_after(0, 100).unwrap();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "call.decided",
            "call.decided",
            "approval.requested",
            "approval.decided",
            "call.started",
            "call.failed"
        ]
    );
    assert!(records
        .iter()
        .all(|r| r.get("args").is_none_or(|a| a["password"] == "[redacted]")));
    let summary = store.verify_audit().unwrap().unwrap();
    assert_eq!(summary.records(), 6);
    let mut export = Vec::new();
    assert_eq!(
        store
            .export_audit(&airlock_storage::Cursor::Seq(0), &mut export)
            .unwrap(),
        6
    );
    let lines = export
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| Ok::<_, String>(l.to_vec()));
    assert_eq!(airlock_storage::verify_chain(lines).unwrap(), summary);
}

#[test]
fn a_second_process_cannot_open_an_embedded_store() {
    if on_postgres() {
        return; // any number of gateways share a PostgreSQL store (tests/tests/cluster.rs)
    }
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    let err = Store::open(dir.path(), StoreOptions::default())
        .err()
        .unwrap();
    assert_eq!(err.code(), "store.unavailable");
}

#[test]
fn a_disabled_webhook_parks_its_deliveries_until_enabled() {
    let dir = Place::new();
    let store = open(&dir);
    let new = || NewDelivery {
        webhook: "oncall".into(),
        event: "approval.requested".into(),
        payload: "{}".into(),
    };
    let other = NewDelivery {
        webhook: "audit-sink".into(),
        event: "call.completed".into(),
        payload: "{}".into(),
    };
    let ds = store
        .enqueue_deliveries(vec![new(), new(), other], 1000)
        .unwrap();
    store.lease_deliveries(1000, 30_000, 10).unwrap();
    store.disable_webhook("oncall", "410 Gone", 1100).unwrap();
    assert!(store.webhook_disabled("oncall").unwrap().is_some());
    assert!(store.webhook_disabled("audit-sink").unwrap().is_none());
    store.park_delivery(&ds[0].id, "disabled").unwrap();
    store.park_delivery(&ds[1].id, "disabled").unwrap();
    store.retry_delivery(&ds[2].id, 2000, "503").unwrap();
    // Parked deliveries are not due, however late it gets.
    let due = store.lease_deliveries(10_000_000, 30_000, 10).unwrap();
    assert_eq!(
        due.iter().map(|d| d.id.clone()).collect::<Vec<_>>(),
        vec![ds[2].id.clone()]
    );
    store.ack_delivery(&ds[2].id, 10_000_001).unwrap();
    assert_eq!(store.enable_webhook("oncall", 20_000_000).unwrap(), 2);
    assert!(store.webhook_disabled("oncall").unwrap().is_none());
    let due = store.lease_deliveries(20_000_000, 30_000, 10).unwrap();
    assert_eq!(due.len(), 2);
    assert!(due.iter().all(|d| d.webhook == "oncall"));
    let kinds: Vec<String> = store
        .audit_after(0, 100)
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        kinds.contains(&"webhook.disabled".to_owned())
            && kinds.contains(&"webhook.enabled".to_owned())
    );
}

#[test]
fn secrets_are_created_once_and_tokens_are_spent_once_across_restarts() {
    let dir = Place::new();
    {
        let store = open(&dir);
        let s = store.secret("mcp.state", vec![7; 32], 1).unwrap();
        assert_eq!(s, vec![7; 32]);
        // A second draw does not replace it.
        assert_eq!(
            store.secret("mcp.state", vec![9; 32], 2).unwrap(),
            vec![7; 32]
        );
        assert!(store.spend_once("tok-1", 1000, 3).unwrap());
        assert!(!store.spend_once("tok-1", 1000, 4).unwrap());
        assert!(store.spend_once("tok-2", 50, 5).unwrap());
    }
    let store = open(&dir);
    assert_eq!(
        store.secret("mcp.state", vec![1; 32], 6).unwrap(),
        vec![7; 32]
    );
    assert!(!store.spend_once("tok-1", 1000, 7).unwrap());
    assert!(!store.spend_once("tok-2", 1000, 8).unwrap());
    // The sweep drops marks past their time, and expired sessions, and nothing else.
    store
        .put_session(
            "s-old",
            serde_json::json!({"expires_at": 90}),
            Kind::InboxSignedIn,
            no_fields(),
            9,
        )
        .unwrap();
    store
        .put_session(
            "s-new",
            serde_json::json!({"expires_at": 5000}),
            Kind::InboxSignedIn,
            no_fields(),
            9,
        )
        .unwrap();
    assert_eq!(store.sweep_settings(100).unwrap(), 2);
    assert!(store.session("s-old").unwrap().is_none());
    assert!(store.session("s-new").unwrap().is_some());
    assert!(!store.spend_once("tok-1", 1000, 101).unwrap());
    assert!(store.spend_once("tok-2", 1000, 102).unwrap());
    assert_eq!(
        store.secret("mcp.state", vec![1; 32], 103).unwrap(),
        vec![7; 32]
    );
    assert!(store.verify_audit().is_ok());
}

#[test]
fn notes_are_kept_until_their_deadline_replaced_whole_and_swept_after() {
    let dir = Place::new();
    let head = {
        let store = open(&dir);
        store
            .put_note("slack.apr_1.C1", serde_json::json!({"ts": "1.1"}), 500)
            .unwrap();
        store
            .put_note("slack.apr_1.C1", serde_json::json!({"ts": "2.2"}), 1000)
            .unwrap();
        store
            .put_note(
                "identity.corp:alice",
                serde_json::json!({"groups": ["dba"]}),
                50,
            )
            .unwrap();
        store.audit_head().unwrap()
    };
    let store = open(&dir);
    // Durable, the last write whole, and no audit record for a note.
    assert_eq!(
        store.note("slack.apr_1.C1", 10).unwrap(),
        Some(serde_json::json!({"ts": "2.2"}))
    );
    assert_eq!(store.audit_head().unwrap(), head);
    // Past its deadline a note reads as none, before and after the sweep drops it.
    assert_eq!(store.note("identity.corp:alice", 51).unwrap(), None);
    assert!(store.note("identity.corp:alice", 50).unwrap().is_some());
    assert_eq!(store.note("slack.apr_9.C1", 10).unwrap(), None);
    assert_eq!(store.sweep_settings(100).unwrap(), 1);
    assert_eq!(store.note("identity.corp:alice", 0).unwrap(), None);
    assert!(store.note("slack.apr_1.C1", 100).unwrap().is_some());
}

#[test]
fn tasks_are_kept_under_their_owner_listed_in_order_and_swept_once_expired() {
    let dir = Place::new();
    let task =
        |id: &str, expires_at: u64| serde_json::json!({"task_id": id, "expires_at": expires_at});
    {
        let store = open(&dir);
        for (id, exp) in [("task_1", 5000), ("task_2", 50), ("task_3", 5000)] {
            store
                .create_task("owner-a", id, task(id, exp), no_fields(), 1)
                .unwrap();
        }
        store
            .create_task("owner-b", "task_9", task("task_9", 5000), no_fields(), 1)
            .unwrap();
    }
    // Durable, and only under its owner's key.
    let store = open(&dir);
    assert_eq!(
        store.task("owner-a", "task_1", 10).unwrap().unwrap()["task_id"],
        "task_1"
    );
    assert!(store.task("owner-b", "task_1", 10).unwrap().is_none());
    assert!(store.task("owner-a", "task_9", 10).unwrap().is_none());
    // Listed oldest first, from after a cursor, expired ones left out.
    let ids = |after: Option<&str>, limit: usize, now: u64| -> Vec<String> {
        store
            .tasks("owner-a", after, limit, now)
            .unwrap()
            .iter()
            .map(|t| t["task_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(None, 10, 10), ["task_1", "task_2", "task_3"]);
    assert_eq!(ids(None, 10, 100), ["task_1", "task_3"]);
    assert_eq!(ids(Some("task_1"), 10, 10), ["task_2", "task_3"]);
    assert_eq!(ids(None, 1, 10), ["task_1"]);
    assert!(store.task("owner-a", "task_2", 100).unwrap().is_none());
    // Each creation was audited; the sweep drops the expired one and nothing else.
    let created = store
        .audit_after(0, 100)
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "mcp.task_created")
        .count();
    assert_eq!(created, 4);
    assert_eq!(store.sweep_settings(100).unwrap(), 1);
    assert_eq!(ids(None, 10, 10), ["task_1", "task_3"]);
    assert!(store.verify_audit().is_ok());
}

#[test]
fn an_ended_call_reads_as_ended_everywhere_and_after_a_reopen() {
    use airlock_storage::{CallStatus, Durability};
    let dir = Place::new();
    let outcome = CallOutcome {
        upstream_status: Some(200),
        result: Some(serde_json::json!({"rows": 3})),
        error: None,
        message: None,
    };
    {
        let store = open(&dir);
        let mut c = call("ended-1", "sha256:aa", &agent("a1"), "allow", 100);
        c.status = CallStatus::Allowed;
        store
            .record_call_with(c, no_fields(), true, Durability::Durable)
            .unwrap();
        let done = store
            .complete_call("ended-1", outcome.clone(), 105)
            .unwrap();
        assert_eq!(
            (done.status, done.outcome.as_ref(), done.updated_at),
            (CallStatus::Completed, Some(&outcome), 105)
        );
        assert_eq!(store.call("ended-1").unwrap().unwrap(), done);
        // Every operation that reads the call sees it ended: none takes it for executing.
        let err = store
            .complete_call("ended-1", outcome.clone(), 106)
            .unwrap_err();
        assert_eq!(err.code(), "call.invalid_state");
        let err = store.cancel("ended-1", &agent("a1"), 107).unwrap_err();
        assert_eq!(err.code(), "call.invalid_state");
        assert!(!matches!(
            store.begin_execution("ended-1", 108).unwrap(),
            Begin::Run(_)
        ));
    }
    // After a reopen (no recovery: it is not executing any more), the same.
    let store = open(&dir);
    let c = store.call("ended-1").unwrap().unwrap();
    assert_eq!(
        (c.status, c.outcome, c.updated_at),
        (CallStatus::Completed, Some(outcome), 105)
    );
}

#[test]
fn lazy_writes_are_visible_at_once_and_kept_across_a_reopen() {
    use airlock_storage::{CallStatus, Durability};
    let dir = Place::new();
    {
        let store = open(&dir);
        let mut c = call("lazy-1", "sha256:aa", &agent("a1"), "allow", 100);
        c.status = CallStatus::Allowed;
        let c = store
            .record_call_with(c, no_fields(), true, Durability::Lazy)
            .unwrap();
        assert_eq!(c.status, CallStatus::Executing);
        let outcome = CallOutcome {
            upstream_status: Some(200),
            result: Some(serde_json::json!({"ok": true})),
            error: None,
            message: None,
        };
        store
            .complete_call_with("lazy-1", outcome, 101, Durability::Lazy)
            .unwrap();
        // Readers see a lazy write as soon as it is acknowledged.
        assert_eq!(
            store.call("lazy-1").unwrap().unwrap().status,
            CallStatus::Completed
        );
        // A durable write after it, then close.
        store
            .append_audit(Kind::PolicyLoaded, no_fields(), 102)
            .unwrap();
    }
    let store = open(&dir);
    assert_eq!(
        store.call("lazy-1").unwrap().unwrap().status,
        CallStatus::Completed
    );
    assert!(store.verify_audit().unwrap().is_ok());
}

#[test]
fn a_gateway_recovers_only_the_calls_it_left_executing() {
    let place = Place::new();
    let named = |name: &str| StoreOptions {
        instance: name.into(),
        ..Default::default()
    };
    let a = place.open(named("gw-a")).unwrap();
    let c = a
        .record_call(
            call("c-a", "sha256:aa", &agent("bot"), "allow", 1000),
            Default::default(),
            true,
        )
        .unwrap();
    assert_eq!(c.status, CallStatus::Executing);
    drop(a); // as if it crashed: the call is left executing
    if on_postgres() {
        // Another gateway starting on the same database must not touch it: gw-a may be
        // running it right now.
        let b = place.open(named("gw-b")).unwrap();
        assert_eq!(
            b.call("c-a").unwrap().unwrap().status,
            CallStatus::Executing
        );
        drop(b);
    }
    let a = place.open(named("gw-a")).unwrap();
    let c = a.call("c-a").unwrap().unwrap();
    assert_eq!(c.status, CallStatus::Failed);
    assert_eq!(
        c.outcome.unwrap().error.as_deref(),
        Some("call.interrupted")
    );
}

#[test]
fn what_a_group_expected_is_checked_at_its_commit_and_a_missing_key_fails_the_whole_group() {
    let place = Place::new();
    let Some(url) = place.url() else {
        return; // fjall checks an expectation at once, against its one writer's state
    };
    let store = place.open(StoreOptions::default()).unwrap();
    let claim = |id: &str| {
        store
            .record_call(
                call(id, "sha256:aa", &agent("bot"), "allow", 1000),
                Default::default(),
                true,
            )
            .unwrap()
    };
    let (gone, kept) = (claim("c-gone"), claim("c-kept"));
    // Behind the store's back, `c-gone` stops executing: its executing-index entry (keyspace
    // 1, `x\0\0{id}`) is deleted.
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let deleted = client
        .execute(
            "DELETE FROM airlock_kv WHERE ks = 1 AND k = $1",
            &[&b"x\0\0c-gone".to_vec()],
        )
        .unwrap();
    assert_eq!(deleted, 1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let outcome = || CallOutcome {
        upstream_status: Some(200),
        result: Some(serde_json::json!({"ok": true})),
        error: None,
        message: None,
    };
    // Both outcomes go to the writer at once, so they most often share a group; whether they
    // do or not, the one whose key is missing is refused with what its job said, and nothing
    // of its group is written.
    let (failed, done) = rt.block_on(async {
        tokio::join!(
            store.complete_claimed_async(gone, outcome(), 2000, Durability::Durable, false),
            store.complete_claimed_async(kept.clone(), outcome(), 2000, Durability::Durable, false),
        )
    });
    let err = failed.expect_err("the missing key fails the group");
    assert!(
        err.to_string()
            .contains("call c-gone is no longer executing"),
        "{err}"
    );
    assert_eq!(
        store.call("c-gone").unwrap().unwrap().status,
        CallStatus::Executing
    );
    // The other outcome committed unless it shared the failed group; then it failed with it,
    // and completing it again succeeds.
    if done.is_err() {
        let again = rt.block_on(store.complete_claimed_async(
            kept,
            outcome(),
            2000,
            Durability::Durable,
            false,
        ));
        again.unwrap();
    }
    assert_eq!(
        store.call("c-kept").unwrap().unwrap().status,
        CallStatus::Completed
    );
    assert!(store.verify_audit().unwrap().is_ok());
}

#[test]
fn connections_the_database_ended_between_writes_are_replaced_before_the_next_write() {
    let place = Place::new();
    let Some(url) = place.url() else {
        return; // fjall has no connections
    };
    // Named after its schema: the tests running beside it keep their connections.
    let schema = url
        .rsplit("search_path=")
        .next()
        .unwrap()
        .trim_end_matches('\'');
    let name = format!("airlock-{schema}");
    let store = support::open_at(
        &format!("pg:{url} application_name={name}"),
        StoreOptions::default(),
    )
    .unwrap();
    let record = |id: &str| {
        store.record_call(
            call(id, "sha256:aa", &agent("bot"), "allow", 1000),
            Default::default(),
            false,
        )
    };
    record("c-before").unwrap();
    // The database ends every connection of the store (an administrator, a failover).
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let ended = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = $1",
            &[&name],
        )
        .unwrap()
        .get::<_, i64>(0);
    assert!(ended >= 2, "{ended}");
    // Once the store hears the database again, the next write goes through at its first try:
    // the writer's dead connection is noticed before the write, not by failing it.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !store.is_available() {
        assert!(
            std::time::Instant::now() < deadline,
            "the store stays unavailable"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    record("c-after").unwrap();
    assert!(store.call("c-after").unwrap().is_some());
    assert!(store.verify_audit().unwrap().is_ok());
}

#[test]
fn a_database_schema_newer_than_the_binary_refuses_to_open() {
    let place = Place::new();
    let Some(url) = place.url() else {
        return; // fjall has no schema versions
    };
    drop(place.open(StoreOptions::default()).unwrap());
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .batch_execute("UPDATE airlock_schema SET version = version + 1")
        .unwrap();
    let err = place.open(StoreOptions::default()).err().unwrap();
    assert_eq!(err.code(), "store.schema_too_new", "{err}");
    assert!(err.to_string().contains("newer than this binary"), "{err}");
    // And migrating does not downgrade it.
    let err = airlock_storage::migrate_database(&airlock_storage::PgOptions {
        url: url.into(),
        ..Default::default()
    })
    .err()
    .unwrap();
    assert_eq!(err.code(), "store.schema_too_new");
}

/// What another gateway's commits were heard as, on PostgreSQL.
type Heard = std::sync::Arc<std::sync::Mutex<Vec<airlock_storage::Change>>>;

/// A store at `here` that keeps every specific change it hears from other gateways, and
/// another gateway's store on the same schema, with a chain of its own (a second store
/// claiming the first's chain would wait for it, then be refused).
fn listener_and_twin(here: &Place) -> (Store, Heard, Store) {
    let a = here.open(StoreOptions::default()).unwrap();
    let heard = Heard::default();
    let h = heard.clone();
    a.on_changes(Box::new(move |c| {
        if c.remote && !c.all {
            h.lock().unwrap().push(c.clone());
        }
    }));
    let twin = here
        .open(StoreOptions {
            instance: "twin".into(),
            ..StoreOptions::default()
        })
        .unwrap();
    (a, heard, twin)
}

#[test]
fn another_store_on_the_same_schema_hears_of_each_commit_and_no_other_schema_does() {
    if !on_postgres() {
        return; // one process holds a fjall store: there is nobody else to tell
    }
    let (here, elsewhere) = (Place::new(), Place::new());
    let (a, heard, twin) = listener_and_twin(&here);
    let other = elsewhere.open(StoreOptions::default()).unwrap();
    other
        .record_call(
            call("c-other", "sha256:bb", &agent("bot"), "allow", 1000),
            Default::default(),
            false,
        )
        .unwrap();
    twin.record_call(
        call("c-twin", "sha256:cc", &agent("bot"), "allow", 1000),
        Default::default(),
        false,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while heard.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no notification");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let seen = heard.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].calls, vec!["c-twin".to_owned()]);
    // The audit records it appended, by chain and seq, for the gateway's event streams.
    let (from, to) = seen[0].audit.unwrap();
    assert_eq!(seen[0].chain, "twin");
    let records = a.audit_range("twin", from, to).unwrap();
    assert_eq!(records.len() as u64, to - from + 1);
    assert_eq!(records[0]["call_id"], "c-twin");
    // An allowed call schedules no expiry; an approval opened elsewhere tells when it expires
    // (what makes this gateway's expiry timer look again, and nothing else does).
    assert_eq!(seen[0].deadline, None);
    drop(seen);
    let h = held(
        "c-held",
        "sha256:dd",
        &agent("bot"),
        &["finance"],
        1,
        1,
        1000,
        60_000,
    );
    let expires = h.approval.expires_at;
    twin.create_approval(h.call, h.approval, no_fields())
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let found = heard
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.calls == vec!["c-held".to_owned()])
            .map(|c| c.deadline);
        if let Some(found) = found {
            assert_eq!(found, Some(expires));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no notification");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn a_burst_of_commits_is_told_in_fewer_announcements_that_name_every_call() {
    if !on_postgres() {
        return; // one process holds a fjall store: there is nobody else to tell
    }
    let here = Place::new();
    let (_a, heard, twin) = listener_and_twin(&here);
    // Commits back to back, each its own group: faster than one announcement per interval.
    let ids: Vec<String> = (0..40).map(|i| format!("c-burst-{i}")).collect();
    for id in &ids {
        twin.record_call(
            call(id, "sha256:ee", &agent("bot"), "allow", 1000),
            Default::default(),
            false,
        )
        .unwrap();
    }
    // The last commits are told without another commit to carry them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let told: std::collections::HashSet<String> = heard
            .lock()
            .unwrap()
            .iter()
            .flat_map(|c| c.calls.clone())
            .collect();
        if ids.iter().all(|id| told.contains(id)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not told: {told:?}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let seen = heard.lock().unwrap();
    assert!(seen.len() < ids.len(), "{} announcements", seen.len());
    // Their audit ranges follow one another: every record of the chain is told, once.
    let mut next = seen[0].audit.unwrap().0;
    for c in seen.iter() {
        let (from, to) = c.audit.unwrap();
        assert_eq!((c.chain.as_str(), from), ("twin", next), "{seen:?}");
        next = to + 1;
    }
}

#[test]
fn time_never_goes_back_within_a_chain_across_a_reopen() {
    let place = Place::new();
    let field = |n: u64| {
        let mut m = serde_json::Map::new();
        m.insert("n".into(), serde_json::Value::from(n));
        m
    };
    {
        let store = open(&place);
        // A record whose time was taken before its predecessor's was appended.
        store
            .append_audit(Kind::PolicyLoaded, field(1), 2_000)
            .unwrap();
        store
            .append_audit(Kind::PolicyLoaded, field(2), 1_000)
            .unwrap();
        store
            .append_audit(Kind::PolicyLoaded, field(3), 3_000)
            .unwrap();
    }
    let store = open(&place);
    store
        .append_audit(Kind::PolicyLoaded, field(4), 2_500)
        .unwrap();
    let ts: Vec<u64> = store
        .audit_after(0, 100)
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "policy.loaded")
        .map(|r| r["ts"].as_u64().unwrap())
        .collect();
    assert_eq!(ts, [2_000, 2_000, 3_000, 3_000]);
    assert!(store.verify_audit().unwrap().is_ok());
}
