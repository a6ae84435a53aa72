//! Every decision path, binding, who may decide, restart, reload, bad input, metrics and
//! events: the real `airlock` binary on 127.0.0.1:0 in front of a real backend process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

#[test]
fn allow_forwards_exactly_the_canonical_args_with_call_headers() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (s, b) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(r#"{"tool":"echo.say","args":{ "b": 1.0, "a": "\u00e9" }}"#),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        (
            b["status"].as_str(),
            b["decision"].as_str(),
            b["upstream_status"].as_u64()
        ),
        (Some("completed"), Some("allow"), Some(200))
    );
    let result = &b["result"];
    assert_eq!(
        result["raw"], r#"{"a":"é","b":1}"#,
        "the backend gets the canonical args, not the raw bytes"
    );
    assert_eq!(result["headers"]["airlock-call-id"], b["call_id"]);
    assert_eq!(result["headers"]["airlock-fingerprint"], b["fingerprint"]);
    assert!(result["headers"].get("airlock-approval-id").is_none());
    assert_eq!(backend.count(), 1);
    // A backend's own error status is a completed call: data for the model.
    let (s, b) = gw.call("agent1", "fail.now", json!({}), None);
    assert_eq!((s, b["upstream_status"].as_u64()), (200, Some(500)));
}

#[test]
fn deny_by_rule_never_reaches_the_backend() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (s, b) = gw.call(
        "agent1",
        "db.query",
        json!({"sql": "DROP TABLE users"}),
        None,
    );
    assert_eq!((s, code(&b)), (403, "policy.denied"));
    assert_eq!(b["error"]["message"], "DROP is never allowed");
    assert_eq!(b["error"]["details"]["rules"], json!(["deny-drop"]));
    // No rule matches: the default decision (deny) applies.
    let (s, b) = gw.call("agent1", "nothing.matches", json!({}), None);
    assert_eq!((s, code(&b)), (404, "tool.unknown"));
    assert_eq!(backend.count(), 0);
}

#[test]
fn approve_while_held_answers_the_held_request() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    std::thread::scope(|s| {
        let held = s.spawn(|| {
            gw.call(
                "agent1",
                "db.query",
                json!({"sql": "select 1"}),
                Some("wait=20"),
            )
        });
        // Find the approval and approve it while the call is held.
        let approval = loop {
            let (_, list) = gw.req(
                "GET",
                "/v1/approvals?status=pending",
                Some("dba1"),
                None,
                None,
            );
            if let Some(a) = list["approvals"].as_array().and_then(|a| a.first()) {
                break a["id"].as_str().unwrap().to_owned();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (st, a) = gw.approve("dba1", &approval);
        assert_eq!((st, a["status"].as_str()), (200, Some("approved")), "{a}");
        let (st, b) = held.join().unwrap();
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["decision"], "require_approval");
        assert_eq!(
            b["result"]["headers"]["airlock-approval-id"],
            json!(approval)
        );
    });
    assert_eq!(backend.count(), 1);
}

#[test]
fn respond_async_then_approve_then_resume_runs_once() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call, approval) = gw.call_async(
        "agent1",
        "db.query",
        json!({"sql": "update t set x = 1 where id = 2"}),
    );
    let (s, b) = gw.req(
        "GET",
        &format!("/v1/calls/{call}"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!((s, b["status"].as_str()), (202, Some("pending_approval")));
    assert_eq!(gw.approve("dba1", &approval).0, 200);
    let (s, first) = gw.resume("agent1", &call);
    assert_eq!(s, 200, "{first}");
    // Resuming again, or reading the call, returns the stored outcome: it does not run again.
    let (s, again) = gw.resume("agent1", &call);
    assert_eq!((s, &again["result"]), (200, &first["result"]));
    let (s, _) = gw.req(
        "GET",
        &format!("/v1/calls/{call}"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(backend.count(), 1);
    // Another agent cannot see or resume it.
    assert_eq!(code(&gw.resume("agent2", &call).1), "call.not_found");
}

#[test]
fn decline_reason_reaches_the_agent() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call, approval) = gw.call_async(
        "agent1",
        "db.query",
        json!({"sql": "delete from t where id = 1"}),
    );
    let (s, b) = gw.req(
        "POST",
        &format!("/v1/approvals/{approval}/decline"),
        Some("dba1"),
        Some("{}"),
        None,
    );
    assert_eq!((s, code(&b)), (400, "request.missing_reason"));
    let (s, _) = gw.req(
        "POST",
        &format!("/v1/approvals/{approval}/decline"),
        Some("dba1"),
        Some(r#"{"reason":"use the archive job instead"}"#),
        None,
    );
    assert_eq!(s, 200);
    let (s, b) = gw.resume("agent1", &call);
    assert_eq!((s, code(&b)), (403, "approval.declined"));
    assert_eq!(
        b["error"]["details"]["reason"],
        "use the archive job instead"
    );
    assert!(b["error"]["message"]
        .as_str()
        .unwrap()
        .contains("use the archive job instead"));
    assert_eq!(backend.count(), 0);
}

#[test]
fn an_approval_nobody_decides_expires_and_that_is_a_deny() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call, approval) = gw.call_async("agent1", "short.op", json!({}));
    let (s, b) = gw.req(
        "GET",
        &format!("/v1/calls/{call}?wait=10"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!((s, code(&b)), (403, "approval.expired"), "{b}");
    assert_eq!(
        code(&gw.approve("ops", &approval).1),
        "approval.not_pending"
    );
    assert_eq!(backend.count(), 0);
}

#[test]
fn cancel_ends_the_call() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call, approval) = gw.call_async("agent1", "db.query", json!({"sql": "select 2"}));
    assert_eq!(
        code(
            &gw.req(
                "POST",
                &format!("/v1/calls/{call}/cancel"),
                Some("agent2"),
                None,
                None
            )
            .1
        ),
        "call.not_found"
    );
    let (s, b) = gw.req(
        "POST",
        &format!("/v1/calls/{call}/cancel"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!((s, b["status"].as_str()), (200, Some("cancelled")));
    assert_eq!(code(&gw.resume("agent1", &call).1), "call.cancelled");
    assert_eq!(
        code(&gw.approve("dba1", &approval).1),
        "approval.not_pending"
    );
    assert_eq!(backend.count(), 0);
}

#[test]
fn an_approval_binds_the_exact_call() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let args = json!({"sql": "update t set x = 1 where id = 2", "limit": 1});
    let (call, approval) = gw.call_async("agent1", "db.query", args.clone());
    gw.approve("dba1", &approval);
    assert_eq!(gw.resume("agent1", &call).0, 200);
    // The one use is spent: the same call again needs a new approval...
    assert_eq!(
        gw.call("agent1", "db.query", args.clone(), Some("respond-async"))
            .0,
        202
    );
    // ...so does the same value spelled differently (it is the same call), one changed arg,
    // and another tool; a duplicate key is refused outright.
    let respelled = r#"{"tool":"db.query","context":{"run_id":"run-1"},"args":{"limit":1.0,"sql":"update t set x = 1 where id = 2"}}"#;
    assert_eq!(
        gw.req(
            "POST",
            "/v1/calls",
            Some("agent1"),
            Some(respelled),
            Some("respond-async")
        )
        .0,
        202
    );
    assert_eq!(
        gw.call(
            "agent1",
            "db.query",
            json!({"sql": "update t set x = 1 where id = 2", "limit": 2}),
            Some("respond-async")
        )
        .0,
        202
    );
    assert_eq!(
        gw.call("agent1", "db.other", args.clone(), Some("respond-async"))
            .0,
        202
    );
    let dup = r#"{"tool":"db.query","args":{"sql":"update t set x = 1 where id = 2","limit":1,"limit":1}}"#;
    let (s, b) = gw.req("POST", "/v1/calls", Some("agent1"), Some(dup), None);
    assert_eq!((s, code(&b)), (400, "request.duplicate_key"));
    assert_eq!(backend.count(), 1);

    // A grant with uses left admits the identical call, however it is spelled, at once.
    let (call, approval) = gw.call_async("agent1", "multi.op", json!({"n": 1}));
    gw.approve("ops", &approval);
    assert_eq!(gw.resume("agent1", &call).0, 200);
    let again = r#"{"tool":"multi.op","context":{"run_id":"run-1"},"args":{"n":1e0}}"#;
    assert_eq!(
        gw.req("POST", "/v1/calls", Some("agent1"), Some(again), None)
            .0,
        200
    );
    // Another run, or another principal, gets nothing from it.
    let other_run = r#"{"tool":"multi.op","context":{"run_id":"run-2"},"args":{"n":1}}"#;
    assert_eq!(
        gw.req(
            "POST",
            "/v1/calls",
            Some("agent1"),
            Some(other_run),
            Some("respond-async")
        )
        .0,
        202
    );
    assert_eq!(
        gw.call("agent2", "multi.op", json!({"n": 1}), Some("respond-async"))
            .0,
        202
    );
    assert_eq!(backend.count(), 3);
}

#[test]
fn twenty_parallel_identical_calls_on_a_one_use_grant_run_once() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let args = json!({"sql": "update t set y = 3 where id = 9"});
    let (call, approval) = gw.call_async("agent1", "db.query", args.clone());
    gw.approve("dba1", &approval);
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for _ in 0..20 {
            handles.push(s.spawn(|| gw.resume("agent1", &call).0));
            handles.push(s.spawn(|| {
                gw.call("agent1", "db.query", args.clone(), Some("respond-async"))
                    .0
            }));
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(backend.count(), 1, "statuses: {statuses:?}");
    assert!(
        statuses.iter().all(|s| [200, 202, 409].contains(s)),
        "{statuses:?}"
    );
}

#[test]
fn who_may_decide() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (_, approval) = gw.call_async("agent1", "db.query", json!({"sql": "select 3"}));
    let (s, b) = gw.approve("agent2", &approval);
    assert_eq!((s, code(&b)), (403, "approval.forbidden"));
    let (s, b) = gw.approve("fin1", &approval);
    assert_eq!(
        (s, code(&b)),
        (403, "approval.forbidden"),
        "outside the dba group"
    );
    // An admin calls a tool, then tries to approve its own call.
    let (_, own) = gw.call_async("admin", "db.query", json!({"sql": "select 4"}));
    let (s, b) = gw.approve("admin", &own);
    assert_eq!((s, code(&b)), (403, "approval.self_approval"));
    // Quorum 2 needs two distinct approvers of the rule's group: an admin outside it is
    // refused, with the groups named, and counts for nothing.
    let (call, pay) = gw.call_async("agent1", "pay.refund", json!({"amount": 900}));
    let (s, b) = gw.approve("admin", &pay);
    assert_eq!((s, code(&b)), (403, "approval.forbidden"), "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("finance"),
        "{b}"
    );
    assert_eq!(gw.approve("fin1", &pay).1["status"], "pending");
    assert_eq!(
        code(&gw.approve("fin1", &pay).1),
        "approval.already_decided"
    );
    assert_eq!(gw.resume("agent1", &call).0, 202);
    assert_eq!(gw.approve("fin2", &pay).1["status"], "approved");
    assert_eq!(gw.resume("agent1", &call).0, 200);
    // The admin outside the group may still decline.
    let (_, other) = gw.call_async("agent1", "pay.refund", json!({"amount": 901}));
    let (s, b) = gw.req(
        "POST",
        &format!("/v1/approvals/{other}/decline"),
        Some("admin"),
        Some(r#"{"reason":"not this one"}"#),
        None,
    );
    assert_eq!((s, b["status"].as_str()), (200, Some("declined")), "{b}");
    assert_eq!(
        code(&gw.approve("ops", "no-such-id").1),
        "approval.not_found"
    );
}

#[test]
fn approve_and_decline_by_run() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (c1, _) = gw.call_async("agent1", "multi.a", json!({}));
    let (c2, _) = gw.call_async("agent1", "multi.b", json!({}));
    let (s, b) = gw.req(
        "POST",
        "/v1/runs/run-1/approve",
        Some("ops"),
        Some("{}"),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["results"].as_array().unwrap().len(), 2);
    assert_eq!(gw.resume("agent1", &c1).0, 200);
    assert_eq!(gw.resume("agent1", &c2).0, 200);
    let (c3, _) = gw.call_async("agent1", "multi.c", json!({}));
    let (s, _) = gw.req(
        "POST",
        "/v1/runs/run-1/decline",
        Some("ops"),
        Some(r#"{"reason":"stop this run"}"#),
        None,
    );
    assert_eq!(s, 200);
    let (_, b) = gw.resume("agent1", &c3);
    assert_eq!(b["error"]["details"]["reason"], "stop this run");
    assert_eq!(
        code(
            &gw.req(
                "POST",
                "/v1/runs/run-404/approve",
                Some("ops"),
                Some("{}"),
                None
            )
            .1
        ),
        "approval.not_found"
    );
}

#[test]
fn an_edit_runs_the_edited_args_and_says_so() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (call, approval) =
        gw.call_async("agent1", "db.query", json!({"sql": "update t set x = 1"}));
    // An edit that policy denies is refused.
    let deny = r#"{"args":{"sql":"drop table t"}}"#;
    let (s, b) = gw.req(
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some("dba1"),
        Some(deny),
        None,
    );
    assert_eq!((s, code(&b)), (403, "approval.edit_denied"));
    let edit = r#"{"args":{"sql":"update t set x = 1 where id = 7"},"reason":"scoped it"}"#;
    let (s, a) = gw.req(
        "POST",
        &format!("/v1/approvals/{approval}/approve"),
        Some("dba1"),
        Some(edit),
        None,
    );
    assert_eq!((s, a["status"].as_str()), (200, Some("approved")), "{a}");
    let (s, b) = gw.resume("agent1", &call);
    assert_eq!(s, 200);
    assert_eq!(b["edited"], true);
    assert_eq!(b["args"], json!({"sql": "update t set x = 1 where id = 7"}));
    assert_eq!(
        backend.seen().1,
        vec![r#"{"sql":"update t set x = 1 where id = 7"}"#.to_owned()]
    );
}

#[test]
fn pending_and_approved_calls_survive_sigkill() {
    let backend = Backend::start();
    let mut gw = Gateway::start(&backend);
    let (pending_call, pending) = gw.call_async("agent1", "db.query", json!({"sql": "select 10"}));
    let (approved_call, approved) =
        gw.call_async("agent1", "db.query", json!({"sql": "select 11"}));
    gw.approve("dba1", &approved);
    gw.kill9();
    gw.spawn();
    let (s, a) = gw.req(
        "GET",
        &format!("/v1/approvals/{pending}"),
        Some("dba2"),
        None,
        None,
    );
    assert_eq!((s, a["status"].as_str()), (200, Some("pending")));
    gw.approve("dba2", &pending);
    assert_eq!(gw.resume("agent1", &pending_call).0, 200);
    assert_eq!(gw.resume("agent1", &approved_call).0, 200);
    assert_eq!(backend.count(), 2);
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    assert!(audit["records"].as_array().unwrap().len() >= 10);
}

#[test]
fn a_bad_policy_keeps_the_old_one() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let before = gw.req("GET", "/v1/policy", Some("admin"), None, None).1["version"].clone();
    gw.write_policy("version = 1\n[defaults]\ndecision = \"allow\"\n[[rules]]\nid = \"x\"\nwhen = 'nope.x == 1'\ndecision = \"deny\"\n");
    let (s, b) = gw.req("POST", "/v1/policy/reload", Some("admin"), None, None);
    assert_eq!((s, code(&b)), (422, "policy.unknown_variable"), "{b}");
    assert_eq!(b["error"]["details"]["errors"][0]["line"], 6);
    // The old policy still decides, also after the file watch and SIGHUP have seen the file.
    gw.signal("-HUP");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        gw.req("GET", "/v1/policy", Some("admin"), None, None).1["version"],
        before
    );
    assert_eq!(
        code(
            &gw.call("agent1", "db.query", json!({"sql": "drop x"}), None)
                .1
        ),
        "policy.denied"
    );
    assert!(gw
        .metrics()
        .contains("airlock_policy_reloads_total{result=\"error\"}"));
    // A good policy is picked up by SIGHUP.
    gw.write_policy(&POLICY.replace("DROP is never allowed", "DROP is forbidden here"));
    gw.signal("-HUP");
    let mut message = String::new();
    for _ in 0..50 {
        let (_, b) = gw.call("agent1", "db.query", json!({"sql": "drop x"}), None);
        message = b["error"]["message"].as_str().unwrap_or("").to_owned();
        if message == "DROP is forbidden here" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(message, "DROP is forbidden here");
}

#[test]
fn bad_input_gets_its_code_and_never_reaches_the_backend() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let deep = format!(
        r#"{{"tool":"echo.x","args":{{"a":{}{}}}}}"#,
        "[".repeat(64),
        "]".repeat(64)
    );
    let big = format!(
        r#"{{"tool":"echo.x","args":{{"a":"{}"}}}}"#,
        "x".repeat(70_000)
    );
    let cases: Vec<(Option<&str>, String, u16, &str)> = vec![
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":{"a":1,"a":2}}"#.into(),
            400,
            "request.duplicate_key",
        ),
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":{"a":9007199254740993}}"#.into(),
            400,
            "request.unsafe_number",
        ),
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":{"a":1e999}}"#.into(),
            400,
            "request.unsafe_number",
        ),
        (Some("agent1"), deep, 400, "request.too_deep"),
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":{"a":"#.into(),
            400,
            "request.invalid_json",
        ),
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":[1]}"#.into(),
            400,
            "request.invalid_args",
        ),
        (
            Some("agent1"),
            r#"{"tool":"echo x","args":{}}"#.into(),
            400,
            "request.invalid_tool",
        ),
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":{},"context":{"who":"me"}}"#.into(),
            400,
            "request.invalid_context",
        ),
        (
            Some("agent1"),
            r#"{"tool":"echo.x","args":{},"extra":1}"#.into(),
            400,
            "request.unknown_field",
        ),
        (Some("agent1"), big, 413, "request.too_large"),
        (
            Some("agent1"),
            r#"{"tool":"unrouted.x","args":{}}"#.into(),
            404,
            "tool.unknown",
        ),
        (
            None,
            r#"{"tool":"echo.x","args":{}}"#.into(),
            401,
            "auth.unauthenticated",
        ),
        (
            Some("nobody"),
            r#"{"tool":"echo.x","args":{}}"#.into(),
            401,
            "auth.unauthenticated",
        ),
        (
            Some("dba1"),
            r#"{"tool":"echo.x","args":{}}"#.into(),
            403,
            "auth.forbidden",
        ),
    ];
    for (who, body, status, expected) in cases {
        let (s, b) = gw.req("POST", "/v1/calls", who, Some(&body), None);
        assert_eq!(
            (s, code(&b)),
            (status, expected),
            "{}",
            &body[..body.len().min(80)]
        );
    }
    let invalid_utf8 = gw
        .client
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth("token-agent1")
        .body(b"{\"tool\":\"echo.x\",\"args\":{\"a\":\"\xff\"}}".to_vec())
        .send()
        .unwrap();
    assert_eq!(invalid_utf8.status().as_u16(), 400);
    let huge_header = gw
        .client
        .get(format!("{}/v1/approvals", gw.base))
        .bearer_auth("token-ops")
        .header("x-junk", "j".repeat(20_000))
        .send()
        .unwrap();
    assert_eq!(huge_header.status().as_u16(), 431);
    assert_eq!(backend.count(), 0);
    let (s, b) = gw.req("GET", "/v1/nothing", Some("agent1"), None, None);
    assert_eq!((s, code(&b)), (404, "route.not_found"));
}

#[test]
fn upstream_failures_have_codes_and_are_recorded() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let (s, b) = gw.call("agent1", "down.x", json!({}), None);
    assert_eq!((s, code(&b)), (502, "upstream.unavailable"), "{b}");
    let call = b["error"]["details"]["call_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The call record shows it, and asking again does not retry it.
    assert_eq!(code(&gw.resume("agent1", &call).1), "upstream.unavailable");
    let (s, b) = gw.call("agent1", "slow.x", json!({}), None);
    assert_eq!((s, code(&b)), (504, "upstream.timeout"));
}

#[test]
fn metrics_parse_and_move() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let sample = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let before = gw.metrics();
    gw.call("agent1", "echo.x", json!({}), None);
    gw.call("agent1", "echo.x", json!({}), None);
    gw.call_async("agent1", "db.query", json!({"sql": "select 1"}));
    let after = gw.metrics();
    for line in after.lines().filter(|l| !l.is_empty()) {
        if line.starts_with('#') {
            assert!(
                line.starts_with("# HELP ") || line.starts_with("# TYPE "),
                "{line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        assert!(value.parse::<f64>().is_ok(), "{line}");
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "{line}"
        );
        assert!(
            series.matches('{').count() == series.matches('}').count(),
            "{line}"
        );
    }
    let calls = "airlock_calls_total{decision=\"allow\",outcome=\"completed\"}";
    assert_eq!(sample(&after, calls) - sample(&before, calls), 2.0);
    assert_eq!(sample(&after, "airlock_pending_approvals"), 1.0);
    let (s, _) = gw.req("GET", "/readyz", None, None, None);
    assert_eq!(s, 200);
}

#[test]
fn approvers_get_server_sent_events() {
    use std::io::{BufRead, BufReader};
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let resp = reqwest::blocking::Client::new()
        .get(format!("{}/v1/events", gw.base))
        .bearer_auth("token-ops")
        .send()
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut lines = BufReader::new(resp).lines();
    assert_eq!(lines.next().unwrap().unwrap(), ": connected");
    let (_, approval) = gw.call_async("agent1", "db.query", json!({"sql": "select 5"}));
    let mut event = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(data) = line.strip_prefix("data: ") {
            event = Some(serde_json::from_str::<Value>(data).unwrap());
            break;
        }
    }
    assert_eq!(event.unwrap()["id"], json!(approval));
    assert_eq!(
        gw.req("GET", "/v1/events", Some("agent1"), None, None).0,
        403
    );
}

#[test]
fn shutdown_answers_held_calls_and_keeps_their_approvals() {
    let backend = Backend::start();
    let mut gw = Gateway::start(&backend);
    std::thread::scope(|s| {
        let held = s.spawn(|| {
            gw.call(
                "agent1",
                "db.query",
                json!({"sql": "select 6"}),
                Some("wait=30"),
            )
        });
        loop {
            let (_, list) = gw.req("GET", "/v1/approvals", Some("dba1"), None, None);
            if !list["approvals"].as_array().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        gw.signal("-TERM");
        let (s, b) = held.join().unwrap();
        assert_eq!((s, code(&b)), (503, "gateway.shutting_down"));
    });
    assert!(gw.wait_exit().success());
    gw.spawn();
    let (_, list) = gw.req(
        "GET",
        "/v1/approvals?status=pending",
        Some("dba1"),
        None,
        None,
    );
    assert_eq!(list["approvals"].as_array().unwrap().len(), 1);
}

#[test]
fn beyond_max_held_a_call_that_would_wait_gets_429_and_nothing_is_held() {
    let backend = Backend::start();
    let gw = Gateway::start_with(&config_text(&backend, "max_held = 1"), POLICY);
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            gw.call(
                "agent1",
                "db.query",
                json!({"sql": "select 20"}),
                Some("wait=3"),
            )
        });
        loop {
            let (_, list) = gw.req("GET", "/v1/approvals", Some("dba1"), None, None);
            if !list["approvals"].as_array().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Another agent, so the gateway's limit is what refuses, not agent1's own share
        // (`max_held_per_principal`, a tenth of `max_held` and at least 1).
        let resp = gw
            .client
            .post(format!("{}/v1/calls", gw.base))
            .bearer_auth("token-agent2")
            .header("prefer", "wait=3")
            .body(json!({"tool": "db.query", "args": {"sql": "select 21"}}).to_string())
            .send()
            .unwrap();
        assert_eq!(resp.status().as_u16(), 429);
        assert_eq!(resp.headers()["retry-after"], "1");
        let body: Value = resp.json().unwrap();
        assert_eq!(code(&body), "gateway.too_many_held");
        // Asking for an async answer still works: nothing has to be held.
        assert_eq!(
            gw.call(
                "agent1",
                "db.query",
                json!({"sql": "select 22"}),
                Some("respond-async")
            )
            .0,
            202
        );
        assert_eq!(
            first.join().unwrap().0,
            202,
            "the held call ends its wait with the 202"
        );
    });
    let (_, list) = gw.req("GET", "/v1/approvals", Some("dba1"), None, None);
    assert_eq!(
        list["approvals"].as_array().unwrap().len(),
        2,
        "the refused call left no approval"
    );
}

#[test]
fn identical_recalls_join_the_pending_approval_and_run_it_once_approved() {
    let backend = Backend::start();
    let gw = Gateway::start(&backend);
    let args = json!({"sql": "select 42"});
    let (call, approval) = gw.call_async("agent1", "db.query", args.clone());
    // The same principal, fingerprint and run: joins, no second approval.
    let (again_call, again_approval) = gw.call_async("agent1", "db.query", args.clone());
    assert_eq!(
        (again_call.as_str(), again_approval.as_str()),
        (call.as_str(), approval.as_str())
    );
    let (_, pending) = gw.req(
        "GET",
        "/v1/approvals?status=pending",
        Some("dba1"),
        None,
        None,
    );
    assert_eq!(pending["approvals"].as_array().unwrap().len(), 1);
    // Another principal, or another run, opens its own.
    let (other, _) = gw.call_async("agent2", "db.query", args.clone());
    assert_ne!(other, call);
    let (s, b) = gw.req(
        "POST",
        "/v1/calls",
        Some("agent1"),
        Some(
            &json!({"tool": "db.query", "args": args, "context": {"run_id": "run-2"}}).to_string(),
        ),
        Some("respond-async"),
    );
    assert_eq!(s, 202);
    assert_ne!(b["call_id"], call.as_str());
    // Once approved, the identical re-call (not a resume) runs the approved call, once.
    assert_eq!(gw.approve("dba1", &approval).0, 200);
    let (s, b) = gw.call("agent1", "db.query", args.clone(), None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["call_id"], call.as_str());
    assert_eq!(backend.count(), 1);
    // The approved call has run: the next identical call needs a new approval.
    let (s, b) = gw.call("agent1", "db.query", args, Some("respond-async"));
    assert_eq!(s, 202, "{b}");
    assert_ne!(b["approval"]["id"], approval.as_str());
    let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
    let attached = audit["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "call.attached")
        .count();
    assert_eq!(attached, 2, "{audit}");
}

#[test]
fn the_audit_log_is_exported_and_pruned_online_and_still_verifies() {
    let backend = Backend::start();
    let mut gw = Gateway::start(&backend);
    for i in 0..5 {
        assert_eq!(gw.call("agent1", "echo.p", json!({"i": i}), None).0, 200);
    }
    // A position is a seq or a cursor a page handed out; anything else is refused by name.
    for bad in ["abc", "-1", "c7b", "c7b2278223a2d317d", "9007199254740992"] {
        for path in ["/v1/audit", "/v1/audit/export"] {
            let (s, b) = gw.req(
                "GET",
                &format!("{path}?after={bad}"),
                Some("admin"),
                None,
                None,
            );
            assert_eq!(
                (s, code(&b)),
                (400, "request.invalid_field"),
                "{path} {bad}: {b}"
            );
        }
    }
    let (s, b) = gw.req(
        "POST",
        "/v1/audit/prune",
        Some("admin"),
        Some(r#"{"before": 5, "chain": 7}"#),
        None,
    );
    assert_eq!((s, code(&b)), (400, "request.invalid_field"), "{b}");
    // Nothing exported: refused.
    let (s, b) = gw.req(
        "POST",
        "/v1/audit/prune",
        Some("admin"),
        Some(r#"{"before": 5}"#),
        None,
    );
    assert_eq!((s, code(&b)), (409, "audit.not_exported"), "{b}");
    // Only admins export and prune.
    let (s, _) = gw.req("GET", "/v1/audit/export", Some("ops"), None, None);
    assert_eq!(s, 403);
    let r = gw
        .client
        .get(format!("{}/v1/audit/export", gw.base))
        .bearer_auth("token-admin")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let jsonl = r.text().unwrap();
    let last: u64 = serde_json::from_str::<Value>(jsonl.lines().last().unwrap()).unwrap()["seq"]
        .as_u64()
        .unwrap();
    assert!(last >= 11, "{jsonl}");
    let (s, b) = gw.req(
        "POST",
        "/v1/audit/prune",
        Some("admin"),
        Some(&json!({"before": last}).to_string()),
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(b["checkpoint_seq"], last - 1);
    // Past the export: refused.
    let (s, b) = gw.req(
        "POST",
        "/v1/audit/prune",
        Some("admin"),
        Some(&json!({"before": last + 5}).to_string()),
        None,
    );
    assert_eq!((s, code(&b)), (409, "audit.not_exported"), "{b}");
    // The rest of the chain verifies from the checkpoint.
    gw.signal("-TERM");
    gw.wait_exit();
    let out = std::process::Command::new(airlock_bin())
        .args(["audit", "verify", "--data-dir"])
        .arg(gw.dir.path().join("data"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("(seq {last}..")), "{text}");
}

#[test]
fn a_client_that_leaves_a_running_call_gets_it_recorded_not_left_executing() {
    // The backend takes 1.5 s; the client gives up after 0.3 s and closes its connection.
    let backend = Backend::start();
    let config = format!(
        "{}[[tools]]\nname = \"lag.*\"\nupstream = \"{}\"\ntimeout = \"5s\"\n",
        config_text(&backend, ""),
        backend.url("/slow/1500")
    );
    let gw = Gateway::start_with(
        &config,
        &POLICY.replace("\"ask.*\"]", "\"ask.*\", \"lag.*\"]"),
    );
    let impatient = reqwest::blocking::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = impatient
        .post(format!("{}/v1/calls", gw.base))
        .bearer_auth("token-agent1")
        .json(&json!({"tool": "lag.op", "args": {"n": 1}}))
        .send();
    assert!(
        gone.is_err(),
        "the client gave up before the backend answered"
    );
    // The call is not left `executing`: its outcome is recorded at once, as unknown.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let failed = loop {
        let (_, audit) = gw.req("GET", "/v1/audit?limit=1000", Some("admin"), None, None);
        let records = audit["records"].as_array().unwrap().clone();
        let decided = records
            .iter()
            .find(|r| r["kind"] == "call.decided" && r["tool"] == "lag.op")
            .cloned();
        if let Some(f) = records
            .iter()
            .find(|r| r["kind"] == "call.failed" && r["tool"] == "lag.op")
        {
            break (decided.unwrap(), f.clone());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no outcome recorded: {records:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let (decided, failed) = failed;
    assert_eq!(failed["error"], "call.interrupted");
    assert_eq!(failed["call_id"], decided["call_id"]);
    // Its requester reads the same from the call.
    let id = decided["call_id"].as_str().unwrap();
    let (s, b) = gw.req(
        "GET",
        &format!("/v1/calls/{id}"),
        Some("agent1"),
        None,
        None,
    );
    assert_eq!(s, 502, "{b}");
    assert_eq!(code(&b), "call.interrupted");
    assert!(gw
        .metrics()
        .contains("airlock_calls_total{decision=\"allow\",outcome=\"failed\"} 1"));
}
